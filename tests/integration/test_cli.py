"""The daemon's command line and start-up errors, as an operator meets them."""

import json
import re
import signal
import subprocess
from pathlib import Path

import pytest
import yaml

from sluice_harness import ROOT, SLUICE, Sluice, check_config, reload_errors, wait_until

INVALID = sorted((ROOT / "config/invalid").glob("*.yaml"))


def test_shipped_configs_are_valid():
    for name in ("sluice.yaml", "lab.yaml"):
        result = check_config(ROOT / "config" / name)
        assert result.returncode == 0, result.stderr
        assert "configuration is valid" in result.stdout


@pytest.mark.parametrize("path", INVALID, ids=[p.stem for p in INVALID])
def test_invalid_config_is_refused_with_file_line_and_column(path):
    expected = path.read_text().splitlines()[0].removeprefix("# expect: ")
    result = check_config(path)
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert f"{path}:{expected}" in lines or f"{path.parent}/{expected}" in lines, result.stderr


def test_check_config_prints_warnings_and_passes(tmp_path):
    """A service with every backend at weight 0 takes no new connection: legal (a service drained whole), so
    --check-config passes, but it says so with FILE:LINE:COL."""
    path = tmp_path / "drained.yaml"
    path.write_text(yaml.safe_dump(null_config(
        load_balancer={"nat_pool": "10.1.0.100"},
        services=[{"name": "web", "vip": "192.0.2.100", "port": 80, "protocol": "tcp", "mode": "nat",
                   "backends": [{"address": "10.1.0.11", "weight": 0}, {"address": "10.1.0.12", "weight": 0}]}]),
        sort_keys=False))
    result = check_config(path)
    assert result.returncode == 0, result.stderr
    assert "configuration is valid" in result.stdout
    assert re.fullmatch(re.escape(str(path)) + r":\d+:\d+: warning: service 'web': every backend has weight 0, so "
                        r"the service takes no new connection \(established ones go on\)\n", result.stderr), result.stderr


def test_missing_config_file():
    result = check_config("/nonexistent/sluice.yaml")
    assert result.returncode == 2
    assert "/nonexistent/sluice.yaml: cannot read the file" in result.stderr


def test_unknown_argument_prints_usage():
    result = subprocess.run([str(SLUICE), "--frobnicate"], capture_output=True, text=True, timeout=10)
    assert result.returncode == 2
    assert "usage:" in result.stderr


def null_config(**extra):
    config = {
        "ports": [{"name": "a", "device": "net_null0"}, {"name": "b", "device": "net_null1"}],
        "lcores": [{"id": 1, "roles": ["rx", "worker"]}],
        "forward": [{"from": "a", "to": "b", "next_hop_mac": "02:00:00:00:00:02"}],
    }
    config.update(extra)
    return config


def run_to_exit(sluice, timeout=60):
    sluice.start(expect_ready=False)
    try:
        return sluice.proc.wait(timeout=timeout)
    finally:
        sluice.kill()


def test_lcore_not_enabled_by_eal_is_a_clear_error(tmp_path):
    config = null_config(lcores=[{"id": 5, "roles": ["rx", "worker"]}])
    sluice = Sluice(tmp_path, config)
    assert run_to_exit(sluice) == 1
    assert "lcore 5 is not enabled by the EAL arguments" in sluice.log()


def test_main_lcore_cannot_poll(tmp_path):
    sluice = Sluice(tmp_path, null_config(lcores=[{"id": 0, "roles": ["rx", "worker"]}]))
    assert run_to_exit(sluice) == 1
    assert "lcore 0 is the main lcore" in sluice.log()


def test_acl_method_this_machine_cannot_run_stops_the_start_naming_why(tmp_path):
    # avx512x32 needs the EAL option --force-max-simd-bitwidth=512, which the harness does not give.
    config = null_config(firewall={"acl_method": "avx512x32",
                                   "rules": [{"name": "web", "protocol": "tcp", "destination_ports": 80, "action": "allow"}]})
    sluice = Sluice(tmp_path, config)
    assert run_to_exit(sluice) == 1
    assert "firewall acl_method: rte_acl classify method avx512x32 does not run here" in sluice.log()


def test_unknown_device_is_named(tmp_path):
    config = null_config()
    config["ports"][1]["device"] = "net_nosuchdriver0"
    sluice = Sluice(tmp_path, config)
    assert run_to_exit(sluice) == 1
    assert "net_nosuchdriver0" in sluice.log()


def test_short_memory_says_how_many_hugepages(tmp_path):
    # Port descriptors that need ~260k mbufs (over 600 MiB) in a 64 MiB EAL heap.
    config = null_config()
    for port in config["ports"]:
        port.update(rx_queues=8, rx_descriptors=16384, tx_descriptors=16384)
    config["eal"] = ["--no-huge", "-m", "64"]
    sluice = Sluice(tmp_path, config)
    assert run_to_exit(sluice) == 1
    log = sluice.log()
    assert "free 2 MiB hugepages" in log and "nr_hugepages" in log, log


def test_runs_and_stops_cleanly_on_sigint_and_sigterm(tmp_path):
    for signal_name in ("SIGINT", "SIGTERM"):
        sluice = Sluice(tmp_path, null_config(dataplane={"idle_sleep_us": 0}))
        with sluice:
            # net_null delivers zero-filled frames without end: sluice counts each as not_ip.
            wait_until(lambda: sluice.stats()["drop/not_ip"] > 1000, what="traffic through sluice")
            sluice.proc.send_signal(getattr(signal, signal_name))
            assert sluice.proc.wait(timeout=30) == 0, sluice.log()
        log = sluice.log()
        assert f"{signal_name}: stopping" in log
        assert "all" in log and "mbufs returned" in log


def test_sluicectl_prints_reload_errors_whole_with_the_file_first(tmp_path):
    """A telemetry string holds 127 bytes: `sluicectl reload` and `sluicectl config` used to show each error cut
    there, without its file; now every error reads as --check-config prints it, FILE:LINE:COL first."""
    sluicectl = str(ROOT / "app/sluicectl/sluicectl")
    sluice = Sluice(tmp_path, null_config(firewall={"default": "allow"}))
    with sluice:
        before = sluice.telemetry.query("/sluice/config")["hash"]
        config = yaml.safe_load(sluice.config_path.read_text())
        config["firewall"]["rules"] = [
            {"name": "partners-of-the-northern-region-reaching-the-web-tier", "protocol": "tcp",
             "source": "203.0.113.77/24", "source_ports": "1024-65535", "destination_ports": [80, 443],
             "action": "allow"},
            {"name": "second", "destination": "2001:db8::1/32", "action": "deny"}]
        broken = tmp_path / "broken.yaml"
        broken.write_text(yaml.safe_dump(config, sort_keys=False))
        expected = check_config(broken).stderr.splitlines()
        assert len(expected) == 2 and all(e.startswith(f"{broken}:") for e in expected), expected
        assert max(len(e) for e in expected) > 127 + len(str(broken)), expected
        expected = [e.replace(str(broken), str(sluice.config_path)) for e in expected]
        broken.replace(sluice.config_path)

        run = lambda *args: subprocess.run([sluicectl, "--prefix", sluice.prefix, *args], capture_output=True,
                                           text=True, timeout=60)
        reload = run("reload")
        assert reload.returncode == 1, reload.stdout + reload.stderr
        assert "last REFUSED" in reload.stdout
        assert [f"  {e}" for e in expected] == reload.stdout.splitlines()[-2:], reload.stdout
        shown = run("config")
        assert [f"  {e}" for e in expected] == shown.stdout.splitlines()[-2:], shown.stdout
        assert json.loads(run("--json", "config").stdout)["last_errors"] == expected
        assert reload_errors(sluice.telemetry.query("/sluice/config")) == expected
        assert sluice.telemetry.query("/sluice/config")["hash"] == before
        assert sluice.stop() == 0, sluice.log()


def test_sluicectl_routes_lists_the_table(tmp_path):
    """`sluicectl routes`: static, host and connected routes, each next hop with its MAC or "unresolved" (net_null
    answers no ARP)."""
    sluicectl = str(ROOT / "app/sluicectl/sluicectl")
    config = null_config(routes=[{"prefix": "198.51.100.0/24", "next_hops": ["192.0.2.11", "192.0.2.12"]},
                                 {"prefix": "100.64.0.0/10", "type": "reject"}])
    config["ports"][1]["addresses"] = ["192.0.2.1/24"]
    sluice = Sluice(tmp_path, config)
    with sluice:
        shown = subprocess.run([sluicectl, "--prefix", sluice.prefix, "routes"], capture_output=True, text=True,
                               timeout=60)
        assert shown.returncode == 0, shown.stderr
        lines = shown.stdout.splitlines()
        assert "198.51.100.0/24 static via 192.0.2.11 on b (unresolved), 192.0.2.12 on b (unresolved)" in lines
        assert "100.64.0.0/10 static reject" in lines
        assert "192.0.2.11/32 host via 192.0.2.11 on b (unresolved)" in lines
        assert "192.0.2.0/24 connected on b" in lines
        assert sluice.stop() == 0, sluice.log()

"""sluice under systemd: the units verify, `meson install` lays files out without overwriting an operator's config,
and the sd_notify protocol (READY, RELOADING, STOPPING, watchdog pings) is spoken on a real notify socket."""

import os
import signal
import socket
import subprocess
import time

import pytest

from sluice_harness import ROOT, SLUICE, Sluice

BUILD = SLUICE.parents[2]


def render_unit(name, tmp_path):
    text = (ROOT / "deploy/systemd" / f"{name}.in").read_text()
    text = text.replace("@bindir@", str(SLUICE.parent)).replace("@sysconfdir@", str(tmp_path))
    path = tmp_path / name
    path.write_text(text)
    return path


def test_units_pass_systemd_analyze_verify(tmp_path):
    units = [render_unit(n, tmp_path) for n in ("sluice.service", "sluice-hugepages.service")]
    # --man=no: the units name their man pages (Documentation=), installed only by a package or `meson install`;
    # tests/package/test_package.sh verifies the installed units with them.
    result = subprocess.run(["systemd-analyze", "verify", "--man=no", *map(str, units)], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0 and not result.stderr.strip(), result.stderr
    text = units[0].read_text()
    for setting in ("Type=notify", "WatchdogSec=", "ExecStartPre=" + str(SLUICE) + " --check-config",
                    "ExecReload=/bin/kill -HUP $MAINPID", "Restart=on-failure", "LimitMEMLOCK=infinity"):
        assert setting in text


def test_meson_install_never_overwrites_the_config(tmp_path):
    def install():
        return subprocess.run(["meson", "install", "-C", str(BUILD), "--destdir", str(tmp_path), "--no-rebuild"],
                              capture_output=True, text=True, timeout=120)

    first = install()
    assert first.returncode == 0, first.stdout + first.stderr
    for path in ("usr/local/bin/sluice", "usr/local/bin/sluicectl", "etc/sluice/sluice.yaml", "etc/sluice/hugepages.conf",
                 "usr/local/lib/systemd/system/sluice.service", "usr/local/lib/systemd/system/sluice-hugepages.service",
                 "usr/local/share/sluice/prometheus/sluice-alerts.yml", "usr/local/share/sluice/grafana/sluice.json",
                 "usr/local/share/man/man8/sluice.8", "usr/local/share/man/man5/sluice.yaml.5"):
        assert (tmp_path / path).exists(), path
    assert os.access(tmp_path / "usr/local/bin/sluicectl", os.X_OK)
    unit = (tmp_path / "usr/local/lib/systemd/system/sluice.service").read_text()
    assert "ExecStart=/usr/local/bin/sluice --config ${SLUICE_CONFIG}" in unit
    assert "SLUICE_CONFIG=/etc/sluice/sluice.yaml" in unit
    config = tmp_path / "etc/sluice/sluice.yaml"
    config.write_text("# the operator's own\n")
    second = install()
    assert second.returncode == 0
    assert config.read_text() == "# the operator's own\n"


def test_speaks_sd_notify_and_pings_the_watchdog(tmp_path):
    notify_path = str(tmp_path / "notify.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(notify_path)
    listener.settimeout(0.2)
    messages = []

    def collect(until, timeout=10):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                messages.append(listener.recv(4096).decode())
            except socket.timeout:
                pass
            if until():
                return True
        return False

    config = {
        "ports": [{"name": "a", "device": "net_null0,no-rx=1"}],
        "lcores": [{"id": 1, "roles": ["rx", "worker"]}],
        "dataplane": {"idle_sleep_us": 100},
    }
    sluice = Sluice(tmp_path, config)
    env = dict(os.environ, NOTIFY_SOCKET=notify_path, WATCHDOG_USEC="400000")
    with sluice:
        sluice.kill()  # the context manager started it without the environment; start again with it
    sluice.start(env=env)
    try:
        assert collect(lambda: any(m.startswith("READY=1") for m in messages)), messages
        pings = lambda: sum("WATCHDOG=1" in m for m in messages)
        assert collect(lambda: pings() >= 4, timeout=5), messages  # every 200 ms while the lcore's heartbeat moves
        sluice.proc.send_signal(signal.SIGHUP)
        assert collect(lambda: any("RELOADING=1" in m for m in messages)), messages
        reloading = next(i for i, m in enumerate(messages) if "RELOADING=1" in m)
        # A reload holds up the pings while its tables build: systemd is told to wait 5 minutes, then WatchdogSec again.
        assert "WATCHDOG_USEC=300000000" in messages[reloading].split("\n"), messages[reloading]
        assert collect(lambda: any("READY=1" in m for m in messages[reloading + 1:])), messages
        ready = next(m for m in messages[reloading + 1:] if "READY=1" in m)
        assert {"WATCHDOG_USEC=400000", "WATCHDOG=1"} <= set(ready.split("\n")), ready  # the period restarts now
        assert sluice.stop() == 0, sluice.log()
        assert collect(lambda: any("STOPPING=1" in m for m in messages), timeout=2), messages
    finally:
        sluice.kill()
        listener.close()

"""Prometheus /metrics, scraped with a real HTTP client, against packets sent through sluice."""

import re
import socket
import time
import urllib.request

from scapy.all import IP, UDP, Ether, IPv6, wrpcap

from sluice_harness import Sluice


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        assert response.status == 200
        return response.read().decode()


def value(text, name, **labels):
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    pattern = re.escape(name) + (r"\{" + re.escape(want) + r"\}" if want else "") + r" (\S+)"
    found = re.search("^" + pattern + "$", text, re.M)
    assert found, f"{name}{{{want}}} not in /metrics"
    return float(found.group(1))


def test_metrics_match_the_packets_sent(tmp_path):
    good = [Ether(src="02:aa:00:00:00:01", dst="02:bb:00:00:00:01") / IP(src="10.0.0.1", dst="10.1.0.1") / UDP(sport=i, dport=53) / ("x" * 10) for i in range(1, 41)]
    good += [Ether(src="02:aa:00:00:00:01", dst="02:bb:00:00:00:01") / IPv6(src="2001:db8::1", dst="2001:db8::2") / UDP(sport=i, dport=53) for i in range(1, 11)]
    expired = [Ether(src="02:aa:00:00:00:01", dst="02:bb:00:00:00:01") / IP(src="10.0.0.1", dst="10.1.0.1", ttl=1) / UDP() for _ in range(7)]
    wrpcap(str(tmp_path / "in.pcap"), good + expired)
    port = free_port()
    config = {
        "metrics": {"listen": f"127.0.0.1:{port}"},
        "ports": [
            {"name": "wan", "device": f"net_pcap0,rx_pcap={tmp_path}/in.pcap,tx_pcap={tmp_path}/unused.pcap"},
            {"name": "lan", "device": f"net_pcap1,tx_pcap={tmp_path}/out.pcap"},
        ],
        "lcores": [{"id": 1, "roles": ["rx", "worker"]}],
        "forward": [{"from": "wan", "to": "lan", "next_hop_mac": "02:00:00:00:00:02"}],
    }
    sluice = Sluice(tmp_path, config)
    started = time.monotonic()
    with sluice:
        sluice.wait_accounted(len(good) + len(expired))
        # A busy iteration's length is counted when the next one starts: let the last busy one end first.
        time.sleep(0.3)
        text = scrape(port)
        lifetime = time.monotonic() - started
        time.sleep(0.5)
        idle_text = scrape(port)  # nothing arrives any more: only empty polls, which are not busy time
        assert sluice.stop() == 0, sluice.log()

    assert value(text, "sluice_port_rx_packets_total", port="wan") == len(good) + len(expired)
    assert value(text, "sluice_port_rx_bytes_total", port="wan") == sum(len(p) for p in good + expired)
    assert value(text, "sluice_port_tx_packets_total", port="lan") == len(good)
    assert value(text, "sluice_port_tx_bytes_total", port="lan") == sum(len(p) for p in good)
    assert value(text, "sluice_drops_total", reason="ttl_expired") == len(expired)
    assert value(text, "sluice_drops_total", reason="no_route") == 0
    assert value(text, "sluice_port_link_up", port="wan") == 1
    assert value(text, "sluice_lcore_polls_total", lcore="1") > 0
    busy = value(text, "sluice_lcore_busy_seconds_total", lcore="1")
    assert 0 < busy < lifetime
    assert value(idle_text, "sluice_lcore_busy_seconds_total", lcore="1") == busy
    assert value(idle_text, "sluice_lcore_polls_total", lcore="1") > value(text, "sluice_lcore_polls_total", lcore="1")
    assert value(text, "sluice_ring_capacity", worker="0") == 4095
    assert value(text, "sluice_mempool_mbufs", socket="0") > 0
    assert value(text, "sluice_mempool_mbufs_in_use", socket="0") == 0  # pcap holds none once all is sent
    for family in ("sluice_port_rx_missed_total", "sluice_port_rx_nombuf_total", "sluice_port_rx_errors_total",
                   "sluice_port_tx_errors_total"):
        assert value(text, family, port="wan") == 0  # every family has its samples (not just HELP/TYPE)
    assert value(text, "sluice_config_reloads_total", result="failure") == 0
    assert re.search(r'^sluice_config_info\{hash="[0-9a-f]{16}"\} 1$', text, re.M)
    assert re.search(r'^sluice_build_info\{version="[0-9.]+"\} 1$', text, re.M)
    assert "# TYPE sluice_drops_total counter" in text


def test_by_default_metrics_listen_on_loopback_only_and_telemetry_is_root_only(tmp_path):
    """Security defaults (docs/security.md): with no `metrics` section the exporter binds 127.0.0.1:9469, nothing
    else; the telemetry socket lives in a directory only root may enter."""
    import os
    import stat
    from pathlib import Path

    from netns import Netns

    ns = Netns(f"slsec{os.getpid()}", [])  # its own loopback: the lab's sluice may hold 9469 in the root namespace
    try:
        ns.exec("ip", "link", "set", "lo", "up")
        config = {
            "ports": [{"name": "a", "device": "net_null0,no-rx=1"}, {"name": "b", "device": "net_null1,no-rx=1"}],
            "lcores": [{"id": 1, "roles": ["rx", "worker"]}],
        }
        sluice = Sluice(tmp_path, config, netns=ns)
        sluice.config_path.write_text(sluice.config_path.read_text().replace("metrics:\n  listen: ''\n", ""))
        assert "metrics" not in sluice.config_path.read_text()
        with sluice:
            listeners = [line.split()[1] for line in ns.exec("cat", "/proc/net/tcp").stdout.splitlines()[1:]
                         if line.split()[3] == "0A"]  # state LISTEN
            assert listeners == ["0100007F:24FD"], listeners  # 127.0.0.1:9469, and only that
            assert ns.exec("curl", "-s", "-m", "5", "http://127.0.0.1:9469/metrics").stdout.startswith("# HELP")
            runtime = Path(sluice.telemetry.path).parent
            mode = runtime.stat()
            assert stat.S_IMODE(mode.st_mode) & 0o077 == 0 and mode.st_uid == 0, oct(mode.st_mode)
            assert sluice.stop() == 0, sluice.log()
    finally:
        ns.delete()

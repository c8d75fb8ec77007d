"""The kernel's own drops at a net_af_xdp port's AF_XDP socket, which the driver does not report: sluice on an
af_xdp port over a veth in the test's own namespace (the PMD's default XDP program, xdp_steering off), its RX lcore
sleeping between polls, a burst far larger than its 64-slot RX ring injected from the peer. The frames the ring
could not take must show as xdp_rx_ring_full in telemetry and in Prometheus, and every frame sent must be either
received by sluice or counted by the kernel. And an RX ring larger than the fill ring the driver stocks is refused
at start with the reason."""

import logging
import os
import re
import socket

import pytest

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import IP, UDP, Ether, Raw

from netns import Netns
from sluice_harness import Sluice, wait_until

SLUICE_MAC = "02:00:00:00:00:aa"
FRAMES = 3000


@pytest.fixture
def ns():
    n = Netns(f"xk{os.getpid()}", ["xd0"])
    n.exec("ip", "link", "set", "lo", "up")  # sluice's metrics listen on 127.0.0.1 in there
    yield n
    n.exec("ip", "link", "set", "dev", "xd0", "xdp", "off", check=False)
    n.delete()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def config(metrics_port, rx_descriptors):
    return {
        # Asleep 20 ms after 64 empty polls: a burst fills the 64-slot RX ring before the lcore wakes.
        "dataplane": {"idle_sleep_us": 20000},
        "metrics": {"listen": f"127.0.0.1:{metrics_port}"},
        "ports": [
            {"name": "lan", "device": "net_af_xdp0,iface=xd0", "xdp_steering": "off",
             "rx_descriptors": rx_descriptors, "tx_descriptors": 64},
            {"name": "out", "device": "net_null0,no-rx=1"},
        ],
        "lcores": [{"id": 1, "roles": ["rx", "worker"]}],
        "forward": [{"from": "lan", "to": "out", "next_hop_mac": "02:00:00:00:00:02"},
                    {"from": "out", "to": "lan", "next_hop_mac": "02:00:00:00:00:01"}],
    }


def scrape(ns, port):
    code = f"import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:{port}/metrics').read().decode())"
    return ns.exec("/usr/bin/python3", "-c", code).stdout


def sample(text, name):
    m = re.search("^" + re.escape(name) + r'\{port="lan"\} (\S+)$', text, re.M)
    return float(m.group(1)) if m else None


def frames():
    """Serialized before the injection starts: built one by one while sending, on a loaded machine they came slower
    than the lcore's 20 ms naps drain the ring, and nothing overflowed."""
    return [bytes(Ether(src="02:00:00:00:01:01", dst=SLUICE_MAC) / IP(src="10.0.0.1", dst="10.0.1.1") /
                  UDP(sport=1000 + i % 50000, dport=53) / Raw(b"x" * 18)) for i in range(FRAMES)]


def test_frames_a_full_af_xdp_rx_ring_drops_are_counted_and_every_frame_accounted(tmp_path, ns):
    metrics_port = free_port()
    with Sluice(tmp_path, config(metrics_port, 64), lcores="0@0,1@1", netns=ns) as sluice:
        before = sluice.stats()
        assert before["port/lan/xdp_rx_ring_full"] == 0
        for key in ("xdp_rx_dropped", "xdp_rx_invalid_descs", "xdp_tx_invalid_descs", "xdp_rx_fill_ring_empty_descs",
                    "xdp_tx_ring_empty_descs"):
            assert f"port/lan/{key}" in before
        assert "port/out/xdp_rx_ring_full" not in before  # net_null has no AF_XDP socket
        ns.inject("xd0", frames(), paced=False)

        def settled():
            s = sluice.stats()
            seen = s["port/lan/rx_packets"] + s["port/lan/xdp_rx_ring_full"] + s["port/lan/xdp_rx_dropped"]
            return s if seen >= FRAMES else None
        # The kernel may drop at the veth itself (its queue towards XDP is 256 frames): then nothing settles, and
        # the wait below fails with what each counter read.
        try:
            s = wait_until(settled, timeout=10, what="every frame received or counted by the kernel")
        except TimeoutError:
            s = sluice.stats()
            raise AssertionError(f"rx {s['port/lan/rx_packets']}, ring full {s['port/lan/xdp_rx_ring_full']}, "
                                 f"dropped {s['port/lan/xdp_rx_dropped']} of {FRAMES} sent") from None
        full = s["port/lan/xdp_rx_ring_full"]
        assert full > 0, "the burst should have overflowed the 64-slot ring while the lcore slept"
        assert s["port/lan/rx_packets"] + full + s["port/lan/xdp_rx_dropped"] == FRAMES
        assert s["port/lan/hw_rx_missed"] == s["port/lan/xdp_rx_dropped"]  # the driver's imissed is rx_dropped
        assert s["port/lan/xdp_rx_invalid_descs"] == 0 and s["port/lan/xdp_tx_invalid_descs"] == 0
        text = wait_until(lambda: (t := scrape(ns, metrics_port)) and
                          sample(t, "sluice_port_xdp_rx_ring_full_total") == full and t, timeout=5,
                          what="Prometheus to show the drops")
        assert sample(text, "sluice_port_xdp_rx_dropped_total") == s["port/lan/xdp_rx_dropped"]
        assert sluice.stop() == 0


def test_an_af_xdp_rx_ring_larger_than_the_fill_ring_is_refused_at_start(tmp_path, ns):
    sluice = Sluice(tmp_path, config(free_port(), 4096), lcores="0@0,1@1", netns=ns)
    try:
        sluice.start(expect_ready=False)
        sluice.proc.wait(timeout=30)
    finally:
        sluice.kill()
    assert sluice.proc.returncode != 0
    log = sluice.log()
    assert "port 'lan': rx_descriptors 4096 on net_af_xdp" in log
    assert "stocks each AF_XDP fill ring with 2048 buffers" in log
    assert "ready:" not in log

"""Health checks against real listeners: backends are TCP servers on addresses of a namespace of the test's own, where
sluice runs too (its checks go through that namespace's kernel, the exception path of docs/architecture.md). A
backend whose listener stops is marked down within fall x interval and gets no new connection; when it listens
again it comes back and takes new connections."""

import logging
import os
import socket
import subprocess
import time

import pytest

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import IP, TCP, Ether, rdpcap

from netns import Netns
from sluice_harness import Sluice, wait_until

CLIENT_MAC, SERVER_MAC = "02:00:00:00:01:01", "02:00:00:00:02:01"
VIP = "192.0.2.100"
BACKENDS = ["10.1.0.11", "10.1.0.12", "10.1.0.13"]
INTERVAL_MS, FALL, RISE = 200, 2, 2

LISTENER = r'''
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 8080)); s.listen(64)
print("listening", flush=True)
while True:
    c, _ = s.accept(); c.close()
'''


@pytest.fixture
def ns():
    namespace = Netns(f"slhc{os.getpid()}", ["cl0", "sv0"])
    namespace.exec("ip", "link", "set", "lo", "up")
    for address in BACKENDS:  # the backends' addresses live on the namespace's loopback
        namespace.exec("ip", "addr", "add", f"{address}/32", "dev", "lo")
    yield namespace
    namespace.delete()


class Listener:
    """A real TCP server on ADDRESS:8080 inside the namespace."""

    def __init__(self, ns, address):
        self.proc = subprocess.Popen(ns.prefix() + ["/usr/bin/python3", "-c", LISTENER, address],
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "listening"

    def stop(self):
        self.proc.kill()
        self.proc.wait()


def backends_by_name(sluice):
    b = sluice.telemetry.query("/sluice/backends")
    return {name: (health, active) for name, health, active in zip(b["backend"], b["health"], b["new_connections"])}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def backend_up_metric(ns, port, backend):
    """sluice_backend_up of one backend, scraped with a real HTTP client inside the namespace."""
    text = ns.exec("/usr/bin/python3", "-c", "import urllib.request, sys; "
                   f"sys.stdout.write(urllib.request.urlopen('http://127.0.0.1:{port}/metrics', timeout=5).read().decode())").stdout
    lines = [l for l in text.splitlines() if l.startswith("sluice_backend_up{") and f'backend="{backend}"' in l]
    assert len(lines) == 1, lines
    return float(lines[0].rsplit(" ", 1)[1])


def syns(first_port, count):
    return [Ether(src=CLIENT_MAC, dst="02:00:00:00:00:aa") /
            IP(src=f"203.0.113.{1 + (i % 200)}", dst=VIP) / TCP(sport=first_port + i, dport=80, flags="S", seq=i)
            for i in range(count)]


def test_down_backend_leaves_the_table_and_comes_back(tmp_path, ns):
    metrics_port = free_port()
    config = {
        "dataplane": {"idle_sleep_us": 50},
        "metrics": {"listen": f"127.0.0.1:{metrics_port}"},
        "ports": [
            {"name": "client", "device": f"net_pcap0,rx_iface=cl0,tx_pcap={tmp_path}/client_out.pcap"},
            {"name": "server", "device": f"net_pcap1,rx_iface=sv0,tx_pcap={tmp_path}/server_out.pcap"},
        ],
        "lcores": [{"id": 1, "roles": ["rx", "worker"]}],
        "forward": [
            {"from": "client", "to": "server", "next_hop_mac": SERVER_MAC},
            {"from": "server", "to": "client", "next_hop_mac": CLIENT_MAC},
        ],
        "load_balancer": {"nat_pool": ["10.1.0.100"]},
        "services": [{
            "name": "web", "vip": VIP, "port": 80, "protocol": "tcp", "mode": "nat",
            "health_check": {"type": "tcp", "interval_ms": INTERVAL_MS, "timeout_ms": 100, "rise": RISE, "fall": FALL},
            "backends": [{"address": a, "port": 8080} for a in BACKENDS],
        }],
    }
    listeners = {a: Listener(ns, a) for a in BACKENDS}
    sluice = Sluice(tmp_path, config, netns=ns)
    sent = 0
    try:
        with sluice:
            # All up (they start up, and the checks keep them so).
            time.sleep(3 * INTERVAL_MS / 1000)
            assert all(h == "up" for h, _ in backends_by_name(sluice).values())

            listeners[BACKENDS[1]].stop()
            stopped = time.monotonic()
            wait_until(lambda: backends_by_name(sluice)[f"{BACKENDS[1]}:8080"][0] == "down", timeout=10,
                       what="the stopped backend marked down")
            took = time.monotonic() - stopped
            # fall x interval, plus one interval of phase and the timeout, plus the control loop's refresh.
            assert took <= (FALL + 1) * INTERVAL_MS / 1000 + 0.1 + 0.5 + 1.0, took
            assert "down" in sluice.log() and BACKENDS[1] in sluice.log()
            assert backend_up_metric(ns, metrics_port, f"{BACKENDS[1]}:8080") == 0
            assert backend_up_metric(ns, metrics_port, f"{BACKENDS[0]}:8080") == 1

            before = backends_by_name(sluice)
            ns.inject("cl0", syns(20000, 300), tmp_path)
            sent += 300
            sluice.wait_accounted(sent)
            total = lambda b: sum(b[f"{a}:8080"][1] for a in BACKENDS)

            def counted_since(earlier):  # the backend counters are summed by the control thread every 250 ms
                now = backends_by_name(sluice)
                return now if total(now) - total(earlier) == 300 else None

            during = wait_until(lambda: counted_since(before), timeout=10, what="the backend counters to show the 300 SYNs")
            assert during[f"{BACKENDS[1]}:8080"][1] == before[f"{BACKENDS[1]}:8080"][1], "a down backend got connections"

            listeners[BACKENDS[1]] = Listener(ns, BACKENDS[1])
            wait_until(lambda: backends_by_name(sluice)[f"{BACKENDS[1]}:8080"][0] == "up", timeout=10,
                       what="the backend back up")
            ns.inject("cl0", syns(30000, 300), tmp_path)
            sent += 300
            sluice.wait_accounted(sent)
            after = wait_until(lambda: counted_since(during), timeout=10, what="the backend counters to show the next 300 SYNs")
            assert after[f"{BACKENDS[1]}:8080"][1] - during[f"{BACKENDS[1]}:8080"][1] >= 50  # about a third of 300
            assert sluice.stop() == 0, sluice.log()
    finally:
        for listener in listeners.values():
            listener.stop()

    # What went out to the backends agrees with the counters: no SYN sent while it was down went to that backend.
    out = [p for p in rdpcap(str(tmp_path / "server_out.pcap")) if TCP in p]
    assert len(out) == 600
    assert all(p[IP].dst in BACKENDS and p[TCP].dport == 8080 and p[IP].src == "10.1.0.100" for p in out)
    assert [p for p in out[:300] if p[IP].dst == BACKENDS[1]] == []
    assert len([p for p in out[300:] if p[IP].dst == BACKENDS[1]]) >= 50

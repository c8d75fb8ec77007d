"""Several RX queues per port and several RX lcores, on devices with real queues (net_af_packet with two queue
pairs on a veth, net_tap with two queues: the kernel spreads frames over the queues by its flow hash), two RX
lcores and two workers on the machine's 2 CPUs. Each RX lcore polls queue 0 of one port and queue 1 of the other,
so both directions of a flow, which the kernel's symmetric hash gives the same queue number, come in on different
RX lcores: the software steering alone brings them to one worker.

Functional, not speed: every flow's packets reach the worker that owns the flow in both directions (a reply that
missed it would be a new connection from the server side, which the firewall denies), none lost, none reordered
within a flow, and NAT replies (to the pool address) reach the worker that opened the connection."""

import logging
import os
import re
import socket
import time

import pytest

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import IP, TCP, Ether, Raw

from netns import Netns
from sluice_harness import Sluice, wait_until

CLIENT_PEER = "02:00:00:00:01:01"
SERVER_PEER = "02:00:00:00:02:01"
SLUICE_MAC = "02:00:00:00:00:aa"
SERVER = "198.51.100.10"
VIP, POOL = "192.0.2.100", "10.1.0.100"
BACKENDS = ["10.1.0.11", "10.1.0.12"]
FLOWS = 48
SEGMENTS = 4  # data segments each way and flow
PAYLOAD = 64


# Two devices with real queues. net_af_packet owns the veths cl0 and sv0 with two packet sockets each; the kernel
# fans the frames arriving there out over them by its flow hash. net_tap makes the taps cl0p and sv0p (named as the
# veth peers are, where the test injects and listens) with two queues each: the kernel queues what is sent into a
# tap by its symmetric flow hash. net_tap offers RSS, so sluice sets its key there (net_af_packet offers none).
DEVICES = {
    "af_packet": lambda index, port: f"net_af_packet{index},iface={port},qpairs=2",
    "tap": lambda index, port: f"net_tap{index},iface={port}p",
}


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


@pytest.fixture
def ns(device):
    n = Netns(f"sq{os.getpid()}", ["cl0", "sv0"] if device == "af_packet" else [])
    n.exec("ip", "link", "set", "lo", "up")  # sluice's metrics listen on 127.0.0.1 in there
    yield n
    n.delete()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# EAL --lcores (lcore 0 is the control thread) and the config's lcores, over the machine's 2 CPUs: RX lcores apart
# from the workers (each RX lcore feeds both workers' rings), or two lcores that each receive and work (each runs
# its own flows' packets inline and hands the rest to the other's ring).
LAYOUTS = {
    "split": ("0@0,1@0,2@1,3@1,4@0", [
        {"id": 1, "roles": ["rx"], "rx_queues": ["client:0", "server:1"]},
        {"id": 2, "roles": ["rx"], "rx_queues": ["client:1", "server:0"]},
        {"id": 3, "roles": ["worker"]},
        {"id": 4, "roles": ["worker"]},
    ]),
    "combined": ("0@0,1@0,2@1", [
        {"id": 1, "roles": ["rx", "worker"], "rx_queues": ["client:0", "server:1"]},
        {"id": 2, "roles": ["rx", "worker"], "rx_queues": ["client:1", "server:0"]},
    ]),
}


def config(metrics_port, device, layout):
    def port(name, index, iface):
        return {"name": name, "device": DEVICES[device](index, iface), "rx_queues": 2,
                "rx_descriptors": 512, "tx_descriptors": 512}

    return {
        "dataplane": {"idle_sleep_us": 50},  # five lcores share 2 CPUs
        "metrics": {"listen": f"127.0.0.1:{metrics_port}"},
        "ports": [port("client", 0, "cl0"), port("server", 1, "sv0")],
        "lcores": LAYOUTS[layout][1],
        "forward": [
            {"from": "client", "to": "server", "next_hop_mac": SERVER_PEER},
            {"from": "server", "to": "client", "next_hop_mac": CLIENT_PEER},
        ],
        "firewall": {"default": "deny", "rules": [{"name": "inside-out", "in_ports": ["client"], "action": "allow"}]},
        "load_balancer": {"nat_pool": [POOL]},
        "services": [{"name": "web", "vip": VIP, "port": 80, "protocol": "tcp", "mode": "nat",
                      "backends": [{"address": b, "port": 8080} for b in BACKENDS]}],
    }


def scrape(ns, port):
    """sluice's /metrics, fetched inside the namespace sluice listens in."""
    code = f"import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:{port}/metrics').read().decode())"
    return ns.exec("/usr/bin/python3", "-c", code).stdout


def samples(text, name):
    """{labels text: value} of one metric family."""
    return {m.group(1): float(m.group(2)) for m in re.finditer("^" + re.escape(name) + r"\{(.*)\} (\S+)$", text, re.M)}


def tcp(src_mac, src, sport, dst, dport, flags, seq, ack=0, payload=b""):
    return Ether(src=src_mac, dst=SLUICE_MAC) / IP(src=src, dst=dst) / TCP(
        sport=sport, dport=dport, flags=flags, seq=seq, ack=ack, window=65535) / Raw(payload)


def segments(src_mac, src, sport, dst, dport, isn, ack, flow):
    """SEGMENTS data segments of one direction of a flow, each payload naming the flow and its index."""
    return [tcp(src_mac, src, sport, dst, dport, "A", isn + 1 + i * PAYLOAD, ack,
                (b"flow %03d seg %d " % (flow, i)).ljust(PAYLOAD, b"."))
            for i in range(SEGMENTS)]


class Run:
    """sluice in the namespace, listeners on both peers, and what came out of each port."""

    def __init__(self, tmp_path, ns, device, layout="split"):
        self.ns = ns
        self.metrics_port = free_port()
        self.sluice = Sluice(tmp_path, config(self.metrics_port, device, layout), lcores=LAYOUTS[layout][0],
                             netns=ns)
        self.listeners = {}

    def __enter__(self):
        self.sluice.start()  # first: net_tap makes the interfaces the listeners bind to
        self.listeners = {"client": self.ns.listen("cl0"), "server": self.ns.listen("sv0")}
        return self

    def __exit__(self, *exc):
        self.sluice.kill()

    def send(self, ifname, frames):
        self.ns.inject(ifname, frames)

    def wait_out(self, port, count, timeout=20):
        """Waits until count more TCP frames left sluice's port; returns them parsed."""
        got = []

        def arrived():
            for raw in Netns.received(self.listeners[port]):
                frame = Ether(raw)
                if TCP in frame:
                    got.append(frame)
            return len(got) >= count

        try:
            wait_until(arrived, timeout=timeout, what=f"{count} frames out of {port}")
        except TimeoutError:
            s = self.sluice.stats()
            drops = {k: v for k, v in s.items() if k.startswith("drop/") and v}
            raise AssertionError(f"{len(got)} of {count} frames out of {port}; drops {drops}; "
                                 f"rx {s['rx_packets']}, tx {s['tx_packets']}") from None
        time.sleep(0.2)
        got += [Ether(raw) for raw in Netns.received(self.listeners[port])]  # anything more is an error
        assert len(got) == count, f"{len(got)} frames out of {port}, {count} expected"
        return got

    def metrics(self):
        return scrape(self.ns, self.metrics_port)


def payload_order(frames):
    return [bytes(f[TCP].payload)[:14] for f in frames if len(f[TCP].payload)]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_both_directions_of_every_flow_reach_one_worker_through_two_rx_lcores(tmp_path, ns, device, layout):
    clients = [(f"203.0.113.{1 + i}", 40000 + i) for i in range(FLOWS)]
    c_isn, s_isn = 1000, 50000
    with Run(tmp_path, ns, device, layout) as run:
        run.send("cl0", [tcp(CLIENT_PEER, c, p, SERVER, 443, "S", c_isn) for c, p in clients])
        run.wait_out("server", FLOWS)
        run.send("sv0", [tcp(SERVER_PEER, SERVER, 443, c, p, "SA", s_isn, c_isn + 1) for c, p in clients])
        run.wait_out("client", FLOWS)
        # Then each side's segments, the flows interleaved as a busy link carries them.
        client_data = [segments(CLIENT_PEER, c, p, SERVER, 443, c_isn, s_isn + 1, i)
                       for i, (c, p) in enumerate(clients)]
        server_data = [segments(SERVER_PEER, SERVER, 443, c, p, s_isn, c_isn + 1, i)
                       for i, (c, p) in enumerate(clients)]
        run.send("cl0", [tcp(CLIENT_PEER, c, p, SERVER, 443, "A", c_isn + 1, s_isn + 1) for c, p in clients] +
                 [flow[i] for i in range(SEGMENTS) for flow in client_data])
        to_server = run.wait_out("server", FLOWS * (1 + SEGMENTS))
        run.send("sv0", [flow[i] for i in range(SEGMENTS) for flow in server_data])
        to_client = run.wait_out("client", FLOWS * SEGMENTS)

        stats = run.sluice.stats()
        metrics = run.metrics()
        assert run.sluice.stop() == 0, run.sluice.log()

    assert stats["drops"] == 0, {k: v for k, v in stats.items() if k.startswith("drop/") and v}
    assert stats["conn_entries"] == FLOWS  # one connection per flow: no reply opened one on another worker
    for i, (c, p) in enumerate(clients):
        want = [(b"flow %03d seg %d " % (i, s))[:14] for s in range(SEGMENTS)]
        up = [f for f in to_server if f[IP].src == c and f[TCP].sport == p]
        down = [f for f in to_client if f[IP].dst == c and f[TCP].dport == p]
        assert payload_order(up) == want, f"flow {i} toward the server: lost or reordered"
        assert payload_order(down) == want, f"flow {i} toward the client: lost or reordered"

    # The kernel spread the flows over both queues of each port, so over both RX lcores, and both workers own
    # connections.
    queues = samples(metrics, "sluice_port_rx_queue_packets_total")
    for port in ("client", "server"):
        for q in (0, 1):
            assert queues.get(f'port="{port}",queue="{q}"', 0) > 0, queues
    inserts = samples(metrics, "sluice_conntrack_inserts_total")
    assert sorted(inserts) == ['worker="0"', 'worker="1"'], inserts
    assert sum(inserts.values()) == FLOWS and min(inserts.values()) > 0, inserts


def test_nat_replies_reach_the_worker_that_opened_the_connection(tmp_path, ns, device):
    clients = [(f"203.0.113.{1 + i}", 41000 + i) for i in range(FLOWS)]
    c_isn, s_isn = 7000, 90000
    with Run(tmp_path, ns, device) as run:
        run.send("cl0", [tcp(CLIENT_PEER, c, p, VIP, 80, "S", c_isn) for c, p in clients])
        opened = run.wait_out("server", FLOWS)
        assert all(f[IP].src == POOL and f[IP].dst in BACKENDS and f[TCP].dport == 8080 for f in opened)
        assert len({(f[IP].dst, f[TCP].sport) for f in opened}) == FLOWS
        # The backends answer the pool address; the kernel hashes the replies, not the clients' tuples.
        run.send("sv0", [tcp(SERVER_PEER, f[IP].dst, 8080, POOL, f[TCP].sport, "SA", s_isn, c_isn + 1)
                         for f in opened])
        answered = run.wait_out("client", FLOWS)
        assert {(f[IP].dst, f[TCP].dport) for f in answered} == set(clients)
        assert all(f[IP].src == VIP and f[TCP].sport == 80 and f[TCP].flags == "SA" for f in answered)

        client_data = [segments(CLIENT_PEER, c, p, VIP, 80, c_isn, s_isn + 1, i) for i, (c, p) in enumerate(clients)]
        run.send("cl0", [tcp(CLIENT_PEER, c, p, VIP, 80, "A", c_isn + 1, s_isn + 1) for c, p in clients] +
                 [flow[i] for i in range(SEGMENTS) for flow in client_data])
        to_backends = run.wait_out("server", FLOWS * (1 + SEGMENTS))
        backend_of = {}  # flow -> (backend, pool port), read from the segments that reached the backends
        for f in to_backends:
            if len(f[TCP].payload):
                flow = int(bytes(f[TCP].payload)[5:8])
                backend_of.setdefault(flow, (f[IP].dst, f[TCP].sport))
        assert len(backend_of) == FLOWS
        server_data = [segments(SERVER_PEER, backend_of[i][0], 8080, POOL, backend_of[i][1], s_isn, c_isn + 1, i)
                       for i in range(FLOWS)]
        run.send("sv0", [flow[i] for i in range(SEGMENTS) for flow in server_data])
        to_clients = run.wait_out("client", FLOWS * SEGMENTS)

        stats = run.sluice.stats()
        metrics = run.metrics()
        assert run.sluice.stop() == 0, run.sluice.log()

    assert stats["drops"] == 0, {k: v for k, v in stats.items() if k.startswith("drop/") and v}
    for i, (c, p) in enumerate(clients):
        want = [(b"flow %03d seg %d " % (i, s))[:14] for s in range(SEGMENTS)]
        up = [f for f in to_backends if (f[IP].dst, f[TCP].sport) == backend_of[i]]
        down = [f for f in to_clients if f[IP].dst == c and f[TCP].dport == p]
        assert all(f[IP].src == VIP and f[TCP].sport == 80 for f in down)
        assert payload_order(up) == want, f"flow {i} toward its backend: lost or reordered"
        assert payload_order(down) == want, f"flow {i} back to its client: lost or reordered"
    queues = samples(metrics, "sluice_port_rx_queue_packets_total")
    for port in ("client", "server"):
        for q in (0, 1):
            assert queues.get(f'port="{port}",queue="{q}"', 0) > 0, queues

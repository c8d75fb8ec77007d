"""State sync between two real sluice processes (docs/operations/ha.md, "State sync"): A and B in one namespace of the
test's own, each on net_pcap ports over veth pairs of its own, syncing over loopback UDP on distinct ports. A NAT
connection opened through A is learned by B, whose worker then rewrites the backend's reply back to the client and
lists the connection in its flows; a forged datagram from a peer's address is counted and installs nothing."""

import ctypes
import logging
import os
import socket
import struct
import subprocess

import pytest

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import IP, TCP, Ether, rdpcap

from netns import Netns, _setns
from sluice_harness import ROOT, Sluice, wait_until

SLUICECTL = str(ROOT / "app/sluicectl/sluicectl")
CLIENT_PEER, SERVER_PEER, SLUICE_MAC = "02:00:00:00:01:01", "02:00:00:00:02:01", "02:00:00:00:00:aa"
VIP, BACKEND, POOL, CLIENT = "192.0.2.100", "10.1.0.11", "10.1.0.100", "203.0.113.7"
PORT_A, PORT_B, PORT_STRANGER = 17901, 17902, 17903


@pytest.fixture
def ns():
    namespace = Netns(f"slsy{os.getpid()}", ["cl0", "sv0", "cl1", "sv1"])
    namespace.exec("ip", "link", "set", "lo", "up")
    yield namespace
    namespace.delete()


def udp_socket_in(ns):
    """A UDP socket in the test's namespace, bound to the third peer's address (B lists it, nothing runs there)."""
    with open("/proc/thread-self/ns/net") as home, open(f"/run/netns/{ns.name}") as there:
        _setns(there.fileno())
        try:
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sock.bind(("127.0.0.1", PORT_STRANGER))
        finally:
            _setns(home.fileno())
    return sock


def config(tmp_path, n, key_file, listen, peers):
    return {
        "dataplane": {"idle_sleep_us": 50},
        "ports": [{"name": "client", "device": f"net_pcap{2 * n},rx_iface=cl{n},tx_pcap={tmp_path}/c{n}.pcap"},
                  {"name": "server", "device": f"net_pcap{2 * n + 1},rx_iface=sv{n},tx_pcap={tmp_path}/s{n}.pcap"}],
        "lcores": [{"id": 1, "roles": ["rx", "worker"]}],
        "forward": [{"from": "client", "to": "server", "next_hop_mac": SERVER_PEER},
                    {"from": "server", "to": "client", "next_hop_mac": CLIENT_PEER}],
        "firewall": {"default": "deny", "rules": [{"name": "clients", "in_ports": "client", "action": "allow"}]},
        "load_balancer": {"nat_pool": POOL},
        "services": [{"name": "web", "vip": VIP, "port": 80, "protocol": "tcp", "mode": "nat",
                      "backends": [{"address": BACKEND, "port": 8080, "mac": SERVER_PEER}]}],
        "sync": {"listen": f"127.0.0.1:{listen}", "peers": [f"127.0.0.1:{p}" for p in peers], "key_file": str(key_file)},
    }


def frames(path):
    return list(rdpcap(str(path))) if path.exists() and path.stat().st_size > 24 else []


def test_a_nat_connection_opened_on_one_instance_is_served_by_the_other(tmp_path, ns):
    key_file = tmp_path / "sync.key"
    key_file.write_text("integration-test-key-of-at-least-32-bytes\n")
    key_file.chmod(0o600)
    a = Sluice(tmp_path, config(tmp_path, 0, key_file, PORT_A, [PORT_B]), netns=ns)
    b = Sluice(tmp_path, config(tmp_path, 1, key_file, PORT_B, [PORT_A, PORT_STRANGER]), netns=ns)
    stranger = udp_socket_in(ns)
    with a, b:
        wait_until(lambda: b.telemetry.query("/sluice/sync")["up"][0] == 1, timeout=10, what="B to hear A")
        syn = Ether(src=CLIENT_PEER, dst=SLUICE_MAC) / IP(src=CLIENT, dst=VIP) / TCP(sport=41000, dport=80, flags="S",
                                                                                   seq=1000)
        ns.inject("cl0", [syn])
        out = wait_until(lambda: frames(tmp_path / "s0.pcap"), timeout=10, what="A's SYN to the backend")
        nat_port = out[0][TCP].sport
        assert out[0][IP].src == POOL
        wait_until(lambda: b.stats().get("sync_installed", 0) >= 1, timeout=10, what="B to install A's connection")

        # The backend's answer reaches B (the router moved the flow): rewritten back to the client from the VIP.
        reply = Ether(src=SERVER_PEER, dst=SLUICE_MAC) / IP(src=BACKEND, dst=POOL) / TCP(
            sport=8080, dport=nat_port, flags="SA", seq=7000, ack=1001)
        ns.inject("sv1", [reply])
        back = wait_until(lambda: frames(tmp_path / "c1.pcap"), timeout=10, what="B's reply to the client")
        assert (back[0][IP].src, back[0][TCP].sport, back[0][IP].dst, back[0][TCP].dport) == (VIP, 80, CLIENT, 41000)
        stats = b.stats()
        assert stats.get("drop/nat_no_connection", 0) == 0 and stats.get("drop/lb_nat_no_state", 0) == 0

        listed = subprocess.run([SLUICECTL, "--prefix", b.prefix, "flows"], capture_output=True, text=True,
                                timeout=60).stdout
        assert CLIENT in listed and str(nat_port) in listed, listed

        # A datagram from a peer's address without the key: counted, nothing installed.
        forged = struct.pack("!IBBHIQQ", 0x534C5359, 1, 1, 0, 1, 1, 99) + bytes(32)
        stranger.sendto(forged, ("127.0.0.1", PORT_B))
        wait_until(lambda: b.telemetry.query("/sluice/sync")["forged"] >= 1, timeout=10, what="the forged count")
        assert b.stats().get("sync_installed", 0) == 1
        shown = subprocess.run([SLUICECTL, "--prefix", b.prefix, "sync"], capture_output=True, text=True,
                               timeout=60).stdout
        assert "forged 1" in shown and "127.0.0.1:17901" in shown, shown
        assert a.stop() == 0, a.log()
        assert b.stop() == 0, b.log()
    stranger.close()

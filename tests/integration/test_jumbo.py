"""Jumbo frames end to end on live kernel sockets: a client and a server in namespaces of their own, sluice between
them on veth pairs of MTU 9000, TCP transfers of a few MB through a plain route and through a nat VIP, carried in
9000-byte IP packets both ways; and with sluice's egress port at 1500, path MTU discovery through its "fragmentation
needed". DPDK 22.11's net_af_packet (largest frame 1518) and net_af_xdp (3560) cannot take MTU
9000 (docs/operations/mtu.md): net_pcap on the interfaces (libpcap) stands in for them."""

import os
import re
import subprocess
import time

import pytest

from netns import Netns, run
from sluice_harness import Sluice, wait_until

MTU = 9000
BYTES = 4 << 20

# The server: for each connection, reads until the client shuts its side, then sends as many bytes back.
SERVER = """
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 5001))
s.listen()
print("listening", flush=True)
while True:
    c, _ = s.accept()
    got = 0
    while True:
        data = c.recv(1 << 20)
        if not data:
            break
        got += len(data)
    c.sendall(b"s" * got)
    c.close()
"""

# The client: sends BYTES, shuts its side, reads the echo's length; prints the bytes back and its MSS.
CLIENT = """
import socket, sys
c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=30)
mss = c.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG)
c.sendall(b"c" * int(sys.argv[3]))
c.shutdown(socket.SHUT_WR)
back = 0
while True:
    data = c.recv(1 << 20)
    if not data:
        break
    back += len(data)
print(back, mss)
"""


class Hosts:
    """sluice's namespace (a Netns with lan0, wan0) and two more, the client's and the server's, each holding the
    peer end of one pair, all at MTU 9000 with the offloads off (no GSO/GRO: every frame on the wire as sent)."""

    def __init__(self, base):
        self.gw = Netns(base, ["lan0", "wan0"])
        self.client, self.server = base + "c", base + "s"
        for name, peer, address, gateway in ((self.client, "lan0p", "10.88.1.2/24", "10.88.1.1"),
                                              (self.server, "wan0p", "10.88.2.2/24", "10.88.2.1")):
            run("ip", "netns", "del", name, check=False)
            run("ip", "netns", "add", name)
            self.gw.exec("ip", "link", "set", peer, "netns", name)
            for command in (["ip", "link", "set", "lo", "up"], ["ip", "link", "set", peer, "mtu", str(MTU), "up"],
                            ["ip", "addr", "add", address, "dev", peer],
                            ["ip", "route", "add", "default", "via", gateway],
                            ["ethtool", "-K", peer, "rx", "off", "tx", "off", "sg", "off", "tso", "off", "gso", "off",
                             "gro", "off"]):
                self.exec(name, *command)
        for ifname in ("lan0", "wan0"):
            self.gw.exec("ip", "link", "set", ifname, "mtu", str(MTU))
            self.gw.exec("ethtool", "-K", ifname, "rx", "off", "tx", "off", "sg", "off", "tso", "off", "gso", "off",
                         "gro", "off")

    @staticmethod
    def exec(name, *args, check=True):
        return run("ip", "netns", "exec", name, *args, check=check)

    def delete(self):
        for name in (self.client, self.server):
            run("ip", "netns", "del", name, check=False)
        self.gw.delete()


@pytest.fixture
def hosts():
    h = Hosts(f"pmtu{os.getpid()}")
    yield h
    h.delete()


def config(tmp_path):
    return {
        "dataplane": {"idle_sleep_us": 20},
        "ports": [
            {"name": "lan", "device": "net_pcap0,iface=lan0", "mtu": MTU, "addresses": ["10.88.1.1/24"]},
            {"name": "wan", "device": "net_pcap1,iface=wan0", "mtu": MTU, "addresses": ["10.88.2.1/24"]},
        ],
        "lcores": [{"id": 1, "roles": ["rx", "worker"]}],
        "load_balancer": {"nat_pool": ["10.88.2.100"]},
        "services": [{"name": "jumbo", "vip": "10.88.1.80", "port": 80, "protocol": "tcp", "mode": "nat",
                      "backends": [{"address": "10.88.2.2", "port": 5001}]}],
    }


def transfer(hosts, address, port, larger_than=MTU):
    """Runs the client against address:port; returns (bytes back, the client's MSS, the frames longer than
    larger_than bytes a capture on the server's interface saw during the transfer)."""
    capture = subprocess.Popen(["ip", "netns", "exec", hosts.server, "tcpdump", "-i", "wan0p", "-nn", "-l", "-q",
                                "greater", str(larger_than + 1)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                               text=True)
    time.sleep(1)  # tcpdump attached
    try:
        done = Hosts.exec(hosts.client, "/usr/bin/python3", "-c", CLIENT, address, str(port), str(BYTES))
    finally:
        time.sleep(0.5)
        capture.terminate()
        lines = capture.communicate(timeout=10)[0].splitlines()
    back, mss = (int(x) for x in done.stdout.split())
    return back, mss, lines


def test_a_9000_byte_tcp_transfer_through_a_route_and_a_nat_vip(tmp_path, hosts):
    server = subprocess.Popen(["ip", "netns", "exec", hosts.server, "/usr/bin/python3", "-u", "-c", SERVER],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sluice = Sluice(tmp_path, config(tmp_path), netns=hosts.gw)
    try:
        assert server.stdout.readline().strip() == "listening"
        with sluice:
            assert sluice.log().count("mtu 9000") == 2
            for address, port in (("10.88.2.2", 5001), ("10.88.1.80", 80)):
                back, mss, big = transfer(hosts, address, port)
                assert back == BYTES, (address, sluice.log())
                assert mss >= MTU - 40 - 12, mss  # MTU less IP, TCP and timestamps: 9000-byte packets
                # Both directions carried 9000-byte packets whole (frames of 9014 bytes) past sluice.
                assert sum(" > 10.88.2.2." in l for l in big) > BYTES // MTU // 2, big[:5]
                assert sum(" 10.88.2.2." in l.split(" > ")[0] for l in big) > BYTES // MTU // 2, big[:5]
            stats = sluice.stats()
            assert stats["drop/frame_too_big"] == 0 and stats["drop/frame_too_big_no_df"] == 0
            assert sluice.stop() == 0, sluice.log()
    finally:
        server.kill()
        server.wait()


def test_a_smaller_mtu_on_the_egress_port_is_learnt_by_the_sender_from_sluices_frag_needed(tmp_path, hosts):
    """Every link is at 9000 but sluice's wan port at 1500, as a path with a narrower hop: the client's 9000-byte
    segments (DF, as Linux sends TCP) are dropped at sluice with ICMP "fragmentation needed" (next-hop MTU 1500) back,
    the client's kernel lowers its path MTU to the server and resends, and the transfer completes in packets that
    fit 1500 (path MTU discovery, RFC 1191, with a real stack)."""
    cfg = config(tmp_path)
    cfg["ports"][1]["mtu"] = 1500
    server = subprocess.Popen(["ip", "netns", "exec", hosts.server, "/usr/bin/python3", "-u", "-c", SERVER],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sluice = Sluice(tmp_path, cfg, netns=hosts.gw)
    try:
        assert server.stdout.readline().strip() == "listening"
        with sluice:
            back, mss, big = transfer(hosts, "10.88.2.2", 5001, larger_than=1514)
            assert back == BYTES, sluice.log()
            assert not [l for l in big if " > 10.88.2.2." in l], big[:5]  # nothing over 1500 reached the server
            learnt = Hosts.exec(hosts.client, "ip", "route", "get", "10.88.2.2").stdout
            assert "mtu 1500" in learnt, learnt
            stats = sluice.stats()
            assert stats["drop/frame_too_big"] >= 1 and stats["too_big_sent"] == stats["drop/frame_too_big"]
            assert sluice.stop() == 0, sluice.log()
    finally:
        server.kill()
        server.wait()


def test_a_device_that_cannot_take_the_mtu_stops_the_start_with_its_range(tmp_path, hosts):
    """net_af_packet in DPDK 22.11 takes frames of 1518 bytes at most: an mtu of 9000 on it is refused at start with
    the device's range, before any lcore runs, and every mbuf is back in the pool."""
    cfg = config(tmp_path)
    cfg["ports"][0]["device"] = "net_af_packet0,iface=lan0"
    sluice = Sluice(tmp_path, cfg, netns=hosts.gw)
    sluice.start(expect_ready=False)
    try:
        assert sluice.proc.wait(timeout=60) != 0
    finally:
        sluice.kill()
    assert re.search(r"port 'lan': mtu 9000 is out of what device 'net_af_packet0,iface=lan0' \(driver net_af_packet\) "
                     r"takes: \d+\.\.1500 \(largest frame 1518 bytes\)", sluice.log()), sluice.log()
    assert re.search(r"all \d+ mbufs returned", sluice.log()), sluice.log()

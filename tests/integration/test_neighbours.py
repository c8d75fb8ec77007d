"""ARP and IPv6 neighbour discovery on live packets: sluice answers for its VIPs, NAT pool and port addresses, and
resolves backends (and next hops given by address) itself; until a MAC is known their packets are dropped and
counted, and a solicitation goes out of the right port from sluice's own address there."""

import logging
import os
import re
import time

import pytest

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import ARP, ICMPv6ND_NA, ICMPv6ND_NS, ICMPv6NDOptDstLLAddr, ICMPv6NDOptSrcLLAddr, IP, IPv6, TCP, Ether, rdpcap
from scapy.layers.inet6 import in6_getnsma, in6_getnsmac, inet_pton
import socket

from netns import Netns
from sluice_harness import Sluice, wait_until

CLIENT_PEER, SERVER_PEER = "02:00:00:00:01:01", "02:00:00:00:02:01"
BACKEND_MAC, BACKEND6_MAC, ROUTER_MAC = "02:00:00:00:03:11", "02:00:00:00:03:21", "02:00:00:00:02:99"
VIP, VIP6, POOL = "192.0.2.100", "2001:db8:100::1", "10.1.0.100"


@pytest.fixture
def ns():
    namespace = Netns(f"slnd{os.getpid()}", ["cl0", "sv0"])
    yield namespace
    namespace.delete()


def config(tmp_path, forward_server=None):
    return {
        "dataplane": {"idle_sleep_us": 50},
        "ports": [
            {"name": "client", "device": f"net_pcap0,rx_iface=cl0,tx_pcap={tmp_path}/client_out.pcap",
             "addresses": ["203.0.113.1/24"]},
            {"name": "server", "device": f"net_pcap1,rx_iface=sv0,tx_pcap={tmp_path}/server_out.pcap",
             "addresses": ["10.1.0.1/24", "2001:db8:1::1/64"]},
        ],
        "lcores": [{"id": 1, "roles": ["rx", "worker"]}],
        "forward": [
            {"from": "client", "to": "server", **(forward_server or {"next_hop_mac": SERVER_PEER})},
            {"from": "server", "to": "client", "next_hop_mac": CLIENT_PEER},
        ],
        "load_balancer": {"nat_pool": [POOL]},
        "services": [
            {"name": "web", "vip": VIP, "port": 80, "protocol": "tcp", "mode": "nat",
             "backends": [{"address": "10.1.0.11", "port": 8080}]},
            {"name": "web6", "vip": VIP6, "port": 80, "protocol": "tcp", "mode": "dsr",
             "backends": [{"address": "2001:db8:1::11", "mac": BACKEND6_MAC}]},
        ],
    }


def port_mac(sluice, name):
    import re
    return re.search(rf"port '{name}':.*? mac ([0-9a-f:]{{17}})", sluice.log()).group(1)


def frames(tmp_path, port):
    path = tmp_path / f"{port}_out.pcap"
    return list(rdpcap(str(path))) if path.exists() and path.stat().st_size > 24 else []


def test_sluice_answers_arp_and_ns_for_its_own_addresses_only(tmp_path, ns):
    sluice = Sluice(tmp_path, config(tmp_path), netns=ns)
    with sluice:
        client_mac = port_mac(sluice, "client")
        asks = [Ether(src=CLIENT_PEER, dst="ff:ff:ff:ff:ff:ff") / ARP(op=1, hwsrc=CLIENT_PEER, psrc="203.0.113.9", pdst=target)
                for target in (VIP, POOL, "203.0.113.1", "203.0.113.77")]  # the last is nobody's
        nsma = in6_getnsma(inet_pton(socket.AF_INET6, VIP6))
        ns6 = (Ether(src=CLIENT_PEER, dst=in6_getnsmac(nsma)) /
               IPv6(src="2001:db8:f::9", dst=socket.inet_ntop(socket.AF_INET6, nsma), hlim=255) /
               ICMPv6ND_NS(tgt=VIP6) / ICMPv6NDOptSrcLLAddr(lladdr=CLIENT_PEER))
        sluice.netns.inject("cl0", asks + [ns6], tmp_path)
        stats = sluice.wait_accounted(5)
        assert stats["neighbour_replies"] == 4 and stats["drop/neighbour_frame"] == 1, stats
        assert sluice.stop() == 0, sluice.log()
    out = frames(tmp_path, "client")
    arp = [p for p in out if ARP in p]
    assert sorted(p[ARP].psrc for p in arp) == sorted([VIP, POOL, "203.0.113.1"])
    for p in arp:
        assert p[ARP].op == 2 and p[ARP].hwsrc == client_mac and p[Ether].src == client_mac
        assert p[ARP].pdst == "203.0.113.9" and p[ARP].hwdst == CLIENT_PEER and p[Ether].dst == CLIENT_PEER
    na = [p for p in out if ICMPv6ND_NA in p]
    assert len(na) == 1
    p = na[0]
    assert p[IPv6].src == VIP6 and p[IPv6].dst == "2001:db8:f::9" and p[IPv6].hlim == 255
    assert p[ICMPv6ND_NA].tgt == VIP6 and p[ICMPv6ND_NA].S == 1 and p[ICMPv6NDOptDstLLAddr].lladdr == client_mac
    chk = p[ICMPv6ND_NA].cksum
    del p[ICMPv6ND_NA].cksum
    assert IPv6(bytes(p[IPv6]))[ICMPv6ND_NA].cksum == chk  # scapy recomputes it: sluice's was right


def syn(sport, dst=VIP):
    return Ether(src=CLIENT_PEER, dst="02:00:00:00:00:aa") / IP(src="203.0.113.9", dst=dst) / TCP(sport=sport, dport=80, flags="S")


def test_a_backend_is_resolved_by_arp_before_traffic_reaches_it(tmp_path, ns):
    sluice = Sluice(tmp_path, config(tmp_path), netns=ns)
    with sluice:
        server_mac = port_mac(sluice, "server")
        # Unresolved: sluice solicits 10.1.0.11 from 10.1.0.1 out of the server port, and drops the SYN meanwhile.
        wait_until(lambda: any(ARP in p and p[ARP].pdst == "10.1.0.11" for p in frames(tmp_path, "server")), timeout=10,
                   what="an ARP request for the backend")
        request = next(p for p in frames(tmp_path, "server") if ARP in p)
        assert request[ARP].op == 1 and request[ARP].psrc == "10.1.0.1" and request[ARP].hwsrc == server_mac
        assert request[Ether].dst == "ff:ff:ff:ff:ff:ff"
        sluice.netns.inject("cl0", [syn(40000)], tmp_path)
        wait_until(lambda: sluice.stats()["drop/neighbour_unresolved"] == 1, timeout=10, what="the unresolved drop")
        # The backend answers; from then on its packets carry its MAC.
        reply = Ether(src=BACKEND_MAC, dst=server_mac) / ARP(op=2, hwsrc=BACKEND_MAC, psrc="10.1.0.11", hwdst=server_mac, pdst="10.1.0.1")
        sluice.netns.inject("sv0", [reply], tmp_path)
        wait_until(lambda: "neighbour 10.1.0.11 is at 02:00:00:00:03:11" in sluice.log(), timeout=10, what="learning")
        time.sleep(0.2)
        sluice.netns.inject("cl0", [syn(40001), syn(40002)], tmp_path)
        wait_until(lambda: len([p for p in frames(tmp_path, "server") if TCP in p]) == 2, timeout=10, what="SYNs out")
        assert sluice.stop() == 0, sluice.log()
    out = [p for p in frames(tmp_path, "server") if TCP in p]
    assert all(p[Ether].dst == BACKEND_MAC and p[IP].dst == "10.1.0.11" and p[TCP].dport == 8080 for p in out)


def test_a_next_hop_given_by_address_is_resolved_with_arp(tmp_path, ns):
    cfg = config(tmp_path, {"next_hop": "10.1.0.254"})
    cfg["services"] = []
    cfg.pop("load_balancer")
    sluice = Sluice(tmp_path, cfg, netns=ns)
    with sluice:
        server_mac = port_mac(sluice, "server")
        wait_until(lambda: any(ARP in p and p[ARP].pdst == "10.1.0.254" for p in frames(tmp_path, "server")), timeout=10,
                   what="an ARP request for the next hop")
        sluice.netns.inject("sv0", [Ether(src=ROUTER_MAC, dst=server_mac) /
                                    ARP(op=2, hwsrc=ROUTER_MAC, psrc="10.1.0.254", hwdst=server_mac, pdst="10.1.0.1")], tmp_path)
        wait_until(lambda: "neighbour 10.1.0.254 is at" in sluice.log(), timeout=10, what="learning")
        time.sleep(0.2)
        sluice.netns.inject("cl0", [syn(41000, dst="198.51.100.7")], tmp_path)
        wait_until(lambda: any(TCP in p for p in frames(tmp_path, "server")), timeout=10, what="the packet out")
        assert sluice.stop() == 0, sluice.log()
    out = [p for p in frames(tmp_path, "server") if TCP in p]
    assert len(out) == 1 and out[0][Ether].dst == ROUTER_MAC and out[0][IP].ttl == 63


def test_an_ipv6_backend_is_resolved_with_neighbour_solicitation(tmp_path, ns):
    cfg = config(tmp_path)
    cfg["services"] = [{"name": "web6", "vip": VIP6, "port": 80, "protocol": "tcp", "mode": "dsr",
                        "backends": [{"address": "2001:db8:1::11"}]}]  # no mac: on the server port's link
    sluice = Sluice(tmp_path, cfg, netns=ns)
    with sluice:
        server_mac = port_mac(sluice, "server")
        wait_until(lambda: any(ICMPv6ND_NS in p for p in frames(tmp_path, "server")), timeout=10, what="an NS")
        solicitation = next(p for p in frames(tmp_path, "server") if ICMPv6ND_NS in p)
        nsma = socket.inet_ntop(socket.AF_INET6, in6_getnsma(inet_pton(socket.AF_INET6, "2001:db8:1::11")))
        assert solicitation[IPv6].src == "2001:db8:1::1" and solicitation[IPv6].dst == nsma
        assert solicitation[Ether].dst == in6_getnsmac(inet_pton(socket.AF_INET6, nsma)) and solicitation[Ether].src == server_mac
        assert solicitation[IPv6].hlim == 255 and solicitation[ICMPv6ND_NS].tgt == "2001:db8:1::11"
        assert solicitation[ICMPv6NDOptSrcLLAddr].lladdr == server_mac
        chk = solicitation[ICMPv6ND_NS].cksum
        del solicitation[ICMPv6ND_NS].cksum
        assert IPv6(bytes(solicitation[IPv6]))[ICMPv6ND_NS].cksum == chk
        advert = (Ether(src=BACKEND6_MAC, dst=server_mac) / IPv6(src="2001:db8:1::11", dst="2001:db8:1::1", hlim=255) /
                  ICMPv6ND_NA(tgt="2001:db8:1::11", S=1, O=1) / ICMPv6NDOptDstLLAddr(lladdr=BACKEND6_MAC))
        sluice.netns.inject("sv0", [advert], tmp_path)
        wait_until(lambda: "neighbour 2001:db8:1::11 is at" in sluice.log(), timeout=10, what="learning")
        time.sleep(0.2)
        sluice.netns.inject("cl0", [Ether(src=CLIENT_PEER, dst="02:00:00:00:00:aa") / IPv6(src="2001:db8:f::9", dst=VIP6) /
                                    TCP(sport=42000, dport=80, flags="S")], tmp_path)
        wait_until(lambda: any(TCP in p for p in frames(tmp_path, "server")), timeout=10, what="the SYN out")
        assert sluice.stop() == 0, sluice.log()
    out = [p for p in frames(tmp_path, "server") if TCP in p]
    assert len(out) == 1 and out[0][Ether].dst == BACKEND6_MAC and out[0][IPv6].dst == VIP6  # dsr: MAC only


def test_sluicectl_neighbours_shows_a_next_hop_unresolved_then_resolved_by_an_arp_exchange(tmp_path, ns):
    """`sluicectl neighbours` lists sluice's ARP/ND table: the next hop unresolved while its ARP request goes
    unanswered, then at its MAC once the reply came in, with its port and age; Prometheus counts it likewise."""
    import subprocess
    from sluice_harness import ROOT
    cfg = config(tmp_path, {"next_hop": "10.1.0.254"})
    cfg["services"] = []
    cfg.pop("load_balancer")
    cfg["metrics"] = {"listen": "127.0.0.1:9469"}  # in the test's namespace
    ns.exec("ip", "link", "set", "lo", "up")
    sluice = Sluice(tmp_path, cfg, netns=ns)

    def neighbours():
        shown = subprocess.run(["/usr/bin/python3", str(ROOT / "app/sluicectl/sluicectl"), "--prefix", sluice.prefix,
                                "neighbours"], capture_output=True, text=True, timeout=60)
        assert shown.returncode == 0, shown.stderr
        return shown.stdout.splitlines()

    def metric(name):
        url = f"http://{cfg['metrics']['listen']}/metrics"
        text = sluice.netns.exec("curl", "-s", "-m", "5", url, check=False).stdout
        return {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines()
                if line.startswith(name)}

    with sluice:
        server_mac = port_mac(sluice, "server")
        wait_until(lambda: any(ARP in p and p[ARP].pdst == "10.1.0.254" for p in frames(tmp_path, "server")),
                   timeout=10, what="an ARP request for the next hop")
        lines = neighbours()
        assert len(lines) == 1 and lines[0].startswith("10.1.0.254 on server unresolved"), lines
        assert lines[0].endswith("(next hop)"), lines
        wait_until(lambda: metric("sluice_next_hops_unresolved").get("sluice_next_hops_unresolved") == 1,
                   timeout=10, what="the unresolved gauge")
        reply = Ether(src=ROUTER_MAC, dst=server_mac) / ARP(op=2, hwsrc=ROUTER_MAC, psrc="10.1.0.254",
                                                            hwdst=server_mac, pdst="10.1.0.1")
        sluice.netns.inject("sv0", [reply], tmp_path)
        wait_until(lambda: "neighbour 10.1.0.254 is at" in sluice.log(), timeout=10, what="learning")
        lines = neighbours()
        assert len(lines) == 1, lines
        assert re.fullmatch(r"10\.1\.0\.254 on server at 02:00:00:00:02:99 resolved, reachable, confirmed \d+ s ago "
                            r"\(next hop\)", lines[0]), lines
        wait_until(lambda: metric("sluice_neighbours") == {'sluice_neighbours{state="resolved"}': 1,
                                                           'sluice_neighbours{state="unresolved"}': 0},
                   timeout=10, what="the neighbours gauge")
        assert metric("sluice_next_hops_unresolved") == {"sluice_next_hops_unresolved": 0}
        assert sluice.stop() == 0, sluice.log()

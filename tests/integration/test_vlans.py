"""802.1Q sub-interfaces on live frames (ports[].vlans): one trunk carries untagged and tagged traffic; ARP and ND
are answered on the VLAN that asked, sluice solicits a next hop tagged on its VLAN, a routed packet leaves with its
way out's tag, and a frame of a VLAN the trunk does not carry is dropped and counted."""

import logging
import os
import socket
import time

import pytest

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import ARP, UDP, Dot1Q, Ether, ICMPv6ND_NA, ICMPv6ND_NS, ICMPv6NDOptSrcLLAddr, IP, IPv6, rdpcap
from scapy.layers.inet6 import in6_getnsma, in6_getnsmac, inet_pton

from netns import Netns
from sluice_harness import Sluice, wait_until

HOST_MAC, ROUTER_MAC = "02:00:00:00:01:05", "02:00:00:00:02:fe"


@pytest.fixture
def ns():
    namespace = Netns(f"slvl{os.getpid()}", ["tr0"])
    yield namespace
    namespace.delete()


def config(tmp_path):
    return {
        "dataplane": {"idle_sleep_us": 50},
        "ports": [
            {"name": "trunk", "device": f"net_pcap0,rx_iface=tr0,tx_pcap={tmp_path}/trunk_out.pcap",
             "addresses": ["10.0.0.1/24"],
             "vlans": [{"id": 100, "addresses": ["10.100.0.1/24", "2001:db8:100::1/64"]},
                       {"id": 200, "name": "uplink", "addresses": ["10.200.0.1/24"]}]},
        ],
        "lcores": [{"id": 1, "roles": ["rx", "worker"]}],
        "routes": [{"prefix": "198.51.100.0/24", "next_hops": [{"address": "10.200.0.254", "port": "uplink"}]}],
    }


def sent(tmp_path):
    path = tmp_path / "trunk_out.pcap"
    return list(rdpcap(str(path))) if path.exists() and path.stat().st_size > 24 else []


def arp_ask(vlan, psrc, pdst):
    return Ether(src=HOST_MAC, dst="ff:ff:ff:ff:ff:ff") / Dot1Q(vlan=vlan) / ARP(op=1, hwsrc=HOST_MAC, psrc=psrc, pdst=pdst)


def test_arp_and_nd_are_answered_on_the_vlan_that_asked(tmp_path, ns):
    sluice = Sluice(tmp_path, config(tmp_path), netns=ns)
    with sluice:
        nsma = in6_getnsma(inet_pton(socket.AF_INET6, "2001:db8:100::1"))
        solicitation = (Ether(src=HOST_MAC, dst=in6_getnsmac(nsma)) / Dot1Q(vlan=100) /
                        IPv6(src="2001:db8:100::5", dst=socket.inet_ntop(socket.AF_INET6, nsma), hlim=255) /
                        ICMPv6ND_NS(tgt="2001:db8:100::1") / ICMPv6NDOptSrcLLAddr(lladdr=HOST_MAC))
        frames = [arp_ask(100, "10.100.0.5", "10.100.0.1"),  # answered on VLAN 100
                  arp_ask(200, "10.200.0.5", "10.100.0.1"),  # VLAN 100's address asked on VLAN 200: not answered
                  arp_ask(300, "10.3.0.5", "10.3.0.1"),      # a VLAN the trunk does not carry
                  solicitation]
        sluice.netns.inject("tr0", frames, tmp_path)
        stats = sluice.wait_accounted(len(frames))
        assert stats["neighbour_replies"] == 2, stats
        assert stats["drop/neighbour_frame"] == 1 and stats["drop/vlan_unknown"] == 1, stats
        assert sluice.stop() == 0, sluice.log()
    out = sent(tmp_path)
    arp = [p for p in out if ARP in p and p[ARP].op == 2]
    assert len(arp) == 1
    assert arp[0][Dot1Q].vlan == 100 and arp[0][ARP].psrc == "10.100.0.1" and arp[0][ARP].pdst == "10.100.0.5"
    na = [p for p in out if ICMPv6ND_NA in p]
    assert len(na) == 1
    assert na[0][Dot1Q].vlan == 100 and na[0][ICMPv6ND_NA].tgt == "2001:db8:100::1"
    assert na[0][IPv6].dst == "2001:db8:100::5"


def test_a_next_hop_on_a_vlan_is_solicited_there_and_routed_packets_leave_tagged(tmp_path, ns):
    sluice = Sluice(tmp_path, config(tmp_path), netns=ns)
    with sluice:
        wait_until(lambda: any(ARP in p and p[ARP].pdst == "10.200.0.254" for p in sent(tmp_path)), timeout=10,
                   what="an ARP request for the next hop")
        request = next(p for p in sent(tmp_path) if ARP in p and p[ARP].pdst == "10.200.0.254")
        assert Dot1Q in request and request[Dot1Q].vlan == 200 and request[ARP].psrc == "10.200.0.1"
        trunk_mac = request[Ether].src
        # The router answers on VLAN 200 (the same answer untagged would teach nothing: another link).
        answer = (Ether(src=ROUTER_MAC, dst=trunk_mac) / Dot1Q(vlan=200) /
                  ARP(op=2, hwsrc=ROUTER_MAC, psrc="10.200.0.254", hwdst=trunk_mac, pdst="10.200.0.1"))
        sluice.netns.inject("tr0", [answer], tmp_path)
        wait_until(lambda: "neighbour 10.200.0.254 is at" in sluice.log(), timeout=10, what="learning")
        time.sleep(0.2)
        data = [Ether(src=HOST_MAC, dst=trunk_mac) / Dot1Q(vlan=100) / IP(src="10.100.0.5", dst="198.51.100.7") /
                UDP(sport=4000, dport=53),
                Ether(src=HOST_MAC, dst=trunk_mac) / IP(src="10.0.0.9", dst="198.51.100.8") / UDP(sport=4001, dport=53)]
        sluice.netns.inject("tr0", data, tmp_path)
        wait_until(lambda: len([p for p in sent(tmp_path) if UDP in p]) == 2, timeout=10, what="the packets out")
        assert sluice.stop() == 0, sluice.log()
    out = [p for p in sent(tmp_path) if UDP in p]
    assert sorted(p[IP].dst for p in out) == ["198.51.100.7", "198.51.100.8"]
    for p in out:
        assert Dot1Q in p and p[Dot1Q].vlan == 200 and p[Ether].dst == ROUTER_MAC and p[IP].ttl == 63

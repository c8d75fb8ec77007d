"""Hostile and malformed frames through a real sluice on net_pcap ports (reliability).

Each case is (name, frame builder, expected outcome, drop reason). The whole battery goes through one sluice run per
setting (a pcap in, a pcap out), with a valid canary frame after every case: a case passed exactly when its frame
leaves before the next canary, sluice survived it when that canary leaves, and the drop counters must equal the
reasons the table names, exactly. Every run must exit 0 with every mbuf back in its pool (no leak).

- FORWARD: plain forwarding, no firewall: the parser's checks, TTL, tags, fragments, lengths, IPv4 options, IPv6
  extension header order, ICMP quotes, neighbour discovery; trailing bytes are trimmed.
- FIREWALL: a stateful firewall that allows everything to the destination prefixes: only a plain SYN may open a TCP
  connection; fragments follow their datagram's connection (ports from the first fragment); ICMP errors need a
  tracked flow.
To add a case, add a row; docs/security.md ("Hostile packets") says which row covers which policy."""

import collections
import logging
from dataclasses import dataclass
from typing import Callable

import pytest

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import (ICMP, IP, TCP, UDP, Dot1AD, Dot1Q, Ether, ICMPv6DestUnreach, ICMPv6EchoRequest, ICMPv6ND_NA,
                       ICMPv6ND_NS, ICMPv6ND_RA, ICMPv6NDOptDstLLAddr, ICMPv6NDOptSrcLLAddr, ICMPv6PacketTooBig, IPv6,
                       IPv6ExtHdrDestOpt, IPv6ExtHdrFragment, IPv6ExtHdrHopByHop, IPv6ExtHdrRouting, Raw, rdpcap,
                       wrpcap)
from scapy.layers.ipsec import AH

from sluice_harness import Sluice, wait_until
from test_forward_pcap import MAC_P1_PEER, eth, forwarding_config

PASS, DROP = "pass", "drop"
A4, B4 = "10.0.0.1", "10.1.0.1"              # client side (p0) and server side (p1), allowed by the firewall
A6, B6 = "2001:db8::1", "2001:db8:1::1"
DENIED4 = "10.2.0.1"                           # a destination no rule allows


@dataclass(frozen=True)
class Case:
    name: str
    build: Callable[[], object]   # returns a scapy packet or bytes: one frame
    outcome: str                  # PASS (forwarded, unchanged apart from the forwarding rewrite) or DROP
    reason: str = ""              # the drop counter it must land in (DROP only)

    def frame(self):
        return bytes(self.build())


def v4(proto=None, **kw):
    kw.setdefault("src", A4)
    kw.setdefault("dst", B4)
    return eth() / (IP(proto=proto, **kw) if proto is not None else IP(**kw))


def v6(nh=None, **kw):
    kw.setdefault("src", A6)
    kw.setdefault("dst", B6)
    return eth() / (IPv6(nh=nh, **kw) if nh is not None else IPv6(**kw))


def cut(packet, length):
    """The first `length` bytes of a frame: the frame ends there, whatever its headers say."""
    return bytes(packet)[:length]


def patch(packet, offset, *values):
    """Overwrites bytes of a built frame (offset from the frame's start) after scapy computed lengths and sums."""
    data = bytearray(bytes(packet))
    data[offset:offset + len(values)] = bytes(values)
    return bytes(data)


def ipv4_checksum_fixed(data, l3=14):
    """Recomputes the IPv4 header checksum of a raw frame (after a patch that must not trip it)."""
    data = bytearray(data)
    ihl = (data[l3] & 0x0F) * 4
    data[l3 + 10:l3 + 12] = b"\0\0"
    total = sum(int.from_bytes(data[i:i + 2], "big") for i in range(l3, l3 + ihl, 2))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    data[l3 + 10:l3 + 12] = (~total & 0xFFFF).to_bytes(2, "big")
    return bytes(data)


def tcp(**kw):
    kw.setdefault("sport", 40000)
    kw.setdefault("dport", 80)
    return TCP(**kw)


UDP_OK = UDP(sport=5000, dport=53) / Raw(b"query")
HBH, RT, DST = IPv6ExtHdrHopByHop, IPv6ExtHdrRouting, IPv6ExtHdrDestOpt


def ext_chain(count):
    """count destination-options headers, then UDP."""
    layer = UDP(sport=1, dport=2)
    for _ in range(count):
        layer = DST() / layer
    return layer


def neighbour_solicitation(hlim=255, fragment=None):
    """An NS for B6 from A6 with its source link-layer address, optionally behind a fragment header."""
    ip = IPv6(src=A6, dst="ff02::1:ff01:1", hlim=hlim)
    nd = ICMPv6ND_NS(tgt=B6) / ICMPv6NDOptSrcLLAddr(lladdr="02:aa:00:00:00:01")
    return eth() / (ip / fragment / nd if fragment is not None else ip / nd)


def icmp_error(quote):
    return v4() / ICMP(type=3, code=3) / Raw(bytes(quote))


QUOTE_V4 = IP(src=B4, dst=A4) / UDP(sport=53, dport=5000)       # a reply sluice never saw

FORWARD = [
    # --- runts and truncation at every header boundary ------------------------------------------------------------
    Case("1-byte runt", lambda: cut(v4() / UDP_OK, 1), DROP, "l2_truncated"),
    Case("Ethernet cut before the ethertype ends", lambda: cut(v4() / UDP_OK, 13), DROP, "l2_truncated"),
    Case("Ethernet header only (IPv4 type)", lambda: cut(v4() / UDP_OK, 14), DROP, "ipv4_truncated"),
    Case("VLAN tag cut short", lambda: cut(eth() / Dot1Q(vlan=5) / IP() / UDP_OK, 16), DROP, "l2_truncated"),
    Case("VLAN tag complete, nothing after", lambda: cut(eth() / Dot1Q(vlan=5) / IP() / UDP_OK, 18), DROP, "ipv4_truncated"),
    Case("QinQ inner tag cut short", lambda: cut(eth() / Dot1AD(vlan=5) / Dot1Q(vlan=6) / IP() / UDP_OK, 20), DROP, "l2_truncated"),
    Case("IPv4 header cut at 19 bytes", lambda: cut(v4() / UDP_OK, 14 + 19), DROP, "ipv4_truncated"),
    Case("IPv4 options cut short (IHL 6)", lambda: cut(v4(options=b"\x01\x01\x01\x00") / UDP_OK, 14 + 22), DROP, "ipv4_truncated"),
    Case("IPv6 header cut at 39 bytes", lambda: cut(v6() / UDP_OK, 14 + 39), DROP, "ipv6_truncated"),
    Case("TCP header cut at 19 bytes", lambda: v4(proto=6) / Raw(bytes(tcp())[:19]), DROP, "l4_truncated"),
    Case("UDP header cut at 7 bytes", lambda: v4(proto=17) / Raw(bytes(UDP_OK)[:7]), DROP, "l4_truncated"),
    Case("ICMP header cut at 7 bytes", lambda: v4(proto=1) / Raw(bytes(ICMP(id=1))[:7]), DROP, "l4_truncated"),
    Case("IPv6 TCP header cut at 19 bytes", lambda: v6(nh=6) / Raw(bytes(tcp())[:19]), DROP, "l4_truncated"),
    Case("IPv6 UDP header cut at 7 bytes", lambda: v6(nh=17) / Raw(bytes(UDP_OK)[:7]), DROP, "l4_truncated"),
    Case("ICMPv6 header cut at 7 bytes", lambda: v6(nh=58) / Raw(b"\x80\x00\x00\x00\x00\x01\x00"), DROP, "l4_truncated"),
    Case("hop-by-hop header cut at 6 bytes", lambda: v6(nh=0) / Raw(bytes(HBH() / UDP_OK)[:6]), DROP, "ipv6_bad_ext_header"),
    Case("routing header cut at 6 bytes", lambda: v6(nh=43) / Raw(bytes(RT() / UDP_OK)[:6]), DROP, "ipv6_bad_ext_header"),
    Case("destination options cut at 6 bytes", lambda: v6(nh=60) / Raw(bytes(DST() / UDP_OK)[:6]), DROP, "ipv6_bad_ext_header"),
    Case("fragment header cut at 6 bytes", lambda: v6(nh=44) / Raw(bytes(IPv6ExtHdrFragment(nh=17) / UDP_OK)[:6]), DROP, "ipv6_bad_ext_header"),
    Case("AH cut at 6 bytes", lambda: v6(nh=51) / Raw(bytes(AH(nh=17, payloadlen=4, spi=1, icv=b"\0" * 12) / UDP_OK)[:6]), DROP, "ipv6_bad_ext_header"),
    Case("hop-by-hop length beyond the payload", lambda: v6(nh=0) / Raw(b"\x11\x04" + b"\x01\x04\0\0\0\0" + bytes(UDP_OK)), DROP, "ipv6_bad_ext_header"),
    Case("UDP cut after the hop-by-hop header", lambda: v6() / HBH(nh=17) / Raw(bytes(UDP_OK)[:4]), DROP, "l4_truncated"),
    # --- IPv4 header fields ---------------------------------------------------------------------------------------
    Case("IPv4 IHL 0", lambda: patch(v4() / UDP_OK, 14, 0x40), DROP, "ipv4_bad_ihl"),
    Case("IPv4 IHL 4", lambda: patch(v4() / UDP_OK, 14, 0x44), DROP, "ipv4_bad_ihl"),
    Case("IPv4 IHL 15 past the frame", lambda: patch(v4() / UDP_OK, 14, 0x4F), DROP, "ipv4_truncated"),
    Case("IPv4 IHL 15 past the total length", lambda: v4(ihl=15, len=40) / Raw(b"\0" * 60), DROP, "ipv4_bad_length"),
    Case("IPv4 version 6 under the IPv4 ethertype", lambda: Ether(src="02:aa:00:00:00:01", dst="02:bb:00:00:00:01", type=0x0800) / IPv6(src=A6, dst=B6) / UDP_OK, DROP, "ipv4_bad_version"),
    Case("IPv4 total length below the header", lambda: v4(len=19) / UDP_OK, DROP, "ipv4_bad_length"),
    Case("IPv4 total length beyond the frame", lambda: v4(len=200) / UDP_OK, DROP, "ipv4_bad_length"),
    Case("IPv4 total length cuts the UDP header", lambda: v4(len=24) / UDP_OK, DROP, "l4_truncated"),
    Case("IPv4 total length shorter than the frame (trailer trimmed)", lambda: v4(len=33) / UDP(sport=5000, dport=53, len=13) / Raw(b"query" + b"T" * 300), PASS),
    Case("IPv4 UDP with 20 trailing garbage bytes (trimmed)", lambda: bytes(v4() / UDP_OK) + b"\xee" * 20, PASS),
    Case("IPv4 bad header checksum", lambda: v4(chksum=0xBEEF) / UDP_OK, DROP, "ipv4_bad_checksum"),
    Case("IPv4 TTL 0", lambda: v4(ttl=0) / UDP_OK, DROP, "ttl_expired"),
    Case("IPv4 TTL 1", lambda: v4(ttl=1) / UDP_OK, DROP, "ttl_expired"),
    Case("IPv4 TTL 2", lambda: v4(ttl=2) / UDP_OK, PASS),
    Case("IPv4 valid options (NOP, NOP, NOP, EOL)", lambda: v4(options=b"\x01\x01\x01\x00") / UDP_OK, PASS),
    Case("IPv4 record route option", lambda: v4(options=b"\x07\x07\x04\x00\x00\x00\x00\x00") / UDP_OK, PASS),
    Case("IPv4 router alert option", lambda: v4(options=b"\x94\x04\x00\x00") / UDP_OK, PASS),
    Case("IPv4 option length past the header", lambda: v4(options=b"\x07\x28\x04\x00") / UDP_OK, DROP, "ipv4_bad_option"),
    Case("IPv4 option length 0", lambda: v4(options=b"\x44\x00\x00\x00") / UDP_OK, DROP, "ipv4_bad_option"),
    Case("IPv4 option length 1", lambda: v4(options=b"\x07\x01\x00\x00") / UDP_OK, DROP, "ipv4_bad_option"),
    Case("IPv4 option type in the last byte, no length", lambda: v4(options=b"\x01\x01\x01\x07") / UDP_OK, DROP, "ipv4_bad_option"),
    Case("IPv4 loose source route", lambda: v4(options=b"\x83\x07\x04\x0a\x02\x00\x01\x00") / UDP_OK, DROP, "ipv4_source_route"),
    Case("IPv4 strict source route", lambda: v4(options=b"\x89\x07\x04\x0a\x02\x00\x01\x00") / UDP_OK, DROP, "ipv4_source_route"),
    Case("IPv4 loose source route after NOPs, in a first fragment", lambda: v4(flags="MF", id=16, options=b"\x01\x01\x01\x01\x83\x07\x04\x0a\x02\x00\x01\x00") / UDP(sport=5000, dport=53, len=40) / Raw(b"a" * 16), DROP, "ipv4_source_route"),
    Case("ICMP error quoting a header with a source route (the quote is not walked)", lambda: icmp_error(bytes(IP(src=B4, dst=A4, options=b"\x83\x07\x04\x0a\x02\x00\x01\x00") / UDP(sport=53, dport=5000))[:36]), PASS),
    Case("IPv4 unknown protocol 253", lambda: v4(proto=253) / Raw(b"x" * 20), PASS),
    # --- IPv6 extension header chains -----------------------------------------------------------------------------
    Case("IPv6 HBH, DST, RT, DST, UDP", lambda: v6() / HBH() / DST() / RT() / DST() / UDP_OK, PASS),
    Case("IPv6 HBH, RT, fragment (first), TCP", lambda: v6() / HBH() / RT() / IPv6ExtHdrFragment(m=1, id=7) / tcp(flags="S"), PASS),
    Case("IPv6 AH then UDP", lambda: v6() / AH(nh=17, payloadlen=4, spi=1, icv=b"\0" * 12) / UDP_OK, PASS),
    Case("IPv6 8 extension headers (the most supported)", lambda: v6() / ext_chain(8), PASS),
    Case("IPv6 9 extension headers", lambda: v6() / ext_chain(9), DROP, "ipv6_bad_ext_header"),
    Case("IPv6 hop-by-hop after destination options (RFC 8200 4.1)", lambda: v6() / DST() / HBH() / UDP_OK, DROP, "ipv6_bad_ext_header"),
    Case("IPv6 hop-by-hop twice", lambda: v6() / HBH() / HBH() / UDP_OK, DROP, "ipv6_bad_ext_header"),
    Case("IPv6 routing type 0, 1 segment left (RFC 5095)", lambda: v6() / RT(type=0, segleft=1, addresses=["2001:db8:2::1"]) / UDP_OK, DROP, "ipv6_routing_type0"),
    Case("IPv6 routing type 0 after HBH, 2 segments left", lambda: v6() / HBH() / RT(type=0, segleft=2, addresses=["2001:db8:2::1", B6]) / UDP_OK, DROP, "ipv6_routing_type0"),
    Case("IPv6 routing type 0, no segment left", lambda: v6() / RT(type=0, segleft=0, addresses=["2001:db8:2::1"]) / UDP_OK, PASS),
    Case("IPv6 routing type 2, 1 segment left", lambda: v6() / RT(type=2, segleft=1, addresses=["2001:db8:2::1"]) / UDP_OK, PASS),
    Case("IPv6 unknown next header 253", lambda: v6(nh=253) / Raw(b"x" * 16), PASS),
    Case("IPv6 DST then unknown next header 253", lambda: v6() / DST(nh=253) / Raw(b"x" * 16), PASS),
    Case("IPv6 no next header (59)", lambda: v6(nh=59), PASS),
    Case("IPv6 payload length beyond the frame", lambda: v6(plen=300) / UDP_OK, DROP, "ipv6_bad_length"),
    Case("IPv6 payload length shorter than the frame (trailer trimmed)", lambda: v6(plen=13) / UDP(sport=5000, dport=53, len=13) / Raw(b"query" + b"T" * 40), PASS),
    Case("IPv6 UDP with 20 trailing garbage bytes (trimmed)", lambda: bytes(v6() / UDP_OK) + b"\xee" * 20, PASS),
    Case("IPv6 version 4 under the IPv6 ethertype", lambda: Ether(src="02:aa:00:00:00:01", dst="02:bb:00:00:00:01", type=0x86DD) / IP(src=A4, dst=B4) / UDP_OK / Raw(b"\0" * 20), DROP, "ipv6_bad_version"),
    Case("IPv6 hop limit 0", lambda: v6(hlim=0) / UDP_OK, DROP, "ttl_expired"),
    Case("IPv6 hop limit 1", lambda: v6(hlim=1) / UDP_OK, DROP, "ttl_expired"),
    # --- fragments: not reassembled; the parser checks L3 only and forwards every fragment -------------------------
    Case("IPv4 first fragment", lambda: v4(flags="MF", id=11) / UDP(sport=5000, dport=53, len=48) / Raw(b"a" * 16), PASS),
    Case("IPv4 middle fragment", lambda: v4(flags="MF", frag=3, id=11, proto=17) / Raw(b"b" * 16), PASS),
    Case("IPv4 last fragment", lambda: v4(frag=5, id=11, proto=17) / Raw(b"c" * 16), PASS),
    Case("IPv4 fragment overlapping the first", lambda: v4(flags="MF", frag=1, id=11, proto=17) / Raw(b"d" * 16), PASS),
    Case("IPv4 TCP fragment at offset 1 (RFC 1858 overwrite)", lambda: v4(flags="MF", frag=1, id=12, proto=6) / Raw(b"e" * 16), PASS),
    Case("IPv4 tiny first fragment hiding the TCP flags", lambda: v4(flags="MF", id=13, proto=6) / Raw(bytes(tcp(flags="S"))[:8]), PASS),
    Case("IPv4 first fragment, no L4 byte at all", lambda: v4(flags="MF", id=14, proto=17), PASS),
    Case("IPv4 first fragment, TCP data offset 0 (L4 not checked)", lambda: v4(flags="MF", id=15) / tcp(dataofs=0) / Raw(b"f" * 8), PASS),
    Case("IPv6 first fragment", lambda: v6() / IPv6ExtHdrFragment(m=1, id=21, nh=17) / UDP(sport=5000, dport=53, len=40) / Raw(b"a" * 16), PASS),
    Case("IPv6 later fragment", lambda: v6() / IPv6ExtHdrFragment(offset=3, id=21, nh=17) / Raw(b"b" * 16), PASS),
    Case("IPv6 atomic fragment (offset 0, no M flag)", lambda: v6() / IPv6ExtHdrFragment(id=22) / UDP_OK, PASS),
    Case("IPv6 tiny first fragment hiding the TCP header", lambda: v6() / IPv6ExtHdrFragment(m=1, id=23, nh=6) / Raw(bytes(tcp(flags="S"))[:8]), PASS),
    Case("IPv6 first fragment with its chain cut (RFC 7112)", lambda: v6() / IPv6ExtHdrFragment(m=1, id=24, nh=60) / Raw(b"\x11\x02"), DROP, "ipv6_bad_ext_header"),
    Case("IPv6 later fragment after DST options (payload is not a header)", lambda: v6() / IPv6ExtHdrFragment(offset=8, id=25, nh=60) / Raw(b"\x63\x63" + b"g" * 14), PASS),
    # --- TCP --------------------------------------------------------------------------------------------------------
    Case("TCP data offset 0", lambda: v4() / tcp(dataofs=0), DROP, "tcp_bad_offset"),
    Case("TCP data offset 4", lambda: v4() / tcp(dataofs=4), DROP, "tcp_bad_offset"),
    Case("TCP data offset 15 past the packet", lambda: v4() / tcp(dataofs=15) / Raw(b"h" * 20), DROP, "tcp_bad_offset"),
    Case("TCP data offset past the packet, frame padded", lambda: cut(v4(len=48) / tcp(dataofs=8) / Raw(b"\0" * 30), 14 + 48 + 30), DROP, "tcp_bad_offset"),
    Case("TCP data offset 6 with an option", lambda: v4() / tcp(flags="S", options=[("MSS", 1460)]), PASS),
    Case("IPv6 TCP data offset 4", lambda: v6() / tcp(dataofs=4), DROP, "tcp_bad_offset"),
    Case("TCP SYN+FIN forwarded without a firewall", lambda: v4() / tcp(flags="SF"), PASS),
    # --- UDP --------------------------------------------------------------------------------------------------------
    Case("UDP length shorter than the IP payload", lambda: v4() / UDP(sport=5000, dport=53, len=9) / Raw(b"query"), PASS),
    Case("UDP length longer than the IP payload", lambda: v4() / UDP(sport=5000, dport=53, len=100) / Raw(b"query"), DROP, "udp_bad_length"),
    Case("UDP length 7", lambda: v4() / UDP(sport=5000, dport=53, len=7) / Raw(b"query"), DROP, "udp_bad_length"),
    Case("UDP length 0", lambda: v4() / UDP(sport=5000, dport=53, len=0) / Raw(b"query"), DROP, "udp_bad_length"),
    Case("IPv6 UDP length longer than the payload", lambda: v6() / UDP(sport=5000, dport=53, len=100) / Raw(b"query"), DROP, "udp_bad_length"),
    # --- ICMP errors ------------------------------------------------------------------------------------------------
    Case("ICMP error quoting 19 bytes of IP header", lambda: icmp_error(bytes(QUOTE_V4)[:19]), DROP, "icmp_bad_quote"),
    Case("ICMP error quoting IP and 4 bytes of UDP", lambda: icmp_error(bytes(QUOTE_V4)[:24]), DROP, "icmp_bad_quote"),
    Case("ICMP error quoting IHL 4", lambda: icmp_error(patch(QUOTE_V4, 0, 0x44)[:28]), DROP, "icmp_bad_quote"),
    Case("ICMP error quoting IHL 15 past the quote", lambda: icmp_error(patch(QUOTE_V4, 0, 0x4F)[:28]), DROP, "icmp_bad_quote"),
    Case("ICMP error quoting an IPv6 header", lambda: icmp_error(bytes(IPv6(src=B6, dst=A6) / UDP_OK)), DROP, "icmp_bad_quote"),
    Case("ICMP error with nothing quoted", lambda: v4() / ICMP(type=11, code=0), DROP, "icmp_bad_quote"),
    Case("ICMP error quoting an untracked flow (no firewall: passes)", lambda: icmp_error(bytes(QUOTE_V4)[:28]), PASS),
    Case("ICMP error quoting a TCP header cut at 8 bytes", lambda: icmp_error(bytes(IP(src=B4, dst=A4) / tcp())[:28]), PASS),
    Case("ICMPv6 packet-too-big quoting 39 bytes", lambda: v6() / ICMPv6PacketTooBig(mtu=1280) / Raw(bytes(IPv6(src=B6, dst=A6) / UDP_OK)[:39]), DROP, "icmp_bad_quote"),
    Case("ICMPv6 unreachable quoting an IPv4 header", lambda: v6() / ICMPv6DestUnreach() / Raw(bytes(QUOTE_V4)), DROP, "icmp_bad_quote"),
    Case("ICMPv6 unreachable quoting UDP cut at 4", lambda: v6() / ICMPv6DestUnreach() / Raw(bytes(IPv6(src=B6, dst=A6) / UDP_OK)[:44]), DROP, "icmp_bad_quote"),
    # --- neighbour discovery: taken (never forwarded); learned from only unfragmented with hop limit 255 --------------
    Case("NS, hop limit 255 (taken: neighbour handling)", lambda: neighbour_solicitation(), DROP, "neighbour_frame"),
    Case("NS, hop limit 64 (RFC 4861 7.1.1: not learned from)", lambda: neighbour_solicitation(hlim=64), DROP, "nd_invalid"),
    Case("NS in a fragment (RFC 6980)", lambda: neighbour_solicitation(fragment=IPv6ExtHdrFragment(m=1, id=41)), DROP, "nd_invalid"),
    Case("NS in an atomic fragment (RFC 6980)", lambda: neighbour_solicitation(fragment=IPv6ExtHdrFragment(id=42)), DROP, "nd_invalid"),
    Case("NA, hop limit 254 (RFC 4861 7.1.2)", lambda: v6(hlim=254) / ICMPv6ND_NA(tgt=A6, R=0, S=0, O=1), DROP, "nd_invalid"),
    Case("RA, hop limit 64 (RFC 4861 6.1.2)", lambda: v6(hlim=64) / ICMPv6ND_RA(), DROP, "nd_invalid"),
    Case("ICMPv6 echo in a fragment (not ND: passes)", lambda: v6() / IPv6ExtHdrFragment(id=43) / ICMPv6EchoRequest(id=5), PASS),
    # --- tags and ethertypes ----------------------------------------------------------------------------------------
    Case("802.1Q on a carried VLAN", lambda: eth() / Dot1Q(vlan=10) / IP(src=A4, dst=B4) / UDP_OK, PASS),
    Case("priority tag (VLAN 0)", lambda: eth() / Dot1Q(vlan=0, prio=5) / IP(src=A4, dst=B4) / UDP_OK, PASS),
    Case("802.1Q on another VLAN", lambda: eth() / Dot1Q(vlan=30) / IP(src=A4, dst=B4) / UDP_OK, DROP, "vlan_unknown"),
    Case("QinQ (802.1ad over 802.1Q)", lambda: eth() / Dot1AD(vlan=10) / Dot1Q(vlan=20) / IP(src=A4, dst=B4) / UDP_OK, DROP, "vlan_unknown"),
    Case("two 802.1Q tags", lambda: eth() / Dot1Q(vlan=10) / Dot1Q(vlan=20) / IPv6(src=A6, dst=B6) / UDP_OK, DROP, "vlan_unknown"),
    Case("three tags", lambda: eth() / Dot1AD(vlan=10) / Dot1Q(vlan=20) / Dot1Q(vlan=30) / IP(src=A4, dst=B4) / UDP_OK, DROP, "vlan_too_deep"),
    Case("tagged non-IP", lambda: eth() / Dot1Q(vlan=10, type=0x88B5) / Raw(b"x" * 42), DROP, "not_ip"),
    Case("MPLS unicast", lambda: Ether(src="02:aa:00:00:00:01", dst="02:bb:00:00:00:01", type=0x8847) / Raw(b"\x00\x01\x01\x40") / IP(src=A4, dst=B4) / UDP_OK, DROP, "not_ip"),
    Case("802.3 length field instead of an ethertype", lambda: Ether(src="02:aa:00:00:00:01", dst="02:bb:00:00:00:01", type=46) / Raw(b"\xaa\xaa\x03" + b"x" * 43), DROP, "not_ip"),
    # --- frames above the MTU (1500; the mbuf data room is 2048) ----------------------------------------------------
    Case("IPv4 1600-byte datagram over the 1500 MTU", lambda: v4() / UDP(sport=5000, dport=53) / Raw(b"j" * 1572), DROP, "frame_too_big_no_df"),
    Case("IPv4 1500-byte datagram, exactly the MTU", lambda: v4() / UDP(sport=5000, dport=53) / Raw(b"j" * 1472), PASS),
    Case("IPv6 1501-byte datagram over the 1500 MTU", lambda: v6() / UDP(sport=5000, dport=53) / Raw(b"j" * 1453), DROP, "frame_too_big"),
    Case("IPv4 9000-byte jumbo", lambda: v4() / UDP(sport=5000, dport=53) / Raw(b"j" * 8972), DROP, "ipv4_bad_length"),
    Case("IPv4 UDP padded to a 9000-byte frame (trimmed to the datagram)", lambda: v4(len=33) / UDP(sport=5000, dport=53, len=13) / Raw(b"query" + b"P" * 8953), PASS),
    Case("IPv6 9000-byte jumbo", lambda: v6() / UDP(sport=5000, dport=53) / Raw(b"j" * 8952), DROP, "ipv6_bad_length"),
]

FIREWALL = [
    # --- TCP flags of a NEW flow to an allowed destination: only a SYN (ECN bits and PSH/URG aside) opens ----------
    Case("new TCP SYN", lambda: v4() / tcp(sport=41001, flags="S"), PASS),
    Case("new TCP SYN with ECE+CWR (ECN setup)", lambda: v4() / tcp(sport=41002, flags="SEC"), PASS),
    Case("new IPv6 TCP SYN", lambda: v6() / tcp(sport=41003, flags="S"), PASS),
    Case("new TCP SYN+FIN", lambda: v4() / tcp(sport=41011, flags="SF"), DROP, "ct_no_connection"),
    Case("new TCP SYN+RST", lambda: v4() / tcp(sport=41012, flags="SR"), DROP, "ct_no_connection"),
    Case("new TCP no flags (null scan)", lambda: v4() / tcp(sport=41013, flags=""), DROP, "ct_no_connection"),
    Case("new TCP XMAS (FIN+PSH+URG)", lambda: v4() / tcp(sport=41014, flags="FPU"), DROP, "ct_no_connection"),
    Case("new TCP every flag", lambda: v4() / tcp(sport=41015, flags="FSRPAUEC"), DROP, "ct_no_connection"),
    Case("new TCP FIN without ACK", lambda: v4() / tcp(sport=41016, flags="F"), DROP, "ct_no_connection"),
    Case("new TCP FIN+ACK", lambda: v4() / tcp(sport=41017, flags="FA"), DROP, "ct_no_connection"),
    Case("new TCP RST", lambda: v4() / tcp(sport=41018, flags="R"), DROP, "ct_no_connection"),
    Case("new TCP ACK (no loose pickup)", lambda: v4() / tcp(sport=41019, flags="A"), DROP, "ct_no_connection"),
    Case("new TCP SYN+ACK", lambda: v4() / tcp(sport=41020, flags="SA"), DROP, "ct_no_connection"),
    Case("new IPv6 TCP SYN+FIN", lambda: v6() / tcp(sport=41021, flags="SF"), DROP, "ct_no_connection"),
    Case("new IPv6 TCP XMAS", lambda: v6() / tcp(sport=41022, flags="FPU"), DROP, "ct_no_connection"),
    Case("new IPv6 TCP no flags", lambda: v6() / tcp(sport=41023, flags=""), DROP, "ct_no_connection"),
    Case("TCP SYN to a destination no rule allows", lambda: v4(dst=DENIED4) / tcp(sport=41030, flags="S"), DROP, "rule_deny"),
    # --- fragments under tracking (pipeline/fragments.hpp): a first fragment teaches the RX lcore its datagram's
    # ports, later fragments take them and follow their connection; tiny and overlapping ones are dropped ----------
    Case("TCP SYN in a first fragment (opens, as unfragmented)", lambda: v4(flags="MF", id=31) / tcp(sport=41040, flags="S") / Raw(b"a" * 8), PASS),
    Case("tiny first fragment hiding the TCP flags", lambda: v4(flags="MF", id=32, proto=6) / Raw(bytes(tcp(sport=41041, flags="S"))[:8]), DROP, "fragment_invalid"),
    Case("later TCP fragment of that SYN's datagram", lambda: v4(frag=3, id=31, proto=6) / Raw(b"b" * 16), PASS),
    Case("TCP fragment at offset 8 bytes, inside the TCP header (RFC 1858)", lambda: v4(flags="MF", frag=1, id=31, proto=6) / Raw(b"e" * 16), DROP, "fragment_invalid"),
    Case("IPv6 TCP SYN first fragment", lambda: v6() / IPv6ExtHdrFragment(m=1, id=33, nh=6) / tcp(sport=41042, flags="S"), PASS),
    Case("UDP first fragment to an allowed destination", lambda: v4(flags="MF", id=34) / UDP(sport=5001, dport=53, len=40) / Raw(b"a" * 16), PASS),
    Case("UDP later fragment to an allowed destination", lambda: v4(frag=3, id=34, proto=17) / Raw(b"b" * 16), PASS),
    Case("UDP later fragment after the last one went (record gone)", lambda: v4(frag=2, id=34, proto=17) / Raw(b"b" * 8), DROP, "fragment_unmatched"),
    Case("UDP tiny first fragment hiding the ports", lambda: v4(flags="MF", id=35, proto=17) / Raw(b"\x13\x89"), DROP, "fragment_invalid"),
    Case("UDP later fragment whose first never came", lambda: v4(frag=3, id=38, proto=17) / Raw(b"c" * 16), DROP, "fragment_unmatched"),
    Case("UDP first fragment to a destination no rule allows", lambda: v4(dst=DENIED4, flags="MF", id=36) / UDP(sport=5002, dport=53, len=40) / Raw(b"a" * 16), DROP, "rule_deny"),
    Case("its later fragment (no connection: the rules said no)", lambda: v4(dst=DENIED4, frag=3, id=36, proto=17) / Raw(b"c" * 16), DROP, "fragment_unmatched"),
    # --- ICMP errors: pass only when they quote a tracked flow ---------------------------------------------------------
    Case("ICMP error quoting an untracked flow", lambda: icmp_error(bytes(QUOTE_V4)[:28]), DROP, "icmp_unrelated"),
    Case("ICMP error quoting a truncated header", lambda: icmp_error(bytes(QUOTE_V4)[:24]), DROP, "icmp_bad_quote"),
    Case("ICMPv6 error quoting an untracked flow", lambda: v6() / ICMPv6DestUnreach() / Raw(bytes(IPv6(src=B6, dst=A6) / UDP_OK)), DROP, "icmp_unrelated"),
    # --- an ICMP error quoting the first SYN above, a burst later (32 frames on): related, it passes ----------------------
    Case("ICMP error quoting the tracked SYN", lambda: v4(src="192.0.2.1") / ICMP(type=3, code=4) / Raw(bytes(IP(src=A4, dst=B4) / tcp(sport=41001, flags="S"))[:28]), PASS),
]
FIREWALL_CONNECTIONS = 3 + 1 + 3   # the three SYNs, the canaries' one UDP flow, the fragmented datagrams' flows


def canary(index):
    """A valid UDP packet after every case: sluice forwards it, so it survived the case before."""
    return v4(src="10.0.9.1", dst="10.1.9.1") / UDP(sport=20000, dport=9) / Raw(b"canary%d" % index)


def datagram_length(ip, ether_type):
    """The IP datagram's length by its header (IPv4 total length, IPv6 payload length + 40)."""
    if ether_type == b"\x08\x00":
        return int.from_bytes(ip[2:4], "big")
    return 40 + int.from_bytes(ip[4:6], "big")


def forwarded(frame):
    """The frame sluice emits for a frame it passes: tags gone, MACs rewritten, TTL/hop limit minus one, IPv4
    checksum updated, trimmed to the IP datagram (what follows it is padding or garbage), everything else untouched.
    The source MAC is checked apart."""
    data = bytes(frame)
    l3 = 14
    while data[l3 - 2:l3] in (b"\x81\x00", b"\x88\xa8"):
        l3 += 4
    ether_type = data[l3 - 2:l3]
    ip = bytearray(data[l3:])
    ip = ip[:datagram_length(ip, ether_type)]
    if ether_type == b"\x08\x00":
        ip[8] -= 1
        ip = bytearray(ipv4_checksum_fixed(bytes(ip), 0))
    else:
        ip[7] -= 1
    return bytes.fromhex(MAC_P1_PEER.replace(":", "")) + bytes(6) + ether_type + bytes(ip)


def run_battery(tmp_path, cases, **config_extra):
    frames = []
    for index, case in enumerate(cases):
        frames.append(case.frame())
        frames.append(bytes(canary(index)))
    frames.append(bytes(canary(len(cases))))  # one more after the last case
    wrpcap(str(tmp_path / "in0.pcap"), [Ether(f) if len(f) >= 14 else Raw(f) for f in frames])
    wrpcap(str(tmp_path / "in1.pcap"), [])
    config = forwarding_config(tmp_path, f"tx_pcap={tmp_path}/out0.pcap", f"tx_pcap={tmp_path}/out1.pcap", **config_extra)
    sluice = Sluice(tmp_path, config)
    with sluice:
        stats = sluice.wait_accounted(len(frames))
        returncode = sluice.stop()
    log = sluice.log()
    out = [bytes(p) for p in rdpcap(str(tmp_path / "out1.pcap"))]
    # Split the output at the canaries: what leaves before canary i (and after canary i-1) is case i's.
    per_case, current, canaries = [], [], 0
    for packet in out:
        if packet[12:14] == b"\x08\x00" and packet[14 + 12:14 + 16] == bytes([10, 0, 9, 1]):
            per_case.append(current)
            current = []
            canaries += 1
        else:
            current.append(packet)
    return {"stats": stats, "returncode": returncode, "log": log, "per_case": per_case, "canaries": canaries,
            "frames": frames, "trailing": current}


@pytest.fixture(scope="module")
def forward_run(tmp_path_factory):
    return run_battery(tmp_path_factory.mktemp("hostile-forward"), FORWARD)


@pytest.fixture(scope="module")
def firewall_run(tmp_path_factory):
    # The quote of the tracked SYN (the last case) must come at least a burst (32 frames) after that SYN (the first).
    cases = FIREWALL
    assert 2 * (len(cases) - 1) >= 32
    firewall = {
        "default": "deny",
        "rules": [
            {"name": "to-servers-v4", "in_ports": ["p0"], "destination": "10.1.0.0/16", "action": "allow"},
            {"name": "to-servers-v6", "in_ports": ["p0"], "destination": "2001:db8:1::/48", "action": "allow"},
        ],
    }
    result = run_battery(tmp_path_factory.mktemp("hostile-firewall"), cases, firewall=firewall)
    result["cases"] = cases
    return result


def check_run(run, cases):
    assert run["returncode"] == 0, run["log"]
    assert "mbufs returned" in run["log"] and "leaked" not in run["log"], run["log"]
    assert run["canaries"] == len(cases) + 1, "a canary was lost: sluice stopped forwarding after a case"
    assert run["trailing"] == [] and run["per_case"][len(cases)] == []
    stats = run["stats"]
    expected = collections.Counter(c.reason for c in cases if c.outcome == DROP)
    drops = {k[len("drop/"):]: v for k, v in stats.items() if k.startswith("drop/") and v}
    assert drops == dict(expected)
    assert stats["drops"] == sum(expected.values())
    assert stats["port/p0/rx_packets"] == len(run["frames"])


def check_case(run, cases, case):
    index = cases.index(case)
    got = run["per_case"][index]  # what left before the canary that followed the case
    if case.outcome == DROP:
        assert got == [], f"{case.name}: expected a drop ({case.reason}), it was forwarded"
        return
    assert len(got) == 1, f"{case.name}: expected it forwarded, got {len(got)} packets"
    want = forwarded(run["frames"][2 * index])
    assert got[0][:6] == want[:6] and got[0][12:] == want[12:], f"{case.name}:\n got  {got[0].hex()}\n want {want.hex()}"


def test_forward_battery_survives_counts_and_leaks_nothing(forward_run):
    check_run(forward_run, FORWARD)


@pytest.mark.parametrize("case", FORWARD, ids=[c.name for c in FORWARD])
def test_forward_case(forward_run, case):
    check_case(forward_run, FORWARD, case)


TRIMMED = [c for c in FORWARD if "trimmed" in c.name]


@pytest.mark.parametrize("case", TRIMMED, ids=[c.name for c in TRIMMED])
def test_trailing_bytes_leave_trimmed_to_the_datagram(forward_run, case):
    """A frame longer than its datagram leaves as Ethernet + exactly the datagram (the output pcap's frame length)."""
    sent = forward_run["frames"][2 * FORWARD.index(case)]
    ether_type = sent[12:14]
    datagram = datagram_length(sent[14:], ether_type)
    assert len(sent) > 14 + datagram
    got = forward_run["per_case"][FORWARD.index(case)]
    assert len(got) == 1 and len(got[0]) == 14 + datagram, f"{case.name}: {len(got[0]) if got else None} bytes out"


def test_firewall_battery_survives_counts_and_leaks_nothing(firewall_run):
    check_run(firewall_run, firewall_run["cases"])
    # Only the SYNs, the canaries' flow and the fragmented SYNs and UDP datagram opened connections: no bad flag set did.
    assert firewall_run["stats"]["conn_inserts"] == FIREWALL_CONNECTIONS


@pytest.mark.parametrize("case", FIREWALL, ids=[c.name for c in FIREWALL])
def test_firewall_case(firewall_run, case):
    check_case(firewall_run, firewall_run["cases"], case)


def test_invalid_neighbour_advertisements_are_never_learned(tmp_path):
    """p1 forwards to a next hop given by address, which sluice must resolve with ND. Advertisements for it in a
    fragment (RFC 6980) or with a hop limit below 255 (RFC 4861 7.1.2), each with a MAC of its own, are dropped as
    nd_invalid and never learned; the valid one after them is (so learning works in this run)."""
    next_hop, good_mac = "2001:db8:1::99", "02:00:00:00:0e:01"
    bad_macs = ["02:00:00:00:0b:01", "02:00:00:00:0b:02", "02:00:00:00:0b:03"]

    def advertisement(mac, hlim=255, fragment=None):
        ip = IPv6(src=next_hop, dst="ff02::1", hlim=hlim)
        nd = ICMPv6ND_NA(tgt=next_hop, R=0, S=0, O=1) / ICMPv6NDOptDstLLAddr(lladdr=mac)
        return Ether(src=mac, dst="33:33:00:00:00:01") / (ip / fragment / nd if fragment is not None else ip / nd)

    frames = [advertisement(bad_macs[0], fragment=IPv6ExtHdrFragment(m=1, id=51)),
              advertisement(bad_macs[1], fragment=IPv6ExtHdrFragment(id=52)),
              advertisement(bad_macs[2], hlim=64),
              advertisement(good_mac)]
    wrpcap(str(tmp_path / "in0.pcap"), [])
    wrpcap(str(tmp_path / "in1.pcap"), frames)
    config = forwarding_config(tmp_path, f"tx_pcap={tmp_path}/out0.pcap", f"tx_pcap={tmp_path}/out1.pcap")
    config["ports"][1]["addresses"] = ["2001:db8:1::1/64"]
    config["forward"][0] = {"from": "p0", "to": "p1", "next_hop": next_hop}
    sluice = Sluice(tmp_path, config)
    with sluice:
        stats = sluice.wait_accounted(len(frames))
        wait_until(lambda: f"neighbour {next_hop} is at {good_mac}" in sluice.log(), timeout=10,
                   what="the valid advertisement learned")
        assert sluice.stop() == 0, sluice.log()
    log = sluice.log()
    for mac in bad_macs:
        assert mac not in log, f"{mac} was learned:\n{log}"
    assert stats.get("drop/nd_invalid") == 3 and stats["drop/neighbour_frame"] == 1, stats

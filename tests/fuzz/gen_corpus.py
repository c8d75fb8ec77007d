#!/usr/bin/python3
"""Writes the seed corpora of the packet fuzzers (tests/fuzz/corpus/parse and corpus/icmp_error) with scapy.
The output is committed; rerun after changing this script:  /usr/bin/python3 tests/fuzz/gen_corpus.py
  parse:       whole Ethernet frames, one per file.
  icmp_error:  fuzz_icmp_error's input: a shape byte, the ICMP code, then the quoted bytes (see fuzz_icmp_error.cpp)."""

from pathlib import Path

from scapy.all import (AH, ARP, ICMP, IP, SCTP, TCP, UDP, Dot1AD, Dot1Q, Ether, ICMPv6DestUnreach, ICMPv6EchoReply,
                       ICMPv6EchoRequest, ICMPv6PacketTooBig, ICMPv6TimeExceeded, IPerror, IPv6, IPv6ExtHdrDestOpt,
                       IPv6ExtHdrFragment, IPv6ExtHdrHopByHop, IPv6ExtHdrRouting, Padding, TCPerror, UDPerror, GRE, raw)

here = Path(__file__).resolve().parent
L2 = Ether(dst="02:00:00:00:00:01", src="02:00:00:00:00:02")
A4, B4 = "10.0.0.1", "10.1.0.1"
A6, B6 = "2001:db8::1", "2001:db8:1::1"


def frames():
    yield "v4-tcp-syn", L2 / IP(src=A4, dst=B4) / TCP(sport=40000, dport=80, flags="S")
    yield "v4-tcp-options", L2 / IP(src=A4, dst=B4, options=[b"\x01\x01\x01\x00"]) / TCP(
        sport=40000, dport=443, flags="PA", options=[("MSS", 1460), ("SAckOK", b""), ("Timestamp", (1, 2))]) / b"GET /"
    yield "v4-udp-dns", L2 / IP(src=A4, dst=B4) / UDP(sport=5353, dport=53) / b"\x12\x34\x01\x00"
    yield "v4-udp-nocsum", L2 / IP(src=A4, dst=B4) / UDP(sport=1000, dport=2000, chksum=0) / (b"x" * 4)
    yield "v4-udp-padded", L2 / IP(src=A4, dst=B4) / UDP(sport=1, dport=2) / Padding(b"\0" * 18)  # to 60 bytes
    yield "v4-icmp-echo", L2 / IP(src=A4, dst=B4) / ICMP(type=8, id=0x1234, seq=1) / b"ping"
    yield "v4-icmp-echo-reply", L2 / IP(src=B4, dst=A4) / ICMP(type=0, id=0x1234, seq=1)
    yield "v4-icmp-unreach-udp", L2 / IP(src=B4, dst=A4) / ICMP(type=3, code=3) / IPerror(src=A4, dst=B4) / UDPerror(
        sport=5353, dport=53)
    yield "v4-icmp-ttl-tcp", L2 / IP(src="192.0.2.9", dst=A4) / ICMP(type=11) / IPerror(src=A4, dst=B4) / TCPerror(
        sport=40000, dport=80, flags="S")
    yield "v4-icmp-needfrag-tcp", L2 / IP(src="192.0.2.9", dst=A4) / ICMP(type=3, code=4, nexthopmtu=1400) / raw(
        IP(src=A4, dst=B4) / TCP(sport=40000, dport=80))[:28]
    yield "v4-frag-first", L2 / IP(src=A4, dst=B4, flags="MF", id=7) / UDP(sport=1, dport=2, len=1000) / (b"a" * 64)
    yield "v4-frag-later", L2 / IP(src=A4, dst=B4, frag=8, id=7, proto=17) / (b"b" * 64)
    yield "v4-gre", L2 / IP(src=A4, dst=B4) / GRE() / IP(src="1.1.1.1", dst="2.2.2.2") / UDP()
    yield "v4-sctp", L2 / IP(src=A4, dst=B4) / SCTP(sport=3868, dport=3868)
    yield "vlan-v4-tcp", L2 / Dot1Q(vlan=10) / IP(src=A4, dst=B4) / TCP(sport=1234, dport=22, flags="A")
    yield "qinq-v4-udp", L2 / Dot1AD(vlan=100) / Dot1Q(vlan=10) / IP(src=A4, dst=B4) / UDP(sport=67, dport=68)
    yield "qinq-v6-tcp", L2 / Dot1AD(vlan=100) / Dot1Q(vlan=10) / IPv6(src=A6, dst=B6) / TCP(sport=1, dport=2)
    yield "v6-tcp-syn", L2 / IPv6(src=A6, dst=B6) / TCP(sport=40000, dport=80, flags="S")
    yield "v6-udp", L2 / IPv6(src=A6, dst=B6) / UDP(sport=4000, dport=53) / b"q"
    yield "v6-echo", L2 / IPv6(src=A6, dst=B6) / ICMPv6EchoRequest(id=77, seq=1)
    yield "v6-echo-reply", L2 / IPv6(src=B6, dst=A6) / ICMPv6EchoReply(id=77, seq=1)
    yield "v6-unreach-udp", L2 / IPv6(src=B6, dst=A6) / ICMPv6DestUnreach(code=4) / IPv6(src=A6, dst=B6) / UDP(
        sport=4000, dport=53)
    yield "v6-toobig-tcp", L2 / IPv6(src="2001:db8:ff::1", dst=A6) / ICMPv6PacketTooBig(mtu=1280) / raw(
        IPv6(src=A6, dst=B6) / TCP(sport=40000, dport=443))[:48]
    yield "v6-hbh-dst-tcp", L2 / IPv6(src=A6, dst=B6) / IPv6ExtHdrHopByHop() / IPv6ExtHdrDestOpt() / TCP(
        sport=5, dport=6)
    yield "v6-routing-udp", L2 / IPv6(src=A6, dst=B6) / IPv6ExtHdrRouting(addresses=[B6]) / UDP(sport=7, dport=8)
    yield "v6-frag-first", L2 / IPv6(src=A6, dst=B6) / IPv6ExtHdrFragment(m=1, id=9) / UDP(sport=1, dport=2) / (b"c" * 32)
    yield "v6-frag-later", L2 / IPv6(src=A6, dst=B6) / IPv6ExtHdrFragment(offset=5, id=9, nh=17) / (b"d" * 32)
    yield "v6-ah-tcp", L2 / IPv6(src=A6, dst=B6) / AH(nh=6, payloadlen=4, icv=b"\0" * 12) / TCP(sport=9, dport=10)
    yield "v6-time-exceeded-echo", L2 / IPv6(src="2001:db8:ff::1", dst=A6) / ICMPv6TimeExceeded() / IPv6(
        src=A6, dst=B6) / ICMPv6EchoRequest(id=5)
    yield "arp", L2 / ARP(psrc=A4, pdst=B4)  # not IP: dropped


def quotes():
    # (name, shape byte, code, quoted bytes); shape: bit 0 IPv6, bits 1-3 type index, bits 4-5 vlans, bits 6-7 padding.
    yield "v4-udp", 0x00, 3, raw(IP(src=A4, dst=B4) / UDP(sport=5353, dport=53))[:28]
    yield "v4-tcp-whole", 0x02, 0, raw(IP(src=A4, dst=B4) / TCP(sport=40000, dport=80, flags="S"))
    yield "v4-icmp-echo", 0x10, 1, raw(IP(src=A4, dst=B4) / ICMP(type=8, id=0x4242))
    yield "v4-ipopts-udp-padded", 0x40, 3, raw(IP(src=A4, dst=B4, options=[b"\x01\x01\x01\x00"]) / UDP(sport=1, dport=2))[:32]
    yield "v4-later-frag", 0x20, 4, raw(IP(src=A4, dst=B4, frag=100, proto=6) / (b"\0" * 8))
    yield "v4-first-frag", 0x00, 4, raw(IP(src=A4, dst=B4, flags="MF", proto=17) / UDP(sport=9, dport=10))[:28]
    yield "v4-sctp", 0x00, 3, raw(IP(src=A4, dst=B4) / SCTP(sport=3868, dport=3869))[:28]
    yield "v4-gre", 0x00, 2, raw(IP(src=A4, dst=B4) / GRE())
    yield "v6-tcp", 0x01, 0, raw(IPv6(src=A6, dst=B6) / TCP(sport=40000, dport=443))[:48]
    yield "v6-udp-whole-vlan", 0x13, 0, raw(IPv6(src=A6, dst=B6) / UDP(sport=4000, dport=53) / b"q")
    yield "v6-echo", 0x05, 0, raw(IPv6(src=A6, dst=B6) / ICMPv6EchoRequest(id=5))
    yield "v6-ext-udp", 0x81, 0, raw(IPv6(src=A6, dst=B6) / IPv6ExtHdrDestOpt() / UDP(sport=1, dport=2))
    yield "v6-short", 0x01, 0, raw(IPv6(src=A6, dst=B6) / TCP(sport=1, dport=2))[:44]


def main():
    parse_dir = here / "corpus" / "parse"
    icmp_dir = here / "corpus" / "icmp_error"
    for d in (parse_dir, icmp_dir):
        d.mkdir(parents=True, exist_ok=True)
        for old in d.glob("*.bin"):
            old.unlink()
    for name, packet in frames():
        (parse_dir / f"{name}.bin").write_bytes(raw(packet))
    for name, shape, code, quote in quotes():
        (icmp_dir / f"{name}.bin").write_bytes(bytes([shape, code]) + quote)
    print(f"wrote {len(list(parse_dir.glob('*.bin')))} frames to {parse_dir}, "
          f"{len(list(icmp_dir.glob('*.bin')))} quotes to {icmp_dir}")


if __name__ == "__main__":
    main()

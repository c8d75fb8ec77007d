"""Golden-packet tests of the backbone on net_pcap ports: real frames in, real frames out.

Each case is (description, input frame, expected verdict): verdict is a drop reason, or the port the packet must
leave on. Forwarded packets are checked field by field (MACs, TTL/hop limit, IPv4 checksum, payload)."""

import logging
import re

import pytest

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import (ARP, ICMP, IP, TCP, UDP, Dot1Q, Ether, ICMPv6EchoRequest, ICMPv6PacketTooBig, IPv6,
                       IPv6ExtHdrFragment, IPv6ExtHdrHopByHop, Raw, fragment, rdpcap, wrpcap)

from scapy.all import conf

from sluice_harness import Sluice

MAC_P0_PEER = "02:00:00:00:00:01"   # next hop out of port p0
MAC_P1_PEER = "02:00:00:00:01:01"   # next hop out of port p1
SRC_MAC = "02:aa:00:00:00:01"


def eth():
    return Ether(src=SRC_MAC, dst="02:bb:00:00:00:01")


def truncated(frame, length):
    """The first `length` bytes of a frame, written to the pcap as they are."""
    return conf.raw_layer(bytes(frame)[:length])


def raw_ipv4(frame, **header_bytes):
    """Builds a frame, then corrupts IPv4 header bytes by offset (from the IP header) after checksumming."""
    data = bytearray(bytes(frame))
    for offset, value in header_bytes.items():
        data[14 + int(offset[1:])] = value
    return Ether(bytes(data))


GOOD_P0 = [
    ("IPv4 TCP SYN", eth() / IP(src="10.0.0.1", dst="10.1.0.1", ttl=64) / TCP(sport=1111, dport=80, flags="S")),
    ("IPv4 TCP with payload", eth() / IP(src="10.0.0.2", dst="10.1.0.1", ttl=5) / TCP(sport=2222, dport=443) / Raw(b"x" * 200)),
    ("IPv4 UDP", eth() / IP(src="10.0.0.3", dst="10.1.0.2") / UDP(sport=5353, dport=53) / Raw(b"query")),
    ("IPv4 ICMP echo", eth() / IP(src="10.0.0.4", dst="10.1.0.3") / ICMP(id=7, seq=1) / Raw(b"ping")),
    ("IPv4 with options", eth() / IP(src="10.0.0.5", dst="10.1.0.4", options=b"\x01\x01\x01\x00") / UDP(sport=1, dport=2)),
    ("IPv4 TTL 2 survives", eth() / IP(src="10.0.0.6", dst="10.1.0.5", ttl=2) / UDP(sport=3, dport=4)),
    ("IPv4 first fragment", eth() / IP(src="10.0.0.7", dst="10.1.0.6", flags="MF", id=99) / Raw(b"a" * 24)),
    ("IPv4 later fragment", eth() / IP(src="10.0.0.7", dst="10.1.0.6", frag=3, id=99, proto=17) / Raw(b"b" * 24)),
    ("IPv4 on p0's VLAN 100 (leaves p1 untagged)", eth() / Dot1Q(vlan=100) / IP(src="10.0.0.8", dst="10.1.0.7") / TCP(sport=5, dport=6)),
    ("IPv6 TCP", eth() / IPv6(src="2001:db8::1", dst="2001:db8:1::1", hlim=64) / TCP(sport=1234, dport=80)),
    ("IPv6 UDP via hop-by-hop", eth() / IPv6(src="2001:db8::2", dst="2001:db8:1::1") / IPv6ExtHdrHopByHop() / UDP(sport=9, dport=10)),
    ("IPv6 ICMPv6 echo", eth() / IPv6(src="2001:db8::3", dst="2001:db8:1::2") / ICMPv6EchoRequest(id=3)),
    ("IPv6 fragment", eth() / IPv6(src="2001:db8::4", dst="2001:db8:1::3") / IPv6ExtHdrFragment(offset=10, nh=17) / Raw(b"c" * 16)),
]

BAD_P0 = [
    ("runt (10 bytes)", truncated(eth() / IP(), 10), "l2_truncated"),
    ("ARP for an address not sluice's: taken, not forwarded", eth() / ARP(pdst="10.1.0.1"), "neighbour_frame"),
    ("neither IP nor ARP (local experimental ethertype)", Ether(src=SRC_MAC, dst="02:bb:00:00:00:01", type=0x88B5) / Raw(b"x" * 46), "not_ip"),
    ("truncated IPv4 header", truncated(eth() / IP(src="10.0.0.9", dst="10.1.0.9"), 14 + 12), "ipv4_truncated"),
    ("IHL below 5", raw_ipv4(eth() / IP(src="10.0.0.9", dst="10.1.0.9") / UDP(), o0=0x44), "ipv4_bad_ihl"),
    ("IPv4 version 5", raw_ipv4(eth() / IP(src="10.0.0.9", dst="10.1.0.9") / UDP(), o0=0x55), "ipv4_bad_version"),
    ("total length beyond the frame", eth() / IP(src="10.0.0.9", dst="10.1.0.9", len=400) / UDP(), "ipv4_bad_length"),
    ("bad IPv4 checksum", eth() / IP(src="10.0.0.9", dst="10.1.0.9", chksum=0x1234) / UDP(), "ipv4_bad_checksum"),
    ("IPv4 TTL 1", eth() / IP(src="10.0.0.9", dst="10.1.0.9", ttl=1) / UDP(), "ttl_expired"),
    ("IPv4 TTL 0", eth() / IP(src="10.0.0.9", dst="10.1.0.9", ttl=0) / UDP(), "ttl_expired"),
    ("TCP data offset 4", eth() / IP(src="10.0.0.9", dst="10.1.0.9") / TCP(dataofs=4), "tcp_bad_offset"),
    ("TCP header cut short", truncated(eth() / IP(src="10.0.0.9", dst="10.1.0.9", len=30) / TCP(), 44), "l4_truncated"),
    ("UDP length beyond the packet", eth() / IP(src="10.0.0.9", dst="10.1.0.9") / UDP(len=100), "udp_bad_length"),
    ("truncated IPv6 header", truncated(eth() / IPv6(), 14 + 30), "ipv6_truncated"),
    ("IPv6 payload length beyond the frame", eth() / IPv6(src="2001:db8::9", dst="2001:db8:1::9", plen=500) / UDP(), "ipv6_bad_length"),
    ("IPv6 hop limit 1", eth() / IPv6(src="2001:db8::9", dst="2001:db8:1::9", hlim=1) / UDP(), "ttl_expired"),
]

GOOD_P1 = [
    ("reply IPv4 TCP SYN-ACK", eth() / IP(src="10.1.0.1", dst="10.0.0.1", ttl=64) / TCP(sport=80, dport=1111, flags="SA")),
    ("reply IPv6 TCP", eth() / IPv6(src="2001:db8:1::1", dst="2001:db8::1") / TCP(sport=80, dport=1234, flags="SA")),
]


def forwarding_config(tmp_path, p0_tx, p1_tx, **extra):
    config = {
        "ports": [
            # p0 carries the VLANs the batteries' tagged frames use; a frame of any other VLAN is dropped.
            {"name": "p0", "device": f"net_pcap0,rx_pcap={tmp_path}/in0.pcap,{p0_tx}",
             "vlans": [{"id": 5}, {"id": 10}, {"id": 100}]},
            {"name": "p1", "device": f"net_pcap1,rx_pcap={tmp_path}/in1.pcap,{p1_tx}"},
        ],
        "lcores": [{"id": 1, "roles": ["rx", "worker"]}],
        "forward": [
            {"from": "p0", "to": "p1", "next_hop_mac": MAC_P1_PEER},
            {"from": "p1", "to": "p0", "next_hop_mac": MAC_P0_PEER},
        ],
    }
    config.update(extra)
    return config


def expected_output(frame, next_hop, port_mac):
    """The exact frame sluice must emit for a valid input: untagged (p1 has no VLAN), MACs rewritten, TTL or hop limit
    decremented, IPv4 header checksum valid, everything else untouched."""
    inner = (frame[Dot1Q].payload if Dot1Q in frame else frame.payload).copy()
    if isinstance(inner, IP):
        inner.ttl -= 1
        del inner.chksum
    else:
        inner.hlim -= 1
    return Ether(src=port_mac, dst=next_hop) / inner


def check_forwarded(sent, received, next_hop, port_mac):
    assert len(received) == len(sent), f"expected {len(sent)} packets, got {len(received)}"
    for (description, frame), got in zip(sent, received):
        want = expected_output(frame, next_hop, port_mac)
        assert bytes(got) == bytes(want), f"{description}:\n got  {bytes(got).hex()}\n want {bytes(want).hex()}"


def test_forwards_valid_frames_and_counts_every_drop(tmp_path):
    wrpcap(str(tmp_path / "in0.pcap"), [f for _, f in GOOD_P0] + [f for _, f, _ in BAD_P0])
    wrpcap(str(tmp_path / "in1.pcap"), [f for _, f in GOOD_P1])
    sluice = Sluice(tmp_path, forwarding_config(tmp_path, f"tx_pcap={tmp_path}/out0.pcap", f"tx_pcap={tmp_path}/out1.pcap"))
    with sluice:
        total = len(GOOD_P0) + len(BAD_P0) + len(GOOD_P1)
        stats = sluice.wait_accounted(total)
        assert sluice.stop() == 0, sluice.log()
    log = sluice.log()
    assert "mbufs returned" in log and "leaked" not in log

    assert stats["port/p0/rx_packets"] == len(GOOD_P0) + len(BAD_P0)
    assert stats["port/p1/rx_packets"] == len(GOOD_P1)
    assert stats["port/p1/tx_packets"] == len(GOOD_P0)
    assert stats["port/p0/tx_packets"] == len(GOOD_P1)
    expected_drops = {}
    for _, _, reason in BAD_P0:
        expected_drops[reason] = expected_drops.get(reason, 0) + 1
    drops = {k[len("drop/"):]: v for k, v in stats.items() if k.startswith("drop/") and v}
    assert drops == expected_drops
    assert stats["drops"] == len(BAD_P0)

    out1 = rdpcap(str(tmp_path / "out1.pcap"))
    out0 = rdpcap(str(tmp_path / "out0.pcap"))
    p1_mac = out1[0].src
    p0_mac = out0[0].src
    assert p0_mac != p1_mac
    check_forwarded(GOOD_P0, out1, MAC_P1_PEER, p1_mac)
    check_forwarded(GOOD_P1, out0, MAC_P0_PEER, p0_mac)


def test_a_packet_over_the_egress_mtu_gets_a_too_big_error_back(tmp_path):
    """p1's MTU is 1400. A packet that does not fit is dropped (frame_too_big), and its sender hears why, as from any
    router: IPv4 with DF gets ICMP "fragmentation needed" with the next-hop MTU (RFC 1191), IPv6 ICMPv6 "packet too
    big" (RFC 8201). IPv4 without DF allowed fragmentation, which sluice does not do: it only goes (frame_too_big_no_df,
    a reason of its own: nobody hears of that loss but the counters). The error leaves
    by the port the packet came in on, to the sender's MAC, from the packet's destination (sluice answers as the
    reject rules do), TTL 64, and quotes the packet as it came: IPv4 header + 8 bytes (RFC 792), IPv6 as much as
    fits in 1280 bytes (RFC 4443)."""
    df = eth() / IP(src="10.0.0.1", dst="10.1.0.1", flags="DF", id=7) / UDP(sport=1000, dport=53) / Raw(b"d" * 1400)
    no_df = eth() / IP(src="10.0.0.2", dst="10.1.0.1", id=8) / UDP(sport=1001, dport=53) / Raw(b"n" * 1400)
    fits = eth() / IP(src="10.0.0.3", dst="10.1.0.1", flags="DF") / UDP(sport=1002, dport=53) / Raw(b"f" * 1372)
    big6 = eth() / IPv6(src="2001:db8::1", dst="2001:db8:1::1") / UDP(sport=1003, dport=53) / Raw(b"s" * 1400)
    wrpcap(str(tmp_path / "in0.pcap"), [df, no_df, fits, big6])
    wrpcap(str(tmp_path / "in1.pcap"), [])
    config = forwarding_config(tmp_path, f"tx_pcap={tmp_path}/out0.pcap", f"tx_pcap={tmp_path}/out1.pcap")
    config["ports"][1]["mtu"] = 1400
    sluice = Sluice(tmp_path, config)
    with sluice:
        stats = sluice.wait_accounted(4)
        assert sluice.stop() == 0, sluice.log()
    p0_mac = dict(re.findall(r"port '(\w+)':.*? mac ([0-9a-f:]{17})", sluice.log()))["p0"]
    assert stats["drop/frame_too_big"] == 2 and stats["drop/frame_too_big_no_df"] == 1 and stats["drops"] == 3
    assert stats["too_big_sent"] == 2
    assert stats["port/p1/tx_packets"] == 1 and stats["port/p0/tx_packets"] == 2
    out1 = rdpcap(str(tmp_path / "out1.pcap"))
    assert len(out1) == 1 and bytes(out1[0][UDP].payload) == b"f" * 1372
    back = rdpcap(str(tmp_path / "out0.pcap"))
    want = [Ether(src=p0_mac, dst=SRC_MAC) / IP(src="10.1.0.1", dst="10.0.0.1", ttl=64, id=0) /
            ICMP(type=3, code=4, nexthopmtu=1400) / Raw(bytes(df[IP])[:28]),
            Ether(src=p0_mac, dst=SRC_MAC) / IPv6(src="2001:db8:1::1", dst="2001:db8::1", hlim=64) /
            ICMPv6PacketTooBig(mtu=1400) / Raw(bytes(big6[IPv6])[:1280 - 48])]
    assert len(back) == 2
    for got, wanted in zip(back, want):
        assert bytes(got) == bytes(wanted), f"\n got  {bytes(got).hex()}\n want {bytes(wanted).hex()}"


def test_an_expiring_ttl_gets_time_exceeded_from_the_ingress_ports_address(tmp_path):
    """A packet whose TTL or hop limit expires at sluice gets ICMP "time exceeded in transit" back, as from any router
    (traceroute shows the hop), from the ingress port's own address, quoting the packet as it came. A port without
    `addresses` has nothing to send it from (answering from the destination would show a hop that is not there): it is
    only dropped. A multicast packet is never routed, so it never expires here either."""
    from scapy.all import ICMPv6TimeExceeded
    ttl1 = eth() / IP(src="10.0.0.1", dst="10.1.0.1", ttl=1, id=9) / UDP(sport=33434, dport=33435) / Raw(b"t" * 40)
    hop1 = eth() / IPv6(src="2001:db8::1", dst="2001:db8:1::1", hlim=1) / UDP(sport=33434, dport=33436) / Raw(b"h")
    ttl2 = eth() / IP(src="10.0.0.1", dst="10.1.0.1", ttl=2) / UDP(sport=33434, dport=33437)
    mdns = eth() / IP(src="10.0.0.1", dst="224.0.0.251", ttl=1) / UDP(sport=5353, dport=5353)
    unnamed = eth() / IP(src="10.1.0.1", dst="10.0.0.1", ttl=1) / UDP(sport=33434, dport=33438)  # into p1: no address
    wrpcap(str(tmp_path / "in0.pcap"), [ttl1, hop1, ttl2, mdns])
    wrpcap(str(tmp_path / "in1.pcap"), [unnamed])
    config = forwarding_config(tmp_path, f"tx_pcap={tmp_path}/out0.pcap", f"tx_pcap={tmp_path}/out1.pcap")
    config["ports"][0]["addresses"] = ["10.0.0.254/24", "2001:db8::fe/64"]
    sluice = Sluice(tmp_path, config)
    with sluice:
        stats = sluice.wait_accounted(5)
        assert sluice.stop() == 0, sluice.log()
    p0_mac = dict(re.findall(r"port '(\w+)':.*? mac ([0-9a-f:]{17})", sluice.log()))["p0"]
    assert stats["drop/ttl_expired"] == 3 and stats["drop/multicast_not_routed"] == 1 and stats["drops"] == 4
    assert stats["time_exceeded_sent"] == 2
    [forwarded] = rdpcap(str(tmp_path / "out1.pcap"))
    assert forwarded[IP].ttl == 1 and forwarded[UDP].dport == 33437
    want = [Ether(src=p0_mac, dst=SRC_MAC) / IP(src="10.0.0.254", dst="10.0.0.1", ttl=64, id=0) /
            ICMP(type=11, code=0) / Raw(bytes(ttl1[IP])[:28]),
            Ether(src=p0_mac, dst=SRC_MAC) / IPv6(src="2001:db8::fe", dst="2001:db8::1", hlim=64) /
            ICMPv6TimeExceeded(code=0) / Raw(bytes(hop1[IPv6]))]
    back = rdpcap(str(tmp_path / "out0.pcap"))
    assert len(back) == 2
    for got, wanted in zip(back, want):
        assert bytes(got) == bytes(wanted), f"\n got  {bytes(got).hex()}\n want {bytes(wanted).hex()}"


def test_port_without_forward_entry_drops_as_no_route(tmp_path):
    frames = [eth() / IP(src="10.0.0.1", dst="10.1.0.1") / UDP(sport=i, dport=9) for i in range(1, 21)]
    wrpcap(str(tmp_path / "in0.pcap"), [])
    wrpcap(str(tmp_path / "in1.pcap"), frames)
    config = forwarding_config(tmp_path, f"tx_pcap={tmp_path}/out0.pcap", f"tx_pcap={tmp_path}/out1.pcap")
    config["forward"] = config["forward"][:1]  # only p0 -> p1
    sluice = Sluice(tmp_path, config)
    with sluice:
        stats = sluice.wait_accounted(len(frames))
        assert sluice.stop() == 0, sluice.log()
    assert stats["drop/no_route"] == len(frames)
    assert len(rdpcap(str(tmp_path / "out0.pcap"))) == 0


@pytest.mark.parametrize("layout", ["rx+worker,worker", "rx,worker,worker"])
def test_both_directions_of_a_flow_reach_the_same_worker(tmp_path, layout):
    """Two workers, each with its own TX queue on every port (one tx_pcap per queue): every packet of a flow, in
    both directions, must leave through the queue of one worker."""
    flows = 64
    requests, replies = [], []
    for i in range(flows):
        if i % 2:
            a, b = f"2001:db8::{i + 1:x}", f"2001:db8:1::{i + 1:x}"
            requests.append(eth() / IPv6(src=a, dst=b) / TCP(sport=10000 + i, dport=80))
            replies.append(eth() / IPv6(src=b, dst=a) / TCP(sport=80, dport=10000 + i, flags="SA"))
        else:
            a, b = f"10.0.{i}.1", f"10.1.{i}.1"
            requests.append(eth() / IP(src=a, dst=b) / UDP(sport=10000 + i, dport=53))
            replies.append(eth() / IP(src=b, dst=a) / UDP(sport=53, dport=10000 + i))
    wrpcap(str(tmp_path / "in0.pcap"), requests * 3)
    wrpcap(str(tmp_path / "in1.pcap"), replies * 3)
    tx = lambda port: ",".join(f"tx_pcap={tmp_path}/out{port}_q{q}.pcap" for q in range(2))
    roles = {"rx+worker,worker": [["rx", "worker"], ["worker"]], "rx,worker,worker": [["rx"], ["worker"], ["worker"]]}[layout]
    config = forwarding_config(tmp_path, tx(0), tx(1), dataplane={"idle_sleep_us": 50})
    config["lcores"] = [{"id": i + 1, "roles": r} for i, r in enumerate(roles)]
    lcores = "0@0," + ",".join(f"{i + 1}@1" for i in range(len(roles)))
    sluice = Sluice(tmp_path, config, lcores=lcores)
    with sluice:
        stats = sluice.wait_accounted(6 * flows, timeout=30)
        assert sluice.stop() == 0, sluice.log()
    assert stats["drops"] == 0
    assert stats["ring_enqueued"] > 0  # packets really crossed rings

    def key(p):
        ip = p[IP] if IP in p else p[IPv6]
        l4 = p[TCP] if TCP in p else p[UDP]
        ends = sorted([(ip.src, l4.sport), (ip.dst, l4.dport)])
        return tuple(ends)

    worker_of_flow = {}
    seen = 0
    for port in (0, 1):
        for queue in range(2):
            for p in rdpcap(str(tmp_path / f"out{port}_q{queue}.pcap")):
                seen += 1
                assert worker_of_flow.setdefault(key(p), queue) == queue, f"flow {key(p)} left through two workers"
    assert seen == 6 * flows
    assert len(worker_of_flow) == flows
    assert set(worker_of_flow.values()) == {0, 1}, "both workers must carry flows"


def crc32c(crc, data):
    """CRC32C as SSE4.2's crc32 instruction computes it (reflected, no inversion): rte_hash_crc_4byte's steps."""
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc


def crc_flow_hash(src, dst, sport, dport, proto):
    """The unkeyed CRC32C flow hash of an IPv4 flow whose source is the lower endpoint, byte for byte as sluice's
    stable_flow_hash (lib/common/five_tuple.hpp) computes it."""
    h = crc32c((proto << 8) | 4, src)
    h = crc32c(h, dst)
    return crc32c(h, dport.to_bytes(2, "big") + sport.to_bytes(2, "big"))


def inputs_sharing_one_crc(base, flips, hash_of, count_log2):
    """2^count_log2 inputs with one CRC32C hash, built as a sender would: over inputs of one length CRC32C is affine
    in their bits, so the bit flips whose effects on the hash cancel are a kernel over GF(2). base: a list of
    bytearrays (the input's fields); flips: (field, byte, bit) triples; hash_of: the hash of such a list."""

    def flipped(mask):
        fields = [bytearray(f) for f in base]
        for k, (f, i, b) in enumerate(flips):
            if mask >> k & 1:
                fields[f][i] ^= 1 << b
        return fields

    at_base = hash_of(base)
    pivots, kernel = {}, []  # pivots: highest bit of an effect -> (effect, flips); kernel: flips of no effect
    for k in range(len(flips)):
        if len(kernel) == count_log2:
            break
        effect, mask = hash_of(flipped(1 << k)) ^ at_base, 1 << k
        while effect:
            bit = effect.bit_length() - 1
            if bit not in pivots:
                pivots[bit] = (effect, mask)
                break
            effect ^= pivots[bit][0]
            mask ^= pivots[bit][1]
        else:
            kernel.append(mask)
    inputs = []
    for combo in range(1 << count_log2):
        mask = 0
        for j in range(count_log2):
            if combo >> j & 1:
                mask ^= kernel[j]
        inputs.append(flipped(mask))
    assert len({hash_of(i) for i in inputs}) == 1, "the crafted inputs must share one CRC32C hash"
    return inputs


def flows_sharing_one_crc(count_log2):
    """IPv4 UDP flows of one stable (CRC32C) flow hash. The flips touch the second and third octets of both
    addresses and the low 10 bits of both ports; the fourth octets (1 and 200) keep the source the lower endpoint,
    as sluice orders them."""
    base = [bytearray([10, 0, 0, 1]), bytearray([10, 0, 0, 200]), bytearray([0x40, 0]), bytearray([0x44, 0])]
    flips = [(0, i, b) for i in (1, 2) for b in range(8)] + [(1, i, b) for i in (1, 2) for b in range(8)]
    flips += [(f, 1, b) for f in (2, 3) for b in range(8)] + [(f, 0, b) for f in (2, 3) for b in range(2)]

    def hash_of(fields):
        return crc_flow_hash(bytes(fields[0]), bytes(fields[1]), int.from_bytes(fields[2], "big"),
                             int.from_bytes(fields[3], "big"), 17)

    # The Python model is sluice's stable hash: its pinned value (five_tuple_test.cpp) for 10.0.0.1:40000 ->
    # 192.168.1.5:443, TCP.
    assert crc_flow_hash(bytes([10, 0, 0, 1]), bytes([192, 168, 1, 5]), 40000, 443, 6) == 0x7C0DD436
    return [(".".join(map(str, f[0])), ".".join(map(str, f[1])), int.from_bytes(f[2], "big"),
             int.from_bytes(f[3], "big")) for f in inputs_sharing_one_crc(base, flips, hash_of, count_log2)]


def write_crafted_flows(tmp_path):
    """256 UDP flows of one CRC32C flow hash, a frame each, as port p0's input (p1's is empty)."""
    flows = flows_sharing_one_crc(8)
    assert len(set(flows)) == 256
    wrpcap(str(tmp_path / "in0.pcap"), [eth() / IP(src=s, dst=d) / UDP(sport=sp, dport=dp) for s, d, sp, dp in flows])
    wrpcap(str(tmp_path / "in1.pcap"), [])
    return flows


def test_flows_crafted_to_share_one_crc32c_hash_still_spread_over_both_workers(tmp_path):
    """A sender who knows the flow hash can pick flows that all hash alike: with the unkeyed CRC32C sluice once
    used, 256 such flows would all reach one worker (and one chain of its connection table). The workers' hash is
    keyed by a random key per process, so they spread as random flows do."""
    flows = write_crafted_flows(tmp_path)
    tx = lambda port: ",".join(f"tx_pcap={tmp_path}/out{port}_q{q}.pcap" for q in range(2))
    config = forwarding_config(tmp_path, tx(0), tx(1), dataplane={"idle_sleep_us": 50})
    config["lcores"] = [{"id": 1, "roles": ["rx"]}, {"id": 2, "roles": ["worker"]}, {"id": 3, "roles": ["worker"]}]
    sluice = Sluice(tmp_path, config, lcores="0@0,1@1,2@1,3@1")
    with sluice:
        stats = sluice.wait_accounted(len(flows), timeout=30)
        assert sluice.stop() == 0, sluice.log()
    assert stats["drops"] == 0
    per_worker = [len(rdpcap(str(tmp_path / f"out1_q{q}.pcap"))) for q in range(2)]
    assert sum(per_worker) == len(flows)
    # Binomial(256, 1/2): a worker outside 64..192 is 8 standard deviations out.
    assert all(64 <= n <= 192 for n in per_worker), f"flows per worker {per_worker}"


def test_first_fragments_crafted_to_share_one_crc32c_hash_all_find_room(tmp_path):
    """The RX lcore's fragment table (4096 datagrams, lib/pipeline/fragments.hpp) hashes keys a sender chooses
    whole: addresses, IP id, protocol. With rte_hash_crc, 64 first fragments crafted to share one hash filled their
    two buckets after 16 (fragment_table_full, and each later one a failed cuckoo search); keyed, all 64 are kept
    and every later fragment finds its datagram's ports."""

    def key_hash(fields):  # rte_hash_crc over the table's 40-byte key: src, dst (16 bytes each), id (host order)
        src, ident = bytes(fields[0]), int.from_bytes(fields[1], "big")
        key = src + bytes(12) + bytes([10, 1, 0, 50]) + bytes(12) + ident.to_bytes(4, "little") + bytes([17, 4, 0, 0])
        return crc32c(0, key)

    base = [bytearray([203, 0, 113, 5]), bytearray([0, 0])]
    flips = [(0, i, b) for i in (1, 2, 3) for b in range(8)] + [(1, i, b) for i in (0, 1) for b in range(8)]
    crafted = inputs_sharing_one_crc(base, flips, key_hash, 6)
    datagrams = [IP(src=".".join(map(str, src)), dst="10.1.0.50", id=int.from_bytes(ident, "big")) /
                 UDP(sport=5353, dport=53) / Raw(bytes(range(256)) * 11) for src, ident in crafted]
    pieces = [fragment(d, fragsize=1200) for d in datagrams]
    assert all(len(p) == 3 for p in pieces)
    # Every first fragment, then every later one: 64 datagrams pending at once.
    frames = [eth() / p[0] for p in pieces] + [eth() / f for p in pieces for f in p[1:]]
    wrpcap(str(tmp_path / "in0.pcap"), frames)
    wrpcap(str(tmp_path / "in1.pcap"), [])
    firewall = {"default": "deny", "rules": [{"name": "dns", "protocol": "udp", "destination_ports": 53, "action": "allow"}]}
    config = forwarding_config(tmp_path, "tx_pcap=" + str(tmp_path / "out0.pcap"), "tx_pcap=" + str(tmp_path / "out1.pcap"),
                               firewall=firewall)
    sluice = Sluice(tmp_path, config)
    with sluice:
        stats = sluice.wait_accounted(len(frames), timeout=30)
        assert sluice.stop() == 0, sluice.log()
    assert stats["drop/fragment_table_full"] == 0
    assert stats["drop/fragment_unmatched"] == 0
    assert stats["drops"] == 0
    assert len(rdpcap(str(tmp_path / "out1.pcap"))) == len(frames)


def test_connections_crafted_to_share_one_crc32c_hash_all_fit_the_connection_table(tmp_path):
    """The same 256 crafted flows, tracked: a table of 60,000 connections (plain cuckoo buckets, as the default
    1M is) took 16 of them with the CRC32C hash (two buckets; the other 240 ct_table_full, each a failed cuckoo
    search). Keyed, all 256 fit."""
    flows = write_crafted_flows(tmp_path)
    config = forwarding_config(tmp_path, "tx_pcap=" + str(tmp_path / "out0.pcap"), "tx_pcap=" + str(tmp_path / "out1.pcap"),
                               firewall={"default": "allow", "table_size": 60000})
    sluice = Sluice(tmp_path, config)
    with sluice:
        stats = sluice.wait_accounted(len(flows), timeout=30)
        assert sluice.stop() == 0, sluice.log()
    assert stats["drop/ct_table_full"] == 0
    assert stats["conn_inserts"] == len(flows)
    assert len(rdpcap(str(tmp_path / "out1.pcap"))) == len(flows)

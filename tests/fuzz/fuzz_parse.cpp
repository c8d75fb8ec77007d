// libFuzzer target "parse": sluice::parse_frame on arbitrary bytes (every byte of a frame comes from the wire), and on
// every frame it accepts the promises the pipeline builds on:
//  - the verdict is a parser reason; ParseOptions::ipv4_checksum_verified changes nothing but the checksum verdict;
//  - l3_offset/l4_offset and the headers they point at lie inside the IP datagram, itself inside the frame, and
//    datagram_end (where the RX lcore trims the frame) is the datagram's end;
//  - the tuple is the packet's (or, kMetaIcmpError, the quoted flow's: fuzz_common.hpp's reference_quote), its
//    unused bytes are zero, flow_hash == symmetric_flow_hash(tuple) == symmetric_flow_hash(tuple.reversed());
//  - tuple_from_meta (the worker's side) rebuilds the same tuple, and the TCP flags;
//  - nothing depends on the Ethernet padding after the IP datagram;
//  - nat_rewrite (TCP/UDP, not fragments nor ICMP errors) and encapsulate, run on a stand-in mbuf (no EAL: they only
//    touch the mbuf's data fields), produce a frame parse_frame accepts with the new tuple, keep a valid L4 checksum
//    valid, and change no other byte;
//  - the replies sluice builds in place (make_echo_reply, make_time_exceeded, make_too_big, make_reject), run on the
//    frame as the RX lcore trims it, stay inside the mbuf, leave it untouched when they refuse, refuse exactly what
//    they must not answer, and produce a frame parse_frame accepts: to the sender, with valid checksums.
#include <rte_mbuf.h>
#include <rte_tcp.h>

#include <vector>

#include "fake_mbuf.hpp"
#include "fuzz_common.hpp"
#include "nat/nat_rewrite.hpp"
#include "packet/encapsulate.hpp"
#include "packet/parse.hpp"
#include "packet/reject.hpp"

using namespace sluice;
using namespace sluice::fuzz;

namespace {

constexpr uint32_t kMaxFrame = 16384;  // above the 9600-byte MTU the config allows; mbuf lengths are 16-bit

struct Parsed {
    DropReason verdict;
    PacketMeta meta;
    FiveTuple tuple;
    uint32_t datagram_end;
    friend bool operator==(const Parsed& a, const Parsed& b) {
        return a.verdict == b.verdict && std::memcmp(&a.meta, &b.meta, sizeof a.meta) == 0 && a.tuple == b.tuple;
    }
};

Parsed parse(const uint8_t* f, uint32_t n, bool checksum_verified) {
    Parsed p;
    p.verdict =
        parse_frame(f, n, ParseOptions{.ipv4_checksum_verified = checksum_verified}, p.meta, p.tuple, p.datagram_end);
    return p;
}

bool v4(const PacketMeta& m) { return m.family == IpFamily::ipv4; }
uint32_t ip_header_length(const uint8_t* f, const PacketMeta& m) { return v4(m) ? (f[m.l3_offset] & 0x0f) * 4u : 40u; }
// Where the IP datagram ends (what follows is Ethernet padding).
uint32_t ip_end(const uint8_t* f, const PacketMeta& m) {
    const uint8_t* ip = f + m.l3_offset;
    return v4(m) ? m.l3_offset + be16(ip + 2) : m.l3_offset + 40u + be16(ip + 4);
}

void check_accepted(const uint8_t* f, uint32_t n, const Parsed& p) {
    const PacketMeta& m = p.meta;
    const FiveTuple& t = p.tuple;
    FUZZ_CHECK(m.l3_offset == 14 || m.l3_offset == 18 || m.l3_offset == 22, "l3_offset %u", m.l3_offset);
    FUZZ_CHECK(m.family == IpFamily::ipv4 || m.family == IpFamily::ipv6, "family %d", int(m.family));
    FUZZ_CHECK(t.family == m.family, "tuple family %d, meta family %d", int(t.family), int(m.family));
    FUZZ_CHECK(m.l3_offset + ip_header_length(f, m) <= n, "IP header beyond the frame");
    const uint8_t* ip = f + m.l3_offset;
    const uint32_t end = ip_end(f, m);
    FUZZ_CHECK(end <= n && end >= m.l3_offset + ip_header_length(f, m), "IP datagram ends at %u, frame at %u", end, n);
    FUZZ_CHECK(p.datagram_end == end, "datagram_end %u, the IP length says %u", p.datagram_end, end);
    FUZZ_CHECK((m.flags & ~(kMetaFragment | kMetaIcmpError | kMetaFragmentTiny)) == 0, "flags %#x", m.flags);
    const bool fragment = m.flags & kMetaFragment;
    const bool error = m.flags & kMetaIcmpError;
    FUZZ_CHECK(!(fragment && error), "a fragment taken for an ICMP error");
    // Tiny: a first fragment (it has an L4 offset) whose L4 header the datagram cuts (pipeline/fragments.hpp).
    FUZZ_CHECK(!(m.flags & kMetaFragmentTiny) || (fragment && m.l4_offset != 0), "tiny flag on %s",
               fragment ? "a later fragment" : "no fragment");
    FUZZ_CHECK(m.reserved == 0 && t.reserved == 0 && m.fragment_src_port == 0 && m.fragment_dst_port == 0,
               "reserved bytes or fragment ports set");
    if (v4(m)) {
        FUZZ_CHECK(!t.src.words[1] && !t.src.words[2] && !t.src.words[3] && !t.dst.words[1] && !t.dst.words[2] &&
                       !t.dst.words[3],
                   "IPv4 tuple with bytes set past the address: %s", str(t).c_str());
        FUZZ_CHECK(m.l4_proto == ip[9], "l4_proto %u, IP protocol %u", m.l4_proto, ip[9]);
    }
    if (m.l4_offset == 0) {
        FUZZ_CHECK(fragment, "no L4 offset but not a fragment");
    } else {
        FUZZ_CHECK(m.l4_offset >= m.l3_offset + ip_header_length(f, m) && m.l4_offset <= end,
                   "l4_offset %u outside [%u, %u]", m.l4_offset, m.l3_offset + ip_header_length(f, m), end);
        if (v4(m)) FUZZ_CHECK(m.l4_offset == m.l3_offset + ip_header_length(f, m), "IPv4 l4_offset %u", m.l4_offset);
    }
    FUZZ_CHECK(m.flow_hash == symmetric_flow_hash(t), "flow_hash %#x, hash of %s %#x", m.flow_hash, str(t).c_str(),
               symmetric_flow_hash(t));
    FUZZ_CHECK(symmetric_flow_hash(t.reversed()) == m.flow_hash, "hash not symmetric for %s", str(t).c_str());

    const uint8_t* l4 = f + m.l4_offset;
    if (error) {
        FUZZ_CHECK(m.l4_proto == IPPROTO_ICMP || m.l4_proto == IPPROTO_ICMPV6, "ICMP error of protocol %u", m.l4_proto);
        FUZZ_CHECK(m.l4_offset + 8u <= end, "ICMP error header beyond the datagram");
        FUZZ_CHECK(is_icmp_error_type(m.l4_proto, l4[0]), "ICMP type %u taken for an error", l4[0]);
        FiveTuple quoted;
        FUZZ_CHECK(reference_quote(l4 + 8, end - m.l4_offset - 8, m.family, quoted),
                   "accepted a quote that is unusable");
        FUZZ_CHECK(quoted == t, "ICMP error tuple %s, the quote says %s", str(t).c_str(), str(quoted).c_str());
    } else {
        FUZZ_CHECK(t.proto == m.l4_proto, "tuple proto %u, l4_proto %u", t.proto, m.l4_proto);
        const std::size_t len = v4(m) ? 4 : 16;
        FUZZ_CHECK(std::memcmp(t.src.bytes, ip + (v4(m) ? 12 : 8), len) == 0 &&
                       std::memcmp(t.dst.bytes, ip + (v4(m) ? 16 : 24), len) == 0,
                   "tuple addresses are not the header's: %s", str(t).c_str());
        uint16_t sport = 0, dport = 0;
        if (!fragment) {
            switch (m.l4_proto) {
            case IPPROTO_TCP:
                FUZZ_CHECK(m.l4_offset + 20u <= end && (l4[12] >> 4) >= 5 && m.l4_offset + (l4[12] >> 4) * 4u <= end,
                           "TCP header beyond the datagram");
                sport = raw16(l4), dport = raw16(l4 + 2);
                break;
            case IPPROTO_UDP:
                FUZZ_CHECK(m.l4_offset + 8u <= end && be16(l4 + 4) >= 8 && m.l4_offset + be16(l4 + 4) <= end,
                           "UDP header or length beyond the datagram");
                sport = raw16(l4), dport = raw16(l4 + 2);
                break;
            case IPPROTO_SCTP:
                FUZZ_CHECK(m.l4_offset + 12u <= end, "SCTP common header beyond the datagram");
                sport = raw16(l4), dport = raw16(l4 + 2);
                break;
            case IPPROTO_ICMP:
            case IPPROTO_ICMPV6:
                FUZZ_CHECK(m.l4_offset + 8u <= end, "ICMP header beyond the datagram");
                FUZZ_CHECK(!is_icmp_error_type(m.l4_proto, l4[0]), "ICMP error type %u not flagged", l4[0]);
                reference_icmp_ports(m.l4_proto, l4, sport, dport);
                break;
            default: break;
            }
        }
        FUZZ_CHECK(t.src_port == sport && t.dst_port == dport, "tuple %s, expected ports %u %u", str(t).c_str(),
                   be16(reinterpret_cast<const uint8_t*>(&sport)), be16(reinterpret_cast<const uint8_t*>(&dport)));
    }

    // The worker's side: the same tuple from the frame and the meta alone.
    FiveTuple rebuilt;
    uint8_t tcp_flags = 0xa5;
    tuple_from_meta(f, n, m, rebuilt, tcp_flags);
    FUZZ_CHECK(rebuilt == t, "tuple_from_meta %s, parse_frame %s", str(rebuilt).c_str(), str(t).c_str());
    const uint8_t expected_flags = !error && !fragment && m.l4_proto == IPPROTO_TCP ? l4[13] : 0;
    FUZZ_CHECK(tcp_flags == expected_flags, "tcp_flags %#x, expected %#x", tcp_flags, expected_flags);
}

// Bytes after the IP datagram are Ethernet padding: changing them changes nothing.
void check_padding(const uint8_t* f, uint32_t n, const Parsed& p) {
    const uint32_t end = ip_end(f, p.meta);
    if (end == n) return;
    std::vector<uint8_t> g(f, f + n);
    for (uint32_t i = end; i < n; ++i) g[i] = static_cast<uint8_t>(~g[i]);
    for (bool verified : {false, true}) {
        const Parsed q = parse(g.data(), n, verified);
        FUZZ_CHECK(q == p, "the padding after byte %u changed the parse (verdict %s)", end,
                   std::string(drop_reason_name(q.verdict)).c_str());
    }
    FiveTuple rebuilt;
    uint8_t flags;
    tuple_from_meta(g.data(), n, p.meta, rebuilt, flags);
    FUZZ_CHECK(rebuilt == p.tuple, "the padding changed tuple_from_meta: %s", str(rebuilt).c_str());
}

// The one's-complement sum of [from, from + len) plus a start value, folded: 0xffff when a checksum inside verifies.
uint16_t ones_sum(const uint8_t* from, uint32_t len, uint32_t sum = 0) {
    for (uint32_t i = 0; i + 1 < len; i += 2) sum += be16(from + i);
    if (len & 1) sum += uint32_t{from[len - 1]} << 8;
    while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
    return static_cast<uint16_t>(sum);
}

// The L4 checksum over the pseudo-header and the segment [l4_offset, end) verifies.
bool l4_checksum_valid(const uint8_t* f, const PacketMeta& m, uint32_t end) {
    const uint8_t* ip = f + m.l3_offset;
    const uint32_t l4_len = end - m.l4_offset;
    const uint16_t pseudo = v4(m) ? ones_sum(ip + 12, 8, m.l4_proto + (l4_len & 0xffff) + (l4_len >> 16))
                                  : ones_sum(ip + 8, 32, m.l4_proto + (l4_len & 0xffff) + (l4_len >> 16));
    return ones_sum(f + m.l4_offset, l4_len, pseudo) == 0xffff;
}

void check_nat_rewrite(const uint8_t* f, uint32_t n, const Parsed& p) {
    const PacketMeta& m = p.meta;
    const uint32_t end = ip_end(f, m);
    const bool udp = m.l4_proto == IPPROTO_UDP;
    const uint32_t sum_at = m.l4_offset + (udp ? 6u : 16u);
    const bool no_checksum = udp && v4(m) && raw16(f + sum_at) == 0;
    const bool was_valid = l4_checksum_valid(f, m, end);

    // New endpoints from the frame's hash: the reply direction, one address byte changed, ports that include 0/0xffff.
    const uint32_t h = m.flow_hash;
    const std::size_t len = v4(m) ? 4 : 16;
    IpAddress src = p.tuple.dst, dst = p.tuple.src;
    src.bytes[h % len] ^= static_cast<uint8_t>(h >> 8 | 1);
    dst.bytes[(h >> 4) % len] = static_cast<uint8_t>(h >> 16);
    const uint16_t ports[] = {
        0, 0xffff, 0x0100, static_cast<uint16_t>(h >> 16), static_cast<uint16_t>(h), p.tuple.src_port};
    const uint16_t sport = ports[(h >> 3) % 6], dport = ports[(h >> 11) % 6];

    FakeMbuf mb(f, n, RTE_PKTMBUF_HEADROOM);
    nat_rewrite(&mb.m, m, src, sport, dst, dport);
    FUZZ_CHECK(mb.m.data_off == RTE_PKTMBUF_HEADROOM && mb.m.data_len == n && mb.m.pkt_len == n,
               "nat_rewrite resized the mbuf");
    const uint8_t* g = mb.data();

    std::vector<bool> may_change(n, false);
    const auto mark = [&](uint32_t from, uint32_t count) {
        for (uint32_t i = from; i < from + count; ++i) may_change[i] = true;
    };
    mark(m.l3_offset + (v4(m) ? 12 : 8), 2 * static_cast<uint32_t>(len));
    if (v4(m)) mark(m.l3_offset + 10, 2);
    mark(m.l4_offset, 4);
    mark(sum_at, 2);
    for (uint32_t i = 0; i < n; ++i)
        FUZZ_CHECK(may_change[i] || g[i] == f[i], "nat_rewrite changed byte %u (%#x -> %#x)", i, f[i], g[i]);

    const Parsed q = parse(g, n, false);
    FUZZ_CHECK(q.verdict == DropReason::none, "the NATed frame is dropped: %s",
               std::string(drop_reason_name(q.verdict)).c_str());
    FiveTuple expected = p.tuple;
    expected.src = src, expected.dst = dst, expected.src_port = sport, expected.dst_port = dport;
    FUZZ_CHECK(q.tuple == expected, "NATed tuple %s, expected %s", str(q.tuple).c_str(), str(expected).c_str());
    FUZZ_CHECK(q.meta.l3_offset == m.l3_offset && q.meta.l4_offset == m.l4_offset && q.meta.flags == m.flags,
               "NAT moved the headers");
    if (no_checksum) {
        FUZZ_CHECK(raw16(g + sum_at) == 0, "an IPv4 UDP datagram without checksum got one");
    } else {
        if (was_valid) FUZZ_CHECK(l4_checksum_valid(g, q.meta, end), "nat_rewrite broke a valid L4 checksum");
        if (udp) FUZZ_CHECK(raw16(g + sum_at) != 0, "nat_rewrite wrote a UDP checksum of 0 (means none)");
    }
}

void check_encapsulate(const uint8_t* f, uint32_t n, const Parsed& p) {
    const PacketMeta& m = p.meta;
    const uint32_t inner_len = ip_end(f, m) - m.l3_offset;
    const uint32_t outer_len = v4(m) ? 20 : 40;
    const uint32_t h = m.flow_hash;
    static constexpr uint16_t kHeadrooms[] = {
        0, 2, 14, 20, 34, 40, 54, 64, RTE_PKTMBUF_HEADROOM};  // even: the mbuf data stays 2-aligned
    const uint16_t headroom = kHeadrooms[h % std::size(kHeadrooms)];
    const uint32_t mtus[] = {inner_len + outer_len, inner_len + outer_len - 1, 1500, 9000, 68};
    const uint16_t mtu = static_cast<uint16_t>(std::min<uint32_t>(mtus[(h >> 8) % 5], 65535));
    IpAddress outer_src{}, outer_dst{};
    if (v4(m)) {
        outer_src = IpAddress::from_v4(htonl(0xc0000201));              // 192.0.2.1
        outer_dst = IpAddress::from_v4(htonl(0xc6336400 | (h >> 24)));  // 198.51.100.x
    } else {
        const uint8_t s[16] = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
        outer_src = IpAddress::from_v6(s);
        outer_dst = outer_src;
        outer_dst.bytes[15] = static_cast<uint8_t>(h >> 24);
    }

    FakeMbuf mb(f, n, headroom);
    const bool done = encapsulate(&mb.m, m, outer_src, outer_dst, mtu);
    const bool fits = inner_len + outer_len <= mtu && headroom + m.l3_offset >= 14u + outer_len;
    FUZZ_CHECK(done == fits, "encapsulate returned %d (inner %u, mtu %u, headroom %u)", done, inner_len, mtu, headroom);
    if (!done) {
        FUZZ_CHECK(mb.m.data_off == headroom && mb.m.data_len == n && mb.m.pkt_len == n &&
                       std::memcmp(mb.data(), f, n) == 0,
                   "encapsulate failed but changed the mbuf");
        return;
    }
    const uint32_t total = 14 + outer_len + inner_len;
    FUZZ_CHECK(mb.m.data_len == total && mb.m.pkt_len == total && mb.m.data_off + total <= mb.buffer.size(),
               "encapsulated length %u, expected %u", mb.m.data_len, total);
    const uint8_t* g = mb.data();
    FUZZ_CHECK(std::memcmp(g + 14 + outer_len, f + m.l3_offset, inner_len) == 0, "the inner packet changed");
    const Parsed q = parse(g, total, false);
    FUZZ_CHECK(q.verdict == DropReason::none, "the encapsulated frame is dropped: %s",
               std::string(drop_reason_name(q.verdict)).c_str());
    FUZZ_CHECK(q.meta.l3_offset == 14 && q.meta.family == m.family && q.meta.flags == 0 &&
                   q.meta.l4_proto == (v4(m) ? 4 : 41) && q.meta.l4_offset == 14 + outer_len,
               "the outer header parses as proto %u at %u", q.meta.l4_proto, q.meta.l4_offset);
    FiveTuple expected;
    expected.family = m.family;
    expected.proto = v4(m) ? 4 : 41;
    expected.src = outer_src, expected.dst = outer_dst;
    FUZZ_CHECK(q.tuple == expected, "outer tuple %s", str(q.tuple).c_str());
    if (v4(m)) FUZZ_CHECK(g[15] == f[m.l3_offset + 1], "outer TOS %#x, inner %#x", g[15], f[m.l3_offset + 1]);
    else FUZZ_CHECK(((be16(g + 14) ^ be16(f + m.l3_offset)) & 0x0ff0) == 0, "outer traffic class differs");
}

// Whether a reply sluice built (g, len) verifies: IPv4 header checksum, and the L4 checksum (ICMPv4 has no
// pseudo-header; ICMPv6 and TCP have one).
bool reply_checksums_valid(const uint8_t* g, const PacketMeta& q, uint32_t end) {
    if (v4(q) && ones_sum(g + q.l3_offset, ip_header_length(g, q)) != 0xffff) return false;
    if (q.l4_proto == IPPROTO_ICMP) return ones_sum(g + q.l4_offset, end - q.l4_offset) == 0xffff;
    return l4_checksum_valid(g, q, end);
}

bool unicast_source(const uint8_t* f, const PacketMeta& m) {
    const uint8_t* ip = f + m.l3_offset;
    if (v4(m)) return ip[12] != 0 && ip[12] < 224;
    static constexpr uint8_t kUnspecified[16] = {};
    return ip[8] != 0xff && std::memcmp(ip + 8, kUnspecified, 16) != 0;
}

bool multicast_destination(const uint8_t* f, const PacketMeta& m) {
    const uint8_t* ip = f + m.l3_offset;
    return v4(m) ? ip[16] >= 224 : ip[24] == 0xff;
}

// Runs one reply builder on the trimmed frame and checks what it made. `must`: whether it has to answer (false: it
// must refuse; unset: either, e.g. a too-big error for IPv4 without DF). Returns the reply's parse, if any.
template <typename Build>
bool check_reply(const char* what, const uint8_t* f, uint32_t end, const Parsed& p, uint16_t headroom, int must,
                 Build&& build, Parsed& q, std::vector<uint8_t>& out) {
    FakeMbuf mb(f, end, headroom);
    const bool made = build(&mb.m);
    if (must >= 0) FUZZ_CHECK(made == (must == 1), "%s returned %d, expected %d", what, made, must);
    if (!made) {
        FUZZ_CHECK(mb.m.data_off == headroom && mb.m.data_len == end && mb.m.pkt_len == end &&
                       std::memcmp(mb.data(), f, end) == 0,
                   "%s refused but changed the mbuf", what);
        return false;
    }
    FUZZ_CHECK(mb.m.data_len == mb.m.pkt_len && mb.m.data_off + mb.m.data_len <= mb.buffer.size(),
               "%s: reply of %u bytes at %u past the %zu-byte buffer", what, mb.m.data_len, mb.m.data_off,
               mb.buffer.size());
    out.assign(mb.data(), mb.data() + mb.m.data_len);
    q = parse(out.data(), static_cast<uint32_t>(out.size()), false);
    FUZZ_CHECK(q.verdict == DropReason::none, "%s: the reply is dropped: %s", what,
               std::string(drop_reason_name(q.verdict)).c_str());
    FUZZ_CHECK(q.meta.family == p.meta.family && q.meta.l3_offset == 14, "%s: reply family/offset", what);
    FUZZ_CHECK(q.datagram_end == out.size(), "%s: %zu bytes of frame behind a %u-byte datagram", what, out.size(),
               q.datagram_end);
    FUZZ_CHECK(reply_checksums_valid(out.data(), q.meta, q.datagram_end), "%s: a checksum of the reply is wrong", what);
    const uint8_t* ip = out.data() + 14;
    const uint8_t* orig = f + p.meta.l3_offset;
    const std::size_t len = v4(p.meta) ? 4 : 16;
    FUZZ_CHECK(std::memcmp(ip + (v4(p.meta) ? 16 : 24), orig + (v4(p.meta) ? 12 : 8), len) == 0,
               "%s: the reply is not addressed to the packet's source", what);
    return true;
}

// The replies of reject.hpp, on the frame as the RX lcore hands it on (trimmed to the IP datagram).
void check_replies(const uint8_t* f, const Parsed& p) {
    const PacketMeta& m = p.meta;
    const uint32_t end = ip_end(f, m);
    const uint32_t h = m.flow_hash;
    static constexpr uint16_t kHeadrooms[] = {0, 2, 14, 28, 48, 64, RTE_PKTMBUF_HEADROOM};  // even: 2-aligned data
    const uint16_t headroom = kHeadrooms[(h >> 5) % std::size(kHeadrooms)];
    const rte_ether_addr own{{0x02, 0, 0, 0, 0, 0xaa}};
    const bool error = m.flags & kMetaIcmpError;
    const bool later_fragment = (m.flags & kMetaFragment) && m.l4_offset == 0;
    const bool tiny = m.flags & kMetaFragmentTiny;  // cuts its own L4 header: no error quotes it
    const bool answerable = !error && !later_fragment && !tiny && !multicast_destination(f, m) && unicast_source(f, m);
    const uint32_t error_head = 14 + (v4(m) ? 20u : 40u) + 8;  // what an ICMP error puts in front of the quote
    const bool room = headroom + m.l3_offset >= error_head;
    Parsed q;
    std::vector<uint8_t> out;

    // Echo: answered exactly when it is an unfragmented request right behind the IP header, from a unicast source,
    // with a valid ICMP checksum.
    const uint8_t* l4 = f + m.l4_offset;
    const bool request =
        m.l4_offset && m.l4_offset + 8u <= end && !error &&
        (v4(m) ? m.l4_proto == IPPROTO_ICMP && l4[0] == 8 : m.l4_proto == IPPROTO_ICMPV6 && l4[0] == 128);
    FakeMbuf probe(f, end, headroom);
    FUZZ_CHECK(is_echo_request(&probe.m, m) == request, "is_echo_request says %d", !request);
    const bool sum_valid =
        request && (v4(m) ? ones_sum(l4, end - m.l4_offset) == 0xffff : l4_checksum_valid(f, m, end));
    const bool echo =
        sum_valid && !(m.flags & kMetaFragment) && answerable && (v4(m) || m.l4_offset - m.l3_offset == 40);
    if (check_reply(
            "make_echo_reply", f, end, p, headroom, echo, [&](rte_mbuf* mb) { return make_echo_reply(mb, m, own); }, q,
            out)) {
        FUZZ_CHECK(q.tuple == p.tuple.reversed(), "echo reply tuple %s", str(q.tuple).c_str());
        FUZZ_CHECK(out.size() == 14 + (end - m.l3_offset), "the echo reply is not the request's size");
    }

    // Time exceeded and too big: ICMP errors from sluice, quoting the packet.
    IpAddress source{};
    source.bytes[0] = v4(m) ? 10 : 0x20;
    source.bytes[v4(m) ? 3 : 15] = 1;
    const auto error_reply = [&](const char* what, int must, auto&& build) {
        if (!check_reply(what, f, end, p, headroom, must, build, q, out)) return;
        FUZZ_CHECK(q.meta.flags & kMetaIcmpError, "%s: the reply is no ICMP error", what);
        const uint32_t quote_at = q.meta.l4_offset + 8;
        FUZZ_CHECK(std::memcmp(out.data() + quote_at, f + m.l3_offset, std::min<uint32_t>(out.size() - quote_at, 28)) ==
                       0,
                   "%s: the quote is not the packet as it came", what);
    };
    error_reply("make_time_exceeded", answerable && room,
                [&](rte_mbuf* mb) { return make_time_exceeded(mb, m, source, own); });
    const uint16_t mtu = static_cast<uint16_t>(1280 + (h >> 16) % 8000);
    error_reply("make_too_big", answerable && room ? -1 : 0,
                [&](rte_mbuf* mb) { return make_too_big(mb, m, mtu, own); });
    const auto reject = [&](rte_mbuf* mb) { return make_reject(mb, m, own); };
    if (m.l4_proto != IPPROTO_TCP || m.l4_offset == 0) {
        error_reply("make_reject", -1, reject);
    } else if (check_reply("make_reject", f, end, p, headroom, -1, reject, q, out)) {  // a RST
        FUZZ_CHECK(q.meta.l4_proto == IPPROTO_TCP && (out[q.meta.l4_offset + 13] & RTE_TCP_RST_FLAG),
                   "the reject is no RST");
        FUZZ_CHECK(q.tuple == p.tuple.reversed(), "RST tuple %s", str(q.tuple).c_str());
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size > kMaxFrame) return 0;
    const uint32_t n = static_cast<uint32_t>(size);
    const Parsed a = parse(data, n, false);
    const Parsed b = parse(data, n, true);
    for (const Parsed* p : {&a, &b})
        FUZZ_CHECK(p->verdict <= DropReason::icmp_bad_quote, "verdict %s is not a parser's",
                   std::string(drop_reason_name(p->verdict)).c_str());
    if (a.verdict == DropReason::ipv4_bad_checksum)
        FUZZ_CHECK(b.verdict != DropReason::ipv4_bad_checksum, "a verified checksum is still bad");
    else
        FUZZ_CHECK(a == b, "ipv4_checksum_verified changed more than the checksum verdict (%s vs %s)",
                   std::string(drop_reason_name(a.verdict)).c_str(), std::string(drop_reason_name(b.verdict)).c_str());
    if (b.verdict == DropReason::none) check_accepted(data, n, b);
    if (a.verdict != DropReason::none) return 0;

    check_padding(data, n, a);
    const bool ported = a.meta.l4_proto == IPPROTO_TCP || a.meta.l4_proto == IPPROTO_UDP;
    if (ported && a.meta.flags == 0) check_nat_rewrite(data, n, a);  // what forward_stage rewrites
    check_encapsulate(data, n, a);
    check_replies(data, a);
    return 0;
}

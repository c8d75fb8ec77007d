// libFuzzer target "icmp_error": the ICMP error quoting path of sluice::parse_frame. The input is
//   byte 0: shape (bit 0: IPv6; bits 1-3: which error type; bits 4-5: VLAN tags, 0-2; bits 6-7: padding 0/5/17/40)
//   byte 1: the ICMP code
//   the rest: the quoted bytes, arbitrary,
// wrapped in a valid Ethernet (+VLAN) + IPv4/IPv6 + ICMP/ICMPv6 error header, so every run reaches the quote. Checks:
//  - the verdict is none (with kMetaIcmpError) exactly when fuzz_common.hpp's reference_quote accepts the quote, else
//    icmp_bad_quote; an accepted error's tuple is the quoted flow's own (source stays source: the hash is symmetric
//    and the connection table is looked up under both keys), in the error's family, and
//    flow_hash == symmetric_flow_hash(tuple); tuple_from_meta agrees, with no TCP flags;
//  - nothing is read past the IP datagram: the frame buffer ends there or at the padding (ASan), and the padding's
//    bytes change nothing;
//  - the NAT translation of an accepted error (nat_rewrite_icmp_error, on an mbuf that ends with the datagram)
//    succeeds exactly for quotes of TCP or UDP with ports; then the error still parses, quotes the translated flow,
//    and its ICMP checksum and the quoted IPv4 header's (when it was valid) verify; otherwise nothing changed;
//  - when the quote is a whole packet parse_frame accepts on its own, the error's tuple is that packet's tuple (the
//    flow it belongs to), apart from the cases parse.cpp documents or that are reported (see known_divergence).
#include <vector>

#include <rte_ip.h>

#include "fuzz_common.hpp"
#include "nat/nat_rewrite.hpp"
#include "packet/checksum.hpp"
#include "packet/parse.hpp"

using namespace sluice;
using namespace sluice::fuzz;

namespace {

constexpr std::size_t kMaxQuote = 1500;
constexpr uint8_t kV4Errors[8] = {3, 11, 12, 4,
                                  5, 3,  11, 3};            // unreachable, time exceeded, parameter, quench, redirect
constexpr uint8_t kV6Errors[8] = {1, 2, 3, 4, 1, 2, 3, 1};  // unreachable, too big, time exceeded, parameter
constexpr uint32_t kPadding[4] = {0, 5, 17, 40};

struct Parsed {
    DropReason verdict;
    PacketMeta meta;
    FiveTuple tuple;
    uint32_t datagram_end;
};

// A copy whose heap block is exactly the frame (a growing vector keeps spare capacity ASan would not flag).
std::vector<uint8_t> exact(const std::vector<uint8_t>& f) { return std::vector<uint8_t>(f.begin(), f.end()); }

Parsed parse(const std::vector<uint8_t>& frame, bool checksum_verified = false) {
    const std::vector<uint8_t> f = exact(frame);
    Parsed p;
    p.verdict = parse_frame(f.data(), static_cast<uint32_t>(f.size()),
                            ParseOptions{.ipv4_checksum_verified = checksum_verified}, p.meta, p.tuple, p.datagram_end);
    return p;
}

void put16(std::vector<uint8_t>& b, std::size_t at, uint16_t v) {
    b[at] = static_cast<uint8_t>(v >> 8);
    b[at + 1] = static_cast<uint8_t>(v);
}

// Ethernet, vlans tags, then ether_type.
std::vector<uint8_t> ethernet(unsigned vlans, uint16_t ether_type) {
    std::vector<uint8_t> f(14 + 4 * vlans, 0);
    for (int i = 0; i < 6; ++i) f[i] = 0x02, f[6 + i] = 0x04;
    std::size_t at = 12;
    for (unsigned v = 0; v < vlans; ++v, at += 4) {
        put16(f, at, v == 0 && vlans == 2 ? 0x88a8 : 0x8100);
        put16(f, at + 2, static_cast<uint16_t>(100 + v));
    }
    put16(f, at, ether_type);
    return f;
}

// The cases where the quote's tuple and the tuple parse_frame gives the quoted packet differ by design or are known:
//  - the quote is itself an ICMP error (errors about errors are not sent; parse_frame would take its quote's flow);
//  - IPv6 extension headers: the quote reader does not walk them (parse.cpp says so) while parse_frame does;
//  - an IPv4 first fragment (MF set, offset 0): the quote reads its ports, parse_frame hashes every fragment on
//    addresses and protocol alone (reported with issue #9, not changed: which one is meant is a design question);
bool known_divergence(const uint8_t* quote, std::size_t length, IpFamily family, const Parsed& original) {
    if (original.meta.flags & kMetaIcmpError) return true;
    if (family == IpFamily::ipv6) {
        const uint8_t next = quote[6];
        return next == IPPROTO_HOPOPTS || next == IPPROTO_ROUTING || next == IPPROTO_DSTOPTS || next == IPPROTO_AH ||
               next == IPPROTO_FRAGMENT;
    }
    return length >= 8 && (be16(quote + 6) & 0x3fff) == 0x2000;
}

IpAddress address(IpFamily family, uint8_t last) {
    IpAddress a{};
    if (family == IpFamily::ipv4) {
        const uint8_t v4[4] = {203, 0, 113, last};
        std::memcpy(a.bytes, v4, 4);
    } else {
        const uint8_t v6[16] = {0x20, 0x01, 0x0d, 0xb8, 0, 0xf, 0, 0, 0, 0, 0, 0, 0, 0, 0, last};
        std::memcpy(a.bytes, v6, 16);
    }
    return a;
}

void check_translation(const std::vector<uint8_t>& frame, std::size_t end, const Parsed& p, IpFamily family,
                       const FiveTuple& quoted, uint16_t new_src_port) {
    std::vector<uint8_t> e(frame.begin(), frame.begin() + static_cast<std::ptrdiff_t>(end));  // as parse_burst trims
    const std::vector<uint8_t> before = e;
    rte_mbuf mbuf{};  // all the rewrite reads of an mbuf: the data pointer and the length
    mbuf.buf_addr = e.data();
    mbuf.data_off = 0;
    mbuf.data_len = static_cast<uint16_t>(e.size());
    mbuf.pkt_len = static_cast<uint32_t>(e.size());
    const IpAddress outer = address(family, 1), src = address(family, 2), dst = address(family, 3);
    const uint16_t dst_port = rte_cpu_to_be_16(53);
    const uint8_t* q = e.data() + p.meta.l4_offset + 8;
    const bool v4 = family == IpFamily::ipv4;
    const uint32_t q_header = v4 ? (q[0] & 0x0fu) * 4u : 40u;
    const bool quoted_ipv4_sum_ok = v4 && checksum_compute(q, q_header) == 0;
    const bool ports = (quoted.proto == IPPROTO_TCP || quoted.proto == IPPROTO_UDP) &&
                       e.size() >= p.meta.l4_offset + 8 + q_header + 8 && !(v4 && (be16(q + 6) & 0x1fff));
    const bool done = nat_rewrite_icmp_error(&mbuf, p.meta, outer, src, new_src_port, dst, dst_port);
    FUZZ_CHECK(done == ports, "translation %s for a quote of protocol %u", done ? "done" : "refused", quoted.proto);
    if (!done) {
        FUZZ_CHECK(e == before, "a refused translation changed the frame");
        return;
    }
    const Parsed t = parse(e);
    FUZZ_CHECK(t.verdict == DropReason::none, "the translated error parses as %s",
               std::string(drop_reason_name(t.verdict)).c_str());
    FiveTuple want = quoted;
    want.src = src;
    want.dst = dst;
    if (new_src_port) want.src_port = new_src_port;
    want.dst_port = dst_port;
    FUZZ_CHECK(t.tuple == want, "translated quote %s, expected %s", str(t.tuple).c_str(), str(want).c_str());
    const uint8_t* icmp = e.data() + p.meta.l4_offset;
    const uint32_t icmp_len = static_cast<uint32_t>(e.size() - p.meta.l4_offset);
    if (v4) {
        FUZZ_CHECK(checksum_compute(icmp, icmp_len) == 0, "the ICMP checksum does not verify");
        FUZZ_CHECK(!quoted_ipv4_sum_ok || checksum_compute(q, q_header) == 0, "the quoted IPv4 header checksum broke");
        FUZZ_CHECK(std::memcmp(e.data() + p.meta.l3_offset + 16, outer.bytes, 4) == 0, "outer destination");
    } else {
        const auto* ip6 = reinterpret_cast<const rte_ipv6_hdr*>(e.data() + p.meta.l3_offset);
        FUZZ_CHECK(rte_ipv6_udptcp_cksum_verify(ip6, icmp) == 0, "the ICMPv6 checksum does not verify");
        FUZZ_CHECK(std::memcmp(ip6->dst_addr, outer.bytes, 16) == 0, "outer destination");
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 2 || size - 2 > kMaxQuote) return 0;
    const uint8_t shape = data[0];
    const bool v6 = shape & 1;
    const IpFamily family = v6 ? IpFamily::ipv6 : IpFamily::ipv4;
    const uint8_t type = v6 ? kV6Errors[(shape >> 1) & 7] : kV4Errors[(shape >> 1) & 7];
    const unsigned vlans = std::min((shape >> 4) & 3, 2);
    const uint32_t padding = kPadding[shape >> 6];
    const uint8_t* quote = data + 2;
    const std::size_t quote_length = size - 2;

    std::vector<uint8_t> f = ethernet(vlans, v6 ? 0x86dd : 0x0800);
    const std::size_t l3 = f.size();
    const std::size_t ip_length = v6 ? 40 : 20;
    f.resize(l3 + ip_length + 8, 0);
    uint8_t* ip = &f[l3];
    if (v6) {
        ip[0] = 0x60;
        ip[6] = IPPROTO_ICMPV6;
        ip[7] = 64;
        const uint8_t src[16] = {0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xfe};
        const uint8_t dst[16] = {0x20, 0x01, 0x0d, 0xb8, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01};
        std::memcpy(ip + 8, src, 16);
        std::memcpy(ip + 24, dst, 16);
        put16(f, l3 + 4, static_cast<uint16_t>(8 + quote_length));
    } else {
        ip[0] = 0x45;
        ip[8] = 64;
        ip[9] = IPPROTO_ICMP;
        const uint8_t addresses[8] = {192, 0, 2, 254, 198, 51, 100, 1};
        std::memcpy(ip + 12, addresses, 8);
        put16(f, l3 + 2, static_cast<uint16_t>(20 + 8 + quote_length));
        const uint16_t c = checksum_compute(ip, 20);
        std::memcpy(ip + 10, &c, 2);
    }
    const std::size_t l4 = l3 + ip_length;
    f[l4] = type;
    f[l4 + 1] = data[1];
    f.insert(f.end(), quote, quote + quote_length);
    const std::size_t end = f.size();
    f.resize(end + padding, 0x00);

    const Parsed p = parse(f);
    FiveTuple expected;
    const bool usable = reference_quote(quote, static_cast<uint32_t>(quote_length), family, expected);
    FUZZ_CHECK(p.verdict == (usable ? DropReason::none : DropReason::icmp_bad_quote), "verdict %s, the quote is %s",
               std::string(drop_reason_name(p.verdict)).c_str(), usable ? "usable" : "unusable");

    // The padding's contents change nothing (nothing past the datagram is read).
    std::vector<uint8_t> g = f;
    for (std::size_t i = end; i < g.size(); ++i) g[i] = 0xff;
    const Parsed q = parse(g);
    FUZZ_CHECK(q.verdict == p.verdict && std::memcmp(&q.meta, &p.meta, sizeof q.meta) == 0 && q.tuple == p.tuple,
               "the padding changed the parse");
    if (!usable) return 0;

    const PacketMeta& m = p.meta;
    FUZZ_CHECK(m.flags == kMetaIcmpError, "flags %#x", m.flags);
    FUZZ_CHECK(m.family == family && m.l3_offset == l3 && m.l4_offset == l4 &&
                   m.l4_proto == (v6 ? int{IPPROTO_ICMPV6} : int{IPPROTO_ICMP}),
               "meta family %d l3 %u l4 %u proto %u", int(m.family), m.l3_offset, m.l4_offset, m.l4_proto);
    FUZZ_CHECK(p.tuple == expected, "tuple %s, the quoted flow is %s", str(p.tuple).c_str(), str(expected).c_str());
    FUZZ_CHECK(m.flow_hash == symmetric_flow_hash(expected) && m.flow_hash == symmetric_flow_hash(expected.reversed()),
               "flow_hash %#x is not the quoted flow's", m.flow_hash);
    for (const std::vector<uint8_t>* frame : {&f, &g}) {
        const std::vector<uint8_t> e = exact(*frame);
        FiveTuple rebuilt;
        uint8_t tcp_flags = 0xa5;
        tuple_from_meta(e.data(), static_cast<uint32_t>(e.size()), m, rebuilt, tcp_flags);
        FUZZ_CHECK(rebuilt == expected && tcp_flags == 0, "tuple_from_meta %s flags %#x, expected %s",
                   str(rebuilt).c_str(), tcp_flags, str(expected).c_str());
    }

    check_translation(f, end, p, family, expected, shape & 0x20 ? 0 : rte_cpu_to_be_16(8080));

    // The quote as a packet of its own (when it is whole): the error belongs to that packet's flow.
    std::vector<uint8_t> original = ethernet(0, v6 ? 0x86dd : 0x0800);
    original.insert(original.end(), quote, quote + quote_length);
    const Parsed o = parse(original, /*checksum_verified=*/true);  // the quote's checksum may be anything
    if (o.verdict == DropReason::none && !known_divergence(quote, quote_length, family, o)) {
        FUZZ_CHECK(o.tuple == p.tuple, "the error's tuple %s, the quoted packet's own %s", str(p.tuple).c_str(),
                   str(o.tuple).c_str());
        FUZZ_CHECK(o.meta.flow_hash == m.flow_hash, "the error's hash %#x, the quoted packet's %#x", m.flow_hash,
                   o.meta.flow_hash);
    }
    return 0;
}

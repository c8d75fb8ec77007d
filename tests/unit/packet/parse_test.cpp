#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstring>
#include <vector>

#include "packet/checksum.hpp"
#include "packet/packet_meta.hpp"
#include "packet/parse.hpp"

using namespace sluice;

namespace {

using Bytes = std::vector<uint8_t>;

void put16(Bytes& b, std::size_t at, uint16_t v) {
    b[at] = static_cast<uint8_t>(v >> 8);
    b[at + 1] = static_cast<uint8_t>(v);
}

Bytes ethernet(uint16_t ether_type) {
    Bytes b(14, 0);
    for (int i = 0; i < 6; ++i) b[i] = 0x02, b[6 + i] = 0x04;
    put16(b, 12, ether_type);
    return b;
}

Bytes l4_header(uint8_t proto, uint16_t sport, uint16_t dport, std::size_t payload = 0) {
    Bytes l4;
    if (proto == IPPROTO_TCP) {
        l4.assign(20 + payload, 0);
        l4[12] = 5 << 4;
        l4[13] = 0x02;  // SYN
    } else if (proto == IPPROTO_UDP) {
        l4.assign(8 + payload, 0);
        put16(l4, 4, static_cast<uint16_t>(8 + payload));
    } else {
        l4.assign(8 + payload, 0);  // ICMP echo request, id = sport
        l4[0] = proto == IPPROTO_ICMP ? 8 : 128;
    }
    put16(l4, 0, sport);
    put16(l4, 2, dport);
    if (proto == IPPROTO_ICMP || proto == IPPROTO_ICMPV6) {
        put16(l4, 0, 0);
        l4[0] = proto == IPPROTO_ICMP ? 8 : 128;
        put16(l4, 4, sport);
    }
    return l4;
}

Bytes ipv4_frame(uint8_t proto, const char* src, const char* dst, uint16_t sport, uint16_t dport, Bytes l4 = {}) {
    if (l4.empty()) l4 = l4_header(proto, sport, dport);
    Bytes f = ethernet(0x0800);
    Bytes ip(20, 0);
    ip[0] = 0x45;
    put16(ip, 2, static_cast<uint16_t>(20 + l4.size()));
    ip[8] = 64;
    ip[9] = proto;
    inet_pton(AF_INET, src, &ip[12]);
    inet_pton(AF_INET, dst, &ip[16]);
    const uint16_t c = checksum_compute(ip.data(), 20);
    std::memcpy(&ip[10], &c, 2);
    f.insert(f.end(), ip.begin(), ip.end());
    f.insert(f.end(), l4.begin(), l4.end());
    return f;
}

void fix_ipv4_checksum(Bytes& f, std::size_t l3 = 14) {
    f[l3 + 10] = f[l3 + 11] = 0;
    const uint16_t c = checksum_compute(&f[l3], (f[l3] & 0x0f) * 4u);
    std::memcpy(&f[l3 + 10], &c, 2);
}

Bytes ipv6_frame(uint8_t proto, const char* src, const char* dst, uint16_t sport, uint16_t dport, Bytes ext = {},
                 uint8_t first_next = 0) {
    Bytes l4 = l4_header(proto, sport, dport);
    Bytes f = ethernet(0x86dd);
    Bytes ip(40, 0);
    ip[0] = 0x60;
    put16(ip, 4, static_cast<uint16_t>(ext.size() + l4.size()));
    ip[6] = ext.empty() ? proto : first_next;
    ip[7] = 64;
    inet_pton(AF_INET6, src, &ip[8]);
    inet_pton(AF_INET6, dst, &ip[24]);
    f.insert(f.end(), ip.begin(), ip.end());
    f.insert(f.end(), ext.begin(), ext.end());
    f.insert(f.end(), l4.begin(), l4.end());
    return f;
}

DropReason parse(const Bytes& f, PacketMeta& meta, FiveTuple& tuple, uint32_t& datagram_end) {
    return parse_frame(f.data(), static_cast<uint32_t>(f.size()), {}, meta, tuple, datagram_end);
}

DropReason parse(const Bytes& f, PacketMeta& meta, FiveTuple& tuple) {
    uint32_t datagram_end;
    return parse(f, meta, tuple, datagram_end);
}

DropReason parse(const Bytes& f) {
    PacketMeta meta;
    FiveTuple tuple;
    return parse(f, meta, tuple);
}

}  // namespace

TEST_CASE("parse: IPv4 TCP fills the tuple, offsets and hash", "[parse]") {
    const Bytes f = ipv4_frame(IPPROTO_TCP, "10.0.0.1", "10.0.0.2", 1234, 80);
    PacketMeta meta;
    FiveTuple tuple;
    REQUIRE(parse(f, meta, tuple) == DropReason::none);
    CHECK(meta.family == IpFamily::ipv4);
    CHECK(meta.l3_offset == 14);
    CHECK(meta.l4_offset == 34);
    CHECK(meta.l4_proto == IPPROTO_TCP);
    CHECK(ntohs(tuple.src_port) == 1234);
    CHECK(ntohs(tuple.dst_port) == 80);
    CHECK(to_string(tuple.src, tuple.family) == "10.0.0.1");
    CHECK(meta.flow_hash == symmetric_flow_hash(tuple));

    PacketMeta reply_meta;
    FiveTuple reply_tuple;
    REQUIRE(parse(ipv4_frame(IPPROTO_TCP, "10.0.0.2", "10.0.0.1", 80, 1234), reply_meta, reply_tuple) ==
            DropReason::none);
    CHECK(reply_meta.flow_hash == meta.flow_hash);
}

TEST_CASE("parse: Ethernet padding beyond the IP total length is accepted", "[parse]") {
    Bytes f = ipv4_frame(IPPROTO_UDP, "10.0.0.1", "10.0.0.2", 53, 53);
    f.resize(60, 0);
    CHECK(parse(f) == DropReason::none);
}

TEST_CASE("parse: malformed IPv4 frames are named", "[parse]") {
    const Bytes good = ipv4_frame(IPPROTO_TCP, "10.0.0.1", "10.0.0.2", 1, 2);

    CHECK(parse(Bytes(good.begin(), good.begin() + 13)) == DropReason::l2_truncated);
    CHECK(parse(Bytes(good.begin(), good.begin() + 14 + 19)) == DropReason::ipv4_truncated);

    Bytes ihl = good;
    ihl[14] = 0x44;
    fix_ipv4_checksum(ihl);
    CHECK(parse(ihl) == DropReason::ipv4_bad_ihl);

    Bytes version = good;
    version[14] = 0x65;
    CHECK(parse(version) == DropReason::ipv4_bad_version);

    Bytes too_long = good;
    put16(too_long, 16, static_cast<uint16_t>(good.size()));  // total length beyond the frame
    fix_ipv4_checksum(too_long);
    CHECK(parse(too_long) == DropReason::ipv4_bad_length);

    Bytes short_total = good;
    put16(short_total, 16, 19);
    fix_ipv4_checksum(short_total);
    CHECK(parse(short_total) == DropReason::ipv4_bad_length);

    Bytes checksum = good;
    checksum[14 + 8] = 1;  // TTL changed, checksum not
    CHECK(parse(checksum) == DropReason::ipv4_bad_checksum);
    PacketMeta meta;
    FiveTuple tuple;
    uint32_t datagram_end;
    CHECK(parse_frame(checksum.data(), static_cast<uint32_t>(checksum.size()), {.ipv4_checksum_verified = true}, meta,
                      tuple, datagram_end) == DropReason::none);

    Bytes options = good;  // IHL 6 claims 24 header bytes: the options eat the TCP header
    options[14] = 0x46;
    fix_ipv4_checksum(options);
    CHECK(parse(options) == DropReason::l4_truncated);
}

TEST_CASE("parse: malformed L4 headers are named", "[parse]") {
    Bytes tcp_offset = ipv4_frame(IPPROTO_TCP, "10.0.0.1", "10.0.0.2", 1, 2);
    tcp_offset[34 + 12] = 4 << 4;
    CHECK(parse(tcp_offset) == DropReason::tcp_bad_offset);
    tcp_offset[34 + 12] = 6 << 4;  // 24 bytes, the packet has 20
    CHECK(parse(tcp_offset) == DropReason::tcp_bad_offset);

    Bytes udp = ipv4_frame(IPPROTO_UDP, "10.0.0.1", "10.0.0.2", 1, 2);
    put16(udp, 34 + 4, 9);
    CHECK(parse(udp) == DropReason::udp_bad_length);
    put16(udp, 34 + 4, 7);
    CHECK(parse(udp) == DropReason::udp_bad_length);

    Bytes truncated = ipv4_frame(IPPROTO_TCP, "10.0.0.1", "10.0.0.2", 1, 2);
    truncated.resize(34 + 10);
    put16(truncated, 16, 30);
    fix_ipv4_checksum(truncated);
    CHECK(parse(truncated) == DropReason::l4_truncated);
}

TEST_CASE("parse: ICMP echo uses the identifier for both ports", "[parse]") {
    PacketMeta meta;
    FiveTuple request, reply;
    REQUIRE(parse(ipv4_frame(IPPROTO_ICMP, "10.0.0.1", "10.0.0.2", 777, 0), meta, request) == DropReason::none);
    CHECK(ntohs(request.src_port) == 777);
    CHECK(ntohs(request.dst_port) == 777);
    REQUIRE(parse(ipv4_frame(IPPROTO_ICMP, "10.0.0.2", "10.0.0.1", 777, 0), meta, reply) == DropReason::none);
    CHECK(symmetric_flow_hash(request) == symmetric_flow_hash(reply));
}

TEST_CASE("parse: VLAN and QinQ tags are skipped, a third is refused", "[parse]") {
    const Bytes plain = ipv4_frame(IPPROTO_UDP, "10.0.0.1", "10.0.0.2", 5, 6);
    Bytes tagged(plain.begin(), plain.begin() + 12);
    const uint8_t qinq[] = {0x88, 0xa8, 0x00, 0x64, 0x81, 0x00, 0x00, 0x0a};
    tagged.insert(tagged.end(), std::begin(qinq), std::end(qinq));
    tagged.insert(tagged.end(), plain.begin() + 12, plain.end());
    PacketMeta meta;
    FiveTuple tuple;
    REQUIRE(parse(tagged, meta, tuple) == DropReason::none);
    CHECK(meta.l3_offset == 22);
    CHECK(ntohs(tuple.dst_port) == 6);

    Bytes triple(tagged.begin(), tagged.begin() + 12);
    const uint8_t extra[] = {0x81, 0x00, 0x00, 0x01};
    triple.insert(triple.end(), std::begin(extra), std::end(extra));
    triple.insert(triple.end(), tagged.begin() + 12, tagged.end());
    CHECK(parse(triple) == DropReason::vlan_too_deep);
}

TEST_CASE("parse: non-IP ethertypes are named", "[parse]") {
    Bytes arp = ethernet(0x0806);
    arp.resize(42, 0);
    CHECK(parse(arp) == DropReason::not_ip);
}

TEST_CASE("parse: IPv6 with extension headers reaches the L4 header", "[parse]") {
    Bytes hop_by_hop(8, 0);
    hop_by_hop[0] = IPPROTO_DSTOPTS;  // next
    Bytes dest_opts(16, 0);
    dest_opts[0] = IPPROTO_UDP;
    dest_opts[1] = 1;  // (1 + 1) * 8 bytes
    Bytes ext = hop_by_hop;
    ext.insert(ext.end(), dest_opts.begin(), dest_opts.end());
    const Bytes f = ipv6_frame(IPPROTO_UDP, "2001:db8::1", "2001:db8::2", 4000, 53, ext, IPPROTO_HOPOPTS);
    PacketMeta meta;
    FiveTuple tuple;
    REQUIRE(parse(f, meta, tuple) == DropReason::none);
    CHECK(meta.family == IpFamily::ipv6);
    CHECK(meta.l4_proto == IPPROTO_UDP);
    CHECK(meta.l4_offset == 14 + 40 + 24);
    CHECK(ntohs(tuple.src_port) == 4000);

    PacketMeta reply_meta;
    FiveTuple reply_tuple;
    REQUIRE(parse(ipv6_frame(IPPROTO_UDP, "2001:db8::2", "2001:db8::1", 53, 4000), reply_meta, reply_tuple) ==
            DropReason::none);
    CHECK(reply_meta.flow_hash == meta.flow_hash);
}

TEST_CASE("parse: IPv6 fragments hash on addresses only; non-first ones have no L4 header", "[parse]") {
    Bytes fragment(8, 0);
    fragment[0] = IPPROTO_TCP;
    Bytes first = ipv6_frame(IPPROTO_TCP, "2001:db8::1", "2001:db8::2", 1, 2, fragment, IPPROTO_FRAGMENT);
    first[14 + 40 + 3] = 0x01;  // M flag, offset 0
    PacketMeta meta_first, meta_later;
    FiveTuple tuple;
    REQUIRE(parse(first, meta_first, tuple) == DropReason::none);
    CHECK((meta_first.flags & kMetaFragment));
    CHECK(meta_first.l4_offset == 14 + 48);
    Bytes later = first;
    later[14 + 40 + 2] = 0x05;  // offset 160 bytes
    REQUIRE(parse(later, meta_later, tuple) == DropReason::none);
    CHECK(meta_later.l4_offset == 0);
    CHECK(meta_later.flow_hash == meta_first.flow_hash);
}

TEST_CASE("parse: a non-first IPv6 fragment's data is not walked as extension headers", "[parse]") {
    // Destination options may follow the fragment header (RFC 8200 4.1); in a later fragment the bytes after the
    // fragment header are the datagram's middle, not that header.
    Bytes fragment(8, 0);
    fragment[0] = IPPROTO_DSTOPTS;
    fragment[2] = 0x01;  // offset 32 bytes, no M flag
    Bytes later = ipv6_frame(IPPROTO_UDP, "2001:db8::1", "2001:db8::2", 1, 2, fragment, IPPROTO_FRAGMENT);
    later[14 + 48] = 0x63;      // read as a header: next header 99 ...
    later[14 + 48 + 1] = 0xff;  // ... and 2 KiB long, far past the packet
    PacketMeta meta;
    FiveTuple tuple;
    REQUIRE(parse(later, meta, tuple) == DropReason::none);
    CHECK((meta.flags & kMetaFragment));
    CHECK(meta.l4_offset == 0);
    CHECK(meta.l4_proto == IPPROTO_DSTOPTS);  // the fragment header's next header, as every later fragment has it
    CHECK(tuple.src_port == 0);
}

TEST_CASE("parse: malformed IPv6 frames are named", "[parse]") {
    const Bytes good = ipv6_frame(IPPROTO_TCP, "2001:db8::1", "2001:db8::2", 1, 2);
    CHECK(parse(Bytes(good.begin(), good.begin() + 14 + 39)) == DropReason::ipv6_truncated);
    Bytes version = good;
    version[14] = 0x40;
    CHECK(parse(version) == DropReason::ipv6_bad_version);
    Bytes length = good;
    put16(length, 14 + 4, 100);
    CHECK(parse(length) == DropReason::ipv6_bad_length);

    Bytes runaway(8, 0);  // a routing header claiming 64 bytes in a 28-byte payload
    runaway[0] = IPPROTO_TCP;
    runaway[1] = 7;
    CHECK(parse(ipv6_frame(IPPROTO_TCP, "2001:db8::1", "2001:db8::2", 1, 2, runaway, IPPROTO_ROUTING)) ==
          DropReason::ipv6_bad_ext_header);

    Bytes chain;
    for (int i = 0; i < 9; ++i) {
        Bytes h(8, 0);
        h[0] = static_cast<uint8_t>(i == 8 ? int{IPPROTO_TCP} : int{IPPROTO_DSTOPTS});
        chain.insert(chain.end(), h.begin(), h.end());
    }
    CHECK(parse(ipv6_frame(IPPROTO_TCP, "2001:db8::1", "2001:db8::2", 1, 2, chain, IPPROTO_DSTOPTS)) ==
          DropReason::ipv6_bad_ext_header);
}

TEST_CASE("parse: an ICMP error takes the tuple and hash of the flow it quotes", "[parse]") {
    // A UDP datagram 10.0.0.1:5000 -> 10.1.0.1:53, and the port unreachable that 10.1.0.1 sends back about it.
    const Bytes original = ipv4_frame(IPPROTO_UDP, "10.0.0.1", "10.1.0.1", 5000, 53);
    Bytes icmp(8, 0);
    icmp[0] = 3;                                                                 // destination unreachable
    icmp[1] = 3;                                                                 // port
    icmp.insert(icmp.end(), original.begin() + 14, original.begin() + 14 + 28);  // IP header + 8 bytes
    const Bytes error = ipv4_frame(IPPROTO_ICMP, "10.1.0.1", "10.0.0.1", 0, 0, icmp);

    PacketMeta error_meta, flow_meta;
    FiveTuple error_tuple, flow_tuple;
    REQUIRE(parse(error, error_meta, error_tuple) == DropReason::none);
    REQUIRE(parse(original, flow_meta, flow_tuple) == DropReason::none);
    CHECK((error_meta.flags & kMetaIcmpError));
    CHECK(error_tuple == flow_tuple);
    CHECK(error_meta.flow_hash == flow_meta.flow_hash);

    FiveTuple rebuilt;
    uint8_t flags;
    tuple_from_meta(error.data(), static_cast<uint32_t>(error.size()), error_meta, rebuilt, flags);
    CHECK(rebuilt == flow_tuple);

    Bytes short_quote(icmp.begin(), icmp.begin() + 8 + 20 + 4);  // only 4 bytes of the UDP header
    CHECK(parse(ipv4_frame(IPPROTO_ICMP, "10.1.0.1", "10.0.0.1", 0, 0, short_quote)) == DropReason::icmp_bad_quote);
}

TEST_CASE("parse: the worker rebuilds the same tuple from the meta", "[parse]") {
    for (const Bytes& f : {ipv4_frame(IPPROTO_TCP, "10.0.0.1", "10.0.0.2", 1234, 80),
                           ipv4_frame(IPPROTO_ICMP, "10.0.0.1", "10.0.0.2", 99, 0),
                           ipv6_frame(IPPROTO_UDP, "2001:db8::1", "2001:db8::2", 4000, 53)}) {
        PacketMeta meta;
        FiveTuple tuple, rebuilt;
        uint8_t flags;
        REQUIRE(parse(f, meta, tuple) == DropReason::none);
        tuple_from_meta(f.data(), static_cast<uint32_t>(f.size()), meta, rebuilt, flags);
        CHECK(rebuilt == tuple);
        CHECK(flags == (meta.l4_proto == IPPROTO_TCP ? 0x02 : 0));
    }
}

TEST_CASE("parse: SCTP ports are in the tuple (rules match on them), a header under 12 bytes is truncated", "[parse]") {
    Bytes sctp(12, 0);
    put16(sctp, 0, 3868);
    put16(sctp, 2, 36412);
    PacketMeta meta;
    FiveTuple tuple;
    REQUIRE(parse(ipv4_frame(IPPROTO_SCTP, "10.0.0.1", "10.0.0.2", 0, 0, sctp), meta, tuple) == DropReason::none);
    CHECK(ntohs(tuple.src_port) == 3868);
    CHECK(ntohs(tuple.dst_port) == 36412);
    FiveTuple again;
    uint8_t flags;
    const Bytes frame = ipv4_frame(IPPROTO_SCTP, "10.0.0.1", "10.0.0.2", 0, 0, sctp);
    tuple_from_meta(frame.data(), static_cast<uint32_t>(frame.size()), meta, again, flags);
    CHECK(again == tuple);  // the worker rebuilds the same tuple
    CHECK(parse(ipv4_frame(IPPROTO_SCTP, "10.0.0.1", "10.0.0.2", 0, 0, Bytes(8, 0))) == DropReason::l4_truncated);
}

namespace {

// A UDP datagram 10.0.0.1:1000 -> 10.0.0.2:53 whose IPv4 header carries `options` (a multiple of 4 bytes).
Bytes ipv4_with_options(const Bytes& options) {
    const Bytes l4 = l4_header(IPPROTO_UDP, 1000, 53);
    Bytes f = ethernet(0x0800);
    Bytes ip(20, 0);
    ip[0] = static_cast<uint8_t>(0x40 | (20 + options.size()) / 4);
    put16(ip, 2, static_cast<uint16_t>(20 + options.size() + l4.size()));
    ip[8] = 64;
    ip[9] = IPPROTO_UDP;
    inet_pton(AF_INET, "10.0.0.1", &ip[12]);
    inet_pton(AF_INET, "10.0.0.2", &ip[16]);
    ip.insert(ip.end(), options.begin(), options.end());
    f.insert(f.end(), ip.begin(), ip.end());
    f.insert(f.end(), l4.begin(), l4.end());
    fix_ipv4_checksum(f);
    return f;
}

constexpr uint8_t kEol = 0, kNop = 1, kRecordRoute = 7, kTimestamp = 68, kRouterAlert = 148, kLsrr = 131, kSsrr = 137;

}  // namespace

TEST_CASE("parse: IPv4 options that are well formed pass, and the L4 header follows them", "[parse][ipv4-options]") {
    const Bytes lists[] = {
        {kNop, kNop, kNop, kEol},                   // padding only
        {kRecordRoute, 7, 4, 0, 0, 0, 0, kEol},     // record route with one empty slot
        {kTimestamp, 8, 5, 0, 0, 0, 0, 0},          // timestamp, exactly filling the header
        {kRouterAlert, 4, 0, 0},                    // router alert (RFC 2113)
        {kNop, kRouterAlert, 4, 0, 0, kEol, 0, 0},  // NOP before, EOL padding after
        {kEol, 0xff, 0xff, 0xff},                   // after EOL nothing is an option (RFC 791)
        {kEol, kLsrr, 7, 4},                        // not even a source route
        Bytes(40, kNop),                            // IHL 15, the most there is
    };
    for (const Bytes& options : lists) {
        INFO("options of " << options.size() << " bytes, first " << int(options[0]));
        PacketMeta meta;
        FiveTuple tuple;
        REQUIRE(parse(ipv4_with_options(options), meta, tuple) == DropReason::none);
        CHECK(meta.l4_offset == 14 + 20 + options.size());
        CHECK(ntohs(tuple.src_port) == 1000);
        CHECK(ntohs(tuple.dst_port) == 53);
    }
}

TEST_CASE("parse: malformed IPv4 option lists are ipv4_bad_option", "[parse][ipv4-options]") {
    const Bytes lists[] = {
        {kTimestamp, 0, 0, 0},                         // length 0
        {kRecordRoute, 1, 0, 0},                       // length 1: shorter than its own type and length bytes
        {kRecordRoute, 40, 4, 0},                      // length 40 in a 4-byte option area
        {kNop, kRouterAlert, 4, 0},                    // router alert running one byte past the header
        {kNop, kNop, kNop, kRecordRoute},              // a type byte with no room for its length
        {kRouterAlert, 4, 0, 0, kTimestamp, 0, 0, 0},  // a good option, then a bad one
    };
    for (const Bytes& options : lists) {
        INFO("options " << int(options[0]) << " " << int(options[1]) << " " << int(options[2]) << " "
                        << int(options[3]));
        CHECK(parse(ipv4_with_options(options)) == DropReason::ipv4_bad_option);
    }
}

TEST_CASE("parse: IPv4 loose and strict source routes are dropped (RFC 7126 4.3, 4.4)", "[parse][ipv4-options]") {
    CHECK(parse(ipv4_with_options({kLsrr, 7, 4, 10, 2, 0, 1, kEol})) == DropReason::ipv4_source_route);
    CHECK(parse(ipv4_with_options({kSsrr, 7, 4, 10, 2, 0, 1, kEol})) == DropReason::ipv4_source_route);
    CHECK(parse(ipv4_with_options({kNop, kNop, kNop, kNop, kLsrr, 3, 4, kEol})) == DropReason::ipv4_source_route);
    CHECK(parse(ipv4_with_options({kRecordRoute, 7, 4, 0, 0, 0, 0, kSsrr, 3, 4, kEol, kEol})) ==
          DropReason::ipv4_source_route);
    CHECK(parse(ipv4_with_options({kLsrr, 40, 4, 0})) == DropReason::ipv4_bad_option);  // malformed first

    // A fragment's own header is walked too; an ICMP error's quoted header is not (only its addresses and ports are
    // read).
    Bytes fragment = ipv4_with_options({kLsrr, 7, 4, 10, 2, 0, 1, kEol});
    fragment[14 + 6] = 0x20;  // more fragments
    fix_ipv4_checksum(fragment);
    CHECK(parse(fragment) == DropReason::ipv4_source_route);

    const Bytes routed = ipv4_with_options({kLsrr, 7, 4, 10, 2, 0, 1, kEol});
    Bytes icmp(8, 0);
    icmp[0] = 3;  // destination unreachable
    icmp[1] = 3;
    icmp.insert(icmp.end(), routed.begin() + 14, routed.begin() + 14 + 28 + 8);  // header with options + 8 bytes
    PacketMeta meta;
    FiveTuple tuple;
    REQUIRE(parse(ipv4_frame(IPPROTO_ICMP, "10.0.0.2", "10.0.0.1", 0, 0, icmp), meta, tuple) == DropReason::none);
    CHECK((meta.flags & kMetaIcmpError));
    CHECK(ntohs(tuple.dst_port) == 53);
}

namespace {

// An 8-byte extension header naming `next`.
Bytes ext_header(uint8_t next) {
    Bytes h(8, 0);
    h[0] = next;
    return h;
}

Bytes routing_header(uint8_t next, uint8_t type, uint8_t segments_left) {
    Bytes h(24, 0);  // type 0 with one address: header length 2 (24 bytes)
    h[0] = next;
    h[1] = 2;
    h[2] = type;
    h[3] = segments_left;
    return h;
}

Bytes concat(std::initializer_list<Bytes> parts) {
    Bytes all;
    for (const Bytes& p : parts) all.insert(all.end(), p.begin(), p.end());
    return all;
}

}  // namespace

TEST_CASE("parse: IPv6 hop-by-hop options anywhere but first are ipv6_bad_ext_header (RFC 8200 4.1)",
          "[parse][ipv6-ext]") {
    const char* a = "2001:db8::1";
    const char* b = "2001:db8::2";
    CHECK(parse(ipv6_frame(IPPROTO_UDP, a, b, 1, 2, concat({ext_header(IPPROTO_DSTOPTS), ext_header(IPPROTO_UDP)}),
                           IPPROTO_HOPOPTS)) == DropReason::none);
    CHECK(parse(ipv6_frame(IPPROTO_UDP, a, b, 1, 2, concat({ext_header(IPPROTO_HOPOPTS), ext_header(IPPROTO_UDP)}),
                           IPPROTO_DSTOPTS)) == DropReason::ipv6_bad_ext_header);
    CHECK(parse(ipv6_frame(IPPROTO_UDP, a, b, 1, 2, concat({ext_header(IPPROTO_HOPOPTS), ext_header(IPPROTO_UDP)}),
                           IPPROTO_HOPOPTS)) == DropReason::ipv6_bad_ext_header);  // twice
    // After the fragment header of a first fragment (it is in the unfragmentable part or nowhere).
    Bytes fragment = ext_header(IPPROTO_HOPOPTS);
    fragment[3] = 0x01;  // M flag
    CHECK(parse(ipv6_frame(IPPROTO_UDP, a, b, 1, 2, concat({fragment, ext_header(IPPROTO_UDP)}), IPPROTO_FRAGMENT)) ==
          DropReason::ipv6_bad_ext_header);
}

TEST_CASE("parse: an IPv6 type 0 routing header is dropped while it has segments left (RFC 5095)",
          "[parse][ipv6-ext]") {
    const char* a = "2001:db8::1";
    const char* b = "2001:db8::2";
    CHECK(parse(ipv6_frame(IPPROTO_UDP, a, b, 1, 2, routing_header(IPPROTO_UDP, 0, 1), IPPROTO_ROUTING)) ==
          DropReason::ipv6_routing_type0);
    CHECK(parse(ipv6_frame(IPPROTO_UDP, a, b, 1, 2,
                           concat({ext_header(IPPROTO_ROUTING), routing_header(IPPROTO_UDP, 0, 255)}),
                           IPPROTO_HOPOPTS)) == DropReason::ipv6_routing_type0);
    // Segments left 0: processed as an unrecognised type, which it then is not: it passes.
    PacketMeta meta;
    FiveTuple tuple;
    REQUIRE(parse(ipv6_frame(IPPROTO_UDP, a, b, 1, 2, routing_header(IPPROTO_UDP, 0, 0), IPPROTO_ROUTING), meta,
                  tuple) == DropReason::none);
    CHECK(meta.l4_offset == 14 + 40 + 24);
    CHECK(ntohs(tuple.dst_port) == 2);
    // Other routing types pass whatever their segments left (type 2, mobile IPv6; type 4, segment routing).
    CHECK(parse(ipv6_frame(IPPROTO_UDP, a, b, 1, 2, routing_header(IPPROTO_UDP, 2, 1), IPPROTO_ROUTING)) ==
          DropReason::none);
    CHECK(parse(ipv6_frame(IPPROTO_UDP, a, b, 1, 2, routing_header(IPPROTO_UDP, 4, 1), IPPROTO_ROUTING)) ==
          DropReason::none);
}

TEST_CASE("parse: datagram_end is where the IP datagram ends, whatever follows it", "[parse][trailer]") {
    PacketMeta meta;
    FiveTuple tuple;
    uint32_t datagram_end = 0;

    Bytes v4 = ipv4_frame(IPPROTO_UDP, "10.0.0.1", "10.0.0.2", 53, 53);
    const uint32_t v4_length = static_cast<uint32_t>(v4.size());
    REQUIRE(parse(v4, meta, tuple, datagram_end) == DropReason::none);
    CHECK(datagram_end == v4_length);  // no trailer
    v4.insert(v4.end(), 20, 0xee);     // 20 bytes of garbage after the datagram
    REQUIRE(parse(v4, meta, tuple, datagram_end) == DropReason::none);
    CHECK(datagram_end == v4_length);
    CHECK(datagram_end == 14u + 20 + 8);

    Bytes padded = ipv4_frame(IPPROTO_TCP, "10.0.0.1", "10.0.0.2", 1, 2);
    padded.resize(60, 0);  // Ethernet minimum-size padding
    REQUIRE(parse(padded, meta, tuple, datagram_end) == DropReason::none);
    CHECK(datagram_end == 14u + 20 + 20);

    Bytes v6 = ipv6_frame(IPPROTO_UDP, "2001:db8::1", "2001:db8::2", 1, 2);
    const uint32_t v6_length = static_cast<uint32_t>(v6.size());
    v6.insert(v6.end(), 20, 0xee);
    REQUIRE(parse(v6, meta, tuple, datagram_end) == DropReason::none);
    CHECK(datagram_end == v6_length);
    CHECK(datagram_end == 14u + 40 + 8);

    // Behind a VLAN tag the datagram starts 4 bytes later.
    Bytes tagged(v4.begin(), v4.begin() + 12);
    const uint8_t tag[] = {0x81, 0x00, 0x00, 0x0a};
    tagged.insert(tagged.end(), std::begin(tag), std::end(tag));
    tagged.insert(tagged.end(), v4.begin() + 12, v4.end());
    REQUIRE(parse(tagged, meta, tuple, datagram_end) == DropReason::none);
    CHECK(datagram_end == v4_length + 4);

    // No IP datagram: the whole frame (ARP keeps its padding).
    Bytes arp = ethernet(0x0806);
    arp.resize(60, 0);
    CHECK(parse(arp, meta, tuple, datagram_end) == DropReason::not_ip);
    CHECK(datagram_end == 60);
}

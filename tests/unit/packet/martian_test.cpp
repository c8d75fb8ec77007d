// The martian check on parsed frames: each address class, source and destination, the land check, port 0, sluice's
// own addresses and the ports' directed broadcasts, the per-family switch, and what it must leave alone (an ICMP
// error quoting sluice's own packet, UDP to a multicast group, link-local traffic to sluice itself).
#include <catch2/catch.hpp>

#include "common/frames.hpp"
#include "packet/martian.hpp"
#include "packet/packet_meta.hpp"

using namespace sluice;
using namespace sluice::test;

namespace {

IpAddress address(const char* text) {
    const Bytes b = address_bytes(text);
    IpAddress a{};
    std::memcpy(a.bytes, b.data(), b.size());
    return a;
}

IpFamily family_of(const char* text) { return is_v6(text) ? IpFamily::ipv6 : IpFamily::ipv4; }

// A port at 10.0.0.254/24 and 2001:db8::fe/64, the NAT pool 10.1.0.100, the nat VIP 192.0.2.100.
MartianFilter lab_filter(bool ipv4 = true, bool ipv6 = true) {
    MartianFilter f;
    f.set_checked(ipv4, ipv6);
    f.add_port_address(IpFamily::ipv4, address("10.0.0.254"), 24);
    f.add_port_address(IpFamily::ipv4, address("10.9.0.0"), 31);  // RFC 3021: no broadcast address
    f.add_port_address(IpFamily::ipv6, address("2001:db8::fe"), 64);
    for (const char* own : {"10.1.0.100", "192.0.2.100"}) f.add_service_address(family_of(own), address(own));
    f.seal();
    return f;
}

DropReason check(const MartianFilter& filter, const Bytes& f) {
    PacketMeta meta;
    FiveTuple tuple;
    uint32_t end;
    REQUIRE(parse_frame(f.data(), static_cast<uint32_t>(f.size()), {}, meta, tuple, end) == DropReason::none);
    return filter.check(f.data(), meta, tuple);
}

FrameSpec echo_spec(const char* src, const char* dst, uint16_t id) {
    FrameSpec f = udp_spec(src, id, dst, id);
    f.proto = IPPROTO_ICMP;
    return f;
}

// An ICMPv4 "fragmentation needed" from router to the quoted packet's source, quoting its IP header and 8 bytes.
Bytes icmp_error_quoting(const char* router, const Bytes& quoted) {
    const std::size_t quote_length = 20 + 8;
    Bytes icmp(8 + quote_length, 0);
    icmp[0] = 3, icmp[1] = 4;
    std::memcpy(&icmp[8], &quoted[14], quote_length);
    const uint16_t sum = checksum_compute(icmp.data(), icmp.size());
    std::memcpy(&icmp[2], &sum, 2);
    Bytes f(quoted.begin(), quoted.begin() + 14);
    Bytes ip(20, 0);
    ip[0] = 0x45, ip[8] = 64, ip[9] = IPPROTO_ICMP;
    put16(&ip[2], static_cast<uint16_t>(20 + icmp.size()));
    const Bytes src = address_bytes(router);
    std::memcpy(&ip[12], src.data(), 4);
    std::memcpy(&ip[16], &quoted[14 + 12], 4);  // to the quoted packet's source
    const uint16_t ip_sum = checksum_compute(ip.data(), 20);
    std::memcpy(&ip[10], &ip_sum, 2);
    f.insert(f.end(), ip.begin(), ip.end());
    f.insert(f.end(), icmp.begin(), icmp.end());
    return f;
}

// The frame as an IPv4 fragment: first (more fragments) or a later one at offset 8 bytes.
Bytes as_fragment(Bytes f, bool first) {
    f[14 + 6] = first ? 0x20 : 0x00;
    f[14 + 7] = first ? 0x00 : 0x01;
    f[14 + 10] = f[14 + 11] = 0;
    const uint16_t sum = checksum_compute(&f[14], 20);
    std::memcpy(&f[14 + 10], &sum, 2);
    return f;
}

struct Row {
    const char* description;
    FrameSpec frame;
    DropReason expected;
};

}  // namespace

TEST_CASE("martians: every class of source and destination, land and port 0", "[martian]") {
    const MartianFilter filter = lab_filter();
    const char* client = "203.0.113.9";
    const char* client6 = "2001:db8:ff::9";
    using R = DropReason;
    // clang-format off
    const std::vector<Row> rows = {
        {"plain unicast TCP passes", tcp_spec(client, 40000, "10.0.0.2", 443), R::none},
        {"plain unicast IPv6 UDP passes", udp_spec(client6, 5000, "2001:db8::2", 53), R::none},
        {"source 255.255.255.255", tcp_spec("255.255.255.255", 1, "192.0.2.100", 80), R::martian_source_broadcast},
        {"source a port's directed broadcast", udp_spec("10.0.0.255", 1, "10.0.1.1", 53), R::martian_source_broadcast},
        {"a /31 has no broadcast: its top address is a host", udp_spec("10.9.0.1", 1, "10.0.1.1", 53), R::none},
        {"source multicast 224.0.0.1", udp_spec("224.0.0.1", 1, "10.0.0.2", 53), R::martian_source_multicast},
        {"source multicast 239.255.0.1", udp_spec("239.255.0.1", 1, "10.0.0.2", 53), R::martian_source_multicast},
        {"source 0.0.0.0", udp_spec("0.0.0.0", 68, "10.0.0.2", 67), R::martian_source_unspecified},
        {"source 0.1.2.3 (this network)", tcp_spec("0.1.2.3", 1, "10.0.0.2", 80), R::martian_source_unspecified},
        {"source 127.0.0.1", tcp_spec("127.0.0.1", 1, "10.0.0.2", 80), R::martian_source_loopback},
        {"source 127.255.0.1", tcp_spec("127.255.0.1", 1, "10.0.0.2", 80), R::martian_source_loopback},
        {"source link-local to another host", tcp_spec("169.254.1.1", 1, "10.0.0.2", 80), R::martian_source_link_local},
        {"source link-local to sluice's own address (on its link)", echo_spec("169.254.1.1", "10.0.0.254", 7), R::none},
        {"source link-local to a VIP (its connection leaves the link)", tcp_spec("169.254.1.1", 1, "192.0.2.100", 80),
         R::martian_source_link_local},
        {"source class E", tcp_spec("240.0.0.1", 1, "10.0.0.2", 80), R::martian_source_reserved},
        {"source class E 254.1.1.1", tcp_spec("254.1.1.1", 1, "10.0.0.2", 80), R::martian_source_reserved},
        {"source a port's address", tcp_spec("10.0.0.254", 1, "10.0.0.2", 80), R::martian_source_own},
        {"source the NAT pool", tcp_spec("10.1.0.100", 1, "10.1.0.11", 8080), R::martian_source_own},
        {"source a nat VIP", tcp_spec("192.0.2.100", 80, client, 40000), R::martian_source_own},
        {"destination 0.0.0.0", udp_spec(client, 1, "0.0.0.0", 53), R::martian_destination_unspecified},
        {"destination 127.0.0.1", tcp_spec(client, 1, "127.0.0.1", 80), R::martian_destination_loopback},
        {"destination class E", tcp_spec(client, 1, "250.0.0.1", 80), R::martian_destination_reserved},
        {"destination 255.255.255.255", udp_spec(client, 1, "255.255.255.255", 53), R::martian_destination_broadcast},
        {"destination a directed broadcast", udp_spec(client, 1, "10.0.0.255", 53), R::martian_destination_broadcast},
        {"echo to a directed broadcast (smurf)", echo_spec(client, "10.0.0.255", 1), R::martian_destination_broadcast},
        {"TCP to a multicast group", tcp_spec(client, 1, "224.0.0.1", 80), R::martian_destination_multicast},
        {"UDP to a multicast group is not routed", udp_spec(client, 5000, "239.1.2.3", 5000), R::multicast_not_routed},
        {"mDNS from a link-local source: multicast, not a crossing", udp_spec("169.254.3.3", 5353, "224.0.0.251", 5353),
         R::multicast_not_routed},
        {"echo to all hosts", echo_spec(client, "224.0.0.1", 7), R::multicast_not_routed},
        {"destination link-local", tcp_spec(client, 1, "169.254.9.9", 80), R::martian_destination_link_local},
        {"land: source = destination", tcp_spec(client, 80, client, 80), R::martian_land},
        {"land on a VIP", tcp_spec("192.0.2.100", 80, "192.0.2.100", 80), R::martian_land},
        {"TCP source port 0", tcp_spec(client, 0, "10.0.0.2", 80), R::martian_port_zero},
        {"UDP destination port 0", udp_spec(client, 5000, "10.0.0.2", 0), R::martian_port_zero},
        {"an echo with identifier 0 has no ports", echo_spec(client, "10.0.0.2", 0), R::none},
        {"IPv6 source multicast", udp_spec("ff02::1", 1, "2001:db8::2", 53), R::martian_source_multicast},
        {"IPv6 source ::", udp_spec("::", 1, "2001:db8::2", 53), R::martian_source_unspecified},
        {"IPv6 source ::1", tcp_spec("::1", 1, "2001:db8::2", 80), R::martian_source_loopback},
        {"IPv6 source v4-mapped", tcp_spec("::ffff:10.0.0.1", 1, "2001:db8::2", 80), R::martian_source_v4_mapped},
        {"IPv6 source link-local to another host", tcp_spec("fe80::1", 1, "2001:db8::2", 80),
         R::martian_source_link_local},
        {"IPv6 source link-local to sluice's own address", echo_spec("fe80::1", "2001:db8::fe", 7), R::none},
        {"IPv6 source a port's address", tcp_spec("2001:db8::fe", 1, "2001:db8::2", 80), R::martian_source_own},
        {"IPv6 destination ::", udp_spec(client6, 1, "::", 53), R::martian_destination_unspecified},
        {"IPv6 destination ::1", udp_spec(client6, 1, "::1", 53), R::martian_destination_loopback},
        {"IPv6 TCP to a multicast group", tcp_spec(client6, 1, "ff02::1", 80), R::martian_destination_multicast},
        {"IPv6 UDP to a multicast group is not routed", udp_spec(client6, 1, "ff0e::1:3", 547), R::multicast_not_routed},
        {"IPv6 link-local source to all nodes (an RA, MLD): multicast, not a crossing", echo_spec("fe80::1", "ff02::1", 7),
         R::multicast_not_routed},
        {"IPv6 destination link-local", udp_spec(client6, 1, "fe80::9", 53), R::martian_destination_link_local},
        {"IPv6 land", tcp_spec(client6, 80, client6, 80), R::martian_land},
        {"IPv6 UDP source port 0", udp_spec(client6, 0, "2001:db8::2", 53), R::martian_port_zero},
    };
    // clang-format on
    for (const Row& row : rows) {
        INFO(row.description);
        CHECK(drop_reason_name(check(filter, frame(row.frame))) == drop_reason_name(row.expected));
    }
}

TEST_CASE("martians: fragments and ICMP errors are judged on what they carry", "[martian]") {
    const MartianFilter filter = lab_filter();
    // A first fragment has its ports; a later one has none to judge.
    CHECK(check(filter, as_fragment(frame(udp_spec("203.0.113.9", 5000, "10.0.0.2", 0)), true)) ==
          DropReason::martian_port_zero);
    CHECK(check(filter, as_fragment(frame(udp_spec("203.0.113.9", 5000, "10.0.0.2", 0)), false)) == DropReason::none);
    CHECK(check(filter, as_fragment(frame(udp_spec("127.0.0.1", 5000, "10.0.0.2", 53)), false)) ==
          DropReason::martian_source_loopback);
    // An ICMP error about sluice's own packet (from the VIP) quotes sluice's address as source: that is no martian.
    const Bytes from_vip = frame(tcp_spec("192.0.2.100", 80, "203.0.113.9", 40000, kSyn | kAck));
    CHECK(check(filter, icmp_error_quoting("198.51.100.1", from_vip)) == DropReason::none);
    // Its own outer addresses are judged.
    CHECK(check(filter, icmp_error_quoting("127.0.0.1", from_vip)) == DropReason::martian_source_loopback);
}

TEST_CASE("martians: each family's check can be turned off alone", "[martian]") {
    const Bytes v4 = frame(tcp_spec("255.255.255.255", 1, "192.0.2.100", 80));
    const Bytes v6 = frame(udp_spec("ff02::1", 1, "2001:db8::2", 53));
    const MartianFilter v4_off = lab_filter(false, true);
    CHECK(check(v4_off, v4) == DropReason::none);
    CHECK(check(v4_off, v6) == DropReason::martian_source_multicast);
    const MartianFilter v6_off = lab_filter(true, false);
    CHECK(check(v6_off, v4) == DropReason::martian_source_broadcast);
    CHECK(check(v6_off, v6) == DropReason::none);
}

TEST_CASE("martians: with no address of its own, sluice still knows every class", "[martian]") {
    MartianFilter bare;
    bare.seal();
    CHECK(check(bare, frame(tcp_spec("203.0.113.9", 1, "10.0.0.2", 80))) == DropReason::none);
    CHECK(check(bare, frame(tcp_spec("10.0.0.255", 1, "10.0.0.2", 80))) == DropReason::none);  // no network known
    CHECK(check(bare, frame(tcp_spec("169.254.1.1", 1, "10.0.0.254", 80))) == DropReason::martian_source_link_local);
    CHECK(check(bare, frame(tcp_spec("224.0.0.5", 1, "10.0.0.2", 80))) == DropReason::martian_source_multicast);
}

#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <array>
#include <random>
#include <set>

#include "common/five_tuple.hpp"
#include "common/random_tuple.hpp"

using namespace sluice;

namespace {

FiveTuple random_tuple(std::mt19937_64& rng, IpFamily family) {
    return test::random_tuple(rng, family, (rng() & 1) ? IPPROTO_TCP : IPPROTO_UDP);
}

}  // namespace

TEST_CASE("symmetric hash: both directions of a flow hash alike", "[five_tuple]") {
    std::mt19937_64 rng(42);
    for (IpFamily family : {IpFamily::ipv4, IpFamily::ipv6}) {
        for (int i = 0; i < 5000; ++i) {
            const FiveTuple t = random_tuple(rng, family);
            INFO(to_string(t));
            REQUIRE(symmetric_flow_hash(t) == symmetric_flow_hash(t.reversed()));
        }
    }
}

TEST_CASE("symmetric hash: equal addresses order by port", "[five_tuple]") {
    FiveTuple t;
    t.family = IpFamily::ipv4;
    t.proto = IPPROTO_UDP;
    t.src = t.dst = IpAddress::from_v4(0x0100007f);
    t.src_port = htons(1000);
    t.dst_port = htons(2000);
    CHECK(symmetric_flow_hash(t) == symmetric_flow_hash(t.reversed()));
    FiveTuple other = t;
    other.dst_port = htons(2001);
    CHECK(symmetric_flow_hash(t) != symmetric_flow_hash(other));
}

TEST_CASE("symmetric hash: distinct flows spread evenly over workers", "[five_tuple]") {
    std::mt19937_64 rng(7);
    constexpr int kFlows = 40000, kWorkers = 4;
    std::array<int, kWorkers> per_worker{};
    std::set<uint32_t> hashes;
    for (int i = 0; i < kFlows; ++i) {
        const uint32_t h = symmetric_flow_hash(random_tuple(rng, i % 2 ? IpFamily::ipv6 : IpFamily::ipv4));
        hashes.insert(h);
        ++per_worker[(uint64_t{h} * kWorkers) >> 32];
    }
    CHECK(hashes.size() > kFlows * 99 / 100);  // 32-bit hash: a handful of collisions at most
    for (int n : per_worker) {
        CHECK(n > kFlows / kWorkers * 95 / 100);
        CHECK(n < kFlows / kWorkers * 105 / 100);
    }
}

TEST_CASE("symmetric hash: protocol and family are part of the flow", "[five_tuple]") {
    std::mt19937_64 rng(3);
    FiveTuple t = random_tuple(rng, IpFamily::ipv4);
    FiveTuple u = t;
    u.proto = t.proto == IPPROTO_TCP ? IPPROTO_UDP : IPPROTO_TCP;
    CHECK(symmetric_flow_hash(t) != symmetric_flow_hash(u));
}

TEST_CASE("symmetric hash: its values are pinned (RX lcores, workers and the XDP steering program must agree)", "[five_tuple]") {
    // Values of the implementation every part of sluice has used so far; a change here moves every flow to
    // another worker and breaks the XDP program's steering (lib/xdp/steer.bpf.c computes the same).
    FiveTuple a;
    a.family = IpFamily::ipv4;
    a.proto = IPPROTO_TCP;
    a.src.words[0] = htonl(0x0a000001);  // 10.0.0.1:40000 -> 192.168.1.5:443
    a.dst.words[0] = htonl(0xc0a80105);
    a.src_port = htons(40000);
    a.dst_port = htons(443);
    FiveTuple b;
    b.family = IpFamily::ipv4;
    b.proto = IPPROTO_UDP;
    b.src.words[0] = htonl(0xc6336407);  // 198.51.100.7:53 -> 10.0.0.1:5353: the source is the higher endpoint
    b.dst.words[0] = htonl(0x0a000001);
    b.src_port = htons(53);
    b.dst_port = htons(5353);
    FiveTuple c;
    c.family = IpFamily::ipv6;
    c.proto = IPPROTO_TCP;
    REQUIRE(inet_pton(AF_INET6, "2001:db8::1", c.src.bytes) == 1);
    REQUIRE(inet_pton(AF_INET6, "2001:db8:ffff::2", c.dst.bytes) == 1);
    c.src_port = htons(1234);
    c.dst_port = htons(80);
    CHECK(symmetric_flow_hash(a) == 0x7c0dd436u);
    CHECK(symmetric_flow_hash(b) == 0x423fbd23u);
    CHECK(symmetric_flow_hash(c) == 0x50758645u);
    // The IPv4 hash from values in canonical order (the connection table's 16-byte keys) is the same function.
    CHECK(ordered_ipv4_flow_hash(a.src.words[0], a.dst.words[0], a.src_port, a.dst_port, a.proto) == 0x7c0dd436u);
    CHECK(ordered_ipv4_flow_hash(b.dst.words[0], b.src.words[0], b.dst_port, b.src_port, b.proto) == 0x423fbd23u);
}

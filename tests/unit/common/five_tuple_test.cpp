#include <catch2/catch.hpp>

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

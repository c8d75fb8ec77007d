#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <random>
#include <set>
#include <vector>

#include "common/crc_collisions.hpp"
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
            REQUIRE(stable_flow_hash(t) == stable_flow_hash(t.reversed()));
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

TEST_CASE("stable hash: distinct flows spread evenly over Maglev slots", "[five_tuple]") {
    std::mt19937_64 rng(9);
    constexpr uint32_t kSlots = 65537, kFlows = 20 * kSlots;
    std::vector<uint32_t> per_slot(kSlots);
    for (uint32_t i = 0; i < kFlows; ++i)
        ++per_slot[stable_flow_hash(random_tuple(rng, i % 2 ? IpFamily::ipv6 : IpFamily::ipv4)) % kSlots];
    // Poisson(20) per slot. Seeded flows and an unkeyed hash: the same counts every run (random flows would give
    // an empty or an over-50 slot about once in 2000 runs).
    CHECK(*std::min_element(per_slot.begin(), per_slot.end()) >= 1);
    CHECK(*std::max_element(per_slot.begin(), per_slot.end()) <= 50);
}

TEST_CASE("symmetric hash: protocol and family are part of the flow", "[five_tuple]") {
    std::mt19937_64 rng(3);
    FiveTuple t = random_tuple(rng, IpFamily::ipv4);
    FiveTuple u = t;
    u.proto = t.proto == IPPROTO_TCP ? IPPROTO_UDP : IPPROTO_TCP;
    CHECK(symmetric_flow_hash(t) != symmetric_flow_hash(u));
}

TEST_CASE("stable hash: its values are pinned (every sluice picks the same Maglev backend for a flow)",
          "[five_tuple]") {
    // Values of the implementation every sluice has used so far: a change here sends flows to other backends
    // after an upgrade, and boxes of two versions behind one ECMP group would disagree.
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
    CHECK(stable_flow_hash(a) == 0x7c0dd436u);
    CHECK(stable_flow_hash(b) == 0x423fbd23u);
    CHECK(stable_flow_hash(c) == 0x50758645u);
    // The keyed IPv4 hash from values in canonical order (the connection table's 16-byte keys) is
    // symmetric_flow_hash.
    CHECK(ordered_ipv4_flow_hash(a.src.words[0], a.dst.words[0], a.src_port, a.dst_port, a.proto) ==
          symmetric_flow_hash(a));
    CHECK(ordered_ipv4_flow_hash(b.dst.words[0], b.src.words[0], b.dst_port, b.src_port, b.proto) ==
          symmetric_flow_hash(b));
}

TEST_CASE("keyed hash: another key gives other values, the same key the same", "[five_tuple]") {
    const FlowHashKey running = flow_hash_detail::process_key;
    std::mt19937_64 rng(11);
    FlowHashKey first, second;
    for (uint64_t& w : first.words) w = rng();
    for (uint64_t& w : second.words) w = rng();
    std::vector<FiveTuple> tuples;
    for (int i = 0; i < 200; ++i) tuples.push_back(random_tuple(rng, i % 2 ? IpFamily::ipv6 : IpFamily::ipv4));
    // Every keyed hash: the flow's, its source's and its datagram's (the fragment table's key).
    const auto hashes = [&tuples] {
        std::vector<uint32_t> out;
        for (const FiveTuple& t : tuples) {
            out.push_back(symmetric_flow_hash(t));
            out.push_back(keyed_source_hash(t.src, t.family));
            out.push_back(keyed_datagram_hash(t.src, t.dst, t.src_port, t.proto, t.family));
        }
        return out;
    };
    set_flow_hash_key(first);
    const std::vector<uint32_t> under_first = hashes();
    set_flow_hash_key(second);
    const std::vector<uint32_t> under_second = hashes();
    set_flow_hash_key(first);
    CHECK(hashes() == under_first);
    set_flow_hash_key(running);
    std::size_t same = 0;
    for (std::size_t i = 0; i < under_first.size(); ++i) same += under_first[i] == under_second[i];
    CHECK(same <= 1);
    // The process's own key is random: not the zero key a missing initialisation would leave.
    CHECK(std::any_of(std::begin(running.words), std::end(running.words), [](uint64_t w) { return w != 0; }));
}

TEST_CASE("keyed hash: flows crafted to share one CRC32C spread over buckets and workers", "[five_tuple]") {
    const std::vector<FiveTuple> crafted = test::tuples_sharing_one_crc(12);
    REQUIRE(crafted.size() == 4096);
    std::set<uint32_t> stable, buckets;
    std::array<int, 2> per_worker{};
    for (const FiveTuple& t : crafted) {
        REQUIRE(source_is_low(t));
        stable.insert(stable_flow_hash(t));
        const uint32_t h = symmetric_flow_hash(t);
        buckets.insert(h & 0xffff);  // a 64k-bucket table's bucket
        ++per_worker[(uint64_t{h} * 2) >> 32];
    }
    // The attack works on CRC32C: 4096 distinct flows, one hash, so one bucket and one worker.
    std::set<std::array<uint8_t, sizeof(FiveTuple)>> distinct;
    for (const FiveTuple& t : crafted) {
        std::array<uint8_t, sizeof(FiveTuple)> bytes;
        std::memcpy(bytes.data(), &t, sizeof t);
        distinct.insert(bytes);
    }
    CHECK(distinct.size() == crafted.size());
    CHECK(stable.size() == 1);
    // The keyed hash scatters them as it would random flows: 4096 draws over 65536 buckets leave about 3970
    // distinct, and each of two workers gets about half.
    CHECK(buckets.size() > 3800);
    for (int n : per_worker) CHECK(std::abs(n - 2048) < 200);
}

// SourceLimiter (lib/pipeline/source_limiter.hpp) on its own: when a source may be forgotten, and what a lookup costs.
#include <catch2/catch.hpp>

#include <cstring>
#include <iostream>
#include <vector>

#include <rte_cycles.h>

#include "pipeline/source_limiter.hpp"

using namespace sluice;

namespace {

IpAddress v4(uint32_t host_order) {
    IpAddress a{};
    a.words[0] = __builtin_bswap32(host_order);
    return a;
}

RateLimit one_a_second_burst_two() {
    RateLimit limit;
    limit.tokens_per_tsc = 1.0 / static_cast<double>(rte_get_tsc_hz());
    limit.burst = 2;
    limit.per_source = true;
    return limit;
}

}  // namespace

TEST_CASE("source limiter: a source is forgotten only once its bucket is full again", "[source_limiter]") {
    SourceLimiter limiter("sl_src_test_expiry", 0, one_a_second_burst_two());
    const uint64_t second = rte_get_tsc_hz();
    const IpAddress a = v4(0x0a000001), b = v4(0x0a000002), c = v4(0x0a000003);
    bool overflowed;
    CHECK(limiter.take(a, IpFamily::ipv4, 0, overflowed));
    CHECK(limiter.take(a, IpFamily::ipv4, 0, overflowed));
    CHECK_FALSE(limiter.take(a, IpFamily::ipv4, 0, overflowed));
    // One second on, a holds one token: a new source must not make it forget a (that would hand a two again).
    CHECK(limiter.take(b, IpFamily::ipv4, second, overflowed));
    CHECK(limiter.sources() == 2);
    CHECK(limiter.take(a, IpFamily::ipv4, second, overflowed));
    CHECK_FALSE(limiter.take(a, IpFamily::ipv4, second, overflowed));
    CHECK_FALSE(overflowed);
    // Three seconds on, both are full again: the next new source forgets them, oldest first.
    CHECK(limiter.take(c, IpFamily::ipv4, 3 * second, overflowed));
    CHECK(limiter.sources() == 1);
    CHECK(limiter.take(a, IpFamily::ipv4, 3 * second, overflowed));
    CHECK(limiter.take(a, IpFamily::ipv4, 3 * second, overflowed));
    CHECK_FALSE(limiter.take(a, IpFamily::ipv4, 3 * second, overflowed));
}

TEST_CASE("source limiter: the same 4 bytes as an IPv4 and an IPv6 source are two sources", "[source_limiter]") {
    SourceLimiter limiter("sl_src_test_family", 0, one_a_second_burst_two());
    const IpAddress address = v4(0x20010db8);
    bool overflowed;
    for (int i = 0; i < 2; ++i) CHECK(limiter.take(address, IpFamily::ipv4, 0, overflowed));
    CHECK(limiter.take(address, IpFamily::ipv6, 0, overflowed));
    CHECK(limiter.sources() == 2);
}

TEST_CASE("source limiter: an IPv6 /64 is one sender, whatever addresses it sends from", "[source_limiter]") {
    SourceLimiter limiter("sl_src_test_slash64", 0, one_a_second_burst_two());
    // 2001:db8:0:1::/64 sends from three addresses; 2001:db8:0:2::1 is another /64.
    auto v6 = [](uint16_t subnet, uint64_t interface_id) {
        IpAddress a{};
        const uint8_t prefix[6] = {0x20, 0x01, 0x0d, 0xb8, 0, 0};
        std::memcpy(a.bytes, prefix, sizeof prefix);
        a.bytes[6] = static_cast<uint8_t>(subnet >> 8);
        a.bytes[7] = static_cast<uint8_t>(subnet);
        for (int i = 0; i < 8; ++i) a.bytes[15 - i] = static_cast<uint8_t>(interface_id >> (8 * i));
        return a;
    };
    bool overflowed;
    CHECK(limiter.take(v6(1, 1), IpFamily::ipv6, 0, overflowed));
    CHECK(limiter.take(v6(1, 0xdead), IpFamily::ipv6, 0, overflowed));
    CHECK_FALSE(limiter.take(v6(1, 0xbeef00000001), IpFamily::ipv6, 0, overflowed));
    CHECK_FALSE(overflowed);
    CHECK(limiter.sources() == 1);
    CHECK(limiter.take(v6(2, 1), IpFamily::ipv6, 0, overflowed));
    CHECK(limiter.sources() == 2);
}

// The figures for docs: `dpdk_unit_tests "[.source_limiter_cost]"` in a release build.
TEST_CASE("source limiter: cycles per token with a full table", "[.source_limiter_cost]") {
    SourceLimiter limiter("sl_src_test_cost", 0, one_a_second_burst_two());
    std::vector<IpAddress> sources;
    for (uint32_t i = 0; i < SourceLimiter::kCapacity; ++i) sources.push_back(v4(0x64400000 + i));
    bool overflowed;
    uint64_t start = rte_rdtsc();
    for (const IpAddress& s : sources) limiter.take(s, IpFamily::ipv4, 1, overflowed);
    const uint64_t new_sources = rte_rdtsc() - start;
    start = rte_rdtsc();
    for (const IpAddress& s : sources) limiter.take(s, IpFamily::ipv4, 2, overflowed);
    const uint64_t known_sources = rte_rdtsc() - start;
    // Every bucket refilled: each new source forgets old ones to make room.
    start = rte_rdtsc();
    for (uint32_t i = 0; i < SourceLimiter::kCapacity; ++i)
        limiter.take(v4(0x65400000 + i), IpFamily::ipv4, 10 * rte_get_tsc_hz(), overflowed);
    const uint64_t replacing = rte_rdtsc() - start;
    CHECK(limiter.sources() <= SourceLimiter::kCapacity);
    std::cout << "source limiter, cycles per take at " << SourceLimiter::kCapacity << " sources: new source "
              << new_sources / SourceLimiter::kCapacity << ", known source " << known_sources / SourceLimiter::kCapacity
              << ", new source forgetting old ones " << replacing / SourceLimiter::kCapacity << "\n";
}

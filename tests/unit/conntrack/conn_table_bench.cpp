// Hidden benchmarks (not run by default): cycles per operation of the connection table at 1k, 100k and 1M live
// connections, in bursts of 32 as a worker would issue them. Run by hand:
//   build/tests/unit/dpdk_unit_tests "[conntrack-bench]"
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#include <rte_cycles.h>

#include "common/crc_collisions.hpp"
#include "conntrack/conn_table.hpp"
#include "conntrack/tcp_state.hpp"
#include "conntrack_test_util.hpp"

using namespace sluice;
using namespace sluice::test;

namespace {

constexpr uint32_t kBurst = 32;

// Cycles per operation of the median burst: robust against preemption on a shared machine.
double median_per_op(std::vector<uint64_t>& burst_cycles) {
    std::nth_element(burst_cycles.begin(), burst_cycles.begin() + burst_cycles.size() / 2, burst_cycles.end());
    return static_cast<double>(burst_cycles[burst_cycles.size() / 2]) / kBurst;
}

struct Burst {
    const FiveTuple* tuples[kBurst];
    uint32_t hashes[kBurst];
};

// The tuples of a burst picked at random from `pool` (random order defeats the caches, as real traffic does),
// with their hashes computed beforehand as the RX lcore does.
Burst make_burst(const std::vector<FiveTuple>& pool, std::mt19937_64& rng, bool reverse_half,
                 std::vector<FiveTuple>& storage) {
    Burst b;
    for (uint32_t i = 0; i < kBurst; ++i) {
        const FiveTuple& t = pool[rng() % pool.size()];
        storage[i] = (reverse_half && (i & 1)) ? t.reversed() : t;
        b.tuples[i] = &storage[i];
        b.hashes[i] = symmetric_flow_hash(storage[i]);
    }
    return b;
}

void bench(uint32_t live) {
    const uint32_t capacity = live + 2 * kBurst;
    ConnTable table(unique_table_name(), capacity, SOCKET_ID_ANY, ConnTimeouts{}, rte_get_tsc_hz());
    std::vector<FiveTuple> flows;
    flows.reserve(live);
    for (uint32_t i = 0; i < live; ++i) flows.push_back(nth_tuple(i));
    std::mt19937_64 rng(1);
    std::shuffle(flows.begin(), flows.end(), rng);

    // The first fill also pays the first touch of every page (rte_zmalloc skips zeroing fresh memory).
    uint64_t fill_cycles = 0;
    for (uint32_t i = 0; i < live; ++i) {
        const uint64_t t0 = rte_rdtsc();
        REQUIRE(table.insert(flows[i], symmetric_flow_hash(flows[i]), ConnState::tcp_established, 0, 0) >= 0);
        fill_cycles += rte_rdtsc() - t0;
    }
    const double fill = static_cast<double>(fill_cycles) / live;

    const int rounds = 20000;
    std::vector<FiveTuple> storage(kBurst);
    int32_t positions[kBurst];
    std::vector<uint64_t> hit_cycles, track_cycles, miss_cycles, insert_cycles, remove_cycles, expire_cycles;

    // Hits, half of them from the reply direction; then track() on each (lookup_bulk prefetched the entries).
    for (int r = 0; r < rounds; ++r) {
        const Burst b = make_burst(flows, rng, true, storage);
        uint64_t t0 = rte_rdtsc();
        table.lookup_bulk(b.tuples, b.hashes, kBurst, positions);
        const uint64_t t1 = rte_rdtsc();
        for (uint32_t i = 0; i < kBurst; ++i) table.track(positions[i], *b.tuples[i], tcp::kAck, t1);
        track_cycles.push_back(rte_rdtsc() - t1);
        hit_cycles.push_back(t1 - t0);
        for (uint32_t i = 0; i < kBurst; ++i) REQUIRE(positions[i] >= 0);
    }

    // Misses (new flows).
    std::vector<FiveTuple> fresh;
    for (uint32_t i = 0; i < 1u << 16; ++i) fresh.push_back(nth_tuple(live + 2 * kBurst + i));
    for (int r = 0; r < rounds; ++r) {
        const Burst b = make_burst(fresh, rng, false, storage);
        const uint64_t t0 = rte_rdtsc();
        table.lookup_bulk(b.tuples, b.hashes, kBurst, positions);
        miss_cycles.push_back(rte_rdtsc() - t0);
    }

    // Insert 32 new connections at `live` live ones, then remove them (timed apart) to stay at `live`.
    for (int r = 0; r < rounds; ++r) {
        const Burst b = make_burst(fresh, rng, false, storage);
        int32_t added[kBurst];
        uint64_t t0 = rte_rdtsc();
        for (uint32_t i = 0; i < kBurst; ++i)
            added[i] = table.insert(*b.tuples[i], b.hashes[i], ConnState::tcp_syn_sent, 0, 0);
        const uint64_t t1 = rte_rdtsc();
        for (uint32_t i = 0; i < kBurst; ++i)
            if (added[i] >= 0) table.remove(added[i]);
        remove_cycles.push_back(rte_rdtsc() - t1);
        insert_cycles.push_back(t1 - t0);
        REQUIRE(table.size() == live);
    }

    // Expiry with nothing due: the cost of scanning 4 x 32 slots per call (reported per call, not per op).
    for (int r = 0; r < rounds; ++r) {
        const uint64_t t0 = rte_rdtsc();
        table.expire(0, kBurst);
        expire_cycles.push_back((rte_rdtsc() - t0) * kBurst);
    }

    std::printf("conntrack bench: %7u live | fill %5.0f | lookup hit %5.0f miss %5.0f | track %4.0f | insert %5.0f |"
                " remove %5.0f cycles/op | expire(32) idle %5.0f cycles/call\n",
                live, fill, median_per_op(hit_cycles), median_per_op(miss_cycles), median_per_op(track_cycles),
                median_per_op(insert_cycles), median_per_op(remove_cycles), median_per_op(expire_cycles));
}

// A sender's crafted flows (one CRC32C hash) inserted into, then looked up in, a table already holding `live`
// random connections: with the hashes the table used to take (stable_flow_hash, unkeyed CRC32C) and with its
// keyed hash. The CRC rows pass hashes that break ConnTable's contract (hash == symmetric_flow_hash) on purpose, to
// measure what it did before: only in a release build, whose asserts are off.
void bench_crafted(uint32_t capacity, uint32_t live, std::size_t log2_crafted) {
    const std::vector<FiveTuple> crafted = tuples_sharing_one_crc(log2_crafted);
    for (const bool keyed : {false, true}) {
        ConnTable table(unique_table_name(), capacity, SOCKET_ID_ANY, ConnTimeouts{}, rte_get_tsc_hz());
        std::vector<FiveTuple> random;
        for (uint32_t i = 0; i < live; ++i) random.push_back(nth_tuple(i));
        for (const FiveTuple& t : random)
            REQUIRE(table.insert(t, symmetric_flow_hash(t), ConnState::tcp_established, 0, 0) >= 0);
        std::vector<uint32_t> hashes;
        for (const FiveTuple& t : crafted) hashes.push_back(keyed ? symmetric_flow_hash(t) : stable_flow_hash(t));
        uint32_t inserted = 0;
        const uint64_t t0 = rte_rdtsc();
        for (std::size_t i = 0; i < crafted.size(); ++i)
            inserted += table.insert(crafted[i], hashes[i], ConnState::tcp_established, 0, 0) >= 0;
        const uint64_t insert_cycles = rte_rdtsc() - t0;
        // Lookups of the crafted flows in bursts, then of the random ones, as a worker would see both.
        const FiveTuple* ptrs[kBurst];
        uint32_t burst_hashes[kBurst];
        int32_t positions[kBurst];
        std::vector<uint64_t> crafted_cycles, random_cycles;
        std::mt19937_64 rng(5);
        std::vector<FiveTuple> storage(kBurst);
        for (int r = 0; r < 2000; ++r) {
            for (uint32_t i = 0; i < kBurst; ++i) {
                const std::size_t k = rng() % crafted.size();
                ptrs[i] = &crafted[k];
                burst_hashes[i] = hashes[k];
            }
            uint64_t a = rte_rdtsc();
            table.lookup_bulk(ptrs, burst_hashes, kBurst, positions);
            crafted_cycles.push_back(rte_rdtsc() - a);
            const Burst b = make_burst(random, rng, false, storage);
            a = rte_rdtsc();
            table.lookup_bulk(b.tuples, b.hashes, kBurst, positions);
            random_cycles.push_back(rte_rdtsc() - a);
        }
        std::printf("conntrack bench: %zu crafted flows (one CRC32C) into %u of %u slots, %-24s | inserted %5u, %8.0f "
                    "cycles/insert | lookup crafted %8.0f, random %5.0f cycles/op\n",
                    crafted.size(), live, capacity, keyed ? "keyed hash (now)" : "CRC32C hash (before)", inserted,
                    static_cast<double>(insert_cycles) / crafted.size(), median_per_op(crafted_cycles),
                    median_per_op(random_cycles));
    }
}

}  // namespace

TEST_CASE("ConnTable benchmark: flows crafted to share one CRC32C hash", "[.][conntrack-bench][crafted]") {
#ifndef NDEBUG
    WARN("needs a release build: the CRC32C rows pass hashes ConnTable's asserts refuse");
    return;
#endif
    std::printf("conntrack bench: TSC %.3f GHz, bursts of %u\n", rte_get_tsc_hz() / 1e9, kBurst);
    bench_crafted(1000000, 100000, 12);  // 95 % of 2^20 slots: plain cuckoo buckets
    bench_crafted(1040000, 100000, 12);  // above 96 %: rte_hash's extendable buckets
}

TEST_CASE("ConnTable benchmark: cycles per operation", "[.][conntrack-bench]") {
    std::printf("conntrack bench: TSC %.3f GHz, bursts of %u, hashes precomputed\n", rte_get_tsc_hz() / 1e9, kBurst);
    for (uint32_t live : {1000u, 100000u, 1000000u}) bench(live);
}

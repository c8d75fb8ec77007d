// A connection walk on a worker is bounded by time per slice (flow_walk.hpp), and while packets flow it takes one
// slice per interval at most: the data path keeps its share whatever the table's size.
#include <catch2/catch.hpp>

#include <algorithm>
#include <vector>

#include <rte_cycles.h>

#include "../conntrack/conntrack_test_util.hpp"
#include "pipeline/flow_walk.hpp"
#include "pipeline/lcore_context.hpp"

namespace sluice::test {
namespace {

struct WalkedWorker {
    static constexpr uint32_t kConnections = 20000;
    ConnTable table{unique_table_name(), kConnections, SOCKET_ID_ANY, ConnTimeouts{}, kFakeTscHz};
    LcoreContext ctx;

    WalkedWorker() {
        for (uint32_t i = 0; i < kConnections; ++i) {
            const FiveTuple t = nth_tuple(i);
            REQUIRE(table.insert(t, symmetric_flow_hash(t), ConnState::tcp_established, 0, 0) >= 0);
        }
        ctx.conn_table = &table;
        ctx.walk_slice_tsc = rte_get_tsc_hz() / 1'000'000 * kWalkSliceUs;
        ctx.walk_busy_interval_tsc = rte_get_tsc_hz() / 1'000'000 * kWalkBusyIntervalUs;
    }
};

}  // namespace

TEST_CASE("a walk slice stops at its deadline and the walk ends only at the end of the table", "[pipeline]") {
    WalkedWorker w;
    FlowWalk walk;
    advance_flow_walk(w.ctx, walk, 0);  // a deadline already past: a few slots, then the clock says stop
    CHECK(walk.cursor > 0);
    CHECK(walk.cursor < 64);
    CHECK_FALSE(walk.done.load());

    // Slices of 2 us each: many of them, and together the whole table.
    std::vector<uint64_t> lengths;
    while (!walk.done.load()) {
        const uint64_t t0 = rte_rdtsc();
        advance_flow_walk(w.ctx, walk, t0 + w.ctx.walk_slice_tsc);
        lengths.push_back(rte_rdtsc() - t0);
    }
    CHECK(walk.matched == WalkedWorker::kConnections);
    CHECK(lengths.size() > 10);
    // A slice overruns its deadline by a few slots at most; the median leaves out slices the OS preempted.
    std::nth_element(lengths.begin(), lengths.begin() + lengths.size() / 2, lengths.end());
    CHECK(lengths[lengths.size() / 2] < 2 * w.ctx.walk_slice_tsc);
}

TEST_CASE("a busy worker takes one walk slice per interval, an idle one a slice every iteration", "[pipeline]") {
    WalkedWorker w;
    FlowWalk walk;
    w.ctx.walk.store(&walk);
    const uint64_t now = rte_rdtsc();
    walk_slice(w.ctx, now, true);
    const uint32_t after_first = walk.cursor;
    REQUIRE(after_first > 0);
    walk_slice(w.ctx, now + 1, true);  // busy, within the interval: no slice
    CHECK(walk.cursor == after_first);
    walk_slice(w.ctx, now + 1, false);  // idle: a slice
    CHECK(walk.cursor > after_first);
    const uint32_t after_idle = walk.cursor;
    walk_slice(w.ctx, rte_rdtsc() + w.ctx.walk_busy_interval_tsc, true);  // busy, the interval over: a slice
    CHECK(walk.cursor > after_idle);

    while (!walk.done.load()) walk_slice(w.ctx, rte_rdtsc(), false);
    CHECK(walk.matched == WalkedWorker::kConnections);
    const uint32_t end = walk.cursor;
    walk_slice(w.ctx, rte_rdtsc(), false);  // a finished walk is left alone
    CHECK(walk.cursor == end);
}

}  // namespace sluice::test

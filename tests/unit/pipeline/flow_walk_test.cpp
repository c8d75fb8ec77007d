// A connection walk on a worker is bounded by time per slice (flow_walk.hpp), and while packets flow it takes one
// slice per interval at most: the data path keeps its share whatever the table's size.
#include <catch2/catch.hpp>

#include <algorithm>
#include <vector>

#include <rte_cycles.h>

#include "../conntrack/conntrack_test_util.hpp"
#include "pipeline/flow_walk.hpp"
#include "pipeline/lcore_context.hpp"
#include "pipeline/pipeline_lab.hpp"
#include "pipeline/snapshot.hpp"

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
    CHECK(walk_slice(w.ctx, now, true));
    const uint32_t after_first = walk.cursor;
    REQUIRE(after_first > 0);
    CHECK_FALSE(walk_slice(w.ctx, now + 1, true));  // busy, within the interval: no slice
    CHECK(walk.cursor == after_first);
    CHECK(walk_slice(w.ctx, now + 1, false));  // idle: a slice (and no idle sleep after it)
    CHECK(walk.cursor > after_first);
    const uint32_t after_idle = walk.cursor;
    walk_slice(w.ctx, rte_rdtsc() + w.ctx.walk_busy_interval_tsc, true);  // busy, the interval over: a slice
    CHECK(walk.cursor > after_idle);

    while (!walk.done.load()) walk_slice(w.ctx, rte_rdtsc(), false);
    CHECK(walk.matched == WalkedWorker::kConnections);
    const uint32_t end = walk.cursor;
    CHECK_FALSE(walk_slice(w.ctx, rte_rdtsc(), false));  // a finished walk is left alone: the worker may sleep
    CHECK(walk.cursor == end);
}

TEST_CASE("a dry run judges every connection of both families by the candidate's rules", "[pipeline]") {
    // More connections than one rte_acl call takes, the families interleaved in the table's order as they come.
    const std::string ports = R"(
ports:
  - {name: client, device: ring_client}
  - {name: server, device: ring_server}
lcores: [{id: 1, roles: [rx, worker]}]
forward:
  - {from: client, to: server, next_hop_mac: "02:00:00:00:00:0b"}
  - {from: server, to: client, next_hop_mac: "02:00:00:00:00:0a"}
firewall:
  default: allow
)";
    PipelineLab lab(ports);
    std::vector<Bytes> frames;
    uint64_t to_dns = 0;
    for (uint16_t i = 0; i < 31; ++i) {
        const uint16_t dport = i % 3 == 0 ? 53 : 80;
        to_dns += dport == 53;
        frames.push_back(frame(i % 2 ? udp_spec("2001:db8::7", 6000 + i, "2001:db8:1::9", dport)
                                     : udp_spec("203.0.113.7", 5000 + i, "198.51.100.9", dport)));
    }
    REQUIRE(lab.exchange("client", frames, "server").size() == frames.size());
    lab.reload(ports + "  rules:\n    - {name: no-dns, protocol: udp, destination_ports: 53, action: deny}\n");

    LcoreContext* worker = nullptr;
    lab.dataplane().for_each_lcore([&](const LcoreContext& ctx) {
        if (ctx.worker) worker = const_cast<LcoreContext*>(&ctx);
    });
    REQUIRE(worker);
    // The shortest slices (batches cut short by the clock), then one slice for the whole table (full batches).
    for (const uint64_t deadline : {uint64_t{0}, UINT64_MAX}) {
        FlowWalk walk;
        walk.candidate = &lab.snapshot();
        while (!walk.done.load()) advance_flow_walk(*worker, walk, deadline);
        CHECK(walk.examined == frames.size());
        CHECK(walk.would_deny == to_dns);
    }
}

}  // namespace sluice::test

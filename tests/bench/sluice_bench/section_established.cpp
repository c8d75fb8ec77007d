// Section established: stateful_burst on packets of tracked connections (1k, 100k and 1M live: --conns), where the
// connection lookup alone must settle them so the rule count should not matter; and firewall + forward beside
// forward_burst alone.
#include <cinttypes>
#include <cstdio>
#include <memory>

#include <rte_cycles.h>
#include <rte_lcore.h>

#include "pipeline/forward_stage.hpp"
#include "pipeline/stateful_stage.hpp"
#include "sections.hpp"
#include "services.hpp"
#include "traffic.hpp"

namespace sluice::bench {

namespace {

// --handshake: the same packets over a second table of the same connections whose TCP windows a three-way handshake
// opened (both sides seen, so every TCP packet is judged in the window strictly), against the first table's, where
// the windows are learned from the packets themselves (a side's first packet is learned, not judged). The two
// tables alternate pass by pass.
void established_after_handshake(Dpdk& d, const Options& o, Table& table, const Snapshot& snapshot,
                                 const std::vector<FiveTuple>& flows, const std::vector<PacketSpec>& stream,
                                 ConnTable& learned, const std::string& conns) {
    const auto live = static_cast<uint32_t>(flows.size());
    auto opened =
        std::make_unique<ConnTable>(table_name(), live, static_cast<int>(rte_socket_id()), ConnTimeouts{}, d.tsc_hz);
    const uint32_t refused = insert_established(*opened, flows) + open_windows_by_handshake(*opened, flows);
    if (refused) std::printf("WARNING: established (handshake): %u connections not opened\n", refused);
    LcoreContext& ctx = *d.ctx;
    const Stage on_learned = [&](rte_mbuf** pkts, uint16_t n) {
        return stateful_burst(ctx, snapshot, pkts, n, rte_rdtsc());
    };
    const auto drops_before = drops_of(d);
    auto r = interleaved(o.reps, {[&] {
                                      attach_conn_table(d, learned);
                                      return timed_pass(d, stream, on_learned);
                                  },
                                  [&] {
                                      attach_conn_table(d, *opened);
                                      return timed_pass(d, stream, on_learned);
                                  }});
    attach_conn_table(d, learned);
    table.add(Row{.id = "established-handshake-" + ordinal_count(live),
                  .measurement = "established, " + conns + ", windows from a handshake: stateful_burst, 10 rules",
                  .unit = "cycles/pkt",
                  .reference = "the same, windows learned mid-stream",
                  .ref = stat_of(r[0]),
                  .sluice = stat_of(r[1])});
    const std::string drops = drops_since(d, drops_before);
    if (!drops.empty())
        std::printf("WARNING: established (handshake) %s: packets were dropped: {%s}\n", conns.c_str(), drops.c_str());
}

}  // namespace

void section_established(Dpdk& d, const Options& o, Table& table) {
    const auto rules_small = generate_rules(10, o.seed);
    const auto rules_large = generate_rules(10000, o.seed);
    const auto snap_small = make_snapshot(d, rules_small);
    const uint64_t t0 = rte_rdtsc();
    const auto snap_large = make_snapshot(d, rules_large);
    std::printf("established: snapshot with 10k rules built in %.2f s\n", seconds_since(d, t0));
    LcoreContext& ctx = *d.ctx;

    for (const uint32_t live : o.conns) {
        Rng rng(o.seed + live);
        const std::vector<FiveTuple> flows = distinct_flows(live, rng, 70);
        auto conn_table = std::make_unique<ConnTable>(table_name(), live, static_cast<int>(rte_socket_id()),
                                                      ConnTimeouts{}, d.tsc_hz);
        const uint32_t refused = insert_established(*conn_table, flows);
        if (refused) std::printf("WARNING: %u of %u connections did not fit in a table of %u\n", refused, live, live);
        attach_conn_table(d, *conn_table);

        const std::vector<PacketSpec> stream = random_packets(flows, o.packets, rng);
        const Stage fw_small = [&](rte_mbuf** pkts, uint16_t n) {
            return stateful_burst(ctx, *snap_small, pkts, n, rte_rdtsc());
        };
        const Stage fw_large = [&](rte_mbuf** pkts, uint16_t n) {
            return stateful_burst(ctx, *snap_large, pkts, n, rte_rdtsc());
        };
        const Stage forward_only = [&](rte_mbuf** pkts, uint16_t n) -> uint16_t {
            forward_burst(ctx, *snap_large, pkts, n);
            return 0;
        };
        const Stage fw_forward = [&](rte_mbuf** pkts, uint16_t n) -> uint16_t {
            const uint16_t kept = stateful_burst(ctx, *snap_large, pkts, n, rte_rdtsc());
            if (kept) forward_burst(ctx, *snap_large, pkts, kept);
            return 0;
        };
        const auto drops_before = drops_of(d);
        const uint64_t inserts_before = ctx.counters.conn_inserts;
        auto r = interleaved(o.reps, {[&] { return timed_pass(d, stream, fw_small); },
                                      [&] { return timed_pass(d, stream, fw_large); },
                                      [&] { return timed_pass(d, stream, forward_only); },
                                      [&] { return timed_pass(d, stream, fw_forward); }});
        const std::string drops = drops_since(d, drops_before);
        const std::string conns = ordinal_count(live) + " conns";
        table.add(Row{.id = "established-" + ordinal_count(live),
                      .measurement = "established, " + conns + ": stateful_burst, 10k rules",
                      .unit = "cycles/pkt",
                      .reference = "the same with 10 rules",
                      .ref = stat_of(r[0]),
                      .sluice = stat_of(r[1])});
        table.add(Row{.id = "established-forward-" + ordinal_count(live),
                      .measurement = "established, " + conns + ": firewall + forward",
                      .unit = "cycles/pkt",
                      .reference = "forward_burst alone (no firewall)",
                      .ref = stat_of(r[2]),
                      .sluice = stat_of(r[3])});
        if (!drops.empty() || ctx.counters.conn_inserts != inserts_before || conn_table->size() != live - refused)
            std::printf("WARNING: established %s: packets of tracked connections were dropped or opened new ones: "
                        "drops {%s}, inserts %" PRIu64 ", table size %u (expected %u)\n",
                        conns.c_str(), drops.c_str(), ctx.counters.conn_inserts - inserts_before, conn_table->size(),
                        live - refused);
        if (o.handshake) established_after_handshake(d, o, table, *snap_small, flows, stream, *conn_table, conns);
        ctx.conn_table = nullptr;
        check_pool(d, "established");
    }
}

}  // namespace sluice::bench

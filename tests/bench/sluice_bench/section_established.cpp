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
        ctx.conn_table = nullptr;
        check_pool(d, "established");
    }
}

}  // namespace sluice::bench

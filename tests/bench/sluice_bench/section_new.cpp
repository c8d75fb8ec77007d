// Section new: new connections per second of one worker. SYN -> lookup miss -> classify (1k rules) -> insert, on a
// 1M-entry table that already had its pages touched.
#include <cstdio>
#include <unordered_set>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <rte_cycles.h>
#include <rte_lcore.h>

#include "pipeline/stateful_stage.hpp"
#include "sections.hpp"
#include "services.hpp"
#include "traffic.hpp"

namespace sluice::bench {

void section_new(Dpdk& d, const Options& o, Table& table) {
    constexpr uint32_t kCapacity = 1'000'000;
    if (o.new_conns > kCapacity) fail("--new-conns must be at most 1000000");
    const auto rules = generate_rules(1000, o.seed);
    const auto snap = make_snapshot(d, rules);
    // The SYNs' tuples come from the rules' trace (most fall inside some rule), made distinct by their source port.
    const auto trace = generate_trace(rules, o.new_conns, o.seed + 1);
    std::vector<PacketSpec> stream;
    stream.reserve(o.new_conns);
    {
        Rng rng(o.seed + 2);
        std::unordered_set<FiveTuple, TupleHash> seen;
        for (TraceTuple t : trace) {
            t.proto = IPPROTO_TCP;
            FiveTuple f = to_tuple(t);
            while (!seen.insert(connection_key(f)).second)
                f.src_port = htons(static_cast<uint16_t>(uniform(rng, 1024, 65535)));
            stream.push_back(PacketSpec{f, kTcpSyn});
        }
    }
    ConnTable conn_table(table_name(), kCapacity, static_cast<int>(rte_socket_id()), ConnTimeouts{}, d.tsc_hz);
    touch_all_slots(conn_table);
    LcoreContext& ctx = *d.ctx;
    attach_conn_table(d, conn_table);
    const Stage fw = [&](rte_mbuf** pkts, uint16_t n) { return stateful_burst(ctx, *snap, pkts, n, rte_rdtsc()); };

    std::vector<double> cycles_per_conn;
    const auto drops_before = drops_of(d);
    uint32_t short_passes = 0;
    for (unsigned r = 0; r <= o.reps; ++r) {              // pass 0 touches the table's pages and is not counted
        const double cycles = timed_pass(d, stream, fw);  // per SYN: each opens one connection
        if (conn_table.size() != stream.size()) ++short_passes;
        if (r > 0) cycles_per_conn.push_back(cycles);
        // Emptied again (untimed), so every pass opens the same connections into the same, warm, table.
        remove_connections(conn_table, stream);
    }
    const std::string drops = drops_since(d, drops_before);
    if (short_passes || !drops.empty())
        std::printf("WARNING: new connections: %u passes opened fewer connections than SYNs sent; drops {%s}\n",
                    short_passes, drops.c_str());
    ctx.conn_table = nullptr;
    check_pool(d, "new connections");

    const Stat cycles = stat_of(cycles_per_conn);
    const double hz = static_cast<double>(d.tsc_hz);
    const Stat rate = millions_per_second(d, cycles);
    const double target_cycles = hz / kTargetNewConnsPerSecond;
    const std::string what = "new connections: SYN, miss, classify 1k rules, insert";
    table.add(Row{.id = "new-rate",
                  .measurement = what,
                  .unit = "M conn/s",
                  .reference = "the target per worker",
                  .ref = constant_stat(kTargetNewConnsPerSecond / 1e6),
                  .sluice = rate});
    table.add(Row{.id = "new-cycles",
                  .measurement = what,
                  .unit = "cycles/conn",
                  .reference = "target at this TSC rate",
                  .ref = constant_stat(target_cycles),
                  .sluice = cycles});
}

}  // namespace sluice::bench

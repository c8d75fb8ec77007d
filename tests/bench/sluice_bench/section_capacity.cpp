// Section capacity (only when named; the capacity target): one connection table per size of
// --capacity-conns (1M and 10M), each filled to capacity, measured side by side: DPDK memory per connection, the
// established path's cycles per packet (packets of random connections: nearly every one a cache miss), and new
// connections per second (SYN, miss, classify, insert) into the table while it is full but for them. Each size is
// reported against the first, the same streams interleaved, so the ratios come from the same moments of a noisy
// machine.
#include <cstdio>
#include <memory>

#include <rte_cycles.h>
#include <rte_lcore.h>
#include <rte_malloc.h>

#include "pipeline/stateful_stage.hpp"
#include "sections.hpp"
#include "services.hpp"
#include "traffic.hpp"

namespace sluice::bench {
namespace {

// The new connections timed per pass: a table of each size holds capacity - kFresh connections, then takes these.
constexpr uint32_t kFresh = 65536;

// count connections, distinct without a set (tens of millions): the source address is an odd multiple of the index
// modulo 2^24 (a bijection) inside source_net/8, the destination random in 12.0.0.0/8, so no flow is another's
// reply; random ports; tcp_percent of them TCP. Addresses outside every martian range.
std::vector<FiveTuple> spread_flows(uint32_t count, uint32_t source_net, Rng& rng, uint32_t tcp_percent) {
    std::vector<FiveTuple> flows(count);
    for (uint32_t i = 0; i < count; ++i) {
        TraceTuple t;
        t.src = source_net << 24 | ((i * 2654435761u) & 0x00ffffffu);
        t.dst = 12u << 24 | (static_cast<uint32_t>(rng()) & 0x00ffffffu);
        t.sport = static_cast<uint16_t>(uniform(rng, 1024, 65535));
        t.dport = static_cast<uint16_t>(uniform(rng, 1, 65535));
        t.proto = uniform(rng, 0, 99) < tcp_percent ? IPPROTO_TCP : IPPROTO_UDP;
        flows[i] = to_tuple(t);
    }
    return flows;
}

struct SizedTable {
    uint32_t capacity = 0;
    std::unique_ptr<ConnTable> table;
    double bytes_per_conn = 0;
    std::vector<PacketSpec> established;
};

}  // namespace

void section_capacity(Dpdk& d, const Options& o, Table& table) {
    const int socket = static_cast<int>(rte_socket_id());
    const auto heap = [&] {
        rte_malloc_socket_stats s{};
        rte_malloc_get_socket_stats(socket, &s);
        return static_cast<double>(s.heap_allocsz_bytes);
    };
    const auto snap = make_snapshot(d, generate_rules(10, o.seed));
    LcoreContext& ctx = *d.ctx;
    const Stage fw = [&](rte_mbuf** pkts, uint16_t n) { return stateful_burst(ctx, *snap, pkts, n, rte_rdtsc()); };

    // The same new connections for every size (from 13.0.0.0/8, apart from every table's own).
    Rng fresh_rng(o.seed + 7);
    std::vector<PacketSpec> syns;
    for (FiveTuple f : spread_flows(kFresh, 13, fresh_rng, 100)) syns.push_back(PacketSpec{f, kTcpSyn});

    std::vector<SizedTable> sizes;
    for (const uint32_t capacity : o.capacity_conns) {
        const uint64_t t0 = rte_rdtsc();
        Rng rng(o.seed + capacity);
        SizedTable s;
        s.capacity = capacity;
        const std::vector<FiveTuple> flows = spread_flows(capacity - kFresh, 11, rng, 70);
        const double before = heap();
        s.table = std::make_unique<ConnTable>(table_name(), capacity, socket, ConnTimeouts{}, d.tsc_hz);
        s.bytes_per_conn = (heap() - before) / capacity;
        const uint32_t refused = insert_established(*s.table, flows);
        s.established = random_packets(flows, o.packets, rng);
        std::printf("capacity: %u connections: %.1f MiB of DPDK memory, %.1f B per connection; %u established in "
                    "%.1f s (%u refused)\n",
                    capacity, s.bytes_per_conn * capacity / (1 << 20), s.bytes_per_conn, s.table->size(),
                    seconds_since(d, t0), refused);
        std::fflush(stdout);
        sizes.push_back(std::move(s));
    }

    const auto drops_before = drops_of(d);
    std::vector<std::function<double()>> established, inserts;
    for (SizedTable& s : sizes) {
        established.push_back([&] {
            attach_conn_table(d, *s.table);
            return timed_pass(d, s.established, fw);
        });
        inserts.push_back([&] {
            attach_conn_table(d, *s.table);
            const double cycles = timed_pass(d, syns, fw);
            if (s.table->size() != s.capacity)
                std::printf("WARNING: capacity %u: %u connections after the new ones, not %u\n", s.capacity,
                            s.table->size(), s.capacity);
            remove_connections(*s.table, syns);  // untimed: the next pass opens them again
            return cycles;
        });
    }
    const auto est = interleaved(o.reps, established);
    // Warm-up pass: the first insert into fresh hash buckets faults nothing (hugepages), but warms the caches alike.
    const auto ins = interleaved(o.reps, inserts);
    const std::string drops = drops_since(d, drops_before);
    if (!drops.empty()) std::printf("WARNING: capacity: drops {%s}\n", drops.c_str());
    ctx.conn_table = nullptr;

    const SizedTable& base = sizes.front();
    const std::string base_name = ordinal_count(base.capacity) + " conns";
    for (std::size_t i = 0; i < sizes.size(); ++i) {
        const std::string name = ordinal_count(sizes[i].capacity);
        table.add(Row{.id = "capacity-memory-" + name,
                      .measurement = "memory per connection, " + name + " table full",
                      .unit = "bytes/conn",
                      .reference = "the target",
                      .ref = constant_stat(128),
                      .sluice = constant_stat(sizes[i].bytes_per_conn)});
        if (i == 0) continue;
        table.add(Row{.id = "capacity-established-" + name,
                      .measurement = "established at " + name + " conns: stateful_burst, 10 rules",
                      .unit = "cycles/pkt",
                      .reference = "the same at " + base_name + " (target <= 1.3)",
                      .ref = stat_of(est[0]),
                      .sluice = stat_of(est[i])});
        table.add(Row{.id = "capacity-insert-" + name,
                      .measurement = "new conns into a full " + name + " table: SYN, miss, insert",
                      .unit = "cycles/conn",
                      .reference = "the same at " + base_name + " (target <= 1.25)",
                      .ref = stat_of(ins[0]),
                      .sluice = stat_of(ins[i])});
    }
    sizes.clear();
    check_pool(d, "capacity");
}

}  // namespace sluice::bench

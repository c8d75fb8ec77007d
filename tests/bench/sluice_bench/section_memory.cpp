// Section memory: bytes of DPDK heap per tracked connection, for a table of 1M filled to capacity.
#include <cstdio>
#include <memory>

#include <rte_cycles.h>
#include <rte_lcore.h>
#include <rte_malloc.h>

#include "sections.hpp"
#include "traffic.hpp"

namespace sluice::bench {
namespace {

// ConnTable's own estimate (conn_table.hpp) at capacity 1,000,000 (below 96% of 2^20: no extendable buckets):
// about 110 B per IPv4 entry (its 64-byte slot with the TCP window included), plus the default IPv6 share (a
// sixteenth of the capacity) at about 126 B per entry.
constexpr double kConnTableEstimateBytes = 110 + 126.0 / 16;

}  // namespace

void section_memory(Dpdk& d, const Options& o, Table& table) {
    constexpr uint32_t kConns = 1'000'000;
    const int socket = static_cast<int>(rte_socket_id());
    const auto heap = [&] {
        rte_malloc_socket_stats s{};
        rte_malloc_get_socket_stats(socket, &s);
        return static_cast<double>(s.heap_allocsz_bytes);
    };
    Rng rng(o.seed + 3);
    const std::vector<FiveTuple> flows = distinct_flows(kConns, rng, 70);
    const double before = heap();
    auto conn_table = std::make_unique<ConnTable>(table_name(), kConns, socket, ConnTimeouts{}, d.tsc_hz);
    const double created = heap();
    const uint64_t now = rte_rdtsc();
    uint32_t refused = 0;
    for (const FiveTuple& f : flows)
        refused += conn_table->insert(f, symmetric_flow_hash(f), ConnState::tcp_established, 0, now) < 0;
    const double filled = heap();
    const double per_conn = (filled - before) / kConns;
    std::printf("memory: ConnTable(1M) took %.1f MiB when created, %.1f MiB once %u connections were in it "
                "(%u refused)\n",
                (created - before) / (1 << 20), (filled - before) / (1 << 20), conn_table->size(), refused);
    table.add(Row{.id = "memory",
                  .measurement = "memory per tracked connection, 1M table full",
                  .unit = "bytes/conn",
                  .reference = "conn_table.hpp's estimate",
                  .ref = constant_stat(kConnTableEstimateBytes),
                  .sluice = constant_stat(per_conn)});
}

}  // namespace sluice::bench

#include "start_steps.hpp"

#include <algorithm>
#include <string>

#include <rte_eal.h>
#include <rte_lcore.h>

#include <spdlog/spdlog.h>

#include "common/drop_reason.hpp"
#include "dpdk/mempool.hpp"
#include "dpdk/startup_error.hpp"

namespace sluice {

void check_lcores(const Config& config) {
    const unsigned main_lcore = rte_get_main_lcore();
    for (const LcoreConfig& l : config.lcores) {
        if (l.id == main_lcore)
            throw StartupError("lcore " + std::to_string(l.id) +
                               " is the main lcore, which runs the control thread; give the data plane other lcores");
        if (!rte_lcore_is_enabled(l.id))
            throw StartupError("lcore " + std::to_string(l.id) +
                               " is not enabled by the EAL arguments; list it in -l/--lcores (e.g. --lcores=0@0,1@1)");
    }
}

std::map<int, rte_mempool*> create_pools(const Config& config, const std::vector<std::unique_ptr<Port>>& ports,
                                         uint16_t workers) {
    std::map<int, MempoolDemand> demand;
    for (const auto& port : ports) {
        MempoolDemand& d = demand[port->socket()];
        d.rx_descriptors +=
            uint64_t{port->spec().rx_queues} * port->spec().rx_descriptors + port->mbufs_kept_by_driver();
        d.tx_descriptors += uint64_t{workers} * port->spec().tx_descriptors;
        d.max_frame = std::max(d.max_frame, max_frame_size(port->spec().mtu));
    }
    std::map<int, rte_mempool*> pools;
    for (auto& [socket, d] : demand) {
        d.ports = static_cast<uint32_t>(ports.size());
        d.ring_slots = uint64_t{workers} * config.dataplane.ring_size;
        d.lcores = static_cast<uint32_t>(config.lcores.size());
        d.workers = workers;
        const MempoolPlan plan = plan_mempool(d);
        const std::string backing =
            rte_eal_has_hugepages() ? fmt::format("{} hugepages", plan.hugepages_2m) : std::string("no hugepages");
        spdlog::info("mempool on socket {}: {} mbufs of {} bytes data room, cache {}, about {} MiB ({})", socket,
                     plan.mbufs, plan.data_room, plan.cache_size, plan.bytes >> 20, backing);
        try {
            pools[socket] = create_packet_pool("sluice_pool_s" + std::to_string(socket), plan, socket);
        } catch (...) {
            for (auto& [s, pool] : pools) rte_mempool_free(pool);
            throw;
        }
    }
    return pools;
}

void log_totals(const CounterTotals& totals, const std::vector<std::unique_ptr<Port>>& ports) {
    for (const auto& port : ports) {
        const PortCounters& c = totals.ports[port->id()];
        spdlog::info("port '{}': rx {} packets {} bytes, tx {} packets {} bytes", port->name(), c.rx_packets,
                     c.rx_bytes, c.tx_packets, c.tx_bytes);
    }
    for (std::size_t r = 1; r < kDropReasonCount; ++r)
        if (totals.drops[r]) spdlog::info("dropped {}: {}", kDropReasonInfo[r].name, totals.drops[r]);
}

}  // namespace sluice

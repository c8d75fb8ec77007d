#include "control/telemetry.hpp"

#include <mutex>

#include <rte_ethdev.h>
#include <rte_telemetry.h>

#include "dpdk/mempool.hpp"

namespace sluice {
namespace {

std::mutex g_view_mutex;  // control plane only: the telemetry thread against attach/detach
const TelemetryView* g_view = nullptr;

// /sluice/stats: flat dict (22.11 telemetry cannot nest dicts) of totals, drops by reason and per-port counters.
int stats_command(const char*, const char*, rte_tel_data* d) {
    std::lock_guard lock(g_view_mutex);
    if (!g_view || !g_view->dataplane) return -1;
    const CounterTotals totals = g_view->dataplane->totals();
    rte_tel_data_start_dict(d);
    uint64_t rx = 0, tx = 0;
    for (const TelemetryPort& port : g_view->ports) {
        const PortCounters& c = totals.ports[port.port_id];
        rx += c.rx_packets;
        tx += c.tx_packets;
        const std::string prefix = "port/" + port.name + "/";
        rte_tel_data_add_dict_u64(d, (prefix + "rx_packets").c_str(), c.rx_packets);
        rte_tel_data_add_dict_u64(d, (prefix + "rx_bytes").c_str(), c.rx_bytes);
        rte_tel_data_add_dict_u64(d, (prefix + "tx_packets").c_str(), c.tx_packets);
        rte_tel_data_add_dict_u64(d, (prefix + "tx_bytes").c_str(), c.tx_bytes);
        rte_eth_stats hw{};
        if (rte_eth_stats_get(port.port_id, &hw) == 0) {
            rte_tel_data_add_dict_u64(d, (prefix + "hw_rx_missed").c_str(), hw.imissed);
            rte_tel_data_add_dict_u64(d, (prefix + "hw_rx_nombuf").c_str(), hw.rx_nombuf);
            rte_tel_data_add_dict_u64(d, (prefix + "hw_rx_errors").c_str(), hw.ierrors);
            rte_tel_data_add_dict_u64(d, (prefix + "hw_tx_errors").c_str(), hw.oerrors);
        }
    }
    rte_tel_data_add_dict_u64(d, "rx_packets", rx);
    rte_tel_data_add_dict_u64(d, "tx_packets", tx);
    rte_tel_data_add_dict_u64(d, "drops", totals.total_drops());
    for (std::size_t r = 1; r < kDropReasonCount; ++r)
        rte_tel_data_add_dict_u64(d, ("drop/" + std::string(kDropReasonInfo[r].name)).c_str(), totals.drops[r]);
    rte_tel_data_add_dict_u64(d, "polls", totals.polls);
    rte_tel_data_add_dict_u64(d, "busy_polls", totals.busy_polls);
    rte_tel_data_add_dict_u64(d, "ring_enqueued", totals.ring_enqueued);
    rte_tel_data_add_dict_u64(d, "ring_dequeued", totals.ring_dequeued);
    rte_tel_data_add_dict_u64(d, "ring_backlog", g_view->dataplane->ring_backlog());
    uint64_t in_use = 0;
    for (const rte_mempool* pool : g_view->pools) in_use += mbufs_in_use(pool);
    rte_tel_data_add_dict_u64(d, "mbufs_in_use", in_use);
    return 0;
}

}  // namespace

void register_telemetry_commands() {
    rte_telemetry_register_cmd("/sluice/stats", stats_command,
                               "sluice counters: per-port packets and bytes, drops by reason, lcore polls. No parameters");
}

void attach_telemetry_view(const TelemetryView* view) {
    std::lock_guard lock(g_view_mutex);
    g_view = view;
}

}  // namespace sluice

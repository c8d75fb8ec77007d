#include "control/dataplane_plan.hpp"

#include <algorithm>
#include <string>
#include <tuple>

#include <rte_lcore.h>

#include <spdlog/spdlog.h>

namespace sluice {

DataplaneSpec dataplane_spec(const Config& config, const std::vector<PortIdentity>& ports) {
    DataplaneSpec spec;
    spec.ring_size = config.dataplane.ring_size;
    spec.idle_sleep_us = config.dataplane.idle_sleep_us;
    spec.conntrack = config.tracks_connections();
    spec.nat_port_first = config.load_balancer.nat_port_first;
    spec.nat_port_last = config.load_balancer.nat_port_last;
    spec.nat_pool_addresses = config.load_balancer.nat_pool.size();
    spec.conn_table_size = config.firewall.table_size;
    spec.conn_table_ipv6_size = config.firewall.ipv6_table_size;
    spec.conn_timeouts = config.firewall.timeouts;
    if (config.sync.enabled && spec.conntrack) {
        spec.sync_ring_size = config.sync.ring_size;
        spec.sync_refresh_fraction = config.sync.refresh_fraction;
        // Every instance lists the same sync addresses (its own and its peers'): their order gives each its share.
        const auto key = [](const SyncEndpoint& e) {
            return std::make_tuple(e.family, std::string(reinterpret_cast<const char*>(e.address.bytes), 16), e.port);
        };
        const auto own = key(config.sync.listen);
        spec.nat_shares = static_cast<uint16_t>(config.sync.peers.size() + 1);
        spec.nat_share_index = static_cast<uint16_t>(std::count_if(
            config.sync.peers.begin(), config.sync.peers.end(), [&](const SyncEndpoint& p) { return key(p) < own; }));
    }
    for (const PortIdentity& port : ports) spec.tx_port_ids.push_back(port.id);
    const auto queues = assign_rx_queues(config);
    for (std::size_t i = 0; i < config.lcores.size(); ++i) {
        const LcoreConfig& l = config.lcores[i];
        LcorePlan plan{.lcore_id = l.id, .rx = l.rx, .worker = l.worker, .rx_queues = {}};
        std::string polled;
        for (const auto& [port_index, queue] : queues[i]) {
            plan.rx_queues.push_back({ports[port_index].id, queue});
            polled += " " + ports[port_index].name + ":" + std::to_string(queue);
        }
        spdlog::info("lcore {} on socket {}: {}{}{}", l.id, rte_lcore_to_socket_id(l.id), l.rx ? "rx " : "",
                     l.worker ? "worker " : "", polled.empty() ? "" : "polls" + polled);
        spec.lcores.push_back(std::move(plan));
    }
    return spec;
}

}  // namespace sluice

// ARP/ND on the daemon's control thread: what must be resolved (next hops, backends without a mac), what the
// workers saw, the solicitations due, and the lookups the reloader's table builds make. Control thread only.
#include <chrono>
#include <string>
#include <vector>

#include <rte_ether.h>

#include <spdlog/spdlog.h>

#include "daemon_impl.hpp"

namespace sluice {

// What ARP/ND must resolve for config: next hops given by address, and backends without a mac on one of
// sluice's links. Each is solicited from sluice's own address on that link.
void Daemon::apply_neighbour_targets(const Config& config) {
    std::vector<NeighbourTarget> targets;
    const auto add = [&](const std::string& port, IpFamily family, const IpAddress& address) {
        for (const PortAddress& own : config.port_addresses) {
            if (own.port != port || own.family != family) continue;
            Config one;
            one.port_addresses = {own};
            if (!on_link(one, port, family, address)) continue;
            targets.push_back({family, address, interface_named(port_identities_, port), own.address});
            return;
        }
    };
    for (const ForwardConfig& f : config.forward)
        if (f.resolve_next_hop) add(f.to, f.next_hop_family, f.next_hop);
    for (const RouteNeighbour& n : route_neighbours(config)) add(n.port, n.family, n.address);
    if (kernel_routes_)
        for (const auto& [port, family, address] : kernel_routes_->next_hops(config)) add(port, family, address);
    for (const ServiceConfig& service : config.services)
        for (const BackendConfig& b : service.backends)
            if (!b.has_mac)
                for (const std::string& interface : config.interfaces()) add(interface, b.family, b.address);
    neighbours_.set_targets(targets);
    const NeighboursConfig& timing = config.neighbours;
    neighbours_.set_timing({.reachable = std::chrono::milliseconds(timing.reachable_ms),
                            .retransmit = std::chrono::milliseconds(timing.retransmit_ms),
                            .probes = static_cast<int>(timing.probes)});
}

// Control thread, every loop: learn what the workers saw, solicit what is due, forget what stopped answering;
// a changed MAC republishes the forwarding and load-balancer tables.
void Daemon::run_neighbours() {
    const auto now = NeighbourTable::Clock::now();
    bool changed = false;
    const std::vector<NeighbourEvent> events = dataplane_->take_neighbour_events();
    for (const NeighbourEvent& e : events)
        if (rte_is_zero_ether_addr(&e.mac)) glean(e);
    if (neighbours_.size() == 0) {  // nothing to resolve
        publish_neighbour_stats();
        return;
    }
    for (const NeighbourEvent& e : events) {
        if (rte_is_zero_ether_addr(&e.mac)) continue;
        if (neighbours_.learn(e.port, e.family, e.address, e.mac, now)) {
            changed = true;
            const auto& m = e.mac.addr_bytes;
            spdlog::info("neighbour {} is at {:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x} on {}",
                         to_string(e.address, e.family), m[0], m[1], m[2], m[3], m[4], m[5],
                         interface_name(port_identities_, e.port));
        }
    }
    for (const NeighbourTarget& t : neighbours_.due(now)) {
        NeighbourRequest request{t.sender, t.address, t.port_id, t.family, {}};
        dataplane_->request_solicitation(request);  // full ring: asked again in a second
    }
    if (neighbours_.expire(now)) {
        spdlog::warn(
            "a neighbour stopped answering: it leaves its ECMP groups; traffic with no other next hop is dropped "
            "(neighbour_unresolved) until it answers");
        changed = true;
    }
    if (changed) reloader_->republish_lb_tables("neighbours changed");
    publish_neighbour_stats();
}

void Daemon::publish_neighbour_stats() {
    const std::size_t resolved = neighbours_.resolved();
    const NeighboursRecord record{resolved, neighbours_.size() - resolved, neighbours_.unresolved_targets()};
    if (record.resolved == published_neighbours_.resolved && record.unresolved == published_neighbours_.unresolved &&
        record.next_hops_unresolved == published_neighbours_.next_hops_unresolved)
        return;
    published_neighbours_ = record;
    neighbour_stats_.write(record);
}

// A worker routed packets to e.address, a host on the connected link of interface e.port that sluice has not
// resolved: resolved like a target from sluice's own address on that link.
void Daemon::glean(const NeighbourEvent& e) {
    const std::string name = interface_name(port_identities_, e.port);
    for (const PortAddress& own : config().port_addresses) {
        Config one;
        one.port_addresses = {own};
        if (own.port != name || own.family != e.family || !on_link(one, name, e.family, e.address)) continue;
        if (neighbours_.want({e.family, e.address, e.port, own.address}))
            spdlog::debug("resolving {} on {} (packets are routed to it)", to_string(e.address, e.family), name);
        return;
    }
}

ConnectedHosts Daemon::connected_hosts() {
    return [this] {
        std::vector<ConnectedHost> hosts;
        for (const auto& [target, mac] : neighbours_.gleaned())
            hosts.push_back({target.family, target.address, target.port_id, mac});
        return hosts;
    };
}

NeighbourLookup Daemon::neighbour_lookup() {
    return [this](uint16_t interface, IpFamily family, const IpAddress& address) {
        return neighbours_.lookup(interface, family, address);
    };
}

}  // namespace sluice

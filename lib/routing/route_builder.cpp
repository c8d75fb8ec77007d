// The route table: the config's routes compiled (compile_config_routes) and written into rte_fib / rte_fib6 by a
// RouteTableWriter (build_route_fib), its groups' next hops resolved into ECMP tables on every snapshot
// (resolve_routes). Control thread.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <set>
#include <stdexcept>
#include <string_view>
#include <tuple>

#include <rte_errno.h>
#include <rte_fib.h>
#include <rte_fib6.h>
#include <rte_hash.h>
#include <rte_rib.h>
#include <rte_rib6.h>

#include <spdlog/fmt/fmt.h>

#include "lb/maglev.hpp"
#include "routing/route_builder.hpp"
#include "routing/route_table_writer.hpp"

namespace sluice {
namespace {

std::atomic<uint64_t> g_hosts_generation{0};  // rte_hash names its tables; every build gets fresh names

Prefix network_of(const IpAddress& address, uint8_t length) {
    Prefix p{address, length};
    for (unsigned bit = length; bit < 128; ++bit)
        p.address.bytes[bit / 8] &= static_cast<uint8_t>(~(0x80u >> (bit % 8)));
    return p;
}

}  // namespace

std::vector<RouteNeighbour> route_neighbours(const Config& config) {
    std::vector<RouteNeighbour> out;
    // Each once: a large table has many routes and few next hops.
    std::set<std::tuple<std::string_view, IpFamily, uint64_t, uint64_t>> seen;
    for (const RouteConfig& r : config.routes)
        for (const RouteNextHop& hop : r.next_hops)
            if (seen.emplace(hop.port, r.family, hop.address.quads[0], hop.address.quads[1]).second)
                out.push_back({hop.port, r.family, hop.address});
    return out;
}

std::vector<CompiledRoute> compile_config_routes(const Config& config, const std::vector<PortIdentity>& ports) {
    std::vector<CompiledRoute> routes;
    const auto add = [&](CompiledRoute route) { routes.push_back(std::move(route)); };
    for (const RouteConfig& r : config.routes) {
        CompiledRoute route{.family = r.family, .prefix = r.prefix};
        route.action = r.type == RouteType::blackhole ? RouteAction::blackhole
                       : r.type == RouteType::reject  ? RouteAction::reject
                                                      : RouteAction::via;
        for (const RouteNextHop& hop : r.next_hops)
            route.hops.push_back({hop.address, interface_named(ports, hop.port), hop.weight});
        add(std::move(route));
    }
    const auto host_route = [&](const std::string& port, IpFamily family, const IpAddress& address) {
        CompiledRoute route{.family = family,
                            .prefix = Prefix{address, static_cast<uint8_t>(family == IpFamily::ipv4 ? 32 : 128)},
                            .action = RouteAction::via,
                            .source = RouteSource::neighbour};
        route.hops.push_back({address, interface_named(ports, port), 1});
        add(std::move(route));
    };
    for (const RouteNeighbour& n : route_neighbours(config)) host_route(n.port, n.family, n.address);
    for (const ForwardConfig& f : config.forward)
        if (f.resolve_next_hop) host_route(f.to, f.next_hop_family, f.next_hop);
    for (const ServiceConfig& s : config.services)
        for (const BackendConfig& b : s.backends) {
            if (b.has_mac) continue;
            if (const std::string link = interface_on_link(config, b.family, b.address); !link.empty())
                host_route(link, b.family, b.address);
        }
    for (const PortAddress& a : config.port_addresses)
        add(CompiledRoute{.family = a.family,
                          .prefix = network_of(a.address, a.length),
                          .action = RouteAction::connected,
                          .source = RouteSource::connected,
                          .port = interface_named(ports, a.port)});
    return routes;
}

std::shared_ptr<const RouteFib> build_route_fib(const Config& config, const std::vector<PortIdentity>& ports,
                                                int socket, RouteTableWriter* writer) {
    RouteTableWriter local(socket);
    RouteTableWriter& w = writer ? *writer : local;
    w.replace_config_routes(compile_config_routes(config, ports));
    return w.commit();
}

RouteTables resolve_routes(std::shared_ptr<const RouteFib> fib,
                           const std::array<rte_ether_addr, RTE_MAX_ETHPORTS>& port_mac,
                           const NeighbourLookup& neighbours, const std::vector<ConnectedHost>& hosts, int socket) {
    RouteTables tables;
    tables.fib = std::move(fib);
    if (!tables.fib) return tables;
    if (!hosts.empty()) {
        const std::string name = "sl_hosts_" + std::to_string(g_hosts_generation.fetch_add(1));
        rte_hash_parameters params{};
        params.name = name.c_str();
        params.entries = static_cast<uint32_t>(std::max<std::size_t>(hosts.size() * 2, 64));
        params.key_len = sizeof(HostKey);
        params.socket_id = socket;
        tables.hosts = std::shared_ptr<rte_hash>(rte_hash_create(&params), rte_hash_free);
        if (!tables.hosts)
            throw std::runtime_error("routes: hosts table: rte_hash_create: " + std::string(rte_strerror(rte_errno)));
        for (const ConnectedHost& h : hosts) {
            HostKey key{};
            std::memcpy(key.address.bytes, h.address.bytes, h.family == IpFamily::ipv4 ? 4 : 16);
            key.family = static_cast<uint64_t>(h.family);
            const std::size_t index = tables.hops.size();
            tables.hops.push_back(forward_entry(h.port, h.mac, port_mac));
            if (rte_hash_add_key_data(tables.hosts.get(), &key, reinterpret_cast<void*>(index)) < 0)
                throw std::runtime_error("routes: hosts table: cannot add a host");
        }
    }
    // Routes with the same next hops share their hops and ECMP table (a full table has few distinct groups).
    std::map<std::string, RouteEntry> groups;  // by the next hops' bytes
    for (const CompiledRoute& r : tables.fib->groups) {
        RouteEntry entry{.action = r.action, .port = r.port};
        tables.ecmp |= r.hops.size() > 1;
        std::string group;
        for (const CompiledRoute::Hop& hop : r.hops) {
            group.append(reinterpret_cast<const char*>(hop.address.bytes), 16);
            group.append(reinterpret_cast<const char*>(&hop.port), sizeof hop.port);
            group.append(reinterpret_cast<const char*>(&hop.weight), sizeof hop.weight);
        }
        if (const auto known = groups.find(group); r.action == RouteAction::via && known != groups.end()) {
            entry.first_hop = known->second.first_hop;
            entry.first_slot = known->second.first_slot;
            entry.slot_count = known->second.slot_count;
        } else if (r.action == RouteAction::via) {
            // A next hop that is not resolved (or stopped answering) keeps its place in the Maglev permutation with
            // weight 0, so the flows of the others stay where they were when it leaves or comes back.
            std::vector<MaglevBackend> members;
            const std::size_t first_hop = tables.hops.size();
            entry.first_hop = static_cast<uint32_t>(first_hop);
            for (const CompiledRoute::Hop& hop : r.hops) {
                const auto mac = neighbours ? neighbours(hop.port, r.family, hop.address) : std::nullopt;
                tables.hops.push_back(forward_entry(hop.port, mac.value_or(rte_ether_addr{}), port_mac));
                tables.hops.back().awaiting_neighbour = !mac;
                members.push_back({to_string(hop.address, r.family), mac ? hop.weight : 0});
            }
            const bool any = std::any_of(members.begin(), members.end(), [](auto& m) { return m.weight > 0; });
            if (any) {
                entry.first_slot = static_cast<uint32_t>(tables.slots.size());
                if (members.size() == 1) {
                    tables.slots.push_back(static_cast<uint32_t>(first_hop));
                } else {
                    for (uint16_t member : build_maglev_table(members, kEcmpSlots))
                        tables.slots.push_back(static_cast<uint32_t>(first_hop + member));
                }
                entry.slot_count = static_cast<uint32_t>(tables.slots.size()) - entry.first_slot;
            }
            groups[group] = entry;
        }
        tables.entries.push_back(entry);
    }
    return tables;
}

std::vector<std::string> describe_routes(const Snapshot& snapshot, const std::vector<PortIdentity>& ports,
                                         std::size_t limit) {
    const auto port_name = [&](uint16_t interface) { return interface_name(ports, interface); };
    const RouteTables& tables = snapshot.routes;
    if (!tables.fib) return {"no routes"};
    std::vector<std::string> lines;
    std::size_t more = 0;
    const auto describe = [&](IpFamily family, const Prefix& prefix, uint64_t value) {
        if (lines.size() >= limit) {
            ++more;
            return;
        }
        const CompiledRoute& r = tables.fib->groups[tables.fib->group_of[value - 1]];
        const RouteEntry& entry = tables.entry_of(value);
        std::string line =
            to_string(prefix.address, family) + "/" + std::to_string(prefix.length) + " " + route_source_name(r.source);
        switch (r.action) {
        case RouteAction::connected: line += " on " + port_name(r.port); break;
        case RouteAction::blackhole: line += " blackhole"; break;
        case RouteAction::reject: line += " reject"; break;
        case RouteAction::via:
            line += " via";
            for (std::size_t k = 0; k < r.hops.size(); ++k) {
                const ForwardEntry& hop = tables.hops[entry.first_hop + k];
                const auto& m = hop.dst_mac.addr_bytes;
                line += (k ? ", " : " ") + to_string(r.hops[k].address, r.family) + " on " + port_name(r.hops[k].port) +
                        (r.hops[k].weight != 1 ? " weight " + std::to_string(r.hops[k].weight) : "") +
                        (hop.awaiting_neighbour ? " (unresolved)"
                                                : fmt::format(" ({:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x})", m[0],
                                                              m[1], m[2], m[3], m[4], m[5]));
            }
            break;
        }
        lines.push_back(std::move(line));
    };
    // The FIBs' own RIBs list the routes in prefix order (the default route is no "more specific" of 0/0).
    if (rte_fib* fib = tables.fib->v4) {
        rte_rib* rib = rte_fib_get_rib(fib);
        uint64_t value = 0;
        if (const rte_rib_node* node = rte_rib_lookup_exact(rib, 0, 0); node && rte_rib_get_nh(node, &value) == 0)
            describe(IpFamily::ipv4, Prefix{}, value);
        for (rte_rib_node* node = nullptr; (node = rte_rib_get_nxt(rib, 0, 0, node, RTE_RIB_GET_NXT_ALL));) {
            uint32_t ip = 0;
            Prefix prefix;
            rte_rib_get_ip(node, &ip);
            rte_rib_get_depth(node, &prefix.length);
            rte_rib_get_nh(node, &value);
            if (prefix.length == 0) continue;  // listed above
            prefix.address.words[0] = rte_cpu_to_be_32(ip);
            describe(IpFamily::ipv4, prefix, value);
        }
    }
    if (rte_fib6* fib = tables.fib->v6) {
        rte_rib6* rib = rte_fib6_get_rib(fib);
        const uint8_t zero[RTE_RIB6_IPV6_ADDR_SIZE] = {};
        uint64_t value = 0;
        if (const rte_rib6_node* node = rte_rib6_lookup_exact(rib, zero, 0); node && rte_rib6_get_nh(node, &value) == 0)
            describe(IpFamily::ipv6, Prefix{}, value);
        for (rte_rib6_node* node = nullptr; (node = rte_rib6_get_nxt(rib, zero, 0, node, RTE_RIB6_GET_NXT_ALL));) {
            Prefix prefix;
            rte_rib6_get_ip(node, prefix.address.bytes);
            rte_rib6_get_depth(node, &prefix.length);
            rte_rib6_get_nh(node, &value);
            if (prefix.length == 0) continue;
            describe(IpFamily::ipv6, prefix, value);
        }
    }
    if (more) lines.push_back(fmt::format("... and {} more routes", more));
    return lines;
}

}  // namespace sluice

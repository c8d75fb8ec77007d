// The route table: compiled from the config into rte_fib / rte_fib6 (build_route_fib), its next hops resolved into
// ECMP tables on every snapshot (resolve_routes). Control thread.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <set>
#include <stdexcept>

#include <rte_errno.h>
#include <rte_fib.h>
#include <rte_fib6.h>
#include <rte_hash.h>

#include <spdlog/fmt/fmt.h>

#include "control/snapshot_builder.hpp"
#include "lb/maglev.hpp"

namespace sluice {
namespace {

std::atomic<uint64_t> g_route_generation{0};  // rte_fib names its tables; every build gets fresh names

Prefix network_of(const IpAddress& address, uint8_t length) {
    Prefix p{address, length};
    for (unsigned bit = length; bit < 128; ++bit)
        p.address.bytes[bit / 8] &= static_cast<uint8_t>(~(0x80u >> (bit % 8)));
    return p;
}

rte_fib* build_v4(const std::vector<CompiledRoute>& routes, int socket, uint64_t generation) {
    std::set<uint32_t> groups;  // a prefix longer than /24 needs a tbl8 group for its /24
    int count = 0;
    for (const CompiledRoute& r : routes) {
        if (r.family != IpFamily::ipv4) continue;
        ++count;
        if (r.prefix.length > 24) groups.insert(rte_be_to_cpu_32(r.prefix.address.words[0]) >> 8);
    }
    if (count == 0) return nullptr;
    rte_fib_conf conf{};
    conf.type = RTE_FIB_DIR24_8;
    conf.default_nh = 0;
    conf.max_routes = count;
    conf.dir24_8.nh_sz = RTE_FIB_DIR24_8_4B;
    conf.dir24_8.num_tbl8 = static_cast<uint32_t>(groups.size()) + 16;
    const std::string name = "sl_rt4_" + std::to_string(generation);
    rte_fib* fib = rte_fib_create(name.c_str(), socket, &conf);
    if (!fib) throw std::runtime_error("routes (IPv4): rte_fib_create: " + std::string(rte_strerror(rte_errno)));
    for (std::size_t i = 0; i < routes.size(); ++i) {
        const CompiledRoute& r = routes[i];
        if (r.family == IpFamily::ipv4 &&
            rte_fib_add(fib, rte_be_to_cpu_32(r.prefix.address.words[0]), r.prefix.length, i + 1) < 0) {
            rte_fib_free(fib);
            throw std::runtime_error("routes (IPv4): cannot add a route (out of memory?)");
        }
    }
    return fib;
}

rte_fib6* build_v6(const std::vector<CompiledRoute>& routes, int socket, uint64_t generation) {
    uint64_t groups = 0;  // each prefix can need (length - 24) / 8 tbl8 groups beyond its first 24 bits
    int count = 0;
    for (const CompiledRoute& r : routes) {
        if (r.family != IpFamily::ipv6) continue;
        ++count;
        groups += r.prefix.length > 24 ? (r.prefix.length - 24 + 7) / 8 : 0;
    }
    if (count == 0) return nullptr;
    rte_fib6_conf conf{};
    conf.type = RTE_FIB6_TRIE;
    conf.default_nh = 0;
    conf.max_routes = count;
    conf.trie.nh_sz = RTE_FIB6_TRIE_4B;
    conf.trie.num_tbl8 = static_cast<uint32_t>(std::min<uint64_t>(groups + 16, 1u << 24));
    const std::string name = "sl_rt6_" + std::to_string(generation);
    rte_fib6* fib = rte_fib6_create(name.c_str(), socket, &conf);
    if (!fib) throw std::runtime_error("routes (IPv6): rte_fib6_create: " + std::string(rte_strerror(rte_errno)));
    for (std::size_t i = 0; i < routes.size(); ++i) {
        const CompiledRoute& r = routes[i];
        if (r.family == IpFamily::ipv6 && rte_fib6_add(fib, r.prefix.address.bytes, r.prefix.length, i + 1) < 0) {
            rte_fib6_free(fib);
            throw std::runtime_error("routes (IPv6): cannot add a route (out of memory?)");
        }
    }
    return fib;
}

}  // namespace

std::vector<RouteNeighbour> route_neighbours(const Config& config) {
    std::vector<RouteNeighbour> out;
    for (const RouteConfig& r : config.routes)
        for (const RouteNextHop& hop : r.next_hops) out.push_back({hop.port, r.family, hop.address});
    return out;
}

std::shared_ptr<const RouteFib> build_route_fib(const Config& config, const std::vector<PortIdentity>& ports,
                                                int socket) {
    auto fib = std::make_shared<RouteFib>();
    // One route per prefix, the first given: static routes, then host routes, then connected ones.
    std::set<std::tuple<IpFamily, std::string, uint8_t>> taken;
    const auto add = [&](CompiledRoute route) {
        const std::string bytes(reinterpret_cast<const char*>(route.prefix.address.bytes), 16);
        if (taken.insert({route.family, bytes, route.prefix.length}).second) fib->routes.push_back(std::move(route));
    };
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
    if (fib->routes.empty()) return nullptr;
    const uint64_t generation = g_route_generation.fetch_add(1);
    fib->v4 = build_v4(fib->routes, socket, generation);
    fib->v6 = build_v6(fib->routes, socket, generation);
    return fib;
}

RouteTables resolve_routes(std::shared_ptr<const RouteFib> fib,
                           const std::array<rte_ether_addr, RTE_MAX_ETHPORTS>& port_mac,
                           const NeighbourLookup& neighbours, const std::vector<ConnectedHost>& hosts, int socket) {
    RouteTables tables;
    tables.fib = std::move(fib);
    if (!tables.fib) return tables;
    if (!hosts.empty()) {
        const std::string name = "sl_hosts_" + std::to_string(g_route_generation.fetch_add(1));
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
    for (const CompiledRoute& r : tables.fib->routes) {
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

std::vector<std::string> describe_routes(const Snapshot& snapshot, const std::vector<PortIdentity>& ports) {
    const auto port_name = [&](uint16_t interface) { return interface_name(ports, interface); };
    const RouteTables& tables = snapshot.routes;
    if (!tables.fib) return {"no routes"};
    std::vector<std::string> lines;
    for (std::size_t i = 0; i < tables.fib->routes.size(); ++i) {
        const CompiledRoute& r = tables.fib->routes[i];
        const RouteEntry& entry = tables.entries[i];
        std::string line = to_string(r.prefix.address, r.family) + "/" + std::to_string(r.prefix.length) + " " +
                           (r.source == RouteSource::connected   ? "connected"
                            : r.source == RouteSource::neighbour ? "host"
                                                                 : "static");
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
    }
    return lines;
}

}  // namespace sluice

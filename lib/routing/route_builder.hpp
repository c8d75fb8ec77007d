// The route table of a snapshot: the config's routes compiled and written into rte_fib / rte_fib6 (through a
// RouteTableWriter, which also holds a mirrored kernel table), their next hops resolved into ECMP tables with the
// neighbours ARP/ND found. Control thread.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <rte_ether.h>

#include "config/config.hpp"
#include "pipeline/route_table.hpp"
#include "pipeline/snapshot.hpp"
#include "routing/interfaces.hpp"

namespace sluice {

// The MAC ARP/ND resolved for an address on an interface (routing/neighbours.hpp), if any.
using NeighbourLookup =
    std::function<std::optional<rte_ether_addr>(uint16_t interface, IpFamily family, const IpAddress& address)>;

class RouteTableWriter;
// The config's routes (route_builder.cpp): its static routes, a connected route per port address, and a host route
// to each address sluice resolves on its links (route next hops, forward next hops, backends without a mac).
std::vector<CompiledRoute> compile_config_routes(const Config& config, const std::vector<PortIdentity>& ports);
// The route table with the config's routes (and writer's others: a mirrored kernel table), written by writer, or
// built whole when writer is null. Null when there is no route at all. Throws std::runtime_error when a table cannot
// be built.
std::shared_ptr<const RouteFib> build_route_fib(const Config& config, const std::vector<PortIdentity>& ports,
                                                int socket, RouteTableWriter* writer = nullptr);
// A host on a connected link that ARP/ND resolved for sluice because packets were routed to it (glean).
struct ConnectedHost {
    IpFamily family = IpFamily::none;
    IpAddress address{};
    uint16_t port = 0;  // the interface (packet/vlan.hpp) whose link it is on
    rte_ether_addr mac{};
};
using ConnectedHosts = std::function<std::vector<ConnectedHost>()>;

// The routes' next hops resolved with neighbours (an unresolved next hop takes no ECMP slot) on the ports' MACs,
// and the table of hosts (on socket).
RouteTables resolve_routes(std::shared_ptr<const RouteFib> fib,
                           const std::array<rte_ether_addr, RTE_MAX_ETHPORTS>& port_mac,
                           const NeighbourLookup& neighbours, const std::vector<ConnectedHost>& hosts = {},
                           int socket = 0);
// The addresses the routes need resolved, as (interface name, family, address): their next hops, each once.
struct RouteNeighbour {
    std::string port;
    IpFamily family = IpFamily::none;
    IpAddress address{};
};
std::vector<RouteNeighbour> route_neighbours(const Config& config);
// sluicectl routes: one line per route, "PREFIX SOURCE ACTION [next hops: ADDRESS on PORT (MAC | unresolved)...]",
// the first `limit` routes and a line that counts the others.
std::vector<std::string> describe_routes(const Snapshot& snapshot, const std::vector<PortIdentity>& ports,
                                         std::size_t limit = SIZE_MAX);

}  // namespace sluice

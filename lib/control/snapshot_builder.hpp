// Builds the immutable Snapshot the lcores read from a validated config. Control thread.
#pragma once

#include <array>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <rte_ether.h>

#include "control/config.hpp"
#include "pipeline/snapshot.hpp"

namespace sluice {

// What the builder needs to know of a started port.
struct PortIdentity {
    std::string name;
    uint16_t id = 0;
    rte_ether_addr mac{};
};

// The running port of that name; throws std::invalid_argument when none (a config that names a port the daemon did
// not start is refused before a snapshot is built).
const PortIdentity& port_named(const std::vector<PortIdentity>& ports, const std::string& name);
// The id (packet/vlan.hpp) of the running interface of that canonical name (Config::canonical_interface): a port's,
// or PORT.ID's of a VLAN of one; throws std::invalid_argument when its port is not running, or has an id above
// kMaxVlanPort and VLANs.
uint16_t interface_named(const std::vector<PortIdentity>& ports, const std::string& name);
// An interface's canonical name, from its id: the port's name, or PORT.ID; "?" when its port is not running.
std::string interface_name(const std::vector<PortIdentity>& ports, uint16_t interface);

// Builds the forwarding table, the firewall's rte_acl contexts and early-drop tables (on socket), and room for
// the per-lcore rule counters of lcore_count lcores. Needs the EAL when the firewall is on. Throws
// std::invalid_argument when the config names a port that is not in ports, std::runtime_error when a table cannot
// be built.
// Stable rule ids by name, for the daemon's life: a rule keeps its id (and its counters) across reloads.
using StableRuleIds = std::map<std::string, uint32_t>;

// Stable backend ids for the daemon's life ("service/address:port" -> id), and what each backend was last
// configured as: a connection keeps its backend's id across reloads, and a removed backend stays known (marked
// removed) so that `removed_backends: keep` connections still reach it.
struct BackendRegistry {
    std::map<std::string, uint32_t> ids;
    std::vector<LbBackend> known;  // by id
};

// Whether a backend (by stable id) passes its health checks; a down backend takes no Maglev slot.
using BackendHealth = std::function<bool(uint32_t stable_id)>;

// The MAC ARP/ND resolved for an address on an interface (control/neighbours.hpp), if any.
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

// What a snapshot is built from besides the config: state the daemon keeps across reloads. Null members: none.
struct LiveState {
    StableRuleIds* rule_ids = nullptr;
    BackendRegistry* backends = nullptr;
    BackendHealth healthy;
    NeighbourLookup neighbours;
    ConnectedHosts hosts;                // null: none
    RouteTableWriter* routes = nullptr;  // the daemon's (it keeps the table across reloads); null: built whole
    std::shared_ptr<const Blocklist>
        blocklist;  // the running snapshot's: kept when the early-drop prefixes are the same
    // The running snapshot's rte_acl contexts (IPv4, IPv6): each is kept when its rules match as they did
    // (AclClassifier::built_from); otherwise, with acl_method auto, its classify method stays unless another is more
    // than 5 % faster (choose_classify_method).
    std::shared_ptr<const AclClassifier> acl_v4, acl_v6;
};

// Services, Maglev tables (down or draining backends excluded), the VIP hash and the NAT pool. Throws
// std::runtime_error when a table cannot be built (or more than kMaxBackends backends were ever known).
// Backends without a configured mac on a link of sluice's (ports[].addresses) take the MAC neighbours resolved on
// that link's interface among ports (none given: they stay unresolved).
std::shared_ptr<const LbTables> build_lb_tables(const Config& config, BackendRegistry& registry,
                                                const BackendHealth& healthy, int socket = 0,
                                                const NeighbourLookup& neighbours = nullptr,
                                                const std::vector<PortIdentity>* ports = nullptr);

std::unique_ptr<Snapshot> build_snapshot(const Config& config, const std::vector<PortIdentity>& ports,
                                         std::size_t lcore_count = 1, int socket = 0, std::size_t worker_count = 1,
                                         const LiveState& live = {});

// A new snapshot of the same config for a change of live state (a health transition, a neighbour resolved): the
// forwarding entries and load-balancer tables are rebuilt, the rule set is shared with base, not rebuilt.
std::unique_ptr<Snapshot> rebuild_live(const Snapshot& base, const Config& config,
                                       const std::vector<PortIdentity>& ports, int socket, const LiveState& live);
// A new snapshot of the same config with the route table fib (RouteTableWriter::commit): the routes' next hops are
// resolved again, everything else is shared with base.
std::unique_ptr<Snapshot> with_routes(const Snapshot& base, std::shared_ptr<const RouteFib> fib, const Config& config,
                                      const std::vector<PortIdentity>& ports, int socket, const LiveState& live);

}  // namespace sluice

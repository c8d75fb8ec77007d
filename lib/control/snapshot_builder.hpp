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

#include "config/config.hpp"
#include "pipeline/snapshot.hpp"
#include "routing/interfaces.hpp"
#include "routing/route_builder.hpp"

namespace sluice {

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

// Builds the forwarding table, the firewall's rte_acl contexts and early-drop tables (on socket), and room for
// the per-lcore rule counters of lcore_count lcores. Needs the EAL when the firewall is on. Throws
// std::invalid_argument when the config names a port that is not in ports, std::runtime_error when a table cannot
// be built.
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

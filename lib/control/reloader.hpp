// The running config and what outlives any one config: stable rule ids, the backend registry, the rule hits of
// retired snapshots. Applies a reload (all or nothing, one snapshot publication with the current health folded in),
// dry-runs a candidate, and republishes the load-balancer tables when health or neighbours change. Owned by the
// daemon; control thread only (HealthChecker is the one piece it shares with another thread).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "control/live_dataplane.hpp"
#include "control/rule_hits.hpp"
#include "control/snapshot_builder.hpp"
#include "control/status.hpp"
#include "health/health_checker.hpp"
#include "health/health_transitions.hpp"
#include "routing/route_table_writer.hpp"

namespace sluice {

struct ReloaderSetup {
    std::vector<PortIdentity> ports;
    std::size_t lcore_count = 1;
    int socket = 0;                                // where tables are built
    HealthChecker* health = nullptr;               // null: every backend is up
    HealthTransitionQueue* transitions = nullptr;  // folded into a reload that finds some waiting
    NeighbourLookup neighbours;
    ConnectedHosts hosts;  // the hosts on connected links resolved so far (glean)
    // After a reload's snapshot is published and the config replaced: what else follows the config (neighbour
    // targets, XDP steering, BGP). Runs before the reload is reported applied.
    std::function<void()> applied;
};

// Logs the firewall's rule counts and rte_acl classify methods of a built snapshot (at start and at each reload).
void log_tables(const Snapshot& snapshot);
// The process's memory for the start and reload logs: resident and its peak since start (VmRSS, VmHWM), glibc's
// heap in use and held (freed memory stays held: retain_freed_heap), DPDK's heap on socket in use.
std::string memory_report(int socket);

// Checks for every backend whose service (or itself) has a health_check, by stable id.
std::vector<HealthTarget> health_targets(const Config& config, const BackendRegistry& backends);

class Reloader {
public:
    Reloader(Config running, ReloaderSetup setup);

    const Config& config() const { return config_; }
    const BackendRegistry& backends() const { return backends_; }
    const RuleHitLedger& rule_hits() const { return rule_hits_; }
    const ReloadStatus& status() const { return status_; }
    // The stable id of a backend of service, if it was ever configured.
    std::optional<uint32_t> backend_id(const std::string& service, const BackendConfig& backend) const;
    // For logs: "web/10.1.0.11:8080".
    std::string backend_name(uint32_t id) const;

    // Start: the running config's first snapshot (throws as build_snapshot does). Then attach the data plane that
    // runs it before any other call.
    std::unique_ptr<Snapshot> build_first(std::size_t workers);
    void attach(LiveDataplane& dataplane);

    // Reads the config file again and applies it, or keeps everything and says why (log and status). True when
    // applied. A candidate that changes a restart-only setting is refused whole.
    bool apply(const char* trigger);
    // sluicectl reload --dry-run [FILE]: builds the candidate's tables and has the workers re-judge every tracked
    // connection with them; applies nothing. FILE empty: the running config's file.
    std::vector<std::string> dry_run(const std::string& path);

    // Hands the health checker the running config's checks; republishes when that brought a down backend back.
    void apply_health_targets();
    // Logs the transitions waiting in the queue and republishes the load-balancer tables if there were any.
    void apply_health_transitions();
    // Rebuilds the Maglev tables from the running config and the current health and neighbours; the rule set is
    // shared, not rebuilt.
    void republish_lb_tables(const char* why);

    // The route table across reloads: a reload whose routes are the same keeps it; the daemon adds a mirrored
    // kernel table's routes to it.
    RouteTableWriter& routes() { return routes_; }
    // Publishes the route table's pending changes (a batch of kernel routes), if any; everything else is shared.
    void republish_routes();

private:
    LiveState live_state(StableRuleIds* ids, BackendRegistry* backends) const;
    // routes: the writer of the table to publish; null (a dry run): a table of the candidate's own.
    std::unique_ptr<Snapshot> build_candidate(const Config& candidate, StableRuleIds& ids, BackendRegistry& backends,
                                              RouteTableWriter* routes);
    std::vector<std::string> refusals(const ConfigResult& candidate) const;
    bool log_transitions();
    void refuse(const std::vector<std::string>& errors);
    void publish_reload(std::unique_ptr<Snapshot> snapshot, const Config& candidate, BackendRegistry& backends);
    std::vector<std::string> rejudge_lines(const Snapshot& candidate);

    Config config_;
    ReloaderSetup setup_;
    LiveDataplane* dataplane_ = nullptr;
    StableRuleIds rule_ids_;
    BackendRegistry backends_;
    RuleHitLedger rule_hits_;
    ReloadStatus status_;
    RouteTableWriter routes_;
};

}  // namespace sluice

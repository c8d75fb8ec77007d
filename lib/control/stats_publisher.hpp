// Sums what the lcores counted into the records telemetry and the exporter read (rules, backends), and writes the
// firewall decisions workers logged. Owned by the daemon; control thread only, once per control-loop turn.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "control/reloader.hpp"
#include "control/status.hpp"
#include "health/health_checker.hpp"
#include "pipeline/dataplane.hpp"

namespace sluice {

// "firewall: rule 'ssh' denied tcp 198.51.100.7:40000 -> 192.0.2.1:22 in on wan": rule ids index fw, the snapshot
// that decided or a later one (a reload in between may have renumbered them).
std::string decision_log_line(const DecisionLogRecord& record, const FirewallTables& fw,
                              const std::vector<PortIdentity>& ports);

class StatsPublisher {
public:
    // health may be null (no checks). devices: the running ports, which outlive the publisher.
    StatsPublisher(Dataplane& dataplane, const Reloader& reloader, const HealthChecker* health,
                   std::vector<PortIdentity> ports, std::vector<const Port*> devices);

    const RuleStats& rules() const { return rules_; }
    const BackendStats& backends() const { return backends_; }
    const XskStats& xsk() const { return xsk_; }

    // Every control-loop turn: the rules', backends' and AF_XDP sockets' records.
    void refresh();
    // Every control-loop turn: the decisions workers logged, and once a second how many the log rate left out.
    void write_decision_log();

private:
    void refresh_rule_stats();
    void refresh_backend_stats();
    void refresh_xsk_stats();
    // A nat backend's port spaces, summed over the workers.
    void count_nat_ports(uint32_t backend_id, std::size_t pool_addresses, BackendRecord& r) const;

    Dataplane& dataplane_;
    const Reloader& reloader_;
    const HealthChecker* health_;
    std::vector<PortIdentity> ports_;
    std::vector<const Port*> devices_;
    RuleStats rules_;
    BackendStats backends_;
    XskStats xsk_;
    std::chrono::steady_clock::time_point last_suppressed_report_{};
    uint64_t reported_suppressed_ = 0;
};

}  // namespace sluice

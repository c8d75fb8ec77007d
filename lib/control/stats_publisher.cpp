#include "control/stats_publisher.hpp"

#include <spdlog/spdlog.h>

namespace sluice {

std::string decision_log_line(const DecisionLogRecord& record, const FirewallTables& fw,
                              const std::vector<PortIdentity>& ports) {
    std::string port = interface_name(ports, record.in_port);
    if (port == "?") port = std::to_string(record.in_port);
    const std::string rule = record.rule == UINT32_MAX            ? "the default"
                             : record.rule < fw.rule_names.size() ? "rule '" + fw.rule_names[record.rule] + "'"
                                                                  : "a rule";
    const char* verdict = record.action == RuleAction::allow  ? "allowed"
                          : record.action == RuleAction::deny ? "denied"
                                                              : "rejected";
    return fmt::format("firewall: {} {} {} in on {}", rule, verdict, to_string(record.tuple), port);
}

StatsPublisher::StatsPublisher(Dataplane& dataplane, const Reloader& reloader, const HealthChecker* health,
                               std::vector<PortIdentity> ports, std::vector<const Port*> devices)
    : dataplane_(dataplane), reloader_(reloader), health_(health), ports_(std::move(ports)),
      devices_(std::move(devices)) {}

void StatsPublisher::refresh() {
    refresh_rule_stats();
    refresh_backend_stats();
    refresh_xsk_stats();
}

void StatsPublisher::refresh_xsk_stats() {
    XskRecord record;
    for (const Port* port : devices_)
        if (const std::optional<XskCounters> counters = port->xsk_counters())
            record.ports.push_back({port->name(), *counters});
    if (!record.ports.empty()) xsk_.write(std::move(record));
}

void StatsPublisher::refresh_rule_stats() {
    RuleHitsRecord record;
    const Snapshot& current = dataplane_.snapshot();
    reloader_.rule_hits().totals(current, record);
    for (std::size_t r = 0; r < current.firewall->rule_names.size(); ++r) {
        uint64_t packets = 0, bytes = 0;
        const uint32_t stable = current.firewall->stable_ids[r];
        if (stable < kMaxCountedRules) {
            dataplane_.for_each_lcore([&](const LcoreContext& ctx) {
                if (!ctx.rule_traffic) return;
                packets += counter_read(ctx.rule_traffic[stable].packets);
                bytes += counter_read(ctx.rule_traffic[stable].bytes);
            });
        }
        record.traffic.emplace_back(packets, bytes);
    }
    rules_.write(std::move(record));
}

void StatsPublisher::refresh_backend_stats() {
    BackendsRecord record;
    const LoadBalancerConfig& lb = reloader_.config().load_balancer;
    for (std::size_t a = 0; a < lb.nat_pool.size(); ++a)
        record.nat_pool.push_back(to_string(lb.nat_pool[a].address, lb.nat_pool_families[a]));
    for (const ServiceConfig& service : reloader_.config().services) {
        for (const BackendConfig& backend : service.backends) {
            BackendRecord r;
            r.service = service.name;
            r.backend = backend.name();
            r.mode = lb_mode_name(service.mode);
            r.weight = backend.weight;
            if (const auto id = reloader_.backend_id(service.name, backend)) {
                if (const auto status = health_ ? health_->status(*id) : std::nullopt) {
                    r.checked = true;
                    r.up = status->up;
                    r.last_error = status->last_error;
                }
                uint64_t closed = 0;
                dataplane_.for_each_lcore([&](const LcoreContext& ctx) {
                    if (!ctx.backend_traffic) return;
                    const BackendTraffic& t = ctx.backend_traffic[*id];
                    r.new_connections += counter_read(t.new_connections);
                    closed += counter_read(t.closed_connections);
                    r.packets += counter_read(t.packets);
                    r.bytes += counter_read(t.bytes);
                });
                r.active_connections = r.new_connections >= closed ? r.new_connections - closed : 0;
                if (service.mode == LbMode::nat) count_nat_ports(*id, record.nat_pool.size(), r);
            }
            record.backends.push_back(std::move(r));
        }
    }
    backends_.write(std::move(record));
}

void StatsPublisher::count_nat_ports(uint32_t backend_id, std::size_t pool_addresses, BackendRecord& r) const {
    r.nat_ports_in_use.assign(pool_addresses, 0);
    dataplane_.for_each_lcore([&](const LcoreContext& ctx) {
        if (!ctx.nat_ports) return;
        r.nat_ports_capacity += ctx.nat_ports->capacity();
        for (std::size_t a = 0; a < pool_addresses; ++a) r.nat_ports_in_use[a] += ctx.nat_ports->in_use(a, backend_id);
    });
}

void StatsPublisher::write_decision_log() {
    const FirewallTables& fw = *dataplane_.snapshot().firewall;
    for (const DecisionLogRecord& r : dataplane_.take_decision_log())
        spdlog::info("{}", decision_log_line(r, fw, ports_));
    const auto now = std::chrono::steady_clock::now();
    if (now - last_suppressed_report_ < std::chrono::seconds(1)) return;
    last_suppressed_report_ = now;
    const uint64_t suppressed = dataplane_.totals().log_suppressed;
    if (suppressed > reported_suppressed_)
        spdlog::info("firewall: {} decision(s) not logged (over firewall.log_rate)", suppressed - reported_suppressed_);
    reported_suppressed_ = suppressed;
}

}  // namespace sluice

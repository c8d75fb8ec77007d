#include "control/reloader.hpp"

#include <chrono>
#include <map>
#include <set>

#include <malloc.h>

#include <fstream>

#include <rte_malloc.h>
#include <spdlog/spdlog.h>

#include "pipeline/lcore_context.hpp"

namespace sluice {
namespace {

constexpr auto kRejudgeTimeout = std::chrono::seconds(120);

double unix_now() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

int64_t ms_since(std::chrono::steady_clock::time_point started) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started).count();
}

HealthCheckSpec health_check_spec(const ServiceConfig& service, const BackendConfig& backend) {
    HealthCheckSpec spec;
    spec.kind = backend.health.type == HealthCheckType::http ? HealthCheckKind::http : HealthCheckKind::tcp;
    spec.address = to_string(backend.address, backend.family);
    spec.port = backend.health.port ? backend.health.port : backend.port ? backend.port : service.port;
    spec.http_path = backend.health.path;
    spec.expect_status = backend.health.expect_status;
    spec.interval_ms = backend.health.interval_ms;
    spec.timeout_ms = backend.health.timeout_ms;
    spec.rise = backend.health.rise;
    spec.fall = backend.health.fall;
    return spec;
}

// The time the rte_acl contexts built for a reload took (those kept from the running snapshot took none).
double acl_build_ms(const Snapshot& built, const Snapshot& running) {
    const FirewallTables& next = *built.firewall;
    const FirewallTables& now = *running.firewall;
    double ms = 0;
    if (next.acl_v4 && next.acl_v4 != now.acl_v4) ms += next.acl_v4->build_ms();
    if (next.acl_v6 && next.acl_v6 != now.acl_v6) ms += next.acl_v6->build_ms();
    return ms;
}

// What a reload kept of the running tables instead of building them again.
void log_kept_tables(const Snapshot& built, const Snapshot& running) {
    const FirewallTables& next = *built.firewall;
    const FirewallTables& now = *running.firewall;
    if (next.blocklist && next.blocklist == now.blocklist)
        spdlog::info("reload: the early-drop sets are unchanged: their tables are kept, not built again");
    if ((next.acl_v4 || next.acl_v6) && next.acl_v4 == now.acl_v4 && next.acl_v6 == now.acl_v6)
        spdlog::info("reload: the rules match as before: their rte_acl contexts are kept, not built again");
}

// The files a config reads besides its own (included rules, prefix-set files, the sync key) whose bytes differ
// between two configs, or that only one of them reads: what changed when the config file itself did not.
std::string changed_inputs(const Config& running, const Config& candidate) {
    std::map<std::string, std::string> before;
    for (const ConfigInput& input : running.inputs) before[input.path] = input.hash;
    std::string changed;
    const auto add = [&](const std::string& what) { changed += (changed.empty() ? "" : ", ") + what; };
    for (const ConfigInput& input : candidate.inputs) {
        const auto it = before.find(input.path);
        if (it == before.end() || it->second != input.hash) add(input.path);
        if (it != before.end()) before.erase(it);
    }
    for (const auto& [path, hash] : before) add(path + " (no longer read)");
    return changed;
}

std::vector<std::string> rule_changes(const Config& running, const Config& candidate) {
    std::set<std::string> old_rules, new_rules;
    for (const FirewallRuleConfig& r : running.firewall.rules) old_rules.insert(r.name);
    for (const FirewallRuleConfig& r : candidate.firewall.rules) new_rules.insert(r.name);
    std::vector<std::string> lines;
    for (const std::string& r : new_rules)
        if (!old_rules.count(r)) lines.push_back("rule added: " + r);
    for (const std::string& r : old_rules)
        if (!new_rules.count(r)) lines.push_back("rule removed: " + r);
    return lines;
}

// The names a build adds to the stable rule ids (numbered from the size before it), taken back unless committed:
// a refused reload or a dry run leaves the ids as they were, without a copy of a string per rule name since start.
class RuleIdsDraft {
public:
    explicit RuleIdsDraft(StableRuleIds& ids) : ids_(ids), before_(ids.size()) {}
    ~RuleIdsDraft() {
        if (!committed_) std::erase_if(ids_, [this](const auto& name_id) { return name_id.second >= before_; });
    }
    RuleIdsDraft(const RuleIdsDraft&) = delete;
    RuleIdsDraft& operator=(const RuleIdsDraft&) = delete;
    void commit() { committed_ = true; }

private:
    StableRuleIds& ids_;
    std::size_t before_;
    bool committed_ = false;
};

}  // namespace

std::string memory_report(int socket) {
    std::ifstream status("/proc/self/status");
    std::string line;
    long rss_kib = 0, peak_kib = 0;
    while (std::getline(status, line)) {
        if (line.starts_with("VmRSS:")) rss_kib = std::stol(line.substr(6));
        if (line.starts_with("VmHWM:")) peak_kib = std::stol(line.substr(6));
    }
    const struct mallinfo2 heap = mallinfo2();
    rte_malloc_socket_stats dpdk{};
    rte_malloc_get_socket_stats(socket, &dpdk);
    return fmt::format("process {} MiB (peak {} MiB), malloc {} MiB in use of {} MiB held, DPDK heap {} MiB in use",
                       rss_kib >> 10, peak_kib >> 10, (heap.uordblks + heap.hblkhd) >> 20,
                       (heap.arena + heap.hblkhd) >> 20, dpdk.heap_allocsz_bytes >> 20);
}

void log_tables(const Snapshot& snapshot) {
    const FirewallTables& fw = *snapshot.firewall;
    if (!fw.enabled) return;
    const std::size_t blocklist_bytes =
        (fw.blocklist_v4 ? fw.blocklist_v4->bytes() : 0) + (fw.blocklist_v6 ? fw.blocklist_v6->bytes() : 0);
    spdlog::info("firewall: {} rule(s) ({} IPv4 / {} IPv6 rte_acl rules after expansion), default {}, {} early-drop "
                 "prefix(es) in {} KiB of tables",
                 fw.actions.size(), fw.acl_v4 ? fw.acl_v4->expanded_rule_count() : 0,
                 fw.acl_v6 ? fw.acl_v6->expanded_rule_count() : 0,
                 fw.default_action == RuleAction::allow ? "allow" : "deny", fw.blocklist_prefixes,
                 (blocklist_bytes + 1023) / 1024);
    for (const AclClassifier* acl : {fw.acl_v4.get(), fw.acl_v6.get()})
        if (acl && acl->expanded_rule_count() != 0)
            spdlog::info("firewall: {} rte_acl classify method {}", acl->family() == IpFamily::ipv4 ? "IPv4" : "IPv6",
                         acl->method_report());
}

std::vector<HealthTarget> health_targets(const Config& config, const BackendRegistry& backends) {
    std::vector<HealthTarget> targets;
    for (const ServiceConfig& service : config.services) {
        for (const BackendConfig& backend : service.backends) {
            if (backend.health.type == HealthCheckType::none) continue;
            const auto id = backends.ids.find(service.name + "/" + backend.name());
            if (id != backends.ids.end()) targets.push_back({id->second, health_check_spec(service, backend)});
        }
    }
    return targets;
}

Reloader::Reloader(Config running, ReloaderSetup setup)
    : config_(std::move(running)), setup_(std::move(setup)), routes_(setup_.socket) {
    status_.update([&](ReloadRecord& r) {
        r.running_hash = config_.hash;
        r.running_path = config_.path;
    });
}

std::optional<uint32_t> Reloader::backend_id(const std::string& service, const BackendConfig& backend) const {
    const auto id = backends_.ids.find(service + "/" + backend.name());
    if (id == backends_.ids.end()) return std::nullopt;
    return id->second;
}

std::string Reloader::backend_name(uint32_t id) const {
    for (const auto& [name, known] : backends_.ids)
        if (known == id) return name;
    return "backend #" + std::to_string(id);
}

LiveState Reloader::live_state(StableRuleIds* ids, BackendRegistry* backends) const {
    BackendHealth healthy = [health = setup_.health](uint32_t id) { return !health || health->is_up(id); };
    return LiveState{ids, backends, std::move(healthy), setup_.neighbours, setup_.hosts, nullptr, nullptr, nullptr};
}

std::unique_ptr<Snapshot> Reloader::build_first(std::size_t workers) {
    LiveState live = live_state(&rule_ids_, &backends_);
    live.routes = &routes_;
    return build_snapshot(config_, setup_.ports, setup_.lcore_count, setup_.socket, workers, live);
}

void Reloader::attach(LiveDataplane& dataplane) { dataplane_ = &dataplane; }

// The running snapshot lets the candidate keep its early-drop tables and rte_acl contexts (or their methods).
std::unique_ptr<Snapshot> Reloader::build_candidate(const Config& candidate, StableRuleIds& ids,
                                                    BackendRegistry& backends, RouteTableWriter* routes) {
    LiveState live = live_state(&ids, &backends);
    live.routes = routes;
    const FirewallTables& running = *dataplane_->snapshot().firewall;
    live.blocklist = running.blocklist;
    live.acl_v4 = running.acl_v4;
    live.acl_v6 = running.acl_v6;
    return build_snapshot(candidate, setup_.ports, setup_.lcore_count, setup_.socket, dataplane_->worker_count(), live);
}

std::vector<std::string> Reloader::refusals(const ConfigResult& candidate) const {
    std::vector<std::string> errors;
    for (const ConfigError& e : candidate.errors) errors.push_back(e.to_string());
    if (candidate.config)
        for (const std::string& change : restart_required_changes(config_, *candidate.config))
            errors.push_back(config_.path + ": " + change + ": a restart is needed to apply it");
    return errors;
}

bool Reloader::log_transitions() {
    if (!setup_.transitions) return false;
    const std::vector<HealthTransition> transitions = setup_.transitions->take();
    for (const HealthTransition& t : transitions) {
        if (t.up) spdlog::info("backend {} is up: {}", backend_name(t.backend_id), t.reason);
        else spdlog::warn("backend {} is down: {}", backend_name(t.backend_id), t.reason);
    }
    return !transitions.empty();
}

void Reloader::refuse(const std::vector<std::string>& errors) {
    for (const std::string& e : errors) spdlog::error("reload refused: {}", e);
    spdlog::error("reload refused: the running config ({}) stays in force", config_.hash);
    status_.update([&](ReloadRecord& r) {
        ++r.failures;
        r.last_ok = false;
        r.last_attempt_unix = unix_now();
        r.last_errors = errors;
    });
}

bool Reloader::apply(const char* trigger) {
    spdlog::info("reload ({}): reading {}", trigger, config_.path);
    const auto reading = std::chrono::steady_clock::now();
    std::string text;
    const bool readable = read_config_text(config_.path, text);
    // An edit is seen twice when the editor's save is followed by SIGHUP (inotify, then the signal): the second
    // finds what runs already.
    if (readable && same_sources(config_, text)) {
        spdlog::info("reload ({}): {} and the {} file(s) it reads are those of the running config {}: nothing to "
                     "reload",
                     trigger, config_.path, config_.inputs.size(), config_.hash);
        status_.update([&](ReloadRecord& r) {  // the file's config is in force, as after an applied reload
            ++r.successes;
            r.last_ok = true;
            r.last_attempt_unix = unix_now();
            r.last_errors.clear();
        });
        return true;
    }
    const int64_t read_ms = ms_since(reading);
    ConfigResult candidate =
        readable ? load_config_text(text, config_.path, &config_) : load_config_file(config_.path, &config_);
    std::string().swap(text);  // the file's bytes (all its rules when they are inline) are not needed by the build
    spdlog::info(
        "reload: file(s) read and compared in {} ms, YAML parsed in {:.0f} ms, decoded and checked in {:.0f} ms",
        read_ms, candidate.times.yaml_ms, candidate.times.decode_ms);
    for (const ConfigError& w : candidate.warnings) spdlog::warn("reload: {}", w.to_string());
    std::vector<std::string> errors = refusals(candidate);
    std::unique_ptr<Snapshot> snapshot;
    RuleIdsDraft ids(rule_ids_);  // committed only if the reload goes through
    BackendRegistry backends = backends_;
    if (errors.empty()) {
        log_transitions();  // the build reads the health they reported
        try {
            const auto started = std::chrono::steady_clock::now();
            snapshot = build_candidate(*candidate.config, rule_ids_, backends, &routes_);
            if (rule_ids_.size() > kMaxCountedRules)
                spdlog::warn("reload: more than {} rule names since start; the newest rules get no packet counters",
                             kMaxCountedRules);
            spdlog::info("reload: tables built in {} ms ({:.0f} ms of it rte_acl contexts)", ms_since(started),
                         acl_build_ms(*snapshot, dataplane_->snapshot()));
            spdlog::info("reload: memory with both rule sets built: {}", memory_report(setup_.socket));
            log_tables(*snapshot);
            log_kept_tables(*snapshot, dataplane_->snapshot());
            if (snapshot->routes.fib && snapshot->routes.fib == dataplane_->snapshot().routes.fib)
                spdlog::info("reload: the routes are the same: the route table is kept, not built again");
        } catch (const std::exception& e) {
            errors.push_back(config_.path + ": " + e.what());
        }
    }
    if (!errors.empty()) {
        refuse(errors);
        return false;
    }
    const auto publishing = std::chrono::steady_clock::now();
    publish_reload(std::move(snapshot), *candidate.config, backends);
    spdlog::info("reload: published in {} ms (the workers' grace period, the old tables freed)", ms_since(publishing));
    ids.commit();
    backends_ = std::move(backends);
    if (candidate.config->log.level != config_.log.level)
        spdlog::set_level(spdlog::level::from_str(candidate.config->log.level));
    const std::string previous = config_.hash;
    const std::string inputs_changed = changed_inputs(config_, *candidate.config);
    config_ = std::move(*candidate.config);
    if (setup_.applied) setup_.applied();
    status_.update([&](ReloadRecord& r) {
        ++r.successes;
        r.last_ok = true;
        r.last_attempt_unix = unix_now();
        r.last_errors.clear();
        r.running_hash = config_.hash;
    });
    spdlog::info("reload applied: config {} replaces {}{}", config_.hash, previous,
                 inputs_changed.empty() ? "" : "; changed besides it: " + inputs_changed);
    return true;
}

// One publication per reload: health that changed while the tables were built (a transition, or a down backend
// whose check the candidate changes, up again) is folded into the candidate's Maglev tables before it goes out.
void Reloader::publish_reload(std::unique_ptr<Snapshot> snapshot, const Config& candidate, BackendRegistry& backends) {
    const char* why = log_transitions() ? "health transition" : nullptr;
    try {
        if (setup_.health && !setup_.health->set_targets(health_targets(candidate, backends)).empty())
            why = "health checks changed";
    } catch (const std::exception& e) {
        spdlog::error("health checks not updated: {}", e.what());
    }
    if (why) {
        try {
            const auto started = std::chrono::steady_clock::now();
            snapshot = rebuild_live(*snapshot, candidate, setup_.ports, setup_.socket, live_state(nullptr, &backends));
            spdlog::info("load balancer tables rebuilt ({}) in {} ms", why, ms_since(started));
        } catch (const std::exception& e) {
            spdlog::error("load balancer tables not rebuilt ({}): {}", why, e.what());
        }
    }
    rule_hits_.fold(*dataplane_->publish(std::move(snapshot)));  // the retired snapshot is unreachable now
}

void Reloader::apply_health_targets() {
    if (!setup_.health) return;
    try {
        // A down backend whose check changed (or went away) is up again: its Maglev slots must come back.
        if (!setup_.health->set_targets(health_targets(config_, backends_)).empty())
            republish_lb_tables("health checks changed");
    } catch (const std::exception& e) {
        spdlog::error("health checks not updated: {}", e.what());
    }
}

void Reloader::apply_health_transitions() {
    if (log_transitions()) republish_lb_tables("health transition");
}

void Reloader::republish_lb_tables(const char* why) {
    try {
        const auto started = std::chrono::steady_clock::now();
        BackendRegistry backends = backends_;
        auto next =
            rebuild_live(dataplane_->snapshot(), config_, setup_.ports, setup_.socket, live_state(nullptr, &backends));
        // The retired snapshot shares its rule counters with the new one: nothing to fold.
        dataplane_->publish(std::move(next));
        backends_ = std::move(backends);
        spdlog::info("load balancer tables rebuilt ({}) in {} ms", why, ms_since(started));
    } catch (const std::exception& e) {
        spdlog::error("load balancer tables not rebuilt ({}): {}", why, e.what());
    }
}

void Reloader::republish_routes() {
    if (routes_.pending() == 0) return;
    try {
        auto fib = routes_.commit();
        const RouteCommitReport& report = routes_.last_commit();
        if (report.changes == 0) return;
        const auto started = std::chrono::steady_clock::now();
        auto next = with_routes(dataplane_->snapshot(), std::move(fib), config_, setup_.ports, setup_.socket,
                                live_state(nullptr, nullptr));
        dataplane_->publish(std::move(next));
        spdlog::debug("routes: {} change(s) published ({} table writes{}, {:.1f} ms; next hops resolved in {} ms)",
                      report.changes, report.fib_ops, report.rebuilt ? ", table built whole" : "", report.milliseconds,
                      ms_since(started));
    } catch (const std::exception& e) {
        spdlog::error("routes not published: {}", e.what());
    }
}

std::vector<std::string> Reloader::dry_run(const std::string& path) {
    ConfigResult candidate = load_config_file(path.empty() ? config_.path : path);
    std::vector<std::string> lines;
    for (const ConfigError& e : candidate.errors) lines.push_back("error: " + e.to_string());
    for (const ConfigError& w : candidate.warnings) lines.push_back(w.to_string());
    if (!candidate.config) return lines;
    for (const std::string& change : restart_required_changes(config_, *candidate.config))
        lines.push_back("restart needed: " + change);
    std::unique_ptr<Snapshot> next;
    RuleIdsDraft ids(rule_ids_);  // a dry run adds none
    try {
        BackendRegistry backends = backends_;
        next = build_candidate(*candidate.config, rule_ids_, backends, nullptr);
    } catch (const std::exception& e) {
        lines.push_back(std::string("error: ") + e.what());
        return lines;
    }
    for (std::string& line : rule_changes(config_, *candidate.config)) lines.push_back(std::move(line));
    for (std::string& line : rejudge_lines(*next)) lines.push_back(std::move(line));
    return lines;
}

std::vector<std::string> Reloader::rejudge_lines(const Snapshot& candidate) {
    const auto walks = dataplane_->rejudge(candidate, kRejudgeTimeout);
    if (walks.empty() && dataplane_->connections_opened() > 0)
        return {"error: the workers did not finish re-judging their connections in time"};
    uint64_t examined = 0, deny = 0, gone_drop = 0, gone_keep = 0, moves = 0;
    for (const auto& w : walks) {
        examined += w->examined;
        deny += w->would_deny;
        gone_drop += w->backend_gone_drop;
        gone_keep += w->backend_gone_keep;
        moves += w->maglev_moves;
    }
    return {fmt::format("tracked connections: {}", examined),
            fmt::format("would be denied as new connections (they keep their verdict): {}", deny),
            fmt::format("backend removed, connection dropped (removed_backends: drop): {}", gone_drop),
            fmt::format("backend removed, connection kept until it ends: {}", gone_keep),
            fmt::format("would get another backend if new (they stay where they are): {}", moves),
            "nothing was applied"};
}

}  // namespace sluice

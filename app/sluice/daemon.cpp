#include "daemon.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <csignal>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <memory>
#include <mutex>
#include <optional>

#include <arpa/inet.h>

#include <rte_cycles.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_pdump.h>

#include <spdlog/spdlog.h>

#include "control/bird_announcer.hpp"
#include "control/dataplane_plan.hpp"
#include "control/explain.hpp"
#include "control/health_checker.hpp"
#include "control/neighbours.hpp"
#include "control/snapshot_builder.hpp"
#include "control/status.hpp"
#include "control/systemd_notifier.hpp"
#include "control/telemetry.hpp"
#include "dpdk/eal.hpp"
#include "dpdk/mempool.hpp"
#include "dpdk/port.hpp"
#include "dpdk/startup_error.hpp"
#include "metrics/prometheus_exporter.hpp"
#include "packet/packet_meta.hpp"
#include "pipeline/dataplane.hpp"
#include "xdp/steering.hpp"

namespace sluice {
namespace {

constexpr auto kReloadDebounce = std::chrono::milliseconds(200);
constexpr auto kReloadRequestTimeout = std::chrono::seconds(60);

double unix_now() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void check_lcores(const Config& config) {
    const unsigned main_lcore = rte_get_main_lcore();
    for (const LcoreConfig& l : config.lcores) {
        if (l.id == main_lcore)
            throw StartupError("lcore " + std::to_string(l.id) +
                               " is the main lcore, which runs the control thread; give the data plane other lcores");
        if (!rte_lcore_is_enabled(l.id))
            throw StartupError("lcore " + std::to_string(l.id) +
                               " is not enabled by the EAL arguments; list it in -l/--lcores (e.g. --lcores=0@0,1@1)");
    }
}

// One pool per NUMA socket that has a port. Each pool is sized for its ports' descriptors plus every ring and
// lcore (a conservative bound when lcores span sockets). docs/architecture.md has the formula.
std::map<int, rte_mempool*> create_pools(const Config& config, const std::vector<std::unique_ptr<Port>>& ports,
                                         uint16_t workers) {
    std::map<int, MempoolDemand> demand;
    for (const auto& port : ports) {
        MempoolDemand& d = demand[port->socket()];
        d.rx_descriptors += uint64_t{port->spec().rx_queues} * port->spec().rx_descriptors + port->mbufs_kept_by_driver();
        d.tx_descriptors += uint64_t{workers} * port->spec().tx_descriptors;
        d.max_frame = std::max(d.max_frame, max_frame_size(port->spec().mtu));
    }
    std::map<int, rte_mempool*> pools;
    for (auto& [socket, d] : demand) {
        d.ports = static_cast<uint32_t>(ports.size());
        d.ring_slots = uint64_t{workers} * config.dataplane.ring_size;
        d.lcores = static_cast<uint32_t>(config.lcores.size());
        d.workers = workers;
        const MempoolPlan plan = plan_mempool(d);
        spdlog::info("mempool on socket {}: {} mbufs of {} bytes data room, cache {}, about {} MiB ({} hugepages)",
                     socket, plan.mbufs, plan.data_room, plan.cache_size, plan.bytes >> 20, plan.hugepages_2m);
        try {
            pools[socket] = create_packet_pool("sluice_pool_s" + std::to_string(socket), plan, socket);
        } catch (...) {
            for (auto& [s, pool] : pools) rte_mempool_free(pool);
            throw;
        }
    }
    return pools;
}

void log_tables(const Snapshot& snapshot) {
    const FirewallTables& fw = *snapshot.firewall;
    if (!fw.enabled) return;
    spdlog::info("firewall: {} rule(s) ({} IPv4 / {} IPv6 rte_acl rules after expansion), default {}, {} early-drop prefix(es)",
                 fw.actions.size(), fw.acl_v4 ? fw.acl_v4->expanded_rule_count() : 0,
                 fw.acl_v6 ? fw.acl_v6->expanded_rule_count() : 0,
                 fw.default_action == RuleAction::allow ? "allow" : "deny", fw.blocklist_prefixes);
    for (const AclClassifier* acl : {fw.acl_v4.get(), fw.acl_v6.get()})
        if (acl && acl->expanded_rule_count() != 0)
            spdlog::info("firewall: {} rte_acl classify method {}", acl->family() == IpFamily::ipv4 ? "IPv4" : "IPv6",
                         acl->method_report());
}

void log_totals(const CounterTotals& totals, const std::vector<std::unique_ptr<Port>>& ports) {
    for (const auto& port : ports) {
        const PortCounters& c = totals.ports[port->id()];
        spdlog::info("port '{}': rx {} packets {} bytes, tx {} packets {} bytes", port->name(), c.rx_packets,
                     c.rx_bytes, c.tx_packets, c.tx_bytes);
    }
    for (std::size_t r = 1; r < kDropReasonCount; ++r)
        if (totals.drops[r]) spdlog::info("dropped {}: {}", kDropReasonInfo[r].name, totals.drops[r]);
}

// A file descriptor closed when it goes.
struct Fd {
    int fd = -1;
    explicit Fd(int f) : fd(f) {}
    ~Fd() {
        if (fd >= 0) close(fd);
    }
    Fd(const Fd&) = delete;
    Fd& operator=(const Fd&) = delete;
};

// Jobs from the telemetry thread (reload, explain) run on the control thread, which owns the config and the
// snapshot; the requester waits for its job to finish.
class ControlMailbox {
public:
    ControlMailbox() : event_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}
    int fd() const { return event_.fd; }

    // Telemetry thread. False when the daemon stopped or the job did not finish in time.
    bool run(std::function<void()> job) {
        std::unique_lock lock(mutex_);
        if (closed_) return false;
        const uint64_t ticket = ++requested_;
        jobs_.push_back(std::move(job));
        const uint64_t one = 1;
        if (write(event_.fd, &one, sizeof one) < 0) {
            // Only fails when the counter would overflow; the control loop still sees the earlier wake-up.
        }
        return done_.wait_for(lock, kReloadRequestTimeout, [&] { return completed_ >= ticket || closed_; }) &&
               completed_ >= ticket;
    }
    // Control thread: runs every waiting job.
    void drain() {
        uint64_t value;
        if (read(event_.fd, &value, sizeof value) != sizeof value) return;
        std::unique_lock lock(mutex_);
        while (!jobs_.empty()) {
            auto job = std::move(jobs_.front());
            jobs_.pop_front();
            lock.unlock();
            job();
            lock.lock();
            ++completed_;
        }
        done_.notify_all();
    }
    void close_all() {
        std::lock_guard lock(mutex_);
        closed_ = true;
        done_.notify_all();
    }

private:
    Fd event_;
    std::mutex mutex_;
    std::condition_variable done_;
    std::deque<std::function<void()>> jobs_;
    uint64_t requested_ = 0;
    uint64_t completed_ = 0;
    bool closed_ = false;
};

class Daemon {
public:
    Daemon(const Config& config, std::string program, std::vector<std::string> extra_eal_args)
        : config_(config), program_(std::move(program)), extra_eal_args_(std::move(extra_eal_args)) {}

    int run() {
        int exit_code = kExitOk;
        try {
            start();
            control_loop();
        } catch (const StartupError& e) {
            spdlog::error("{}", e.what());
            exit_code = kExitStartupFailed;
        } catch (const std::exception& e) {
            spdlog::error("{}", e.what());
            exit_code = kExitStartupFailed;
        }
        const int stop_code = stop();
        return stop_code != kExitOk ? stop_code : exit_code;
    }

private:
    // Staged start; each stage throws StartupError and stop() unwinds whatever was built.
    void start() {
        eal_ = std::make_unique<EalGuard>(build_eal_args(program_, config_.eal, prepare_xdp_ports(config_.ports), extra_eal_args_));
        check_lcores(config_);
        if (!register_packet_meta()) throw StartupError("cannot register the packet metadata mbuf field");
        register_telemetry_commands();
        // Lets dpdk-dumpcap / dpdk-pdump (secondary processes) capture on sluice's ports.
        if (rte_pdump_init() != 0) spdlog::warn("packet capture (rte_pdump) unavailable: {}", rte_strerror(rte_errno));
        else pdump_ = true;
        for (const PortSpec& spec : config_.ports) ports_.push_back(std::make_unique<Port>(spec));
        uint16_t workers = 0;
        for (const LcoreConfig& l : config_.lcores) workers += l.worker;
        pools_ = create_pools(config_, ports_, workers);
        for (auto& port : ports_) port->start(workers, pools_.at(port->socket()));
        for (const PortSpec& spec : config_.ports) {
            const std::string iface = af_xdp_interface(spec.device);
            if (!iface.empty() && spec.xdp_steering != XdpSteeringMode::off)
                steering_.push_back(std::make_unique<XdpSteering>(spec.name, iface));
        }
        publish_steering();
        for (const auto& port : ports_) port_identities_.push_back({port->name(), port->id(), port->mac()});
        health_ = std::make_unique<HealthChecker>([this](uint32_t id, bool up, const std::string& reason) {
            {
                std::lock_guard lock(health_mutex_);
                health_transitions_.emplace_back(id, up, reason);
            }
            const uint64_t one = 1;
            if (write(health_event_.fd, &one, sizeof one) < 0) {
                // Only fails when the counter would overflow; the control loop still sees the earlier wake-up.
            }
        });
        apply_neighbour_targets();
        std::unique_ptr<Snapshot> first;
        try {
            first = build_snapshot(config_, port_identities_, config_.lcores.size(), ports_.front()->socket(), workers,
                                   LiveState{&stable_rule_ids_, &backends_, backend_health(), neighbour_lookup()});
        } catch (const std::exception& e) {
            throw StartupError(std::string("tables: ") + e.what());
        }
        log_tables(*first);
        DataplaneSpec spec = dataplane_spec(config_, port_identities_);
        spec.solicitation_pool = pools_.at(ports_.front()->socket());
        dataplane_ = std::make_unique<Dataplane>(spec, std::move(first));
        dataplane_->launch();
        apply_health_targets();

        view_.dataplane = dataplane_.get();
        for (const auto& port : ports_) view_.ports.push_back({port->name(), port->id()});
        for (const auto& [socket, pool] : pools_) view_.pools.push_back({socket, pool});
        view_.reload = &reload_status_;
        view_.rules = &rule_stats_;
        view_.backends = &backend_stats_;
        view_.xdp = &xdp_stats_;
        view_.bgp = &bgp_stats_;
        if (config_.bgp.enabled) {
            // The first control-loop turn writes the include file (empty or not) and has BIRD read it, so VIPs a
            // crashed predecessor left in the file are withdrawn unless they are wanted again.
            bgp_ = std::make_unique<BirdAnnouncer>(config_.bgp);
            spdlog::info("bgp: announcing VIPs through BIRD at {} (routes in {})", config_.bgp.bird_socket, config_.bgp.include_file);
        }
        publish_bgp();
        reload_status_.update([&](ReloadRecord& r) {
            r.running_hash = config_.hash;
            r.running_path = config_.path;
        });
        attach_telemetry(
            &view_,
            [this] {
                mailbox_.run([this] { reload("telemetry"); });
                return reload_status_.read();
            },
            LineCommands{
                .explain =
                    [this](const std::string& text) {
                        ExplainQuery query;
                        std::string error;
                        if (!parse_explain_query(text, query, error)) return std::vector<std::string>{"error: " + error};
                        return on_control_thread([&] {
                            return explain(dataplane_->snapshot(), port_identities_, dataplane_->worker_count(), query);
                        });
                    },
                .flows = [this](const std::string& text) { return on_control_thread([&] { return list_flows(text); }); },
                .dry_run = [this](const std::string& text) { return on_control_thread([&] { return dry_run(text); }); },
                .drain = [this](const std::string&) { return on_control_thread([&] { return begin_drain("sluicectl drain"); }); },
            });
        if (!config_.metrics.listen.empty()) {
            try {
                exporter_ = std::make_unique<PrometheusExporter>(config_.metrics.listen, view_, SLUICE_VERSION);
            } catch (const std::exception& e) {
                throw StartupError("metrics: cannot listen on " + config_.metrics.listen + ": " + e.what());
            }
            spdlog::info("metrics on http://{}/metrics", config_.metrics.listen);
        }
        spdlog::info("ready: {} port(s), {} lcore(s), {} worker(s), config {} ({})", ports_.size(),
                     config_.lcores.size(), workers, config_.path, config_.hash);
        systemd_.ready("forwarding; config " + config_.hash);
        if (systemd_.watchdog_enabled()) spdlog::info("systemd watchdog: pings while every lcore's heartbeat advances");
    }

    // Reloads the config file: parse, validate, build, publish; or keep everything as it is and say why.
    // All or nothing: a candidate that changes a restart-only setting is refused whole.
    void reload(const char* trigger) {
        systemd_.reloading();
        apply_reload(trigger);
        systemd_.reloaded("forwarding; config " + config_.hash);
    }

    void apply_reload(const char* trigger) {
        spdlog::info("reload ({}): reading {}", trigger, config_.path);
        ConfigResult candidate = load_config_file(config_.path);
        std::vector<std::string> errors;
        for (const ConfigError& e : candidate.errors) errors.push_back(e.to_string());
        if (candidate.config) {
            for (const std::string& change : restart_required_changes(config_, *candidate.config))
                errors.push_back(config_.path + ": " + change + ": a restart is needed to apply it");
        }
        std::unique_ptr<Snapshot> snapshot;
        if (errors.empty()) {
            try {
                const auto started = std::chrono::steady_clock::now();
                StableRuleIds ids = stable_rule_ids_;  // committed only if the reload goes through
                BackendRegistry backends = backends_;
                snapshot = build_snapshot(*candidate.config, port_identities_, config_.lcores.size(), ports_.front()->socket(),
                                          dataplane_->worker_count(), live_from_running(&ids, &backends));
                pending_backends_ = std::move(backends);
                if (ids.size() > kMaxCountedRules)
                    spdlog::warn("reload: more than {} rule names since start; the newest rules get no packet counters",
                                 kMaxCountedRules);
                pending_rule_ids_ = std::move(ids);
                spdlog::info("reload: tables built in {} ms",
                             std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started).count());
                log_tables(*snapshot);
                const FirewallTables& built = *snapshot->firewall;
                const FirewallTables& running = *dataplane_->snapshot().firewall;
                if (built.blocklist && built.blocklist == running.blocklist)
                    spdlog::info("reload: the early-drop sets are unchanged: their tables are kept, not built again");
                if ((built.acl_v4 || built.acl_v6) && built.acl_v4 == running.acl_v4 && built.acl_v6 == running.acl_v6)
                    spdlog::info("reload: the rules match as before: their rte_acl contexts are kept, not built again");
            } catch (const std::exception& e) {
                errors.push_back(config_.path + ": " + e.what());
            }
        }
        if (!errors.empty()) {
            for (const std::string& e : errors) spdlog::error("reload refused: {}", e);
            spdlog::error("reload refused: the running config ({}) stays in force", config_.hash);
            reload_status_.update([&](ReloadRecord& r) {
                ++r.failures;
                r.last_ok = false;
                r.last_attempt_unix = unix_now();
                r.last_errors = errors;
            });
            return;
        }
        fold_rule_hits(*dataplane_->publish(std::move(snapshot)));  // the old snapshot is unreachable now
        stable_rule_ids_ = std::move(pending_rule_ids_);
        backends_ = std::move(pending_backends_);
        if (candidate.config->log.level != config_.log.level)
            spdlog::set_level(spdlog::level::from_str(candidate.config->log.level));
        const std::string previous = config_.hash;
        config_ = std::move(*candidate.config);
        apply_neighbour_targets();
        apply_health_targets();
        publish_steering();
        if (bgp_) bgp_->set_config(config_.bgp);  // where BIRD is cannot change without a restart
        update_announcements();
        reload_status_.update([&](ReloadRecord& r) {
            ++r.successes;
            r.last_ok = true;
            r.last_attempt_unix = unix_now();
            r.last_errors.clear();
            r.running_hash = config_.hash;
        });
        spdlog::info("reload applied: config {} replaces {}", config_.hash, previous);
    }

    BackendHealth backend_health() {
        return [this](uint32_t id) { return !health_ || health_->is_up(id); };
    }

    // What ARP/ND must resolve for the running config: next hops given by address, and backends without a mac on
    // one of sluice's links. Each is solicited from sluice's own address on that link.
    void apply_neighbour_targets() {
        std::vector<NeighbourTarget> targets;
        const auto add = [&](const std::string& port, IpFamily family, const IpAddress& address) {
            for (const PortAddress& own : config_.port_addresses) {
                if (own.port != port || own.family != family) continue;
                Config one;
                one.port_addresses = {own};
                if (!on_link(one, port, family, address)) continue;
                for (const PortIdentity& p : port_identities_)
                    if (p.name == port) targets.push_back({family, address, p.id, own.address});
                return;
            }
        };
        for (const ForwardConfig& f : config_.forward)
            if (f.resolve_next_hop) add(f.to, f.next_hop_family, f.next_hop);
        for (const ServiceConfig& service : config_.services)
            for (const BackendConfig& b : service.backends)
                if (!b.has_mac)
                    for (const PortSpec& p : config_.ports) add(p.name, b.family, b.address);
        neighbours_.set_targets(std::move(targets));
    }

    // Control thread, every loop: learn what the workers saw, solicit what is due, forget what stopped answering;
    // a changed MAC republishes the forwarding and load-balancer tables.
    void run_neighbours() {
        if (neighbours_.size() == 0) {
            dataplane_->take_neighbour_events();  // nothing to resolve: keep the ring empty
            return;
        }
        const auto now = NeighbourTable::Clock::now();
        bool changed = false;
        for (const NeighbourEvent& e : dataplane_->take_neighbour_events()) {
            if (neighbours_.learn(e.family, e.address, e.mac, now)) {
                changed = true;
                const auto& m = e.mac.addr_bytes;
                spdlog::info("neighbour {} is at {:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", to_string(e.address, e.family),
                             m[0], m[1], m[2], m[3], m[4], m[5]);
            }
        }
        for (const NeighbourTarget& t : neighbours_.due(now)) {
            NeighbourRequest request{t.sender, t.address, t.port_id, t.family, {}};
            dataplane_->request_solicitation(request);  // full ring: asked again in a second
        }
        if (neighbours_.expire(now)) {
            spdlog::warn("a neighbour stopped answering; its traffic waits for it (neighbour_unresolved)");
            changed = true;
        }
        if (changed) republish_lb_tables("neighbours changed");
    }

    NeighbourLookup neighbour_lookup() {
        return [this](IpFamily family, const IpAddress& address) { return neighbours_.lookup(family, address); };
    }

    // What a build of a new config takes from the running one: the rule ids and backends to commit after it, and
    // what the running snapshot lets it keep (the early-drop tables, the rte_acl contexts or their classify methods).
    LiveState live_from_running(StableRuleIds* ids, BackendRegistry* backends) {
        const FirewallTables& running = *dataplane_->snapshot().firewall;
        return LiveState{ids, backends, backend_health(), neighbour_lookup(), running.blocklist, running.acl_v4, running.acl_v6};
    }

    // The backend of a stable id, for logs: "web/10.1.0.11:8080".
    std::string backend_name(uint32_t id) const {
        for (const auto& [name, known] : backends_.ids)
            if (known == id) return name;
        return "backend #" + std::to_string(id);
    }

    // Checks every backend whose service (or itself) has a health_check; control thread, at start and after a reload.
    void apply_health_targets() {
        if (!health_) return;
        std::vector<HealthTarget> targets;
        for (const ServiceConfig& service : config_.services) {
            for (const BackendConfig& backend : service.backends) {
                if (backend.health.type == HealthCheckType::none) continue;
                const auto id = backends_.ids.find(service.name + "/" + backend.name());
                if (id == backends_.ids.end()) continue;
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
                targets.push_back({id->second, spec});
            }
        }
        try {
            // A down backend whose check changed (or went away) is up again: its Maglev slots must come back.
            if (!health_->set_targets(std::move(targets)).empty()) republish_lb_tables("health checks changed");
        } catch (const std::exception& e) {
            spdlog::error("health checks not updated: {}", e.what());
        }
    }

    // Rebuilds the Maglev tables from the running config and the current health, and publishes them with the same
    // rule set. Control thread.
    void republish_lb_tables(const char* why) {
        try {
            const auto started = std::chrono::steady_clock::now();
            BackendRegistry backends = backends_;
            auto next = rebuild_live(dataplane_->snapshot(), config_, port_identities_, ports_.front()->socket(),
                                     LiveState{nullptr, &backends, backend_health(), neighbour_lookup()});
            // The retired snapshot shares its rule counters with the new one: nothing to fold.
            dataplane_->publish(std::move(next));
            backends_ = std::move(backends);
            spdlog::info("load balancer tables rebuilt ({}) in {} ms", why,
                         std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started).count());
        } catch (const std::exception& e) {
            spdlog::error("load balancer tables not rebuilt ({}): {}", why, e.what());
        }
    }

    // A backend went up or down (reported by the checker's thread): log it, rebuild the Maglev tables without the
    // down ones and publish them with the same rule set. Control thread.
    void apply_health_transitions() {
        uint64_t value;
        if (read(health_event_.fd, &value, sizeof value) != sizeof value) return;
        std::vector<std::tuple<uint32_t, bool, std::string>> transitions;
        {
            std::lock_guard lock(health_mutex_);
            transitions.swap(health_transitions_);
        }
        for (const auto& [id, up, reason] : transitions) {
            if (up) spdlog::info("backend {} is up: {}", backend_name(id), reason);
            else spdlog::warn("backend {} is down: {}", backend_name(id), reason);
        }
        republish_lb_tables("health transition");
    }

    // Telemetry thread: runs job on the control thread and returns its lines.
    template <typename Job>
    std::vector<std::string> on_control_thread(Job job) {
        std::vector<std::string> lines;
        if (!mailbox_.run([&] { lines = job(); })) return {"error: sluice is stopping or busy"};
        return lines;
    }

    // sluicectl flows [ADDRESS] [port N] [PROTO]: the tracked connections that match, walked by their workers.
    std::vector<std::string> list_flows(const std::string& text) {
        constexpr std::size_t kShown = 100;  // DPDK telemetry answers are limited to 16 KB
        FlowFilter filter;
        std::istringstream words(text);
        for (std::string w; words >> w;) {
            Prefix p;
            IpFamily family;
            static const std::map<std::string, uint8_t> kProtocols = {{"tcp", 6}, {"udp", 17}, {"icmp", 1}, {"icmpv6", 58}};
            if (w == "port" && words >> w && w.find_first_not_of("0123456789") == std::string::npos && w.size() <= 5 &&
                std::stoul(w) <= 65535) {
                filter.port = static_cast<uint16_t>(std::stoul(w));
            } else if (kProtocols.count(w)) {
                filter.proto = kProtocols.at(w);
            } else if (w.find('/') == std::string::npos && inet_pton(AF_INET, w.c_str(), p.address.bytes) == 1) {
                filter = FlowFilter{true, p.address, IpFamily::ipv4, filter.port, filter.proto};
            } else if (w.find('/') == std::string::npos && inet_pton(AF_INET6, w.c_str(), p.address.bytes) == 1) {
                filter = FlowFilter{true, p.address, IpFamily::ipv6, filter.port, filter.proto};
            } else {
                (void)family;
                return {"error: '" + w + "' is not an address, 'port N' or a protocol (tcp, udp, icmp, icmpv6)"};
            }
        }
        const auto walks = dataplane_->walk_flows(filter, kShown, nullptr, std::chrono::seconds(10));
        if (walks.empty()) return {"error: the workers did not finish the walk in time (or none tracks connections)"};
        uint64_t matched = 0;
        std::vector<std::string> lines{""};
        const uint64_t now = rte_rdtsc(), hz = rte_get_tsc_hz();
        for (const auto& walk : walks) {
            matched += walk->matched;
            for (const FlowRecord& r : walk->records) {
                if (lines.size() > kShown) break;
                const char* proto = r.tuple.proto == 6 ? "tcp" : r.tuple.proto == 17 ? "udp" : r.tuple.proto == 1 ? "icmp" : "ip";
                std::string line = fmt::format("{} {} {} pkts {}/{} ttl {}s", proto, to_string(r.tuple),
                                               conn_state_name(r.state), r.packets[0], r.packets[1],
                                               r.expires_tsc > now ? (r.expires_tsc - now) / hz : 0);
                if (r.backend) line += " -> " + backend_name(r.backend - 1) + (r.nat_port ? fmt::format(" nat:{}", r.nat_port) : "");
                lines.push_back(line);
            }
        }
        lines[0] = fmt::format("{} connection(s) match, {} listed", matched, lines.size() - 1);
        return lines;
    }

    // sluicectl reload --dry-run [FILE]: builds the candidate's tables and re-judges every tracked connection with
    // them, on the workers; applies nothing.
    std::vector<std::string> dry_run(const std::string& text) {
        const std::string path = text.empty() ? config_.path : text;
        ConfigResult candidate = load_config_file(path);
        std::vector<std::string> lines;
        for (const ConfigError& e : candidate.errors) lines.push_back("error: " + e.to_string());
        if (!candidate.config) return lines;
        for (const std::string& change : restart_required_changes(config_, *candidate.config))
            lines.push_back("restart needed: " + change);
        std::unique_ptr<Snapshot> next;
        try {
            StableRuleIds ids = stable_rule_ids_;
            BackendRegistry backends = backends_;
            next = build_snapshot(*candidate.config, port_identities_, config_.lcores.size(), ports_.front()->socket(),
                                  dataplane_->worker_count(), live_from_running(&ids, &backends));
        } catch (const std::exception& e) {
            lines.push_back(std::string("error: ") + e.what());
            return lines;
        }
        std::set<std::string> old_rules;
        for (const FirewallRuleConfig& r : config_.firewall.rules) old_rules.insert(r.name);
        std::set<std::string> new_rules;
        for (const FirewallRuleConfig& r : candidate.config->firewall.rules) new_rules.insert(r.name);
        for (const std::string& r : new_rules)
            if (!old_rules.count(r)) lines.push_back("rule added: " + r);
        for (const std::string& r : old_rules)
            if (!new_rules.count(r)) lines.push_back("rule removed: " + r);
        const auto walks = dataplane_->walk_flows(FlowFilter{}, 0, next.get(), std::chrono::seconds(30));
        if (walks.empty() && dataplane_->totals().conn_inserts > 0) {
            lines.push_back("error: the workers did not finish re-judging their connections in time");
            return lines;
        }
        uint64_t examined = 0, deny = 0, gone_drop = 0, gone_keep = 0, moves = 0;
        for (const auto& w : walks) {
            examined += w->examined;
            deny += w->would_deny;
            gone_drop += w->backend_gone_drop;
            gone_keep += w->backend_gone_keep;
            moves += w->maglev_moves;
        }
        lines.push_back(fmt::format("tracked connections: {}", examined));
        lines.push_back(fmt::format("would be denied as new connections (they keep their verdict): {}", deny));
        lines.push_back(fmt::format("backend removed, connection dropped (removed_backends: drop): {}", gone_drop));
        lines.push_back(fmt::format("backend removed, connection kept until it ends: {}", gone_keep));
        lines.push_back(fmt::format("would get another backend if new (they stay where they are): {}", moves));
        lines.push_back("nothing was applied");
        return lines;
    }

    // Sums a snapshot's per-lcore rule counters by rule name.
    static std::map<std::string, uint64_t> rule_hits_of(const Snapshot& snapshot, uint64_t& default_hits) {
        std::map<std::string, uint64_t> by_name;
        const FirewallTables& fw = *snapshot.firewall;
        default_hits = 0;
        if (!fw.hits) return by_name;
        const std::size_t stride = fw.hits->rule_count + 1;
        for (std::size_t slot = 0; slot * stride < fw.hits->hits.size(); ++slot) {
            for (std::size_t r = 0; r < fw.hits->rule_count; ++r)
                by_name[fw.rule_names[r]] += counter_read(fw.hits->hits[slot * stride + r]);
            default_hits += counter_read(fw.hits->hits[slot * stride + fw.hits->rule_count]);
        }
        return by_name;
    }

    // A retired snapshot's counts carry over, so a rule's counter never goes back when the config is reloaded.
    void fold_rule_hits(const Snapshot& retired) {
        uint64_t default_hits;
        for (const auto& [name, hits] : rule_hits_of(retired, default_hits)) carried_rule_hits_[name] += hits;
        carried_default_hits_ += default_hits;
    }

    // Control thread: publishes the current totals for telemetry and metrics.
    void refresh_rule_stats() {
        RuleHitsRecord record;
        const Snapshot& current = dataplane_->snapshot();
        const auto live = rule_hits_of(current, record.default_hits);
        record.default_hits += carried_default_hits_;
        for (std::size_t r = 0; r < current.firewall->rule_names.size(); ++r) {
            const std::string& name = current.firewall->rule_names[r];
            const auto carried = carried_rule_hits_.find(name);
            record.rules.emplace_back(name, live.at(name) + (carried == carried_rule_hits_.end() ? 0 : carried->second));
            uint64_t packets = 0, bytes = 0;
            const uint32_t stable = current.firewall->stable_ids[r];
            if (stable < kMaxCountedRules) {
                dataplane_->for_each_lcore([&](const LcoreContext& ctx) {
                    if (!ctx.rule_traffic) return;
                    packets += counter_read(ctx.rule_traffic[stable].packets);
                    bytes += counter_read(ctx.rule_traffic[stable].bytes);
                });
            }
            record.traffic.emplace_back(packets, bytes);
        }
        rule_stats_.write(std::move(record));
    }

    // Control thread: writes the firewall decisions workers logged (rules with log: true), and once a second how
    // many the log rate left out.
    void write_decision_log() {
        const FirewallTables& fw = *dataplane_->snapshot().firewall;
        for (const DecisionLogRecord& r : dataplane_->take_decision_log()) {
            std::string port = std::to_string(r.in_port);
            for (const PortIdentity& p : port_identities_)
                if (p.id == r.in_port) port = p.name;
            // Rule ids index the snapshot that decided; a reload in between may have renumbered them.
            const std::string rule = r.rule == UINT32_MAX ? "the default" : r.rule < fw.rule_names.size() ? "rule '" + fw.rule_names[r.rule] + "'" : "a rule";
            const char* verdict = r.action == RuleAction::allow ? "allowed" : r.action == RuleAction::deny ? "denied" : "rejected";
            spdlog::info("firewall: {} {} {} in on {}", rule, verdict, to_string(r.tuple), port);
        }
        const auto now = std::chrono::steady_clock::now();
        if (now - last_suppressed_report_ < std::chrono::seconds(1)) return;
        last_suppressed_report_ = now;
        const uint64_t suppressed = dataplane_->totals().log_suppressed;
        if (suppressed > reported_suppressed_)
            spdlog::info("firewall: {} decision(s) not logged (over firewall.log_rate)", suppressed - reported_suppressed_);
        reported_suppressed_ = suppressed;
    }

    // Control thread: per-backend health and traffic, summed over the workers, for telemetry and metrics.
    void refresh_backend_stats() {
        BackendsRecord record;
        for (const ServiceConfig& service : config_.services) {
            for (const BackendConfig& backend : service.backends) {
                BackendRecord r;
                r.service = service.name;
                r.backend = backend.name();
                r.mode = lb_mode_name(service.mode);
                r.weight = backend.weight;
                const auto id = backends_.ids.find(service.name + "/" + r.backend);
                if (id != backends_.ids.end()) {
                    if (const auto status = health_ ? health_->status(id->second) : std::nullopt) {
                        r.checked = true;
                        r.up = status->up;
                        r.last_error = status->last_error;
                    }
                    uint64_t closed = 0;
                    dataplane_->for_each_lcore([&](const LcoreContext& ctx) {
                        if (!ctx.backend_traffic) return;
                        const BackendTraffic& t = ctx.backend_traffic[id->second];
                        r.new_connections += counter_read(t.new_connections);
                        closed += counter_read(t.closed_connections);
                        r.packets += counter_read(t.packets);
                        r.bytes += counter_read(t.bytes);
                    });
                    r.active_connections = r.new_connections >= closed ? r.new_connections - closed : 0;
                }
                record.backends.push_back(std::move(r));
            }
        }
        backend_stats_.write(std::move(record));
    }

    // Keeps each XDP port's steering equal to the config and to the kernel addresses its interface has now (an
    // operator may add a management address at any time), and publishes the program's counters.
    void publish_steering() {
        XdpRecord record;
        for (std::size_t i = 0; i < steering_.size(); ++i) {
            XdpSteering& steering = *steering_[i];
            const PortSpec* spec = config_.find_port(steering.port());
            const XdpSteeringMode mode = spec ? spec->xdp_steering : XdpSteeringMode::all;
            std::vector<SteeringEntry> entries = steering_entries(config_, steering.port(), kernel_addresses(steering.iface()));
            if (i >= steering_published_.size()) steering_published_.resize(i + 1);
            if (entries != steering_published_[i]) {
                if (steering.publish(mode, entries))
                    spdlog::info("port '{}': XDP steering on {} ({}): {} prefixes", steering.port(), steering.iface(),
                                 mode == XdpSteeringMode::services ? "services" : "all", entries.size());
                steering_published_[i] = std::move(entries);
            }
            const SteeringCounters c = steering.counters();
            record.ports.push_back({steering.port(), steering.iface(), mode == XdpSteeringMode::services ? "services" : "all",
                                    c.to_sluice, c.to_kernel, c.other, steering_published_[i].size()});
        }
        xdp_stats_.write(std::move(record));
    }

    // Waits for signals, reload requests and config file changes; logs link changes.
    void control_loop() {
        sigset_t signals;
        sigemptyset(&signals);
        for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&signals, s);
        Fd signal_fd(signalfd(-1, &signals, SFD_NONBLOCK | SFD_CLOEXEC));
        // Watch the directory: editors that write a new file and rename it over the old one replace the inode.
        const std::filesystem::path path = std::filesystem::absolute(config_.path);
        const std::string file_name = path.filename();
        Fd inotify(inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
        if (inotify_add_watch(inotify.fd, path.parent_path().c_str(), IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE) < 0)
            spdlog::warn("cannot watch {} for changes ({}); reload with SIGHUP", path.parent_path().string(),
                         std::strerror(errno));

        link_up_.assign(ports_.size(), -1);
        bool file_changed = false;
        auto file_changed_at = std::chrono::steady_clock::now();
        for (;;) {
            for (std::size_t i = 0; i < ports_.size(); ++i) {
                rte_eth_link link{};
                if (rte_eth_link_get_nowait(ports_[i]->id(), &link) != 0) continue;
                if (link.link_status != link_up_[i]) {
                    link_up_[i] = link.link_status;
                    ports_[i]->log_link();
                }
            }
            refresh_rule_stats();
            refresh_backend_stats();
            publish_steering();
            run_neighbours();
            update_announcements();
            write_decision_log();
            std::vector<uint64_t> heartbeats;
            dataplane_->for_each_lcore([&](const LcoreContext& ctx) { heartbeats.push_back(counter_read(ctx.counters.polls)); });
            for (std::size_t stalled : systemd_.tick(heartbeats))
                spdlog::error("lcore {} is stalled (its poll counter stopped); withholding the systemd watchdog ping",
                              config_.lcores[stalled].id);

            pollfd fds[] = {{signal_fd.fd, POLLIN, 0}, {inotify.fd, POLLIN, 0}, {mailbox_.fd(), POLLIN, 0},
                            {health_event_.fd, POLLIN, 0}};
            int timeout_ms = file_changed ? static_cast<int>(kReloadDebounce.count()) : 250;
            if (drain_ends_)
                timeout_ms = static_cast<int>(std::clamp<int64_t>(
                    std::chrono::duration_cast<std::chrono::milliseconds>(*drain_ends_ - std::chrono::steady_clock::now()).count(), 0,
                    timeout_ms));
            poll(fds, 4, timeout_ms);
            if (fds[3].revents & POLLIN) apply_health_transitions();

            signalfd_siginfo info;
            while (read(signal_fd.fd, &info, sizeof info) == sizeof info) {
                const char* name = info.ssi_signo == SIGINT ? "SIGINT" : info.ssi_signo == SIGTERM ? "SIGTERM" : "SIGHUP";
                if (info.ssi_signo == SIGHUP) {
                    reload("SIGHUP");
                } else if (info.ssi_signo == SIGTERM && bgp_ && config_.bgp.drain_on_sigterm && !drain_ends_) {
                    begin_drain("SIGTERM");
                } else {
                    if (drain_ends_) spdlog::info("{} during the drain: stopping at once", name);
                    else spdlog::info("{}: stopping", name);
                    return;
                }
            }
            alignas(inotify_event) char events[4096];
            ssize_t n;
            while ((n = read(inotify.fd, events, sizeof events)) > 0) {
                for (char* p = events; p < events + n;) {
                    const auto* event = reinterpret_cast<const inotify_event*>(p);
                    if (event->len && file_name == event->name) {
                        file_changed = true;
                        file_changed_at = std::chrono::steady_clock::now();
                    }
                    p += sizeof(inotify_event) + event->len;
                }
            }
            // Debounced: an editor's save is often several events; reload once they settle.
            if (file_changed && std::chrono::steady_clock::now() - file_changed_at >= kReloadDebounce) {
                file_changed = false;
                reload("file changed");
            }
            mailbox_.drain();
            if (drain_ends_ && std::chrono::steady_clock::now() >= *drain_ends_) {
                spdlog::info("drain over ({} s): stopping", config_.bgp.drain_seconds);
                return;
            }
        }
    }

    // Control thread, every loop turn and after a reload: which VIPs sluice can serve now (every port's link up,
    // min_healthy usable backends, not draining), handed to BIRD when that changed. See docs/architecture.md,
    // "Announcing VIPs over BGP".
    void update_announcements(bool force = false) {
        if (!bgp_) return;
        const bool links_up = std::all_of(link_up_.begin(), link_up_.end(), [](int up) { return up == 1; }) && !link_up_.empty();
        std::vector<ServiceHealth> services;
        for (const ServiceConfig& service : config_.services) {
            ServiceHealth h{service.name, to_string(service.vip, service.family), service.family, 0, service.min_healthy};
            for (const BackendConfig& backend : service.backends) {
                if (backend.weight == 0) continue;
                // A checked backend counts once its first check has passed: the data plane takes a backend as up
                // from the start, but announcing a VIP before anything was checked would flap it at every start.
                const auto id = backends_.ids.find(service.name + "/" + backend.name());
                const auto status = id != backends_.ids.end() && health_ ? health_->status(id->second) : std::nullopt;
                if (!status || (status->up && status->checks > status->failures)) ++h.usable;
            }
            services.push_back(std::move(h));
        }
        bgp_->update(wanted_vips(services, links_up, drain_ends_.has_value()), std::chrono::steady_clock::now(), force);
        publish_bgp();
    }

    void publish_bgp() {
        BgpRecord record = bgp_ ? bgp_->record() : BgpRecord{};
        record.draining = drain_ends_.has_value();
        record.drain_ends_unix = drain_ends_unix_;
        bgp_stats_.write(std::move(record));
    }

    // sluicectl drain, or SIGTERM with bgp drain_on_sigterm: withdraw every VIP now, keep forwarding for
    // drain_seconds while the routers move new flows to the other instances and established connections finish,
    // then stop. Control thread.
    std::vector<std::string> begin_drain(const char* trigger) {
        if (!bgp_) return {"error: nothing to drain: no bgp section in the config (stop sluice with SIGTERM)"};
        const uint32_t seconds = config_.bgp.drain_seconds;
        if (!drain_ends_) {
            drain_ends_ = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
            drain_ends_unix_ = unix_now() + seconds;
            spdlog::info("{}: draining: withdrawing every VIP, forwarding {} s more, then stopping (SIGTERM again stops at once)",
                         trigger, seconds);
            systemd_.stopping();
            update_announcements(true);
        }
        const auto left = std::chrono::duration_cast<std::chrono::seconds>(*drain_ends_ - std::chrono::steady_clock::now()).count();
        std::vector<std::string> lines;
        lines.push_back(bgp_->in_sync() ? "every VIP withdrawn (BIRD reconfigured)"
                                        : "error: BIRD has not taken the withdrawal yet (retrying): " + bgp_->record().last_error.substr(0, 80));
        lines.push_back(fmt::format("draining: forwarding continues; sluice stops in {} s", std::max<int64_t>(left, 0)));
        return lines;
    }

    // Staged stop, in reverse: readers (telemetry, metrics), lcores (RX first, then rings drained and TX flushed),
    // ports, pools. Returns kExitLeakedMbufs when a pool is not full again.
    int stop() {
        int exit_code = kExitOk;
        systemd_.stopping();
        if (bgp_) {
            // Routes must not outlive the data plane: withdraw (a drain did already) before anything stops.
            bgp_->update({}, std::chrono::steady_clock::now(), !bgp_->in_sync() || !bgp_->announced().empty());
            if (!bgp_->announced().empty()) spdlog::error("bgp: could not withdraw the VIPs from BIRD before stopping");
        }
        mailbox_.close_all();
        health_.reset();  // joins the checker's thread: no transition arrives from here on
        attach_telemetry(nullptr, nullptr, {});
        exporter_.reset();
        if (dataplane_) {
            dataplane_->stop();
            log_totals(dataplane_->totals(), ports_);
            dataplane_.reset();
        }
        std::map<int, uint32_t> kept_by_drivers;  // by socket: see Port::mbufs_kept_by_driver()
        for (const auto& port : ports_) kept_by_drivers[port->socket()] += port->mbufs_kept_by_driver();
        ports_.clear();  // stops and closes every device; PMDs hand their descriptors' mbufs back
        for (auto& [socket, pool] : pools_) {
            const uint32_t in_use = mbufs_in_use(pool);
            const uint32_t kept = kept_by_drivers[socket];
            if (in_use != kept) {
                spdlog::error("mempool on socket {}: {} mbuf(s) leaked of {}{}", socket,
                              static_cast<int64_t>(in_use) - static_cast<int64_t>(kept), pool->size,
                              kept ? fmt::format(" ({} more are net_af_xdp's fill rings, which it never returns)", kept) : "");
                exit_code = kExitLeakedMbufs;
            } else if (kept) {
                spdlog::info("mempool on socket {}: all {} mbufs returned but the {} net_af_xdp keeps in its fill rings",
                             socket, pool->size, kept);
            } else {
                spdlog::info("mempool on socket {}: all {} mbufs returned", socket, pool->size);
            }
            rte_mempool_free(pool);
        }
        pools_.clear();
        if (pdump_) rte_pdump_uninit();
        eal_.reset();
        return exit_code;
    }

    Config config_;
    std::string program_;
    std::vector<std::string> extra_eal_args_;
    std::unique_ptr<EalGuard> eal_;
    bool pdump_ = false;
    std::vector<std::unique_ptr<Port>> ports_;
    std::vector<PortIdentity> port_identities_;
    std::map<int, rte_mempool*> pools_;
    std::unique_ptr<Dataplane> dataplane_;
    ReloadStatus reload_status_;
    RuleStats rule_stats_;
    BackendStats backend_stats_;
    std::vector<std::unique_ptr<XdpSteering>> steering_;          // net_af_xdp ports that run sluice's program
    std::vector<std::vector<SteeringEntry>> steering_published_;  // what each holds now
    XdpStats xdp_stats_;
    std::unique_ptr<BirdAnnouncer> bgp_;  // bgp section configured
    BgpStats bgp_stats_;
    std::vector<int> link_up_;            // per port: -1 unknown, 0 down, 1 up (control loop)
    std::optional<std::chrono::steady_clock::time_point> drain_ends_;
    double drain_ends_unix_ = 0;
    StableRuleIds stable_rule_ids_;
    StableRuleIds pending_rule_ids_;
    BackendRegistry backends_;
    BackendRegistry pending_backends_;
    std::unique_ptr<HealthChecker> health_;
    NeighbourTable neighbours_;
    std::chrono::steady_clock::time_point last_suppressed_report_{};
    uint64_t reported_suppressed_ = 0;
    Fd health_event_{eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)};
    std::mutex health_mutex_;
    std::vector<std::tuple<uint32_t, bool, std::string>> health_transitions_;  // from the checker's thread
    std::map<std::string, uint64_t> carried_rule_hits_;
    uint64_t carried_default_hits_ = 0;
    StatusView view_;
    ControlMailbox mailbox_;
    SystemdNotifier systemd_;
    std::unique_ptr<PrometheusExporter> exporter_;
};

}  // namespace

int run_daemon(const Config& config, const std::string& program, const std::vector<std::string>& extra_eal_args) {
    Daemon daemon(config, program, extra_eal_args);
    return daemon.run();
}

}  // namespace sluice

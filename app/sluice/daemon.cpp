// The daemon's life between its staged start and stop (daemon_start.cpp): the control loop, reloads, kernel routes,
// BGP and the drain, and the operator's commands (ARP/ND: daemon_neighbours.cpp). Control thread only, unless a
// function says otherwise.
#include "daemon.hpp"

#include <poll.h>
#include <sys/inotify.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>

#include <rte_cycles.h>
#include <rte_ethdev.h>

#include <spdlog/spdlog.h>

#include "common/unique_fd.hpp"
#include "control/explain.hpp"
#include "control/flow_listing.hpp"
#include "daemon_impl.hpp"
#include "dpdk/startup_error.hpp"

namespace sluice {
namespace {

constexpr auto kReloadDebounce = std::chrono::milliseconds(200);
// Kernel route changes gathered this long become one snapshot: a BGP burst of thousands of routes is one swap.
constexpr auto kRouteBatch = std::chrono::milliseconds(50);

double unix_now() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

}  // namespace

int Daemon::run() {
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

// A peer asked for every connection: the workers dump their tables into their sync rings, paced by the sync
// thread that drains them (FlowWalk::sync_dump). On the control thread, like the flows listing's walks.
void Daemon::serve_resync() {
    if (!sync_ || !resync_wanted_.exchange(false, std::memory_order_relaxed)) return;
    sync_->dump_starting();
    const auto walks = dataplane_->walk_flows({}, 0, nullptr, std::chrono::seconds(120), true);
    uint64_t dumped = 0;
    for (const auto& walk : walks) dumped += walk->dumped;
    if (walks.empty()) {
        spdlog::warn("sync: the resync for a peer did not finish within 120 s");
        return;  // no resync_done for it: the peer's own timeout, or a later dump, ends its wait
    }
    sync_->dump_finished();
    spdlog::info("sync: resync for a peer: {} connection(s) sent", dumped);
}

// Control thread: kernel route changes into the route table, published kRouteBatch after the first of a batch.
void Daemon::run_kernel_routes(bool readable) {
    if (!kernel_routes_) return;
    kernel_routes_->check_dump(KernelRouteMirror::Clock::now());
    if (readable && kernel_routes_->read(reloader_->routes(), config(), port_identities_) && !routes_pending_since_)
        routes_pending_since_ = std::chrono::steady_clock::now();
    if (!routes_pending_since_ || std::chrono::steady_clock::now() - *routes_pending_since_ < kRouteBatch) return;
    routes_pending_since_.reset();
    reloader_->republish_routes();
    apply_neighbour_targets(config());  // kernel next hops come and go
}

void Daemon::publish_route_stats() {
    RoutesRecord record;
    const auto& counts = reloader_->routes().counts();
    for (std::size_t s = 0; s < counts.size(); ++s) record.by_source[s] = counts[s];
    record.kernel_mirrored = kernel_routes_ != nullptr;
    record.kernel_left_out = kernel_routes_ ? kernel_routes_->left_out() : 0;
    record.kernel_resyncs = kernel_routes_ ? kernel_routes_->resyncs() : 0;
    route_stats_.write(record);
}

// Reloads the config file: parse, validate, build, publish; or keep everything as it is and say why.
void Daemon::reload(const char* trigger) {
    systemd_.reloading();
    reloader_->apply(trigger);
    systemd_.reloaded("forwarding; config " + config().hash);
}

// reload --dry-run: builds the candidate's tables and re-judges every connection, which can take as long as a
// reload; systemd's watchdog waits as it does for one.
std::vector<std::string> Daemon::dry_run(const std::string& path) {
    systemd_.checking();
    auto lines = reloader_->dry_run(path);
    systemd_.checked("forwarding; config " + config().hash);
    return lines;
}

// After a reload applied a new config: what else follows it.
void Daemon::follow_config() {
    if (kernel_routes_) {  // the ports' addresses decide the kernel next hops' ports
        kernel_routes_->rewrite(reloader_->routes(), config(), port_identities_);
        reloader_->republish_routes();
    }
    apply_neighbour_targets(config());
    publish_steering();
    if (bgp_) bgp_->set_config(config().bgp);  // where BIRD is cannot change without a restart
    update_announcements();
}

// Telemetry thread: runs job on the control thread and returns its lines. The job owns what it reads but the
// daemon (a requester that gives up leaves it queued).
// Table builds (reload, dry run) wait as long as systemd is told to wait for them; other jobs, the mailbox's
// default.
std::vector<std::string> Daemon::on_control_thread(std::function<std::vector<std::string>()> job,
                                                   std::chrono::milliseconds timeout) {
    const auto began = std::chrono::steady_clock::now();
    auto lines = mailbox_.call(std::move(job), timeout);
    if (lines) return std::move(*lines);
    const auto waited = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - began);
    return {fmt::format("error: sluice is stopping, or its control thread did not answer within {} s", waited.count())};
}

std::vector<std::string> Daemon::explain_on_control_thread(const std::string& text) {
    ExplainQuery query;
    std::string error;
    if (!parse_explain_query(text, query, error)) return {"error: " + error};
    return on_control_thread(
        [this, query] { return explain(dataplane_->snapshot(), port_identities_, dataplane_->worker_count(), query); });
}

// sluicectl flows [ADDRESS] [port N] [PROTO]: the tracked connections that match, walked by their workers.
std::vector<std::string> Daemon::list_flows(const std::string& text) {
    constexpr std::size_t kShown = 100;  // DPDK telemetry answers are limited to 16 KB
    FlowFilter filter;
    std::string error;
    if (!parse_flow_filter(text, filter, error)) return {"error: " + error};
    const auto walks = dataplane_->walk_flows(filter, kShown, nullptr, std::chrono::seconds(30));
    if (walks.empty()) return {"error: the workers did not finish the walk in time (or none tracks connections)"};
    return flow_lines(walks, kShown, rte_rdtsc(), rte_get_tsc_hz(),
                      [this](uint32_t id) { return reloader_->backend_name(id); });
}

// Keeps each XDP port's steering equal to the config and to the kernel addresses its interface has now (an
// operator may add a management address at any time), and publishes the program's counters.
void Daemon::publish_steering() {
    XdpRecord record;
    for (std::size_t i = 0; i < steering_.size(); ++i) {
        XdpSteering& steering = *steering_[i];
        const PortSpec* spec = config().find_port(steering.port());
        const XdpSteeringMode mode = spec ? spec->xdp_steering : XdpSteeringMode::all;
        std::vector<SteeringEntry> entries =
            steering_entries(config(), steering.port(), kernel_addresses(steering.iface()));
        if (i >= steering_published_.size()) steering_published_.resize(i + 1);
        if (entries != steering_published_[i]) {
            if (steering.publish(mode, entries))
                spdlog::info("port '{}': XDP steering on {} ({}): {} prefixes", steering.port(), steering.iface(),
                             mode == XdpSteeringMode::services ? "services" : "all", entries.size());
            steering_published_[i] = std::move(entries);
        }
        const SteeringCounters c = steering.counters();
        record.ports.push_back({steering.port(), steering.iface(),
                                mode == XdpSteeringMode::services ? "services" : "all", c.to_sluice, c.to_kernel,
                                c.other, steering_published_[i].size()});
    }
    xdp_stats_.write(std::move(record));
}

// Every control-loop turn: link changes, the published records, ARP/ND, BGP, the decision log and the watchdog.
void Daemon::loop_turn() {
    for (std::size_t i = 0; i < ports_.size(); ++i) {
        rte_eth_link link{};
        if (rte_eth_link_get_nowait(ports_[i]->id(), &link) != 0) continue;
        if (link.link_status != link_up_[i]) {
            link_up_[i] = link.link_status;
            ports_[i]->log_link();
        }
    }
    stats_->refresh();
    publish_route_stats();
    publish_steering();
    run_neighbours();
    update_announcements();
    stats_->write_decision_log();
    serve_resync();
    std::vector<uint64_t> heartbeats;
    dataplane_->for_each_lcore(
        [&](const LcoreContext& ctx) { heartbeats.push_back(counter_read(ctx.counters.polls)); });
    for (std::size_t stalled : systemd_.tick(heartbeats))
        spdlog::error("lcore {} is stalled (its poll counter stopped); withholding the systemd watchdog ping",
                      config().lcores[stalled].id);
}

// Waits for signals, reload requests and config file changes; logs link changes.
void Daemon::control_loop() {
    sigset_t signals;
    sigemptyset(&signals);
    for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&signals, s);
    UniqueFd signal_fd(signalfd(-1, &signals, SFD_NONBLOCK | SFD_CLOEXEC));
    // Watch the directory: editors that write a new file and rename it over the old one replace the inode.
    const std::filesystem::path path = std::filesystem::absolute(config().path);
    const std::string file_name = path.filename();
    UniqueFd inotify(inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
    if (inotify_add_watch(inotify.get(), path.parent_path().c_str(), IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE) < 0)
        spdlog::warn("cannot watch {} for changes ({}); reload with SIGHUP", path.parent_path().string(),
                     std::strerror(errno));

    link_up_.assign(ports_.size(), -1);
    bool file_changed = false;
    auto file_changed_at = std::chrono::steady_clock::now();
    for (;;) {
        loop_turn();
        pollfd fds[] = {{signal_fd.get(), POLLIN, 0},
                        {inotify.get(), POLLIN, 0},
                        {mailbox_.fd(), POLLIN, 0},
                        {health_transitions_.fd(), POLLIN, 0},
                        {kernel_routes_ ? kernel_routes_->fd() : -1, POLLIN, 0}};
        int timeout_ms = file_changed ? static_cast<int>(kReloadDebounce.count()) : 250;
        if (routes_pending_since_) timeout_ms = std::min<int>(timeout_ms, kRouteBatch.count());
        if (drain_ends_) {
            const auto left =
                std::chrono::duration_cast<std::chrono::milliseconds>(*drain_ends_ - std::chrono::steady_clock::now());
            timeout_ms = static_cast<int>(std::clamp<int64_t>(left.count(), 0, timeout_ms));
        }
        poll(fds, 5, timeout_ms);
        if (fds[3].revents & POLLIN) reloader_->apply_health_transitions();
        run_kernel_routes(fds[4].revents & POLLIN);

        signalfd_siginfo info;
        while (read(signal_fd.get(), &info, sizeof info) == sizeof info) {
            const char* name = info.ssi_signo == SIGINT ? "SIGINT" : info.ssi_signo == SIGTERM ? "SIGTERM" : "SIGHUP";
            if (info.ssi_signo == SIGHUP) {
                reload("SIGHUP");
            } else if (info.ssi_signo == SIGTERM && bgp_ && config().bgp.drain_on_sigterm && !drain_ends_) {
                begin_drain("SIGTERM");
            } else {
                if (drain_ends_) spdlog::info("{} during the drain: stopping at once", name);
                else spdlog::info("{}: stopping", name);
                return;
            }
        }
        alignas(inotify_event) char events[4096];
        ssize_t n;
        while ((n = read(inotify.get(), events, sizeof events)) > 0) {
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
            spdlog::info("drain over ({} s): stopping", config().bgp.drain_seconds);
            return;
        }
    }
}

// Control thread, every loop turn and after a reload: which VIPs sluice can serve now (every port's link up,
// min_healthy usable backends, not draining), handed to BIRD when that changed. See docs/architecture.md,
// "Announcing VIPs over BGP".
void Daemon::update_announcements(bool force) {
    if (!bgp_) return;
    // A started instance takes traffic only once it holds its peers' connections (or gave up waiting).
    const bool resyncing = sync_ && sync_->resync_pending();
    if (resyncing != resync_gate_logged_) {
        resync_gate_logged_ = resyncing;
        if (resyncing) spdlog::info("bgp: no VIP announced until the sync peers' resync is done");
        else spdlog::info("bgp: sync resync over: VIPs may be announced");
    }
    const bool links_up =
        std::all_of(link_up_.begin(), link_up_.end(), [](int up) { return up == 1; }) && !link_up_.empty();
    std::vector<ServiceHealth> services;
    for (const ServiceConfig& service : config().services) {
        ServiceHealth h{service.name, to_string(service.vip, service.family), service.family, 0, service.min_healthy};
        for (const BackendConfig& backend : service.backends) {
            if (backend.weight == 0) continue;
            // A checked backend counts once its first check has passed: the data plane takes a backend as up
            // from the start, but announcing a VIP before anything was checked would flap it at every start.
            const auto id = reloader_->backend_id(service.name, backend);
            const auto status = id && health_ ? health_->status(*id) : std::nullopt;
            if (!status || (status->up && status->checks > status->failures)) ++h.usable;
        }
        // A nat service's replies come back to the pool: its addresses go where the VIP goes (an ECMP fleet
        // shares them, each instance taking the replies the routers send it).
        if (service.mode == LbMode::nat)
            for (std::size_t a = 0; a < config().load_balancer.nat_pool.size(); ++a)
                if (config().load_balancer.nat_pool_families[a] == service.family)
                    services.push_back(ServiceHealth{
                        service.name, to_string(config().load_balancer.nat_pool[a].address, service.family),
                        service.family, h.usable, h.min_healthy});
        services.push_back(std::move(h));
    }
    bgp_->update(wanted_vips(services, links_up, drain_ends_.has_value() || resyncing),
                 std::chrono::steady_clock::now(), force);
    publish_bgp();
}

void Daemon::publish_bgp() {
    BgpRecord record = bgp_ ? bgp_->record() : BgpRecord{};
    record.draining = drain_ends_.has_value();
    record.drain_ends_unix = drain_ends_unix_;
    bgp_stats_.write(std::move(record));
}

// sluicectl drain, or SIGTERM with bgp drain_on_sigterm: withdraw every VIP now, keep forwarding for
// drain_seconds while the routers move new flows to the other instances and established connections finish,
// then stop. Control thread.
std::vector<std::string> Daemon::begin_drain(const char* trigger) {
    if (!bgp_) return {"error: nothing to drain: no bgp section in the config (stop sluice with SIGTERM)"};
    const uint32_t seconds = config().bgp.drain_seconds;
    if (!drain_ends_) {
        drain_ends_ = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
        drain_ends_unix_ = unix_now() + seconds;
        spdlog::info("{}: draining: withdrawing every VIP, forwarding {} s more, then stopping "
                     "(SIGTERM again stops at once)",
                     trigger, seconds);
        systemd_.stopping();
        update_announcements(true);
    }
    const auto left =
        std::chrono::duration_cast<std::chrono::seconds>(*drain_ends_ - std::chrono::steady_clock::now()).count();
    std::vector<std::string> lines;
    lines.push_back(bgp_->in_sync() ? "every VIP withdrawn (BIRD reconfigured)"
                                    : "error: BIRD has not taken the withdrawal yet (retrying): " +
                                          bgp_->record().last_error.substr(0, 80));
    lines.push_back(fmt::format("draining: forwarding continues; sluice stops in {} s", std::max<int64_t>(left, 0)));
    return lines;
}

int run_daemon(Config config, const std::string& program, const std::vector<std::string>& extra_eal_args) {
    Daemon daemon(std::move(config), program, extra_eal_args);
    return daemon.run();
}

}  // namespace sluice

// The daemon behind run_daemon (daemon.hpp): what it holds, and its steps by file. daemon_start.cpp: the staged
// start (EAL -> mempools -> ports -> tables -> lcores -> control) and the staged stop that unwinds it.
// daemon.cpp: its life between them (the control loop, reloads, kernel routes, BGP and the drain, the operator's
// commands). daemon_neighbours.cpp: ARP/ND. Internal to app/sluice. Control thread only, unless a function says
// otherwise.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <rte_mempool.h>

#include "config/config.hpp"
#include "control/bird_announcer.hpp"
#include "control/control_mailbox.hpp"
#include "control/live_dataplane.hpp"
#include "control/reloader.hpp"
#include "control/snapshot_builder.hpp"
#include "control/stats_publisher.hpp"
#include "control/status.hpp"
#include "control/systemd_notifier.hpp"
#include "dpdk/eal.hpp"
#include "dpdk/port.hpp"
#include "health/health_checker.hpp"
#include "health/health_transitions.hpp"
#include "metrics/prometheus_exporter.hpp"
#include "pipeline/dataplane.hpp"
#include "routing/kernel_routes.hpp"
#include "routing/neighbours.hpp"
#include "sync/sync_channel.hpp"
#include "xdp/steering.hpp"

namespace sluice {

class Daemon {
public:
    Daemon(Config config, std::string program, std::vector<std::string> extra_eal_args)
        : initial_config_(std::move(config)), program_(std::move(program)), extra_eal_args_(std::move(extra_eal_args)) {
    }

    // Start, the control loop, stop; returns the process exit code.
    int run();

private:
    // The running config: the reloader's once it exists.
    const Config& config() const { return reloader_ ? reloader_->config() : initial_config_; }

    // daemon_start.cpp
    void start();
    // The pool worker 0 builds ARP/ND solicitations from: the first port's.
    int solicitation_socket() const { return ports_.front()->socket(); }
    void start_dataplane(uint16_t workers);
    void start_sync();
    void read_first_kernel_dump();
    void attach_readers();
    int stop();

    // daemon.cpp
    void serve_resync();
    void run_kernel_routes(bool readable);
    void publish_route_stats();
    void reload(const char* trigger);
    std::vector<std::string> dry_run(const std::string& path);
    void follow_config();
    std::vector<std::string> on_control_thread(std::function<std::vector<std::string>()> job,
                                               std::chrono::milliseconds timeout = ControlMailbox::kDefaultTimeout);
    std::vector<std::string> explain_on_control_thread(const std::string& text);
    std::vector<std::string> list_flows(const std::string& text);
    void publish_steering();
    void loop_turn();
    void control_loop();
    void update_announcements(bool force = false);
    void publish_bgp();
    std::vector<std::string> begin_drain(const char* trigger);

    // daemon_neighbours.cpp
    void apply_neighbour_targets(const Config& config);
    void run_neighbours();
    void publish_neighbour_stats();
    void glean(const NeighbourEvent& e);
    ConnectedHosts connected_hosts();
    NeighbourLookup neighbour_lookup();

    Config initial_config_;  // until the reloader takes it over (moved from then)
    std::string program_;
    std::vector<std::string> extra_eal_args_;
    std::unique_ptr<EalGuard> eal_;
    bool pdump_ = false;
    std::vector<std::unique_ptr<Port>> ports_;
    std::vector<PortIdentity> port_identities_;
    std::map<int, rte_mempool*> pools_;
    std::unique_ptr<Dataplane> dataplane_;
    std::unique_ptr<RunningDataplane> running_dataplane_;
    std::unique_ptr<Reloader> reloader_;
    std::unique_ptr<StatsPublisher> stats_;
    std::unique_ptr<SyncChannel> sync_;                   // sync section on
    std::atomic<bool> resync_wanted_{false};              // a peer asked for a full resync (set on the sync thread)
    bool resync_gate_logged_ = false;                     // update_announcements said VIPs wait for the resync
    std::vector<std::unique_ptr<XdpSteering>> steering_;  // net_af_xdp ports that run sluice's program
    std::vector<std::vector<SteeringEntry>> steering_published_;  // what each holds now
    XdpStats xdp_stats_;
    std::unique_ptr<BirdAnnouncer> bgp_;  // bgp section configured
    BgpStats bgp_stats_;
    NeighbourStats neighbour_stats_;
    NeighboursRecord published_neighbours_;  // what neighbour_stats_ holds, kept to write it on a change only
    std::vector<int> link_up_;               // per port: -1 unknown, 0 down, 1 up (control loop)
    RouteStats route_stats_;
    std::unique_ptr<KernelRouteMirror> kernel_routes_;                           // routing.kernel_table configured
    std::optional<std::chrono::steady_clock::time_point> routes_pending_since_;  // kernel changes not published
    std::optional<std::chrono::steady_clock::time_point> drain_ends_;
    double drain_ends_unix_ = 0;
    HealthTransitionQueue health_transitions_;  // from the checker's thread
    std::unique_ptr<HealthChecker> health_;
    NeighbourTable neighbours_;
    StatusView view_;
    ControlMailbox mailbox_;
    SystemdNotifier systemd_;
    std::unique_ptr<PrometheusExporter> exporter_;
};

}  // namespace sluice

// The daemon's staged start (EAL -> mempools -> ports -> tables -> lcores -> control): each stage throws
// StartupError, and the staged stop unwinds whatever was built, in reverse. Control thread only.
#include <poll.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <rte_eal.h>
#include <rte_lcore.h>
#include <rte_pdump.h>

#include <spdlog/spdlog.h>

#include "common/drop_reason.hpp"
#include "control/dataplane_plan.hpp"
#include "control/telemetry.hpp"
#include "daemon.hpp"
#include "daemon_impl.hpp"
#include "dpdk/mempool.hpp"
#include "dpdk/startup_error.hpp"
#include "packet/packet_meta.hpp"
#include "pipeline/counters.hpp"

namespace sluice {
namespace {

constexpr std::size_t kNeighbourLinesShown = 200;  // sluicectl neighbours: what fits a 16 KiB telemetry reply
constexpr auto kFirstDumpWait = std::chrono::seconds(10);

// Refuses lcores the EAL did not enable and the main lcore (the control thread's).
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
        d.rx_descriptors +=
            uint64_t{port->spec().rx_queues} * port->spec().rx_descriptors + port->mbufs_kept_by_driver();
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
        const std::string backing =
            rte_eal_has_hugepages() ? fmt::format("{} hugepages", plan.hugepages_2m) : std::string("no hugepages");
        spdlog::info("mempool on socket {}: {} mbufs of {} bytes data room, cache {}, about {} MiB ({})", socket,
                     plan.mbufs, plan.data_room, plan.cache_size, plan.bytes >> 20, backing);
        try {
            pools[socket] = create_packet_pool("sluice_pool_s" + std::to_string(socket), plan, socket);
        } catch (...) {
            for (auto& [s, pool] : pools) rte_mempool_free(pool);
            throw;
        }
    }
    return pools;
}

// Each port's packets and bytes, and every drop reason that counted, to the log.
void log_totals(const CounterTotals& totals, const std::vector<std::unique_ptr<Port>>& ports) {
    for (const auto& port : ports) {
        const PortCounters& c = totals.ports[port->id()];
        spdlog::info("port '{}': rx {} packets {} bytes, tx {} packets {} bytes", port->name(), c.rx_packets,
                     c.rx_bytes, c.tx_packets, c.tx_bytes);
    }
    for (std::size_t r = 1; r < kDropReasonCount; ++r)
        if (totals.drops[r]) spdlog::info("dropped {}: {}", kDropReasonInfo[r].name, totals.drops[r]);
}

}  // namespace

// Staged start; each stage throws StartupError and stop() unwinds whatever was built.
void Daemon::start() {
    const Config& config = initial_config_;
    const std::vector<std::string> eal_args =
        build_eal_args(program_, config.eal, prepare_xdp_ports(config.ports), extra_eal_args_);
    eal_ = std::make_unique<EalGuard>(eal_args);
    check_lcores(config);
    if (!register_packet_meta()) throw StartupError("cannot register the packet metadata mbuf field");
    register_telemetry_commands();
    // Lets dpdk-dumpcap / dpdk-pdump (secondary processes) capture on sluice's ports. rte_pdump_init succeeds
    // even where no secondary can attach, so the operator hears it from the arguments.
    if (const std::string blocker = secondary_process_blocker(eal_args); !blocker.empty())
        spdlog::warn("packet capture: dpdk-dumpcap cannot attach ({})", blocker);
    else if (rte_pdump_init() != 0) spdlog::warn("packet capture (rte_pdump) unavailable: {}", rte_strerror(rte_errno));
    else pdump_ = true;
    for (const PortSpec& spec : config.ports) ports_.push_back(std::make_unique<Port>(spec));
    uint16_t workers = 0;
    for (const LcoreConfig& l : config.lcores) workers += l.worker;
    pools_ = create_pools(config, ports_, workers);
    std::vector<int> port_sockets;
    for (const auto& port : ports_) port_sockets.push_back(port->socket());
    const std::vector<bool> fast_free = plan_tx_fast_free(port_sockets, solicitation_socket());
    for (std::size_t i = 0; i < ports_.size(); ++i)
        ports_[i]->start(workers, pools_.at(ports_[i]->socket()), fast_free[i]);
    for (const PortSpec& spec : config.ports) {
        const std::string iface = af_xdp_interface(spec.device);
        if (!iface.empty() && spec.xdp_steering != XdpSteeringMode::off)
            steering_.push_back(std::make_unique<XdpSteering>(spec.name, iface));
    }
    publish_steering();
    for (const auto& port : ports_) port_identities_.push_back({port->name(), port->id(), port->mac()});
    health_ = std::make_unique<HealthChecker>([this](uint32_t id, bool up, const std::string& reason) {
        health_transitions_.push({id, up, reason});
    });
    start_dataplane(workers);
    attach_readers();
    spdlog::info("ready: {} port(s), {} lcore(s), {} worker(s), config {} ({})", ports_.size(),
                 this->config().lcores.size(), workers, this->config().path, this->config().hash);
    systemd_.ready("forwarding; config " + this->config().hash);
    if (systemd_.watchdog_enabled()) spdlog::info("systemd watchdog: pings while every lcore's heartbeat advances");
}

// The reloader takes the config over; the first snapshot goes to the lcores.
void Daemon::start_dataplane(uint16_t workers) {
    apply_neighbour_targets(initial_config_);
    const std::size_t lcore_count = initial_config_.lcores.size();
    // Moved, not copied: a config holds every rule, and the reloader's is the one that runs from here on.
    reloader_ =
        std::make_unique<Reloader>(std::move(initial_config_), ReloaderSetup{.ports = port_identities_,
                                                                             .lcore_count = lcore_count,
                                                                             .socket = ports_.front()->socket(),
                                                                             .health = health_.get(),
                                                                             .transitions = &health_transitions_,
                                                                             .neighbours = neighbour_lookup(),
                                                                             .hosts = connected_hosts(),
                                                                             .applied = [this] { follow_config(); }});
    if (const uint32_t table = config().routing.kernel_table) {
        reloader_->routes().keep_spare_ready();
        try {
            kernel_routes_ = std::make_unique<KernelRouteMirror>(
                table, static_cast<int>(config().routing.kernel_socket_buffer_kib) << 10);
        } catch (const std::exception& e) {
            throw StartupError(std::string("routing: ") + e.what());
        }
        read_first_kernel_dump();
        apply_neighbour_targets(config());
    }
    std::unique_ptr<Snapshot> first;
    try {
        first = reloader_->build_first(workers);
    } catch (const std::exception& e) {
        throw StartupError(std::string("tables: ") + e.what());
    }
    log_tables(*first);
    spdlog::info("tables built; memory: {}", memory_report(ports_.front()->socket()));
    DataplaneSpec spec = dataplane_spec(config(), port_identities_);
    spec.solicitation_pool = pools_.at(solicitation_socket());
    dataplane_ = std::make_unique<Dataplane>(spec, std::move(first));
    running_dataplane_ = std::make_unique<RunningDataplane>(*dataplane_);
    reloader_->attach(*running_dataplane_);
    dataplane_->launch();
    reloader_->apply_health_targets();
    std::vector<const Port*> devices;
    for (const auto& port : ports_) devices.push_back(port.get());
    stats_ = std::make_unique<StatsPublisher>(*dataplane_, *reloader_, health_.get(), port_identities_, devices);
    start_sync();
}

// The sync channel (lib/sync): once the workers run, since the resync it asks peers for fills their tables.
void Daemon::start_sync() {
    const SyncConfig& sync = config().sync;
    if (!sync.enabled || dataplane_->sync_event_rings().empty()) return;
    const auto address = [](const SyncEndpoint& e) { return SyncAddress{e.address, e.family, e.port, e.text}; };
    SyncChannelSettings settings{address(sync.listen), {}, sync.key, 0};
    for (const SyncEndpoint& peer : sync.peers) settings.peers.push_back(address(peer));
    for (unsigned char c : sync.listen.text) settings.instance = settings.instance * 31 + c;
    try {
        sync_ = std::make_unique<SyncChannel>(std::move(settings), dataplane_->sync_event_rings(),
                                              dataplane_->sync_apply_rings(),
                                              [this] { resync_wanted_.store(true, std::memory_order_relaxed); });
    } catch (const std::exception& e) {
        throw StartupError(e.what());
    }
    sync_->start();
    spdlog::info("sync: listening on {}, {} peer(s), epoch {}", sync.listen.text, sync.peers.size(), sync_->epoch());
}

// Start: the kernel table as it is, in the first snapshot (its routes wait in the writer for build_first).
void Daemon::read_first_kernel_dump() {
    const auto deadline = std::chrono::steady_clock::now() + kFirstDumpWait;
    while (kernel_routes_->dumping() && std::chrono::steady_clock::now() < deadline) {
        pollfd fd{kernel_routes_->fd(), POLLIN, 0};
        poll(&fd, 1, 100);
        kernel_routes_->read(reloader_->routes(), config(), port_identities_);
    }
    if (kernel_routes_->dumping())
        spdlog::warn("routing: kernel table {} not read whole in {} s; its routes follow as they come",
                     config().routing.kernel_table, kFirstDumpWait.count());
}

// Telemetry, BGP and metrics: what reads the running data plane from other threads.
void Daemon::attach_readers() {
    view_.dataplane = dataplane_.get();
    for (const auto& port : ports_) view_.ports.push_back({port->name(), port->id(), port->spec().rx_queues});
    for (const auto& [socket, pool] : pools_) view_.pools.push_back({socket, pool});
    view_.reload = &reloader_->status();
    view_.rules = &stats_->rules();
    view_.backends = &stats_->backends();
    view_.xdp = &xdp_stats_;
    view_.xsk = &stats_->xsk();
    view_.bgp = &bgp_stats_;
    view_.neighbours = &neighbour_stats_;
    view_.routes = &route_stats_;
    publish_route_stats();
    view_.sync = sync_.get();
    if (config().bgp.enabled) {
        // The first control-loop turn writes the include file (empty or not) and has BIRD read it, so VIPs a
        // crashed predecessor left in the file are withdrawn unless they are wanted again.
        bgp_ = std::make_unique<BirdAnnouncer>(config().bgp);
        spdlog::info("bgp: announcing VIPs through BIRD at {} (routes in {})", config().bgp.bird_socket,
                     config().bgp.include_file);
    }
    publish_bgp();
    attach_telemetry(
        &view_,
        [this] {
            mailbox_.run([this] { reload("telemetry"); }, SystemdNotifier::kReloadWatchdog);
            return reloader_->status().read();
        },
        LineCommands{
            .explain = [this](const std::string& text) { return explain_on_control_thread(text); },
            .flows =
                [this](const std::string& text) {
                    return on_control_thread([this, text] { return list_flows(text); });
                },
            .dry_run =
                [this](const std::string& text) {
                    return on_control_thread([this, text] { return dry_run(text); }, SystemdNotifier::kReloadWatchdog);
                },
            .drain =
                [this](const std::string&) {
                    return on_control_thread([this] { return begin_drain("sluicectl drain"); });
                },
            .routes =
                [this](const std::string&) {
                    return on_control_thread(
                        [this] { return describe_routes(dataplane_->snapshot(), port_identities_, 100); });
                },
            .neighbours =
                [this](const std::string&) {
                    return on_control_thread([this] {
                        return describe_neighbours(
                            neighbours_.listing(NeighbourTable::Clock::now()),
                            [this](uint16_t interface) { return interface_name(port_identities_, interface); },
                            kNeighbourLinesShown);
                    });
                },
        });
    const std::string& listen = config().metrics.listen;
    if (!listen.empty()) {
        try {
            exporter_ = std::make_unique<PrometheusExporter>(listen, view_, SLUICE_VERSION);
        } catch (const std::exception& e) {
            throw StartupError("metrics: cannot listen on " + listen + ": " + e.what());
        }
        spdlog::info("metrics on http://{}/metrics", listen);
    }
}

// Staged stop, in reverse: readers (telemetry, metrics), lcores (RX first, then rings drained and TX flushed),
// ports, pools. Returns kExitLeakedMbufs when a pool is not full again.
int Daemon::stop() {
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
    sync_.reset();  // its thread uses the workers' sync rings: stopped before they go
    if (dataplane_) {
        dataplane_->stop();
        log_totals(dataplane_->totals(), ports_);
        dataplane_.reset();
    }
    stats_.reset();
    reloader_.reset();                        // its route table writer holds rte_fib copies: freed before the EAL goes
    std::map<int, uint32_t> kept_by_drivers;  // by socket: see Port::mbufs_kept_by_driver()
    for (const auto& port : ports_) kept_by_drivers[port->socket()] += port->mbufs_held_by_driver();
    ports_.clear();  // stops and closes every device; PMDs hand their descriptors' mbufs back
    for (auto& [socket, pool] : pools_) {
        const uint32_t in_use = mbufs_in_use(pool);
        const uint32_t kept = kept_by_drivers[socket];
        if (in_use != kept) {
            spdlog::error("mempool on socket {}: {} mbuf(s) leaked of {}{}", socket,
                          static_cast<int64_t>(in_use) - static_cast<int64_t>(kept), pool->size,
                          kept ? fmt::format(" ({} more are net_af_xdp's fill rings, which it never returns)", kept)
                               : "");
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

}  // namespace sluice

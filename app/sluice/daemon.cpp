#include "daemon.hpp"

#include <csignal>
#include <map>
#include <memory>

#include <rte_ethdev.h>
#include <rte_lcore.h>

#include <spdlog/spdlog.h>

#include "control/telemetry.hpp"
#include "dpdk/eal.hpp"
#include "dpdk/mempool.hpp"
#include "dpdk/port.hpp"
#include "dpdk/startup_error.hpp"
#include "packet/packet_meta.hpp"
#include "pipeline/dataplane.hpp"

namespace sluice {
namespace {

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
// lcore (a conservative bound when lcores span sockets).
std::map<int, rte_mempool*> create_pools(const Config& config, const std::vector<std::unique_ptr<Port>>& ports,
                                         uint16_t workers) {
    std::map<int, MempoolDemand> demand;
    for (const auto& port : ports) {
        MempoolDemand& d = demand[port->socket()];
        d.rx_descriptors += uint64_t{port->spec().rx_queues} * port->spec().rx_descriptors;
        d.tx_descriptors += uint64_t{workers} * port->spec().tx_descriptors;
        d.ports += 1;
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
        pools[socket] = create_packet_pool("sluice_pool_s" + std::to_string(socket), plan, socket);
    }
    return pools;
}

Snapshot build_snapshot(const Config& config, const std::vector<std::unique_ptr<Port>>& ports) {
    const auto port_named = [&](const std::string& name) -> const Port& {
        for (const auto& p : ports)
            if (p->name() == name) return *p;
        throw StartupError("no port named " + name);  // the validator makes this unreachable
    };
    Snapshot snapshot;
    for (const ForwardConfig& f : config.forward) {
        const Port& in = port_named(f.from);
        const Port& out = port_named(f.to);
        snapshot.forward_by_in_port[in.id()] =
            ForwardEntry{.dst_mac = f.next_hop_mac, .src_mac = out.mac(), .out_port = out.id(), .valid = true};
    }
    return snapshot;
}

DataplaneSpec build_dataplane_spec(const Config& config, const std::vector<std::unique_ptr<Port>>& ports) {
    DataplaneSpec spec;
    spec.ring_size = config.dataplane.ring_size;
    spec.idle_sleep_us = config.dataplane.idle_sleep_us;
    for (const auto& port : ports) spec.tx_port_ids.push_back(port->id());
    const auto queues = assign_rx_queues(config);
    for (std::size_t i = 0; i < config.lcores.size(); ++i) {
        const LcoreConfig& l = config.lcores[i];
        LcorePlan plan{.lcore_id = l.id, .rx = l.rx, .worker = l.worker, .rx_queues = {}};
        for (const auto& [port_index, queue] : queues[i]) plan.rx_queues.push_back({ports[port_index]->id(), queue});
        std::string polled;
        for (const auto& q : plan.rx_queues) polled += " " + std::to_string(q.port_id) + ":" + std::to_string(q.queue_id);
        spdlog::info("lcore {} on socket {}: {}{}{}", l.id, rte_lcore_to_socket_id(l.id), l.rx ? "rx " : "",
                     l.worker ? "worker " : "", polled.empty() ? "" : "polls" + polled);
        spec.lcores.push_back(std::move(plan));
    }
    return spec;
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

// Waits for SIGINT/SIGTERM; logs link changes meanwhile.
void control_loop(const std::vector<std::unique_ptr<Port>>& ports) {
    sigset_t signals;
    sigemptyset(&signals);
    for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&signals, s);
    std::vector<int> link_up(ports.size(), -1);
    for (;;) {
        for (std::size_t i = 0; i < ports.size(); ++i) {
            rte_eth_link link{};
            if (rte_eth_link_get_nowait(ports[i]->id(), &link) != 0) continue;
            if (link.link_status != link_up[i]) {
                link_up[i] = link.link_status;
                ports[i]->log_link();
            }
        }
        const timespec timeout{0, 250'000'000};
        const int sig = sigtimedwait(&signals, nullptr, &timeout);
        if (sig == SIGINT || sig == SIGTERM) {
            spdlog::info("{}: stopping", sig == SIGINT ? "SIGINT" : "SIGTERM");
            return;
        }
        if (sig == SIGHUP) spdlog::warn("SIGHUP: live reload is not available yet; restart sluice to apply a new config");
    }
}

}  // namespace

int run_daemon(const Config& config, const std::string& program, const std::vector<std::string>& extra_eal_args) {
    std::unique_ptr<EalGuard> eal;
    std::vector<std::unique_ptr<Port>> ports;
    std::map<int, rte_mempool*> pools;
    std::unique_ptr<Snapshot> snapshot;
    std::unique_ptr<Dataplane> dataplane;
    TelemetryView view;
    int exit_code = kExitOk;
    try {
        eal = std::make_unique<EalGuard>(build_eal_args(program, config.eal, config.ports, extra_eal_args));
        check_lcores(config);
        if (!register_packet_meta()) throw StartupError("cannot register the packet metadata mbuf field");
        register_telemetry_commands();
        for (const PortSpec& spec : config.ports) ports.push_back(std::make_unique<Port>(spec));
        uint16_t workers = 0;
        for (const LcoreConfig& l : config.lcores) workers += l.worker;
        pools = create_pools(config, ports, workers);
        for (auto& port : ports) port->start(workers, pools.at(port->socket()));
        snapshot = std::make_unique<Snapshot>(build_snapshot(config, ports));
        dataplane = std::make_unique<Dataplane>(build_dataplane_spec(config, ports), snapshot.get());
        dataplane->launch();
        view.dataplane = dataplane.get();
        for (const auto& port : ports) view.ports.push_back({port->name(), port->id()});
        for (const auto& [socket, pool] : pools) view.pools.push_back(pool);
        attach_telemetry_view(&view);
        spdlog::info("ready: {} port(s), {} lcore(s), {} worker(s)", ports.size(), config.lcores.size(), workers);
        control_loop(ports);
    } catch (const StartupError& e) {
        spdlog::error("{}", e.what());
        exit_code = kExitStartupFailed;
    }

    // Staged stop, in reverse: telemetry, lcores (RX first, then rings drained and TX flushed), ports, pools.
    attach_telemetry_view(nullptr);
    if (dataplane) {
        dataplane->stop();
        log_totals(dataplane->totals(), ports);
        dataplane.reset();
    }
    ports.clear();  // stops and closes every device; PMDs hand their descriptors' mbufs back
    for (auto& [socket, pool] : pools) {
        const uint32_t leaked = mbufs_in_use(pool);
        if (leaked) {
            spdlog::error("mempool on socket {}: {} mbuf(s) leaked of {}", socket, leaked, pool->size);
            exit_code = kExitLeakedMbufs;
        } else {
            spdlog::info("mempool on socket {}: all {} mbufs returned", socket, pool->size);
        }
        rte_mempool_free(pool);
    }
    eal.reset();
    return exit_code;
}

}  // namespace sluice

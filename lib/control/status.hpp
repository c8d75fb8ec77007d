// What the daemon shows to the outside (telemetry commands, Prometheus): the running data plane, its ports and
// pools, and the history of config reloads. Owned by the daemon. The data-plane pointers are set before any reader
// is attached and cleared only after readers are detached; ReloadStatus is written by the control thread and read
// by the telemetry and exporter threads under its mutex.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <rte_ethdev.h>
#include <rte_mempool.h>
#include <rte_ring.h>

#include "dpdk/mempool.hpp"
#include "dpdk/port.hpp"
#include "pipeline/dataplane.hpp"

namespace sluice {

struct StatusPort {
    std::string name;
    uint16_t port_id = 0;
    uint16_t rx_queues = 1;
};

struct ReloadRecord {
    uint64_t successes = 0;
    uint64_t failures = 0;
    double last_attempt_unix = 0;  // seconds; 0 before the first reload
    bool last_ok = true;
    std::string running_hash;  // Config::hash of what runs now
    std::string running_path;
    std::vector<std::string> last_errors;
};

class ReloadStatus {
public:
    ReloadRecord read() const {
        std::lock_guard lock(mutex_);
        return record_;
    }
    template <typename Update>
    void update(Update update) {
        std::lock_guard lock(mutex_);
        update(record_);
    }

private:
    mutable std::mutex mutex_;
    ReloadRecord record_;
};

// New connections decided by each rule (and the default), summed over lcores and over the snapshots a rule has
// lived in, by name. Refreshed by the control thread; read by telemetry and the exporter.
struct RuleHitsRecord {
    std::vector<std::pair<std::string, uint64_t>> rules;  // in rule order: new connections decided
    std::vector<std::pair<uint64_t, uint64_t>> traffic;   // in rule order: packets and bytes of allowed connections
    uint64_t default_hits = 0;
};

// One load-balancer backend as operators see it: configuration, health and the traffic of its connections summed
// over the workers.
struct BackendRecord {
    std::string service;
    std::string backend;  // address:port
    std::string mode;     // nat, dsr, tunnel
    uint32_t weight = 0;
    bool up = true;        // health (true without a health check)
    bool checked = false;  // has a health check
    uint64_t new_connections = 0;
    uint64_t active_connections = 0;
    uint64_t packets = 0;
    uint64_t bytes = 0;
    std::string last_error;  // the health check's most recent failure
    // nat only: ports its connections hold on each pool address (by pool index), in its backend address:port's
    // port space (shared with other services' backends on that address:port), and the ports of each such space.
    std::vector<uint64_t> nat_ports_in_use;
    uint64_t nat_ports_capacity = 0;
};

struct BackendsRecord {
    std::vector<BackendRecord> backends;  // in config order
    std::vector<std::string> nat_pool;    // the pool addresses, by pool index
};

// sluice's XDP program on one net_af_xdp port: where it sent frames (lib/xdp/steer.bpf.c).
struct XdpPortRecord {
    std::string port;
    std::string iface;
    std::string mode;  // all, services
    uint64_t to_sluice = 0;
    uint64_t to_kernel = 0;
    uint64_t other = 0;  // neither IP nor ARP: the kernel's
    std::size_t prefixes = 0;
};

struct XdpRecord {
    std::vector<XdpPortRecord> ports;
};

// The kernel's counters of each net_af_xdp port's AF_XDP sockets (Port::xsk_counters), read by the control thread.
struct XskPortRecord {
    std::string port;
    XskCounters counters;
};

struct XskRecord {
    std::vector<XskPortRecord> ports;
};

// A record written by the control thread and read by telemetry and the exporter, under a mutex.
template <typename Record>
class Published {
public:
    Record read() const {
        std::lock_guard lock(mutex_);
        return record_;
    }
    void write(Record record) {
        std::lock_guard lock(mutex_);
        record_ = std::move(record);
    }

private:
    mutable std::mutex mutex_;
    Record record_;
};

// Announcing VIPs over BGP through BIRD (lib/control/bird_announcer.hpp): what sluice wants announced, what BIRD
// accepted last, and the counts.
struct BgpVipRecord {
    std::string vip;
    bool wanted = false;     // sluice can serve it now
    bool announced = false;  // in the file BIRD last accepted
    uint64_t announcements = 0;
    uint64_t withdrawals = 0;
};

struct BgpRecord {
    bool enabled = false;   // a bgp section is configured
    bool draining = false;  // sluicectl drain or SIGTERM: every VIP withdrawn, stopping at drain_ends_unix
    double drain_ends_unix = 0;
    bool in_sync = false;       // BIRD runs with what sluice wants
    uint64_t reconfigures = 0;  // BIRD accepted a new file
    uint64_t reconfigure_failures = 0;
    std::string last_error;          // the most recent failure talking to BIRD (empty: none yet)
    std::vector<BgpVipRecord> vips;  // every VIP seen since start, sorted
};

// sluice's ARP/ND table (routing/neighbours.hpp) in numbers.
struct NeighboursRecord {
    uint64_t resolved = 0;
    uint64_t unresolved = 0;            // entries soliciting, next hops and gleaned hosts alike
    uint64_t next_hops_unresolved = 0;  // next hops and backends of the config among them
};

using RuleStats = Published<RuleHitsRecord>;
using NeighbourStats = Published<NeighboursRecord>;
using BackendStats = Published<BackendsRecord>;
using XdpStats = Published<XdpRecord>;
using XskStats = Published<XskRecord>;
using BgpStats = Published<BgpRecord>;

// The route table: routes by source (connected, host, static, kernel: RouteSource's order) as of the last commit, and
// the mirrored kernel table's routes left out (no next hop on a link of sluice's) and its resyncs.
struct RoutesRecord {
    std::array<uint64_t, 4> by_source{};
    bool kernel_mirrored = false;
    uint64_t kernel_left_out = 0;
    uint64_t kernel_resyncs = 0;  // the mirrored table read whole again (notifications lost, a dump cut short)
};
using RouteStats = Published<RoutesRecord>;

class SyncChannel;

struct StatusView {
    const Dataplane* dataplane = nullptr;
    std::vector<StatusPort> ports;
    std::vector<std::pair<int, const rte_mempool*>> pools;  // (socket, pool)
    const ReloadStatus* reload = nullptr;
    const RuleStats* rules = nullptr;
    const BackendStats* backends = nullptr;
    const XdpStats* xdp = nullptr;
    const XskStats* xsk = nullptr;
    const BgpStats* bgp = nullptr;
    const NeighbourStats* neighbours = nullptr;
    const RouteStats* routes = nullptr;
    const SyncChannel* sync = nullptr;  // sync section on
};

// Each port's device counters (rte_eth_stats), declared once: /sluice/stats "port/NAME/hw_<name>", Prometheus
// sluice_port_<name>_total{port}.
struct PortDeviceCounterInfo {
    std::string_view name;
    uint64_t rte_eth_stats::*member;
    std::string_view telemetry_key;  // after "port/NAME/"
    std::string_view family;
    std::string_view help;
};

#define SLUICE_PORT_DEVICE_COUNTERS(X)                                             \
    X(rx_missed, imissed, "Packets the device dropped for lack of RX descriptors") \
    X(rx_nombuf, rx_nombuf, "RX mbuf allocation failures")                         \
    X(rx_errors, ierrors, "Erroneous packets received by the device")              \
    X(tx_errors, oerrors, "Packets the device failed to transmit")

inline constexpr std::array kPortDeviceCounterInfo = {
#define SLUICE_PORT_DEVICE_COUNTER_INFO(name, member, help) \
    PortDeviceCounterInfo{#name, &rte_eth_stats::member, "hw_" #name, "sluice_port_" #name "_total", help},
    SLUICE_PORT_DEVICE_COUNTERS(SLUICE_PORT_DEVICE_COUNTER_INFO)
#undef SLUICE_PORT_DEVICE_COUNTER_INFO
};

// Each net_af_xdp port's AF_XDP socket counters, declared once in SLUICE_XSK_COUNTERS: /sluice/stats
// "port/NAME/xdp_<name>", Prometheus sluice_port_xdp_<name>_total{port}.
struct XskCounterInfo {
    std::string_view telemetry_key;  // after "port/NAME/"
    uint64_t XskCounters::*member;
    std::string_view family;
    std::string_view help;
};

inline constexpr std::array kXskCounterInfo = {
#define SLUICE_XSK_COUNTER_INFO(name, help) \
    XskCounterInfo{"xdp_" #name, &XskCounters::name, "sluice_port_xdp_" #name "_total", help},
    SLUICE_XSK_COUNTERS(SLUICE_XSK_COUNTER_INFO)
#undef SLUICE_XSK_COUNTER_INFO
};

// What the outside views (telemetry, Prometheus) read of the data plane at one moment, read once here so that both
// read it the same way. Any thread that may read the StatusView.
struct PortReading {
    std::string name;
    PortCounters counters;                // summed over the lcores
    std::optional<rte_eth_stats> device;  // absent when the driver would not answer
    std::optional<bool> link_up;
    // Packets each RX queue received, as the device counts them: how RSS (or the driver) spreads the traffic. Ports
    // with several RX queues only, at most the RTE_ETHDEV_QUEUE_STAT_CNTRS queues ethdev counts.
    std::vector<uint64_t> rx_queue_packets;
};

struct ConnTableReading {
    uint64_t capacity = 0;
    uint64_t ipv6_entries = 0;
    uint64_t ipv6_capacity = 0;
};

struct LcoreReading {
    unsigned lcore_id = 0;
    std::optional<uint16_t> worker;                             // the worker index, for lcores that run the pipeline
    std::array<uint64_t, kLcoreCounterInfo.size()> counters{};  // in kLcoreCounterInfo's order
    uint64_t table_full_drops = 0;                              // drops as ct_table_full
    std::optional<ConnTableReading> table;
    uint64_t ring_packets = 0;  // workers: their input ring's fill and size
    uint64_t ring_capacity = 0;
};

struct PoolReading {
    int socket = 0;
    uint64_t in_use = 0;
    uint64_t size = 0;
};

inline std::vector<PortReading> read_ports(const StatusView& view, const CounterTotals& totals) {
    std::vector<PortReading> ports;
    for (const StatusPort& p : view.ports) {
        PortReading& reading = ports.emplace_back(PortReading{p.name, totals.ports[p.port_id], {}, {}});
        rte_eth_stats device{};
        if (rte_eth_stats_get(p.port_id, &device) == 0) {
            reading.device = device;
            if (p.rx_queues > 1)
                reading.rx_queue_packets.assign(device.q_ipackets,
                                                device.q_ipackets +
                                                    std::min<uint16_t>(p.rx_queues, RTE_ETHDEV_QUEUE_STAT_CNTRS));
        }
        rte_eth_link link{};
        if (rte_eth_link_get_nowait(p.port_id, &link) == 0) reading.link_up = link.link_status != 0;
    }
    return ports;
}

inline std::vector<LcoreReading> read_lcores(const Dataplane& dataplane) {
    std::vector<LcoreReading> lcores;
    dataplane.for_each_lcore([&](const LcoreContext& ctx) {
        LcoreReading& reading = lcores.emplace_back();
        reading.lcore_id = ctx.lcore_id;
        for (std::size_t i = 0; i < kLcoreCounterInfo.size(); ++i)
            reading.counters[i] = counter_read(ctx.counters.*kLcoreCounterInfo[i].lcore);
        reading.table_full_drops =
            counter_read(ctx.counters.drops[static_cast<std::size_t>(DropReason::ct_table_full)]);
        if (!ctx.worker) return;
        reading.worker = ctx.worker_index;
        const rte_ring* ring = ctx.worker_rings[ctx.worker_index];
        reading.ring_packets = rte_ring_count(ring);
        reading.ring_capacity = rte_ring_get_capacity(ring);
        if (ctx.conn_table)
            reading.table = ConnTableReading{ctx.conn_table->capacity(), ctx.conn_table->ipv6_size(),
                                             ctx.conn_table->ipv6_capacity()};
    });
    return lcores;
}

inline std::vector<PoolReading> read_pools(const StatusView& view) {
    std::vector<PoolReading> pools;
    for (const auto& [socket, pool] : view.pools) pools.push_back(PoolReading{socket, mbufs_in_use(pool), pool->size});
    return pools;
}

}  // namespace sluice

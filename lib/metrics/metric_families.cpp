#include "metrics/metric_families.hpp"

#include <algorithm>
#include <deque>
#include <span>

#include <rte_cycles.h>

namespace sluice {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;
using Labels = std::vector<ClientMetric::Label>;

struct FamilyDecl {
    std::string_view name;
    MetricType type;
    std::string_view help;
};

// A family with one sample per item of a list (ports, workers, rules, backends, VIPs; or one record).
template <typename Item>
struct ItemFamily {
    FamilyDecl family;
    double (*value)(const Item&);
};

class Families {
public:
    MetricFamily& add(const FamilyDecl& decl) {
        out_.push_back(MetricFamily{std::string(decl.name), std::string(decl.help), decl.type, {}});
        return out_.back();
    }
    static void sample(MetricFamily& family, Labels labels, double value) {
        ClientMetric m;
        m.label = std::move(labels);
        if (family.type == MetricType::Counter) m.counter.value = value;
        else m.gauge.value = value;
        family.metric.push_back(std::move(m));
    }
    // One family per entry of the table, with a sample for each item.
    template <typename Item, std::size_t N, typename Items, typename LabelsOf>
    void add_per_item(const std::array<ItemFamily<Item>, N>& table, const Items& items, LabelsOf labels_of) {
        for (const ItemFamily<Item>& entry : table) {
            MetricFamily& family = add(entry.family);
            for (const Item& item : items) sample(family, labels_of(item), entry.value(item));
        }
    }
    std::vector<MetricFamily> take() {
        return {std::make_move_iterator(out_.begin()), std::make_move_iterator(out_.end())};
    }

private:
    std::deque<MetricFamily> out_;  // a deque keeps the references add() hands out valid as it grows
};

double counter_value(const LcoreReading& l, LcoreCounter c) {
    return static_cast<double>(l.counters[static_cast<std::size_t>(c)]);
}

constexpr std::array<ItemFamily<LcoreReading>, 2> kWorkerFamilies = {{
    {{"sluice_ring_packets", MetricType::Gauge, "Packets waiting in a worker's input ring"},
     [](const LcoreReading& l) { return static_cast<double>(l.ring_packets); }},
    {{"sluice_ring_capacity", MetricType::Gauge, "Capacity of a worker's input ring"},
     [](const LcoreReading& l) { return static_cast<double>(l.ring_capacity); }},
}};

// Workers with a connection table only.
constexpr std::array<ItemFamily<LcoreReading>, 5> kConnTableFamilies = {{
    {{"sluice_conntrack_entries", MetricType::Gauge, "Connections a worker tracks"},
     [](const LcoreReading& l) {
         return counter_value(l, LcoreCounter::conn_inserts) - counter_value(l, LcoreCounter::conn_expired);
     }},
    {{"sluice_conntrack_capacity", MetricType::Gauge, "Connections a worker can track"},
     [](const LcoreReading& l) { return static_cast<double>(l.table->capacity); }},
    {{"sluice_conntrack_ipv6_entries", MetricType::Gauge,
      "Entries of a worker's connection table that are IPv6 (a NAT connection has two)"},
     [](const LcoreReading& l) { return static_cast<double>(l.table->ipv6_entries); }},
    {{"sluice_conntrack_ipv6_capacity", MetricType::Gauge,
      "Entries a worker's connection table holds for IPv6 at most (firewall.ipv6_table_size)"},
     [](const LcoreReading& l) { return static_cast<double>(l.table->ipv6_capacity); }},
    {{"sluice_conntrack_full_drops_total", MetricType::Counter,
      "New connections a worker refused because its table was full"},
     [](const LcoreReading& l) { return static_cast<double>(l.table_full_drops); }},
}};

constexpr std::array<ItemFamily<PoolReading>, 2> kPoolFamilies = {{
    {{"sluice_mempool_mbufs_in_use", MetricType::Gauge, "mbufs out of the pool (in rings, queues, lcores)"},
     [](const PoolReading& p) { return static_cast<double>(p.in_use); }},
    {{"sluice_mempool_mbufs", MetricType::Gauge, "mbufs in the pool"},
     [](const PoolReading& p) { return static_cast<double>(p.size); }},
}};

struct RuleRow {
    std::string name;
    uint64_t hits = 0;
    uint64_t packets = 0;
    uint64_t bytes = 0;
};

constexpr std::array<ItemFamily<RuleRow>, 3> kRuleFamilies = {{
    {{"sluice_rule_hits_total", MetricType::Counter, "New connections (first packets) decided by a firewall rule"},
     [](const RuleRow& r) { return static_cast<double>(r.hits); }},
    {{"sluice_rule_packets_total", MetricType::Counter, "Packets of the connections a firewall rule allowed"},
     [](const RuleRow& r) { return static_cast<double>(r.packets); }},
    {{"sluice_rule_bytes_total", MetricType::Counter, "Bytes of the connections a firewall rule allowed"},
     [](const RuleRow& r) { return static_cast<double>(r.bytes); }},
}};

constexpr std::array<ItemFamily<RuleHitsRecord>, 1> kRuleDefaultFamilies = {{
    {{"sluice_firewall_default_hits_total", MetricType::Counter,
      "New connections no rule matched (the default action decided)"},
     [](const RuleHitsRecord& r) { return static_cast<double>(r.default_hits); }},
}};

constexpr std::array<ItemFamily<BackendRecord>, 6> kBackendFamilies = {{
    {{"sluice_backend_up", MetricType::Gauge, "1 when a backend passes its health checks (or has none)"},
     [](const BackendRecord& b) { return b.up ? 1.0 : 0.0; }},
    {{"sluice_backend_weight", MetricType::Gauge, "A backend's configured weight (0: draining)"},
     [](const BackendRecord& b) { return static_cast<double>(b.weight); }},
    {{"sluice_backend_connections_total", MetricType::Counter, "New connections given to a backend"},
     [](const BackendRecord& b) { return static_cast<double>(b.new_connections); }},
    {{"sluice_backend_active_connections", MetricType::Gauge, "Tracked connections of a backend"},
     [](const BackendRecord& b) { return static_cast<double>(b.active_connections); }},
    {{"sluice_backend_packets_total", MetricType::Counter, "Packets of a backend's connections (both directions seen)"},
     [](const BackendRecord& b) { return static_cast<double>(b.packets); }},
    {{"sluice_backend_bytes_total", MetricType::Counter, "Bytes of a backend's connections (both directions seen)"},
     [](const BackendRecord& b) { return static_cast<double>(b.bytes); }},
}};

constexpr FamilyDecl kNatPortsInUse{"sluice_nat_ports_in_use", MetricType::Gauge,
                                    "NAT ports a backend's connections hold on a pool address"};
constexpr FamilyDecl kNatPortsCapacity{"sluice_nat_ports_capacity", MetricType::Gauge,
                                       "NAT ports a backend has on a pool address (nat_ports, all workers)"};

constexpr FamilyDecl kXdpFrames{
    "sluice_xdp_frames_total", MetricType::Counter,
    "Frames sluice's XDP program steered, by verdict (sluice, kernel, other: neither IP nor ARP)"};

constexpr std::array<ItemFamily<XdpPortRecord>, 1> kXdpPortFamilies = {{
    {{"sluice_xdp_prefixes", MetricType::Gauge, "Prefixes in a port's XDP steering map"},
     [](const XdpPortRecord& p) { return static_cast<double>(p.prefixes); }},
}};

constexpr std::array<ItemFamily<BgpVipRecord>, 4> kBgpVipFamilies = {{
    {{"sluice_bgp_vip_announced", MetricType::Gauge,
      "1 while a VIP is in the routes BIRD last accepted from sluice (announced over BGP)"},
     [](const BgpVipRecord& v) { return v.announced ? 1.0 : 0.0; }},
    {{"sluice_bgp_vip_wanted", MetricType::Gauge,
      "1 while sluice can serve a VIP (links up, min_healthy backends, not draining)"},
     [](const BgpVipRecord& v) { return v.wanted ? 1.0 : 0.0; }},
    {{"sluice_bgp_announcements_total", MetricType::Counter, "Times BIRD took a VIP in"},
     [](const BgpVipRecord& v) { return static_cast<double>(v.announcements); }},
    {{"sluice_bgp_withdrawals_total", MetricType::Counter, "Times BIRD took a VIP out"},
     [](const BgpVipRecord& v) { return static_cast<double>(v.withdrawals); }},
}};

constexpr std::array<ItemFamily<BgpRecord>, 4> kBgpFamilies = {{
    {{"sluice_bgp_reconfigures_total", MetricType::Counter,
      "BIRD reconfigurations sluice asked for that BIRD accepted"},
     [](const BgpRecord& b) { return static_cast<double>(b.reconfigures); }},
    {{"sluice_bgp_reconfigure_failures_total", MetricType::Counter,
      "Failed attempts to update BIRD (file not written, socket unreachable, timeout, BIRD refused)"},
     [](const BgpRecord& b) { return static_cast<double>(b.reconfigure_failures); }},
    {{"sluice_bgp_in_sync", MetricType::Gauge, "1 when BIRD runs with the VIPs sluice wants announced"},
     [](const BgpRecord& b) { return b.in_sync ? 1.0 : 0.0; }},
    {{"sluice_bgp_draining", MetricType::Gauge,
      "1 while sluice drains (VIPs withdrawn, stopping after bgp.drain_seconds)"},
     [](const BgpRecord& b) { return b.draining ? 1.0 : 0.0; }},
}};

constexpr FamilyDecl kRoutes{"sluice_routes", MetricType::Gauge,
                             "Routes in the route table, by source (connected, host, static, kernel)"};
constexpr FamilyDecl kKernelRoutesLeftOut{
    "sluice_kernel_routes_left_out", MetricType::Gauge,
    "Routes of the mirrored kernel table left out of the route table: no next hop on a link of sluice's"};
constexpr FamilyDecl kKernelRoutesResyncs{
    "sluice_kernel_routes_resyncs_total", MetricType::Counter,
    "Times the mirrored kernel table was read whole again: notifications lost (ENOBUFS), a dump interrupted or cut "
    "short"};

// The sync channel's counters, from their X-macro table (sync_channel.hpp).
constexpr std::array kSyncCounterFamilies = {
#define SLUICE_SYNC_COUNTER_FAMILY(member, family, help) FamilyDecl{family, MetricType::Counter, help},
    SLUICE_SYNC_COUNTERS(SLUICE_SYNC_COUNTER_FAMILY)
#undef SLUICE_SYNC_COUNTER_FAMILY
};

constexpr std::array<ItemFamily<SyncPeerStatus>, 2> kSyncPeerFamilies = {{
    {{"sluice_sync_peer_up", MetricType::Gauge,
      "1 while a sync peer's datagrams (at least a keepalive a second) arrive"},
     [](const SyncPeerStatus& p) { return p.up ? 1.0 : 0.0; }},
    {{"sluice_sync_peer_lag_seconds", MetricType::Gauge,
      "Seconds since a sync peer's last valid datagram (-1: none yet); above 1 the peer's events are late or lost"},
     [](const SyncPeerStatus& p) { return p.silence_seconds; }},
}};

constexpr FamilyDecl kSyncPeersUp{"sluice_sync_peers_up", MetricType::Gauge, "Sync peers up (sluice_sync_peer_up)"};

constexpr FamilyDecl kReloads{"sluice_config_reloads_total", MetricType::Counter, "Config reloads, by result"};
constexpr FamilyDecl kConfigInfo{"sluice_config_info", MetricType::Gauge,
                                 "The running config (hash of the file's bytes)"};
constexpr FamilyDecl kBuildInfo{"sluice_build_info", MetricType::Gauge, "sluice version"};
constexpr FamilyDecl kDrops{"sluice_drops_total", MetricType::Counter,
                            "Packets dropped, by reason (docs/metrics.md lists the reasons)"};
constexpr FamilyDecl kRxQueuePackets{
    "sluice_port_rx_queue_packets_total", MetricType::Counter,
    "Packets each RX queue of a port with several received, as the device counts them"};
constexpr FamilyDecl kLinkUp{"sluice_port_link_up", MetricType::Gauge, "1 when the port's link is up"};

constexpr FamilyDecl kNeighbours{"sluice_neighbours", MetricType::Gauge,
                                 "Entries of sluice's ARP/ND table, by state (resolved: a MAC is known)"};
constexpr std::array<ItemFamily<NeighboursRecord>, 1> kNeighbourFamilies = {{
    {{"sluice_next_hops_unresolved", MetricType::Gauge,
      "Next hops and backends sluice must reach that have no MAC now (their traffic drops: neighbour_unresolved)"},
     [](const NeighboursRecord& n) { return static_cast<double>(n.next_hops_unresolved); }},
}};
// The drop reasons of a route lookup that found no way out, under the names the route table gives them.
constexpr FamilyDecl kRouteLookupFailures{"sluice_route_lookup_failures_total", MetricType::Counter,
                                          "Packets whose route lookup found no way out: no route, a blackhole or a "
                                          "reject route (also in sluice_drops_total)"};
constexpr std::array<std::pair<std::string_view, DropReason>, 3> kRouteLookupFailureReasons = {{
    {"no_route", DropReason::no_route},
    {"blackhole", DropReason::route_blackhole},
    {"reject", DropReason::route_reject},
}};

constexpr std::array<ItemFamily<ReloadRecord>, 2> kReloadFamilies = {{
    {{"sluice_config_last_reload_success", MetricType::Gauge, "1 when the last reload was applied"},
     [](const ReloadRecord& r) { return r.last_ok ? 1.0 : 0.0; }},
    {{"sluice_config_last_reload_timestamp_seconds", MetricType::Gauge,
      "When the last reload was attempted (0: never)"},
     [](const ReloadRecord& r) { return r.last_attempt_unix; }},
}};

template <typename Item>
std::span<const Item> one(const Item& item) {
    return {&item, 1};
}

constexpr auto no_labels = [](const auto&) { return Labels{}; };

Labels worker_label(const LcoreReading& l) { return {{"worker", std::to_string(l.worker.value_or(0))}}; }

void add_ports(Families& out, const std::vector<PortReading>& ports) {
    for (const PortCounterInfo& info : kPortCounterInfo) {
        MetricFamily& family = out.add({info.family, MetricType::Counter, info.help});
        for (const PortReading& p : ports)
            Families::sample(family, {{"port", p.name}}, static_cast<double>(p.counters.*info.member));
    }
    for (const PortDeviceCounterInfo& info : kPortDeviceCounterInfo) {
        MetricFamily& family = out.add({info.family, MetricType::Counter, info.help});
        for (const PortReading& p : ports)
            if (p.device) Families::sample(family, {{"port", p.name}}, static_cast<double>((*p.device).*info.member));
    }
    MetricFamily& queues = out.add(kRxQueuePackets);
    for (const PortReading& p : ports)
        for (std::size_t q = 0; q < p.rx_queue_packets.size(); ++q)
            Families::sample(queues, {{"port", p.name}, {"queue", std::to_string(q)}},
                             static_cast<double>(p.rx_queue_packets[q]));
    MetricFamily& link = out.add(kLinkUp);
    for (const PortReading& p : ports)
        if (p.link_up) Families::sample(link, {{"port", p.name}}, *p.link_up ? 1 : 0);
}

bool exports(CounterExporters exporters, const LcoreReading& l) {
    switch (exporters) {
    case CounterExporters::every_lcore: return true;
    case CounterExporters::workers: return l.worker.has_value();
    case CounterExporters::table_workers: return l.worker.has_value() && l.table.has_value();
    }
    return false;
}

void add_lcores(Families& out, const Scrape& scrape) {
    for (std::size_t i = 0; i < kLcoreCounterInfo.size(); ++i) {
        const LcoreCounterInfo& info = kLcoreCounterInfo[i];
        if (info.family.empty()) continue;
        MetricFamily& family = out.add({info.family, MetricType::Counter, info.help});
        for (const LcoreReading& l : scrape.lcores) {
            if (!exports(info.exported_by, l)) continue;
            const double value = static_cast<double>(l.counters[i]);
            const Labels labels = info.exported_by == CounterExporters::every_lcore
                                      ? Labels{{"lcore", std::to_string(l.lcore_id)}}
                                      : worker_label(l);
            Families::sample(family, labels, info.unit == CounterUnit::tsc_cycles ? value / scrape.tsc_hz : value);
        }
    }
    std::vector<LcoreReading> workers, table_workers;
    for (const LcoreReading& l : scrape.lcores) {
        if (exports(CounterExporters::workers, l)) workers.push_back(l);
        if (exports(CounterExporters::table_workers, l)) table_workers.push_back(l);
    }
    out.add_per_item(kWorkerFamilies, workers, worker_label);
    out.add_per_item(kConnTableFamilies, table_workers, worker_label);
}

void add_rules(Families& out, const RuleHitsRecord& hits) {
    std::vector<RuleRow> rows;
    for (std::size_t r = 0; r < hits.rules.size(); ++r)
        rows.push_back({hits.rules[r].first, hits.rules[r].second, hits.traffic[r].first, hits.traffic[r].second});
    out.add_per_item(kRuleFamilies, rows, [](const RuleRow& r) { return Labels{{"rule", r.name}}; });
    out.add_per_item(kRuleDefaultFamilies, one(hits), no_labels);
}

// One sample per nat backend and pool address: how full its port space there is.
void add_nat_ports(Families& out, const BackendsRecord& record) {
    MetricFamily& in_use = out.add(kNatPortsInUse);
    MetricFamily& capacity = out.add(kNatPortsCapacity);
    for (const BackendRecord& b : record.backends) {
        for (std::size_t a = 0; a < b.nat_ports_in_use.size() && a < record.nat_pool.size(); ++a) {
            const Labels labels{{"service", b.service}, {"backend", b.backend}, {"pool", record.nat_pool[a]}};
            Families::sample(in_use, labels, static_cast<double>(b.nat_ports_in_use[a]));
            Families::sample(capacity, labels, static_cast<double>(b.nat_ports_capacity));
        }
    }
}

void add_xdp(Families& out, const XdpRecord& xdp) {
    if (xdp.ports.empty()) return;
    MetricFamily& frames = out.add(kXdpFrames);
    for (const XdpPortRecord& p : xdp.ports) {
        Families::sample(frames, {{"port", p.port}, {"verdict", "sluice"}}, static_cast<double>(p.to_sluice));
        Families::sample(frames, {{"port", p.port}, {"verdict", "kernel"}}, static_cast<double>(p.to_kernel));
        Families::sample(frames, {{"port", p.port}, {"verdict", "other"}}, static_cast<double>(p.other));
    }
    out.add_per_item(kXdpPortFamilies, xdp.ports, [](const XdpPortRecord& p) { return Labels{{"port", p.port}}; });
}

void add_xsk(Families& out, const XskRecord& xsk) {
    if (xsk.ports.empty()) return;
    for (const XskCounterInfo& info : kXskCounterInfo) {
        MetricFamily& family = out.add({info.family, MetricType::Counter, info.help});
        for (const XskPortRecord& p : xsk.ports)
            Families::sample(family, {{"port", p.port}}, static_cast<double>(p.counters.*info.member));
    }
}

void add_bgp(Families& out, const BgpRecord& bgp) {
    if (!bgp.enabled) return;
    out.add_per_item(kBgpVipFamilies, bgp.vips, [](const BgpVipRecord& v) { return Labels{{"vip", v.vip}}; });
    out.add_per_item(kBgpFamilies, one(bgp), no_labels);
}

void add_routing(Families& out, const Scrape& scrape) {
    MetricFamily& failures = out.add(kRouteLookupFailures);
    for (const auto& [name, reason] : kRouteLookupFailureReasons)
        Families::sample(failures, {{"reason", std::string(name)}},
                         static_cast<double>(scrape.drops[static_cast<std::size_t>(reason)]));
    MetricFamily& neighbours = out.add(kNeighbours);
    Families::sample(neighbours, {{"state", "resolved"}}, static_cast<double>(scrape.neighbours.resolved));
    Families::sample(neighbours, {{"state", "unresolved"}}, static_cast<double>(scrape.neighbours.unresolved));
    out.add_per_item(kNeighbourFamilies, one(scrape.neighbours), no_labels);
}

void add_routes(Families& out, const RoutesRecord& routes) {
    MetricFamily& by_source = out.add(kRoutes);
    constexpr const char* kSources[] = {"connected", "host", "static", "kernel"};
    for (std::size_t s = 0; s < routes.by_source.size(); ++s)
        Families::sample(by_source, {{"source", kSources[s]}}, static_cast<double>(routes.by_source[s]));
    if (routes.kernel_mirrored) {
        Families::sample(out.add(kKernelRoutesLeftOut), {}, static_cast<double>(routes.kernel_left_out));
        Families::sample(out.add(kKernelRoutesResyncs), {}, static_cast<double>(routes.kernel_resyncs));
    }
}

void add_sync(Families& out, const SyncRecord& sync) {
    for (std::size_t i = 0; i < kSyncCounterFamilies.size() && i < sync.counters.size(); ++i)
        Families::sample(out.add(kSyncCounterFamilies[i]), {}, static_cast<double>(sync.counters[i]));
    out.add_per_item(kSyncPeerFamilies, sync.peers, [](const SyncPeerStatus& p) {
        return Labels{{"peer", p.address}};
    });
    const auto up = std::count_if(sync.peers.begin(), sync.peers.end(), [](const SyncPeerStatus& p) { return p.up; });
    Families::sample(out.add(kSyncPeersUp), {}, static_cast<double>(up));
}

void add_reload(Families& out, const ReloadRecord& reload) {
    MetricFamily& reloads = out.add(kReloads);
    Families::sample(reloads, {{"result", "success"}}, static_cast<double>(reload.successes));
    Families::sample(reloads, {{"result", "failure"}}, static_cast<double>(reload.failures));
    out.add_per_item(kReloadFamilies, one(reload), no_labels);
    Families::sample(out.add(kConfigInfo), {{"hash", reload.running_hash}}, 1);
}

}  // namespace

SyncRecord read_sync(const SyncChannel& sync) {
    SyncRecord record;
    const SyncCounters& c = sync.counters();
#define SLUICE_SYNC_COUNTER_READ(member, family, help) \
    record.counters.push_back(c.member.load(std::memory_order_relaxed));
    SLUICE_SYNC_COUNTERS(SLUICE_SYNC_COUNTER_READ)
#undef SLUICE_SYNC_COUNTER_READ
    record.peers = sync.peers();
    return record;
}

Scrape read_scrape(const StatusView& view, const std::string& version) {
    Scrape scrape;
    scrape.version = version;
    scrape.tsc_hz = static_cast<double>(rte_get_tsc_hz());
    const CounterTotals totals = view.dataplane->totals();
    scrape.ports = read_ports(view, totals);
    scrape.drops = totals.drops;
    scrape.lcores = read_lcores(*view.dataplane);
    scrape.pools = read_pools(view);
    scrape.rules = view.rules->read();
    if (view.backends) scrape.backends = view.backends->read();
    if (view.xdp) scrape.xdp = view.xdp->read();
    if (view.xsk) scrape.xsk = view.xsk->read();
    if (view.bgp) scrape.bgp = view.bgp->read();
    if (view.neighbours) scrape.neighbours = view.neighbours->read();
    if (view.routes) scrape.routes = view.routes->read();
    if (view.sync) scrape.sync = read_sync(*view.sync);
    scrape.reload = view.reload->read();
    return scrape;
}

std::vector<MetricFamily> render_families(const Scrape& scrape) {
    Families out;
    Families::sample(out.add(kBuildInfo), {{"version", scrape.version}}, 1);
    add_ports(out, scrape.ports);
    MetricFamily& drops = out.add(kDrops);
    for (std::size_t r = 1; r < kDropReasonCount; ++r)
        Families::sample(drops, {{"reason", std::string(kDropReasonInfo[r].name)}},
                         static_cast<double>(scrape.drops[r]));
    add_lcores(out, scrape);
    add_routing(out, scrape);
    out.add_per_item(kPoolFamilies, scrape.pools, [](const PoolReading& p) {
        return Labels{{"socket", std::to_string(p.socket)}};
    });
    add_rules(out, scrape.rules);
    if (scrape.backends)
        out.add_per_item(kBackendFamilies, scrape.backends->backends, [](const BackendRecord& b) {
            return Labels{{"service", b.service}, {"backend", b.backend}};
        });
    if (scrape.backends) add_nat_ports(out, *scrape.backends);
    if (scrape.xdp) add_xdp(out, *scrape.xdp);
    add_xsk(out, scrape.xsk);
    if (scrape.bgp) add_bgp(out, *scrape.bgp);
    if (scrape.routes) add_routes(out, *scrape.routes);
    if (scrape.sync) add_sync(out, *scrape.sync);
    add_reload(out, scrape.reload);
    return out.take();
}

}  // namespace sluice

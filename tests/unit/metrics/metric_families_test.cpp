#include <catch2/catch.hpp>

#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "metrics/metric_families.hpp"

using namespace sluice;
using prometheus::MetricFamily;
using prometheus::MetricType;

namespace {

// A scrape with one of everything: an RX-only lcore, a worker with a connection table, a rule, a backend, an XDP
// port and a BGP VIP, each counter with its own value.
Scrape full_scrape() {
    Scrape s;
    s.version = "1.2.3";
    s.tsc_hz = 2e9;
    rte_eth_stats device{};
    device.imissed = 11;
    device.oerrors = 14;
    s.ports = {PortReading{"wan", PortCounters{1, 2, 3, 4}, device, true, {7, 9}}};
    s.drops[static_cast<std::size_t>(DropReason::ttl_expired)] = 7;
    LcoreReading rx;
    rx.lcore_id = 1;
    LcoreReading worker;
    worker.lcore_id = 2;
    worker.worker = 0;
    worker.table = ConnTableReading{1024, 3, 256};
    worker.table_full_drops = 9;
    worker.ring_packets = 5;
    worker.ring_capacity = 4095;
    for (std::size_t i = 0; i < kLcoreCounterInfo.size(); ++i) {
        rx.counters[i] = 1000 + i;
        worker.counters[i] = 2000 + i;
    }
    worker.counters[static_cast<std::size_t>(LcoreCounter::conn_inserts)] = 50;
    worker.counters[static_cast<std::size_t>(LcoreCounter::conn_expired)] = 20;
    s.lcores = {rx, worker};
    s.pools = {PoolReading{0, 12, 16383}};
    s.rules.rules = {{"web", 3}};
    s.rules.traffic = {{10, 1000}};
    s.rules.default_hits = 4;
    BackendRecord backend;
    backend.service = "web";
    backend.backend = "10.1.0.11:8080";
    backend.weight = 2;
    backend.nat_ports_in_use = {97};
    backend.nat_ports_capacity = 64512;
    s.backends = BackendsRecord{{backend}, {"10.1.0.100"}};
    s.xdp = XdpRecord{{XdpPortRecord{"wan", "eth0", "all", 1, 2, 3, 4}}};
    s.xsk = XskRecord{{XskPortRecord{"wan", XskCounters{21, 22, 23, 24, 25, 26}}}};
    BgpRecord bgp;
    bgp.enabled = true;
    bgp.vips = {BgpVipRecord{"192.0.2.100", true, true, 1, 0}};
    s.bgp = bgp;
    s.neighbours = NeighboursRecord{3, 2, 1};
    s.routes = RoutesRecord{{2, 1, 3, 1000}, true, 4};
    SyncPeerStatus peer;
    peer.address = "10.9.0.2:7900";
    peer.up = true;
    peer.silence_seconds = 0.25;
    s.sync = SyncRecord{std::vector<uint64_t>(32, 5), {peer}};
    s.reload.running_hash = "0123456789abcdef";
    return s;
}

std::map<std::string, MetricFamily> by_name(const std::vector<MetricFamily>& families) {
    std::map<std::string, MetricFamily> out;
    for (const MetricFamily& f : families) CHECK(out.emplace(f.name, f).second);  // names unique
    return out;
}

std::set<std::string> label_names(const MetricFamily& f) {
    std::set<std::string> names;
    for (const auto& m : f.metric)
        for (const auto& l : m.label) names.insert(l.name);
    return names;
}

double value(const prometheus::ClientMetric& m, MetricType type) {
    return type == MetricType::Counter ? m.counter.value : m.gauge.value;
}

std::string trim(const std::string& s) {
    const std::size_t first = s.find_first_not_of(" `"), last = s.find_last_not_of(" `");
    return first == std::string::npos ? "" : s.substr(first, last - first + 1);
}

std::vector<std::string> split(const std::string& s, char by) {
    std::vector<std::string> parts;
    std::stringstream in(s);
    for (std::string part; std::getline(in, part, by);) parts.push_back(trim(part));
    return parts;
}

struct DocumentedFamily {
    std::string type;
    std::set<std::string> labels;
};

// docs/metrics.md's table: | `name`, `name` | type | label, label=a\|b | meaning |
std::map<std::string, DocumentedFamily> documented_families() {
    std::ifstream in(SLUICE_SOURCE_DIR "/docs/metrics.md");
    std::map<std::string, DocumentedFamily> out;
    for (std::string line; std::getline(in, line);) {
        if (line.rfind("| `sluice_", 0) != 0) continue;
        for (std::size_t at; (at = line.find("\\|")) != std::string::npos;) line.replace(at, 2, "/");
        const std::vector<std::string> cells = split(line, '|');  // cells[0] is the empty text before the first |
        REQUIRE(cells.size() >= 4);
        DocumentedFamily family{cells[2], {}};
        for (const std::string& label : split(cells[3], ','))
            if (!label.empty()) family.labels.insert(label.substr(0, label.find('=')));
        for (const std::string& name : split(cells[1], ',')) out.emplace(name, family);
    }
    return out;
}

}  // namespace

TEST_CASE("lcore counters: each declared once, with a help text", "[metrics]") {
    std::set<std::string_view> names, keys, families;
    for (const LcoreCounterInfo& info : kLcoreCounterInfo) {
        INFO(info.name);
        CHECK(names.insert(info.name).second);
        CHECK((info.telemetry_key.empty() || keys.insert(info.telemetry_key).second));
        CHECK((info.family.empty() || families.insert(info.family).second));
        CHECK_FALSE(info.help.empty());
        if (!info.family.empty()) CHECK(info.family.ends_with("_total"));  // they are all Prometheus counters
    }
    CHECK(kLcoreCounterInfo[static_cast<std::size_t>(LcoreCounter::lb_adoptions)].name == "lb_adoptions");
}

TEST_CASE("lcore counters: the totals sum every counter of every lcore", "[metrics]") {
    LcoreCounters a, b;
    for (std::size_t i = 0; i < kLcoreCounterInfo.size(); ++i) {
        a.*kLcoreCounterInfo[i].lcore = i + 1;
        b.*kLcoreCounterInfo[i].lcore = 100 * (i + 1);
    }
    a.ports[3].tx_bytes = 5;
    b.ports[3].tx_bytes = 6;
    a.drop(DropReason::no_route, 2);
    CounterTotals totals;
    totals.add(a);
    totals.add(b);
    for (std::size_t i = 0; i < kLcoreCounterInfo.size(); ++i) {
        INFO(kLcoreCounterInfo[i].name);
        CHECK(totals.*kLcoreCounterInfo[i].total == 101 * (i + 1));
    }
    CHECK(totals.polls == 101);
    CHECK(totals.sync_refused == 101 * kLcoreCounterInfo.size());  // the last counter
    CHECK(totals.ports[3].tx_bytes == 11);
    CHECK(totals.total_drops() == 2);
}

TEST_CASE("prometheus: every exported lcore counter has its family, help, label and value", "[metrics]") {
    const Scrape scrape = full_scrape();
    const std::map<std::string, MetricFamily> families = by_name(render_families(scrape));
    for (std::size_t i = 0; i < kLcoreCounterInfo.size(); ++i) {
        const LcoreCounterInfo& info = kLcoreCounterInfo[i];
        if (info.family.empty()) continue;
        INFO(info.family);
        const auto found = families.find(std::string(info.family));
        REQUIRE(found != families.end());
        const MetricFamily& f = found->second;
        CHECK(f.type == MetricType::Counter);
        CHECK(f.help == info.help);
        const bool per_lcore = info.exported_by == CounterExporters::every_lcore;
        REQUIRE(f.metric.size() == (per_lcore ? 2u : 1u));  // the RX-only lcore is no worker
        const auto& last = f.metric.back();                 // the worker's
        REQUIRE(last.label.size() == 1);
        CHECK(last.label[0].name == (per_lcore ? "lcore" : "worker"));
        CHECK(last.label[0].value == (per_lcore ? "2" : "0"));
        const double counted = static_cast<double>(scrape.lcores[1].counters[i]);
        CHECK(last.counter.value == (info.unit == CounterUnit::tsc_cycles ? counted / scrape.tsc_hz : counted));
    }
    CHECK(families.at("sluice_conntrack_entries").metric.at(0).gauge.value == 30);
    CHECK(families.at("sluice_lcore_busy_seconds_total").metric.at(0).counter.value == 1002 / 2e9);
}

TEST_CASE("prometheus: packets per RX queue, one sample per queue of a port with several", "[metrics]") {
    Scrape scrape = full_scrape();
    const std::map<std::string, MetricFamily> families = by_name(render_families(scrape));
    const MetricFamily& queues = families.at("sluice_port_rx_queue_packets_total");
    REQUIRE(queues.metric.size() == 2);
    for (std::size_t q = 0; q < 2; ++q) {
        CHECK(queues.metric[q].label.at(0).value == "wan");
        CHECK(queues.metric[q].label.at(1).name == "queue");
        CHECK(queues.metric[q].label.at(1).value == std::to_string(q));
        CHECK(queues.metric[q].counter.value == (q == 0 ? 7 : 9));
    }
    scrape.ports[0].rx_queue_packets.clear();  // one RX queue: the port's own counters say it all
    CHECK(by_name(render_families(scrape)).at("sluice_port_rx_queue_packets_total").metric.empty());
}

TEST_CASE("prometheus: every port counter has its family, with the device's only when it answered", "[metrics]") {
    Scrape scrape = full_scrape();
    std::map<std::string, MetricFamily> families = by_name(render_families(scrape));
    for (const PortCounterInfo& info : kPortCounterInfo) {
        const MetricFamily& f = families.at(std::string(info.family));
        CHECK(f.help == info.help);
        CHECK(f.metric.at(0).counter.value == static_cast<double>(scrape.ports[0].counters.*info.member));
    }
    CHECK(families.at("sluice_port_tx_bytes_total").metric.at(0).counter.value == 4);
    CHECK(families.at("sluice_port_rx_missed_total").metric.at(0).counter.value == 11);
    CHECK(families.at("sluice_port_tx_errors_total").metric.at(0).counter.value == 14);
    scrape.ports[0].device.reset();
    families = by_name(render_families(scrape));
    for (const PortDeviceCounterInfo& info : kPortDeviceCounterInfo) {
        INFO(info.family);
        CHECK(families.at(std::string(info.family)).metric.empty());
        CHECK(info.telemetry_key == "hw_" + std::string(info.name));
    }
}

TEST_CASE("prometheus: a net_af_xdp port's AF_XDP socket counters, a family each, named as in telemetry", "[metrics]") {
    Scrape scrape = full_scrape();
    const std::map<std::string, MetricFamily> families = by_name(render_families(scrape));
    CHECK(families.at("sluice_port_xdp_rx_dropped_total").metric.at(0).counter.value == 21);
    CHECK(families.at("sluice_port_xdp_rx_ring_full_total").metric.at(0).counter.value == 24);
    CHECK(families.at("sluice_port_xdp_rx_fill_ring_empty_descs_total").metric.at(0).counter.value == 25);
    CHECK(families.at("sluice_port_xdp_tx_ring_empty_descs_total").metric.at(0).counter.value == 26);
    for (const XskCounterInfo& info : kXskCounterInfo) {
        INFO(info.family);
        const MetricFamily& f = families.at(std::string(info.family));
        CHECK(f.help == info.help);
        REQUIRE(f.metric.size() == 1);
        CHECK(f.metric[0].label.at(0).name == "port");
        CHECK(f.metric[0].label.at(0).value == "wan");
        CHECK(f.metric[0].counter.value == static_cast<double>(scrape.xsk.ports[0].counters.*info.member));
        CHECK("sluice_port_" + std::string(info.telemetry_key) + "_total" == info.family);
    }
}

TEST_CASE("prometheus: every family is documented in docs/metrics.md with its type and labels, and back", "[metrics]") {
    const std::map<std::string, MetricFamily> families = by_name(render_families(full_scrape()));
    const std::map<std::string, DocumentedFamily> documented = documented_families();
    REQUIRE(documented.size() > 40);
    for (const auto& [name, f] : families) {
        INFO(name);
        CHECK_FALSE(f.help.empty());
        CHECK_FALSE(f.metric.empty());
        CHECK((f.type == MetricType::Counter) == name.ends_with("_total"));
        const auto doc = documented.find(name);
        REQUIRE(doc != documented.end());
        CHECK(doc->second.type == (f.type == MetricType::Counter ? "counter" : "gauge"));
        CHECK(label_names(f) == doc->second.labels);
        for (const auto& m : f.metric) CHECK(value(m, f.type) >= 0);
    }
    for (const auto& [name, doc] : documented) {
        INFO(name);
        CHECK(families.count(name) == 1);
    }
}

TEST_CASE("prometheus: families of absent features stay out", "[metrics]") {
    Scrape scrape = full_scrape();
    scrape.backends.reset();
    scrape.xdp->ports.clear();
    scrape.xsk.ports.clear();
    scrape.bgp->enabled = false;
    scrape.routes->kernel_mirrored = false;
    const std::map<std::string, MetricFamily> families = by_name(render_families(scrape));
    for (const auto& [name, f] : families) {
        INFO(name);
        CHECK(name.find("_kernel_routes_") == std::string::npos);
        CHECK(name.find("_backend_") == std::string::npos);
        CHECK(name.find("_xdp_") == std::string::npos);
        CHECK(name.find("_bgp_") == std::string::npos);
        CHECK(name.find("_nat_ports_") == std::string::npos);
    }
    CHECK(families.count("sluice_config_info") == 1);
}

TEST_CASE("prometheus: a nat backend's ports in use and capacity, one sample per pool address", "[metrics]") {
    Scrape scrape = full_scrape();
    scrape.backends->nat_pool = {"10.1.0.100", "10.1.0.101"};
    scrape.backends->backends[0].nat_ports_in_use = {97, 64000};
    BackendRecord dsr;  // no port space: no sample
    dsr.service = "dns", dsr.backend = "10.1.0.21:53";
    scrape.backends->backends.push_back(dsr);
    const std::map<std::string, MetricFamily> families = by_name(render_families(scrape));
    const MetricFamily& in_use = families.at("sluice_nat_ports_in_use");
    const MetricFamily& capacity = families.at("sluice_nat_ports_capacity");
    REQUIRE(in_use.metric.size() == 2);
    REQUIRE(capacity.metric.size() == 2);
    for (std::size_t a = 0; a < 2; ++a) {
        std::map<std::string, std::string> labels;
        for (const auto& l : in_use.metric[a].label) labels[l.name] = l.value;
        CHECK(labels == std::map<std::string, std::string>{{"service", "web"},
                                                           {"backend", "10.1.0.11:8080"},
                                                           {"pool", a ? "10.1.0.101" : "10.1.0.100"}});
        CHECK(value(in_use.metric[a], MetricType::Gauge) == (a ? 64000 : 97));
        CHECK(value(capacity.metric[a], MetricType::Gauge) == 64512);
    }
}

TEST_CASE("prometheus: route lookup failures by reason are the route drops; neighbours by state", "[metrics]") {
    Scrape scrape = full_scrape();
    scrape.drops[static_cast<std::size_t>(DropReason::no_route)] = 7;
    scrape.drops[static_cast<std::size_t>(DropReason::route_blackhole)] = 5;
    scrape.drops[static_cast<std::size_t>(DropReason::route_reject)] = 3;
    scrape.drops[static_cast<std::size_t>(DropReason::neighbour_unresolved)] = 11;  // a lookup that found a route
    const std::map<std::string, MetricFamily> families = by_name(render_families(scrape));
    std::map<std::string, double> failures, neighbours;
    for (const auto& m : families.at("sluice_route_lookup_failures_total").metric)
        failures[m.label.at(0).value] = m.counter.value;
    CHECK(failures == std::map<std::string, double>{{"blackhole", 5}, {"no_route", 7}, {"reject", 3}});
    for (const auto& m : families.at("sluice_neighbours").metric) neighbours[m.label.at(0).value] = m.gauge.value;
    CHECK(neighbours == std::map<std::string, double>{{"resolved", 3}, {"unresolved", 2}});
    CHECK(families.at("sluice_next_hops_unresolved").metric.at(0).gauge.value == 1);
}

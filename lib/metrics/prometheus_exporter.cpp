#include "metrics/prometheus_exporter.hpp"

#include <deque>

#include <prometheus/collectable.h>
#include <prometheus/exposer.h>
#include <prometheus/metric_family.h>

#include <rte_cycles.h>
#include <rte_ethdev.h>

#include "dpdk/mempool.hpp"

namespace sluice {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

// Families are built fresh at every scrape from the live counters.
class SluiceCollector : public prometheus::Collectable {
public:
    SluiceCollector(const StatusView& view, std::string version) : view_(view), version_(std::move(version)) {}

    std::vector<MetricFamily> Collect() const override {
        std::deque<MetricFamily> out;  // a deque keeps the references family() hands out valid as it grows
        const auto family = [&](const char* name, const char* help, MetricType type) -> MetricFamily& {
            out.push_back(MetricFamily{name, help, type, {}});
            return out.back();
        };
        const auto sample = [](MetricFamily& f, std::vector<ClientMetric::Label> labels, double value) {
            ClientMetric m;
            m.label = std::move(labels);
            if (f.type == MetricType::Counter) m.counter.value = value;
            else m.gauge.value = value;
            f.metric.push_back(std::move(m));
        };

        sample(family("sluice_build_info", "sluice version", MetricType::Gauge), {{"version", version_}}, 1);
        const Dataplane& dp = *view_.dataplane;
        const CounterTotals totals = dp.totals();

        struct PortFamily {
            const char* name;
            const char* help;
            uint64_t PortCounters::*field;
        };
        for (const PortFamily& pf : {PortFamily{"sluice_port_rx_packets_total", "Packets received", &PortCounters::rx_packets},
                                     PortFamily{"sluice_port_rx_bytes_total", "Bytes received", &PortCounters::rx_bytes},
                                     PortFamily{"sluice_port_tx_packets_total", "Packets transmitted", &PortCounters::tx_packets},
                                     PortFamily{"sluice_port_tx_bytes_total", "Bytes transmitted", &PortCounters::tx_bytes}}) {
            MetricFamily& f = family(pf.name, pf.help, MetricType::Counter);
            for (const StatusPort& p : view_.ports)
                sample(f, {{"port", p.name}}, static_cast<double>(totals.ports[p.port_id].*pf.field));
        }
        MetricFamily& missed = family("sluice_port_rx_missed_total", "Packets the device dropped for lack of RX descriptors", MetricType::Counter);
        MetricFamily& nombuf = family("sluice_port_rx_nombuf_total", "RX mbuf allocation failures", MetricType::Counter);
        MetricFamily& rx_errors = family("sluice_port_rx_errors_total", "Erroneous packets received by the device", MetricType::Counter);
        MetricFamily& tx_errors = family("sluice_port_tx_errors_total", "Packets the device failed to transmit", MetricType::Counter);
        MetricFamily& link = family("sluice_port_link_up", "1 when the port's link is up", MetricType::Gauge);
        for (const StatusPort& p : view_.ports) {
            rte_eth_stats hw{};
            if (rte_eth_stats_get(p.port_id, &hw) == 0) {
                sample(missed, {{"port", p.name}}, static_cast<double>(hw.imissed));
                sample(nombuf, {{"port", p.name}}, static_cast<double>(hw.rx_nombuf));
                sample(rx_errors, {{"port", p.name}}, static_cast<double>(hw.ierrors));
                sample(tx_errors, {{"port", p.name}}, static_cast<double>(hw.oerrors));
            }
            rte_eth_link l{};
            if (rte_eth_link_get_nowait(p.port_id, &l) == 0) sample(link, {{"port", p.name}}, l.link_status);
        }

        MetricFamily& drops = family("sluice_drops_total", "Packets dropped, by reason (docs/metrics.md lists the reasons)", MetricType::Counter);
        for (std::size_t r = 1; r < kDropReasonCount; ++r)
            sample(drops, {{"reason", std::string(kDropReasonInfo[r].name)}}, static_cast<double>(totals.drops[r]));

        MetricFamily& polls = family("sluice_lcore_polls_total", "Poll loop iterations (the lcore heartbeat)", MetricType::Counter);
        MetricFamily& busy = family("sluice_lcore_busy_polls_total", "Poll loop iterations that moved packets", MetricType::Counter);
        MetricFamily& busy_seconds = family("sluice_lcore_busy_seconds_total", "Time the poll loop spent in iterations that moved packets; rate() is the lcore's load, 0 to 1", MetricType::Counter);
        const double tsc_hz = static_cast<double>(rte_get_tsc_hz());
        dp.for_each_lcore([&](const LcoreContext& ctx) {
            const std::string id = std::to_string(ctx.lcore_id);
            sample(polls, {{"lcore", id}}, static_cast<double>(counter_read(ctx.counters.polls)));
            sample(busy, {{"lcore", id}}, static_cast<double>(counter_read(ctx.counters.busy_polls)));
            sample(busy_seconds, {{"lcore", id}}, static_cast<double>(counter_read(ctx.counters.busy_cycles)) / tsc_hz);
        });
        MetricFamily& ring_used = family("sluice_ring_packets", "Packets waiting in a worker's input ring", MetricType::Gauge);
        MetricFamily& ring_size = family("sluice_ring_capacity", "Capacity of a worker's input ring", MetricType::Gauge);
        dp.for_each_lcore([&](const LcoreContext& ctx) {
            if (!ctx.worker) return;
            const rte_ring* ring = ctx.worker_rings[ctx.worker_index];
            const std::string w = std::to_string(ctx.worker_index);
            sample(ring_used, {{"worker", w}}, rte_ring_count(ring));
            sample(ring_size, {{"worker", w}}, rte_ring_get_capacity(ring));
        });
        MetricFamily& in_use = family("sluice_mempool_mbufs_in_use", "mbufs out of the pool (in rings, queues, lcores)", MetricType::Gauge);
        MetricFamily& size = family("sluice_mempool_mbufs", "mbufs in the pool", MetricType::Gauge);
        for (const auto& [socket, pool] : view_.pools) {
            sample(in_use, {{"socket", std::to_string(socket)}}, mbufs_in_use(pool));
            sample(size, {{"socket", std::to_string(socket)}}, pool->size);
        }

        MetricFamily& entries = family("sluice_conntrack_entries", "Connections a worker tracks", MetricType::Gauge);
        MetricFamily& capacity = family("sluice_conntrack_capacity", "Connections a worker can track", MetricType::Gauge);
        MetricFamily& ipv6_entries = family("sluice_conntrack_ipv6_entries",
                                            "Entries of a worker's connection table that are IPv6 (a NAT connection has two)",
                                            MetricType::Gauge);
        MetricFamily& ipv6_capacity = family("sluice_conntrack_ipv6_capacity",
                                             "Entries a worker's connection table holds for IPv6 at most (firewall.ipv6_table_size)",
                                             MetricType::Gauge);
        MetricFamily& inserts = family("sluice_conntrack_inserts_total", "Connections a worker started tracking", MetricType::Counter);
        MetricFamily& expired = family("sluice_conntrack_expired_total", "Connections a worker stopped tracking (timed out, or removed early: a backend removed with drop, a NAT connection that found no port, a client that gave up a SYN-proxy handshake)", MetricType::Counter);
        MetricFamily& rejects = family("sluice_rejects_sent_total", "TCP RSTs and ICMP unreachables sent for reject rules", MetricType::Counter);
        MetricFamily& too_big = family("sluice_icmp_too_big_sent_total",
                                       "ICMP fragmentation-needed and ICMPv6 packet-too-big errors sent back for packets over the egress MTU",
                                       MetricType::Counter);
        MetricFamily& limited = family("sluice_error_replies_limited_total",
                                       "Reject replies and ICMP too-big and time-exceeded errors a worker did not send: over dataplane.max_error_replies_per_second",
                                       MetricType::Counter);
        MetricFamily& echoes = family("sluice_icmp_echo_replies_total", "ICMP and ICMPv6 echo replies sent for pings of sluice's own addresses (ports' addresses, VIPs, NAT pool)",
                                      MetricType::Counter);
        MetricFamily& expired_ttl = family("sluice_icmp_time_exceeded_sent_total",
                                           "ICMP time-exceeded errors sent for packets whose TTL or hop limit expired, from the ingress port's address",
                                           MetricType::Counter);
        MetricFamily& full = family("sluice_conntrack_full_drops_total", "New connections a worker refused because its table was full", MetricType::Counter);
        MetricFamily& adopted = family("sluice_lb_stateless_adoptions_total",
                                       "dsr/tunnel connections a worker picked up mid-stream by Maglev (no SYN seen: another instance opened them)",
                                       MetricType::Counter);
        MetricFamily& passed = family("sluice_lb_stateless_forwards_total",
                                      "FINs and RSTs of unknown dsr/tunnel connections a worker sent to their Maglev backend without an entry",
                                      MetricType::Counter);
        MetricFamily& cookies = family("sluice_syn_cookies_sent_total",
                                       "SYN+ACKs with a SYN cookie a worker sent for syn_proxy services (no state made)",
                                       MetricType::Counter);
        MetricFamily& accepted = family("sluice_syn_cookies_accepted_total",
                                        "ACKs with a valid SYN cookie: connections a worker opened towards their backend",
                                        MetricType::Counter);
        dp.for_each_lcore([&](const LcoreContext& ctx) {
            if (!ctx.worker) return;
            const std::string w = std::to_string(ctx.worker_index);
            sample(cookies, {{"worker", w}}, static_cast<double>(counter_read(ctx.counters.syn_cookies_sent)));
            sample(accepted, {{"worker", w}}, static_cast<double>(counter_read(ctx.counters.syn_cookies_accepted)));
            const uint64_t opened = counter_read(ctx.counters.conn_inserts), gone = counter_read(ctx.counters.conn_expired);
            sample(rejects, {{"worker", w}}, static_cast<double>(counter_read(ctx.counters.rejects_sent)));
            sample(too_big, {{"worker", w}}, static_cast<double>(counter_read(ctx.counters.too_big_sent)));
            sample(limited, {{"worker", w}}, static_cast<double>(counter_read(ctx.counters.error_replies_limited)));
            sample(echoes, {{"worker", w}}, static_cast<double>(counter_read(ctx.counters.echo_replies)));
            sample(expired_ttl, {{"worker", w}}, static_cast<double>(counter_read(ctx.counters.time_exceeded_sent)));
            sample(adopted, {{"worker", w}}, static_cast<double>(counter_read(ctx.counters.lb_adoptions)));
            sample(passed, {{"worker", w}}, static_cast<double>(counter_read(ctx.counters.lb_stateless_forwards)));
            if (!ctx.conn_table) return;
            sample(entries, {{"worker", w}}, static_cast<double>(opened - gone));
            sample(capacity, {{"worker", w}}, ctx.conn_table->capacity());
            sample(ipv6_entries, {{"worker", w}}, ctx.conn_table->ipv6_size());
            sample(ipv6_capacity, {{"worker", w}}, ctx.conn_table->ipv6_capacity());
            sample(inserts, {{"worker", w}}, static_cast<double>(opened));
            sample(expired, {{"worker", w}}, static_cast<double>(gone));
            sample(full, {{"worker", w}},
                   static_cast<double>(counter_read(ctx.counters.drops[static_cast<std::size_t>(DropReason::ct_table_full)])));
        });
        const RuleHitsRecord hits = view_.rules->read();
        MetricFamily& rule_hits = family("sluice_rule_hits_total", "New connections (first packets) decided by a firewall rule", MetricType::Counter);
        MetricFamily& rule_packets = family("sluice_rule_packets_total", "Packets of the connections a firewall rule allowed", MetricType::Counter);
        MetricFamily& rule_bytes = family("sluice_rule_bytes_total", "Bytes of the connections a firewall rule allowed", MetricType::Counter);
        for (std::size_t r = 0; r < hits.rules.size(); ++r) {
            const std::string& name = hits.rules[r].first;
            sample(rule_hits, {{"rule", name}}, static_cast<double>(hits.rules[r].second));
            sample(rule_packets, {{"rule", name}}, static_cast<double>(hits.traffic[r].first));
            sample(rule_bytes, {{"rule", name}}, static_cast<double>(hits.traffic[r].second));
        }
        sample(family("sluice_firewall_default_hits_total", "New connections no rule matched (the default action decided)", MetricType::Counter),
               {}, static_cast<double>(hits.default_hits));

        if (view_.backends) {
            const BackendsRecord lb = view_.backends->read();
            MetricFamily& up = family("sluice_backend_up", "1 when a backend passes its health checks (or has none)", MetricType::Gauge);
            MetricFamily& weight = family("sluice_backend_weight", "A backend's configured weight (0: draining)", MetricType::Gauge);
            MetricFamily& opened = family("sluice_backend_connections_total", "New connections given to a backend", MetricType::Counter);
            MetricFamily& active = family("sluice_backend_active_connections", "Tracked connections of a backend", MetricType::Gauge);
            MetricFamily& packets = family("sluice_backend_packets_total", "Packets of a backend's connections (both directions seen)", MetricType::Counter);
            MetricFamily& bytes = family("sluice_backend_bytes_total", "Bytes of a backend's connections (both directions seen)", MetricType::Counter);
            for (const BackendRecord& b : lb.backends) {
                const std::vector<ClientMetric::Label> labels{{"service", b.service}, {"backend", b.backend}};
                sample(up, labels, b.up);
                sample(weight, labels, b.weight);
                sample(opened, labels, static_cast<double>(b.new_connections));
                sample(active, labels, static_cast<double>(b.active_connections));
                sample(packets, labels, static_cast<double>(b.packets));
                sample(bytes, labels, static_cast<double>(b.bytes));
            }
        }

        if (view_.xdp) {
            const XdpRecord xdp = view_.xdp->read();
            if (!xdp.ports.empty()) {
                MetricFamily& frames = family("sluice_xdp_frames_total",
                                              "Frames sluice's XDP program steered, by verdict (sluice, kernel, other: neither IP nor ARP)",
                                              MetricType::Counter);
                MetricFamily& prefixes = family("sluice_xdp_prefixes", "Prefixes in a port's XDP steering map", MetricType::Gauge);
                for (const XdpPortRecord& p : xdp.ports) {
                    sample(frames, {{"port", p.port}, {"verdict", "sluice"}}, static_cast<double>(p.to_sluice));
                    sample(frames, {{"port", p.port}, {"verdict", "kernel"}}, static_cast<double>(p.to_kernel));
                    sample(frames, {{"port", p.port}, {"verdict", "other"}}, static_cast<double>(p.other));
                    sample(prefixes, {{"port", p.port}}, static_cast<double>(p.prefixes));
                }
            }
        }

        if (view_.bgp) {
            const BgpRecord bgp = view_.bgp->read();
            if (bgp.enabled) {
                MetricFamily& announced = family("sluice_bgp_vip_announced",
                                                 "1 while a VIP is in the routes BIRD last accepted from sluice (announced over BGP)",
                                                 MetricType::Gauge);
                MetricFamily& wanted = family("sluice_bgp_vip_wanted", "1 while sluice can serve a VIP (links up, min_healthy backends, not draining)",
                                              MetricType::Gauge);
                MetricFamily& announcements = family("sluice_bgp_announcements_total", "Times BIRD took a VIP in", MetricType::Counter);
                MetricFamily& withdrawals = family("sluice_bgp_withdrawals_total", "Times BIRD took a VIP out", MetricType::Counter);
                for (const BgpVipRecord& v : bgp.vips) {
                    sample(announced, {{"vip", v.vip}}, v.announced);
                    sample(wanted, {{"vip", v.vip}}, v.wanted);
                    sample(announcements, {{"vip", v.vip}}, static_cast<double>(v.announcements));
                    sample(withdrawals, {{"vip", v.vip}}, static_cast<double>(v.withdrawals));
                }
                sample(family("sluice_bgp_reconfigures_total", "BIRD reconfigurations sluice asked for that BIRD accepted", MetricType::Counter),
                       {}, static_cast<double>(bgp.reconfigures));
                sample(family("sluice_bgp_reconfigure_failures_total",
                              "Failed attempts to update BIRD (file not written, socket unreachable, timeout, BIRD refused)", MetricType::Counter),
                       {}, static_cast<double>(bgp.reconfigure_failures));
                sample(family("sluice_bgp_in_sync", "1 when BIRD runs with the VIPs sluice wants announced", MetricType::Gauge), {}, bgp.in_sync);
                sample(family("sluice_bgp_draining", "1 while sluice drains (VIPs withdrawn, stopping after bgp.drain_seconds)", MetricType::Gauge),
                       {}, bgp.draining);
            }
        }

        const ReloadRecord reload = view_.reload->read();
        MetricFamily& reloads = family("sluice_config_reloads_total", "Config reloads, by result", MetricType::Counter);
        sample(reloads, {{"result", "success"}}, static_cast<double>(reload.successes));
        sample(reloads, {{"result", "failure"}}, static_cast<double>(reload.failures));
        sample(family("sluice_config_last_reload_success", "1 when the last reload was applied", MetricType::Gauge), {}, reload.last_ok);
        sample(family("sluice_config_last_reload_timestamp_seconds", "When the last reload was attempted (0: never)", MetricType::Gauge), {},
               reload.last_attempt_unix);
        sample(family("sluice_config_info", "The running config (hash of the file's bytes)", MetricType::Gauge), {{"hash", reload.running_hash}}, 1);
        return {std::make_move_iterator(out.begin()), std::make_move_iterator(out.end())};
    }

private:
    const StatusView& view_;
    std::string version_;
};

PrometheusExporter::PrometheusExporter(const std::string& listen, const StatusView& view, std::string version)
    : collector_(std::make_shared<SluiceCollector>(view, std::move(version))),
      exposer_(std::make_unique<prometheus::Exposer>(listen, 1)) {
    exposer_->RegisterCollectable(collector_);
}

PrometheusExporter::~PrometheusExporter() = default;  // the Exposer stops its HTTP thread first

}  // namespace sluice

#include "pipeline/firewall_stage.hpp"

#include <algorithm>

#include <rte_cycles.h>

#include <rte_hash_crc.h>
#include <rte_lpm.h>
#include <rte_lpm6.h>

#include "conntrack/tcp_state.hpp"
#include "lb/maglev.hpp"
#include "packet/packet_meta.hpp"
#include "packet/reject.hpp"

namespace sluice {
namespace {

enum class Fate : uint8_t { pass, drop, reject, classify };

constexpr uint8_t kIpProtoTcp = 6;

// Counts a packet under the rule that allowed it (by its stable id; entries keep it).
inline void count_rule_traffic(LcoreContext& ctx, uint32_t stable_rule, uint32_t bytes) {
    if (stable_rule >= kMaxCountedRules) return;  // the default action, or past the counted range
    RuleTraffic& traffic = ctx.rule_traffic[stable_rule];
    counter_add(traffic.packets);
    counter_add(traffic.bytes, bytes);
}
inline void count_rule_traffic(LcoreContext& ctx, const ConnEntry& entry, uint32_t bytes) {
    count_rule_traffic(ctx, entry.rule_index, bytes);
}

// Takes a token from the rule's bucket (or its source's), refilled for the time since the bucket's last use.
bool admit(const FirewallTables& fw, uint32_t rule, unsigned slot, const FiveTuple& tuple, uint64_t now_tsc) {
    const RateLimit& limit = fw.limits[rule];
    RateLimiterState& state = *fw.limiter;
    TokenBucket* bucket = &state.buckets[slot * state.buckets_per_slot + state.first_bucket[rule]];
    if (limit.per_source) {
        const uint32_t tag = tuple.family == IpFamily::ipv4 ? rte_hash_crc_4byte(tuple.src.words[0], 0)
                                                            : rte_hash_crc(tuple.src.bytes, 16, 0);
        bucket += tag % kSourceBuckets;
        if (bucket->source_tag != tag) *bucket = TokenBucket{limit.burst, now_tsc, tag, 0};  // a new source: full bucket
    }
    return take_token(*bucket, limit, now_tsc);
}

// Hands a decision to the control thread's log, within the worker's log budget (a token bucket refilled at
// firewall.log_rate, holding one second's worth).
void log_decision(LcoreContext& ctx, const FirewallTables& fw, const FiveTuple& tuple, uint32_t rule, RuleAction action,
                  uint16_t in_port, uint64_t now_tsc) {
    const double rate_per_s = fw.log_tokens_per_tsc * static_cast<double>(rte_get_tsc_hz());
    ctx.log_tokens = std::min(rate_per_s, ctx.log_tokens + static_cast<double>(now_tsc - ctx.log_refill_tsc) * fw.log_tokens_per_tsc);
    ctx.log_refill_tsc = now_tsc;
    DecisionLogRecord record{tuple, rule, in_port, action, 0};
    if (ctx.log_tokens < 1.0 || !ctx.decision_log || rte_ring_mp_enqueue_elem(ctx.decision_log, &record, sizeof record) != 0) {
        counter_add(ctx.counters.log_suppressed);
        return;
    }
    ctx.log_tokens -= 1.0;
}

}  // namespace

uint16_t firewall_burst(LcoreContext& ctx, const Snapshot& snapshot, rte_mbuf** pkts, uint16_t count, uint64_t now_tsc,
                        PacketRoute* routes) {
    if (count == 0) return 0;
    const FirewallTables& fw = *snapshot.firewall;
    const LbTables& lb = *snapshot.lb;
    ConnTable& table = *ctx.conn_table;
    FiveTuple tuples[kBurst];
    const FiveTuple* tuple_ptrs[kBurst] = {};  // {}: GCC cannot see that count >= 1 fills them
    uint32_t hashes[kBurst] = {};
    uint8_t tcp_flags[kBurst];
    int32_t positions[kBurst];
    Fate fate[kBurst];
    DropReason reason[kBurst];
    ConnState opening[kBurst];
    tcp::Pickup pickup[kBurst];     // a mid-stream TCP packet to a dsr or tunnel VIP (docs/architecture.md)
    uint32_t pickup_rule[kBurst];   // pickup == forward: the stable id of the rule that allowed it
    PacketRoute route[kBurst];

    for (uint16_t i = 0; i < count; ++i) {
        const PacketMeta& meta = *packet_meta(pkts[i]);
        tuple_from_meta(rte_pktmbuf_mtod(pkts[i], const uint8_t*), rte_pktmbuf_data_len(pkts[i]), meta, tuples[i], tcp_flags[i]);
        tuple_ptrs[i] = &tuples[i];
        hashes[i] = meta.flow_hash;
        route[i] = PacketRoute{};
    }
    table.lookup_bulk(tuple_ptrs, hashes, count, positions);

    // A packet of a tracked connection (found under either key): tracked, counted, and routed to its backend.
    const auto settle_known = [&](uint16_t i, int32_t position, bool icmp_error) {
        bool via_alias;
        const int32_t conn = table.resolve(position, via_alias);
        if (icmp_error) {
            fate[i] = Fate::pass;  // related to a tracked connection
            return;
        }
        const bool reply = via_alias || table.is_reply(conn, tuples[i]);
        // A later fragment has no TCP header: it belongs to the connection but moves no state.
        const PacketMeta& meta = *packet_meta(pkts[i]);
        const bool later_fragment = (meta.flags & kMetaFragment) && meta.l4_offset == 0;
        if (!later_fragment &&
            table.track_direction(conn, reply, tcp_flags[i], rte_pktmbuf_pkt_len(pkts[i]), now_tsc) != TrackVerdict::ok) {
            fate[i] = Fate::drop;
            reason[i] = DropReason::ct_invalid;
            return;
        }
        const ConnEntry& entry = table.entry(conn);
        fate[i] = Fate::pass;
        count_rule_traffic(ctx, entry, rte_pktmbuf_pkt_len(pkts[i]));
        if (entry.backend == 0) return;
        const uint32_t backend = entry.backend - 1;
        if (SLUICE_UNLIKELY(backend >= lb.backends.size() ||
                            (lb.backends[backend].removed && lb.backends[backend].drop_when_removed))) {
            table.remove(conn);
            fate[i] = Fate::drop;
            reason[i] = DropReason::lb_backend_removed;
            return;
        }
        BackendTraffic& traffic = ctx.backend_traffic[backend];
        counter_add(traffic.packets);
        counter_add(traffic.bytes, rte_pktmbuf_pkt_len(pkts[i]));
        // Replies of dsr and tunnel connections do not come back through sluice; if they do, they are routed.
        if (!reply) route[i] = PacketRoute{conn, backend, RouteKind::to_backend};
        else if (via_alias) route[i] = PacketRoute{position, backend, RouteKind::nat_reply};  // the alias: it holds the origin
    };

    // Known connections and ICMP errors are settled here; the rest wait for the rule set.
    uint16_t v4_new[kBurst], v6_new[kBurst], v4_count = 0, v6_count = 0;
    // Packets that cannot open a connection, looked up again once this burst's new connections exist: a flow's
    // SYN and its next packet often share a burst (dsr and tunnel see no SYN+ACK in between).
    uint16_t retry[kBurst], retry_count = 0;
    for (uint16_t i = 0; i < count; ++i) {
        const bool icmp_error = packet_meta(pkts[i])->flags & kMetaIcmpError;
        if (positions[i] >= 0) {
            settle_known(i, positions[i], icmp_error);
            continue;
        }
        if (icmp_error) {
            fate[i] = Fate::drop;
            reason[i] = DropReason::icmp_unrelated;
            continue;
        }
        if (lb.enabled() && SLUICE_UNLIKELY(lb.is_pool_address(tuples[i].family, tuples[i].dst))) {
            fate[i] = Fate::drop;  // a pool address is sluice's own: only replies of its NAT connections are welcome
            reason[i] = DropReason::nat_no_connection;
            continue;
        }
        const int32_t service = lb.enabled() ? lb.find_service(tuples[i]) : -1;
        if (service < 0 && !fw.enabled) {
            fate[i] = Fate::pass;  // no firewall: only balanced connections are tracked
            continue;
        }
        const PacketMeta& meta = *packet_meta(pkts[i]);
        if (SLUICE_UNLIKELY((meta.flags & kMetaFragment) && meta.l4_offset == 0)) {
            fate[i] = Fate::drop;  // only a first fragment (it has the L4 header) may open a connection
            reason[i] = DropReason::fragment_unmatched;
            retry[retry_count++] = i;  // its first fragment may have opened the connection in this very burst
            continue;
        }
        route[i].backend = service < 0 ? kNoService : static_cast<uint32_t>(service);  // the service, until decided
        pickup[i] = service >= 0 && tuples[i].proto == kIpProtoTcp ? tcp::one_way_pickup(tcp::classify(tcp_flags[i]))
                                                                   : tcp::Pickup::none;
        if (SLUICE_UNLIKELY(pickup[i] != tcp::Pickup::none)) {
            // A packet of a connection this instance never saw open: behind ECMP, another instance opened it and
            // died, or ECMP rehashed. dsr and tunnel services pick it up by Maglev (the same table on every
            // instance gives the same backend) once the rules allow it; nat cannot (the backend knows the
            // connection by another instance's pool address and port), whatever loose_pickup says.
            if (lb.services[service].mode == LbMode::nat) {
                fate[i] = Fate::drop;
                reason[i] = DropReason::lb_nat_no_state;
                retry[retry_count++] = i;
                continue;
            }
            opening[i] = ConnState::tcp_established;
        } else if (ConnTable::initial_state(tuples[i], tcp_flags[i], fw.loose_pickup, opening[i]) != TrackVerdict::ok) {
            fate[i] = Fate::drop;
            reason[i] = DropReason::ct_no_connection;
            retry[retry_count++] = i;
            continue;
        }
        fate[i] = Fate::classify;
        if (tuples[i].family == IpFamily::ipv4) v4_new[v4_count++] = i;
        else v6_new[v6_count++] = i;
    }

    // A new connection the rules allowed: tracked, and balanced when it is for a service.
    const auto open_connection = [&](uint16_t i, uint32_t stable_rule) {
        const uint32_t service_index = route[i].backend;
        route[i] = PacketRoute{};
        uint32_t backend = 0;
        const LbService* service = service_index == kNoService ? nullptr : &lb.services[service_index];
        if (service) {
            const uint16_t local = service->maglev[maglev_slot(hashes[i], service->table_size)];
            if (SLUICE_UNLIKELY(local == kMaglevNoBackend)) {
                fate[i] = Fate::drop;
                reason[i] = DropReason::lb_no_backend;
                return;
            }
            backend = service->backend_ids[local];
            if (SLUICE_UNLIKELY(pickup[i] == tcp::Pickup::forward)) {
                // A FIN or RST with no connection: to the Maglev backend, without an entry. Looked up again
                // below (an entry this burst made for the flow takes it), counted once that is settled.
                route[i] = PacketRoute{-1, backend, RouteKind::to_backend};
                pickup_rule[i] = stable_rule;
                fate[i] = Fate::pass;
                retry[retry_count++] = i;
                return;
            }
        }
        // The worker's new-connection cap: checked here, after the rules allowed the connection (a denied SYN
        // takes no token) and before it costs an entry. Known connections never come this far.
        const bool capped = snapshot.new_connections.tokens_per_tsc > 0;
        if (capped && !take_token(ctx.new_connections, snapshot.new_connections, now_tsc)) {
            fate[i] = Fate::drop;
            reason[i] = DropReason::new_conn_limited;
            return;
        }
        // insert() hands back the entry a second new packet of the same flow in this burst already made.
        const uint32_t before = table.size();
        const int32_t position = table.insert(tuples[i], hashes[i], opening[i], stable_rule, now_tsc);
        if (capped && table.size() == before) ctx.new_connections.tokens += 1.0;  // no entry made: the token goes back
        if (position < 0) {
            fate[i] = Fate::drop;
            reason[i] = DropReason::ct_table_full;
            return;
        }
        ConnEntry& entry = table.entry(position);
        if (table.size() != before) {
            counter_add(ctx.counters.conn_inserts);
            if (pickup[i] == tcp::Pickup::adopt) counter_add(ctx.counters.lb_adoptions);
            entry.in_port = pkts[i]->port;
            if (service) {
                const LbBackend& target = lb.backends[backend];
                if (service->mode == LbMode::nat) {
                    const std::vector<uint8_t>& pool = tuples[i].family == IpFamily::ipv4 ? lb.pool_v4 : lb.pool_v6;
                    const uint8_t address = pool[hashes[i] % pool.size()];
                    const uint16_t port = ctx.nat_ports->allocate(address);
                    if (SLUICE_UNLIKELY(port == 0)) {
                        table.remove(position);
                        fate[i] = Fate::drop;
                        reason[i] = DropReason::nat_ports_exhausted;
                        return;
                    }
                    entry.nat_port = port;
                    entry.nat_address = address;
                    entry.backend = backend + 1;  // from here on, removal releases the port and counts it closed
                    FiveTuple reply_tuple;
                    reply_tuple.src = target.address;
                    reply_tuple.dst = lb.pool[address];
                    reply_tuple.src_port = target.port_be ? target.port_be : tuples[i].dst_port;
                    reply_tuple.dst_port = rte_cpu_to_be_16(port);
                    reply_tuple.proto = tuples[i].proto;
                    reply_tuple.family = tuples[i].family;
                    counter_add(ctx.backend_traffic[backend].new_connections);
                    const int32_t alias = table.insert_alias(reply_tuple, symmetric_flow_hash(reply_tuple), position);
                    if (SLUICE_UNLIKELY(alias < 0)) {
                        table.remove(position);
                        fate[i] = Fate::drop;
                        reason[i] = DropReason::ct_table_full;
                        return;
                    }
                    table.set_origin(alias, tuples[i].src, tuples[i].src_port, tuples[i].dst, tuples[i].dst_port);
                } else {
                    entry.backend = backend + 1;
                    entry.flags |= kConnFlagOneWay;  // the backend answers the client directly
                    counter_add(ctx.backend_traffic[backend].new_connections);
                }
            }
        }
        table.track(position, tuples[i], tcp_flags[i], rte_pktmbuf_pkt_len(pkts[i]), now_tsc);
        count_rule_traffic(ctx, entry, rte_pktmbuf_pkt_len(pkts[i]));
        if (entry.backend != 0) {
            BackendTraffic& traffic = ctx.backend_traffic[entry.backend - 1];
            counter_add(traffic.packets);
            counter_add(traffic.bytes, rte_pktmbuf_pkt_len(pkts[i]));
            route[i] = PacketRoute{position, entry.backend - 1, RouteKind::to_backend};
        }
        fate[i] = Fate::pass;
    };

    // One rte_acl call per family over the whole burst's new connections.
    const std::size_t hit_base = static_cast<std::size_t>(ctx.qsbr_thread_id) * (fw.hits ? fw.hits->rule_count + 1 : 0);
    const auto decide = [&](const AclClassifier* acl, const std::vector<uint32_t>& rule_ids, const uint16_t* which, uint16_t n) {
        if (n == 0) return;
        if (!fw.enabled) {  // services without a firewall: every new connection to a VIP is allowed
            for (uint16_t k = 0; k < n; ++k) open_connection(which[k], UINT32_MAX);
            return;
        }
        const FiveTuple* batch[kBurst] = {};  // {}: GCC cannot see that n >= 1 fills them
        uint16_t in_ports[kBurst] = {};
        uint32_t matched[kBurst];
        for (uint16_t k = 0; k < n; ++k) {
            batch[k] = &tuples[which[k]];
            in_ports[k] = pkts[which[k]]->port;
            matched[k] = AclClassifier::kNoMatch;
        }
        if (acl) acl->classify(batch, in_ports, matched, n);
        for (uint16_t k = 0; k < n; ++k) {
            const uint16_t i = which[k];
            const uint32_t rule = matched[k] == AclClassifier::kNoMatch ? UINT32_MAX : rule_ids[matched[k]];
            const RuleAction action = rule == UINT32_MAX ? fw.default_action : fw.actions[rule];
            if (fw.hits) counter_add(fw.hits->hits[hit_base + (rule == UINT32_MAX ? fw.hits->rule_count : rule)]);
            if (SLUICE_UNLIKELY(rule == UINT32_MAX ? fw.log_default : fw.log_rule[rule]))
                log_decision(ctx, fw, tuples[i], rule, action, pkts[i]->port, now_tsc);
            if (action == RuleAction::allow && rule != UINT32_MAX && fw.limiter && fw.limits[rule].tokens_per_tsc > 0 &&
                !admit(fw, rule, ctx.qsbr_thread_id, tuples[i], now_tsc)) {
                fate[i] = Fate::drop;
                reason[i] = DropReason::rate_limited;
            } else if (action == RuleAction::allow) {
                open_connection(i, rule == UINT32_MAX ? UINT32_MAX : fw.stable_ids[rule]);
            } else {
                fate[i] = action == RuleAction::reject ? Fate::reject : Fate::drop;
                reason[i] = action == RuleAction::reject ? DropReason::rule_reject : DropReason::rule_deny;
            }
        }
    };
    decide(fw.acl_v4.get(), fw.v4_rule_ids, v4_new, v4_count);
    decide(fw.acl_v6.get(), fw.v6_rule_ids, v6_new, v6_count);

    if (retry_count) {
        const FiveTuple* again[kBurst] = {};
        uint32_t again_hashes[kBurst] = {};
        int32_t found[kBurst];
        for (uint16_t k = 0; k < retry_count; ++k) {
            again[k] = &tuples[retry[k]];
            again_hashes[k] = hashes[retry[k]];
            found[k] = -1;
        }
        if (table.size() != 0) table.lookup_bulk(again, again_hashes, retry_count, found);
        for (uint16_t k = 0; k < retry_count; ++k) {
            const uint16_t i = retry[k];
            if (found[k] >= 0) {
                route[i] = PacketRoute{};
                settle_known(i, found[k], false);
            } else if (route[i].kind == RouteKind::to_backend) {  // a FIN or RST passed on without an entry
                const uint32_t bytes = rte_pktmbuf_pkt_len(pkts[i]);
                counter_add(ctx.counters.lb_stateless_forwards);
                count_rule_traffic(ctx, pickup_rule[i], bytes);
                BackendTraffic& traffic = ctx.backend_traffic[route[i].backend];
                counter_add(traffic.packets);
                counter_add(traffic.bytes, bytes);
            }
        }
    }

    rte_mbuf* dropped[kBurst];
    uint16_t kept = 0, dropped_count = 0;
    for (uint16_t i = 0; i < count; ++i) {
        rte_mbuf* m = pkts[i];
        switch (fate[i]) {
        case Fate::pass:
        case Fate::classify:  // unreachable: every new packet was decided
            if (routes) routes[kept] = route[i];
            pkts[kept++] = m;
            break;
        case Fate::reject:
            ctx.counters.drop(DropReason::rule_reject);
            if (make_reject(m, *packet_meta(m), snapshot.port_mac[m->port])) {
                PortCounters& out = ctx.counters.ports[m->port];
                counter_add(out.tx_packets);
                counter_add(out.tx_bytes, rte_pktmbuf_pkt_len(m));
                counter_add(ctx.counters.rejects_sent);
                rte_eth_tx_buffer(m->port, ctx.tx_queue, ctx.tx_buffers[m->port], m);
            } else {
                dropped[dropped_count++] = m;
            }
            break;
        case Fate::drop:
            ctx.counters.drop(reason[i]);
            dropped[dropped_count++] = m;
            break;
        }
    }
    if (dropped_count) rte_pktmbuf_free_bulk(dropped, dropped_count);
    return kept;
}

uint16_t blocklist_burst(LcoreContext& ctx, const FirewallTables& fw, rte_mbuf** pkts, uint16_t count) {
    uint32_t v4_sources[kBurst];
    uint32_t v4_hops[kBurst];
    uint16_t v4_index[kBurst], v4_count = 0;
    uint8_t v6_sources[kBurst][16];
    int32_t v6_hops[kBurst];
    uint16_t v6_index[kBurst], v6_count = 0;
    bool blocked[kBurst] = {};
    for (uint16_t i = 0; i < count; ++i) {
        const PacketMeta& meta = *packet_meta(pkts[i]);
        const uint8_t* ip = rte_pktmbuf_mtod_offset(pkts[i], const uint8_t*, meta.l3_offset);
        if (meta.family == IpFamily::ipv4 && fw.blocklist_v4) {
            uint32_t be;
            std::memcpy(&be, ip + 12, 4);
            v4_sources[v4_count] = rte_be_to_cpu_32(be);  // rte_lpm works in host byte order
            v4_index[v4_count++] = i;
        } else if (meta.family == IpFamily::ipv6 && fw.blocklist_v6) {
            std::memcpy(v6_sources[v6_count], ip + 8, 16);
            v6_index[v6_count++] = i;
        }
    }
    if (v4_count) {
        rte_lpm_lookup_bulk(fw.blocklist_v4, v4_sources, v4_hops, v4_count);
        for (uint16_t k = 0; k < v4_count; ++k) blocked[v4_index[k]] = v4_hops[k] & RTE_LPM_LOOKUP_SUCCESS;
    }
    if (v6_count) {
        rte_lpm6_lookup_bulk_func(fw.blocklist_v6, v6_sources, v6_hops, v6_count);
        for (uint16_t k = 0; k < v6_count; ++k) blocked[v6_index[k]] = v6_hops[k] >= 0;
    }
    rte_mbuf* dropped[kBurst];
    uint16_t kept = 0, dropped_count = 0;
    for (uint16_t i = 0; i < count; ++i) {
        if (blocked[i]) dropped[dropped_count++] = pkts[i];
        else pkts[kept++] = pkts[i];
    }
    if (dropped_count) {
        ctx.counters.drop(DropReason::blocklisted, dropped_count);
        rte_pktmbuf_free_bulk(dropped, dropped_count);
    }
    return kept;
}

}  // namespace sluice

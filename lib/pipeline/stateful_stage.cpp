#include "pipeline/stateful_stage.hpp"

#include "common/ip_proto.hpp"
#include "packet/reject.hpp"
#include "pipeline/stateful_burst.hpp"

namespace sluice {
namespace {

// Phase 1: every packet's tuple, and one bulk lookup of the connection table.
void gather(StatefulBurst& b) {
    const FiveTuple* tuple_ptrs[kBurst] = {};  // {}: GCC cannot see that count >= 1 fills them
    for (uint16_t i = 0; i < b.count; ++i) {
        const PacketMeta& meta = b.meta(i);
        tuple_from_meta(rte_pktmbuf_mtod(b.mbuf(i), const uint8_t*), rte_pktmbuf_data_len(b.mbuf(i)), meta, b.tuples[i],
                        b.tcp_flags[i]);
        tuple_ptrs[i] = &b.tuples[i];
        b.hashes[i] = meta.flow_hash;
        b.route[i] = PacketRoute{};
    }
    b.table.lookup_bulk(tuple_ptrs, b.hashes, b.count, b.positions, &b.source_low);
}

// An ICMP error quoting a packet of a tracked connection passes. A nat connection's error goes where the packet it
// quotes came from, translated as that packet was: quoting sluice's packet to the backend (found by the alias), or
// its reply to the client.
void settle_icmp_error(StatefulBurst& b, uint16_t i, int32_t conn, int32_t position, bool via_alias) {
    b.fate[i] = Fate::pass;
    const ConnEntry& entry = b.table.entry(conn);
    // A fragmented error is left as it is: its ICMP checksum covers fragments this one does not hold.
    if (entry.nat_port == 0 || entry.backend == 0 || entry.backend - 1 >= b.lb.backends.size() ||
        (b.meta(i).flags & kMetaFragment))
        return;
    if (via_alias) b.route[i] = PacketRoute{position, entry.backend - 1, RouteKind::nat_icmp_to_client};
    else if (b.table.is_reply(conn, b.tuples[i]))
        b.route[i] = PacketRoute{conn, entry.backend - 1, RouteKind::nat_icmp_to_backend};
}

// A packet of a tracked connection conn (found under either key, at position; via_alias: by its NAT key, as
// ConnTable::resolve tells): tracked, counted, and routed to its backend.
void settle_known(StatefulBurst& b, uint16_t i, int32_t position, int32_t conn, bool via_alias, bool icmp_error) {
    if (icmp_error) {
        settle_icmp_error(b, i, conn, position, via_alias);
        return;
    }
    const bool reply = via_alias || b.table.is_reply_from(conn, (b.source_low >> i) & 1);
    if (SLUICE_UNLIKELY(b.table.entry(conn).flags & kConnFlagSynProxy)) {
        if ((b.table.entry(conn).flags & kConnFlagSynProxyPending) &&
            !syn_proxy::settle_pending(b, i, conn, position, via_alias))
            return;
        if (via_alias && tcp::classify(b.tcp_flags[i]) == tcp::Kind::synack) {
            syn_proxy::acknowledge_again(b, i, position);
            return;
        }
    }
    // A later fragment has no TCP header: it belongs to the connection but moves no state.
    const bool later_fragment = (b.meta(i).flags & kMetaFragment) && b.meta(i).l4_offset == 0;
    if (!later_fragment && b.tuples[i].proto == kIpProtoTcp && !admit_tcp_segment(b, i, conn, reply)) return;
    const ConnState before = b.table.entry(conn).state;
    if (!later_fragment &&
        b.table.track_direction(conn, reply, b.tcp_flags[i], b.now_tsc, b.now_tick) != TrackVerdict::ok) {
        b.drop(i, DropReason::ct_invalid);
        return;
    }
    ConnEntry& entry = b.table.entry(conn);
    // A connection learned from a peer is this instance's from its first packet here (sync_steps.hpp).
    if (SLUICE_UNLIKELY(entry.flags & kConnFlagLearned)) entry.flags &= static_cast<uint8_t>(~kConnFlagLearned);
    if (SLUICE_UNLIKELY(entry.state != before)) sync_event(b.ctx, b.table, conn, SyncEventKind::updated, b.now_tsc);
    b.fate[i] = Fate::pass;
    count_rule_traffic(b.ctx, entry.rule_index, b.length(i));
    if (entry.backend == 0) return;
    const uint32_t backend = entry.backend - 1;
    if (SLUICE_UNLIKELY(backend >= b.lb.backends.size() ||
                        (b.lb.backends[backend].removed && b.lb.backends[backend].drop_when_removed))) {
        b.forget(conn);
        b.drop(i, DropReason::lb_backend_removed);
        return;
    }
    count_backend_traffic(b.ctx, backend, b.length(i));
    // Replies of dsr and tunnel connections do not come back through sluice; if they do, they are routed.
    if (!reply) b.route[i] = PacketRoute{conn, backend, RouteKind::to_backend};
    else if (via_alias)
        b.route[i] = PacketRoute{position, backend, RouteKind::nat_reply};  // the alias holds the origin
}

// Phase 2: packets of known connections are settled; ICMP errors quoting none are dropped; the rest are fresh.
void settle_known_connections(StatefulBurst& b) {
    for (uint16_t i = 0; i < b.count; ++i) {
        const bool icmp_error = b.meta(i).flags & kMetaIcmpError;
        int32_t& position = b.positions[i];
        int32_t conn = -1;
        bool via_alias = false;
        if (position >= 0 && SLUICE_UNLIKELY(!(b.table.entry(position).flags & kConnFlagLive))) {
            position = -1;  // an earlier packet of this burst ended the connection
        } else if (position >= 0) {
            // A connection past its timeout is over, whether or not expiry's bounded sweep reached it yet (a pass
            // over a large table takes seconds): removed, counted as expired, and the packet is a new one.
            conn = b.table.resolve(position, via_alias);
            if (SLUICE_UNLIKELY(ConnTable::expired_at(b.table.entry(conn), b.now_tick))) {
                b.forget(conn);
                position = -1;
            }
        }
        if (position >= 0) settle_known(b, i, position, conn, via_alias, icmp_error);
        else if (icmp_error) b.drop(i, DropReason::icmp_unrelated);
        else b.fresh[b.fresh_count++] = i;
    }
}

// How a fresh TCP or UDP packet may open a connection (opening[i], pickup[i], proxy[i]); false when it cannot and
// was dropped. The drops are retried: an earlier packet of this burst may open the connection it belongs to.
bool triage_opening(StatefulBurst& b, uint16_t i, int32_t service) {
    const FiveTuple& tuple = b.tuples[i];
    const bool tcp = tuple.proto == kIpProtoTcp;
    const tcp::Kind kind = tcp ? tcp::classify(b.tcp_flags[i]) : tcp::Kind::bad;
    b.pickup[i] = service >= 0 && tcp ? tcp::one_way_pickup(kind) : tcp::Pickup::none;
    if (SLUICE_UNLIKELY(service >= 0 && b.lb.services[service].syn_proxy && tcp &&
                        (kind == tcp::Kind::syn || kind == tcp::Kind::ack)))
        return syn_proxy::triage(b, i, kind);  // a SYN is answered with a cookie; an ACK must bring one back
    if (SLUICE_UNLIKELY(b.pickup[i] != tcp::Pickup::none)) {
        // A packet of a connection this instance never saw open: behind ECMP, another instance opened it and
        // died, or ECMP rehashed. dsr and tunnel services pick it up by Maglev (the same table on every instance
        // gives the same backend) once the rules allow it; nat cannot (the backend knows the connection by another
        // instance's pool address and port), whatever loose_pickup says.
        if (b.lb.services[service].mode == LbMode::nat) {
            b.drop_and_retry(i, DropReason::lb_nat_no_state);
            return false;
        }
        b.opening[i] = ConnState::tcp_established;
        return true;
    }
    if (ConnTable::initial_state(tuple, b.tcp_flags[i], b.fw.loose_pickup, b.opening[i]) != TrackVerdict::ok) {
        b.drop_and_retry(i, DropReason::ct_no_connection);
        return false;
    }
    return true;
}

// Phase 3, one fresh packet: sluice's own addresses first, then what the destination is (a service or not), then
// whether it can open a connection at all; those that can wait for the rules of their family.
void triage(StatefulBurst& b, uint16_t i) {
    const FiveTuple& tuple = b.tuples[i];
    const bool echo = SLUICE_UNLIKELY(tuple.proto == kIpProtoIcmp || tuple.proto == kIpProtoIcmpv6) &&
                      is_echo_request(b.mbuf(i), b.meta(i)) &&
                      owns(b.snapshot, tuple.family, tuple.dst, OwnedAddress::kAnyPort);
    const NewPacketDestination destination = new_packet_destination(b.snapshot, tuple, echo);
    switch (destination.target) {
    case NewPacketTarget::nat_pool: b.drop(i, DropReason::nat_no_connection); return;
    // sluice has no local stack to deliver it to, and forwarding it could loop: the next hop may well route
    // sluice's own address (an announced VIP) straight back.
    case NewPacketTarget::own_address: b.drop(i, DropReason::to_own_address); return;
    case NewPacketTarget::untracked:  // no firewall: only balanced connections are tracked
        if (echo) answer_echo(b, i);
        else b.fate[i] = Fate::pass;
        return;
    case NewPacketTarget::service:
    case NewPacketTarget::rules: break;
    }
    const int32_t service = destination.target == NewPacketTarget::service ? destination.service : -1;
    if (SLUICE_UNLIKELY((b.meta(i).flags & kMetaFragment) && b.meta(i).l4_offset == 0)) {
        // Only a first fragment (it has the L4 header) may open a connection; it may have, in this very burst.
        b.drop_and_retry(i, DropReason::fragment_unmatched);
        return;
    }
    b.route[i].backend = service < 0 ? kNoService : static_cast<uint32_t>(service);  // the service, until opened
    b.proxy[i] = SynProxyStep::none;
    b.echo_to_us[i] = echo;
    if (!triage_opening(b, i, service)) return;
    b.fate[i] = Fate::classify;
    if (service >= 0) b.backend_hashes[i] = stable_flow_hash(tuple);  // not for packets dropped above
    const int family = tuple.family == IpFamily::ipv4 ? 0 : 1;
    b.by_family[family][b.family_count[family]++] = i;
}

// Phase 7: packets that could not open a connection (or were sent on without one) are looked up again, now that
// this burst's new connections exist.
void retry_unopened(StatefulBurst& b) {
    if (b.retry_count == 0) return;
    const FiveTuple* again[kBurst] = {};
    uint32_t again_hashes[kBurst] = {};
    int32_t found[kBurst];
    for (uint16_t k = 0; k < b.retry_count; ++k) {
        again[k] = &b.tuples[b.retry[k]];
        again_hashes[k] = b.hashes[b.retry[k]];
        found[k] = -1;
    }
    if (b.table.size() != 0) b.table.lookup_bulk(again, again_hashes, b.retry_count, found);
    for (uint16_t k = 0; k < b.retry_count; ++k) {
        const uint16_t i = b.retry[k];
        if (found[k] >= 0) {
            b.route[i] = PacketRoute{};
            bool via_alias;
            const int32_t conn = b.table.resolve(found[k], via_alias);
            settle_known(b, i, found[k], conn, via_alias, false);
        } else if (b.route[i].kind == RouteKind::to_backend) {  // a FIN or RST passed on without an entry
            counter_add(b.ctx.counters.lb_stateless_forwards);
            count_rule_traffic(b.ctx, b.pickup_rule[i], b.length(i));
            count_backend_traffic(b.ctx, b.route[i].backend, b.length(i));
        }
    }
}

// Phase 8: the kept packets move to the front, rejects and answers leave by their ingress port, drops are counted
// by reason and freed in one call.
uint16_t emit(StatefulBurst& b, PacketRoute* routes) {
    rte_mbuf* dropped[kBurst];
    uint16_t kept = 0, dropped_count = 0;
    for (uint16_t i = 0; i < b.count; ++i) {
        rte_mbuf* m = b.mbuf(i);
        switch (b.fate[i]) {
        case Fate::pass:
        case Fate::classify:  // unreachable: every fresh packet was decided
            if (routes) routes[kept] = b.route[i];
            b.pkts[kept++] = m;
            break;
        case Fate::reject:
            b.ctx.counters.drop(DropReason::rule_reject);
            if (write_error_reply(b.ctx, b.snapshot, b.now_tsc,
                                  [&] { return make_reject(m, *packet_meta(m), b.snapshot.port_mac[m->port]); })) {
                counter_add(b.ctx.counters.rejects_sent);
                send_out(b.ctx, m->port, m);
            } else {
                dropped[dropped_count++] = m;
            }
            break;
        case Fate::answer: send_out(b.ctx, m->port, m); break;
        case Fate::drop:
            b.ctx.counters.drop(b.reason[i]);
            dropped[dropped_count++] = m;
            break;
        }
    }
    if (dropped_count) rte_pktmbuf_free_bulk(dropped, dropped_count);
    return kept;
}

}  // namespace

void answer_echo(StatefulBurst& b, uint16_t i) {
    rte_mbuf* m = b.mbuf(i);
    if (!make_echo_reply(m, b.meta(i), b.snapshot.port_mac[m->port])) {
        b.drop(i, DropReason::echo_unanswered);
        return;
    }
    counter_add(b.ctx.counters.echo_replies);
    b.fate[i] = Fate::answer;
}

NewPacketDestination new_packet_destination(const Snapshot& snapshot, const FiveTuple& tuple, bool echo) {
    const LbTables& lb = *snapshot.lb;
    if (!echo && lb.enabled() && SLUICE_UNLIKELY(lb.nat_pool.contains(tuple.family, tuple.dst)))
        return {NewPacketTarget::nat_pool, LbTables::kNoVip};
    const int32_t service = lb.enabled() && !echo ? lb.find_service(tuple) : LbTables::kNoVip;
    // (A VIP may also be a port's address: its services' ports are served.)
    if (SLUICE_UNLIKELY(service == LbTables::kVipUnserved ||
                        (service == LbTables::kNoVip && !echo && is_port_address(snapshot, tuple.family, tuple.dst))))
        return {NewPacketTarget::own_address, LbTables::kNoVip};
    if (service >= 0) return {NewPacketTarget::service, service};
    return {snapshot.firewall->enabled ? NewPacketTarget::rules : NewPacketTarget::untracked, LbTables::kNoVip};
}

uint16_t stateful_burst(LcoreContext& ctx, const Snapshot& snapshot, rte_mbuf** pkts, uint16_t count, uint64_t now_tsc,
                        PacketRoute* routes) {
    if (count == 0) return 0;
    StatefulBurst b(ctx, snapshot, pkts, count, now_tsc);
    gather(b);
    settle_known_connections(b);
    for (uint16_t k = 0; k < b.fresh_count; ++k) triage(b, b.fresh[k]);
    decide(b, IpFamily::ipv4);
    decide(b, IpFamily::ipv6);
    retry_unopened(b);
    return emit(b, routes);
}

}  // namespace sluice

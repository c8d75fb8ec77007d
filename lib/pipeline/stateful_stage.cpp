#include "pipeline/stateful_stage.hpp"

#include <algorithm>

#include <rte_cycles.h>

#include "common/ip_proto.hpp"
#include "lb/lb_decision.hpp"
#include "packet/reject.hpp"
#include "pipeline/stateful_burst.hpp"

namespace sluice {
namespace {

// Counts a packet under the rule that allowed it (by its stable id; entries keep it).
inline void count_rule_traffic(LcoreContext& ctx, uint32_t stable_rule, uint32_t bytes) {
    if (stable_rule >= kMaxCountedRules) return;  // the default action, or past the counted range
    RuleTraffic& traffic = ctx.rule_traffic[stable_rule];
    counter_add(traffic.packets);
    counter_add(traffic.bytes, bytes);
}

inline void count_backend_traffic(LcoreContext& ctx, uint32_t backend, uint32_t bytes) {
    BackendTraffic& traffic = ctx.backend_traffic[backend];
    counter_add(traffic.packets);
    counter_add(traffic.bytes, bytes);
}

// Takes a token from the rule's bucket (or its source's), refilled for the time since the bucket's last use.
bool take_rule_token(LcoreContext& ctx, const FirewallTables& fw, uint32_t rule, const FiveTuple& tuple,
                     uint64_t now_tsc) {
    const RateLimit& limit = fw.limits[rule];
    RateLimiterState& state = *fw.limiter;
    const unsigned slot = ctx.qsbr_thread_id;
    if (!limit.per_source)
        return take_token(state.buckets[slot * state.buckets_per_slot + state.index[rule]], limit, now_tsc);
    SourceLimiter& sources = *state.source_limiters[slot * state.source_limiters_per_slot + state.index[rule]];
    bool overflowed;
    const bool taken = sources.take(tuple.src, tuple.family, now_tsc, overflowed);
    if (SLUICE_UNLIKELY(overflowed)) counter_add(ctx.counters.rate_limit_overflow);
    return taken;
}

// Hands a decision to the control thread's log, within the worker's log budget (a token bucket refilled at
// firewall.log_rate, holding one second's worth).
void log_decision(LcoreContext& ctx, const FirewallTables& fw, const FiveTuple& tuple, RuleVerdict verdict,
                  uint16_t in_port, uint64_t now_tsc) {
    const double rate_per_s = fw.log_tokens_per_tsc * static_cast<double>(rte_get_tsc_hz());
    ctx.log_tokens = std::min(rate_per_s, ctx.log_tokens + static_cast<double>(now_tsc - ctx.log_refill_tsc) *
                                                               fw.log_tokens_per_tsc);
    ctx.log_refill_tsc = now_tsc;
    DecisionLogRecord record{tuple, verdict.rule, in_port, verdict.action, 0};
    if (ctx.log_tokens < 1.0 || !ctx.decision_log ||
        rte_ring_mp_enqueue_elem(ctx.decision_log, &record, sizeof record) != 0) {
        counter_add(ctx.counters.log_suppressed);
        return;
    }
    ctx.log_tokens -= 1.0;
}

// A ping of one of sluice's addresses (a port's, a VIP, a pool address): answered, as a host would; it opens no
// connection and is never forwarded.
void answer_echo(StatefulBurst& b, uint16_t i) {
    rte_mbuf* m = b.mbuf(i);
    if (!make_echo_reply(m, b.meta(i), b.snapshot.port_mac[m->port])) {
        b.drop(i, DropReason::echo_unanswered);
        return;
    }
    counter_add(b.ctx.counters.echo_replies);
    b.fate[i] = Fate::answer;
}

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

// Phase 4: one rte_acl call over a family's fresh packets. Without a firewall (services only) every new
// connection to a VIP is allowed.
void classify(const StatefulBurst& b, IpFamily family, const uint16_t* which, uint16_t n, RuleVerdict* verdicts) {
    if (!b.fw.enabled) {
        std::fill_n(verdicts, n, RuleVerdict{kDefaultRule, RuleAction::allow});
        return;
    }
    const FiveTuple* batch[kBurst] = {};  // {}: GCC cannot see that n >= 1 fills them
    uint16_t in_ports[kBurst] = {};
    L4MatchBytes l4[kBurst];
    uint32_t matched[kBurst] = {};  // {}: as above (GCC 12 warned it may be read uninitialised)
    for (uint16_t k = 0; k < n; ++k) {
        const uint16_t i = which[k];
        batch[k] = &b.tuples[i];
        in_ports[k] = ingress_interface(b.mbuf(i));
        // The SYN proxy's cookie ACK stands for the SYN the rules allowed when the cookie was sent.
        l4[k].tcp_flags = b.proxy[i] == SynProxyStep::open_backend ? tcp::kSyn : b.tcp_flags[i];
        icmp_type_code(rte_pktmbuf_mtod(b.mbuf(i), const uint8_t*), b.meta(i), l4[k].icmp_type, l4[k].icmp_code);
        matched[k] = AclClassifier::kNoMatch;
    }
    if (const AclClassifier* acl = b.fw.acl(family)) acl->classify(batch, in_ports, l4, matched, n);
    for (uint16_t k = 0; k < n; ++k) verdicts[k] = b.fw.verdict(family, matched[k]);
}

// The NAT connections this burst opens each insert a second key (backend -> pool address:port), whose buckets
// nothing has read yet: with one insert after the other, each waited for its own misses. Their keys are known
// before the inserts (the Maglev backend, the pool address, and the ports allocate() will hand out in turn in that
// backend's port space), so one bulk lookup over them starts all those misses at once; bind_nat then takes the
// guessed port and its reply key as they are. A packet that takes no port after all (one over a rate limit or the
// new-connection cap, a full table) leaves its guess free for the cursor's next turn. A flow's later packets in the
// burst (leader[k] != k) take none.
void warm_nat_keys(StatefulBurst& b, const uint16_t* which, const RuleVerdict* verdicts, const uint16_t* leader,
                   uint16_t n) {
    const FiveTuple* reply_ptrs[kBurst];
    uint32_t reply_hashes[kBurst];
    // The port spaces this burst draws from so far, each with the guesses it gave; a bit per space in `seen` (as
    // in find_leaders) spares the search of that list for a space not met before.
    NatPortGuess guesses[kBurst];
    uint64_t seen = 0;
    uint16_t spaces = 0;
    uint16_t guessed = 0;
    for (uint16_t k = 0; k < n; ++k) {
        const uint16_t i = which[k];
        b.nat_port_guess[i] = 0;
        if (leader[k] != k || b.route[i].backend == kNoService || b.proxy[i] == SynProxyStep::answer_syn ||
            b.echo_to_us[i])
            continue;
        const LbService& service = b.lb.services[b.route[i].backend];
        if (service.mode != LbMode::nat || verdicts[k].action != RuleAction::allow) continue;
        const uint32_t backend = pick_backend(service, b.backend_hashes[i]);
        if (backend == kNoBackend) continue;
        const uint8_t address = b.lb.nat_pool.address_for(b.tuples[i].family, b.hashes[i]);
        const uint64_t bit = uint64_t{1} << (((uint64_t{backend} << 4 | address) * 0x9E3779B97F4A7C15ULL) >> 58);
        uint16_t space = (seen & bit) ? 0 : spaces;
        while (space < spaces && (guesses[space].destination != backend || guesses[space].address != address)) ++space;
        if (space == spaces) guesses[spaces++] = NatPortGuess{backend, address};
        seen |= bit;
        const uint16_t port = b.ctx.nat_ports->peek_next(guesses[space]);
        if (port == 0) continue;
        FiveTuple& reply = b.nat_replies.of[i];
        reply = backend_reply_tuple(b.lb, b.lb.backends[backend], address, port, b.tuples[i]);
        b.nat_port_guess[i] = port;
        b.nat_reply_hashes[i] = symmetric_flow_hash(reply);
        reply_ptrs[guessed] = &reply;
        reply_hashes[guessed] = b.nat_reply_hashes[i];
        ++guessed;
    }
    if (guessed > 1) b.table.warm(reply_ptrs, reply_hashes, guessed);
}

// Phase 5: the rule's hit and log line, its rate limit, and the action. True when the packet may open.
bool admit(StatefulBurst& b, uint16_t i, RuleVerdict verdict) {
    const FirewallTables& fw = b.fw;
    if (!fw.enabled) return true;
    // A SYN a syn_proxy service answers with a cookie opens nothing: its rule's hit, log line and rate-limit token
    // are taken once, by the ACK that brings the cookie back (spoofed SYNs cannot drain a limit).
    if (SLUICE_UNLIKELY(b.proxy[i] == SynProxyStep::answer_syn) && verdict.action == RuleAction::allow) return true;
    const bool by_default = verdict.rule == kDefaultRule;
    if (fw.hits) {
        const std::size_t hit_base = static_cast<std::size_t>(b.ctx.qsbr_thread_id) * (fw.hits->rule_count + 1);
        counter_add(fw.hits->hits[hit_base + (by_default ? fw.hits->rule_count : verdict.rule)]);
    }
    if (SLUICE_UNLIKELY(by_default ? fw.log_default : fw.log_rule[verdict.rule]))
        log_decision(b.ctx, fw, b.tuples[i], verdict, ingress_interface(b.mbuf(i)), b.now_tsc);
    switch (verdict.action) {
    case RuleAction::allow:
        if (!by_default && fw.limiter && fw.limits[verdict.rule].tokens_per_tsc > 0 &&
            !take_rule_token(b.ctx, fw, verdict.rule, b.tuples[i], b.now_tsc)) {
            b.drop(i, DropReason::rate_limited);
            return false;
        }
        return true;
    case RuleAction::reject:
        b.fate[i] = Fate::reject;
        b.reason[i] = DropReason::rule_reject;
        return false;
    case RuleAction::deny: break;
    }
    b.drop(i, DropReason::rule_deny);
    return false;
}

// The worker's new-connection cap, then the entry (or the one a packet of the same flow made earlier in this
// burst: insert() hands it back, and made says which). -1 when the packet was dropped.
int32_t insert_connection(StatefulBurst& b, uint16_t i, uint32_t stable_rule, bool& made) {
    // Checked after the rules allowed the connection (a denied SYN takes no token) and before it costs an entry.
    const bool capped = b.snapshot.new_connections.tokens_per_tsc > 0;
    if (capped && !take_token(b.ctx.new_connections, b.snapshot.new_connections, b.now_tsc)) {
        b.drop(i, DropReason::new_conn_limited);
        return -1;
    }
    const uint32_t before = b.table.size();
    const int32_t position = b.table.insert(b.tuples[i], b.hashes[i], b.opening[i], stable_rule, b.now_tsc);
    made = b.table.size() != before;
    if (capped && !made) b.ctx.new_connections.tokens += 1.0;  // no entry made: the token goes back
    if (position < 0) {
        b.drop(i, DropReason::ct_table_full);
        return -1;
    }
    if (SLUICE_UNLIKELY(b.proxy[i] == SynProxyStep::open_backend && !made)) {
        b.drop(i, DropReason::syn_proxy_pending);  // a second cookie ACK of the flow in this burst: the first opened it
        return -1;
    }
    return position;
}

// A new nat connection's pool address and port, and its second key (the replies' tuple). False when it could not
// have them: the entry is removed again and the packet dropped.
bool bind_nat(StatefulBurst& b, uint16_t i, int32_t position, uint32_t backend) {
    const FiveTuple& client = b.tuples[i];
    const uint8_t address = b.lb.nat_pool.address_for(client.family, b.hashes[i]);
    const uint16_t port = b.ctx.nat_ports->allocate(address, backend, b.nat_port_guess[i]);
    if (SLUICE_UNLIKELY(port == 0)) {
        b.forget(position);
        b.drop(i, DropReason::nat_ports_exhausted);
        return false;
    }
    ConnEntry& entry = b.table.entry(position);
    entry.nat_port = port;
    entry.nat_address = address;
    entry.backend = backend + 1;  // from here on, removal releases the port and counts it closed
    counter_add(b.ctx.backend_traffic[backend].new_connections);
    const bool as_guessed = port == b.nat_port_guess[i];  // the same backend, address and port: the same reply
    const FiveTuple reply =
        as_guessed ? b.nat_replies.of[i] : backend_reply_tuple(b.lb, b.lb.backends[backend], address, port, client);
    const int32_t alias =
        b.table.insert_alias(reply, as_guessed ? b.nat_reply_hashes[i] : symmetric_flow_hash(reply), position);
    if (SLUICE_UNLIKELY(alias < 0)) {
        b.forget(position);
        b.drop(i, DropReason::ct_table_full);
        return false;
    }
    b.table.set_origin(alias, client.src, client.src_port, client.dst, client.dst_port);
    if (SLUICE_UNLIKELY(b.proxy[i] == SynProxyStep::open_backend) &&
        !syn_proxy::open_towards_backend(b, i, position, alias)) {
        b.forget(position);
        b.drop(i, DropReason::syn_proxy_pending);  // no room to write the SYN: cannot happen with sluice's pools
        return false;
    }
    return true;
}

// A new connection the rules allowed (rule: the config id, or kDefaultRule): tracked, and balanced when it is for a
// service.
void open_connection(StatefulBurst& b, uint16_t i, uint32_t rule, uint32_t stable_rule) {
    const uint32_t service_index = b.route[i].backend;
    b.route[i] = PacketRoute{};
    const LbService* service = service_index == kNoService ? nullptr : &b.lb.services[service_index];
    uint32_t backend = kNoBackend;
    if (service) {
        backend = pick_backend(*service, b.backend_hashes[i]);
        if (SLUICE_UNLIKELY(backend == kNoBackend)) {
            b.drop(i, DropReason::lb_no_backend);
            return;
        }
        if (SLUICE_UNLIKELY(b.pickup[i] == tcp::Pickup::forward)) {
            // A FIN or RST with no connection: to the Maglev backend, without an entry. Looked up again by
            // retry_unopened (an entry this burst made for the flow takes it), counted once that is settled.
            b.route[i] = PacketRoute{-1, backend, RouteKind::to_backend};
            b.pickup_rule[i] = stable_rule;
            b.fate[i] = Fate::pass;
            b.retry[b.retry_count++] = i;
            return;
        }
    }
    bool made = false;
    const int32_t position = insert_connection(b, i, stable_rule, made);
    if (position < 0) return;
    if (made) {
        counter_add(b.ctx.counters.conn_inserts);
        if (b.pickup[i] == tcp::Pickup::adopt) counter_add(b.ctx.counters.lb_adoptions);
        ConnEntry& entry = b.table.entry(position);
        entry.in_port = ingress_interface(b.mbuf(i));
        if (service && service->mode == LbMode::nat && !bind_nat(b, i, position, backend)) return;
        if (service && service->mode != LbMode::nat) {
            entry.backend = backend + 1;
            entry.flags |= kConnFlagOneWay;  // the backend answers the client directly
            counter_add(b.ctx.backend_traffic[backend].new_connections);
        }
        if (b.tuples[i].proto == kIpProtoTcp)
            open_tcp_window(b, i, position, tcp_window_check_for(b.fw, rule, service));
    }
    b.table.track(position, b.tuples[i], b.tcp_flags[i], b.now_tsc);
    if (made) sync_event(b.ctx, b.table, position, SyncEventKind::opened, b.now_tsc, &b.tuples[i]);  // i opened it
    const ConnEntry& entry = b.table.entry(position);
    count_rule_traffic(b.ctx, entry.rule_index, b.length(i));
    if (entry.backend != 0) {
        count_backend_traffic(b.ctx, entry.backend - 1, b.length(i));
        b.route[i] = PacketRoute{position, entry.backend - 1, RouteKind::to_backend};
    }
    b.fate[i] = Fate::pass;
}

// Phase 6: what an admitted packet opens: nothing but a SYN cookie, an echo reply, or a connection.
void open(StatefulBurst& b, uint16_t i, RuleVerdict verdict) {
    if (SLUICE_UNLIKELY(b.proxy[i] == SynProxyStep::answer_syn)) syn_proxy::answer_with_cookie(b, i);
    else if (SLUICE_UNLIKELY(b.echo_to_us[i])) answer_echo(b, i);
    else
        open_connection(b, i, verdict.rule,
                        verdict.rule == kDefaultRule ? kDefaultRule : b.fw.stable_ids[verdict.rule]);
}

// A flow whose first packets share a burst is one decision, not one per packet: leader[k] is where in `which` the
// first packet with packet which[k]'s tuple and in-port is (k itself for a first). A 64-bit filter over the flow
// hashes seen (one bit each) leaves a packet alone unless its bit is set; only then is it compared, hash before
// tuple, with the leaders before it. Fresh packets only; the known path never comes here.
void find_leaders(const StatefulBurst& b, const uint16_t* which, uint16_t n, uint16_t* leader) {
    uint64_t seen = 0;
    for (uint16_t k = 0; k < n; ++k) {
        const uint16_t i = which[k];
        const uint64_t bit = uint64_t{1} << (b.hashes[i] & 63);
        leader[k] = k;
        if (seen & bit) {
            for (uint16_t l = 0; l < k; ++l) {
                const uint16_t first = which[l];
                if (leader[l] == l && b.hashes[first] == b.hashes[i] && b.tuples[first] == b.tuples[i] &&
                    ingress_interface(b.mbuf(first)) == ingress_interface(b.mbuf(i))) {
                    leader[k] = l;
                    break;
                }
            }
        }
        seen |= bit;
    }
}

// A later packet of a flow whose first packet (first) was decided earlier in this burst follows that decision: it
// is refused as first was (the same drop reason; a reject is answered again), or is a packet of the connection
// first opened, settled on it by retry_unopened (tracked and counted on it, no rule hit, no token). False when
// first left nothing to follow (an echo answered, a SYN cookie, a FIN or RST sent on without an entry): the packet
// is then decided on its own.
bool follow_leader(StatefulBurst& b, uint16_t i, uint16_t first) {
    if (b.echo_to_us[first] || b.proxy[first] == SynProxyStep::answer_syn || b.pickup[first] == tcp::Pickup::forward)
        return false;
    switch (b.fate[first]) {
    case Fate::drop:
    case Fate::reject:
        b.fate[i] = b.fate[first];
        b.reason[i] = b.reason[first];
        return true;
    case Fate::pass:
        if (SLUICE_UNLIKELY(b.proxy[first] == SynProxyStep::open_backend)) {
            // first became sluice's SYN to the backend: as after it, the client's packets wait for the backend's
            // answer (not a second SYN).
            b.drop(i, DropReason::syn_proxy_pending);
            return true;
        }
        b.route[i] = PacketRoute{};
        b.drop_and_retry(i, DropReason::ct_no_connection);  // found again, unless the connection is gone by then
        return true;
    case Fate::answer:
    case Fate::classify: break;  // no connection made: the echo and SYN-cookie cases above
    }
    return false;
}

// Phases 4 to 6 for one family's fresh packets.
void decide(StatefulBurst& b, IpFamily family) {
    const int f = family == IpFamily::ipv4 ? 0 : 1;
    const uint16_t* which = b.by_family[f];
    const uint16_t n = b.family_count[f];
    if (n == 0) return;
    uint16_t leader[kBurst];
    find_leaders(b, which, n, leader);
    RuleVerdict verdicts[kBurst];
    classify(b, family, which, n, verdicts);
    if (b.lb.enabled()) warm_nat_keys(b, which, verdicts, leader, n);
    for (uint16_t k = 0; k < n; ++k) {
        const uint16_t i = which[k];
        if (leader[k] != k && follow_leader(b, i, which[leader[k]])) continue;
        if (admit(b, i, verdicts[k])) open(b, i, verdicts[k]);
    }
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

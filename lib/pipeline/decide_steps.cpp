// The stateful stage's phases 4 to 6, for one family's fresh packets at a time (decide): one rte_acl call over them
// (classify), the rule's hit, log line and rate limit (admit), and what an admitted packet opens: a SYN cookie, an
// echo reply, or a connection, with its Maglev backend and, for nat, its pool port and reply key (open). The later
// packets of a flow whose first packet is in the same burst follow its decision. Owning worker only; fast-path safe.
#include <algorithm>

#include <rte_cycles.h>
#include <rte_ring.h>

#include "common/ip_proto.hpp"
#include "lb/lb_decision.hpp"
#include "pipeline/stateful_burst.hpp"
#include "pipeline/stateful_stage.hpp"

namespace sluice {
namespace {

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
        b.drop(i, alias == ConnTable::kAliasTaken ? DropReason::nat_reply_taken : DropReason::ct_table_full);
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

}  // namespace

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

}  // namespace sluice

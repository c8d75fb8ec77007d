#include "pipeline/firewall_stage.hpp"

#include <netinet/in.h>

#include <algorithm>

#include <rte_cycles.h>

#include <rte_fib.h>
#include <rte_lpm6.h>
#include <rte_tcp.h>

#include "conntrack/tcp_state.hpp"
#include "lb/maglev.hpp"
#include "packet/packet_meta.hpp"
#include "packet/reject.hpp"
#include "packet/syn_proxy.hpp"

namespace sluice {
namespace {

// answer: the packet became sluice's own segment (syn_proxy) and leaves by the port it came in on.
enum class Fate : uint8_t { pass, drop, reject, answer, classify };

// What a syn_proxy service does with a TCP packet that has no connection (docs/architecture.md, "SYN proxy").
enum class SynProxyStep : uint8_t {
    none,
    answer_syn,     // a SYN the rules allow: answered with a cookie, nothing kept
    open_backend,   // an ACK carrying a valid cookie: the connection opens and the ACK becomes the SYN to the backend
};

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
        // Keyed: with CRC32C a sender could pick sources that share a bucket, to take turns resetting it full or (for
        // IPv6, whose 16 bytes do not map one-to-one onto a tag) to take a victim's tag and drain its bucket.
        const uint32_t tag = keyed_source_hash(tuple.src, tuple.family);
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

// The pool address (its index in lb.pool) a NAT connection of this flow hash takes its source from.
inline uint8_t nat_pool_address(const LbTables& lb, IpFamily family, uint32_t hash) {
    const std::vector<uint8_t>& pool = family == IpFamily::ipv4 ? lb.pool_v4 : lb.pool_v6;
    return pool[hash % pool.size()];
}

// The backend -> pool address side of a NAT connection from `client` to `target` (pool address, port in host
// order): the tuple its replies come with, the connection's second key.
inline FiveTuple nat_reply_tuple(const LbTables& lb, const LbBackend& target, uint8_t address, uint16_t port,
                                 const FiveTuple& client) {
    FiveTuple reply;
    reply.src = target.address;
    reply.dst = lb.pool[address];
    set_ports(reply, target.port_be ? target.port_be : client.dst_port, rte_cpu_to_be_16(port));
    reply.proto = client.proto;
    reply.family = client.family;
    return reply;
}

// The MSS sluice announces in its SYN+ACK: what the smallest MTU of the ports it sends on leaves for TCP.
uint16_t proxy_mss(const LcoreContext& ctx, const Snapshot& snapshot, IpFamily family) {
    uint16_t mtu = UINT16_MAX;
    for (uint16_t k = 0; k < ctx.tx_port_count; ++k) mtu = std::min(mtu, snapshot.port_mtu[ctx.tx_ports[k]]);
    const uint16_t headers = family == IpFamily::ipv4 ? 40 : 60;
    return mtu > headers ? static_cast<uint16_t>(mtu - headers) : kSynCookieMss[0];
}

const rte_ether_addr& sender_mac(rte_mbuf* m) { return rte_pktmbuf_mtod(m, const rte_ether_hdr*)->src_addr; }

}  // namespace

uint16_t firewall_burst(LcoreContext& ctx, const Snapshot& snapshot, rte_mbuf** pkts, uint16_t count, uint64_t now_tsc,
                        PacketRoute* routes) {
    if (count == 0) return 0;
    const FirewallTables& fw = *snapshot.firewall;
    const LbTables& lb = *snapshot.lb;
    ConnTable& table = *ctx.conn_table;
    // Raw storage: tuple_from_meta writes each tuple whole, so zeroing 1.3 KB per burst first is wasted.
    union Tuples {
        Tuples() {}
        FiveTuple of[kBurst];
    } tuple_storage;
    FiveTuple* const tuples = tuple_storage.of;
    const FiveTuple* tuple_ptrs[kBurst] = {};  // {}: GCC cannot see that count >= 1 fills them
    uint32_t hashes[kBurst] = {};
    uint8_t tcp_flags[kBurst];
    int32_t positions[kBurst];
    Fate fate[kBurst];
    DropReason reason[kBurst];
    ConnState opening[kBurst];
    tcp::Pickup pickup[kBurst];     // a mid-stream TCP packet to a dsr or tunnel VIP (docs/architecture.md)
    uint32_t pickup_rule[kBurst];   // pickup == forward: the stable id of the rule that allowed it
    SynProxyStep proxy[kBurst];
    bool echo_to_us[kBurst];        // an echo request to one of sluice's addresses: answered once the rules allow it
    uint8_t cookie_mss[kBurst];     // proxy == open_backend: the kSynCookieMss index the cookie carried
    PacketRoute route[kBurst];
    uint32_t backend_hashes[kBurst];  // a new packet to a service: stable_flow_hash, Maglev's (computed once)

    for (uint16_t i = 0; i < count; ++i) {
        const PacketMeta& meta = *packet_meta(pkts[i]);
        tuple_from_meta(rte_pktmbuf_mtod(pkts[i], const uint8_t*), rte_pktmbuf_data_len(pkts[i]), meta, tuples[i], tcp_flags[i]);
        tuple_ptrs[i] = &tuples[i];
        hashes[i] = meta.flow_hash;
        route[i] = PacketRoute{};
    }
    table.lookup_bulk(tuple_ptrs, hashes, count, positions);

    // Removes a connection before its time, counted like an expiry (the entry gauge is inserts - expired).
    const auto forget = [&](int32_t conn) {
        table.remove(conn);
        counter_add(ctx.counters.conn_expired);
    };

    // sluice's ACK that completes a syn_proxy backend's handshake, written over the backend's SYN+ACK (packet i,
    // which came by the connection's alias) and sent back out of the port it came in on.
    const auto acknowledge_backend = [&](uint16_t i, int32_t alias) {
        const auto* tcp = rte_pktmbuf_mtod_offset(pkts[i], const rte_tcp_hdr*, packet_meta(pkts[i])->l4_offset);
        TcpSegment ack;
        ack.set_endpoints(tuples[i], true);  // from the pool address and port to the backend
        ack.seq = rte_be_to_cpu_32(tcp->recv_ack);
        ack.ack = rte_be_to_cpu_32(tcp->sent_seq) + 1;
        ack.flags = RTE_TCP_ACK_FLAG;
        ack.window = table.pending_window(alias);
        const rte_ether_addr backend_mac = sender_mac(pkts[i]);
        fate[i] = write_tcp_segment(pkts[i], *packet_meta(pkts[i]), ack, backend_mac, snapshot.port_mac[pkts[i]->port])
                      ? Fate::answer
                      : Fate::drop;  // no room in the mbuf: cannot happen with sluice's pools; fate drop keeps the reason set
    };

    // The SYN sluice sends a syn_proxy connection's backend, written over client packet i (to the VIP): the client's
    // ISN and window, and the MSS its cookie kept. The forward stage's NAT rewrite sends it to the backend.
    const auto write_backend_syn = [&](uint16_t i, uint32_t client_isn, uint8_t mss_index) {
        rte_mbuf* m = pkts[i];
        const auto* tcp = rte_pktmbuf_mtod_offset(m, const rte_tcp_hdr*, packet_meta(m)->l4_offset);
        TcpSegment syn;
        syn.set_endpoints(tuples[i], false);
        syn.seq = client_isn;
        syn.flags = RTE_TCP_SYN_FLAG;
        syn.window = rte_be_to_cpu_16(tcp->rx_win);
        syn.mss = kSynCookieMss[mss_index];
        const rte_ether_addr client_mac = sender_mac(m);  // any: the forward stage writes the backend's MAC
        return write_tcp_segment(m, *packet_meta(m), syn, client_mac, snapshot.port_mac[m->port]);
    };

    // A packet of a syn_proxy connection whose backend has not answered sluice's SYN yet (came by `position`).
    // True when it goes on to the normal path (a backend's RST); otherwise fate and reason are final.
    const auto settle_pending = [&](uint16_t i, int32_t conn, int32_t position, bool via_alias) {
        fate[i] = Fate::drop;  // until the backend answers, the client's packets wait (they are resent)
        reason[i] = DropReason::syn_proxy_pending;
        const PacketMeta& meta = *packet_meta(pkts[i]);
        if (meta.l4_offset == 0) return false;  // a later fragment
        const auto* tcp = rte_pktmbuf_mtod_offset(pkts[i], const rte_tcp_hdr*, meta.l4_offset);
        const tcp::Kind kind = tcp::classify(tcp_flags[i]);
        ConnEntry& entry = table.entry(conn);
        if (!via_alias) {
            if (kind == tcp::Kind::rst) {
                forget(conn);  // the client gave up: so does sluice (its NAT port is free again)
                return false;
            }
            // A client retransmission: the SYN to the backend may have been lost (nothing else resends it). The
            // cookie covers the client's ISN, so it tells a retransmission from the start (seq = ISN + 1) apart.
            const int32_t alias = static_cast<int32_t>(entry.peer);
            const uint32_t cookie = table.seq_shift(alias);
            const uint32_t isn = rte_be_to_cpu_32(tcp->sent_seq) - 1;
            if (rte_be_to_cpu_32(tcp->recv_ack) != cookie + 1 ||
                syn_cookie_check(ctx.syn_cookie_key, tuples[i], isn, cookie, now_tsc / ctx.syn_cookie_period_tsc) < 0 ||
                !write_backend_syn(i, isn, static_cast<uint8_t>(cookie & 0x3)))
                return false;
            fate[i] = Fate::pass;
            route[i] = PacketRoute{conn, entry.backend - 1, RouteKind::to_backend};
            return false;
        }
        const uint32_t cookie = table.seq_shift(position);
        const uint32_t backend_seq = rte_be_to_cpu_32(tcp->sent_seq);
        if (kind == tcp::Kind::rst) {
            table.set_seq_shift(position, backend_seq - (cookie + 1));  // the client expects the cookie's ISN + 1
            entry.flags &= static_cast<uint8_t>(~kConnFlagSynProxyPending);
            return true;  // tracked and sent on to the client as any reply
        }
        if (kind != tcp::Kind::synack ||
            table.track_direction(conn, true, tcp_flags[i], rte_pktmbuf_pkt_len(pkts[i]), now_tsc) != TrackVerdict::ok)
            return false;
        table.set_seq_shift(position, backend_seq - cookie);
        entry.flags &= static_cast<uint8_t>(~kConnFlagSynProxyPending);
        table.track_direction(conn, false, tcp::kAck, 0, now_tsc);  // sluice's ACK, written next
        acknowledge_backend(i, position);
        return false;
    };

    // A ping of one of sluice's addresses (a port's, a VIP, a pool address): answered, as a host would; it opens no
    // connection and is never forwarded.
    const auto answer_echo = [&](uint16_t i) {
        rte_mbuf* m = pkts[i];
        if (!make_echo_reply(m, *packet_meta(m), snapshot.port_mac[m->port])) {
            fate[i] = Fate::drop;
            reason[i] = DropReason::echo_unanswered;
            return;
        }
        counter_add(ctx.counters.echo_replies);
        fate[i] = Fate::answer;
    };

    // A packet of a tracked connection (found under either key): tracked, counted, and routed to its backend.
    const auto settle_known = [&](uint16_t i, int32_t position, bool icmp_error) {
        bool via_alias;
        const int32_t conn = table.resolve(position, via_alias);
        if (icmp_error) {
            fate[i] = Fate::pass;  // related to a tracked connection
            // A nat connection's error goes where the packet it quotes came from, translated as that packet was:
            // quoting sluice's packet to the backend (found by the alias), or its reply to the client.
            const ConnEntry& entry = table.entry(conn);
            // A fragmented error is left as it is: its ICMP checksum covers fragments this one does not hold.
            if (entry.nat_port != 0 && entry.backend != 0 && entry.backend - 1 < lb.backends.size() &&
                !(packet_meta(pkts[i])->flags & kMetaFragment)) {
                if (via_alias) route[i] = PacketRoute{position, entry.backend - 1, RouteKind::nat_icmp_to_client};
                else if (table.is_reply(conn, tuples[i])) route[i] = PacketRoute{conn, entry.backend - 1, RouteKind::nat_icmp_to_backend};
            }
            return;
        }
        const bool reply = via_alias || table.is_reply(conn, tuples[i]);
        if (SLUICE_UNLIKELY(table.entry(conn).flags & kConnFlagSynProxy)) {
            if ((table.entry(conn).flags & kConnFlagSynProxyPending) && !settle_pending(i, conn, position, via_alias))
                return;
            if (via_alias && tcp::classify(tcp_flags[i]) == tcp::Kind::synack) {
                acknowledge_backend(i, position);  // a retransmission: sluice's ACK was lost; the client never sees it
                reason[i] = DropReason::syn_proxy_pending;
                return;
            }
        }
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
            forget(conn);
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
        if (positions[i] >= 0 && SLUICE_UNLIKELY(!(table.entry(positions[i]).flags & kConnFlagLive))) {
            positions[i] = -1;  // an earlier packet of this burst ended the connection
        } else if (positions[i] >= 0) {
            // A connection past its timeout is over, whether or not expiry's bounded sweep reached it yet (a pass
            // over a large table takes seconds): removed, counted as expired, and the packet is a new one.
            bool via_alias;
            const int32_t conn = table.resolve(positions[i], via_alias);
            if (SLUICE_UNLIKELY(table.entry(conn).expires_tsc <= now_tsc)) {
                forget(conn);
                positions[i] = -1;
            }
        }
        if (positions[i] >= 0) {
            settle_known(i, positions[i], icmp_error);
            continue;
        }
        if (icmp_error) {
            fate[i] = Fate::drop;
            reason[i] = DropReason::icmp_unrelated;
            continue;
        }
        const bool echo = SLUICE_UNLIKELY(tuples[i].proto == IPPROTO_ICMP || tuples[i].proto == IPPROTO_ICMPV6) &&
                          is_echo_request(pkts[i], *packet_meta(pkts[i])) &&
                          owns(snapshot, tuples[i].family, tuples[i].dst, OwnedAddress::kAnyPort);
        if (!echo && lb.enabled() && SLUICE_UNLIKELY(lb.is_pool_address(tuples[i].family, tuples[i].dst))) {
            fate[i] = Fate::drop;  // a pool address is sluice's own: only replies of its NAT connections are welcome
            reason[i] = DropReason::nat_no_connection;
            continue;
        }
        const int32_t service = lb.enabled() && !echo ? lb.find_service(tuples[i]) : LbTables::kNoVip;
        // (A VIP may also be a port's address: its services' ports are served.)
        if (SLUICE_UNLIKELY(service == LbTables::kVipUnserved ||
                            (service == LbTables::kNoVip && !echo && is_port_address(snapshot, tuples[i].family, tuples[i].dst)))) {
            // sluice has no local stack to deliver it to, and forwarding it could loop: the next hop may well route
            // sluice's own address (an announced VIP) straight back.
            fate[i] = Fate::drop;
            reason[i] = DropReason::to_own_address;
            continue;
        }
        if (service < 0 && !fw.enabled) {
            if (echo) answer_echo(i);
            else fate[i] = Fate::pass;  // no firewall: only balanced connections are tracked
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
        proxy[i] = SynProxyStep::none;
        echo_to_us[i] = echo;
        const tcp::Kind kind = tuples[i].proto == kIpProtoTcp ? tcp::classify(tcp_flags[i]) : tcp::Kind::bad;
        pickup[i] = service >= 0 && tuples[i].proto == kIpProtoTcp ? tcp::one_way_pickup(kind) : tcp::Pickup::none;
        if (SLUICE_UNLIKELY(service >= 0 && lb.services[service].syn_proxy && tuples[i].proto == kIpProtoTcp &&
                            (kind == tcp::Kind::syn || kind == tcp::Kind::ack))) {
            // A SYN is answered with a cookie once the rules allow it; an ACK must bring a cookie back.
            pickup[i] = tcp::Pickup::none;
            opening[i] = ConnState::tcp_syn_sent;
            proxy[i] = kind == tcp::Kind::syn ? SynProxyStep::answer_syn : SynProxyStep::open_backend;
            if (kind == tcp::Kind::ack) {
                const auto* tcp = rte_pktmbuf_mtod_offset(pkts[i], const rte_tcp_hdr*, meta.l4_offset);
                const int mss = syn_cookie_check(ctx.syn_cookie_key, tuples[i], rte_be_to_cpu_32(tcp->sent_seq) - 1,
                                                 rte_be_to_cpu_32(tcp->recv_ack) - 1, now_tsc / ctx.syn_cookie_period_tsc);
                if (mss < 0) {
                    fate[i] = Fate::drop;
                    reason[i] = DropReason::syn_proxy_bad_cookie;
                    retry[retry_count++] = i;  // the connection its cookie opened earlier in this burst takes it
                    continue;
                }
                cookie_mss[i] = static_cast<uint8_t>(mss);
            }
        } else if (SLUICE_UNLIKELY(pickup[i] != tcp::Pickup::none)) {
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
        if (service >= 0) backend_hashes[i] = stable_flow_hash(tuples[i]);  // not for packets dropped above
        if (tuples[i].family == IpFamily::ipv4) v4_new[v4_count++] = i;
        else v6_new[v6_count++] = i;
    }

    // An ACK whose cookie opened connection conn (alias: its NAT key) becomes the SYN sluice sends the backend; the
    // client's packets wait until the backend answers. False when it cannot be written (the caller drops it).
    const auto open_towards_backend = [&](uint16_t i, int32_t conn, int32_t alias) {
        const auto* tcp = rte_pktmbuf_mtod_offset(pkts[i], const rte_tcp_hdr*, packet_meta(pkts[i])->l4_offset);
        table.set_seq_shift(alias, rte_be_to_cpu_32(tcp->recv_ack) - 1);  // the cookie, until the backend's ISN is known
        table.set_pending_window(alias, rte_be_to_cpu_16(tcp->rx_win));
        table.entry(conn).flags |= kConnFlagSynProxy | kConnFlagSynProxyPending;
        table.entry(alias).flags |= kConnFlagSynProxy;
        if (!write_backend_syn(i, rte_be_to_cpu_32(tcp->sent_seq) - 1, cookie_mss[i])) return false;
        tcp_flags[i] = tcp::kSyn;
        counter_add(ctx.counters.syn_cookies_accepted);
        return true;
    };

    // A SYN to a syn_proxy service the rules allowed: answered from the VIP with a cookie as its ISN; nothing kept.
    const auto answer_with_cookie = [&](uint16_t i) {
        const LbService& service = lb.services[route[i].backend];
        route[i] = PacketRoute{};
        if (SLUICE_UNLIKELY(service.maglev[maglev_slot(backend_hashes[i], service.table_size)] == kMaglevNoBackend)) {
            fate[i] = Fate::drop;  // no handshake with the client when no backend could take the connection
            reason[i] = DropReason::lb_no_backend;
            return;
        }
        rte_mbuf* m = pkts[i];
        PacketMeta& meta = *packet_meta(m);
        const auto* tcp = rte_pktmbuf_mtod_offset(m, const rte_tcp_hdr*, meta.l4_offset);
        const uint32_t client_isn = rte_be_to_cpu_32(tcp->sent_seq);
        const uint8_t mss_index =
            syn_cookie_mss_index(tcp_mss_option(reinterpret_cast<const uint8_t*>(tcp), (tcp->data_off >> 4) * 4u));
        TcpSegment synack;
        synack.set_endpoints(tuples[i], true);  // from the VIP to the client
        synack.seq = syn_cookie_make(ctx.syn_cookie_key, tuples[i], client_isn, now_tsc / ctx.syn_cookie_period_tsc, mss_index);
        synack.ack = client_isn + 1;
        synack.flags = RTE_TCP_SYN_FLAG | RTE_TCP_ACK_FLAG;
        synack.window = UINT16_MAX;  // no window scaling: the cookie cannot keep the client's (docs/architecture.md)
        synack.mss = proxy_mss(ctx, snapshot, tuples[i].family);
        const rte_ether_addr client_mac = sender_mac(m);
        if (!write_tcp_segment(m, meta, synack, client_mac, snapshot.port_mac[m->port])) {
            fate[i] = Fate::drop;  // no room in the mbuf: cannot happen with sluice's pools
            reason[i] = DropReason::syn_proxy_pending;
            return;
        }
        counter_add(ctx.counters.syn_cookies_sent);
        fate[i] = Fate::answer;
    };

    // A new connection the rules allowed: tracked, and balanced when it is for a service.
    const auto open_connection = [&](uint16_t i, uint32_t stable_rule) {
        const uint32_t service_index = route[i].backend;
        route[i] = PacketRoute{};
        uint32_t backend = 0;
        const LbService* service = service_index == kNoService ? nullptr : &lb.services[service_index];
        if (service) {
            const uint16_t local = service->maglev[maglev_slot(backend_hashes[i], service->table_size)];
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
        if (SLUICE_UNLIKELY(proxy[i] == SynProxyStep::open_backend && table.size() == before)) {
            fate[i] = Fate::drop;  // a second cookie ACK of the flow in this burst: the first one opened it
            reason[i] = DropReason::syn_proxy_pending;
            return;
        }
        if (table.size() != before) {
            counter_add(ctx.counters.conn_inserts);
            if (pickup[i] == tcp::Pickup::adopt) counter_add(ctx.counters.lb_adoptions);
            entry.in_port = pkts[i]->port;
            if (service) {
                const LbBackend& target = lb.backends[backend];
                if (service->mode == LbMode::nat) {
                    const uint8_t address = nat_pool_address(lb, tuples[i].family, hashes[i]);
                    const uint16_t port = ctx.nat_ports->allocate(address);
                    if (SLUICE_UNLIKELY(port == 0)) {
                        forget(position);
                        fate[i] = Fate::drop;
                        reason[i] = DropReason::nat_ports_exhausted;
                        return;
                    }
                    entry.nat_port = port;
                    entry.nat_address = address;
                    entry.backend = backend + 1;  // from here on, removal releases the port and counts it closed
                    const FiveTuple reply_tuple = nat_reply_tuple(lb, target, address, port, tuples[i]);
                    counter_add(ctx.backend_traffic[backend].new_connections);
                    const int32_t alias = table.insert_alias(reply_tuple, symmetric_flow_hash(reply_tuple), position);
                    if (SLUICE_UNLIKELY(alias < 0)) {
                        forget(position);
                        fate[i] = Fate::drop;
                        reason[i] = DropReason::ct_table_full;
                        return;
                    }
                    table.set_origin(alias, tuples[i].src, tuples[i].src_port, tuples[i].dst, tuples[i].dst_port);
                    if (SLUICE_UNLIKELY(proxy[i] == SynProxyStep::open_backend) && !open_towards_backend(i, position, alias)) {
                        forget(position);
                        fate[i] = Fate::drop;
                        reason[i] = DropReason::syn_proxy_pending;  // no room to write the SYN: cannot happen with sluice's pools
                        return;
                    }
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

    const auto allow = [&](uint16_t i, uint32_t stable_rule) {
        if (SLUICE_UNLIKELY(proxy[i] == SynProxyStep::answer_syn)) answer_with_cookie(i);
        else if (SLUICE_UNLIKELY(echo_to_us[i])) answer_echo(i);
        else open_connection(i, stable_rule);
    };

    // The NAT connections this burst opens each insert a second key (backend -> pool address:port), whose buckets
    // nothing has read yet: with one insert after the other, each waited for its own misses. Their keys are known
    // before the inserts (the Maglev backend, the pool address, and the ports allocate() will hand out in turn),
    // so one bulk lookup over them starts all those misses at once. A guess that turns out wrong only warms lines
    // for nothing: a packet that takes no port after all (a second packet of a new flow in the same burst, one
    // over a rate limit or the new-connection cap, a full table) shifts the guesses after it on its pool address.
    const auto warm_nat_keys = [&](const uint16_t* which, const uint32_t* matched, const std::vector<uint32_t>& rule_ids,
                                   uint16_t n) {
        union Replies {
            Replies() {}
            FiveTuple tuple[kBurst];  // raw storage: each is written whole before use
        } replies;
        const FiveTuple* reply_ptrs[kBurst];
        uint32_t reply_hashes[kBurst];
        uint16_t taken[kMaxNatPoolAddresses] = {};
        uint16_t guessed = 0;
        for (uint16_t k = 0; k < n; ++k) {
            const uint16_t i = which[k];
            if (route[i].backend == kNoService || proxy[i] == SynProxyStep::answer_syn || echo_to_us[i]) continue;
            const LbService& service = lb.services[route[i].backend];
            if (service.mode != LbMode::nat) continue;
            if (matched) {  // nullptr: no firewall, every connection to a VIP is allowed
                const uint32_t rule = matched[k] == AclClassifier::kNoMatch ? UINT32_MAX : rule_ids[matched[k]];
                if ((rule == UINT32_MAX ? fw.default_action : fw.actions[rule]) != RuleAction::allow) continue;
            }
            const uint16_t local = service.maglev[maglev_slot(backend_hashes[i], service.table_size)];
            if (local == kMaglevNoBackend) continue;
            const uint8_t address = nat_pool_address(lb, tuples[i].family, hashes[i]);
            const uint16_t port = ctx.nat_ports->peek(address, taken[address]++);
            if (port == 0) continue;
            FiveTuple& reply = replies.tuple[guessed];
            reply = nat_reply_tuple(lb, lb.backends[service.backend_ids[local]], address, port, tuples[i]);
            reply_ptrs[guessed] = &reply;
            reply_hashes[guessed] = symmetric_flow_hash(reply);
            ++guessed;
        }
        if (guessed > 1) table.warm(reply_ptrs, reply_hashes, guessed);
    };

    // One rte_acl call per family over the whole burst's new connections.
    const std::size_t hit_base = static_cast<std::size_t>(ctx.qsbr_thread_id) * (fw.hits ? fw.hits->rule_count + 1 : 0);
    const auto decide = [&](const AclClassifier* acl, const std::vector<uint32_t>& rule_ids, const uint16_t* which, uint16_t n) {
        if (n == 0) return;
        if (!fw.enabled) {  // services without a firewall: every new connection to a VIP is allowed
            warm_nat_keys(which, nullptr, rule_ids, n);
            for (uint16_t k = 0; k < n; ++k) allow(which[k], UINT32_MAX);
            return;
        }
        const FiveTuple* batch[kBurst] = {};  // {}: GCC cannot see that n >= 1 fills them
        uint16_t in_ports[kBurst] = {};
        uint32_t matched[kBurst] = {};  // {}: as above (GCC 12 warned it may be read uninitialised)
        for (uint16_t k = 0; k < n; ++k) {
            batch[k] = &tuples[which[k]];
            in_ports[k] = pkts[which[k]]->port;
            matched[k] = AclClassifier::kNoMatch;
        }
        if (acl) acl->classify(batch, in_ports, matched, n);
        if (lb.enabled()) warm_nat_keys(which, matched, rule_ids, n);
        for (uint16_t k = 0; k < n; ++k) {
            const uint16_t i = which[k];
            const uint32_t rule = matched[k] == AclClassifier::kNoMatch ? UINT32_MAX : rule_ids[matched[k]];
            const RuleAction action = rule == UINT32_MAX ? fw.default_action : fw.actions[rule];
            // A SYN a syn_proxy service answers with a cookie opens nothing: its rule's hit, log line and rate-limit
            // token are taken once, by the ACK that brings the cookie back (spoofed SYNs cannot drain a limit).
            if (SLUICE_UNLIKELY(proxy[i] == SynProxyStep::answer_syn) && action == RuleAction::allow) {
                answer_with_cookie(i);
                continue;
            }
            if (fw.hits) counter_add(fw.hits->hits[hit_base + (rule == UINT32_MAX ? fw.hits->rule_count : rule)]);
            if (SLUICE_UNLIKELY(rule == UINT32_MAX ? fw.log_default : fw.log_rule[rule]))
                log_decision(ctx, fw, tuples[i], rule, action, pkts[i]->port, now_tsc);
            if (action == RuleAction::allow && rule != UINT32_MAX && fw.limiter && fw.limits[rule].tokens_per_tsc > 0 &&
                !admit(fw, rule, ctx.qsbr_thread_id, tuples[i], now_tsc)) {
                fate[i] = Fate::drop;
                reason[i] = DropReason::rate_limited;
            } else if (action == RuleAction::allow) {
                allow(i, rule == UINT32_MAX ? UINT32_MAX : fw.stable_ids[rule]);
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
            if (write_error_reply(ctx, snapshot, now_tsc, [&] { return make_reject(m, *packet_meta(m), snapshot.port_mac[m->port]); })) {
                counter_add(ctx.counters.rejects_sent);
                send_out(ctx, m->port, m);
            } else {
                dropped[dropped_count++] = m;
            }
            break;
        case Fate::answer:
            send_out(ctx, m->port, m);
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
    uint64_t v4_hops[kBurst];
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
            v4_sources[v4_count] = rte_be_to_cpu_32(be);  // rte_fib works in host byte order
            v4_index[v4_count++] = i;
        } else if (meta.family == IpFamily::ipv6 && fw.blocklist_v6) {
            std::memcpy(v6_sources[v6_count], ip + 8, 16);
            v6_index[v6_count++] = i;
        }
    }
    if (v4_count) {
        rte_fib_lookup_bulk(fw.blocklist_v4, v4_sources, v4_hops, v4_count);
        for (uint16_t k = 0; k < v4_count; ++k) blocked[v4_index[k]] = v4_hops[k] != 0;
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

// The stateful stage's per-burst state: what each phase (stateful_stage.cpp; phases 4 to 6, decide_steps.cpp) learns
// of packet i and hands to the next, and the steps in other files (the SYN proxy's, TCP window tracking's) that read
// and write it. Internal to lib/pipeline; lives on the worker's stack for one call of stateful_burst.
#pragma once

#include <cstdint>

#include <rte_ip.h>
#include <rte_mbuf.h>
#include <rte_tcp.h>

#include "common/drop_reason.hpp"
#include "conntrack/conn_table.hpp"
#include "conntrack/tcp_state.hpp"
#include "conntrack/tcp_window.hpp"
#include "packet/packet_meta.hpp"
#include "packet/syn_proxy.hpp"
#include "pipeline/lcore_context.hpp"
#include "pipeline/snapshot.hpp"
#include "pipeline/sync_steps.hpp"

namespace sluice {

// What becomes of packet i. answer: it became sluice's own packet (a SYN cookie, an echo reply, the SYN proxy's
// ACK) and leaves by the port it came in on. classify: still waiting for the rules.
enum class Fate : uint8_t { pass, drop, reject, answer, classify };

// What a syn_proxy service does with a TCP packet that has no connection (docs/architecture.md, "SYN proxy").
enum class SynProxyStep : uint8_t {
    none,
    answer_syn,    // a SYN the rules allow: answered with a cookie, nothing kept
    open_backend,  // an ACK carrying a valid cookie: the connection opens and the ACK becomes the SYN to the backend
};

struct StatefulBurst {
    StatefulBurst(LcoreContext& c, const Snapshot& s, rte_mbuf** p, uint16_t n, uint64_t now)
        : ctx(c), snapshot(s), fw(*s.firewall), lb(*s.lb), table(*c.conn_table), pkts(p), count(n), now_tsc(now),
          now_tick(table.tick(now)) {}

    LcoreContext& ctx;
    const Snapshot& snapshot;
    const FirewallTables& fw;
    const LbTables& lb;
    ConnTable& table;
    rte_mbuf** const pkts;
    const uint16_t count;
    const uint64_t now_tsc;
    const uint32_t now_tick;  // table.tick(now_tsc): expiry's clock, read once per burst

    // Raw storage: tuple_from_meta writes each tuple whole, so zeroing 1.3 KB per burst first is wasted.
    union Tuples {
        Tuples() {}
        FiveTuple of[kBurst];
    } tuple_storage;
    FiveTuple* const tuples = tuple_storage.of;
    uint32_t hashes[kBurst];
    uint64_t source_low = 0;  // bit i: packet i's source is its tuple's lower endpoint (lookup_bulk's source_low)
    uint8_t tcp_flags[kBurst];
    int32_t positions[kBurst];  // the connection lookup's answer: an entry (or its alias), or -1
    Fate fate[kBurst];
    DropReason reason[kBurst];
    // A new packet to a service keeps the service index in route.backend until opened. An anonymous union: left
    // uninitialised here, as gather writes each packet's.
    union {
        PacketRoute route[kBurst];
    };

    // Set by triage for the packets the rules decide.
    ConnState opening[kBurst];
    tcp::Pickup pickup[kBurst];    // a mid-stream TCP packet to a dsr or tunnel VIP (docs/architecture.md)
    uint32_t pickup_rule[kBurst];  // pickup == forward: the stable id of the rule that allowed it
    SynProxyStep proxy[kBurst];
    bool echo_to_us[kBurst];          // an echo request to one of sluice's addresses: answered once the rules allow it
    uint8_t cookie_mss[kBurst];       // proxy == open_backend: the kSynCookieMss index the cookie carried
    uint32_t backend_hashes[kBurst];  // a new packet to a service: stable_flow_hash, Maglev's (computed once)
    // Set by warm_nat_keys for the packets of a family that decide takes: the pool port guessed for a new nat
    // connection (0: none) and the replies' tuple and hash with that port, which bind_nat takes when it gets it.
    uint16_t nat_port_guess[kBurst];
    union NatReplies {
        NatReplies() {}
        FiveTuple of[kBurst];  // raw storage, as tuple_storage
    } nat_replies;
    uint32_t nat_reply_hashes[kBurst];

    // Packets of no connection: first to be triaged, then by family for the rules.
    uint16_t fresh[kBurst], fresh_count = 0;
    uint16_t by_family[2][kBurst], family_count[2] = {0, 0};
    // Packets that cannot open a connection, looked up again once this burst's new connections exist: a flow's
    // SYN and its next packet often share a burst (dsr and tunnel see no SYN+ACK in between).
    uint16_t retry[kBurst], retry_count = 0;

    rte_mbuf* mbuf(uint16_t i) const { return pkts[i]; }
    const PacketMeta& meta(uint16_t i) const { return *packet_meta(pkts[i]); }
    uint32_t length(uint16_t i) const { return rte_pktmbuf_pkt_len(pkts[i]); }
    void drop(uint16_t i, DropReason why) {
        fate[i] = Fate::drop;
        reason[i] = why;
    }
    void drop_and_retry(uint16_t i, DropReason why) {
        drop(i, why);
        retry[retry_count++] = i;
    }
    // Removes a connection before its time, counted like an expiry (the entry gauge is inserts - expired).
    void forget(int32_t conn) {
        sync_event(ctx, table, conn, SyncEventKind::closed, now_tsc);
        table.remove(conn);
        counter_add(ctx.counters.conn_expired);
    }
};

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

// A ping of one of sluice's addresses (a port's, a VIP, a pool address): answered, as a host would; it opens no
// connection and is never forwarded.
void answer_echo(StatefulBurst& b, uint16_t i);

// Phases 4 to 6 (decide_steps.cpp) for one family's fresh packets: classify, admit, open.
void decide(StatefulBurst& b, IpFamily family);

struct TcpSegment;

// Turns packet i into segment, sent back out of the port it came in on to its sender's MAC; false when the mbuf has
// no room (cannot happen with sluice's pools).
bool write_answer_segment(StatefulBurst& b, uint16_t i, const TcpSegment& segment);

// The fields of packet i's TCP header the window check reads; its payload length from the IP header (parsing
// checked the lengths). Inline: every TCP packet of a known connection reads them.
inline TcpSegmentFields segment_fields(const StatefulBurst& b, uint16_t i) {
    const PacketMeta& meta = b.meta(i);
    const rte_tcp_hdr& tcp = *rte_pktmbuf_mtod_offset(b.mbuf(i), const rte_tcp_hdr*, meta.l4_offset);
    const uint32_t ip_header_and_extensions = meta.l4_offset - meta.l3_offset;
    uint32_t ip_length;
    if (meta.family == IpFamily::ipv4) {
        ip_length =
            rte_be_to_cpu_16(rte_pktmbuf_mtod_offset(b.mbuf(i), const rte_ipv4_hdr*, meta.l3_offset)->total_length);
    } else {
        ip_length =
            rte_be_to_cpu_16(rte_pktmbuf_mtod_offset(b.mbuf(i), const rte_ipv6_hdr*, meta.l3_offset)->payload_len) +
            sizeof(rte_ipv6_hdr);
    }
    const uint32_t header_length = (tcp.data_off >> 4) * 4u;
    const uint32_t used = ip_header_and_extensions + header_length;
    TcpSegmentFields fields;
    fields.seq = rte_be_to_cpu_32(tcp.sent_seq);
    fields.ack = rte_be_to_cpu_32(tcp.recv_ack);
    fields.payload = ip_length > used ? ip_length - used : 0;
    fields.window = rte_be_to_cpu_16(tcp.rx_win);
    fields.flags = b.tcp_flags[i];
    fields.scale = -1;
    if (SLUICE_UNLIKELY(fields.flags & tcp::kSyn))
        fields.scale =
            static_cast<int8_t>(tcp_window_scale_option(reinterpret_cast<const uint8_t*>(&tcp), header_length));
    return fields;
}

// TCP sequence and window tracking (tcp_window_steps.cpp).
// The window of TCP connection conn, which packet i opened (for a syn_proxy connection: after its SYN to the backend
// was written over the packet).
void open_tcp_window(StatefulBurst& b, uint16_t i, int32_t conn, TcpWindowCheck check);
// admit_tcp_segment for the segments its inline path leaves: the handshake, FIN, RST, a side's first packet, and a
// syn_proxy connection's (its responder's sequence needs the shift).
bool admit_tcp_segment_slow(StatefulBurst& b, uint16_t i, int32_t conn, bool reply);
// Packet i (with a TCP header) of connection conn, from the responder when reply: true when its sequence lets it go
// on to the state machine; otherwise it was dropped or answered with a challenge ACK (fate and reason set). Inline
// for the segment nearly every packet is, the one tcp_window_check hands to check_ack.
inline bool admit_tcp_segment(StatefulBurst& b, uint16_t i, int32_t conn, bool reply) {
    TcpWindow& window = b.table.window(conn);
    if (tcp_window_check_of(window) == TcpWindowCheck::off) return true;
    const int side = reply ? 1 : 0;
    if (SLUICE_UNLIKELY((b.tcp_flags[i] & (tcp::kFin | tcp::kSyn | tcp::kRst | tcp::kAck)) != tcp::kAck ||
                        !(window.flags[side] & kWindowSideSeen) || (b.table.entry(conn).flags & kConnFlagSynProxy)))
        return admit_tcp_segment_slow(b, i, conn, reply);
    if (SLUICE_LIKELY(tcp_window_detail::check_ack(window, side, segment_fields(b, i)) == WindowVerdict::pass))
        return true;
    b.drop(i, DropReason::tcp_out_of_window);
    return false;
}

// The SYN proxy's steps (syn_proxy_steps.cpp), each over packet i of the burst.
namespace syn_proxy {

// A client SYN or ACK to a syn_proxy service, at triage: sets proxy[i] (and cookie_mss[i] for an ACK); false when
// the packet was dropped (an ACK whose cookie is wrong or expired).
bool triage(StatefulBurst& b, uint16_t i, tcp::Kind kind);

// A packet of a connection whose backend has not answered sluice's SYN yet (it came by `position`, the entry or
// its alias). True when it goes on to the normal path (a backend's RST); otherwise fate and reason are final.
bool settle_pending(StatefulBurst& b, uint16_t i, int32_t conn, int32_t position, bool via_alias);

// The backend's SYN+ACK came again (sluice's ACK was lost): acknowledged again, never shown to the client.
void acknowledge_again(StatefulBurst& b, uint16_t i, int32_t alias);

// A SYN the rules allowed: answered from the VIP with a cookie as its ISN; nothing kept.
void answer_with_cookie(StatefulBurst& b, uint16_t i);

// An ACK whose cookie opened connection conn (alias: its NAT key) becomes the SYN sluice sends the backend; the
// client's packets wait until the backend answers. False when it cannot be written (the caller drops it).
bool open_towards_backend(StatefulBurst& b, uint16_t i, int32_t conn, int32_t alias);

}  // namespace syn_proxy
}  // namespace sluice

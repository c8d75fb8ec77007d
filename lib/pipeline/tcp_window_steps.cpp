// TCP sequence and window tracking inside the stateful stage: the pure check is conntrack/tcp_window.*; here the
// packet's fields are read, a syn_proxy connection's responder is seen in the client's sequence space, and the
// challenge ACKs of RFC 5961 are written.
#include <rte_ip.h>
#include <rte_tcp.h>

#include "common/ip_proto.hpp"
#include "lb/lb_decision.hpp"
#include "packet/syn_proxy.hpp"
#include "pipeline/stateful_burst.hpp"
#include "pipeline/stateful_stage.hpp"

namespace sluice {
namespace {

// RFC 5961's synchronized states, less time_wait (where the initiator's new SYN may reuse the ports).
bool synchronized(ConnState state) {
    return state == ConnState::tcp_established || state == ConnState::tcp_fin_wait ||
           state == ConnState::tcp_close_wait || state == ConnState::tcp_last_ack;
}

// Answers packet i (a RST or SYN of connection conn, from the responder when reply) with a challenge ACK from its
// receiver, within the error-reply budget; the packet itself is counted under `why` either way. The ACK goes to the
// end the packet claims to come from, the way the connection's packets to that end go (the forward stage), never
// back to the frame's sender: a host beside that end, sending in its name, would read the numbers an exact RST
// needs from it. The rate limit is the worker's error-reply token bucket, as Linux's tcp_challenge_ack_limit is one
// per host: a per-connection limit costs bytes in every window and does not bound an attacker spread over many.
void send_challenge_ack(StatefulBurst& b, uint16_t i, int32_t conn, bool reply, DropReason why) {
    const ChallengeAck challenge = tcp_challenge_ack(b.table.window(conn), reply);
    TcpSegment ack;
    ack.set_endpoints(b.tuples[i], true);
    ack.seq = challenge.seq;
    ack.ack = challenge.ack;
    ack.flags = RTE_TCP_ACK_FLAG;
    ack.window = challenge.window;
    const ConnEntry& entry = b.table.entry(conn);
    if (SLUICE_UNLIKELY(entry.flags & kConnFlagSynProxy) && reply)
        ack.ack += b.table.seq_shift(static_cast<int32_t>(entry.peer));  // to the backend: in its own space
    if (write_error_reply(b.ctx, b.snapshot, b.now_tsc, [&] { return write_answer_segment(b, i, ack); })) {
        b.ctx.counters.drop(why);
        counter_add(b.ctx.counters.challenge_acks_sent);
        b.table.window(conn).flags[reply ? 1 : 0] |= kWindowSideChallenged;
        b.fate[i] = Fate::pass;
        const bool nat_backend = reply && entry.nat_port != 0 && entry.backend != 0;
        b.route[i] = PacketRoute{conn, nat_backend ? entry.backend - 1 : kNoBackend,
                                 reply ? RouteKind::answer_to_responder : RouteKind::answer_to_initiator};
        return;
    }
    b.drop(i, why);
}

}  // namespace

bool write_answer_segment(StatefulBurst& b, uint16_t i, const TcpSegment& segment) {
    rte_mbuf* m = b.mbuf(i);
    const rte_ether_addr to = rte_pktmbuf_mtod(m, const rte_ether_hdr*)->src_addr;
    return write_tcp_segment(m, *packet_meta(m), segment, to, b.snapshot.port_mac[m->port]);
}

TcpWindowCheck tcp_window_check_for(const FirewallTables& fw, uint32_t rule, const LbService* service) {
    if (rule != kDefaultRule && fw.window_checks[rule]) return *fw.window_checks[rule];
    if (service && service->tcp_window_check) return *service->tcp_window_check;
    return fw.tcp_window_check;
}

void open_tcp_window(StatefulBurst& b, uint16_t i, int32_t conn, TcpWindowCheck check) {
    TcpWindow& window = b.table.window(conn);
    window = TcpWindow{};
    set_tcp_window_check(window, check);
    if (check == TcpWindowCheck::off) return;
    const ConnEntry& entry = b.table.entry(conn);
    if (SLUICE_UNLIKELY(entry.flags & kConnFlagSynProxy)) {
        // Packet i is now sluice's SYN to the backend (the client's ISN and window); the alias holds the cookie.
        const TcpSegmentFields syn = segment_fields(b, i);
        const uint32_t cookie = b.table.seq_shift(static_cast<int32_t>(entry.peer));
        tcp_window_open_proxied(window, syn.seq + 1, syn.window, cookie + 1, UINT16_MAX);
        return;
    }
    tcp_window_check(window, false, segment_fields(b, i), false);  // the opener's side, from its first packet
}

bool admit_tcp_segment_slow(StatefulBurst& b, uint16_t i, int32_t conn, bool reply) {
    TcpWindow& window = b.table.window(conn);
    const ConnEntry& entry = b.table.entry(conn);
    TcpSegmentFields fields = segment_fields(b, i);
    if (SLUICE_UNLIKELY(entry.flags & kConnFlagSynProxy) && reply)
        fields.seq -= b.table.seq_shift(static_cast<int32_t>(entry.peer));  // the backend's, in the client's space
    // One-way connections never show the responder: no SYN is judged against a handshake sluice could not see.
    const bool synced = !(entry.flags & kConnFlagOneWay) && synchronized(entry.state);
    switch (tcp_window_check(window, reply, fields, synced)) {
    case WindowVerdict::pass:
    case WindowVerdict::rst_exact: return true;
    case WindowVerdict::out_of_window: b.drop(i, DropReason::tcp_out_of_window); return false;
    case WindowVerdict::rst_out_of_window: b.drop(i, DropReason::tcp_rst_out_of_window); return false;
    case WindowVerdict::rst_challenge:
        send_challenge_ack(b, i, conn, reply, DropReason::tcp_rst_challenged);
        return false;
    case WindowVerdict::syn_challenge:
        send_challenge_ack(b, i, conn, reply, DropReason::tcp_syn_challenged);
        return false;
    }
    return true;
}

}  // namespace sluice

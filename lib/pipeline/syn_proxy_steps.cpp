// The SYN proxy's steps inside the stateful stage. Cookies and the segments sluice writes are packet/syn_proxy.*;
// the sequence shift of a proxied connection's packets is applied by the forward stage's NAT rewrite.
#include <algorithm>

#include <rte_tcp.h>

#include "lb/lb_decision.hpp"
#include "packet/syn_proxy.hpp"
#include "pipeline/stateful_burst.hpp"

namespace sluice::syn_proxy {
namespace {

const rte_tcp_hdr& tcp_header(const StatefulBurst& b, uint16_t i) {
    return *rte_pktmbuf_mtod_offset(b.mbuf(i), const rte_tcp_hdr*, b.meta(i).l4_offset);
}

uint64_t cookie_period(const StatefulBurst& b) { return b.now_tsc / b.ctx.syn_cookie_period_tsc; }

// The MSS sluice announces in its SYN+ACK: what the smallest MTU of the ports it sends on leaves for TCP.
uint16_t proxy_mss(const StatefulBurst& b, IpFamily family) {
    uint16_t mtu = UINT16_MAX;
    for (uint16_t k = 0; k < b.ctx.tx_port_count; ++k) mtu = std::min(mtu, b.snapshot.port_mtu[b.ctx.tx_ports[k]]);
    const uint16_t headers = family == IpFamily::ipv4 ? 40 : 60;
    return mtu > headers ? static_cast<uint16_t>(mtu - headers) : kSynCookieMss[0];
}

// sluice's ACK that completes a backend's handshake, written over the backend's SYN+ACK (packet i, which came by
// the connection's alias).
void acknowledge_backend(StatefulBurst& b, uint16_t i, int32_t alias) {
    const rte_tcp_hdr& tcp = tcp_header(b, i);
    TcpSegment ack;
    ack.set_endpoints(b.tuples[i], true);  // from the pool address and port to the backend
    ack.seq = rte_be_to_cpu_32(tcp.recv_ack);
    ack.ack = rte_be_to_cpu_32(tcp.sent_seq) + 1;
    ack.flags = RTE_TCP_ACK_FLAG;
    ack.window = b.table.pending_window(alias);
    b.fate[i] = write_answer_segment(b, i, ack) ? Fate::answer : Fate::drop;  // drop keeps the reason its caller set
}

// The SYN sluice sends the backend, written over client packet i (to the VIP): the client's ISN and window, and
// the MSS its cookie kept. The forward stage's NAT rewrite sends it to the backend.
bool write_backend_syn(StatefulBurst& b, uint16_t i, uint32_t client_isn, uint8_t mss_index) {
    TcpSegment syn;
    syn.set_endpoints(b.tuples[i], false);
    syn.seq = client_isn;
    syn.flags = RTE_TCP_SYN_FLAG;
    syn.window = rte_be_to_cpu_16(tcp_header(b, i).rx_win);
    syn.mss = kSynCookieMss[mss_index];
    return write_answer_segment(b, i, syn);  // any source MAC: the forward stage writes the backend's
}

// A client packet while the backend has not answered: a retransmission of the cookie ACK resends the SYN to the
// backend (it may have been lost, and nothing else resends it); a RST gives the connection up. Anything else waits
// (dropped: the client sends it again once the backend answered), whatever its numbers: the client's first data
// and FIN carry the cookie ACK's seq and ack too, and written over as a SYN their data would be lost for good.
void settle_pending_client(StatefulBurst& b, uint16_t i, int32_t conn, tcp::Kind kind) {
    if (kind == tcp::Kind::rst) {
        b.forget(conn);  // the client gave up: so does sluice (its NAT port is free again)
        return;
    }
    if (kind != tcp::Kind::ack || segment_fields(b, i).payload != 0) return;
    // The cookie covers the client's ISN, so it tells a retransmission from the start (seq = ISN + 1) apart.
    const rte_tcp_hdr& tcp = tcp_header(b, i);
    const ConnEntry& entry = b.table.entry(conn);
    const uint32_t cookie = b.table.seq_shift(static_cast<int32_t>(entry.peer));
    const uint32_t isn = rte_be_to_cpu_32(tcp.sent_seq) - 1;
    if (rte_be_to_cpu_32(tcp.recv_ack) != cookie + 1 ||
        syn_cookie_check(b.ctx.syn_cookie_key, b.tuples[i], isn, cookie, cookie_period(b)) < 0 ||
        !write_backend_syn(b, i, isn, static_cast<uint8_t>(cookie & 0x3)))
        return;
    b.fate[i] = Fate::pass;
    b.route[i] = PacketRoute{conn, entry.backend - 1, RouteKind::to_backend};
}

}  // namespace

bool triage(StatefulBurst& b, uint16_t i, tcp::Kind kind) {
    b.pickup[i] = tcp::Pickup::none;
    b.opening[i] = ConnState::tcp_syn_sent;
    b.proxy[i] = kind == tcp::Kind::syn ? SynProxyStep::answer_syn : SynProxyStep::open_backend;
    if (kind == tcp::Kind::syn) return true;
    const rte_tcp_hdr& tcp = tcp_header(b, i);
    const int mss = syn_cookie_check(b.ctx.syn_cookie_key, b.tuples[i], rte_be_to_cpu_32(tcp.sent_seq) - 1,
                                     rte_be_to_cpu_32(tcp.recv_ack) - 1, cookie_period(b));
    if (mss < 0) {
        b.drop_and_retry(i, DropReason::syn_proxy_bad_cookie);  // the connection its cookie opened in this burst
        return false;
    }
    b.cookie_mss[i] = static_cast<uint8_t>(mss);
    return true;
}

bool settle_pending(StatefulBurst& b, uint16_t i, int32_t conn, int32_t position, bool via_alias) {
    b.drop(i, DropReason::syn_proxy_pending);    // until the backend answers, the client's packets wait (resent)
    if (b.meta(i).l4_offset == 0) return false;  // a later fragment
    const tcp::Kind kind = tcp::classify(b.tcp_flags[i]);
    if (!via_alias) {
        settle_pending_client(b, i, conn, kind);
        return false;
    }
    ConnEntry& entry = b.table.entry(conn);
    const uint32_t cookie = b.table.seq_shift(position);
    const uint32_t backend_seq = rte_be_to_cpu_32(tcp_header(b, i).sent_seq);
    if (kind == tcp::Kind::rst) {
        b.table.set_seq_shift(position, backend_seq - (cookie + 1));  // the client expects the cookie's ISN + 1
        entry.flags &= static_cast<uint8_t>(~kConnFlagSynProxyPending);
        return true;  // tracked and sent on to the client as any reply
    }
    if (kind != tcp::Kind::synack || b.table.track_direction(conn, true, b.tcp_flags[i], b.now_tsc) != TrackVerdict::ok)
        return false;
    b.table.set_seq_shift(position, backend_seq - cookie);
    entry.flags &= static_cast<uint8_t>(~kConnFlagSynProxyPending);
    b.table.track_direction(conn, false, tcp::kAck, b.now_tsc);  // sluice's ACK, written next
    acknowledge_backend(b, i, position);
    return false;
}

void acknowledge_again(StatefulBurst& b, uint16_t i, int32_t alias) {
    acknowledge_backend(b, i, alias);
    b.reason[i] = DropReason::syn_proxy_pending;
}

void answer_with_cookie(StatefulBurst& b, uint16_t i) {
    const LbService& service = b.lb.services[b.route[i].backend];
    b.route[i] = PacketRoute{};
    if (SLUICE_UNLIKELY(pick_backend(service, b.backend_hashes[i]) == kNoBackend)) {
        b.drop(i, DropReason::lb_no_backend);  // no handshake with the client when no backend could take it
        return;
    }
    const rte_tcp_hdr& tcp = tcp_header(b, i);
    const uint32_t client_isn = rte_be_to_cpu_32(tcp.sent_seq);
    const uint8_t mss_index =
        syn_cookie_mss_index(tcp_mss_option(reinterpret_cast<const uint8_t*>(&tcp), (tcp.data_off >> 4) * 4u));
    TcpSegment synack;
    synack.set_endpoints(b.tuples[i], true);  // from the VIP to the client
    synack.seq = syn_cookie_make(b.ctx.syn_cookie_key, b.tuples[i], client_isn, cookie_period(b), mss_index);
    synack.ack = client_isn + 1;
    synack.flags = RTE_TCP_SYN_FLAG | RTE_TCP_ACK_FLAG;
    synack.window = UINT16_MAX;  // no window scaling: the cookie cannot keep the client's (docs/architecture.md)
    synack.mss = proxy_mss(b, b.tuples[i].family);
    if (!write_answer_segment(b, i, synack)) {
        b.drop(i, DropReason::syn_proxy_pending);  // no room in the mbuf: cannot happen with sluice's pools
        return;
    }
    counter_add(b.ctx.counters.syn_cookies_sent);
    b.fate[i] = Fate::answer;
}

bool open_towards_backend(StatefulBurst& b, uint16_t i, int32_t conn, int32_t alias) {
    const rte_tcp_hdr& tcp = tcp_header(b, i);
    b.table.set_seq_shift(alias, rte_be_to_cpu_32(tcp.recv_ack) - 1);  // the cookie, until the backend's ISN is known
    b.table.set_pending_window(alias, rte_be_to_cpu_16(tcp.rx_win));
    b.table.entry(conn).flags |= kConnFlagSynProxy | kConnFlagSynProxyPending;
    b.table.entry(alias).flags |= kConnFlagSynProxy;
    if (!write_backend_syn(b, i, rte_be_to_cpu_32(tcp.sent_seq) - 1, b.cookie_mss[i])) return false;
    b.tcp_flags[i] = tcp::kSyn;
    counter_add(b.ctx.counters.syn_cookies_accepted);
    return true;
}

}  // namespace sluice::syn_proxy

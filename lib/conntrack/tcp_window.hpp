// TCP sequence and window tracking for one connection, in the spirit of Linux nf_conntrack's tcp_in_window (per
// direction: the highest sequence sent, the highest the peer's window allows, the largest window advertised) and of
// RFC 5961's defences against blind in-window attacks (a RST must hit the receiver's RCV.NXT exactly; one merely in
// the window, or a SYN on a synchronized connection, gets a challenge ACK). Pure and allocation-free: any thread,
// fast-path safe. The state lives in the second half of a ConnTable slot's cache line, touched only by TCP packets.
#pragma once

#include <algorithm>
#include <cstdint>

#include "common/compiler.hpp"
#include "common/tcp_window_check.hpp"
#include "conntrack/tcp_flags.hpp"

namespace sluice {

const char* tcp_window_check_name(TcpWindowCheck check);

// One direction of a connection, in its sender's sequence space (a syn_proxy connection's responder in the
// client's, the cookie's, space: see ConnTable::seq_shift). Its largest window is kept apart (tcp_window_maxwin).
struct TcpWindowSide {
    uint32_t end;     // the highest sequence sent, plus one (seq + payload + SYN + FIN)
    uint32_t maxend;  // the highest sequence the peer's acknowledgment and window let this side send
    uint32_t maxack;  // the highest acknowledgment this side sent (kWindowSideAcked): its RCV.NXT, as far as seen
};

// A side's flags (TcpWindow::flags, bits 0-5).
inline constexpr uint8_t kWindowSideSeen = 0x01;        // a packet of this side was learned from
inline constexpr uint8_t kWindowSideSyn = 0x02;         // its SYN was seen: its window scale is known
inline constexpr uint8_t kWindowSideScale = 0x04;       // its SYN carried a window scale option
inline constexpr uint8_t kWindowSideBounded = 0x08;     // maxend was set by the peer's acknowledgment
inline constexpr uint8_t kWindowSideAcked = 0x10;       // it sent an acknowledgment: maxack holds the highest
inline constexpr uint8_t kWindowSideChallenged = 0x20;  // sluice sent it a challenge ACK (for flow listings)
// The flags that describe what was learned (what sync carries; a handshake rewrites them).
inline constexpr uint8_t kWindowSideLearned = 0x1f;
// flags[0]'s top two bits hold the connection's TcpWindowCheck (tcp_window_check_of): the window is 32 bytes.
inline constexpr unsigned kWindowCheckShift = 6;

// Both directions: [0] the initiator's, [1] the responder's (ConnEntry::packets' order). 32 bytes, aligned: half a
// cache line, brought whole by the lookup's prefetch. A side's largest window is 16 bits scaled by a shift of its
// own (tcp_window_maxwin): exact for every window a TCP header can state, which is 16 bits times 2^scale.
struct alignas(32) TcpWindow {
    TcpWindowSide side[2];
    uint16_t maxwin_units[2];  // the largest window each side advertised, scaled, >> its maxwin shift
    uint8_t maxwin_shifts;     // side 0's shift in bits 0-3, side 1's in bits 4-7
    uint8_t scales;            // the window scale each side announced (RFC 7323 2.2), side 0 in bits 0-3
    uint8_t flags[2];          // kWindowSide* per side; flags[0] also holds the check (kWindowCheckShift)
};
static_assert(sizeof(TcpWindow) == 32);

inline TcpWindowCheck tcp_window_check_of(const TcpWindow& w) {
    return static_cast<TcpWindowCheck>(w.flags[0] >> kWindowCheckShift);
}
inline void set_tcp_window_check(TcpWindow& w, TcpWindowCheck check) {
    w.flags[0] = static_cast<uint8_t>((w.flags[0] & ~(3u << kWindowCheckShift)) |
                                      (static_cast<unsigned>(check) << kWindowCheckShift));
}
// A side's flags without the check's bits.
inline uint8_t tcp_window_side_flags(const TcpWindow& w, int side) {
    return static_cast<uint8_t>(w.flags[side] & ((1u << kWindowCheckShift) - 1));
}
// Replaces a side's flags, keeping the check's bits.
inline void set_tcp_window_side_flags(TcpWindow& w, int side, uint8_t flags) {
    w.flags[side] = static_cast<uint8_t>((w.flags[side] & ~((1u << kWindowCheckShift) - 1)) | flags);
}

inline uint8_t tcp_window_scale_of(const TcpWindow& w, int side) { return (w.scales >> (4 * side)) & 0x0f; }
inline void set_tcp_window_scale(TcpWindow& w, int side, uint8_t scale) {
    w.scales = static_cast<uint8_t>((w.scales & ~(0x0fu << (4 * side))) | (uint32_t{scale} & 0x0f) << (4 * side));
}

// A side's largest window, scaled, in bytes.
inline uint32_t tcp_window_maxwin(const TcpWindow& w, int side) {
    return uint32_t{w.maxwin_units[side]} << ((w.maxwin_shifts >> (4 * side)) & 0x0f);
}
// Sets it: exact for any 16-bit window scaled by up to 2^15; a larger value (only a peer's sync event could carry
// one) is rounded up, so a window is never under-estimated.
inline void set_tcp_window_maxwin(TcpWindow& w, int side, uint32_t bytes) {
    uint64_t value = bytes;
    uint32_t shift = 0;
    while (shift < 15 && (value + (uint64_t{1} << shift) - 1) >> shift > UINT16_MAX) ++shift;
    uint64_t units = (value + (uint64_t{1} << shift) - 1) >> shift;
    if (units > UINT16_MAX) units = UINT16_MAX;
    w.maxwin_units[side] = static_cast<uint16_t>(units);
    w.maxwin_shifts = static_cast<uint8_t>((w.maxwin_shifts & ~(0x0fu << (4 * side))) | shift << (4 * side));
}

// The fields of one TCP segment the check reads, in host order.
struct TcpSegmentFields {
    uint32_t seq;
    uint32_t ack;
    uint32_t payload;  // bytes of data after the TCP header
    uint16_t window;   // the header's, unscaled
    uint8_t flags;     // the flag byte (tcp::kSyn, ...)
    int8_t scale;      // a SYN's window scale option, -1 when it has none
};

enum class WindowVerdict : uint8_t {
    pass,               // in the window (or not judged): goes on to the state machine
    out_of_window,      // data or ACK outside the window (strict): dropped, the state unchanged
    rst_exact,          // a RST at the receiver's RCV.NXT: goes on and closes the connection
    rst_challenge,      // a RST in the window but not exact (or unjudgeable, liberal): answered with a challenge ACK
    rst_out_of_window,  // a RST outside the window: dropped, the connection kept
    syn_challenge,      // a SYN on a synchronized connection: answered with a challenge ACK, the connection kept
};

namespace tcp_window_detail {

// Sequence arithmetic modulo 2^32 (RFC 9293 3.4).
constexpr bool before(uint32_t a, uint32_t b) { return static_cast<int32_t>(a - b) < 0; }
constexpr bool after(uint32_t a, uint32_t b) { return before(b, a); }

// An acknowledgment may trail the peer's highest sequence by at least this much (nf_conntrack's MAXACKWINDOW floor):
// a window's worth of the peer's data may be in flight or lost.
inline constexpr uint32_t kMinAckWindow = 66000;
inline constexpr uint8_t kMaxScale = 14;  // RFC 7323 2.3

// The scale of a side's (non-SYN) window field: known once both SYNs were seen, 0 unless both carried the option.
// Unknown (a picked-up connection): the largest, so windows are over-estimated, never under-estimated.
inline uint8_t window_scale(const TcpWindow& w, int side) {
    const uint8_t both = w.flags[0] & w.flags[1];
    if (!(both & kWindowSideSyn)) return kMaxScale;
    return (both & kWindowSideScale) ? tcp_window_scale_of(w, side) : 0;
}

// An acknowledgment of a side's SYN: at most its end, and no further behind than any ACK may be (a SYN may carry
// data, TCP Fast Open's, that the answer does not acknowledge).
inline bool acks_syn(uint32_t ack, const TcpWindowSide& syn_sender) {
    return !after(ack, syn_sender.end) && !before(ack, syn_sender.end - kMinAckWindow);
}

}  // namespace tcp_window_detail

// The RCV.NXT of side `receiver` for a RST from its peer (RFC 5961 3.2): the highest acknowledgment it sent. A RST
// at the sender's own next sequence would also close on data the receiver never got (lost, or still in flight):
// that one is challenged, and a sender that really reset answers the challenge at RCV.NXT. Without an
// acknowledgment from the receiver (a picked-up or one-way connection), the sender's next sequence stands in.
inline bool rst_hits_rcv_nxt(const TcpWindow& w, int receiver, uint32_t seq) {
    if (w.flags[receiver] & kWindowSideAcked) return seq == w.side[receiver].maxack;
    return seq == w.side[1 - receiver].end;
}

namespace tcp_window_detail {

// tcp_window_check for the segment nearly every packet of a connection is: ACK without SYN, FIN or RST (PSH, URG,
// ECE, CWR aside) from a side already seen. The same judgment and learning as tcp_window_full_check's, without the
// branches the handshake, a RST or the sender's first packet need (tests/unit/conntrack/tcp_window_test.cpp holds
// the two to the same answers).
inline WindowVerdict check_ack(TcpWindow& w, int s, const TcpSegmentFields& seg) {
    const int r = 1 - s;
    TcpWindowSide& sender = w.side[s];
    TcpWindowSide& receiver = w.side[r];
    const bool receiver_seen = w.flags[r] & kWindowSideSeen;
    const uint32_t end = seg.seq + seg.payload;
    const uint32_t sender_maxwin = tcp_window_maxwin(w, s);
    if (receiver_seen && tcp_window_check_of(w) == TcpWindowCheck::strict) {
        const uint32_t ack_slack = std::max(sender_maxwin, kMinAckWindow);
        if (after(seg.seq, sender.maxend) || before(end, sender.end - tcp_window_maxwin(w, r)) ||
            after(seg.ack, receiver.end) || before(seg.ack, receiver.end - ack_slack))
            return WindowVerdict::out_of_window;
    }
    const uint32_t window = static_cast<uint32_t>(seg.window) << window_scale(w, s);
    if (after(end, sender.end)) sender.end = end;
    if (after(sender.end, sender.maxend)) sender.maxend = sender.end;  // past the window (liberal, or a probe)
    if (!(w.flags[s] & kWindowSideAcked) || after(seg.ack, sender.maxack)) sender.maxack = seg.ack;
    if (!receiver_seen) receiver.end = seg.ack;  // until it is seen, the best guess
    const uint32_t reach = seg.ack + std::max<uint32_t>(window, 1);
    if (!(w.flags[r] & kWindowSideBounded) || after(reach, receiver.maxend)) receiver.maxend = reach;
    w.flags[s] |= kWindowSideAcked;
    w.flags[r] |= kWindowSideBounded;
    if (SLUICE_UNLIKELY(window > sender_maxwin)) set_tcp_window_maxwin(w, s, window);
    return WindowVerdict::pass;
}

}  // namespace tcp_window_detail

// tcp_window_check for any segment: the handshake, RSTs, FINs, a side not seen yet, and every ACK check_ack takes.
inline WindowVerdict tcp_window_full_check(TcpWindow& w, bool reply, const TcpSegmentFields& seg, bool synchronized) {
    const int s = reply ? 1 : 0, r = 1 - s;
    const tcp::Kind kind = tcp::classify(seg.flags);
    // RFC 5961 4.2: whatever its sequence, a SYN on a synchronized connection is answered, never let through.
    if (kind == tcp::Kind::syn && synchronized) return WindowVerdict::syn_challenge;
    const bool syn = seg.flags & tcp::kSyn, ack = seg.flags & tcp::kAck;
    const uint32_t end = seg.seq + seg.payload + (syn ? 1u : 0u) + ((seg.flags & tcp::kFin) ? 1u : 0u);
    TcpWindowSide& receiver = w.side[r];

    if ((kind == tcp::Kind::syn || kind == tcp::Kind::synack) && (!synchronized || !(w.flags[s] & kWindowSideSyn))) {
        // The handshake: the sender's side starts from its SYN. A SYN+ACK must acknowledge the SYN it answers.
        if (kind == tcp::Kind::synack && (w.flags[r] & kWindowSideSeen) &&
            !tcp_window_detail::acks_syn(seg.ack, receiver) && tcp_window_check_of(w) == TcpWindowCheck::strict)
            return WindowVerdict::out_of_window;
        w.side[s] = TcpWindowSide{end, end, seg.ack};
        set_tcp_window_maxwin(w, s, std::max<uint32_t>(seg.window, 1));
        set_tcp_window_side_flags(w, s,
                                  static_cast<uint8_t>((w.flags[s] & kWindowSideChallenged) | kWindowSideSeen |
                                                       kWindowSideSyn | (seg.scale >= 0 ? kWindowSideScale : 0) |
                                                       (ack ? kWindowSideAcked : 0)));
        set_tcp_window_scale(
            w, s,
            seg.scale >= 0 ? std::min<uint8_t>(static_cast<uint8_t>(seg.scale), tcp_window_detail::kMaxScale) : 0);
        if (ack) {
            receiver.maxend = seg.ack + std::max<uint32_t>(seg.window, 1);  // a SYN's window is never scaled
            w.flags[r] |= kWindowSideBounded;
        }
        return WindowVerdict::pass;
    }

    // The sender as it would be after this packet; kept only if the packet passes.
    TcpWindowSide sender = w.side[s];
    uint8_t sender_flags = w.flags[s];
    const uint32_t known_maxwin = tcp_window_maxwin(w, s);
    uint32_t sender_maxwin = known_maxwin;
    const bool sender_known = sender_flags & kWindowSideSeen;
    const uint32_t window =
        syn ? seg.window : static_cast<uint32_t>(seg.window) << tcp_window_detail::window_scale(w, s);
    if (!sender_known) {  // mid-stream: the sender's side starts from its first packet
        sender.end = end;
        if (!(sender_flags & kWindowSideBounded) || tcp_window_detail::after(end, sender.maxend)) sender.maxend = end;
        sender_maxwin = std::max<uint32_t>(window, 1);
        sender_flags |= kWindowSideSeen;
    }
    const bool judged = w.flags[r] & kWindowSideSeen;  // both sides known: the window can be checked
    const bool seq_in_window = !tcp_window_detail::after(seg.seq, sender.maxend) &&
                               !tcp_window_detail::before(end, sender.end - tcp_window_maxwin(w, r));

    if (kind == tcp::Kind::rst) {
        // RFC 5961 3.2 at the receiver's RCV.NXT. A sender never seen before (the responder's RST to a SYN) has no
        // sequence to match: its RST must acknowledge the receiver's SYN instead (RFC 9293 3.10.7.3).
        const bool exact =
            (sender_known || (w.flags[r] & kWindowSideAcked))
                ? rst_hits_rcv_nxt(w, r, seg.seq)
                : ack && (w.flags[r] & kWindowSideSeen) && tcp_window_detail::acks_syn(seg.ack, receiver);
        if (!exact) {
            if (!judged || tcp_window_check_of(w) != TcpWindowCheck::strict || (sender_known && seq_in_window))
                return WindowVerdict::rst_challenge;
            return WindowVerdict::rst_out_of_window;
        }
    } else if (judged && tcp_window_check_of(w) == TcpWindowCheck::strict) {
        const uint32_t ack_value = ack ? seg.ack : receiver.end;
        const uint32_t ack_slack = std::max(sender_maxwin, tcp_window_detail::kMinAckWindow);
        const bool ack_in_window = !tcp_window_detail::after(ack_value, receiver.end) &&
                                   !tcp_window_detail::before(ack_value, receiver.end - ack_slack);
        if (!seq_in_window || !ack_in_window) return WindowVerdict::out_of_window;
    }

    // Learn: the sender's reach and window, and what its acknowledgment and window let the receiver send.
    if (tcp_window_detail::after(end, sender.end)) sender.end = end;
    if (tcp_window_detail::after(sender.end, sender.maxend))
        sender.maxend = sender.end;  // past the window (liberal, or a probe)
    sender_maxwin = std::max(sender_maxwin, window);
    if (ack) {
        if (!(sender_flags & kWindowSideAcked) || tcp_window_detail::after(seg.ack, sender.maxack))
            sender.maxack = seg.ack;
        sender_flags |= kWindowSideAcked;
        if (!(w.flags[r] & kWindowSideSeen)) receiver.end = seg.ack;  // until it is seen, the best guess
        const uint32_t reach = seg.ack + std::max<uint32_t>(window, 1);
        if (!(w.flags[r] & kWindowSideBounded) || tcp_window_detail::after(reach, receiver.maxend))
            receiver.maxend = reach;
        w.flags[r] |= kWindowSideBounded;
    }
    w.side[s] = sender;
    w.flags[s] = sender_flags;
    if (sender_maxwin != known_maxwin) set_tcp_window_maxwin(w, s, sender_maxwin);
    return kind == tcp::Kind::rst ? WindowVerdict::rst_exact : WindowVerdict::pass;
}

// Judges one segment of a connection from the initiator (reply false) or the responder, and learns from it when it
// passes (rst_exact and pass). synchronized: the connection is past its handshake (established to last_ack: RFC
// 5961 4's synchronized states, without time_wait, where a new SYN may reuse the ports). A side not seen yet is
// learned from its first packet (mid-stream pickup) and, until both sides are seen, nothing is dropped for its
// window: the unseen side's window and scale are unknown ("be liberal", as nf_conntrack with a picked-up connection).
// Inline: every TCP packet of a tracked connection comes through it.
inline WindowVerdict tcp_window_check(TcpWindow& w, bool reply, const TcpSegmentFields& seg, bool synchronized) {
    const int s = reply ? 1 : 0;
    if (SLUICE_LIKELY((seg.flags & (tcp::kFin | tcp::kSyn | tcp::kRst | tcp::kAck)) == tcp::kAck &&
                      (w.flags[s] & kWindowSideSeen)))
        return tcp_window_detail::check_ack(w, s, seg);
    return tcp_window_full_check(w, reply, seg, synchronized);
}

// A syn_proxy connection's window at its opening (the client's ACK that returned the cookie): both sides known from
// the handshake sluice made, neither scaled (sluice's SYN+ACK carries no window scale option).
void tcp_window_open_proxied(TcpWindow& window, uint32_t client_next, uint16_t client_window, uint32_t cookie_next,
                             uint16_t proxy_window);

// What a challenge ACK from the receiver of a segment sent by the initiator (or the responder) carries (RFC 5961
// 3.2: <SEQ=SND.NXT><ACK=RCV.NXT><CTL=ACK>), in the tracked sequence spaces. RCV.NXT is the highest acknowledgment
// the receiver sent, never more: an ACK in its name for data still in flight would make the sender drop that data
// from its retransmission queue, and one segment of it lost on the way would stall the connection for good. A peer
// that really lost the connection answers with a RST there, which is then exact.
struct ChallengeAck {
    uint32_t seq;
    uint32_t ack;
    uint16_t window;
};
ChallengeAck tcp_challenge_ack(const TcpWindow& window, bool sender_is_responder);

}  // namespace sluice

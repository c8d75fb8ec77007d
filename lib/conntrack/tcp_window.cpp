#include "conntrack/tcp_window.hpp"

#include <algorithm>

#include "conntrack/tcp_state.hpp"

namespace sluice {
namespace {

// Sequence arithmetic modulo 2^32 (RFC 9293 3.4).
constexpr bool before(uint32_t a, uint32_t b) { return static_cast<int32_t>(a - b) < 0; }
constexpr bool after(uint32_t a, uint32_t b) { return before(b, a); }

// An acknowledgment may trail the peer's highest sequence by at least this much (nf_conntrack's MAXACKWINDOW floor):
// a window's worth of the peer's data may be in flight or lost.
constexpr uint32_t kMinAckWindow = 66000;
constexpr uint8_t kMaxScale = 14;  // RFC 7323 2.3

// The scale of a side's (non-SYN) window field: known once both SYNs were seen, 0 unless both carried the option.
// Unknown (a picked-up connection): the largest, so windows are over-estimated, never under-estimated.
uint8_t window_scale(const TcpWindow& w, int side) {
    const uint8_t both = w.flags[0] & w.flags[1];
    if (!(both & kWindowSideSyn)) return kMaxScale;
    return (both & kWindowSideScale) ? w.scale[side] : 0;
}

}  // namespace

const char* tcp_window_check_name(TcpWindowCheck check) {
    switch (check) {
    case TcpWindowCheck::strict: return "strict";
    case TcpWindowCheck::liberal: return "liberal";
    case TcpWindowCheck::off: return "off";
    }
    return "?";
}

WindowVerdict tcp_window_check(TcpWindow& w, bool reply, const TcpSegmentFields& seg, bool synchronized) {
    const int s = reply ? 1 : 0, r = 1 - s;
    const tcp::Kind kind = tcp::classify(seg.flags);
    // RFC 5961 4.2: whatever its sequence, a SYN on a synchronized connection is answered, never let through.
    if (kind == tcp::Kind::syn && synchronized) return WindowVerdict::syn_challenge;
    const bool syn = seg.flags & tcp::kSyn, ack = seg.flags & tcp::kAck;
    const uint32_t end = seg.seq + seg.payload + (syn ? 1u : 0u) + ((seg.flags & tcp::kFin) ? 1u : 0u);
    TcpWindowSide& receiver = w.side[r];

    if ((kind == tcp::Kind::syn || kind == tcp::Kind::synack) && (!synchronized || !(w.flags[s] & kWindowSideSyn))) {
        // The handshake: the sender's side starts from its SYN. A SYN+ACK must acknowledge the SYN it answers.
        if (kind == tcp::Kind::synack && (w.flags[r] & kWindowSideSeen) && seg.ack != receiver.end &&
            w.check == TcpWindowCheck::strict)
            return WindowVerdict::out_of_window;
        w.side[s] = TcpWindowSide{end, end, std::max<uint32_t>(seg.window, 1)};
        w.flags[s] = kWindowSideSeen | kWindowSideSyn | (seg.scale >= 0 ? kWindowSideScale : 0);
        w.scale[s] = seg.scale >= 0 ? std::min<uint8_t>(static_cast<uint8_t>(seg.scale), kMaxScale) : 0;
        if (ack) {
            receiver.maxend = seg.ack + std::max<uint32_t>(seg.window, 1);  // a SYN's window is never scaled
            w.flags[r] |= kWindowSideBounded;
        }
        return WindowVerdict::pass;
    }

    // The sender as it would be after this packet; kept only if the packet passes.
    TcpWindowSide sender = w.side[s];
    uint8_t sender_flags = w.flags[s];
    const bool sender_known = sender_flags & kWindowSideSeen;
    const uint32_t window = syn ? seg.window : static_cast<uint32_t>(seg.window) << window_scale(w, s);
    if (!sender_known) {  // mid-stream: the sender's side starts from its first packet
        sender.end = end;
        if (!(sender_flags & kWindowSideBounded) || after(end, sender.maxend)) sender.maxend = end;
        sender.maxwin = std::max<uint32_t>(window, 1);
        sender_flags |= kWindowSideSeen;
    }
    const bool judged = w.flags[r] & kWindowSideSeen;  // both sides known: the window can be checked
    const bool seq_in_window = !after(seg.seq, sender.maxend) && !before(end, sender.end - receiver.maxwin);

    if (kind == tcp::Kind::rst) {
        // RFC 5961 3.2 at the sender's next sequence. A sender never seen before (the responder's RST to a SYN) has
        // no sequence to match: its RST must acknowledge the receiver's SYN instead (RFC 9293 3.10.7.3).
        const bool exact =
            sender_known ? seg.seq == sender.end : ack && (w.flags[r] & kWindowSideSeen) && seg.ack == receiver.end;
        if (!exact) {
            if (!judged || w.check != TcpWindowCheck::strict || (sender_known && seq_in_window))
                return WindowVerdict::rst_challenge;
            return WindowVerdict::rst_out_of_window;
        }
    } else if (judged && w.check == TcpWindowCheck::strict) {
        const uint32_t ack_value = ack ? seg.ack : receiver.end;
        const uint32_t ack_slack = std::max(sender.maxwin, kMinAckWindow);
        const bool ack_in_window = !after(ack_value, receiver.end) && !before(ack_value, receiver.end - ack_slack);
        if (!seq_in_window || !ack_in_window) return WindowVerdict::out_of_window;
    }

    // Learn: the sender's reach and window, and what its acknowledgment and window let the receiver send.
    if (after(end, sender.end)) sender.end = end;
    if (after(sender.end, sender.maxend)) sender.maxend = sender.end;  // past the window (liberal, or a probe)
    sender.maxwin = std::max(sender.maxwin, window);
    if (ack) {
        if (!(w.flags[r] & kWindowSideSeen)) receiver.end = seg.ack;  // until it is seen, the best guess
        const uint32_t reach = seg.ack + std::max<uint32_t>(window, 1);
        if (!(w.flags[r] & kWindowSideBounded) || after(reach, receiver.maxend)) receiver.maxend = reach;
        w.flags[r] |= kWindowSideBounded;
    }
    w.side[s] = sender;
    w.flags[s] = sender_flags;
    return kind == tcp::Kind::rst ? WindowVerdict::rst_exact : WindowVerdict::pass;
}

void tcp_window_open_proxied(TcpWindow& w, uint32_t client_next, uint16_t client_window, uint32_t cookie_next,
                             uint16_t proxy_window) {
    const uint32_t client_win = std::max<uint32_t>(client_window, 1), proxy_win = std::max<uint32_t>(proxy_window, 1);
    w.side[0] = TcpWindowSide{client_next, client_next + proxy_win, client_win};
    w.side[1] = TcpWindowSide{cookie_next, cookie_next + client_win, proxy_win};
    w.scale[0] = w.scale[1] = 0;
    w.flags[0] = w.flags[1] = kWindowSideSeen | kWindowSideSyn | kWindowSideBounded;
}

ChallengeAck tcp_challenge_ack(const TcpWindow& w, bool sender_is_responder) {
    const int s = sender_is_responder ? 1 : 0, r = 1 - s;
    const uint8_t scale = (w.flags[0] & w.flags[1] & kWindowSideSyn) ? window_scale(w, r) : 0;
    const uint32_t window = std::min<uint32_t>(w.side[r].maxwin >> scale, UINT16_MAX);
    return {w.side[r].end, w.side[s].end, static_cast<uint16_t>(std::max<uint32_t>(window, 1))};
}

}  // namespace sluice

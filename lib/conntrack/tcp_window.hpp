// TCP sequence and window tracking for one connection, in the spirit of Linux nf_conntrack's tcp_in_window (per
// direction: the highest sequence sent, the highest the peer's window allows, the largest window advertised) and of
// RFC 5961's defences against blind in-window attacks (a RST must hit the exact next sequence; one merely in the
// window, or a SYN on a synchronized connection, gets a challenge ACK). Pure and allocation-free: any thread,
// fast-path safe. The state lives in ConnTable's per-slot window array, touched only by TCP packets.
#pragma once

#include <cstdint>

#include "common/tcp_window_check.hpp"

namespace sluice {

const char* tcp_window_check_name(TcpWindowCheck check);

// One direction of a connection, in its sender's sequence space (a syn_proxy connection's responder in the
// client's, the cookie's, space: see ConnTable::seq_shift).
struct TcpWindowSide {
    uint32_t end;     // the highest sequence sent, plus one (seq + payload + SYN + FIN)
    uint32_t maxend;  // the highest sequence the peer's acknowledgment and window let this side send
    uint32_t maxwin;  // the largest window this side advertised, scaled
};

// A side's flags (TcpWindow::flags).
inline constexpr uint8_t kWindowSideSeen = 0x01;     // a packet of this side was learned from
inline constexpr uint8_t kWindowSideSyn = 0x02;      // its SYN was seen: its window scale is known
inline constexpr uint8_t kWindowSideScale = 0x04;    // its SYN carried a window scale option
inline constexpr uint8_t kWindowSideBounded = 0x08;  // maxend was set by the peer's acknowledgment

// Both directions: [0] the initiator's, [1] the responder's (ConnEntry::packets' order). 32 bytes, aligned, so one
// connection's window never straddles two cache lines.
struct alignas(32) TcpWindow {
    TcpWindowSide side[2];
    uint8_t scale[2];  // the window scale each side announced (RFC 7323 2.2), used once both SYNs carried one
    uint8_t flags[2];
    TcpWindowCheck check;
};
static_assert(sizeof(TcpWindow) == 32);

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
    rst_exact,          // a RST at the next sequence: goes on and closes the connection
    rst_challenge,      // a RST in the window but not exact (or unjudgeable, liberal): answered with a challenge ACK
    rst_out_of_window,  // a RST outside the window: dropped, the connection kept
    syn_challenge,      // a SYN on a synchronized connection: answered with a challenge ACK, the connection kept
};

// Judges one segment of a connection from the initiator (reply false) or the responder, and learns from it when it
// passes (rst_exact and pass). synchronized: the connection is past its handshake (established to last_ack: RFC
// 5961 4's synchronized states, without time_wait, where a new SYN may reuse the ports). A side not seen yet is
// learned from its first packet (mid-stream pickup) and, until both sides are seen, nothing is dropped for its
// window: the unseen side's window and scale are unknown ("be liberal", as nf_conntrack with a picked-up connection).
WindowVerdict tcp_window_check(TcpWindow& window, bool reply, const TcpSegmentFields& segment, bool synchronized);

// A syn_proxy connection's window at its opening (the client's ACK that returned the cookie): both sides known from
// the handshake sluice made, neither scaled (sluice's SYN+ACK carries no window scale option).
void tcp_window_open_proxied(TcpWindow& window, uint32_t client_next, uint16_t client_window, uint32_t cookie_next,
                             uint16_t proxy_window);

// What a challenge ACK from the receiver of a segment sent by the initiator (or the responder) carries (RFC 5961
// 3.2: <SEQ=SND.NXT><ACK=RCV.NXT><CTL=ACK>), in the tracked sequence spaces. RCV.NXT is taken as the sender's own
// next sequence: a peer that really lost the connection answers the ACK with a RST there, which is then exact.
struct ChallengeAck {
    uint32_t seq;
    uint32_t ack;
    uint16_t window;
};
ChallengeAck tcp_challenge_ack(const TcpWindow& window, bool sender_is_responder);

}  // namespace sluice

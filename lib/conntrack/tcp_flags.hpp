// TCP flag bits and what a segment's flags mean to connection tracking: shared by the state machine
// (tcp_state.hpp) and the window check (tcp_window.hpp). Pure; any thread, fast-path safe.
#pragma once

#include <cstdint>

namespace sluice::tcp {

// Raw TCP flag bits (RFC 9293 §3.1, plus ECE/CWR from RFC 3168).
inline constexpr uint8_t kFin = 0x01;
inline constexpr uint8_t kSyn = 0x02;
inline constexpr uint8_t kRst = 0x04;
inline constexpr uint8_t kPsh = 0x08;
inline constexpr uint8_t kAck = 0x10;
inline constexpr uint8_t kUrg = 0x20;
inline constexpr uint8_t kEce = 0x40;
inline constexpr uint8_t kCwr = 0x80;

// What a segment means to the state machine. Precedence as in nf_conntrack's get_conntrack_index(): RST, then
// SYN (with or without ACK), then FIN, then ACK. `bad` is a flag combination no TCP stack sends (SYN+FIN,
// FIN without ACK, no flags at all, ...: nf_conntrack's tcp_valid_flags[]); it is invalid in every state.
enum class Kind : uint8_t { syn, synack, fin, ack, rst, bad, count };

constexpr Kind classify(uint8_t tcp_flags) {
    // PSH, URG, ECE and CWR do not change what a segment means to the state machine (an ECN-setup SYN carries
    // ECE+CWR). The combinations below are the ones real stacks send (nf_conntrack's tcp_valid_flags[]).
    switch (tcp_flags & (kFin | kSyn | kRst | kAck)) {
    case kSyn: return Kind::syn;
    case kSyn | kAck: return Kind::synack;
    case kRst:
    case kRst | kAck: return Kind::rst;
    case kFin | kAck: return Kind::fin;
    case kAck: return Kind::ack;
    default: return Kind::bad;
    }
}

}  // namespace sluice::tcp

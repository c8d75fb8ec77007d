// The TCP connection state machine as a lookup table, in the spirit of Linux nf_conntrack_proto_tcp.c
// (tcp_conntracks[direction][packet kind][state]) and DPVS ip_vs_proto_tcp.c. Pure and allocation-free: any
// thread, fast-path safe. ConnTable::track() is its only user on the fast path; it is separate so it can be read
// and tested on its own.
#pragma once

#include <cstdint>

#include "conntrack/conn_table.hpp"
#include "conntrack/tcp_flags.hpp"

namespace sluice::tcp {

// Sub-states the table needs but ConnState does not show; kept in ConnEntry::flags next to kConnFlagLive.
inline constexpr uint8_t kFlagSimultaneousOpen = 0x02;   // tcp_syn_sent: the responder sent a SYN too
inline constexpr uint8_t kFlagResponderFinFirst = 0x04;  // tcp_fin_wait/close_wait: the first FIN was the responder's
inline constexpr uint8_t kSubStateFlags = kFlagSimultaneousOpen | kFlagResponderFinFirst;

enum class Step : uint8_t {
    advance,  // the packet is valid: take the new state and push the expiry out
    ignore,   // let it through but change nothing, not even the expiry (nf_conntrack's sIG)
    invalid,  // makes no sense here: the caller drops it (nf_conntrack's sIV)
};

struct Transition {
    Step step;
    ConnState state;  // the new state (advance), else the old one
    uint8_t flags;    // the new sub-state bits (kSubStateFlags only)
};

// One segment of a connection in `state` (sub-state bits in `flags`), sent by the initiator (reply == false) or
// the responder (reply == true).
Transition step(ConnState state, uint8_t flags, bool reply, Kind kind);

// What a one-way connection (kConnFlagOneWay: dsr, tunnel) does with a first packet that is not a SYN. Behind ECMP
// such a packet belongs to a connection another instance saw open (it died, or ECMP rehashed); the backend still
// holds the connection, so the packet must reach it (Maglev paper §3.3, Katran's LRU-miss path):
// - adopt: an ACK (with or without data): track the connection from here on, as established, as if the
//   handshake had been seen (Katran, nf_conntrack_tcp_loose: a mid-stream ACK proves a live connection as much
//   as one-way tracking ever can);
// - forward: a FIN or RST: the connection is ending; pass it on without an entry (Katran forwards too), so the
//   backend releases its side, but leave no entry behind for a connection that is going away (and none that a
//   stream of spoofed RSTs could fill the table with);
// - none: SYN (opens as usual), SYN+ACK, or flags no stack sends (Kind::bad): not a mid-stream packet.
enum class Pickup : uint8_t { none, adopt, forward };

constexpr Pickup one_way_pickup(Kind kind) {
    switch (kind) {
    case Kind::ack: return Pickup::adopt;
    case Kind::fin:
    case Kind::rst: return Pickup::forward;
    default: return Pickup::none;
    }
}

}  // namespace sluice::tcp

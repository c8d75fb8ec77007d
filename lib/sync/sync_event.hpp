// A connection event a worker hands to the sync thread (and the sync thread to the owning worker of a peer's
// connection): the whole entry, so that one event is enough to install the connection on a peer. Fixed size, an
// rte_ring element; plain data, any thread.
#pragma once

#include <cstdint>

#include "common/five_tuple.hpp"
#include "conntrack/conn_table.hpp"
#include "conntrack/tcp_window.hpp"

namespace sluice {

enum class SyncEventKind : uint8_t {
    opened,   // a new connection (or one a resync or refresh repeats): install it, or update the one there
    updated,  // a state that matters changed, or an idle entry's lifetime is refreshed
    closed,   // removed on its owner (a RST, a removed backend): remove it
    count
};

// What travels of a ConnEntry. The tuple is the initiator's (client -> VIP for a balanced connection), so the
// receiver rebuilds the canonical key, the initiator side and, for NAT, the reply tuple from it.
struct SyncEvent {
    TcpWindow window;  // TCP only: the sequence tracking, so that a strict window check goes on (not maxack)
    FiveTuple tuple;
    uint32_t rule_index;  // the rule's stable id that allowed it (UINT32_MAX: the default)
    uint32_t backend;     // stable backend id + 1, 0 when not balanced
    uint32_t seq_shift;   // syn_proxy: the shift the alias holds
    uint32_t lifetime_s;  // seconds left before it expires on the sender
    uint16_t nat_port;    // host order, 0 when none
    uint16_t in_port;     // the port the opening packet came in on
    uint8_t nat_address;  // index of its pool address
    SyncEventKind kind;
    ConnState state;
    uint8_t flags;  // the entry's flags, without kConnFlagLive and kConnFlagAlias
};
static_assert(sizeof(SyncEvent) == 96);  // the entry's 64 bytes that travel and the 32-byte window

// The flags an event carries: sub-state bits, one-way, syn_proxy (live and alias belong to the table's own slots).
inline constexpr uint8_t kSyncedFlags = static_cast<uint8_t>(~(kConnFlagLive | kConnFlagAlias));

}  // namespace sluice

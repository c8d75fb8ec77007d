// The workers' side of state sync (lib/sync, docs/operations/ha.md): a worker hands its connections'
// events to the sync thread through its own event ring, refreshes long-lived entries at a share of their timeout,
// and installs what peers sent into its own table from its apply ring. Owning worker only; fast-path safe (no lock,
// syscall or allocation: a full ring drops the event and counts it).
#pragma once

#include <cstdint>

#include "conntrack/conn_table.hpp"
#include "lb/lb_tables.hpp"
#include "nat/nat_ports.hpp"
#include "pipeline/lcore_context.hpp"
#include "sync/sync_event.hpp"

namespace sluice {

// Connection conn as an event: false for one that cannot be installed elsewhere (a syn_proxy connection still
// waiting for its backend's answer). tsc_hz: rte_get_tsc_hz(). initiator: the connection's initiator tuple when the
// caller holds it (the packet that opened it), which spares reading the key back from the table.
bool make_sync_event(const ConnTable& table, int32_t conn, SyncEventKind kind, uint64_t now_tsc, uint64_t tsc_hz,
                     SyncEvent& event, const FiveTuple* initiator = nullptr);

// What installing an event did.
enum class SyncInstall : uint8_t {
    installed,  // a new entry
    updated,    // an entry already here took the event's state
    removed,    // closed: the entry is gone (or was not here)
    refused,    // no room, its NAT port taken here, or a backend this instance does not know
};

// Installs (or updates, or removes) event's connection in table, as its owner had it: NAT binding and alias, backend,
// state, rule, lifetime. A TCP window is taken with its sides to be learned again from their next packets (an
// update may be a refresh-interval old). The entry is marked kConnFlagLearned. backend_traffic: counts the new
// connection on its backend, as the release hook's close will.
SyncInstall install_sync_event(ConnTable& table, NatPortPool& nat_ports, const LbTables& lb,
                               BackendTraffic* backend_traffic, const SyncEvent& event, uint64_t now_tsc,
                               uint64_t tsc_hz);

// Hands conn's event to the sync thread (nothing when sync is off).
void emit_sync_event(LcoreContext& ctx, ConnTable& table, int32_t conn, SyncEventKind kind, uint64_t now_tsc,
                     const FiveTuple* initiator = nullptr);
inline void sync_event(LcoreContext& ctx, ConnTable& table, int32_t conn, SyncEventKind kind, uint64_t now_tsc,
                       const FiveTuple* initiator = nullptr) {
    if (SLUICE_UNLIKELY(ctx.sync_out != nullptr)) emit_sync_event(ctx, table, conn, kind, now_tsc, initiator);
}

// ConnTable's expiry hook (arg: the worker's LcoreContext): a connection of this instance's that times out is
// announced closed, so peers drop their copy now rather than at their own, possibly later, expiry.
void emit_expired(void* arg, ConnTable& table, int32_t conn, uint64_t now_tsc);

// Once per loop iteration, when sync is on: installs a bounded number of peers' events from the apply ring, and
// walks a few slots of the table for entries due a refresh.
void sync_housekeeping(LcoreContext& ctx, const Snapshot& snapshot, uint64_t now_tsc);

}  // namespace sluice

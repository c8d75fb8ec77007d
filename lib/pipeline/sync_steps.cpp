#include "pipeline/sync_steps.hpp"

#include <rte_ring.h>
#include <rte_ring_peek_zc.h>

#include "common/ip_proto.hpp"
#include "lb/lb_decision.hpp"
#include "pipeline/snapshot.hpp"

namespace sluice {
namespace {

// Peers' events a worker installs per loop iteration at most, and how often it looks at its apply ring (the ring's
// indexes are a line the sync thread writes: not read on every iteration, after DPDK's ip_pipeline).
constexpr unsigned kApplyBurst = 32;
constexpr uint64_t kApplyPolls = 16;
// Slots the refresh walk reads per loop iteration (the expiry sweep's budget).
constexpr uint32_t kRefreshSlots = 8;

// Whole seconds of a TSC count without a 64-bit division (tens of cycles, twice per event and once per loop
// iteration): a multiplication by 2^64 / tsc_hz, worked out once per thread.
uint64_t whole_seconds(uint64_t tsc, uint64_t tsc_hz) {
    using u128 = unsigned __int128;
    thread_local uint64_t hz = 0, inverse = 0;
    if (SLUICE_UNLIKELY(hz != tsc_hz)) {
        hz = tsc_hz;
        inverse = static_cast<uint64_t>((u128{1} << 64) / tsc_hz);
    }
    return static_cast<uint64_t>((static_cast<u128>(tsc) * inverse) >> 64);
}

uint16_t seconds_of(uint64_t tsc, uint64_t tsc_hz) { return static_cast<uint16_t>(whole_seconds(tsc, tsc_hz)); }

// The initiator's tuple of a canonical key.
FiveTuple initiator_tuple(const FiveTuple& key, bool initiator_is_low) {
    if (initiator_is_low) return key;
    FiveTuple t = key;
    t.src = key.dst;
    t.dst = key.src;
    set_ports(t, key.dst_port, key.src_port);
    return t;
}

// Binds a new entry learned from a peer to its NAT port and backend, and makes its reply key. False: refused (the
// entry is to be removed).
bool bind_learned(ConnTable& table, NatPortPool& nat_ports, const LbTables& lb, BackendTraffic* backend_traffic,
                  int32_t conn, const SyncEvent& event) {
    if (event.backend == 0) return true;
    const uint32_t backend = event.backend - 1;
    if (backend >= lb.backends.size()) return false;
    ConnEntry& entry = table.entry(conn);
    if (event.nat_port != 0) {
        if (lb.backends[backend].mode != LbMode::nat || event.nat_address >= lb.nat_pool.size() ||
            !nat_ports.take(event.nat_address, backend, event.nat_port))
            return false;
        entry.nat_port = event.nat_port;
        entry.nat_address = event.nat_address;
    }
    entry.backend = event.backend;  // from here on, removal releases the port and counts it closed
    if (backend_traffic) counter_add(backend_traffic[backend].new_connections);
    if (event.nat_port == 0) return true;
    const FiveTuple reply =
        backend_reply_tuple(lb, lb.backends[backend], event.nat_address, event.nat_port, event.tuple);
    const int32_t alias = table.insert_alias(reply, symmetric_flow_hash(reply), conn);
    if (alias < 0) return false;
    table.set_origin(alias, event.tuple.src, event.tuple.src_port, event.tuple.dst, event.tuple.dst_port);
    table.set_seq_shift(alias, event.seq_shift);
    return true;
}

void install_from_ring(LcoreContext& ctx, const Snapshot& snapshot, uint64_t now_tsc) {
    SyncEvent events[kApplyBurst];
    const unsigned n = rte_ring_sc_dequeue_burst_elem(ctx.sync_in, events, sizeof(SyncEvent), kApplyBurst, nullptr);
    for (unsigned k = 0; k < n; ++k) {
        switch (install_sync_event(*ctx.conn_table, *ctx.nat_ports, *snapshot.lb, ctx.backend_traffic, events[k],
                                   now_tsc, ctx.tsc_hz)) {
        case SyncInstall::installed:
            counter_add(ctx.counters.sync_installed);
            counter_add(ctx.counters.conn_inserts);  // the entry gauge is inserts - expired
            break;
        case SyncInstall::updated:
        case SyncInstall::removed: counter_add(ctx.counters.sync_updated); break;
        case SyncInstall::refused: counter_add(ctx.counters.sync_refused); break;
        }
    }
}

// A few slots of the table: an entry of this instance's whose peers were told of it longer ago than its state's
// refresh interval is sent again (with its lifetime), so that a connection busy here never expires there.
void refresh_walk(LcoreContext& ctx, uint64_t now_tsc) {
    ConnTable& table = *ctx.conn_table;
    if (table.size() == 0) return;
    const uint16_t now_s = seconds_of(now_tsc, ctx.tsc_hz);
    uint32_t cursor = ctx.sync_cursor;
    const uint32_t slots = table.slot_count();
    for (uint32_t n = 0; n < kRefreshSlots; ++n) {
        const ConnEntry& e = table.entry(static_cast<int32_t>(cursor));
        if ((e.flags & (kConnFlagLive | kConnFlagAlias | kConnFlagLearned)) == kConnFlagLive &&
            static_cast<uint16_t>(now_s - e.synced_s) >= ctx.sync_refresh_s[static_cast<std::size_t>(e.state)])
            emit_sync_event(ctx, table, static_cast<int32_t>(cursor), SyncEventKind::updated, now_tsc);
        if (++cursor == slots) cursor = 0;
    }
    ctx.sync_cursor = cursor;
}

}  // namespace

bool make_sync_event(const ConnTable& table, int32_t conn, SyncEventKind kind, uint64_t now_tsc, uint64_t tsc_hz,
                     SyncEvent& event, const FiveTuple* initiator) {
    const ConnEntry& e = table.entry(conn);
    if (e.flags & kConnFlagSynProxyPending) return false;
    if (initiator) {
        event.tuple = *initiator;
    } else {
        FiveTuple key;
        table.live_key(conn, key);
        event.tuple = initiator_tuple(key, e.initiator_is_low);
    }
    event.window = event.tuple.proto == kIpProtoTcp ? table.window(conn) : TcpWindow{};
    event.rule_index = e.rule_index;
    event.backend = e.backend;
    event.seq_shift =
        (e.flags & kConnFlagSynProxy) && e.peer != kNoPeer ? table.seq_shift(static_cast<int32_t>(e.peer)) : 0;
    event.lifetime_s = static_cast<uint32_t>(whole_seconds(table.lifetime_tsc(e, now_tsc), tsc_hz));
    event.nat_port = e.nat_port;
    event.in_port = e.in_port;
    event.nat_address = e.nat_address;
    event.kind = kind;
    event.state = e.state;
    event.flags = e.flags & kSyncedFlags & ~kConnFlagLearned;
    return true;
}

SyncInstall install_sync_event(ConnTable& table, NatPortPool& nat_ports, const LbTables& lb,
                               BackendTraffic* backend_traffic, const SyncEvent& event, uint64_t now_tsc,
                               uint64_t tsc_hz) {
    const FiveTuple* tuple = &event.tuple;
    const uint32_t hash = symmetric_flow_hash(event.tuple);
    int32_t position = -1;
    table.lookup_bulk(&tuple, &hash, 1, &position);
    bool via_alias = false;
    int32_t conn = position >= 0 ? table.resolve(position, via_alias) : -1;
    if (event.kind == SyncEventKind::closed) {
        if (conn >= 0) table.remove(conn);
        return SyncInstall::removed;
    }
    const bool fresh = conn < 0;
    if (fresh) {
        conn = table.insert(event.tuple, hash, event.state, event.rule_index, now_tsc);
        if (conn < 0) return SyncInstall::refused;
        if (!bind_learned(table, nat_ports, lb, backend_traffic, conn, event)) {
            table.remove(conn);
            return SyncInstall::refused;
        }
    }
    ConnEntry& e = table.entry(conn);
    e.state = event.state;
    e.flags = static_cast<uint8_t>((e.flags & (kConnFlagLive | kConnFlagAlias)) | event.flags | kConnFlagLearned);
    if (e.peer != kNoPeer) {
        ConnEntry& alias = table.entry(static_cast<int32_t>(e.peer));
        alias.flags = static_cast<uint8_t>((alias.flags & ~kConnFlagSynProxy) | (event.flags & kConnFlagSynProxy));
    }
    e.rule_index = ConnTable::stored_rule(event.rule_index);
    e.in_port = event.in_port;
    table.set_lifetime(e, now_tsc, uint64_t{event.lifetime_s} * tsc_hz);
    e.synced_s = seconds_of(now_tsc, tsc_hz);
    if (event.tuple.proto == kIpProtoTcp) {
        // The sequences may be a refresh interval old: each side is learned again from its next packet (the window
        // check is liberal until both are), keeping the scales the handshake announced and the rule's check.
        TcpWindow& w = table.window(conn);
        w = event.window;
        for (uint8_t& f : w.flags)
            f = static_cast<uint8_t>(f & ~(kWindowSideSeen | kWindowSideBounded | kWindowSideAcked));
    }
    return fresh ? SyncInstall::installed : SyncInstall::updated;
}

void emit_sync_event(LcoreContext& ctx, ConnTable& table, int32_t conn, SyncEventKind kind, uint64_t now_tsc,
                     const FiveTuple* initiator) {
    if (table.entry(conn).flags & kConnFlagSynProxyPending) return;  // nothing a peer could install yet
    table.entry(conn).synced_s = seconds_of(now_tsc, ctx.tsc_hz);    // a dropped event is not retried sooner
    // Written in place in the ring's slot (zero-copy enqueue, an SP ring): the record is not built and copied.
    rte_ring_zc_data slot;
    if (SLUICE_UNLIKELY(rte_ring_enqueue_zc_burst_elem_start(ctx.sync_out, sizeof(SyncEvent), 1, &slot, nullptr) ==
                        0)) {
        counter_add(ctx.counters.sync_events_dropped);
        return;
    }
    make_sync_event(table, conn, kind, now_tsc, ctx.tsc_hz, *static_cast<SyncEvent*>(slot.ptr1), initiator);
    rte_ring_enqueue_zc_elem_finish(ctx.sync_out, 1);
    counter_add(ctx.counters.sync_events_queued);
}

void emit_expired(void* arg, ConnTable& table, int32_t conn, uint64_t now_tsc) {
    if (table.entry(conn).flags & kConnFlagLearned) return;  // its owner tells the peers
    emit_sync_event(*static_cast<LcoreContext*>(arg), table, conn, SyncEventKind::closed, now_tsc);
}

void sync_housekeeping(LcoreContext& ctx, const Snapshot& snapshot, uint64_t now_tsc) {
    if (ctx.sync_in && ctx.counters.polls % kApplyPolls == 0) install_from_ring(ctx, snapshot, now_tsc);
    if (ctx.sync_out) refresh_walk(ctx, now_tsc);
}

}  // namespace sluice

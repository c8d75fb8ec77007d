// A walk over one worker's connection table on behalf of the control thread (sluicectl flows, reload --dry-run):
// connection tables are single-owner, so the control thread hands each worker a FlowWalk and the worker advances it
// a slice bounded by time per loop iteration (never O(table) in one go), then marks it done. The control thread
// owns the FlowWalk and reads it only after `done`; the worker writes it only before, and may still load the pointer
// after it, so the control thread frees a walk only after a QSBR grace period. No allocation on the worker: records
// go into storage the control thread reserved.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "conntrack/conn_table.hpp"

namespace sluice {

struct Snapshot;
struct LcoreContext;

struct FlowRecord {
    FiveTuple tuple;  // initiator -> responder
    ConnState state;
    uint32_t backend;  // stable id + 1, 0 when not balanced
    uint16_t nat_port;
    uint32_t packets[2];   // they wrap at 2^32 (ConnEntry)
    uint64_t expires_tsc;  // when it would expire, in the worker's TSC (to its table's tick)
    TcpWindow window;      // TCP: the sequence and window tracking's state; zero for other protocols
};

struct FlowFilter {
    bool by_address = false;  // either endpoint is `address`
    IpAddress address{};
    IpFamily family = IpFamily::none;
    uint16_t port = 0;  // either endpoint's port (host order), 0: any
    uint8_t proto = 0;  // 0: any
};

struct FlowWalk {
    FlowFilter filter;
    std::size_t max_records = 0;  // records.capacity() is reserved to this before the walk starts
    std::vector<FlowRecord> records;
    uint64_t matched = 0;  // all matching connections, recorded or not

    // reload --dry-run: each connection re-judged by a candidate snapshot (rules; Maglev for balanced ones).
    const Snapshot* candidate = nullptr;
    uint64_t examined = 0;
    uint64_t would_deny = 0;         // the candidate's rules would refuse it as a new connection
    uint64_t backend_gone_drop = 0;  // its backend leaves the config and its service drops such connections
    uint64_t backend_gone_keep = 0;  // its backend leaves the config; the connection is kept until it ends
    uint64_t maglev_moves = 0;       // as a new connection it would get another backend (sticky: it does not move)

    // A full resync for the peers (lib/sync): every connection goes to the worker's sync ring as an `opened` event,
    // the walk pausing while the ring is full (the sync thread drains it), so the dump is paced by the channel.
    bool sync_dump = false;
    uint64_t dumped = 0;

    uint32_t cursor = 0;  // worker: next slot
    std::atomic<bool> done{false};
};

// A walk's share of a worker: one slice of at most kWalkSliceUs per loop iteration when the iteration moved no
// packet, and at most one per kWalkBusyIntervalUs while packets flow (1% of a saturated worker's time, plus what the
// walk evicts from the caches).
constexpr uint64_t kWalkSliceUs = 2;
constexpr uint64_t kWalkBusyIntervalUs = 200;

// Owning worker: advances the walk until the end of the table (then sets done) or until deadline_tsc, whichever
// comes first; it walks a few slots at least, so a walk always ends.
void advance_flow_walk(LcoreContext& ctx, FlowWalk& walk, uint64_t deadline_tsc);

// Owning worker, once per loop iteration: advances the control thread's walk, if one is pending, by one slice when
// the walk's share allows (see kWalkSliceUs). busy: the iteration moved packets. Returns whether it walked: an idle
// worker that walks does not take its idle sleep, which would stretch a walk of a large table to seconds.
bool walk_slice(LcoreContext& ctx, uint64_t now_tsc, bool busy);

}  // namespace sluice

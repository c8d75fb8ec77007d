#include "pipeline/flow_walk.hpp"

#include <rte_cycles.h>
#include <rte_prefetch.h>

#include "common/compiler.hpp"
#include "common/ip_proto.hpp"
#include "lb/lb_decision.hpp"
#include "pipeline/lcore_context.hpp"
#include "pipeline/snapshot.hpp"
#include "pipeline/sync_steps.hpp"

namespace sluice {
namespace {

// A clock read (rte_rdtsc, ~25 cycles) after this much work: a slot of a large table costs two cache misses (its
// line and its key); a batch of dry-run judgements (rte_acl classifications and Maglev picks) more than all of them.
constexpr uint32_t kWorkBetweenClockReads = 4;
// Slots between the one read and the one prefetched: a few misses' latency ahead.
constexpr uint32_t kPrefetchDistance = 8;
// Connections a dry run judges per rte_acl call: its vector methods walk several tuples' tries at once, their cache
// misses overlapping, where one tuple per call waits for each of its own in turn.
constexpr uint32_t kJudgeBatch = 8;

bool matches(const FlowFilter& f, const FiveTuple& t) {
    if (f.proto && t.proto != f.proto) return false;
    if (f.by_address && !(t.family == f.family && (t.src == f.address || t.dst == f.address))) return false;
    if (f.port) {
        const uint16_t be = rte_cpu_to_be_16(f.port);
        if (t.src_port != be && t.dst_port != be) return false;
    }
    return true;
}

// Connections waiting for the candidate's judgement (reload --dry-run), on the walking worker's stack.
struct JudgeBatch {
    uint32_t count = 0;
    FiveTuple tuples[kJudgeBatch];  // initiator -> responder
    const ConnEntry* entries[kJudgeBatch];
};

// What the candidate's load balancer would do with a balanced connection if it were new.
void judge_backend(FlowWalk& walk, const Snapshot& next, const ConnEntry& e, const FiveTuple& tuple) {
    if (e.backend == 0) return;
    const LbTables& lb = *next.lb;
    const uint32_t id = e.backend - 1;
    if (id >= lb.backends.size() || lb.backends[id].removed) {
        const bool drop = id >= lb.backends.size() || lb.backends[id].drop_when_removed;
        ++(drop ? walk.backend_gone_drop : walk.backend_gone_keep);
        return;
    }
    const int32_t s = lb.find_service(tuple);
    if (s < 0) return;
    if (pick_backend(lb.services[static_cast<std::size_t>(s)], stable_flow_hash(tuple)) != id) ++walk.maglev_moves;
}

// What the candidate would say of each batched connection if it were new: its rules' verdict (one rte_acl call per
// family) and its service's backend. Empties the batch.
void judge(FlowWalk& walk, JudgeBatch& batch) {
    const Snapshot& next = *walk.candidate;
    const FirewallTables& fw = *next.firewall;
    walk.examined += batch.count;
    if (fw.enabled) {
        for (const IpFamily family : {IpFamily::ipv4, IpFamily::ipv6}) {
            const FiveTuple* tuples[kJudgeBatch];
            uint16_t in_ports[kJudgeBatch];
            L4MatchBytes l4[kJudgeBatch];
            uint32_t matched[kJudgeBatch];
            uint32_t n = 0;
            for (uint32_t i = 0; i < batch.count; ++i) {
                if (batch.tuples[i].family != family) continue;
                tuples[n] = &batch.tuples[i];
                in_ports[n] = batch.entries[i]->in_port;
                l4[n] = opening_match_bytes(batch.tuples[i]);
                matched[n] = AclClassifier::kNoMatch;
                ++n;
            }
            if (n == 0) continue;
            if (const AclClassifier* classifier = fw.acl(family))
                classifier->classify(tuples, in_ports, l4, matched, n);
            for (uint32_t i = 0; i < n; ++i)
                if (fw.verdict(family, matched[i]).action != RuleAction::allow) ++walk.would_deny;
        }
    }
    for (uint32_t i = 0; i < batch.count; ++i) judge_backend(walk, next, *batch.entries[i], batch.tuples[i]);
    batch.count = 0;
}

}  // namespace

void advance_flow_walk(LcoreContext& ctx, FlowWalk& walk, uint64_t deadline_tsc) {
    ConnTable& table = *ctx.conn_table;
    const uint32_t end = table.slot_count();
    const uint64_t now_tsc = rte_rdtsc();  // the records' expiries: a slice is a few microseconds
    uint32_t work = 0;  // since the last clock read, in slots (a batch of judgements weighs kWorkBetweenClockReads)
    JudgeBatch batch;
    for (; walk.cursor < end; ++walk.cursor) {
        if (batch.count == kJudgeBatch) {
            judge(walk, batch);
            work = kWorkBetweenClockReads;
        }
        if (work >= kWorkBetweenClockReads) {
            if (rte_rdtsc() >= deadline_tsc) {
                if (batch.count) judge(walk, batch);  // slots before the cursor are done with
                return;
            }
            work = 0;
        }
        ++work;
        if (walk.cursor + kPrefetchDistance < end) {
            // Non-temporal: the walk reads each slot once; the worker's own connections should stay in the caches.
            const auto ahead = static_cast<int32_t>(walk.cursor + kPrefetchDistance);
            rte_prefetch_non_temporal(table.slot_address(ahead));
            rte_prefetch_non_temporal(table.key_address(ahead));
        }
        const ConnEntry& e = table.entry(static_cast<int32_t>(walk.cursor));
        if (!(e.flags & kConnFlagLive) || (e.flags & kConnFlagAlias)) continue;
        if (walk.sync_dump) {
            if (!ctx.sync_out || rte_ring_full(ctx.sync_out)) return;  // the same slot again, next slice
            emit_sync_event(ctx, table, static_cast<int32_t>(walk.cursor), SyncEventKind::opened, rte_rdtsc());
            ++walk.dumped;
            continue;
        }
        FiveTuple key;
        table.live_key(static_cast<int32_t>(walk.cursor), key);
        const FiveTuple tuple = e.initiator_is_low ? key : key.reversed();
        if (walk.candidate) {
            batch.tuples[batch.count] = tuple;
            batch.entries[batch.count] = &e;
            ++batch.count;
            continue;
        }
        if (!matches(walk.filter, tuple)) continue;
        ++walk.matched;
        if (walk.records.size() < walk.max_records)  // reserved: never reallocates
            walk.records.push_back(
                {tuple,
                 e.state,
                 e.backend,
                 e.nat_port,
                 {e.packets[0], e.packets[1]},
                 now_tsc + table.lifetime_tsc(e, now_tsc),
                 tuple.proto == kIpProtoTcp ? table.window(static_cast<int32_t>(walk.cursor)) : TcpWindow{}});
    }
    if (batch.count) judge(walk, batch);
    walk.done.store(true, std::memory_order_release);
}

bool walk_slice(LcoreContext& ctx, uint64_t now_tsc, bool busy) {
    FlowWalk* walk = ctx.walk.load(std::memory_order_acquire);
    if (SLUICE_LIKELY(walk == nullptr) || walk->done.load(std::memory_order_relaxed) || !ctx.conn_table) return false;
    if (busy && now_tsc < ctx.next_walk_tsc) return false;
    // The slice starts now, not at now_tsc: the iteration's packets took their time already.
    const uint64_t start = rte_rdtsc();
    advance_flow_walk(ctx, *walk, start + ctx.walk_slice_tsc);
    ctx.next_walk_tsc = start + ctx.walk_busy_interval_tsc;
    return true;
}

}  // namespace sluice

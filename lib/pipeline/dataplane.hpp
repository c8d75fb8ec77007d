// The data plane: worker rings, lcore contexts and their TX buffers, launch and the phased stop.
// Owned by the daemon; control thread only. Lcores see only their LcoreContext and the SharedState.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "pipeline/counters.hpp"
#include "pipeline/lcore_context.hpp"
#include "pipeline/snapshot.hpp"

namespace sluice {

struct LcorePlan {
    unsigned lcore_id = 0;
    bool rx = false;
    bool worker = false;
    std::vector<RxQueue> rx_queues;
};

struct DataplaneSpec {
    std::vector<LcorePlan> lcores;
    std::vector<uint16_t> tx_port_ids;  // every port; each worker owns TX queue <worker index> on each
    uint32_t ring_size = 4096;          // per worker, a power of two
    uint32_t idle_sleep_us = 0;
    bool conntrack = false;  // one connection table per worker (the firewall is on, or services exist)
    uint32_t conn_table_size = 0;
    uint32_t conn_table_ipv6_size = 0;  // 0: ConnTable's default share
    ConnTimeouts conn_timeouts;
    uint16_t nat_port_first = 1024;  // each worker's NAT ports: those of this range it owns (nat_ports.hpp)
    uint16_t nat_port_last = 65535;
    std::size_t nat_pool_addresses = 0;
    uint16_t nat_share_index = 0, nat_shares = 1;  // this instance's share of each NAT port space (sync peers)
    rte_mempool* solicitation_pool = nullptr;      // worker 0 builds ARP/ND solicitations from it
    // State sync (sync_steps.hpp): events per worker ring each way, 0 when sync is off; with conntrack only.
    uint32_t sync_ring_size = 0;
    double sync_refresh_fraction = 0.5;  // of a state's timeout, between two refreshes of an entry
};

// The release hook every worker's ConnTable gets (arg: the worker's LcoreContext): a balanced connection that ends
// gives its NAT port back to the pool and counts one closed connection for its backend. Owning worker only.
void release_connection(void* arg, const ConnEntry& entry);

class Dataplane {
public:
    // Allocates rings, contexts and TX buffers on each lcore's socket and takes the first snapshot; throws
    // StartupError.
    Dataplane(const DataplaneSpec& spec, std::unique_ptr<Snapshot> initial);
    ~Dataplane();
    Dataplane(const Dataplane&) = delete;
    Dataplane& operator=(const Dataplane&) = delete;

    void launch();
    // Runs one turn of every lcore's loop, in plan order, on the calling thread, with the current snapshot: for
    // in-process tests of the whole data path. Never together with launch(). Returns the packets moved.
    uint32_t run_inline(uint64_t now_tsc);
    // Stops RX, lets workers empty their rings and flush TX, and waits for every lcore to return. Idempotent.
    void stop();

    // Publishes next with one atomic store and hands back the previous snapshot once every lcore has passed a
    // quiescent state (no lcore can touch it any more). Blocks the control thread for about one loop iteration of
    // the slowest lcore; lcores never wait.
    std::unique_ptr<Snapshot> publish(std::unique_ptr<Snapshot> next);
    const Snapshot& snapshot() const { return *shared_->snapshot.load(std::memory_order_acquire); }

    // Sums every lcore's counters; any thread.
    CounterTotals totals() const;
    // Each lcore's own counters, for per-lcore metrics; any thread.
    template <typename Visit>
    void for_each_lcore(Visit visit) const {
        for (const LcoreContext* ctx : contexts_) visit(*ctx);
    }
    uint16_t worker_count() const { return static_cast<uint16_t>(rings_.size()); }
    std::size_t lcore_count() const { return contexts_.size(); }
    uint64_t ring_slots() const;
    // Control thread: the ARP/ND senders workers saw since the last call (at most max).
    std::vector<NeighbourEvent> take_neighbour_events(std::size_t max = 256);
    // Control thread: walks every worker's connection table with a copy of `prototype` each (filter, or a dry-run
    // candidate) and returns the finished walks, or an empty vector when a worker did not finish within timeout.
    // Blocks the control thread; the workers walk a bounded slice per loop iteration. sync_dump: a resync for the
    // peers (FlowWalk::sync_dump) instead.
    std::vector<std::unique_ptr<FlowWalk>> walk_flows(const FlowFilter& filter, std::size_t max_records,
                                                      const Snapshot* candidate, std::chrono::milliseconds timeout,
                                                      bool sync_dump = false);
    // The sync thread's ends of the workers' sync rings, by worker index (empty when sync is off): events each
    // worker emits (the sync thread consumes them), and peers' events for each worker (the sync thread produces).
    const std::vector<rte_ring*>& sync_event_rings() const { return sync_out_rings_; }
    const std::vector<rte_ring*>& sync_apply_rings() const { return sync_in_rings_; }
    // Control thread: the firewall decisions workers logged since the last call (at most max).
    std::vector<DecisionLogRecord> take_decision_log(std::size_t max = 256);
    // Control thread: asks worker 0 to send a solicitation; false when its request ring is full.
    bool request_solicitation(const NeighbourRequest& request);
    // Packets waiting in worker rings right now.
    uint64_t ring_backlog() const;

private:
    void build(const DataplaneSpec& spec, std::unique_ptr<Snapshot>& initial);
    void release();
    void set_up_worker(LcoreContext& ctx, const DataplaneSpec& spec, uint16_t worker, const SipHashKey& syn_cookie_key,
                       int socket);
    // A worker's sync rings and refresh intervals.
    void set_up_conntrack(LcoreContext& ctx, const DataplaneSpec& spec, uint16_t worker, int socket);
    void set_up_sync(LcoreContext& ctx, const DataplaneSpec& spec, int socket);

    SharedState* shared_ = nullptr;
    std::vector<LcoreContext*> contexts_;
    std::vector<rte_ring*> rings_;
    std::vector<rte_ring*> sync_out_rings_, sync_in_rings_;  // by worker index, when sync is on
    rte_ring* neighbour_events_ = nullptr;
    rte_ring* neighbour_requests_ = nullptr;
    rte_ring* decision_log_ = nullptr;
    bool launched_ = false;
    bool stopped_ = false;
};

}  // namespace sluice

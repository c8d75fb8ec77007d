// Workers beside the main lcore (sections reload and scaling): contexts built by the Dataplane itself, and a run of
// the worker path on an lcore.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "harness.hpp"
#include "pipeline/dataplane.hpp"
#include "pipeline/snapshot.hpp"

namespace sluice::bench {

// Worker contexts built by the Dataplane itself (lib/pipeline/dataplane.cpp), one per lcore given, with the initial
// snapshot: a connection table of table_size with the release hook, rule and backend counters, the NAT ports of
// worker k of n, TX queue k on the benchmark's port, a thread id in the Dataplane's RCU (QSBR). The Dataplane is
// never launched: run_worker plays lcore_main's part on these contexts, and Dataplane::publish swaps snapshots as
// the daemon's reload does.
std::unique_ptr<Dataplane> bench_dataplane(const Dpdk& d, const std::vector<unsigned>& lcores, uint32_t table_size,
                                           std::unique_ptr<Snapshot> initial);

// The Dataplane's worker contexts in worker order. It lends them out read-only (for counters); here they stand for
// lcores the Dataplane never launched, each used by one thread at a time, so writing them is what their lcore would.
std::vector<LcoreContext*> worker_contexts(const Dataplane& dataplane);

// One worker's run on an lcore: bursts of the stream, round and round (or once), each written and parsed (an RX
// lcore's share, untimed), then stateful_burst + forward_burst on the snapshot that is current, read once per
// burst, and a slice of the control thread's connection walk when one is pending, released with a quiescent state
// at the end of the iteration, as lcore_main does.
struct WorkerRun {
    Dpdk* d = nullptr;
    LcoreContext* ctx = nullptr;
    const std::vector<PacketSpec>* stream = nullptr;
    uint64_t start_tsc = 0;                   // spins until then: the workers of a run start together
    uint64_t end_tsc = UINT64_MAX;            // stops then,
    bool one_pass = false;                    // or after one pass over the stream,
    const std::atomic<bool>* stop = nullptr;  // or once this is set
    uint64_t window_tsc = 0;                  // with windows: packets per window of window_tsc since start_tsc,
    std::vector<uint32_t>* windows = nullptr;
    std::vector<uint64_t>* window_cycles = nullptr;  // and the stage's cycles and packets of its bursts that
    std::vector<uint32_t>* window_timed = nullptr;   // took under 100 us (not preempted, as in timed_pass)
    // Results.
    uint64_t packets = 0, stage_cycles = 0, began_tsc = 0, finished_tsc = 0, malformed = 0;
    uint64_t walk_cycles = 0;  // in walk_slice, while the control thread had a walk pending
    bool pool_empty = false;

    double seconds() const { return static_cast<double>(finished_tsc - began_tsc) / static_cast<double>(d->tsc_hz); }
    double mpps() const { return finished_tsc > began_tsc ? static_cast<double>(packets) / seconds() / 1e6 : 0; }
    double stage_cycles_per_packet() const {
        return packets ? static_cast<double>(stage_cycles) / static_cast<double>(packets) : 0;
    }
};

// The lcore function: runs the WorkerRun arg points to.
int run_worker(void* arg);
void launch_worker(WorkerRun& run, unsigned lcore);
// Waits for a launched worker, sleeping rather than spinning (as rte_eal_wait_lcore does): the main lcore's CPU
// stays free meanwhile.
void wait_worker(unsigned lcore);
// Fails when the run met a frame it could not parse or an empty pool.
void check_run(const WorkerRun& run, const char* what);
// The second lcore, for a worker beside the main lcore; RTE_MAX_LCORE when the EAL has only one.
unsigned second_lcore();

}  // namespace sluice::bench

// Workers beside the main lcore: the Dataplane's contexts, and run_worker playing lcore_main's part on them.
#include <algorithm>
#include <chrono>
#include <exception>
#include <string>
#include <thread>

#include <rte_cycles.h>
#include <rte_ethdev.h>
#include <rte_launch.h>
#include <rte_lcore.h>
#include <rte_rcu_qsbr.h>

#include "dpdk/mempool.hpp"
#include "packet/packet_meta.hpp"
#include "pipeline/flow_walk.hpp"
#include "traffic.hpp"
#include "workers.hpp"

namespace sluice::bench {

std::unique_ptr<Dataplane> bench_dataplane(const Dpdk& d, const std::vector<unsigned>& lcores, uint32_t table_size,
                                           std::unique_ptr<Snapshot> initial) {
    DataplaneSpec spec;
    for (const unsigned id : lcores) spec.lcores.push_back(LcorePlan{id, false, true, {}});
    spec.tx_port_ids = {d.port};
    spec.ring_size = 1024;  // unused: nothing goes through the rings
    spec.conntrack = true;
    spec.conn_table_size = table_size;
    spec.nat_pool_addresses = initial->lb->nat_pool.size();
    spec.solicitation_pool = d.pool;
    try {
        return std::make_unique<Dataplane>(spec, std::move(initial));
    } catch (const std::exception& e) {
        fail(std::string("Dataplane: ") + e.what());
    }
}

std::vector<LcoreContext*> worker_contexts(const Dataplane& dataplane) {
    std::vector<LcoreContext*> out;
    dataplane.for_each_lcore([&](const LcoreContext& ctx) {
        if (ctx.worker) out.push_back(const_cast<LcoreContext*>(&ctx));
    });
    return out;
}

int run_worker(void* arg) {
    WorkerRun& run = *static_cast<WorkerRun*>(arg);
    LcoreContext& ctx = *run.ctx;
    SharedState& shared = *ctx.shared;
    const std::vector<PacketSpec>& stream = *run.stream;
    rte_mbuf* pkts[kBurst];
    DropReason verdicts[kBurst];
    std::size_t next = 0;
    while (rte_rdtsc() < run.start_tsc) rte_pause();
    rte_rcu_qsbr_thread_online(shared.qsbr, ctx.qsbr_thread_id);
    run.began_tsc = rte_rdtsc();
    for (;;) {
        if (next == stream.size()) {
            if (run.one_pass) break;
            next = 0;
        }
        if (rte_rdtsc() >= run.end_tsc || (run.stop && run.stop->load(std::memory_order_relaxed))) break;
        const Snapshot& snapshot = *shared.snapshot.load(std::memory_order_acquire);
        const auto n = static_cast<uint16_t>(std::min<std::size_t>(kBurst, stream.size() - next));
        if (rte_pktmbuf_alloc_bulk(run.d->pool, pkts, n) != 0) {
            run.pool_empty = true;
            break;
        }
        for (uint16_t i = 0; i < n; ++i) write_frame(pkts[i], stream[next + i], run.d->port, false);
        next += n;
        parse_burst(pkts, n, verdicts, ctx.hash_flows);
        for (uint16_t i = 0; i < n; ++i) run.malformed += verdicts[i] != DropReason::none;
        const uint64_t t0 = rte_rdtsc();
        worker_path(ctx, snapshot)(pkts, n);  // takes every mbuf
        const uint64_t t1 = rte_rdtsc();
        run.stage_cycles += t1 - t0;
        run.packets += n;
        if (run.windows) {
            const uint64_t w = (t1 - run.start_tsc) / run.window_tsc;
            if (w < run.windows->size()) {
                (*run.windows)[w] += n;
                if (t1 - t0 < run.d->tsc_hz / 10'000) {
                    (*run.window_cycles)[w] += t1 - t0;
                    (*run.window_timed)[w] += n;
                }
            }
        }
        if (ctx.walk.load(std::memory_order_relaxed) != nullptr) {
            walk_slice(ctx, t1, true);
            run.walk_cycles += rte_rdtsc() - t1;
        }
        // This iteration's snapshot (and walk) reference is dead from here on.
        rte_rcu_qsbr_quiescent(shared.qsbr, ctx.qsbr_thread_id);
    }
    run.finished_tsc = rte_rdtsc();
    rte_eth_tx_buffer_flush(run.d->port, ctx.tx_queue, ctx.tx_buffers[run.d->port]);
    rte_rcu_qsbr_thread_offline(shared.qsbr, ctx.qsbr_thread_id);
    return 0;
}

void launch_worker(WorkerRun& run, unsigned lcore) {
    const int rc = rte_eal_remote_launch(run_worker, &run, lcore);
    if (rc != 0) fail("rte_eal_remote_launch on lcore " + std::to_string(lcore) + ": " + rte_strerror(-rc));
}

void wait_worker(unsigned lcore) {
    while (rte_eal_get_lcore_state(lcore) == RUNNING) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    rte_eal_wait_lcore(lcore);
}

void check_run(const WorkerRun& run, const char* what) {
    if (run.malformed)
        fail(std::string(what) + ": " + std::to_string(run.malformed) +
             " frames failed to parse (a bug in sluice_bench)");
    if (run.pool_empty)
        fail(std::string(what) + ": mbuf pool exhausted (" + std::to_string(mbufs_in_use(run.d->pool)) + " in use)");
}

unsigned second_lcore() { return rte_get_next_lcore(rte_get_main_lcore(), 1, 0); }

}  // namespace sluice::bench

// Section scaling: the worker path on one lcore alone, then on two at once, each worker with the context
// the Dataplane builds for it (its own connection table, NAT ports, counters, TX queue) and its own connections. In
// process: this machine has 2 vCPUs, no room for a traffic generator and RX lcores beside two workers, so each
// worker writes and parses its own frames (an RX lcore's share, not timed in the stage figures) and runs
// stateful_burst + forward_burst with the snapshot of section lb (1k rules, three services).
#include <unistd.h>

#include <array>
#include <cstdio>
#include <string>
#include <vector>

#include <rte_cycles.h>
#include <rte_lcore.h>

#include "sections.hpp"
#include "services.hpp"
#include "traffic.hpp"
#include "workers.hpp"

namespace sluice::bench {
namespace {

constexpr double kScalingSeconds = 0.5;   // each established-packet run
constexpr uint32_t kScalingSyns = 65536;  // SYNs per worker per new-connection run

// The two workers (contexts of one Dataplane, worker k on lcores[k]), their nat connections and their streams.
class ScalingSection {
public:
    ScalingSection(Dpdk& d, const Options& o, std::vector<unsigned> lcores)
        : d_(d), o_(o), lcores_(std::move(lcores)), live_(o.lb_conns), rng_(o.seed + 40) {}

    void run(Table& table) {
        dataplane_ = bench_dataplane(d_, lcores_, 2 * (live_ + kScalingSyns) + 1024,
                                     make_snapshot(d_, generate_rules(1000, o_.seed), true));
        workers_ = worker_contexts(*dataplane_);
        open_connections_per_worker();
        std::vector<DropCounts> drops_before;
        for (const LcoreContext* c : workers_) drops_before.push_back(c->counters.drops);
        for (const bool new_conns : {false, true}) measure(table, new_conns);
        for (std::size_t w = 0; w < workers_.size(); ++w) {
            const std::string drops = drops_since(workers_[w]->counters, drops_before[w]);
            if (!drops.empty()) std::printf("WARNING: scaling: worker %zu dropped packets: %s\n", w, drops.c_str());
        }
        dataplane_.reset();
        check_pool(d_, "scaling");
    }

private:
    void open_connections_per_worker() {
        const Snapshot& snapshot = dataplane_->snapshot();
        const std::vector<FiveTuple> clients = lb_clients(2 * (live_ + kScalingSyns), rng_);
        const uint64_t t0 = rte_rdtsc();
        for (std::size_t w = 0; w < 2; ++w) {
            LcoreContext& ctx = *workers_[w];
            touch_all_slots(*ctx.conn_table);
            const auto first = clients.begin() + static_cast<std::ptrdiff_t>(w * (live_ + kScalingSyns));
            const std::vector<FiveTuple> mine(first, first + live_), fresh(first + live_, first + live_ + kScalingSyns);
            const OpenedConns opened = open_connections(d_, ctx, snapshot, mine, kVipNat, true);
            established_[w].resize(o_.packets);
            for (PacketSpec& p : established_[w]) {
                const uint32_t i = uniform(rng_, 0, live_ - 1);
                p = uniform(rng_, 0, 1) ? opened.reply[i] : opened.forward[i];
            }
            syns_[w] = packets_to(fresh, kVipNat, kTcpSyn);
            if (ctx.conn_table->size() != 2 * live_)
                std::printf("WARNING: scaling: worker %zu has %u table entries, %u expected\n", w,
                            ctx.conn_table->size(), 2 * live_);
        }
        std::printf("scaling: %u nat connections per worker opened through the worker path in %.1f s\n", live_,
                    seconds_since(d_, t0));
    }

    // Runs the workers given (indexes into workers_) at once; worker 0 on the calling lcore.
    std::vector<WorkerRun> run_workers(const std::vector<std::size_t>& which, bool new_conns) {
        std::vector<WorkerRun> runs(which.size());
        const uint64_t start = rte_rdtsc() + d_.tsc_hz / 50;  // 20 ms for the remote lcore to wake up
        const auto duration = static_cast<uint64_t>(kScalingSeconds * static_cast<double>(d_.tsc_hz));
        for (std::size_t k = 0; k < which.size(); ++k) {
            const std::size_t w = which[k];
            runs[k] = WorkerRun{.d = &d_,
                                .ctx = workers_[w],
                                .stream = new_conns ? &syns_[w] : &established_[w],
                                .start_tsc = start,
                                .end_tsc = new_conns ? UINT64_MAX : start + duration,
                                .one_pass = new_conns};
        }
        for (std::size_t k = 0; k < which.size(); ++k)
            if (which[k] != 0) launch_worker(runs[k], lcores_[which[k]]);
        for (std::size_t k = 0; k < which.size(); ++k)
            if (which[k] == 0) run_worker(&runs[k]);
        for (std::size_t k = 0; k < which.size(); ++k)
            if (which[k] != 0) wait_worker(lcores_[which[k]]);
        for (const WorkerRun& r : runs) check_run(r, "scaling");
        if (new_conns)  // closed again (expiry's work, untimed) for the next run
            for (const std::size_t w : which) {
                remove_connections(*workers_[w]->conn_table, syns_[w]);
                if (workers_[w]->conn_table->size() != 2 * live_)
                    std::printf("WARNING: scaling: worker %zu: %u table entries after a new-connection run, %u "
                                "expected\n",
                                w, workers_[w]->conn_table->size(), 2 * live_);
            }
        return runs;
    }

    // One worker alone alternates between the two lcores; interleaved with the runs of both.
    void measure(Table& table, bool new_conns) {
        unsigned turn = 0;
        std::vector<double> stage_one, stage_two, speedup;
        auto r =
            interleaved(o_.reps, {[&] {
                                      const auto runs = run_workers({turn++ % 2}, new_conns);
                                      stage_one.push_back(runs[0].stage_cycles_per_packet());
                                      return runs[0].mpps();
                                  },
                                  [&] {
                                      const auto runs = run_workers({0, 1}, new_conns);
                                      stage_two.push_back(
                                          (runs[0].stage_cycles_per_packet() + runs[1].stage_cycles_per_packet()) / 2);
                                      return runs[0].mpps() + runs[1].mpps();
                                  }});
        stage_one.erase(stage_one.begin());
        stage_two.erase(stage_two.begin());
        for (std::size_t k = 0; k < r[0].size(); ++k) speedup.push_back(r[1][k] / r[0][k]);
        const std::string what = new_conns ? "new nat conns, " + ordinal_count(kScalingSyns) + " SYNs/worker"
                                           : "established nat, " + ordinal_count(live_) + " conns/worker";
        const std::string id = new_conns ? "scaling-new" : "scaling-established";
        table.add(Row{.id = id,
                      .measurement = "scaling, " + what + ": 2 workers at once",
                      .unit = new_conns ? "M conn/s" : "Mpps",
                      .reference = "1 worker alone",
                      .ref = stat_of(r[0]),
                      .sluice = stat_of(r[1])});
        table.add(Row{.id = id + "-speedup",
                      .measurement = "scaling 1 -> 2 workers, " + what + " (speed-up)",
                      .unit = "x",
                      .reference = "the target",
                      .ref = constant_stat(1.8),
                      .sluice = stat_of(speedup)});
        table.add(
            Row{.id = id + "-stage",
                .measurement = "  firewall + forward per " + std::string(new_conns ? "conn" : "pkt") + ", 2 at once",
                .unit = new_conns ? "cycles/conn" : "cycles/pkt",
                .reference = "1 worker alone",
                .ref = stat_of(stage_one),
                .sluice = stat_of(stage_two)});
    }

    Dpdk& d_;
    const Options& o_;
    const std::vector<unsigned> lcores_;
    const uint32_t live_;
    Rng rng_;
    std::unique_ptr<Dataplane> dataplane_;
    std::vector<LcoreContext*> workers_;
    std::vector<PacketSpec> established_[2], syns_[2];
};

}  // namespace

void section_scaling(Dpdk& d, const Options& o, Table& table) {
    const unsigned main_lcore = rte_get_main_lcore(), second = second_lcore();
    std::printf("scaling: measured in process, each worker writing its own frames: this machine has %ld vCPUs, no "
                "room for a traffic generator and an RX lcore beside two workers\n",
                sysconf(_SC_NPROCESSORS_ONLN));
    if (second >= RTE_MAX_LCORE) {
        std::printf("scaling: skipped: the EAL has one lcore (give it two, e.g. -- -l 0,1)\n");
        return;
    }
    ScalingSection(d, o, {main_lcore, second}).run(table);
}

}  // namespace sluice::bench

// Section walk (--only walk; not in the default set): a worker on the second lcore forwards packets of --conns'
// largest count of established connections (stateful_burst + forward_burst, as section reload's worker) while the
// control thread walks the worker's connection table with Dataplane::walk_flows, as `sluicectl flows udp` does and
// as reload --dry-run's re-judging by a candidate of 10k rules does. The worker advances the walk as lcore_main
// does (walk_slice: time-bounded slices, a bounded share of a busy worker). Each walking repetition lasts one whole
// walk; the reference is the same worker with no walk for kQuietSeconds, interleaved. Rows: the forwarded rate and
// the worker's cycles per packet (stage plus walk slices), each beside the run with no walk.
#include <netinet/in.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <thread>

#include <rte_cycles.h>
#include <rte_lcore.h>

#include "pipeline/flow_walk.hpp"
#include "sections.hpp"
#include "services.hpp"
#include "traffic.hpp"
#include "workers.hpp"

namespace sluice::bench {
namespace {

constexpr double kQuietSeconds = 1.0;
constexpr auto kWalkTimeout = std::chrono::seconds(120);
constexpr std::size_t kListed = 100;  // what sluicectl flows keeps of the matches

enum class WalkKind { none, flows, dry_run };

struct WalkRep {
    double mpps = 0, cycles_per_packet = 0, walk_cycles_per_packet = 0, walk_seconds = 0;
};

}  // namespace

void section_walk(Dpdk& d, const Options& o, Table& table) {
    const unsigned lcore = second_lcore();
    if (lcore >= RTE_MAX_LCORE) {
        std::printf("walk: one lcore only: skipped (give the EAL a second lcore, e.g. -- -l 0,1)\n");
        return;
    }
    const uint32_t live = *std::max_element(o.conns.begin(), o.conns.end());
    Rng rng(o.seed + 40);
    std::unique_ptr<Dataplane> dataplane = bench_dataplane(d, {lcore}, live, make_snapshot(d, generate_rules(10, 1)));
    LcoreContext& ctx = *worker_contexts(*dataplane).front();
    const std::vector<FiveTuple> flows = distinct_flows(live, rng, 70);
    if (const uint32_t refused = insert_established(*ctx.conn_table, flows))
        fail("walk: " + std::to_string(refused) + " of " + std::to_string(live) + " connections did not fit");
    const uint32_t tracked = live;
    const auto udp = static_cast<uint64_t>(
        std::count_if(flows.begin(), flows.end(), [](const FiveTuple& f) { return f.proto == IPPROTO_UDP; }));
    const std::vector<PacketSpec> stream = random_packets(flows, o.packets, rng);
    const std::unique_ptr<Snapshot> candidate = make_snapshot(d, generate_rules(10000, o.seed));
    const FlowFilter udp_only{.proto = IPPROTO_UDP};

    const auto run = [&](WalkKind kind) {
        std::atomic<bool> stop{false};
        WorkerRun worker{.d = &d, .ctx = &ctx, .stream = &stream, .start_tsc = rte_rdtsc(), .stop = &stop};
        launch_worker(worker, lcore);
        WalkRep rep;
        // The worker is up to speed: its rate over the run then is, but for these 10 ms, its rate during the walk.
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        if (kind == WalkKind::none) {
            std::this_thread::sleep_for(std::chrono::duration<double>(kQuietSeconds));
        } else {
            const uint64_t t0 = rte_rdtsc();
            const auto walks = dataplane->walk_flows(
                udp_only, kListed, kind == WalkKind::dry_run ? candidate.get() : nullptr, kWalkTimeout);
            rep.walk_seconds = seconds_since(d, t0);
            if (walks.size() != 1) fail("walk: the worker did not finish a walk in time");
            const FlowWalk& w = *walks.front();
            if (kind == WalkKind::dry_run ? w.examined != tracked : w.matched != udp || w.records.size() != kListed)
                fail("walk: the walk saw " + std::to_string(kind == WalkKind::dry_run ? w.examined : w.matched) +
                     " connections, not " + std::to_string(kind == WalkKind::dry_run ? tracked : udp));
        }
        stop = true;
        wait_worker(lcore);
        check_run(worker, "walk");
        rep.mpps = worker.mpps();
        rep.cycles_per_packet =
            static_cast<double>(worker.stage_cycles + worker.walk_cycles) / static_cast<double>(worker.packets);
        rep.walk_cycles_per_packet = static_cast<double>(worker.walk_cycles) / static_cast<double>(worker.packets);
        return rep;
    };

    std::vector<WalkRep> none, listing, rejudging;
    for (unsigned r = 0; r < o.reps; ++r) {
        none.push_back(run(WalkKind::none));
        listing.push_back(run(WalkKind::flows));
        rejudging.push_back(run(WalkKind::dry_run));
    }
    const auto of = [](const std::vector<WalkRep>& reps, double WalkRep::*field) {
        std::vector<double> v;
        for (const WalkRep& r : reps) v.push_back(r.*field);
        return stat_of(v);
    };
    std::printf("walk: %u connections tracked (%" PRIu64 " UDP); a flows walk took %.2f s (median), a dry-run "
                "re-judging %.2f s, while the worker forwarded; of the worker's cycles per packet, the walk slices "
                "took %.1f and %.1f\n",
                tracked, udp, of(listing, &WalkRep::walk_seconds).median, of(rejudging, &WalkRep::walk_seconds).median,
                of(listing, &WalkRep::walk_cycles_per_packet).median,
                of(rejudging, &WalkRep::walk_cycles_per_packet).median);
    const std::string conns = ordinal_count(live) + " conns";
    const struct {
        const char* id;
        const char* what;
        const std::vector<WalkRep>& reps;
    } kinds[] = {{"flows", "sluicectl flows walk", listing},
                 {"dry-run", "dry-run re-judging walk (10k rules)", rejudging}};
    for (const auto& k : kinds) {
        table.add(Row{.id = std::string("walk-rate-") + k.id,
                      .measurement = "forwarded rate during a " + std::string(k.what) + " of " + conns,
                      .unit = "Mpps",
                      .reference = "the same worker, no walk",
                      .ref = of(none, &WalkRep::mpps),
                      .sluice = of(k.reps, &WalkRep::mpps)});
        table.add(Row{.id = std::string("walk-cycles-") + k.id,
                      .measurement =
                          "worker cycles/pkt (stage + walk slices) during a " + std::string(k.what) + " of " + conns,
                      .unit = "cycles/pkt",
                      .reference = "the same worker, no walk",
                      .ref = of(none, &WalkRep::cycles_per_packet),
                      .sluice = of(k.reps, &WalkRep::cycles_per_packet)});
    }
    dataplane.reset();
    check_pool(d, "walk");
}

}  // namespace sluice::bench

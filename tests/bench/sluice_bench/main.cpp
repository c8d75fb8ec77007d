// In-process benchmark of sluice's firewall and load-balancer path, in one invocation: parse, classify (rte_acl
// behind AclClassifier), the firewall stage for packets of tracked connections and for new connections, the load
// balancer's new connections and established packets (nat, dsr, tunnel: stateful_burst + forward_burst with
// routes, beside the same path for connections of no service), the memory a tracked connection takes, a config
// reload as the control thread does it (YAML text to published snapshot, beside rte_acl_build alone, and the
// forwarded rate of a worker meanwhile), and the worker path on one lcore against two at once. Every figure is
// printed beside a reference and the ratio sluice/reference. Nothing asserts a speed: this is a measuring tool,
// not a test (no test runs it).
//
//   sluice_bench [options] [-- EAL arguments]
//     --only LIST          sections to run, comma-separated: parse,classify,established,new,lb,memory,reload,
//                          scaling (default: all of these), walk (only when named: a worker's rate during walks of
//                          its connection table, section_walk.cpp), blocklist (only when named: early-drop tables of
//                          1M prefixes per family, section_blocklist.cpp), routes (only when named: forward_burst by
//                          the route table at 1k and 1M IPv4 routes, section_routes.cpp), capacity (only when
//                          named: tables of --capacity-conns sizes side by side, section_capacity.cpp; 10M needs
//                          about 2 GiB of hugepages: tests/bench/capacity.sh reserves them)
//     --rules FILE         classify this ClassBench rule file instead of the generated 10 / 1k / 10k rule sets
//     --trace FILE         ... over this trace (both formats are dpdk-test-acl's, see below); needs --rules
//     --write-acl-files DIR  write the generated rule sets and their traces as DIR/rules-N.txt, DIR/trace-N.txt
//                          (N = 10, 1000, 10000) and exit; tests/bench/firewall.sh feeds them to dpdk-test-acl
//     --reps N             repetitions of each measurement; the median is reported (default 7)
//     --packets N          packets per repetition of parse and established (default 65536)
//     --conns LIST         live connections for `established` (default 1000,100000,1000000)
//     --new-conns N        connections opened per repetition of `new` and of lb's new connections (default 262144)
//     --lb-conns N         live connections per service for lb's established packets, and per worker in reload
//                          and scaling (default 100000)
//     --capacity-conns LIST table sizes for `capacity`, each against the first (default 1000000,10000000)
//     --seed N             generator seed (default 1), and the flow-hash key's
//     --results FILE       also write the table as tab-separated values (for firewall.sh)
//     --lcore N            the CPU to run on (default 0; firewall.sh picks the idlest)
//     --eal-add ARG        one more argument for the default EAL arguments (repeatable), e.g.
//                          --eal-add=--force-max-simd-bitwidth=512 to let rte_acl use AVX-512 with 32 lanes
//     --trimmed-heap       leave glibc's heap as it comes (freed memory returned to the kernel), to compare with
//                          the daemon's retain_freed_heap() (common/heap.hpp), which the benchmark applies otherwise
//     --handshake          `established` also measures its connections with the windows a three-way handshake
//                          leaves (both sides seen: every TCP packet judged strictly), in rows of their own
//
// Without EAL arguments the EAL gets `-l <lcore> --no-pci --in-memory --file-prefix=bench-<pid> --no-telemetry`, on
// hugepages when at least 300 free 2 MiB pages are reserved, else `--no-huge -m 1024` (no --in-memory then:
// the two do not combine); with reload or scaling among the sections, `-l` also names a second CPU the process
// may run on (reload's worker and scaling's second worker run there; the main lcore stays <lcore>). A
// `--vdev=net_null0,no-rx=1` is added unless the arguments name a net_null device: forward_burst needs a real port
// to transmit on (it gets one TX queue per lcore, as the Dataplane gives each worker its own).
//
// reload, scaling and walk need a second lcore (with EAL arguments: e.g. `-l 0,1`); without one they print why and
// measure only what needs none (reload's timings, not the forwarded rate during it; scaling nothing).
//
// How it measures: bursts of 32 mbufs are allocated, written (60-byte IPv4 TCP/UDP frames) and parsed outside the
// timed region; only the stage call is timed, with rte_rdtsc_precise() around it (its own cost, measured at start,
// is subtracted). A burst the OS preempted (longer than 100 us and 20x the pass's median burst) is left out and
// counted. A repetition is one pass over a packet stream; variants that are compared are interleaved (A B A B ...)
// so that a noisy stretch of the shared machine hits both; the median of the repetitions is reported, with the
// spread. Classification is timed the same way, per burst of 32 trace tuples (dpdk-test-acl times its whole run
// instead). Mbufs the stage keeps ownership of are freed after the timed region, and every section checks that the
// pool is full again.
//
// File formats (dpdk-test-acl's, app/test-acl/main.c in DPDK): a rule is
//   @<src a.b.c.d>/<len> <dst a.b.c.d>/<len> <sport lo> : <sport hi> <dport lo> : <dport hi> <proto>/<mask>
// and a trace line is `<src> <dst> <sport> <dport> <proto>`, each an unsigned number (0x... hex allowed, addresses as
// 32-bit values in host order). sluice's rules have an ingress-port field that ClassBench rules lack: it is left
// wild (any port). sluice matches ports only for TCP/UDP/SCTP rules, so a rule file whose other rules name ports
// is refused rather than measured with a different meaning.
#include <arpa/inet.h>
#include <netinet/in.h>
//
// The code: main.cpp (this file: the run and its summary), options.cpp (the command line), harness.cpp (EAL, port,
// frames, timed passes), report.cpp (the table, the machine), classbench.cpp (rules and traces), services.cpp and
// traffic.cpp (snapshots, flows, connections), workers.cpp (lcores beside the main one), and one section_*.cpp
// per section (reload_reference.cpp holds section reload's reference rte_acl build).
#include <sys/utsname.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <rte_cycles.h>

#include "common/five_tuple.hpp"
#include "common/heap.hpp"
#include "dpdk/mempool.hpp"
#include "sections.hpp"

namespace sluice::bench {
namespace {

// --write-acl-files: the generated rule sets and their traces, for dpdk-test-acl.
void write_acl_files(const Options& o) {
    for (const std::size_t count : {std::size_t{10}, std::size_t{1000}, std::size_t{10000}}) {
        const auto rules = generate_rules(count, o.seed);
        write_rules(o.write_dir + "/rules-" + std::to_string(count) + ".txt", rules);
        write_trace(o.write_dir + "/trace-" + std::to_string(count) + ".txt", generate_trace(rules, 65536, o.seed));
    }
    std::printf("wrote rules-{10,1000,10000}.txt and trace-{10,1000,10000}.txt to %s\n", o.write_dir.c_str());
}

void print_machine(const Dpdk& d, const std::string& start_time, const std::string& load_start) {
    utsname un{};
    uname(&un);
    std::printf("sluice_bench %s\nmachine: %s, %ld CPUs, TSC %.3f GHz, kernel %s\nEAL: %s (%s)\n"
                "load average at start: %s\nrte_rdtsc_precise pair: %" PRIu64 " cycles (subtracted per burst)\n",
                start_time.c_str(), cpu_model().c_str(), sysconf(_SC_NPROCESSORS_ONLN),
                static_cast<double>(d.tsc_hz) / 1e9, un.release, d.eal_line.c_str(),
                d.hugepages ? "hugepages" : "no hugepages", load_start.c_str(), d.rdtsc_overhead);
    std::fflush(stdout);
}

// Runs body when the section was asked for, and prints how long it took and how busy the machine was meanwhile.
void run_section(const Dpdk& d, const Options& o, const char* name, const std::function<void()>& body) {
    if (!o.sections.count(name)) return;
    const CpuSample a = cpu_sample();
    const uint64_t t0 = rte_rdtsc();
    g_preempted = PreemptionCount{};
    body();
    const CpuSample b = cpu_sample();
    char line[240];
    int len = std::snprintf(line, sizeof line, "%s: %.1f s, other processes used %.0f%% of all CPU time meanwhile",
                            name, seconds_since(d, t0), 100 * others_share(a, b));
    if (g_preempted.bursts)
        std::snprintf(line + len, sizeof line - len,
                      "; %" PRIu64 " of %" PRIu64 " timed bursts (%.2f%%) left out as preempted", g_preempted.excluded,
                      g_preempted.bursts, 100.0 * g_preempted.excluded / g_preempted.bursts);
    std::printf("%s\n", line);
    std::fflush(stdout);
}

// The notes under the table, the table, and its tab-separated copy (--results).
void finish(const Dpdk& d, const Options& o, Table& table, Meta& meta, const std::string& start_time,
            const std::string& load_start, double others) {
    table.note("\nMedian of " + std::to_string(o.reps) + " repetitions, interleaved with their reference; " +
               std::to_string(o.packets) + " packets per repetition of parse/established, bursts of " +
               std::to_string(kBurst) + ". Ratio = sluice / reference.");
    char line[200];
    std::snprintf(line, sizeof line,
                  "Load average at start %s, at end %s; other processes used %.0f%% of all CPU time "
                  "during the run (%s).",
                  load_start.c_str(), loadavg().c_str(), 100 * others,
                  others > 0.05 ? "noisy: figures are high and spread out" : "quiet");
    table.note(line);
    table.print();
    if (o.results_file.empty()) return;
    meta.insert(meta.begin(), {{"date", start_time},
                               {"cpu", cpu_model()},
                               {"cpus", std::to_string(sysconf(_SC_NPROCESSORS_ONLN))},
                               {"tsc_hz", std::to_string(d.tsc_hz)},
                               {"eal", d.eal_line},
                               {"load_start", load_start},
                               {"load_end", loadavg()},
                               {"others_cpu", std::to_string(others)},
                               {"reps", std::to_string(o.reps)}});
    table.write_tsv(o.results_file, meta);
}

int run(int argc, char** argv) {
    const Options o = parse_options(argc, argv);
    // As the daemon does: the reload and its reference run on that heap.
    if (!o.trimmed_heap && !retain_freed_heap()) fail("glibc refused the heap settings (retain_freed_heap)");
    // The flow-hash key from the seed, not the process's random one: the same buckets and the same instruction
    // counts from run to run, for A/B comparisons.
    FlowHashKey key;
    Rng key_rng(o.seed);
    for (uint64_t& w : key.words) w = key_rng();
    set_flow_hash_key(key);
    if (!o.write_dir.empty()) {
        write_acl_files(o);
        return 0;
    }

    AclFiles files;
    if (!o.rules_file.empty()) {
        files.rules = read_rules(o.rules_file);
        files.trace = read_trace(o.trace_file);
    }

    Dpdk d;
    start_eal(d, o, argv[0]);
    start_port(d);
    measure_rdtsc_overhead(d);
    const std::string start_time = utc_now();
    const std::string load_start = loadavg();
    print_machine(d, start_time, load_start);

    Table table;
    Meta meta;
    const CpuSample cpu_start = cpu_sample();
    run_section(d, o, "parse", [&] { section_parse(d, o, table); });
    run_section(d, o, "classify", [&] { section_classify(d, o, table, files, meta); });
    run_section(d, o, "established", [&] { section_established(d, o, table); });
    run_section(d, o, "new", [&] { section_new(d, o, table); });
    run_section(d, o, "lb", [&] { section_lb(d, o, table); });
    run_section(d, o, "memory", [&] { section_memory(d, o, table); });
    run_section(d, o, "reload", [&] { section_reload(d, o, table); });
    run_section(d, o, "scaling", [&] { section_scaling(d, o, table); });
    run_section(d, o, "walk", [&] { section_walk(d, o, table); });
    run_section(d, o, "blocklist", [&] { section_blocklist(d, o, table); });
    run_section(d, o, "routes", [&] { section_routes(d, o, table); });
    run_section(d, o, "capacity", [&] { section_capacity(d, o, table); });
    finish(d, o, table, meta, start_time, load_start, others_share(cpu_start, cpu_sample()));
    stop_dpdk(d);
    return 0;
}

}  // namespace
}  // namespace sluice::bench

int main(int argc, char** argv) { return sluice::bench::run(argc, argv); }

// In-process benchmark of sluice's firewall and load-balancer path, in one invocation: parse, classify (rte_acl
// behind AclClassifier), the firewall stage for packets of tracked connections and for new connections, the load
// balancer's new connections and established packets (nat, dsr, tunnel: firewall_burst + forward_burst with
// routes, beside the same path for connections of no service), the memory a tracked connection takes, a config
// reload as the control thread does it (YAML text to published snapshot, beside rte_acl_build alone, and the
// forwarded rate of a worker meanwhile), and the worker path on one lcore against two at once. Every figure is
// printed beside a reference and the ratio sluice/reference. Nothing asserts a speed: this is a measuring tool,
// not a test (no test runs it).
//
//   sluice_bench [options] [-- EAL arguments]
//     --only LIST          sections to run, comma-separated: parse,classify,established,new,lb,memory,reload,
//                          scaling (default: all)
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
//     --seed N             generator seed (default 1), and the flow-hash key's
//     --results FILE       also write the table as tab-separated values (for firewall.sh)
//     --lcore N            the CPU to run on (default 0; firewall.sh picks the idlest)
//     --eal-add ARG        one more argument for the default EAL arguments (repeatable), e.g.
//                          --eal-add=--force-max-simd-bitwidth=512 to let rte_acl use AVX-512 with 32 lanes
//     --trimmed-heap       leave glibc's heap as it comes (freed memory returned to the kernel), to compare with
//                          the daemon's retain_freed_heap() (common/heap.hpp), which the benchmark applies otherwise
//
// Without EAL arguments the EAL gets `-l <lcore> --no-pci --in-memory --file-prefix=bench-<pid> --no-telemetry`, on
// hugepages when at least 300 free 2 MiB pages are reserved, else `--no-huge -m 1024` (no --in-memory then:
// the two do not combine); with reload or scaling among the sections, `-l` also names a second CPU the process
// may run on (reload's worker and scaling's second worker run there; the main lcore stays <lcore>). A
// `--vdev=net_null0,no-rx=1` is added unless the arguments name a net_null device: forward_burst needs a real port
// to transmit on (it gets one TX queue per lcore, as the Dataplane gives each worker its own).
//
// reload and scaling need a second lcore (with EAL arguments: e.g. `-l 0,1`); without one they print why and
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
#include <sched.h>
#include <stdlib.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <new>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include <rte_acl.h>
#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_ip.h>
#include <rte_launch.h>
#include <rte_lcore.h>
#include <rte_malloc.h>
#include <rte_mbuf.h>
#include <rte_net.h>
#include <rte_tcp.h>
#include <rte_udp.h>

#include <yaml-cpp/yaml.h>

#include "classify/acl_classifier.hpp"
#include "classify/acl_method.hpp"
#include "common/heap.hpp"
#include "conntrack/conn_table.hpp"
#include "control/config.hpp"
#include "control/snapshot_builder.hpp"
#include "dpdk/mempool.hpp"
#include "packet/packet_meta.hpp"
#include "pipeline/dataplane.hpp"
#include "pipeline/stateful_stage.hpp"
#include "pipeline/forward_stage.hpp"
#include "pipeline/lcore_context.hpp"
#include "pipeline/snapshot.hpp"

namespace sluice::bench {
namespace {

constexpr uint16_t kFrameLength = 60;  // 64 B on the wire with the CRC
constexpr uint8_t kTcpSyn = 0x02, kTcpAck = 0x10;
constexpr double kTargetNewConnsPerSecond = 2e6;  // the firewall issue's goal, per worker
// ConnTable's own estimate (conn_table.hpp) at capacity 1,000,000 (below 96% of 2^20: no extendable buckets):
// about 110 B per IPv4 entry, plus the default IPv6 share (an eighth of the capacity) at about 126 B per entry.
constexpr double kConnTableEstimateBytes = 110 + 126.0 / 8;

// The EAL runtime directory of our own file prefix (/var/run/dpdk/bench-<pid>), removed at exit: the EAL leaves
// it behind even with --in-memory. Empty until the EAL runs, or when the EAL arguments came from the command line.
std::string g_runtime_dir;

void remove_runtime_dir() {
    if (g_runtime_dir.empty()) return;
    std::error_code ignored;
    std::filesystem::remove_all(g_runtime_dir, ignored);
    g_runtime_dir.clear();
}

[[noreturn]] void fail(const std::string& message) {
    std::fprintf(stderr, "sluice_bench: %s\n", message.c_str());
    remove_runtime_dir();
    std::exit(1);
}

// ---------------------------------------------------------------------------------------------------------------
// Options

struct Options {
    std::set<std::string> sections{"parse", "classify", "established", "new", "lb", "memory", "reload", "scaling"};
    std::string rules_file, trace_file, write_dir, results_file;
    unsigned reps = 7;
    uint32_t packets = 65536;
    std::vector<uint32_t> conns{1000, 100000, 1000000};
    uint32_t new_conns = 262144;
    uint32_t lb_conns = 100000;
    uint64_t seed = 1;
    std::vector<std::string> eal;      // after --, verbatim
    std::vector<std::string> eal_add;  // --eal-add, appended to the defaults
    unsigned lcore = 0;
    bool trimmed_heap = false;  // --trimmed-heap
};

std::vector<std::string> split(const std::string& s, char delimiter) {
    std::vector<std::string> out;
    std::stringstream in(s);
    for (std::string item; std::getline(in, item, delimiter);)
        if (!item.empty()) out.push_back(item);
    return out;
}

uint64_t parse_number(const std::string& s, const std::string& option) {
    errno = 0;
    char* end = nullptr;
    const unsigned long long v = std::strtoull(s.c_str(), &end, 0);
    if (errno != 0 || end == s.c_str() || *end != '\0') fail("option " + option + ": '" + s + "' is not a number");
    return v;
}

Options parse_options(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--") {
            for (++i; i < argc; ++i) o.eal.emplace_back(argv[i]);
            break;
        }
        if (a == "-h" || a == "--help") {
            std::printf("usage: %s [--only LIST] [--rules FILE --trace FILE] [--write-acl-files DIR] [--reps N]\n"
                        "       [--packets N] [--conns LIST] [--new-conns N] [--lb-conns N] [--seed N]\n"
                        "       [--results FILE] [--lcore N] [--eal-add ARG]... [--trimmed-heap] [-- EAL args]\n"
                        "(the comment at the top of tests/bench/sluice_bench.cpp explains each)\n",
                        argv[0]);
            std::exit(0);
        }
        if (a == "--trimmed-heap") {
            o.trimmed_heap = true;
            continue;
        }
        if (a.rfind("--eal-add=", 0) == 0) {
            o.eal_add.push_back(a.substr(std::strlen("--eal-add=")));
            continue;
        }
        if (i + 1 >= argc) fail("option " + a + " needs a value (or is unknown; see --help)");
        const std::string v = argv[++i];
        if (a == "--only") {
            o.sections.clear();
            for (const std::string& s : split(v, ',')) {
                if (s != "parse" && s != "classify" && s != "established" && s != "new" && s != "lb" && s != "memory" &&
                    s != "reload" && s != "scaling")
                    fail("--only: unknown section '" + s +
                         "' (parse, classify, established, new, lb, memory, reload, scaling)");
                o.sections.insert(s);
            }
        } else if (a == "--rules") {
            o.rules_file = v;
        } else if (a == "--trace") {
            o.trace_file = v;
        } else if (a == "--write-acl-files") {
            o.write_dir = v;
        } else if (a == "--lcore") {
            o.lcore = static_cast<unsigned>(std::min<uint64_t>(parse_number(v, a), RTE_MAX_LCORE - 1));
        } else if (a == "--eal-add") {
            o.eal_add.push_back(v);
        } else if (a == "--results") {
            o.results_file = v;
        } else if (a == "--reps") {
            o.reps = static_cast<unsigned>(std::clamp<uint64_t>(parse_number(v, a), 1, 1000));
        } else if (a == "--packets") {
            o.packets = static_cast<uint32_t>(std::clamp<uint64_t>(parse_number(v, a), kBurst, 1u << 24));
        } else if (a == "--conns") {
            o.conns.clear();
            for (const std::string& s : split(v, ',')) o.conns.push_back(static_cast<uint32_t>(parse_number(s, a)));
        } else if (a == "--new-conns") {
            o.new_conns = static_cast<uint32_t>(std::clamp<uint64_t>(parse_number(v, a), kBurst, 1u << 22));
        } else if (a == "--lb-conns") {
            o.lb_conns = static_cast<uint32_t>(std::clamp<uint64_t>(parse_number(v, a), kBurst, 1'000'000));
        } else if (a == "--seed") {
            o.seed = parse_number(v, a);
        } else {
            fail("unknown option " + a + " (see --help)");
        }
    }
    if (o.rules_file.empty() != o.trace_file.empty()) fail("--rules and --trace go together");
    for (uint32_t c : o.conns)
        if (c < 1 || c > 16'000'000) fail("--conns: each count must be within 1..16000000");
    return o;
}

// ---------------------------------------------------------------------------------------------------------------
// The machine and its load

std::string cpu_model() {
    std::ifstream f("/proc/cpuinfo");
    for (std::string line; std::getline(f, line);)
        if (line.rfind("model name", 0) == 0) {
            const auto colon = line.find(':');
            std::string m = line.substr(colon + 2);
            for (const char* noise : {"(R)", "(TM)"})
                for (std::size_t p; (p = m.find(noise)) != std::string::npos;) m.erase(p, std::strlen(noise));
            return m;
        }
    return "unknown CPU";
}

std::string loadavg() {
    std::ifstream f("/proc/loadavg");
    std::string a, b, c;
    f >> a >> b >> c;
    return a + " " + b + " " + c;
}

std::string utc_now() {
    const std::time_t t = std::time(nullptr);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&t));
    return buf;
}

// CPU time of the whole machine and of this process, to tell how much other processes took meanwhile.
struct CpuSample {
    uint64_t busy = 0, total = 0, ours = 0;  // jiffies
};

CpuSample cpu_sample() {
    CpuSample s;
    std::ifstream stat("/proc/stat");
    std::string cpu;
    uint64_t v[8] = {};  // user nice system idle iowait irq softirq steal
    stat >> cpu;
    for (uint64_t& x : v) stat >> x;
    for (uint64_t x : v) s.total += x;
    s.busy = s.total - v[3] - v[4];
    std::ifstream self("/proc/self/stat");
    std::string line;
    std::getline(self, line);
    std::istringstream fields(line.substr(line.rfind(')') + 2));
    std::vector<std::string> f;
    for (std::string x; fields >> x;) f.push_back(x);
    if (f.size() > 12) s.ours = std::stoull(f[11]) + std::stoull(f[12]);  // utime, stime
    return s;
}

// Share of all CPU time that other processes used between two samples.
double others_share(const CpuSample& a, const CpuSample& b) {
    const double total = static_cast<double>(b.total - a.total);
    if (total <= 0) return 0;
    const double others = static_cast<double>(b.busy - a.busy) - static_cast<double>(b.ours - a.ours);
    return std::max(0.0, others / total);
}

// ---------------------------------------------------------------------------------------------------------------
// Statistics and the result table

struct Stat {
    double median = 0, min = 0, max = 0;
};

Stat stat_of(std::vector<double> v) {
    Stat s;
    if (v.empty()) return s;
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    s.median = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    s.min = v.front();
    s.max = v.back();
    return s;
}

struct Row {
    std::string id;           // stable key for firewall.sh
    std::string measurement;  // what sluice does
    std::string unit;
    std::string reference;    // what it is compared with
    Stat ref, sluice;
    bool has_ref = true;
    std::string note;         // printed under the table
};

std::string fmt(double v) {
    char buf[32];
    if (v >= 1000) std::snprintf(buf, sizeof buf, "%.0f", v);
    else if (v >= 100) std::snprintf(buf, sizeof buf, "%.1f", v);
    else std::snprintf(buf, sizeof buf, "%.2f", v);
    return buf;
}

std::string spread(const Stat& s) { return fmt(s.min) + ".." + fmt(s.max); }

class Table {
public:
    void add(Row row) { rows_.push_back(std::move(row)); }
    void note(const std::string& line) { notes_.push_back(line); }

    void print() const {
        std::printf("\n%-58s %-44s %10s %10s %7s  %s\n", "measurement", "reference", "reference", "sluice", "ratio",
                    "unit");
        for (const Row& r : rows_) {
            const std::string ratio = r.has_ref && r.ref.median > 0 ? fmt(r.sluice.median / r.ref.median) : "-";
            std::printf("%-58s %-44s %10s %10s %7s  %s\n", r.measurement.c_str(), r.reference.c_str(),
                        r.has_ref ? fmt(r.ref.median).c_str() : "-", fmt(r.sluice.median).c_str(), ratio.c_str(),
                        r.unit.c_str());
        }
        std::printf("\nspread (min..max over the repetitions):\n");
        for (const Row& r : rows_)
            std::printf("  %-56s ref %-17s sluice %s\n", r.measurement.c_str(),
                        r.has_ref ? spread(r.ref).c_str() : "-", spread(r.sluice).c_str());
        for (const std::string& n : notes_) std::printf("%s\n", n.c_str());
    }

    void write_tsv(const std::string& path, const std::vector<std::pair<std::string, std::string>>& meta) const {
        std::ofstream f(path);
        if (!f) fail("cannot write " + path);
        for (const auto& [k, v] : meta) f << "#" << k << "\t" << v << "\n";
        f << "id\tmeasurement\tunit\treference\tref_median\tref_min\tref_max\tsluice_median\tsluice_min\tsluice_max\n";
        for (const Row& r : rows_)
            f << r.id << "\t" << r.measurement << "\t" << r.unit << "\t" << r.reference << "\t"
              << (r.has_ref ? fmt(r.ref.median) : "-") << "\t" << (r.has_ref ? fmt(r.ref.min) : "-") << "\t"
              << (r.has_ref ? fmt(r.ref.max) : "-") << "\t" << fmt(r.sluice.median) << "\t" << fmt(r.sluice.min)
              << "\t" << fmt(r.sluice.max) << "\n";
    }

private:
    std::vector<Row> rows_;
    std::vector<std::string> notes_;
};

// ---------------------------------------------------------------------------------------------------------------
// ClassBench-like rules and traces (after Taylor & Turner, "ClassBench: a packet classification benchmark",
// INFOCOM 2005: prefixes of varied lengths, port ranges of the classes WC/HI/LO/EM/AR, a protocol mix, and a trace
// whose headers mostly fall inside some rule). Host byte order throughout.

struct RuleSpec {
    uint32_t src = 0, dst = 0;
    uint8_t src_len = 0, dst_len = 0;
    uint16_t sport_lo = 0, sport_hi = 65535, dport_lo = 0, dport_hi = 65535;
    uint8_t proto = 0, proto_mask = 0;  // mask 0: any protocol
};

struct TraceTuple {
    uint32_t src = 0, dst = 0;
    uint16_t sport = 0, dport = 0;
    uint8_t proto = 0;
};

uint32_t prefix_mask(unsigned len) { return len == 0 ? 0 : ~uint32_t{0} << (32 - len); }

bool has_ports(uint8_t proto) { return proto == IPPROTO_TCP || proto == IPPROTO_UDP || proto == IPPROTO_SCTP; }

using Rng = std::mt19937_64;

uint32_t uniform(Rng& rng, uint32_t lo, uint32_t hi) { return std::uniform_int_distribution<uint32_t>(lo, hi)(rng); }

// ClassBench's port classes: wildcard, >= 1024, < 1024, exact, arbitrary range.
void random_ports(Rng& rng, bool destination, uint16_t& lo, uint16_t& hi) {
    static constexpr uint16_t kWellKnown[] = {22, 25, 53, 80, 123, 161, 389, 443, 993, 3306, 5432, 8080, 8443};
    const uint32_t pick = uniform(rng, 0, 99);
    // source ports: WC 70 HI 10 EM 10 AR 10; destination ports: WC 30 HI 10 LO 10 EM 35 AR 15
    const uint32_t wc = destination ? 30 : 70, high = wc + 10, low = destination ? high + 10 : high,
                   exact = low + (destination ? 35 : 10);
    if (pick < wc) {
        lo = 0, hi = 65535;
    } else if (pick < high) {
        lo = 1024, hi = 65535;
    } else if (pick < low) {
        lo = 0, hi = 1023;
    } else if (pick < exact) {
        lo = hi = destination && uniform(rng, 0, 1) ? kWellKnown[uniform(rng, 0, std::size(kWellKnown) - 1)]
                                                    : static_cast<uint16_t>(uniform(rng, 1, 65535));
    } else {
        lo = static_cast<uint16_t>(uniform(rng, 0, 65000));
        hi = static_cast<uint16_t>(std::min<uint32_t>(65535, lo + uniform(rng, 1, 8192)));
    }
}

std::vector<RuleSpec> generate_rules(std::size_t count, uint64_t seed) {
    Rng rng(seed * 1'000'003 + count);
    std::vector<RuleSpec> rules(count);
    for (RuleSpec& r : rules) {
        r.src_len = static_cast<uint8_t>(uniform(rng, 8, 32));
        r.dst_len = static_cast<uint8_t>(uniform(rng, 8, 32));
        r.src = static_cast<uint32_t>(rng()) & prefix_mask(r.src_len);
        r.dst = static_cast<uint32_t>(rng()) & prefix_mask(r.dst_len);
        const uint32_t p = uniform(rng, 0, 99);  // TCP 45, UDP 25, ICMP 5, any 25
        if (p < 45) r.proto = IPPROTO_TCP, r.proto_mask = 0xff;
        else if (p < 70) r.proto = IPPROTO_UDP, r.proto_mask = 0xff;
        else if (p < 75) r.proto = IPPROTO_ICMP, r.proto_mask = 0xff;
        if (r.proto_mask && has_ports(r.proto)) {
            random_ports(rng, false, r.sport_lo, r.sport_hi);
            random_ports(rng, true, r.dport_lo, r.dport_hi);
        }
    }
    return rules;
}

// 90% of the headers fall inside a random rule (a random point of its box), 10% are random TCP/UDP.
std::vector<TraceTuple> generate_trace(const std::vector<RuleSpec>& rules, std::size_t count, uint64_t seed) {
    Rng rng(seed * 7'000'003 + rules.size());
    std::vector<TraceTuple> trace(count);
    for (TraceTuple& t : trace) {
        if (!rules.empty() && uniform(rng, 0, 9) != 0) {
            const RuleSpec& r = rules[uniform(rng, 0, static_cast<uint32_t>(rules.size() - 1))];
            t.src = r.src | (static_cast<uint32_t>(rng()) & ~prefix_mask(r.src_len));
            t.dst = r.dst | (static_cast<uint32_t>(rng()) & ~prefix_mask(r.dst_len));
            t.sport = static_cast<uint16_t>(uniform(rng, r.sport_lo, r.sport_hi));
            t.dport = static_cast<uint16_t>(uniform(rng, r.dport_lo, r.dport_hi));
            t.proto = r.proto_mask ? r.proto : static_cast<uint8_t>(uniform(rng, 0, 1) ? IPPROTO_TCP : IPPROTO_UDP);
        } else {
            t.src = static_cast<uint32_t>(rng());
            t.dst = static_cast<uint32_t>(rng());
            t.sport = static_cast<uint16_t>(rng());
            t.dport = static_cast<uint16_t>(rng());
            t.proto = uniform(rng, 0, 1) ? IPPROTO_TCP : IPPROTO_UDP;
        }
    }
    return trace;
}

std::string dotted(uint32_t a) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%u.%u.%u.%u", a >> 24, (a >> 16) & 0xff, (a >> 8) & 0xff, a & 0xff);
    return buf;
}

void write_rules(const std::string& path, const std::vector<RuleSpec>& rules) {
    std::FILE* f = std::fopen(path.c_str(), "w");
    if (!f) fail("cannot write " + path + ": " + std::strerror(errno));
    std::fprintf(f, "# %zu ClassBench-style IPv4 rules written by sluice_bench (dpdk-test-acl --rulesf format)\n",
                 rules.size());
    for (const RuleSpec& r : rules)
        std::fprintf(f, "@%s/%u\t%s/%u\t%u : %u\t%u : %u\t0x%02x/0x%02x\n", dotted(r.src).c_str(), r.src_len,
                     dotted(r.dst).c_str(), r.dst_len, r.sport_lo, r.sport_hi, r.dport_lo, r.dport_hi, r.proto,
                     r.proto_mask);
    if (std::fclose(f) != 0) fail("cannot write " + path);
}

void write_trace(const std::string& path, const std::vector<TraceTuple>& trace) {
    std::FILE* f = std::fopen(path.c_str(), "w");
    if (!f) fail("cannot write " + path + ": " + std::strerror(errno));
    std::fprintf(f, "# %zu IPv4 headers written by sluice_bench (dpdk-test-acl --tracef format)\n", trace.size());
    for (const TraceTuple& t : trace)
        std::fprintf(f, "0x%08x\t0x%08x\t%u\t%u\t%u\n", t.src, t.dst, t.sport, t.dport, t.proto);
    if (std::fclose(f) != 0) fail("cannot write " + path);
}

bool skip_line(const std::string& line) {
    const auto p = line.find_first_not_of(" \t\r\n");
    return p == std::string::npos || line[p] == '#';
}

unsigned long field_number(const std::string& token, unsigned long limit, const std::string& where) {
    errno = 0;
    char* end = nullptr;
    const unsigned long v = std::strtoul(token.c_str(), &end, 0);
    if (errno != 0 || end == token.c_str() || *end != '\0' || v > limit)
        throw std::runtime_error(where + ": '" + token + "' is not a number up to " + std::to_string(limit));
    return v;
}

void parse_net(const std::string& token, uint32_t& addr, uint8_t& len, const std::string& where) {
    const auto slash = token.find('/');
    in_addr a{};
    if (slash == std::string::npos || inet_pton(AF_INET, token.substr(0, slash).c_str(), &a) != 1)
        throw std::runtime_error(where + ": '" + token + "' is not an IPv4 prefix a.b.c.d/len");
    len = static_cast<uint8_t>(field_number(token.substr(slash + 1), 32, where));
    addr = ntohl(a.s_addr) & prefix_mask(len);
}

std::vector<RuleSpec> read_rules(const std::string& path) {
    std::ifstream f(path);
    if (!f) fail("cannot read " + path);
    std::vector<RuleSpec> rules;
    int line_no = 0;
    try {
        for (std::string line; std::getline(f, line);) {
            ++line_no;
            if (skip_line(line)) continue;
            const std::string where = path + ":" + std::to_string(line_no);
            const auto at = line.find_first_not_of(" \t");
            if (line[at] != '@') throw std::runtime_error(where + ": a rule starts with '@'");
            std::istringstream in(line.substr(at + 1));
            std::vector<std::string> t;
            for (std::string x; in >> x;) t.push_back(x);
            if (t.size() != 9 || t[3] != ":" || t[6] != ":")
                throw std::runtime_error(where + ": expected '@src/len dst/len lo : hi lo : hi proto/mask'");
            RuleSpec r;
            parse_net(t[0], r.src, r.src_len, where);
            parse_net(t[1], r.dst, r.dst_len, where);
            r.sport_lo = static_cast<uint16_t>(field_number(t[2], 65535, where));
            r.sport_hi = static_cast<uint16_t>(field_number(t[4], 65535, where));
            r.dport_lo = static_cast<uint16_t>(field_number(t[5], 65535, where));
            r.dport_hi = static_cast<uint16_t>(field_number(t[7], 65535, where));
            const auto slash = t[8].find('/');
            if (slash == std::string::npos) throw std::runtime_error(where + ": protocol must be value/mask");
            r.proto = static_cast<uint8_t>(field_number(t[8].substr(0, slash), 255, where));
            r.proto_mask = static_cast<uint8_t>(field_number(t[8].substr(slash + 1), 255, where));
            if (r.proto_mask != 0 && r.proto_mask != 0xff)
                throw std::runtime_error(where + ": protocol mask must be 0x00 or 0xff for sluice");
            if (r.sport_lo > r.sport_hi || r.dport_lo > r.dport_hi)
                throw std::runtime_error(where + ": empty port range");
            const bool wild_ports = r.sport_lo == 0 && r.sport_hi == 65535 && r.dport_lo == 0 && r.dport_hi == 65535;
            if (!wild_ports && !(r.proto_mask && has_ports(r.proto)))
                throw std::runtime_error(where + ": port ranges on a rule that is not TCP/UDP/SCTP: sluice would "
                                                 "ignore them, dpdk-test-acl would not");
            rules.push_back(r);
        }
    } catch (const std::runtime_error& e) {
        fail(e.what());
    }
    return rules;
}

std::vector<TraceTuple> read_trace(const std::string& path) {
    std::ifstream f(path);
    if (!f) fail("cannot read " + path);
    std::vector<TraceTuple> trace;
    int line_no = 0;
    try {
        for (std::string line; std::getline(f, line);) {
            ++line_no;
            if (skip_line(line)) continue;
            const std::string where = path + ":" + std::to_string(line_no);
            std::istringstream in(line);
            std::vector<std::string> t;
            for (std::string x; in >> x;) t.push_back(x);
            if (t.size() < 5) throw std::runtime_error(where + ": expected 'src dst sport dport proto'");
            TraceTuple tt;
            tt.src = static_cast<uint32_t>(field_number(t[0], UINT32_MAX, where));
            tt.dst = static_cast<uint32_t>(field_number(t[1], UINT32_MAX, where));
            tt.sport = static_cast<uint16_t>(field_number(t[2], 65535, where));
            tt.dport = static_cast<uint16_t>(field_number(t[3], 65535, where));
            tt.proto = static_cast<uint8_t>(field_number(t[4], 255, where));
            trace.push_back(tt);
        }
    } catch (const std::runtime_error& e) {
        fail(e.what());
    }
    if (trace.empty()) fail(path + ": no trace records");
    return trace;
}

// The rule as sluice compiles it: ingress port wild, /0 is "any", ports only for TCP/UDP/SCTP.
Rule to_rule(const RuleSpec& s, std::size_t index) {
    Rule r;
    r.name = "r" + std::to_string(index);
    r.family = IpFamily::ipv4;
    if (s.src_len) r.sources = {Prefix{IpAddress::from_v4(htonl(s.src)), s.src_len}};
    if (s.dst_len) r.destinations = {Prefix{IpAddress::from_v4(htonl(s.dst)), s.dst_len}};
    r.protocol = s.proto_mask ? s.proto : kAnyProtocol;
    if (s.sport_lo != 0 || s.sport_hi != 65535) r.source_ports = {PortRange{s.sport_lo, s.sport_hi}};
    if (s.dport_lo != 0 || s.dport_hi != 65535) r.destination_ports = {PortRange{s.dport_lo, s.dport_hi}};
    r.action = RuleAction::allow;
    return r;
}

// The same rule as a config entry, for build_snapshot.
FirewallRuleConfig to_rule_config(const RuleSpec& s, std::size_t index) {
    FirewallRuleConfig r;
    r.name = "r" + std::to_string(index);
    if (s.src_len) r.source = AddressMatch{false, {Prefix{IpAddress::from_v4(htonl(s.src)), s.src_len}}, {}};
    if (s.dst_len) r.destination = AddressMatch{false, {Prefix{IpAddress::from_v4(htonl(s.dst)), s.dst_len}}, {}};
    r.protocol = s.proto_mask ? s.proto : kAnyProtocol;
    if (s.sport_lo != 0 || s.sport_hi != 65535) r.source_ports = {PortRange{s.sport_lo, s.sport_hi}};
    if (s.dport_lo != 0 || s.dport_hi != 65535) r.destination_ports = {PortRange{s.dport_lo, s.dport_hi}};
    r.action = RuleAction::allow;
    return r;
}

FiveTuple to_tuple(const TraceTuple& t) {
    FiveTuple f;
    f.src = IpAddress::from_v4(htonl(t.src));
    f.dst = IpAddress::from_v4(htonl(t.dst));
    f.src_port = htons(t.sport);
    f.dst_port = htons(t.dport);
    f.proto = t.proto;
    f.family = IpFamily::ipv4;
    return f;
}

// First-match over the rule list, the meaning both sluice and dpdk-test-acl give the file.
uint32_t linear_match(const std::vector<RuleSpec>& rules, const TraceTuple& t) {
    for (uint32_t i = 0; i < rules.size(); ++i) {
        const RuleSpec& r = rules[i];
        if (r.proto_mask && r.proto != t.proto) continue;
        if ((t.src & prefix_mask(r.src_len)) != r.src || (t.dst & prefix_mask(r.dst_len)) != r.dst) continue;
        if (t.sport < r.sport_lo || t.sport > r.sport_hi || t.dport < r.dport_lo || t.dport > r.dport_hi) continue;
        return i;
    }
    return AclClassifier::kNoMatch;
}

// ---------------------------------------------------------------------------------------------------------------
// The DPDK side: EAL, a pool, a net_null port, one worker's context

struct Dpdk {
    rte_mempool* pool = nullptr;
    uint16_t port = 0;
    rte_ether_addr port_mac{};
    LcoreContext* ctx = nullptr;
    uint64_t tsc_hz = 0;
    uint64_t rdtsc_overhead = 0;  // cycles rte_rdtsc_precise() pairs add to a timed region
    std::string eal_line;
    bool hugepages = false;
    bool own_prefix = false;  // the EAL arguments are ours: remove the runtime directory at exit
};

unsigned free_hugepages_2m() {
    std::ifstream f("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages");
    unsigned n = 0;
    f >> n;
    return n;
}

// Another CPU this process may run on than cpu (for the second lcore of reload and scaling), or -1.
int other_cpu(unsigned cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0) return -1;
    for (int c = 0; c < std::min(CPU_SETSIZE, RTE_MAX_LCORE); ++c)
        if (CPU_ISSET(c, &set) && static_cast<unsigned>(c) != cpu) return c;
    return -1;
}

void start_eal(Dpdk& d, const Options& o, const char* argv0) {
    std::vector<std::string> args{argv0};
    if (o.eal.empty()) {
        d.own_prefix = true;
        std::string lcores = std::to_string(o.lcore);
        if (o.sections.count("reload") || o.sections.count("scaling"))
            if (const int other = other_cpu(o.lcore); other >= 0) lcores += "," + std::to_string(other);
        args.insert(args.end(), {"-l", lcores, "--main-lcore=" + std::to_string(o.lcore), "--no-pci", "--no-telemetry",
                                 "--log-level=error", "--file-prefix=bench-" + std::to_string(getpid())});
        // 1M connections take ~125 MiB, the 10k-rule contexts ~40 MiB each, the pool ~20 MiB: 300 pages leave room.
        d.hugepages = free_hugepages_2m() >= 300;
        if (d.hugepages) args.emplace_back("--in-memory");
        else args.insert(args.end(), {"--no-huge", "-m", "1024"});
        args.insert(args.end(), o.eal_add.begin(), o.eal_add.end());
    } else {
        args.insert(args.end(), o.eal.begin(), o.eal.end());
        d.hugepages = std::none_of(o.eal.begin(), o.eal.end(), [](const std::string& a) { return a == "--no-huge"; });
    }
    if (std::none_of(args.begin(), args.end(), [](const std::string& a) { return a.find("net_null") != std::string::npos; }))
        args.emplace_back("--vdev=net_null0,no-rx=1");
    for (std::size_t i = 1; i < args.size(); ++i) d.eal_line += (i > 1 ? " " : "") + args[i];
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (rte_eal_init(static_cast<int>(args.size()), argv.data()) < 0)
        fail("rte_eal_init(" + d.eal_line + "): " + rte_strerror(rte_errno));
    const std::string runtime_dir = rte_eal_get_runtime_dir();
    if (d.own_prefix && runtime_dir.find("/bench-" + std::to_string(getpid())) != std::string::npos)
        g_runtime_dir = runtime_dir;
    if (!register_packet_meta()) fail(std::string("cannot register the PacketMeta dynfield: ") + rte_strerror(rte_errno));
    d.tsc_hz = rte_get_tsc_hz();
}

void start_port(Dpdk& d) {
    const int socket = static_cast<int>(rte_socket_id());
    d.pool = rte_pktmbuf_pool_create("bench_pool", 8191, kMempoolCache, 0, RTE_MBUF_DEFAULT_BUF_SIZE, socket);
    if (!d.pool) fail(std::string("rte_pktmbuf_pool_create: ") + rte_strerror(rte_errno));

    uint16_t port = RTE_MAX_ETHPORTS;
    uint16_t id;
    RTE_ETH_FOREACH_DEV(id) {
        rte_eth_dev_info info{};
        if (rte_eth_dev_info_get(id, &info) == 0 && info.driver_name && std::strstr(info.driver_name, "null")) {
            port = id;
            break;
        }
    }
    if (port == RTE_MAX_ETHPORTS) fail("no net_null port (is librte_net_null installed? add --vdev=net_null0)");
    d.port = port;
    // One TX queue per lcore: the workers of reload and scaling own queue <worker index> each, as the Dataplane
    // gives them (DataplaneSpec::tx_port_ids); the other sections send on queue 0.
    const auto tx_queues = static_cast<uint16_t>(std::clamp<unsigned>(rte_lcore_count(), 1, kMaxWorkers));
    rte_eth_conf conf{};
    int rc = rte_eth_dev_configure(port, 1, tx_queues, &conf);
    if (rc == 0) rc = rte_eth_rx_queue_setup(port, 0, 256, socket, nullptr, d.pool);
    for (uint16_t q = 0; rc == 0 && q < tx_queues; ++q) rc = rte_eth_tx_queue_setup(port, q, 1024, socket, nullptr);
    if (rc == 0) rc = rte_eth_dev_start(port);
    if (rc != 0) fail("net_null port " + std::to_string(port) + ": " + rte_strerror(-rc));
    rte_eth_macaddr_get(port, &d.port_mac);

    // One worker's context, the way Dataplane::build makes one (lib/pipeline/dataplane.cpp).
    d.ctx = static_cast<LcoreContext*>(rte_zmalloc_socket("bench_lcore", sizeof(LcoreContext), kCacheLine, socket));
    if (!d.ctx) fail("out of memory for the lcore context");
    new (d.ctx) LcoreContext{};
    LcoreContext& ctx = *d.ctx;
    ctx.lcore_id = rte_lcore_id();
    ctx.rx = ctx.worker = true;
    ctx.worker_count = 1;
    ctx.tx_queue = 0;
    ctx.qsbr_thread_id = 0;
    auto* buffer = static_cast<rte_eth_dev_tx_buffer*>(
        rte_zmalloc_socket("bench_txbuf", RTE_ETH_TX_BUFFER_SIZE(kBurst), kCacheLine, socket));
    if (!buffer) fail("out of memory for the TX buffer");
    rte_eth_tx_buffer_init(buffer, kBurst);
    ctx.tx_drop_sinks[port] = TxDropSink{&ctx.counters, port};
    rte_eth_tx_buffer_set_err_callback(buffer, count_tx_drops, &ctx.tx_drop_sinks[port]);
    ctx.tx_buffers[port] = buffer;
    ctx.tx_ports[ctx.tx_port_count++] = port;
    // A tracking worker's counters (firewall_burst counts every allowed packet under its rule, and every packet of
    // a balanced connection under its backend). The NAT port pool is per section (see section_lb); the connection
    // tables get release_connection as their release hook (attach_conn_table).
    ctx.rule_traffic = static_cast<RuleTraffic*>(
        rte_zmalloc_socket("bench_rule_traffic", sizeof(RuleTraffic) * kMaxCountedRules, kCacheLine, socket));
    ctx.backend_traffic = static_cast<BackendTraffic*>(
        rte_zmalloc_socket("bench_backend_traffic", sizeof(BackendTraffic) * kMaxBackends, kCacheLine, socket));
    if (!ctx.rule_traffic || !ctx.backend_traffic) fail("out of memory for the rule and backend counters");
}

// A balanced connection ended: its NAT port goes back to the pool, its backend has one connection less. A copy of
// release_connection in lib/pipeline/dataplane.cpp (private there), which the Dataplane hooks into every worker's
// ConnTable.
void release_connection(void* arg, const ConnEntry& entry) {
    auto& ctx = *static_cast<LcoreContext*>(arg);
    if (entry.nat_port != 0) ctx.nat_ports->release(entry.nat_address, entry.nat_port);
    if (entry.backend != 0 && entry.backend <= kMaxBackends) counter_add(ctx.backend_traffic[entry.backend - 1].closed_connections);
}

// Makes table the worker's connection table, hooked as the Dataplane hooks a worker's.
void attach_conn_table(Dpdk& d, ConnTable& table) {
    table.set_release_hook(release_connection, d.ctx);
    d.ctx->conn_table = &table;
}

void stop_dpdk(Dpdk& d) {
    if (d.ctx) {
        rte_eth_tx_buffer_flush(d.port, 0, d.ctx->tx_buffers[d.port]);
        rte_free(d.ctx->tx_buffers[d.port]);
        rte_free(d.ctx->rule_traffic);
        rte_free(d.ctx->backend_traffic);
        d.ctx->~LcoreContext();
        rte_free(d.ctx);
    }
    rte_eth_dev_stop(d.port);
    rte_eth_dev_close(d.port);
    rte_mempool_free(d.pool);
    rte_eal_cleanup();
    remove_runtime_dir();
}

void measure_rdtsc_overhead(Dpdk& d) {
    std::vector<double> v;
    for (int i = 0; i < 1001; ++i) {
        const uint64_t t0 = rte_rdtsc_precise();
        const uint64_t t1 = rte_rdtsc_precise();
        v.push_back(static_cast<double>(t1 - t0));
    }
    d.rdtsc_overhead = static_cast<uint64_t>(stat_of(v).median);
}

// A packet of a stream: its tuple (network byte order) and, for TCP, its flags.
struct PacketSpec {
    FiveTuple tuple;
    uint8_t tcp_flags = 0;
};

// A 60-byte Ethernet/IPv4 frame: TCP without options, or UDP with 18 bytes of payload; valid IPv4 checksum.
void write_frame(rte_mbuf* m, const PacketSpec& p, uint16_t port, bool checksum_good) {
    auto* data = rte_pktmbuf_mtod(m, uint8_t*);
    std::memset(data, 0, kFrameLength);
    m->data_len = m->pkt_len = kFrameLength;
    m->port = port;
    m->ol_flags = checksum_good ? RTE_MBUF_F_RX_IP_CKSUM_GOOD : 0;
    auto* eth = reinterpret_cast<rte_ether_hdr*>(data);
    eth->dst_addr = rte_ether_addr{{0x02, 0, 0, 0, 0, 0x01}};
    eth->src_addr = rte_ether_addr{{0x02, 0, 0, 0, 0, 0x02}};
    eth->ether_type = RTE_BE16(RTE_ETHER_TYPE_IPV4);
    auto* ip = reinterpret_cast<rte_ipv4_hdr*>(eth + 1);
    const FiveTuple& t = p.tuple;
    const bool tcp = t.proto == IPPROTO_TCP;
    const uint16_t l4_length = tcp ? sizeof(rte_tcp_hdr) : kFrameLength - sizeof(rte_ether_hdr) - sizeof(rte_ipv4_hdr);
    ip->version_ihl = 0x45;
    ip->total_length = htons(static_cast<uint16_t>(sizeof(rte_ipv4_hdr) + l4_length));
    ip->fragment_offset = RTE_BE16(RTE_IPV4_HDR_DF_FLAG);
    ip->time_to_live = 64;
    ip->next_proto_id = t.proto;
    ip->src_addr = t.src.words[0];
    ip->dst_addr = t.dst.words[0];
    ip->hdr_checksum = rte_ipv4_cksum(ip);
    if (tcp) {
        auto* th = reinterpret_cast<rte_tcp_hdr*>(ip + 1);
        th->src_port = t.src_port;
        th->dst_port = t.dst_port;
        th->sent_seq = RTE_BE32(1);
        th->data_off = 0x50;
        th->tcp_flags = p.tcp_flags;
        th->rx_win = RTE_BE16(65535);
    } else {
        auto* uh = reinterpret_cast<rte_udp_hdr*>(ip + 1);
        uh->src_port = t.src_port;
        uh->dst_port = t.dst_port;
        uh->dgram_len = htons(l4_length);
    }
}

// The stage under test takes a burst and returns how many mbufs at the front of pkts it handed back (the harness
// frees those after the timed region).
using Stage = std::function<uint16_t(rte_mbuf** pkts, uint16_t count)>;

struct PassOptions {
    bool parse_first = true;     // run parse_burst (untimed) before the stage
    bool checksum_good = false;  // frames carry RTE_MBUF_F_RX_IP_CKSUM_GOOD
};

// Bursts the OS preempted: on a shared machine a context switch inside a timed region adds milliseconds (millions
// of cycles) to one burst. A burst longer than both 100 us and 20 times the pass's median burst is left out of
// the figure and counted here; what is left still carries interrupts, cache and TLB misses.
struct PreemptionCount {
    uint64_t excluded = 0, bursts = 0;
};
PreemptionCount g_preempted;

// One pass over the stream: stage cycles per packet over the bursts that were not preempted (the rte_rdtsc_precise
// pair's own cost subtracted per burst).
double timed_pass(Dpdk& d, const std::vector<PacketSpec>& stream, const Stage& stage, PassOptions po = {}) {
    rte_mbuf* pkts[kBurst];
    DropReason verdicts[kBurst];
    uint64_t malformed = 0;
    std::vector<std::pair<uint64_t, uint16_t>> bursts;  // cycles, packets
    bursts.reserve(stream.size() / kBurst + 1);
    for (std::size_t off = 0; off < stream.size(); off += kBurst) {
        const auto n = static_cast<uint16_t>(std::min<std::size_t>(kBurst, stream.size() - off));
        if (rte_pktmbuf_alloc_bulk(d.pool, pkts, n) != 0)
            fail("mbuf pool exhausted (" + std::to_string(mbufs_in_use(d.pool)) + " in use): a stage leaks mbufs");
        for (uint16_t i = 0; i < n; ++i) write_frame(pkts[i], stream[off + i], d.port, po.checksum_good);
        if (po.parse_first) {
            parse_burst(pkts, n, verdicts, d.ctx->hash_flows);  // as the RX lcore in front of that worker
            for (uint16_t i = 0; i < n; ++i) malformed += verdicts[i] != DropReason::none;
        }
        const uint64_t t0 = rte_rdtsc_precise();
        const uint16_t back = stage(pkts, n);
        const uint64_t t1 = rte_rdtsc_precise();
        bursts.emplace_back(t1 - t0 > d.rdtsc_overhead ? t1 - t0 - d.rdtsc_overhead : 0, n);
        if (back) rte_pktmbuf_free_bulk(pkts, back);
    }
    if (malformed) fail(std::to_string(malformed) + " benchmark frames failed to parse (a bug in sluice_bench)");
    std::vector<uint64_t> sorted;
    for (const auto& b : bursts) sorted.push_back(b.first);
    std::nth_element(sorted.begin(), sorted.begin() + sorted.size() / 2, sorted.end());
    const uint64_t limit = std::max(20 * sorted[sorted.size() / 2], d.tsc_hz / 10'000);
    uint64_t cycles = 0, packets = 0;
    for (const auto& [c, n] : bursts) {
        ++g_preempted.bursts;
        if (c > limit) {
            ++g_preempted.excluded;
            continue;
        }
        cycles += c;
        packets += n;
    }
    return packets ? static_cast<double>(cycles) / static_cast<double>(packets) : 0;
}

// Runs the variants interleaved, reps times each, after one warm-up pass each (unless !warm_up); per-packet cycles
// of each.
std::vector<std::vector<double>> interleaved(unsigned reps, const std::vector<std::function<double()>>& variants,
                                             bool warm_up = true) {
    std::vector<std::vector<double>> out(variants.size());
    if (warm_up)
        for (const auto& v : variants) v();
    for (unsigned r = 0; r < reps; ++r)
        for (std::size_t k = 0; k < variants.size(); ++k) out[k].push_back(variants[k]());
    return out;
}

void check_pool(Dpdk& d, const char* section) {
    rte_eth_tx_buffer_flush(d.port, d.ctx->tx_queue, d.ctx->tx_buffers[d.port]);
    const uint32_t in_use = mbufs_in_use(d.pool);
    if (in_use != 0)
        std::printf("WARNING: after %s, %u mbufs are not back in the pool (a stage leaked them)\n", section, in_use);
}

// Drop counters of the worker, to tell what the stages did with the packets.
std::array<uint64_t, kDropReasonCount> drops_of(const Dpdk& d) { return d.ctx->counters.drops; }

std::string drops_since(const LcoreCounters& counters, const std::array<uint64_t, kDropReasonCount>& before) {
    std::string out;
    for (std::size_t r = 0; r < kDropReasonCount; ++r) {
        const uint64_t n = counters.drops[r] - before[r];
        if (n) out += (out.empty() ? "" : ", ") + std::string(drop_reason_name(static_cast<DropReason>(r))) + " " +
                      std::to_string(n);
    }
    return out;
}

std::string drops_since(const Dpdk& d, const std::array<uint64_t, kDropReasonCount>& before) {
    return drops_since(d.ctx->counters, before);
}

// The load balancer's set-up (section lb): three TCP services on 192.0.2.100/101/102 port 80, one per mode (nat,
// dsr, tunnel), each with kLbBackends backends of weight 1 and a Maglev table of kLbMaglevSize slots; a NAT pool of
// kLbPoolV4 IPv4 addresses (10.1.0.100 and up, each 64512 ports for a single worker: enough for a pass of new
// connections) and one IPv6 address, as config/sluice.yaml has.
constexpr uint32_t kLbBackends = 10;
constexpr uint32_t kLbMaglevSize = 65537;
constexpr uint32_t kLbPoolV4 = 8;
constexpr uint32_t kVipNat = 0xc0000264;     // 192.0.2.100 (host order)
constexpr uint32_t kVipDsr = 0xc0000265;     // 192.0.2.101
constexpr uint32_t kVipTunnel = 0xc0000266;  // 192.0.2.102
constexpr uint32_t kNotAVip = 0xc00002c8;    // 192.0.2.200: the destination of the connections of no service
constexpr uint16_t kVipPort = 80, kNatBackendPort = 8080;
constexpr uint8_t kTcpSynAck = 0x12;

IpAddress v4(uint32_t host) { return IpAddress::from_v4(htonl(host)); }

void add_services(Config& config) {
    LoadBalancerConfig& lc = config.load_balancer;
    for (uint32_t i = 0; i < kLbPoolV4; ++i) {
        lc.nat_pool.push_back(Prefix{v4(0x0a010064 + i), 32});  // 10.1.0.100 + i
        lc.nat_pool_families.push_back(IpFamily::ipv4);
    }
    uint8_t bytes[16];
    inet_pton(AF_INET6, "2001:db8:1::100", bytes);
    lc.nat_pool.push_back(Prefix{IpAddress::from_v6(bytes), 128});
    lc.nat_pool_families.push_back(IpFamily::ipv6);
    lc.tunnel_source_v4 = v4(0x0a010001);  // 10.1.0.1
    const std::pair<LbMode, uint32_t> services[] = {
        {LbMode::nat, kVipNat}, {LbMode::dsr, kVipDsr}, {LbMode::tunnel, kVipTunnel}};
    for (uint32_t s = 0; s < std::size(services); ++s) {
        ServiceConfig sc;
        sc.name = std::string("bench-") + lb_mode_name(services[s].first);
        sc.vip = v4(services[s].second);
        sc.family = IpFamily::ipv4;
        sc.port = kVipPort;
        sc.protocol = IPPROTO_TCP;
        sc.mode = services[s].first;
        sc.table_size = kLbMaglevSize;
        for (uint32_t b = 0; b < kLbBackends; ++b) {
            BackendConfig bc;
            bc.address = v4(0x0a010000 + ((s + 1) << 8) + 11 + b);  // 10.1.<service+1>.11 and up
            bc.family = IpFamily::ipv4;
            bc.port = services[s].first == LbMode::nat ? kNatBackendPort : 0;  // dsr/tunnel keep the VIP's port
            bc.has_mac = services[s].first == LbMode::dsr;  // dsr needs one; the others use the forward entry's
            bc.mac = rte_ether_addr{{0x02, 0, 0, 0, static_cast<uint8_t>(s + 1), static_cast<uint8_t>(b)}};
            sc.backends.push_back(bc);
        }
        config.services.push_back(sc);
    }
}

// A snapshot forwarding null -> null with the rules (all allow, default allow) when firewall, and the three
// services when services.
std::unique_ptr<Snapshot> make_snapshot(const Dpdk& d, const std::vector<RuleSpec>& rules, bool services = false,
                                        bool firewall = true) {
    Config config;
    config.forward.push_back(ForwardConfig{"null", "null", rte_ether_addr{{0x02, 0, 0, 0, 0, 0x09}}});
    config.firewall.enabled = firewall;
    config.firewall.default_action = RuleAction::allow;
    for (std::size_t i = 0; i < rules.size(); ++i) config.firewall.rules.push_back(to_rule_config(rules[i], i));
    if (services) add_services(config);
    const std::vector<PortIdentity> ports{PortIdentity{"null", d.port, d.port_mac}};
    try {
        return build_snapshot(config, ports, 1, static_cast<int>(rte_socket_id()));
    } catch (const std::exception& e) {
        fail(std::string("build_snapshot: ") + e.what());
    }
}

std::string ordinal_count(uint64_t n) {
    if (n >= 1'000'000 && n % 1'000'000 == 0) return std::to_string(n / 1'000'000) + "M";
    if (n >= 1000 && n % 1000 == 0) return std::to_string(n / 1000) + "k";
    return std::to_string(n);
}

uint32_t table_counter = 0;
std::string table_name() { return "bench_ct" + std::to_string(table_counter++); }

// ---------------------------------------------------------------------------------------------------------------
// Sections

// Canonical tuples in a hash set, to make streams of distinct connections.
struct TupleHash {
    std::size_t operator()(const FiveTuple& t) const { return symmetric_flow_hash(t); }
};

// The connection table's key of a flow: two tuples with the same key are one connection.
FiveTuple connection_key(const FiveTuple& f) {
    FiveTuple key;
    bool low;
    canonical_key(f, key, low);
    return key;
}

// Random TCP/UDP tuples, distinct as connections (both directions count as one).
std::vector<FiveTuple> distinct_flows(std::size_t count, Rng& rng, uint32_t tcp_percent) {
    std::vector<FiveTuple> flows;
    flows.reserve(count);
    std::unordered_set<FiveTuple, TupleHash> seen;
    seen.reserve(count * 2);
    while (flows.size() < count) {
        TraceTuple t;
        t.src = static_cast<uint32_t>(rng());
        t.dst = static_cast<uint32_t>(rng());
        t.sport = static_cast<uint16_t>(uniform(rng, 1024, 65535));
        t.dport = static_cast<uint16_t>(uniform(rng, 1, 65535));
        t.proto = uniform(rng, 0, 99) < tcp_percent ? IPPROTO_TCP : IPPROTO_UDP;
        FiveTuple f = to_tuple(t);
        if (seen.insert(connection_key(f)).second) flows.push_back(f);
    }
    return flows;
}

// Puts the flows in the table as established (TCP) or replied (UDP) connections of rule 0, straight into the
// table; returns how many did not fit.
uint32_t insert_established(ConnTable& table, const std::vector<FiveTuple>& flows) {
    const uint64_t now = rte_rdtsc();
    uint32_t refused = 0;
    for (const FiveTuple& f : flows) {
        const ConnState state = f.proto == IPPROTO_TCP ? ConnState::tcp_established : ConnState::udp_replied;
        refused += table.insert(f, symmetric_flow_hash(f), state, 0, now) < 0;
    }
    return refused;
}

// Packets of the flows picked at random, half of them in the reply direction: the worst case for the caches.
std::vector<PacketSpec> random_packets(const std::vector<FiveTuple>& flows, uint32_t count, Rng& rng) {
    std::vector<PacketSpec> stream(count);
    for (PacketSpec& p : stream) {
        const FiveTuple& f = flows[uniform(rng, 0, static_cast<uint32_t>(flows.size() - 1))];
        p.tuple = uniform(rng, 0, 1) ? f.reversed() : f;
        p.tcp_flags = kTcpAck;
    }
    return stream;
}

void section_parse(Dpdk& d, const Options& o, Table& table) {
    Rng rng(o.seed);
    const std::vector<FiveTuple> flows = distinct_flows(4096, rng, 70);
    std::vector<PacketSpec> stream(o.packets);
    for (PacketSpec& p : stream) {
        p.tuple = flows[uniform(rng, 0, static_cast<uint32_t>(flows.size() - 1))];
        p.tcp_flags = kTcpAck;
    }
    DropReason verdicts[kBurst];
    const Stage parse = [&](rte_mbuf** pkts, uint16_t n) -> uint16_t {
        parse_burst(pkts, n, verdicts, true);  // with the flow hash, as an RX lcore in front of several workers
        return n;
    };
    const Stage parse_unhashed = [&](rte_mbuf** pkts, uint16_t n) -> uint16_t {
        parse_burst(pkts, n, verdicts, false);  // an RX lcore with one worker and no connection table (hash_flows)
        return n;
    };
    uint32_t ptypes = 0;  // kept live so the reference loop is not optimised away
    const Stage ptype = [&](rte_mbuf** pkts, uint16_t n) -> uint16_t {
        rte_net_hdr_lens lens;
        for (uint16_t i = 0; i < n; ++i) ptypes += rte_net_get_ptype(pkts[i], &lens, RTE_PTYPE_ALL_MASK);
        return n;
    };
    for (const bool good : {false, true}) {
        const PassOptions po{.parse_first = false, .checksum_good = good};
        auto r = interleaved(o.reps, {[&] { return timed_pass(d, stream, ptype, po); },
                                         [&] { return timed_pass(d, stream, parse, po); },
                                         [&] { return timed_pass(d, stream, parse_unhashed, po); }});
        const auto add = [&](std::string id, std::string measurement, const std::vector<double>& sluice) {
            table.add(Row{.id = std::move(id), .measurement = std::move(measurement), .unit = "cycles/pkt",
                          .reference = "rte_net_get_ptype (DPDK's parser)", .ref = stat_of(r[0]),
                          .sluice = stat_of(sluice)});
        };
        add(good ? "parse-csum-good" : "parse",
            good ? "parse_burst, IPv4 checksum flagged good by the NIC" : "parse_burst, IPv4 checksum verified in software",
            r[1]);
        add(good ? "parse-csum-good-unhashed" : "parse-unhashed",
            good ? "parse_burst, checksum good, no flow hash (one worker)"
                 : "parse_burst, checksum in software, no flow hash (one worker)",
            r[2]);
    }
    if (ptypes == 0) std::printf("(rte_net_get_ptype returned no type)\n");
    check_pool(d, "parse");
}

// sluice's rte_acl search key (lib/classify/acl_classifier.cpp, private there), for the in-process reference:
// rte_acl_classify on the same context with keys built beforehand. If the layout drifts, the results disagree
// with AclClassifier's and the reference is dropped with a warning.
struct Ipv4AclKey {
    uint8_t proto;
    uint8_t pad[3];
    uint32_t in_port;
    uint32_t src;
    uint32_t dst;
    uint16_t src_port;
    uint16_t dst_port;
};
static_assert(sizeof(Ipv4AclKey) == 20);

// rte_acl's own order of preference (acl_get_best_alg in lib/acl/rte_acl.c): the first one the CPU and the EAL's
// max SIMD bitwidth allow is what rte_acl_create picks (AclClassifier keeps it only when it could set none).
// Their names are acl_method_name's.
constexpr enum rte_acl_classify_alg kAlgs[] = {RTE_ACL_CLASSIFY_AVX512X32, RTE_ACL_CLASSIFY_AVX512X16,
                                               RTE_ACL_CLASSIFY_AVX2, RTE_ACL_CLASSIFY_SSE, RTE_ACL_CLASSIFY_SCALAR};

void classify_one(Dpdk& d, const Options& o, Table& table, const std::vector<RuleSpec>& specs,
                  const std::vector<TraceTuple>& trace, const std::string& label,
                  std::vector<std::pair<std::string, std::string>>& meta) {
    std::vector<Rule> rules;
    for (std::size_t i = 0; i < specs.size(); ++i) rules.push_back(to_rule(specs[i], i));
    const std::string name = "bench_acl_" + std::to_string(specs.size()) + "_" + std::to_string(table_counter++);
    const uint64_t build_start = rte_rdtsc();
    std::unique_ptr<AclClassifier> acl;
    try {
        acl = std::make_unique<AclClassifier>(IpFamily::ipv4, rules, static_cast<int>(rte_socket_id()), name);
    } catch (const std::exception& e) {
        fail(std::string("AclClassifier: ") + e.what());
    }
    const double build_s = static_cast<double>(rte_rdtsc() - build_start) / static_cast<double>(d.tsc_hz);
    rte_acl_ctx* ctx = rte_acl_find_existing(name.c_str());
    if (!ctx) fail("rte_acl_find_existing(" + name + ") found nothing");

    const std::size_t n = trace.size();
    std::vector<FiveTuple> tuples(n);
    std::vector<const FiveTuple*> tuple_ptrs(n);
    std::vector<Ipv4AclKey> keys(n);
    std::vector<const uint8_t*> key_ptrs(n);
    for (std::size_t i = 0; i < n; ++i) {
        tuples[i] = to_tuple(trace[i]);
        tuple_ptrs[i] = &tuples[i];
        keys[i] = Ipv4AclKey{tuples[i].proto, {0, 0, 0}, rte_cpu_to_be_32(0), tuples[i].src.words[0],
                             tuples[i].dst.words[0], tuples[i].src_port, tuples[i].dst_port};
        key_ptrs[i] = reinterpret_cast<const uint8_t*>(&keys[i]);
    }
    const std::vector<uint16_t> in_ports(kBurst, 0);
    std::vector<uint32_t> wrapped(n), raw(n);

    // One pass over the trace in bursts of 32, as dpdk-test-acl --tracestep=32 does; cycles per tuple, each burst
    // timed on its own so that preempted ones can be left out (see timed_pass).
    std::vector<uint64_t> burst_cycles((n + kBurst - 1) / kBurst);
    const auto per_tuple = [&] {
        std::vector<uint64_t> sorted(burst_cycles);
        std::nth_element(sorted.begin(), sorted.begin() + sorted.size() / 2, sorted.end());
        const uint64_t limit = std::max(20 * sorted[sorted.size() / 2], d.tsc_hz / 10'000);
        uint64_t cycles = 0, tuples_counted = 0;
        for (std::size_t b = 0; b < burst_cycles.size(); ++b) {
            ++g_preempted.bursts;
            if (burst_cycles[b] > limit) {
                ++g_preempted.excluded;
                continue;
            }
            cycles += burst_cycles[b];
            tuples_counted += std::min<std::size_t>(kBurst, n - b * kBurst);
        }
        return static_cast<double>(cycles) / static_cast<double>(tuples_counted);
    };
    const auto timed = [&](uint64_t t0, uint64_t t1) { return t1 - t0 > d.rdtsc_overhead ? t1 - t0 - d.rdtsc_overhead : 0; };
    // Each burst's input is read into the cache (untimed) before it is classified: in the pipeline the firewall
    // stage classifies tuples the parser wrote moments before, and rte_acl reads keys that AclClassifier has just
    // written. Cold, the 2.5 MiB of tuples made the wrapped pass pay a miss per tuple that the stage never pays.
    volatile uint32_t warm_sink = 0;
    const auto warm = [&](const void* first, std::size_t bytes) {
        const auto* p = static_cast<const uint8_t*>(first);
        uint32_t sum = 0;
        for (std::size_t at = 0; at < bytes; at += 64) sum += p[at];
        warm_sink = sum + p[bytes - 1];
    };
    const auto pass_wrapped = [&] {
        for (std::size_t off = 0, b = 0; off < n; off += kBurst, ++b) {
            const auto count = static_cast<uint32_t>(std::min<std::size_t>(kBurst, n - off));
            warm(&tuples[off], count * sizeof(FiveTuple));
            warm(&tuple_ptrs[off], count * sizeof(tuple_ptrs[0]));
            const uint64_t t0 = rte_rdtsc_precise();
            acl->classify(&tuple_ptrs[off], in_ports.data(), &wrapped[off], count);
            burst_cycles[b] = timed(t0, rte_rdtsc_precise());
        }
        return per_tuple();
    };
    const auto pass_raw = [&] {
        for (std::size_t off = 0, b = 0; off < n; off += kBurst, ++b) {
            const auto count = static_cast<uint32_t>(std::min<std::size_t>(kBurst, n - off));
            warm(&keys[off], count * sizeof(Ipv4AclKey));
            warm(&key_ptrs[off], count * sizeof(key_ptrs[0]));
            const uint64_t t0 = rte_rdtsc_precise();
            rte_acl_classify(ctx, &key_ptrs[off], &raw[off], count, 1);
            burst_cycles[b] = timed(t0, rte_rdtsc_precise());
        }
        return per_tuple();
    };

    // Correctness first: AclClassifier against a linear first-match on a sample, and against raw rte_acl.
    pass_wrapped();
    pass_raw();
    const std::size_t sample = std::min<std::size_t>(n, 4096);
    std::size_t linear_mismatch = 0, raw_mismatch = 0, matched = 0;
    for (std::size_t i = 0; i < sample; ++i)
        linear_mismatch += wrapped[i] != linear_match(specs, trace[i]);
    for (std::size_t i = 0; i < n; ++i) {
        raw_mismatch += (raw[i] == 0 ? AclClassifier::kNoMatch : raw[i] - 1) != wrapped[i];
        matched += wrapped[i] != AclClassifier::kNoMatch;
    }
    std::printf("classify %s: %zu rules (%zu rte_acl rules), built in %.2f s; %zu tuples, %.1f%% match a rule; "
                "AclClassifier vs linear first-match on %zu tuples: %zu differ; vs raw rte_acl: %zu differ\n",
                label.c_str(), specs.size(), acl->expanded_rule_count(), build_s, n, 100.0 * matched / n, sample,
                linear_mismatch, raw_mismatch);
    std::printf("classify %s: AclClassifier's method, timed when it was built: %s\n", label.c_str(),
                acl->method_report().c_str());
    if (linear_mismatch) std::printf("WARNING: AclClassifier disagrees with first-match semantics\n");
    const bool raw_valid = raw_mismatch == 0;
    if (!raw_valid)
        std::printf("WARNING: raw rte_acl results differ: the search-key layout copied from acl_classifier.cpp has "
                    "drifted; the in-process reference is left out\n");

    // sluice's figure is the method AclClassifier runs: the one it set, else rte_acl_create's pick, which is the
    // first in kAlgs that the context accepts (trying them changes the context: restored below).
    const enum rte_acl_classify_alg* sluice_alg = nullptr;
    for (const enum rte_acl_classify_alg& a : kAlgs) {
        const bool runs = acl->classify_method() != 0 ? static_cast<int>(a) == acl->classify_method()
                                                      : rte_acl_set_ctx_classify(ctx, a) == 0;
        if (runs) {
            sluice_alg = &a;
            break;
        }
    }
    for (const enum rte_acl_classify_alg& a : kAlgs) {
        if (rte_acl_set_ctx_classify(ctx, a) != 0) continue;
        const std::string alg_name = acl_method_name(a);
        auto r = interleaved(o.reps, {pass_raw, pass_wrapped});
        const bool runs_in_sluice = sluice_alg == &a;
        table.add(Row{.id = "classify-" + std::to_string(specs.size()) + (runs_in_sluice ? "" : "-" + alg_name),
                      .measurement = "classify " + label + ", " + alg_name + (runs_in_sluice ? " (sluice's)" : ""),
                      .unit = "cycles/pkt",
                      .reference = "raw rte_acl_classify, same context",
                      .ref = stat_of(r[0]),
                      .sluice = stat_of(r[1]),
                      .has_ref = raw_valid});
        if (runs_in_sluice) meta.emplace_back("acl_sluice_alg", alg_name);
    }
    // Leave the context as AclClassifier set it.
    if (sluice_alg) rte_acl_set_ctx_classify(ctx, *sluice_alg);
}

// Rules and trace read from files (--rules/--trace), before the EAL starts so that a bad file fails fast.
struct AclFiles {
    std::vector<RuleSpec> rules;
    std::vector<TraceTuple> trace;
};

void section_classify(Dpdk& d, const Options& o, Table& table, const AclFiles& files,
                      std::vector<std::pair<std::string, std::string>>& meta) {
    if (!o.rules_file.empty()) {
        classify_one(d, o, table, files.rules, files.trace,
                     ordinal_count(files.rules.size()) + " rules (" + o.rules_file + ")", meta);
        return;
    }
    for (const std::size_t count : {std::size_t{10}, std::size_t{1000}, std::size_t{10000}}) {
        const auto rules = generate_rules(count, o.seed);
        classify_one(d, o, table, rules, generate_trace(rules, 65536, o.seed), ordinal_count(count) + " rules", meta);
    }
}

// Packets of tracked connections: firewall_burst must settle them with the connection lookup alone, so the rule
// count should not matter; then the forwarding stage's cost for comparison.
void section_established(Dpdk& d, const Options& o, Table& table) {
    const auto rules_small = generate_rules(10, o.seed);
    const auto rules_large = generate_rules(10000, o.seed);
    const auto snap_small = make_snapshot(d, rules_small);
    const uint64_t t0 = rte_rdtsc();
    const auto snap_large = make_snapshot(d, rules_large);
    std::printf("established: snapshot with 10k rules built in %.2f s\n",
                static_cast<double>(rte_rdtsc() - t0) / static_cast<double>(d.tsc_hz));
    LcoreContext& ctx = *d.ctx;

    for (const uint32_t live : o.conns) {
        Rng rng(o.seed + live);
        const std::vector<FiveTuple> flows = distinct_flows(live, rng, 70);
        auto conn_table = std::make_unique<ConnTable>(table_name(), live, static_cast<int>(rte_socket_id()),
                                                      ConnTimeouts{}, d.tsc_hz);
        const uint32_t refused = insert_established(*conn_table, flows);
        if (refused) std::printf("WARNING: %u of %u connections did not fit in a table of %u\n", refused, live, live);
        attach_conn_table(d, *conn_table);

        const std::vector<PacketSpec> stream = random_packets(flows, o.packets, rng);
        const Stage fw_small = [&](rte_mbuf** pkts, uint16_t n) {
            return stateful_burst(ctx, *snap_small, pkts, n, rte_rdtsc());
        };
        const Stage fw_large = [&](rte_mbuf** pkts, uint16_t n) {
            return stateful_burst(ctx, *snap_large, pkts, n, rte_rdtsc());
        };
        const Stage forward_only = [&](rte_mbuf** pkts, uint16_t n) -> uint16_t {
            forward_burst(ctx, *snap_large, pkts, n);
            return 0;
        };
        const Stage fw_forward = [&](rte_mbuf** pkts, uint16_t n) -> uint16_t {
            const uint16_t kept = stateful_burst(ctx, *snap_large, pkts, n, rte_rdtsc());
            if (kept) forward_burst(ctx, *snap_large, pkts, kept);
            return 0;
        };
        const auto drops_before = drops_of(d);
        const uint64_t inserts_before = ctx.counters.conn_inserts;
        auto r = interleaved(o.reps,
                             {[&] { return timed_pass(d, stream, fw_small); },
                              [&] { return timed_pass(d, stream, fw_large); },
                              [&] { return timed_pass(d, stream, forward_only); },
                              [&] { return timed_pass(d, stream, fw_forward); }});
        const std::string drops = drops_since(d, drops_before);
        const std::string conns = ordinal_count(live) + " conns";
        table.add(Row{.id = "established-" + ordinal_count(live),
                      .measurement = "established, " + conns + ": firewall_burst, 10k rules",
                      .unit = "cycles/pkt",
                      .reference = "the same with 10 rules",
                      .ref = stat_of(r[0]),
                      .sluice = stat_of(r[1])});
        table.add(Row{.id = "established-forward-" + ordinal_count(live),
                      .measurement = "established, " + conns + ": firewall + forward",
                      .unit = "cycles/pkt",
                      .reference = "forward_burst alone (no firewall)",
                      .ref = stat_of(r[2]),
                      .sluice = stat_of(r[3])});
        if (!drops.empty() || ctx.counters.conn_inserts != inserts_before || conn_table->size() != live - refused)
            std::printf("WARNING: established %s: packets of tracked connections were dropped or opened new ones: "
                        "drops {%s}, inserts %" PRIu64 ", table size %u (expected %u)\n",
                        conns.c_str(), drops.c_str(), ctx.counters.conn_inserts - inserts_before, conn_table->size(),
                        live - refused);
        ctx.conn_table = nullptr;
        check_pool(d, "established");
    }
}

// Fills the table to capacity with throwaway connections and removes them again (untimed), so that every slot of
// its entry array and key store, and every bucket, has been written once. rte_hash hands out free slots first in,
// first out, so passes of new connections walk through the whole table over time; without hugepages (--no-huge)
// the EAL's memory is faulted in on first touch, and a pass that reaches fresh pages would pay the page faults.
void touch_all_slots(ConnTable& table) {
    std::vector<int32_t> positions;
    positions.reserve(table.capacity());
    FiveTuple t;
    t.dst = v4(0x7f000001);
    t.src_port = htons(1);
    t.dst_port = htons(2);
    t.proto = IPPROTO_UDP;
    t.family = IpFamily::ipv4;
    for (uint32_t i = 0; i < table.capacity(); ++i) {
        t.src = v4(0x7f000002 + i);  // 127/8 holds up to 16M of them
        const int32_t position = table.insert(t, symmetric_flow_hash(t), ConnState::udp_unreplied, UINT32_MAX, 0);
        if (position < 0) break;
        positions.push_back(position);
    }
    for (const int32_t position : positions) table.remove(position);
}

// SYN -> lookup miss -> classify (1k rules) -> insert, on a 1M-entry table that already had its pages touched.
void section_new(Dpdk& d, const Options& o, Table& table) {
    constexpr uint32_t kCapacity = 1'000'000;
    if (o.new_conns > kCapacity) fail("--new-conns must be at most 1000000");
    const auto rules = generate_rules(1000, o.seed);
    const auto snap = make_snapshot(d, rules);
    // The SYNs' tuples come from the rules' trace (most fall inside some rule), made distinct by their source port.
    const auto trace = generate_trace(rules, o.new_conns, o.seed + 1);
    std::vector<PacketSpec> stream;
    stream.reserve(o.new_conns);
    {
        Rng rng(o.seed + 2);
        std::unordered_set<FiveTuple, TupleHash> seen;
        for (TraceTuple t : trace) {
            t.proto = IPPROTO_TCP;
            FiveTuple f = to_tuple(t);
            while (!seen.insert(connection_key(f)).second) f.src_port = htons(static_cast<uint16_t>(uniform(rng, 1024, 65535)));
            stream.push_back(PacketSpec{f, kTcpSyn});
        }
    }
    ConnTable conn_table(table_name(), kCapacity, static_cast<int>(rte_socket_id()), ConnTimeouts{}, d.tsc_hz);
    touch_all_slots(conn_table);
    LcoreContext& ctx = *d.ctx;
    attach_conn_table(d, conn_table);
    const Stage fw = [&](rte_mbuf** pkts, uint16_t n) { return stateful_burst(ctx, *snap, pkts, n, rte_rdtsc()); };

    // Empties the table again (untimed), so every pass opens the same connections into the same, warm, table.
    const auto clear = [&] {
        for (std::size_t off = 0; off < stream.size(); off += kBurst) {
            const auto n = static_cast<uint32_t>(std::min<std::size_t>(kBurst, stream.size() - off));
            const FiveTuple* tuples[kBurst];
            uint32_t hashes[kBurst];
            int32_t positions[kBurst];
            for (uint32_t i = 0; i < n; ++i) {
                tuples[i] = &stream[off + i].tuple;
                hashes[i] = symmetric_flow_hash(*tuples[i]);
            }
            conn_table.lookup_bulk(tuples, hashes, n, positions);
            for (uint32_t i = 0; i < n; ++i)
                if (positions[i] >= 0) conn_table.remove(positions[i]);
        }
    };
    std::vector<double> cycles_per_conn;
    const auto drops_before = drops_of(d);
    uint32_t short_passes = 0;
    for (unsigned r = 0; r <= o.reps; ++r) {  // pass 0 touches the table's pages and is not counted
        const double cycles = timed_pass(d, stream, fw);  // per SYN: each opens one connection
        if (conn_table.size() != stream.size()) ++short_passes;
        if (r > 0) cycles_per_conn.push_back(cycles);
        clear();
    }
    const std::string drops = drops_since(d, drops_before);
    if (short_passes || !drops.empty())
        std::printf("WARNING: new connections: %u passes opened fewer connections than SYNs sent; drops {%s}\n",
                    short_passes, drops.c_str());
    ctx.conn_table = nullptr;
    check_pool(d, "new connections");

    const Stat cycles = stat_of(cycles_per_conn);
    const double hz = static_cast<double>(d.tsc_hz);
    const Stat rate{hz / cycles.median / 1e6, hz / cycles.max / 1e6, hz / cycles.min / 1e6};
    const double target_cycles = hz / kTargetNewConnsPerSecond;
    const std::string what = "new connections: SYN, miss, classify 1k rules, insert";
    table.add(Row{.id = "new-rate",
                  .measurement = what,
                  .unit = "M conn/s",
                  .reference = "target (firewall issue) per worker",
                  .ref = Stat{kTargetNewConnsPerSecond / 1e6, kTargetNewConnsPerSecond / 1e6, kTargetNewConnsPerSecond / 1e6},
                  .sluice = rate});
    table.add(Row{.id = "new-cycles",
                  .measurement = what,
                  .unit = "cycles/conn",
                  .reference = "target at this TSC rate",
                  .ref = Stat{target_cycles, target_cycles, target_cycles},
                  .sluice = cycles});
}

// ---------------------------------------------------------------------------------------------------------------
// Load balancer (section lb): the worker's whole stateful path, firewall_burst then forward_burst with the routes
// the first hands the second, for the services of add_services, each beside the same path for connections of no
// service.

// Distinct clients (source address and port) outside 10/8 and 192.0.2/24, to port 80 over TCP (packets_to sets
// the destination address).
std::vector<FiveTuple> lb_clients(std::size_t count, Rng& rng) {
    std::vector<FiveTuple> clients;
    clients.reserve(count);
    std::unordered_set<uint64_t> seen;
    seen.reserve(count * 2);
    while (clients.size() < count) {
        const auto src = static_cast<uint32_t>(rng());
        if ((src >> 24) == 10 || (src >> 8) == 0xc00002) continue;
        const auto sport = static_cast<uint16_t>(uniform(rng, 1024, 65535));
        if (!seen.insert(uint64_t{src} << 16 | sport).second) continue;
        FiveTuple f;
        f.src = v4(src);
        f.src_port = htons(sport);
        f.dst_port = htons(kVipPort);
        f.proto = IPPROTO_TCP;
        f.family = IpFamily::ipv4;
        clients.push_back(f);
    }
    return clients;
}

std::vector<PacketSpec> packets_to(const std::vector<FiveTuple>& clients, uint32_t dst_host, uint8_t tcp_flags) {
    std::vector<PacketSpec> out(clients.size());
    for (std::size_t i = 0; i < clients.size(); ++i) {
        out[i].tuple = clients[i];
        out[i].tuple.dst = v4(dst_host);
        out[i].tcp_flags = tcp_flags;
    }
    return out;
}

// The stateful path of a worker: firewall_burst, then forward_burst on what it kept, with its routes.
Stage worker_path(LcoreContext& ctx, const Snapshot& snapshot) {
    return [&ctx, &snapshot](rte_mbuf** pkts, uint16_t n) -> uint16_t {
        PacketRoute routes[kBurst];
        const uint16_t kept = stateful_burst(ctx, snapshot, pkts, n, rte_rdtsc(), routes);
        if (kept) forward_burst(ctx, snapshot, pkts, kept, routes);
        return 0;
    };
}

// Connection positions of the streams' tuples (-1 when not tracked).
std::vector<int32_t> positions_of(const ConnTable& table, const std::vector<PacketSpec>& stream) {
    std::vector<int32_t> out(stream.size());
    for (std::size_t off = 0; off < stream.size(); off += kBurst) {
        const auto n = static_cast<uint32_t>(std::min<std::size_t>(kBurst, stream.size() - off));
        const FiveTuple* tuples[kBurst];
        uint32_t hashes[kBurst];
        for (uint32_t i = 0; i < n; ++i) {
            tuples[i] = &stream[off + i].tuple;
            hashes[i] = symmetric_flow_hash(*tuples[i]);
        }
        table.lookup_bulk(tuples, hashes, n, &out[off]);
    }
    return out;
}

// Removes the stream's connections (with their NAT aliases, ports and backend counts, through the release hook),
// the work expiry does for each connection that ends: ConnTable::remove is timed per group of 32 connections
// (finding them is not), preempted groups left out as in timed_pass. Cycles per connection.
double timed_removal(Dpdk& d, ConnTable& table, const std::vector<PacketSpec>& stream) {
    const std::vector<int32_t> positions = positions_of(table, stream);
    std::vector<std::pair<uint64_t, uint32_t>> groups;  // cycles, connections
    groups.reserve(positions.size() / kBurst + 1);
    for (std::size_t off = 0; off < positions.size(); off += kBurst) {
        const std::size_t end = std::min(positions.size(), off + kBurst);
        uint32_t removed = 0;
        const uint64_t t0 = rte_rdtsc_precise();
        for (std::size_t i = off; i < end; ++i)
            if (positions[i] >= 0) table.remove(positions[i]), ++removed;
        const uint64_t t1 = rte_rdtsc_precise();
        groups.emplace_back(t1 - t0 > d.rdtsc_overhead ? t1 - t0 - d.rdtsc_overhead : 0, removed);
    }
    if (groups.empty()) return 0;
    std::vector<uint64_t> sorted;
    for (const auto& g : groups) sorted.push_back(g.first);
    std::nth_element(sorted.begin(), sorted.begin() + sorted.size() / 2, sorted.end());
    const uint64_t limit = std::max(20 * sorted[sorted.size() / 2], d.tsc_hz / 10'000);
    uint64_t cycles = 0, removed = 0;
    for (const auto& [c, n] : groups) {
        ++g_preempted.bursts;
        if (c > limit) {
            ++g_preempted.excluded;
            continue;
        }
        cycles += c;
        removed += n;
    }
    return removed ? static_cast<double>(cycles) / static_cast<double>(removed) : 0;
}

// A pass whose time is not wanted (setting connections up): its bursts are not counted as timed ones.
void untimed_pass(Dpdk& d, const std::vector<PacketSpec>& stream, const Stage& stage) {
    const PreemptionCount saved = g_preempted;
    timed_pass(d, stream, stage);
    g_preempted = saved;
}

std::string port_pool_state(const NatPortPool& ports, std::size_t addresses) {
    std::size_t lowest = ports.capacity();
    for (std::size_t a = 0; a < addresses; ++a) lowest = std::min(lowest, ports.free_ports(a));
    return lowest == ports.capacity() ? std::string() : "a pool address has " + std::to_string(lowest) + " of " +
                                                            std::to_string(ports.capacity()) + " ports free";
}

// New connections: SYNs from distinct clients through the worker's path. nat service: miss, pool-address check,
// VIP lookup, classify (1k rules, all allow), Maglev pick, insert, NAT port, alias insert, then the NAT rewrite.
// Reference: the same SYNs to a destination that is no service, on a snapshot with the same rules and no
// services (the firewall-only path). Every pass opens its connections into the same 1M table (every slot touched
// once beforehand), then removes them again, timed apart (expiry's share of a connection's cost), which returns
// the NAT ports. The table ends a nat pass half full (two entries per connection), a plain one a quarter full.
void lb_new(Dpdk& d, const Options& o, Table& table, const Snapshot& plain, const Snapshot& balanced,
            const Snapshot& balanced_open, NatPortPool& ports) {
    constexpr uint32_t kCapacity = 1'000'000;
    // A nat connection takes two entries (its alias), and a port: keep below the table and the pool.
    const uint32_t n = std::min<uint32_t>(o.new_conns, 450'000);
    if (n != o.new_conns) std::printf("lb: new connections: %u per pass (a nat connection takes two entries)\n", n);
    Rng rng(o.seed + 10);
    const std::vector<FiveTuple> clients = lb_clients(n, rng);
    const std::vector<PacketSpec> to_vip = packets_to(clients, kVipNat, kTcpSyn);
    const std::vector<PacketSpec> to_other = packets_to(clients, kNotAVip, kTcpSyn);
    ConnTable conn_table(table_name(), kCapacity, static_cast<int>(rte_socket_id()), ConnTimeouts{}, d.tsc_hz);
    touch_all_slots(conn_table);
    attach_conn_table(d, conn_table);
    LcoreContext& ctx = *d.ctx;
    const std::size_t pool_size = balanced.lb->pool.size();

    uint32_t short_passes = 0;
    std::string leftovers;
    std::vector<std::vector<double>> removal(4);  // per variant, cycles per removed connection (warm-up first)
    const auto pass = [&](std::size_t variant, const std::vector<PacketSpec>& stream, const Snapshot& snapshot,
                          uint32_t entries_per_conn) {
        const double cycles = timed_pass(d, stream, worker_path(ctx, snapshot));  // per SYN: each opens one
        if (conn_table.size() != stream.size() * entries_per_conn) ++short_passes;
        removal[variant].push_back(timed_removal(d, conn_table, stream));
        if (conn_table.size() != 0 && leftovers.empty())
            leftovers = std::to_string(conn_table.size()) + " entries left after removing a pass's connections";
        if (const std::string p = port_pool_state(ports, pool_size); !p.empty() && leftovers.empty()) leftovers = p;
        return cycles;
    };
    const auto drops_before = drops_of(d);
    auto r = interleaved(o.reps, {[&] { return pass(0, to_other, plain, 1); },
                                  [&] { return pass(1, to_vip, balanced, 2); },
                                  [&] { return pass(2, to_vip, balanced_open, 2); },
                                  [&] { return pass(3, to_other, balanced, 1); }});
    for (auto& v : removal) v.erase(v.begin());  // interleaved's warm-up pass
    const std::string drops = drops_since(d, drops_before);
    uint64_t opened = 0, closed = 0;
    for (uint32_t b = 0; b < kMaxBackends; ++b) {
        opened += ctx.backend_traffic[b].new_connections;
        closed += ctx.backend_traffic[b].closed_connections;
    }
    if (short_passes || !drops.empty() || !leftovers.empty() || opened != closed)
        std::printf("WARNING: lb new connections: %u passes opened fewer connections than SYNs sent; drops {%s}; %s; "
                    "backends counted %" PRIu64 " opened, %" PRIu64 " closed\n",
                    short_passes, drops.c_str(), leftovers.empty() ? "table and pool emptied" : leftovers.c_str(),
                    opened, closed);
    ctx.conn_table = nullptr;
    check_pool(d, "lb new connections");

    const double hz = static_cast<double>(d.tsc_hz);
    const auto rate = [&](const Stat& cycles) {
        return Stat{hz / cycles.median / 1e6, hz / cycles.max / 1e6, hz / cycles.min / 1e6};
    };
    const Stat target{kTargetNewConnsPerSecond / 1e6, kTargetNewConnsPerSecond / 1e6, kTargetNewConnsPerSecond / 1e6};
    const Stat ref = stat_of(r[0]), nat = stat_of(r[1]), nat_open = stat_of(r[2]), other = stat_of(r[3]);
    // Opening and, later, removing (expiry) each connection: what a worker pays per connection at a steady rate.
    std::vector<double> ref_cycle, nat_cycle;
    for (std::size_t k = 0; k < r[0].size(); ++k) {
        ref_cycle.push_back(r[0][k] + removal[0][k]);
        nat_cycle.push_back(r[1][k] + removal[1][k]);
    }
    const Stat nat_sustained = stat_of(nat_cycle);
    table.add(Row{.id = "lb-new-nat",
                  .measurement = "new conns, nat service, 1k rules: firewall + forward",
                  .unit = "cycles/conn",
                  .reference = "the same, no service (firewall only)",
                  .ref = ref,
                  .sluice = nat});
    table.add(Row{.id = "lb-new-nat-rate",
                  .measurement =
                      "new conns, nat service, 1k rules: firewall + forward; " + fmt(nat.median) + " cycles/conn",
                  .unit = "M conn/s",
                  .reference = "target (issue #8) per worker",
                  .ref = target,
                  .sluice = rate(nat)});
    table.add(Row{.id = "lb-new-nat-nofw-rate",
                  .measurement = "new conns, nat service, firewall off: firewall + forward; " + fmt(nat_open.median) +
                                 " cycles/conn",
                  .unit = "M conn/s",
                  .reference = "target (issue #8) per worker",
                  .ref = target,
                  .sluice = rate(nat_open)});
    table.add(Row{.id = "lb-remove-nat",
                  .measurement = "removing a nat conn (expiry's ConnTable::remove)",
                  .unit = "cycles/conn",
                  .reference = "the same, conn of no service",
                  .ref = stat_of(removal[0]),
                  .sluice = stat_of(removal[1])});
    table.add(Row{.id = "lb-new-nat-sustained",
                  .measurement = "new + removed conns, nat service, 1k rules",
                  .unit = "cycles/conn",
                  .reference = "the same, no service (firewall only)",
                  .ref = stat_of(ref_cycle),
                  .sluice = nat_sustained});
    table.add(Row{.id = "lb-new-nat-sustained-rate",
                  .measurement =
                      "new + removed conns, nat service, 1k rules; " + fmt(nat_sustained.median) + " cycles/conn",
                  .unit = "M conn/s",
                  .reference = "target (issue #8) per worker",
                  .ref = target,
                  .sluice = rate(nat_sustained)});
    table.add(Row{.id = "lb-new-other",
                  .measurement = "new conns to no service, services configured, 1k rules",
                  .unit = "cycles/conn",
                  .reference = "the same, no services configured",
                  .ref = ref,
                  .sluice = other});
}

// One connection from each client to dst (host order), opened through the worker's own path, untimed: the SYN, the
// SYN+ACK when replies come back through sluice, the client's ACK. Returns one ACK per connection in each direction
// (reply empty without replies); a nat connection's reply goes from its backend:port to its pool address:NAT port,
// the others' is the reversed tuple. ctx.conn_table is the table they open in.
struct OpenedConns {
    std::vector<PacketSpec> forward, reply;
};

OpenedConns open_connections(Dpdk& d, LcoreContext& ctx, const Snapshot& snapshot, const std::vector<FiveTuple>& clients,
                             uint32_t dst, bool replies) {
    OpenedConns out;
    const Stage path = worker_path(ctx, snapshot);
    const std::vector<PacketSpec> syns = packets_to(clients, dst, kTcpSyn);
    untimed_pass(d, syns, path);
    out.forward = packets_to(clients, dst, kTcpAck);
    if (replies) {
        const std::vector<int32_t> positions = positions_of(*ctx.conn_table, syns);
        out.reply.resize(clients.size());
        for (std::size_t i = 0; i < clients.size(); ++i) {
            out.reply[i] = PacketSpec{syns[i].tuple.reversed(), kTcpSynAck};
            if (positions[i] < 0) continue;
            const ConnEntry& e = ctx.conn_table->entry(positions[i]);
            if (e.backend == 0 || e.nat_port == 0) continue;
            const LbBackend& backend = snapshot.lb->backends[e.backend - 1];
            FiveTuple& t = out.reply[i].tuple;
            t.src = backend.address;
            t.src_port = backend.port_be;
            t.dst = snapshot.lb->pool[e.nat_address];
            t.dst_port = htons(e.nat_port);
        }
        untimed_pass(d, out.reply, path);
        for (PacketSpec& p : out.reply) p.tcp_flags = kTcpAck;
    }
    untimed_pass(d, out.forward, path);
    return out;
}

// Packets of established connections, uniformly random over live connections per table: nat (client -> VIP,
// rewritten to the backend; and backend -> pool address, rewritten back to the client), dsr and tunnel (client
// -> VIP; their replies do not come back through sluice). Reference: established connections of no service on the
// firewall-only snapshot, half of the packets replies, as in section established. Every connection is opened
// through the worker's path itself (SYN, SYN+ACK where the reply passes sluice, ACK), untimed.
void lb_established(Dpdk& d, const Options& o, Table& table, const Snapshot& plain, const Snapshot& balanced) {
    const uint32_t live = o.lb_conns;
    const int socket = static_cast<int>(rte_socket_id());
    LcoreContext& ctx = *d.ctx;
    Rng rng(o.seed + 11);
    const std::vector<FiveTuple> clients = lb_clients(live, rng);

    struct Kind {
        const char* name;
        uint32_t dst;            // host order
        const Snapshot* snapshot;
        bool replies;            // the SYN+ACK comes back through sluice
        uint32_t entries_per_conn;
        std::unique_ptr<ConnTable> conns;
        std::vector<PacketSpec> forward, reply;  // one packet (ACK) per connection, each direction
    };
    Kind kinds[] = {{"plain", kNotAVip, &plain, true, 1, nullptr, {}, {}},
                    {"nat", kVipNat, &balanced, true, 2, nullptr, {}, {}},
                    {"dsr", kVipDsr, &balanced, false, 1, nullptr, {}, {}},
                    {"tunnel", kVipTunnel, &balanced, false, 1, nullptr, {}, {}}};
    const uint64_t t0 = rte_rdtsc();
    for (Kind& k : kinds) {
        k.conns =
            std::make_unique<ConnTable>(table_name(), live * k.entries_per_conn, socket, ConnTimeouts{}, d.tsc_hz);
        attach_conn_table(d, *k.conns);
        OpenedConns opened = open_connections(d, ctx, *k.snapshot, clients, k.dst, k.replies);
        k.forward = std::move(opened.forward);
        k.reply = std::move(opened.reply);
        uint32_t established = 0;
        std::map<uint32_t, uint32_t> per_backend;
        for (const int32_t position : positions_of(*k.conns, k.forward)) {
            if (position < 0) continue;
            const ConnEntry& e = k.conns->entry(position);
            established += e.state == ConnState::tcp_established;
            if (e.backend) ++per_backend[e.backend - 1];
        }
        std::string shares;
        if (!per_backend.empty()) {
            uint32_t lo = UINT32_MAX, hi = 0;
            for (const auto& [b, c] : per_backend) lo = std::min(lo, c), hi = std::max(hi, c);
            shares = ", " + std::to_string(per_backend.size()) + " backends with " + std::to_string(lo) + ".." +
                     std::to_string(hi) + " connections each";
        }
        std::printf("lb: %s: %u of %u connections established, %u table entries%s\n", k.name, established, live,
                    k.conns->size(), shares.c_str());
        if (established != live || k.conns->size() != live * k.entries_per_conn)
            std::printf("WARNING: lb %s: connections failed to open (drops so far {%s})\n", k.name,
                        drops_since(d, std::array<uint64_t, kDropReasonCount>{}).c_str());
    }
    std::printf("lb: %u connections per kind opened through the worker path in %.1f s\n", live,
                static_cast<double>(rte_rdtsc() - t0) / static_cast<double>(d.tsc_hz));

    // The measured streams: random connections, one packet each.
    const auto stream_of = [&](const Kind& k, uint32_t reply_percent) {
        std::vector<PacketSpec> s(o.packets);
        for (PacketSpec& p : s) {
            const uint32_t i = uniform(rng, 0, live - 1);
            p = uniform(rng, 0, 99) < reply_percent ? k.reply[i] : k.forward[i];
        }
        return s;
    };
    const std::vector<PacketSpec> plain_mixed = stream_of(kinds[0], 50), nat_forward = stream_of(kinds[1], 0),
                                  nat_reply = stream_of(kinds[1], 100), dsr = stream_of(kinds[2], 0),
                                  tunnel = stream_of(kinds[3], 0);
    const auto variant = [&](Kind& k, const std::vector<PacketSpec>& stream) {
        return [&] {
            ctx.conn_table = k.conns.get();
            return timed_pass(d, stream, worker_path(ctx, *k.snapshot));
        };
    };
    const auto drops_before = drops_of(d);
    const uint64_t inserts_before = ctx.counters.conn_inserts;
    auto r = interleaved(o.reps, {variant(kinds[0], plain_mixed), variant(kinds[1], nat_forward),
                                  variant(kinds[1], nat_reply), variant(kinds[2], dsr), variant(kinds[3], tunnel)});
    const std::string drops = drops_since(d, drops_before);
    bool sizes_changed = false;
    for (const Kind& k : kinds) sizes_changed |= k.conns->size() != live * k.entries_per_conn;
    if (!drops.empty() || ctx.counters.conn_inserts != inserts_before || sizes_changed)
        std::printf("WARNING: lb established: packets of tracked connections were dropped or opened new ones: "
                    "drops {%s}, inserts %" PRIu64 "%s\n",
                    drops.c_str(), ctx.counters.conn_inserts - inserts_before,
                    sizes_changed ? ", table sizes changed" : "");
    const std::string count = ordinal_count(live);
    const std::string reference = "the same, " + count + " conns of no service, half replies";
    const std::pair<const char*, const char*> rows[] = {
        {"nat", "nat conns, client -> VIP, NAT to backend"},
        {"nat-reply", "nat conns, backend -> pool, NAT to client"},
        {"dsr", "dsr conns, client -> VIP, MAC rewrite"},
        {"tunnel", "tunnel conns, client -> VIP, IPIP encap"}};
    for (std::size_t k = 0; k < std::size(rows); ++k)
        table.add(Row{.id = "lb-established-" + std::string(rows[k].first) + "-" + count,
                      .measurement = "established, " + count + " " + rows[k].second + ": firewall + forward",
                      .unit = "cycles/pkt",
                      .reference = reference,
                      .ref = stat_of(r[0]),
                      .sluice = stat_of(r[k + 1])});
    ctx.conn_table = nullptr;
    check_pool(d, "lb established");
}

void section_lb(Dpdk& d, const Options& o, Table& table) {
    const auto rules = generate_rules(1000, o.seed);
    const uint64_t t0 = rte_rdtsc();
    const auto plain = make_snapshot(d, rules);                       // the firewall alone: the reference
    const auto balanced = make_snapshot(d, rules, true);              // the same rules and three services
    const auto balanced_open = make_snapshot(d, {}, true, false);     // the services, firewall off
    std::printf("lb: snapshots (1k rules; %zu services of %u backends, Maglev %u) built in %.2f s\n",
                balanced->lb->services.size(), kLbBackends, kLbMaglevSize,
                static_cast<double>(rte_rdtsc() - t0) / static_cast<double>(d.tsc_hz));
    // The worker's NAT ports, as the Dataplane gives worker 0 of 1 (config/sluice.yaml's nat_ports: 1024-65535).
    NatPortPool ports(1024, 65535, 0, 1, balanced->lb->pool.size());
    d.ctx->nat_ports = &ports;
    lb_new(d, o, table, *plain, *balanced, *balanced_open, ports);
    lb_established(d, o, table, *plain, *balanced);
    d.ctx->nat_ports = nullptr;
}

// Bytes of DPDK heap per tracked connection, for a table of 1M filled to capacity.
void section_memory(Dpdk& d, const Options& o, Table& table) {
    constexpr uint32_t kConns = 1'000'000;
    const int socket = static_cast<int>(rte_socket_id());
    const auto heap = [&] {
        rte_malloc_socket_stats s{};
        rte_malloc_get_socket_stats(socket, &s);
        return static_cast<double>(s.heap_allocsz_bytes);
    };
    Rng rng(o.seed + 3);
    const std::vector<FiveTuple> flows = distinct_flows(kConns, rng, 70);
    const double before = heap();
    auto conn_table = std::make_unique<ConnTable>(table_name(), kConns, socket, ConnTimeouts{}, d.tsc_hz);
    const double created = heap();
    const uint64_t now = rte_rdtsc();
    uint32_t refused = 0;
    for (const FiveTuple& f : flows) refused += conn_table->insert(f, symmetric_flow_hash(f), ConnState::tcp_established, 0, now) < 0;
    const double filled = heap();
    const double per_conn = (filled - before) / kConns;
    std::printf("memory: ConnTable(1M) took %.1f MiB when created, %.1f MiB once %u connections were in it "
                "(%u refused)\n",
                (created - before) / (1 << 20), (filled - before) / (1 << 20), conn_table->size(), refused);
    table.add(Row{.id = "memory",
                  .measurement = "memory per tracked connection, 1M table full",
                  .unit = "bytes/conn",
                  .reference = "conn_table.hpp's estimate",
                  .ref = Stat{kConnTableEstimateBytes, kConnTableEstimateBytes, kConnTableEstimateBytes},
                  .sluice = Stat{per_conn, per_conn, per_conn}});
}

// ---------------------------------------------------------------------------------------------------------------
// Workers beside the main lcore (sections reload and scaling)

// Worker contexts built by the Dataplane itself (lib/pipeline/dataplane.cpp), one per lcore given, with the initial
// snapshot: a connection table of table_size with the release hook, rule and backend counters, the NAT ports of
// worker k of n, TX queue k on the benchmark's port, a thread id in the Dataplane's RCU (QSBR). The Dataplane is
// never launched: run_worker plays lcore_main's part on these contexts, and Dataplane::publish swaps snapshots as
// the daemon's reload does.
std::unique_ptr<Dataplane> bench_dataplane(const Dpdk& d, const std::vector<unsigned>& lcores, uint32_t table_size,
                                           std::unique_ptr<Snapshot> initial) {
    DataplaneSpec spec;
    for (const unsigned id : lcores) spec.lcores.push_back(LcorePlan{id, false, true, {}});
    spec.tx_port_ids = {d.port};
    spec.ring_size = 1024;  // unused: nothing goes through the rings
    spec.conntrack = true;
    spec.conn_table_size = table_size;
    spec.nat_pool_addresses = initial->lb->pool.size();
    spec.solicitation_pool = d.pool;
    try {
        return std::make_unique<Dataplane>(spec, std::move(initial));
    } catch (const std::exception& e) {
        fail(std::string("Dataplane: ") + e.what());
    }
}

// The Dataplane's worker contexts in worker order. It lends them out read-only (for counters); here they stand for
// lcores the Dataplane never launched, each used by one thread at a time, so writing them is what their lcore would.
std::vector<LcoreContext*> worker_contexts(const Dataplane& dataplane) {
    std::vector<LcoreContext*> out;
    dataplane.for_each_lcore([&](const LcoreContext& ctx) {
        if (ctx.worker) out.push_back(const_cast<LcoreContext*>(&ctx));
    });
    return out;
}

// One worker's run on an lcore: bursts of the stream, round and round (or once), each written and parsed (an RX
// lcore's share, untimed), then firewall_burst + forward_burst on the snapshot that is current, read once per
// burst and released with a quiescent state at the end of the iteration, as lcore_main does.
struct WorkerRun {
    Dpdk* d = nullptr;
    LcoreContext* ctx = nullptr;
    const std::vector<PacketSpec>* stream = nullptr;
    uint64_t start_tsc = 0;              // spins until then: the workers of a run start together
    uint64_t end_tsc = UINT64_MAX;       // stops then,
    bool one_pass = false;               // or after one pass over the stream,
    const std::atomic<bool>* stop = nullptr;  // or once this is set
    uint64_t window_tsc = 0;             // with windows: packets per window of window_tsc since start_tsc,
    std::vector<uint32_t>* windows = nullptr;
    std::vector<uint64_t>* window_cycles = nullptr;  // and the stage's cycles and packets of its bursts that
    std::vector<uint32_t>* window_timed = nullptr;   // took under 100 us (not preempted, as in timed_pass)
    // Results.
    uint64_t packets = 0, stage_cycles = 0, began_tsc = 0, finished_tsc = 0, malformed = 0;
    bool pool_empty = false;

    double seconds() const { return static_cast<double>(finished_tsc - began_tsc) / static_cast<double>(d->tsc_hz); }
    double mpps() const { return finished_tsc > began_tsc ? static_cast<double>(packets) / seconds() / 1e6 : 0; }
    double stage_cycles_per_packet() const { return packets ? static_cast<double>(stage_cycles) / static_cast<double>(packets) : 0; }
};

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
        // This iteration's snapshot reference is dead from here on.
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

// Waits for a launched worker, sleeping rather than spinning (as rte_eal_wait_lcore does): the main lcore's CPU
// stays free meanwhile.
void wait_worker(unsigned lcore) {
    while (rte_eal_get_lcore_state(lcore) == RUNNING) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    rte_eal_wait_lcore(lcore);
}

void check_run(const WorkerRun& run, const char* what) {
    if (run.malformed) fail(std::string(what) + ": " + std::to_string(run.malformed) + " frames failed to parse (a bug in sluice_bench)");
    if (run.pool_empty) fail(std::string(what) + ": mbuf pool exhausted (" + std::to_string(mbufs_in_use(run.d->pool)) + " in use)");
}

// The second lcore, for a worker beside the main lcore; RTE_MAX_LCORE when the EAL has only one.
unsigned second_lcore() { return rte_get_next_lcore(rte_get_main_lcore(), 1, 0); }

// ---------------------------------------------------------------------------------------------------------------
// Reload (section reload): what the control thread does when the config file changes (app/sluice/daemon.cpp,
// Daemon::apply_reload): load_config_file (YAML, validation, prefix files), restart_required_changes,
// build_snapshot with the daemon's live state (rule ids and backend registry, copied and committed after), then
// Dataplane::publish (one atomic store and an RCU grace period) and the old snapshot freed. Not timed: what the
// daemon does after that (neighbour and health-check targets, XDP steering, BGP, logging), none of which builds a
// table.
//
// The config: the 10k ClassBench-style rules of section classify (all allow, default allow), the three services of
// section lb (Maglev 65537 each) and two prefix sets:
// - blocklist: kBlocklistPrefixes prefixes from a file, early_drop (an LPM table on the RX lcores, the use
//   docs/config.md sizes for 1M prefixes). Not referenced by a rule: a rule over a set expands into one rte_acl rule
//   per prefix (config.cpp decode_address copies the set into the rule, AclClassifier expands the cross product),
//   so one rule over it would mean 100k more rte_acl rules (FIELD-NOTES: ~40 s and ~370 MiB to build).
// - partners: kPartnerPrefixes prefixes inline, referenced by one rule (tcp to port 22): kPartnerPrefixes rte_acl
//   rules, the way an operator lists the networks an allow rule admits.
// Reference: rte_acl_create + rte_acl_add_rules + rte_acl_build alone on the same rte_acl rules, built here from
// the loaded config (see reference_acl_rules), interleaved with the reloads. Beside them, yaml-cpp alone on the same
// file's text: with the rules' build as sluice does it today, it makes the least a reload of changed rules takes
// (the floor row), since the rules are not all known before the YAML is parsed, nor built before they are.
constexpr uint32_t kReloadRules = 10000;
constexpr uint32_t kBlocklistPrefixes = 100000;
constexpr uint32_t kPartnerPrefixes = 1000;
constexpr uint64_t kWindowUs = 1000;          // the worker counts its packets per window of this length
constexpr auto kQuietBeforeReload = std::chrono::milliseconds(100);  // the worker's reference windows
constexpr double kReloadBudgetSeconds = 90;  // for the repetitions: fewer than --reps when they would take longer
const char* const kReloadPort = "bench";

// Distinct random IPv4 prefixes, lengths drawn by pick_length, outside 10/8, 127/8 and 192.0.2/24 (the
// benchmark's own addresses).
std::vector<Prefix> random_prefixes(std::size_t count, Rng& rng, const std::function<uint8_t(Rng&)>& pick_length) {
    std::vector<Prefix> out;
    out.reserve(count);
    std::unordered_set<uint64_t> seen;
    seen.reserve(count * 2);
    while (out.size() < count) {
        const uint8_t len = pick_length(rng);
        const uint32_t a = static_cast<uint32_t>(rng()) & prefix_mask(len);
        if ((a >> 24) == 10 || (a >> 24) == 127 || (a >> 8) == 0xc00002) continue;
        if (!seen.insert(uint64_t{a} << 8 | len).second) continue;
        out.push_back(Prefix{v4(a), len});
    }
    return out;
}

std::string prefix_text(const Prefix& p) { return to_string(p.address, IpFamily::ipv4) + "/" + std::to_string(p.length); }

std::string ports_text(uint16_t lo, uint16_t hi) {
    return lo == hi ? std::to_string(lo) : "\"" + std::to_string(lo) + "-" + std::to_string(hi) + "\"";
}

std::string mac_text(const rte_ether_addr& mac) {
    char buf[RTE_ETHER_ADDR_FMT_SIZE];
    rte_ether_format_addr(buf, sizeof buf, &mac);
    return buf;
}

// Writes dir/sluice.yaml (and the blocklist's file beside it) for section reload, with the services of
// add_services; returns the config's path.
std::string write_reload_config(const std::string& dir, const std::vector<RuleSpec>& rules,
                                const std::vector<Prefix>& partners, const std::vector<Prefix>& blocklist) {
    {
        std::ofstream f(dir + "/blocklist.txt");
        f << "# " << blocklist.size() << " prefixes written by sluice_bench\n";
        for (const Prefix& p : blocklist) f << prefix_text(p) << "\n";
        if (!f) fail("cannot write " + dir + "/blocklist.txt");
    }
    Config lb;
    add_services(lb);
    std::ofstream y(dir + "/sluice.yaml");
    y << "# Written by sluice_bench (section reload)\n"
      << "ports:\n  - {name: " << kReloadPort << ", device: net_null0}\n"
      << "lcores:\n  - {id: 1, roles: [rx, worker]}\n"
      << "forward:\n  - {from: " << kReloadPort << ", to: " << kReloadPort << ", next_hop_mac: \"02:00:00:00:00:09\"}\n"
      << "firewall:\n  default: allow\n  prefix_sets:\n"
      << "    - {name: blocklist, file: blocklist.txt, early_drop: true}\n"
      << "    - name: partners\n      prefixes: [";
    for (std::size_t i = 0; i < partners.size(); ++i) y << (i ? ", " : "") << prefix_text(partners[i]);
    y << "]\n  rules:\n"
      << "    - {name: partners-ssh, source: \"@partners\", protocol: tcp, destination_ports: 22, action: allow}\n";
    for (std::size_t i = 0; i < rules.size(); ++i) {
        const RuleSpec& r = rules[i];
        y << "    - {name: r" << i;
        if (r.src_len) y << ", source: " << dotted(r.src) << "/" << unsigned{r.src_len};
        if (r.dst_len) y << ", destination: " << dotted(r.dst) << "/" << unsigned{r.dst_len};
        if (r.proto_mask) y << ", protocol: " << unsigned{r.proto};
        if (r.sport_lo != 0 || r.sport_hi != 65535) y << ", source_ports: " << ports_text(r.sport_lo, r.sport_hi);
        if (r.dport_lo != 0 || r.dport_hi != 65535) y << ", destination_ports: " << ports_text(r.dport_lo, r.dport_hi);
        y << ", action: allow}\n";
    }
    y << "load_balancer:\n  nat_pool: [";
    for (std::size_t i = 0; i < lb.load_balancer.nat_pool.size(); ++i)
        y << (i ? ", " : "") << "\"" << to_string(lb.load_balancer.nat_pool[i].address, lb.load_balancer.nat_pool_families[i]) << "\"";
    y << "]\n  tunnel_source: " << to_string(*lb.load_balancer.tunnel_source_v4, IpFamily::ipv4) << "\nservices:\n";
    for (const ServiceConfig& s : lb.services) {
        y << "  - name: " << s.name << "\n    vip: " << to_string(s.vip, s.family) << "\n    port: " << s.port
          << "\n    protocol: tcp\n    mode: " << lb_mode_name(s.mode) << "\n    table_size: " << s.table_size
          << "\n    backends:\n";
        for (const BackendConfig& b : s.backends) {
            y << "      - {address: " << to_string(b.address, b.family);
            if (b.port) y << ", port: " << b.port;
            if (b.has_mac) y << ", mac: \"" << mac_text(b.mac) << "\"";
            y << "}\n";
        }
    }
    if (!y) fail("cannot write " + dir + "/sluice.yaml");
    return dir + "/sluice.yaml";
}

// The reference's rte_acl rules: sluice's IPv4 layout (the search key Ipv4AclKey above, and the field definitions
// of make_config in lib/classify/acl_classifier.cpp, private there: protocol, ingress port, source, destination,
// both ports in one input group) and its expansion of a rule's lists into their cross product, rule i at priority
// RTE_ACL_MAX_PRIORITY - i with userdata i + 1, as AclClassifier builds them. Written apart from sluice's code on
// purpose: section_reload classifies a trace through both contexts and drops the reference (with a warning) if a
// single result differs.
constexpr uint32_t kAclFields = 6;
RTE_ACL_RULE_DEF(ReferenceAclRule, kAclFields);

rte_acl_config reference_acl_config() {
    rte_acl_config cfg{};
    cfg.num_categories = 1;
    cfg.num_fields = kAclFields;
    cfg.max_size = 0;
    cfg.defs[0] = {RTE_ACL_FIELD_TYPE_BITMASK, 1, 0, 0, offsetof(Ipv4AclKey, proto)};
    cfg.defs[1] = {RTE_ACL_FIELD_TYPE_BITMASK, 4, 1, 1, offsetof(Ipv4AclKey, in_port)};
    cfg.defs[2] = {RTE_ACL_FIELD_TYPE_MASK, 4, 2, 2, offsetof(Ipv4AclKey, src)};
    cfg.defs[3] = {RTE_ACL_FIELD_TYPE_MASK, 4, 3, 3, offsetof(Ipv4AclKey, dst)};
    cfg.defs[4] = {RTE_ACL_FIELD_TYPE_RANGE, 2, 4, 4, offsetof(Ipv4AclKey, src_port)};
    cfg.defs[5] = {RTE_ACL_FIELD_TYPE_RANGE, 2, 5, 4, offsetof(Ipv4AclKey, dst_port)};
    return cfg;
}

std::vector<ReferenceAclRule> reference_acl_rules(const FirewallConfig& fc) {
    std::vector<ReferenceAclRule> out;
    uint32_t index = 0;  // among the rules of IPv4 (AclClassifier's rule index)
    for (const FirewallRuleConfig& r : fc.rules) {
        if ((!r.source.any && r.source.v4.empty()) || (!r.destination.any && r.destination.v4.empty()) ||
            r.protocol == IPPROTO_ICMPV6)
            continue;  // no IPv4 rule
        if (!r.in_ports.empty()) fail("reload: the reference does not expand in_ports");
        ReferenceAclRule base{};
        base.data.category_mask = 1;
        base.data.priority = static_cast<int32_t>(RTE_ACL_MAX_PRIORITY - index);
        base.data.userdata = index + 1;
        ++index;
        base.field[0].value.u8 = r.protocol == kAnyProtocol ? 0 : static_cast<uint8_t>(r.protocol);
        base.field[0].mask_range.u8 = r.protocol == kAnyProtocol ? 0 : 0xff;
        const bool ports = has_ports(static_cast<uint8_t>(r.protocol)) && r.protocol != kAnyProtocol;
        const std::vector<Prefix> any_prefix{Prefix{}};
        const std::vector<PortRange> any_port{PortRange{0, 65535}};
        const auto& sources = r.source.any ? any_prefix : r.source.v4;
        const auto& destinations = r.destination.any ? any_prefix : r.destination.v4;
        const auto& sports = ports && !r.source_ports.empty() ? r.source_ports : any_port;
        const auto& dports = ports && !r.destination_ports.empty() ? r.destination_ports : any_port;
        const auto set_prefix = [](rte_acl_field& f, const Prefix& p) {
            f.value.u32 = rte_be_to_cpu_32(p.address.words[0]) & prefix_mask(p.length);
            f.mask_range.u32 = p.length;
        };
        for (const Prefix& src : sources)
            for (const Prefix& dst : destinations)
                for (const PortRange& sp : sports)
                    for (const PortRange& dp : dports) {
                        ReferenceAclRule rule = base;
                        set_prefix(rule.field[2], src);
                        set_prefix(rule.field[3], dst);
                        rule.field[4].value.u16 = sp.first;
                        rule.field[4].mask_range.u16 = sp.last;
                        rule.field[5].value.u16 = dp.first;
                        rule.field[5].mask_range.u16 = dp.last;
                        out.push_back(rule);
                    }
    }
    return out;
}

// rte_acl_create + rte_acl_add_rules + rte_acl_build on the rules; returns the context (the caller frees it) and
// the build's TSC cycles.
rte_acl_ctx* build_reference_acl(const std::vector<ReferenceAclRule>& rules, uint64_t& cycles) {
    const std::string name = "bench_ref_acl_" + std::to_string(table_counter++);
    const rte_acl_config cfg = reference_acl_config();
    const uint64_t t0 = rte_rdtsc();
    rte_acl_param param{};
    param.name = name.c_str();
    param.socket_id = static_cast<int>(rte_socket_id());
    param.rule_size = RTE_ACL_RULE_SZ(kAclFields);
    param.max_rule_num = static_cast<uint32_t>(rules.size());
    rte_acl_ctx* ctx = rte_acl_create(&param);
    if (!ctx) fail("rte_acl_create: " + std::string(rte_strerror(rte_errno)));
    int rc = rte_acl_add_rules(ctx, reinterpret_cast<const rte_acl_rule*>(rules.data()), static_cast<uint32_t>(rules.size()));
    if (rc == 0) rc = rte_acl_build(ctx, &cfg);
    cycles = rte_rdtsc() - t0;
    if (rc != 0) fail("reference rte_acl_add_rules/build: " + std::string(rte_strerror(-rc)));
    return ctx;
}

// Trace tuples whose rule the reference and sluice's classifier disagree on (both built from the same config).
std::size_t reference_mismatches(rte_acl_ctx* reference, const AclClassifier& acl, const std::vector<TraceTuple>& trace) {
    std::size_t differ = 0;
    for (std::size_t off = 0; off < trace.size(); off += kBurst) {
        const auto n = static_cast<uint32_t>(std::min<std::size_t>(kBurst, trace.size() - off));
        FiveTuple tuples[kBurst];
        const FiveTuple* tuple_ptrs[kBurst];
        Ipv4AclKey keys[kBurst];
        const uint8_t* key_ptrs[kBurst];
        const uint16_t in_ports[kBurst] = {};
        uint32_t sluice[kBurst], raw[kBurst];
        for (uint32_t i = 0; i < n; ++i) {
            tuples[i] = to_tuple(trace[off + i]);
            tuple_ptrs[i] = &tuples[i];
            keys[i] = Ipv4AclKey{tuples[i].proto, {0, 0, 0}, rte_cpu_to_be_32(0), tuples[i].src.words[0],
                                 tuples[i].dst.words[0], tuples[i].src_port, tuples[i].dst_port};
            key_ptrs[i] = reinterpret_cast<const uint8_t*>(&keys[i]);
        }
        acl.classify(tuple_ptrs, in_ports, sluice, n);
        rte_acl_classify(reference, key_ptrs, raw, n, 1);
        for (uint32_t i = 0; i < n; ++i) differ += (raw[i] == 0 ? AclClassifier::kNoMatch : raw[i] - 1) != sluice[i];
    }
    return differ;
}

double cycles_to_ms(const Dpdk& d, uint64_t cycles) { return 1e3 * static_cast<double>(cycles) / static_cast<double>(d.tsc_hz); }

// A temporary directory, removed with what is in it when it goes.
struct TempDir {
    std::string path;
    TempDir() {
        char name[] = "/tmp/sluice_bench_reload.XXXXXX";
        if (!mkdtemp(name)) fail(std::string("mkdtemp: ") + std::strerror(errno));
        path = name;
    }
    ~TempDir() {
        std::error_code ignored;
        std::filesystem::remove_all(path, ignored);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
};

void section_reload(Dpdk& d, const Options& o, Table& table) {
    const int socket = static_cast<int>(rte_socket_id());
    Rng rng(o.seed + 30);
    const std::vector<RuleSpec> rules = generate_rules(kReloadRules, o.seed);  // section classify's 10k rules
    // Blocklist: 60 % single addresses, 30 % /24s, 10 % /16-/23 (a mix like public blocklists', e.g. FireHOL's).
    const std::vector<Prefix> blocklist = random_prefixes(kBlocklistPrefixes, rng, [](Rng& r) {
        const uint32_t p = uniform(r, 0, 9);
        return static_cast<uint8_t>(p < 6 ? 32 : p < 9 ? 24 : uniform(r, 16, 23));
    });
    const std::vector<Prefix> partners =
        random_prefixes(kPartnerPrefixes, rng, [](Rng& r) { return static_cast<uint8_t>(uniform(r, 16, 28)); });
    const TempDir dir;
    const std::string path = write_reload_config(dir.path, rules, partners, blocklist);

    const uint64_t load_start = rte_rdtsc();
    ConfigResult loaded = load_config_file(path);
    const double first_load_ms = cycles_to_ms(d, rte_rdtsc() - load_start);
    if (!loaded.config) fail("reload: the generated config is refused: " + (loaded.errors.empty() ? std::string() : loaded.errors.front().to_string()));
    Config running = std::move(*loaded.config);
    const std::vector<PortIdentity> ports{PortIdentity{kReloadPort, d.port, d.port_mac}};
    // The daemon's live state (Daemon::stable_rule_ids_, backends_): copied for each reload, committed after it.
    StableRuleIds rule_ids;
    BackendRegistry backends;
    const BackendHealth healthy = [](uint32_t) { return true; };
    // keep: the running snapshot's firewall, whose tables the build may keep as the daemon's does (null: none kept,
    // everything is built, as the target's figure has it).
    const auto build = [&](const Config& config, StableRuleIds* ids, BackendRegistry* registry,
                           const FirewallTables* keep = nullptr) {
        try {
            LiveState live{ids, registry, healthy, nullptr};
            if (keep) {
                live.blocklist = keep->blocklist;
                live.acl_v4 = keep->acl_v4;
                live.acl_v6 = keep->acl_v6;
            }
            return build_snapshot(config, ports, config.lcores.size(), socket, 1, live);
        } catch (const std::exception& e) {
            fail(std::string("reload: build_snapshot: ") + e.what());
        }
    };
    const uint64_t first_start = rte_rdtsc();
    std::unique_ptr<Snapshot> first = build(running, &rule_ids, &backends);
    const double first_ms = cycles_to_ms(d, rte_rdtsc() - first_start);
    if (!first->firewall->acl_v4) fail("reload: the snapshot has no IPv4 rte_acl context");
    const std::size_t sluice_acl_rules = first->firewall->acl_v4->expanded_rule_count();

    // The reference, checked against sluice's context on a trace of the ClassBench rules (with tuples from the
    // partner networks to port 22 among them).
    const std::vector<ReferenceAclRule> reference_rules = reference_acl_rules(running.firewall);
    std::vector<TraceTuple> trace = generate_trace(rules, 65536, o.seed);
    for (std::size_t i = 0; i < trace.size(); i += 16) {
        const Prefix& p = partners[uniform(rng, 0, kPartnerPrefixes - 1)];
        trace[i] = TraceTuple{rte_be_to_cpu_32(p.address.words[0]) | (static_cast<uint32_t>(rng()) & ~prefix_mask(p.length)),
                              static_cast<uint32_t>(rng()), static_cast<uint16_t>(uniform(rng, 1024, 65535)), 22, IPPROTO_TCP};
    }
    uint64_t ref_cycles = 0;
    rte_acl_ctx* reference_ctx = build_reference_acl(reference_rules, ref_cycles);
    const std::size_t mismatches = reference_mismatches(reference_ctx, *first->firewall->acl_v4, trace);
    rte_acl_free(reference_ctx);
    const bool reference_valid = mismatches == 0 && reference_rules.size() == sluice_acl_rules;
    std::printf("reload: config %s: %zu rules (%zu rte_acl rules), prefix sets blocklist (%zu prefixes from a file, "
                "early_drop) and partners (%zu, one rule); %zu services; first build %.0f ms. Reference: "
                "%zu rte_acl rules, built in %.0f ms; %zu of %zu trace tuples classified differently\n",
                path.c_str(), running.firewall.rules.size(), sluice_acl_rules, blocklist.size(), partners.size(),
                running.services.size(), first_ms, reference_rules.size(), cycles_to_ms(d, ref_cycles), mismatches, trace.size());
    if (!reference_valid)
        std::printf("WARNING: reload: the reference's rte_acl rules are not sluice's (rule count or results differ): "
                    "the layout copied from acl_classifier.cpp has drifted; the ratios are left out\n");

    // The pieces' own builds: the rules without the early-drop set, the early-drop set without rules (neither with
    // services; the set once, before the repetitions: it can take as long as the reload), and the load balancer's
    // tables.
    Config rules_only = running, sets_only = running;
    std::erase_if(rules_only.firewall.prefix_sets, [](const PrefixSetConfig& s) { return s.early_drop; });
    rules_only.services.clear();
    sets_only.firewall.rules.clear();
    sets_only.services.clear();
    const uint64_t sets_start = rte_rdtsc();
    std::unique_ptr<Snapshot> sets_built = build(sets_only, nullptr, nullptr);
    const double set_ms = cycles_to_ms(d, rte_rdtsc() - sets_start);
    const std::size_t blocklisted = sets_built->firewall->blocklist_prefixes;
    sets_built.reset();
    // The first build and the reference's warm the caches and the allocator: no warm-up round. Each repetition
    // takes about a reload (a load and a build), a reference, a rules-only build, a reload that keeps the tables
    // (a load), yaml-cpp alone (less than a load) and two quiet stretches.
    const double rep_seconds =
        (first_ms + 3 * first_load_ms + 2 * cycles_to_ms(d, ref_cycles)) / 1e3 + 2 * kQuietBeforeReload.count() / 1e3;
    const auto reps = static_cast<unsigned>(std::clamp<double>(std::floor(kReloadBudgetSeconds / rep_seconds), 1, o.reps));
    char why[160] = "";
    if (reps < o.reps)
        std::snprintf(why, sizeof why, " (fewer than --reps: one takes about %.0f s, the section keeps within %.0f s)",
                      rep_seconds, kReloadBudgetSeconds);
    std::printf("reload: the early-drop set alone (%zu prefixes) built in %.0f ms; %u repetitions%s\n", blocklisted,
                set_ms, reps, why);
    std::fflush(stdout);

    // A worker on the second lcore forwards packets of established connections (no service, half replies, through
    // firewall_burst + forward_burst) on whatever snapshot is current, counting them per window.
    const unsigned worker_lcore = second_lcore();
    const bool with_worker = worker_lcore < RTE_MAX_LCORE;
    const uint32_t live = o.lb_conns;
    auto dataplane = bench_dataplane(d, {with_worker ? worker_lcore : rte_get_main_lcore()}, 2 * live, std::move(first));
    LcoreContext& ctx = *worker_contexts(*dataplane).front();
    const std::vector<FiveTuple> flows = distinct_flows(live, rng, 70);
    const uint32_t refused = insert_established(*ctx.conn_table, flows);
    const std::vector<PacketSpec> stream = random_packets(flows, o.packets, rng);
    const uint64_t window_tsc = d.tsc_hz / (1'000'000 / kWindowUs);
    std::vector<uint32_t> windows(600'000'000 / kWindowUs), window_timed(windows.size());  // 10 minutes
    std::vector<uint64_t> window_cycles(windows.size());
    std::atomic<bool> stop{false};
    WorkerRun worker{.d = &d, .ctx = &ctx, .stream = &stream, .start_tsc = rte_rdtsc(), .stop = &stop,
                     .window_tsc = window_tsc, .windows = &windows, .window_cycles = &window_cycles,
                     .window_timed = &window_timed};
    const auto drops_before = ctx.counters.drops;
    if (with_worker) launch_worker(worker, worker_lcore);
    else
        std::printf("reload: one lcore only: the forwarded rate during a reload is not measured (give the EAL a "
                    "second lcore, e.g. -- -l 0,1)\n");

    struct Span {
        uint64_t begin, end;  // TSC: load_config_file starts, the old snapshot is freed
    };
    std::vector<Span> spans;
    std::vector<double> load_ms, build_ms, publish_ms, free_ms, rules_ms, lb_ms, kept_ms;
    const auto reload = [&] {
        std::this_thread::sleep_for(kQuietBeforeReload);
        const uint64_t t0 = rte_rdtsc();
        ConfigResult candidate = load_config_file(path);
        const uint64_t t1 = rte_rdtsc();
        if (!candidate.config) fail("reload: the config is refused on reload");
        if (!restart_required_changes(running, *candidate.config).empty()) fail("reload: the config needs a restart");
        StableRuleIds ids = rule_ids;
        BackendRegistry registry = backends;
        std::unique_ptr<Snapshot> next = build(*candidate.config, &ids, &registry);
        const uint64_t t2 = rte_rdtsc();
        std::unique_ptr<Snapshot> old = dataplane->publish(std::move(next));
        const uint64_t t3 = rte_rdtsc();
        rule_ids = std::move(ids);
        backends = std::move(registry);
        running = std::move(*candidate.config);
        old.reset();
        const uint64_t t4 = rte_rdtsc();
        spans.push_back(Span{t0, t4});
        load_ms.push_back(cycles_to_ms(d, t1 - t0));
        build_ms.push_back(cycles_to_ms(d, t2 - t1));
        publish_ms.push_back(cycles_to_ms(d, t3 - t2));
        free_ms.push_back(cycles_to_ms(d, t4 - t3));
        return cycles_to_ms(d, t3 - t0);
    };
    // The same config again, as the daemon reloads it: its tables are kept (nothing in them changed), so this is
    // what a reload of services or prefix sets alone costs beside the YAML.
    const auto reload_kept = [&] {
        std::this_thread::sleep_for(kQuietBeforeReload);
        const uint64_t t0 = rte_rdtsc();
        ConfigResult candidate = load_config_file(path);
        if (!candidate.config) fail("reload: the config is refused on reload");
        StableRuleIds ids = rule_ids;
        BackendRegistry registry = backends;
        std::unique_ptr<Snapshot> next = build(*candidate.config, &ids, &registry, dataplane->snapshot().firewall.get());
        if (next->firewall->acl_v4 != dataplane->snapshot().firewall->acl_v4)
            fail("reload: the same rules were built again instead of kept");
        std::unique_ptr<Snapshot> old = dataplane->publish(std::move(next));
        const uint64_t t1 = rte_rdtsc();
        old.reset();
        kept_ms.push_back(cycles_to_ms(d, t1 - t0));
        return kept_ms.back();
    };
    const auto reference = [&] {
        uint64_t cycles = 0;
        rte_acl_free(build_reference_acl(reference_rules, cycles));
        return cycles_to_ms(d, cycles);
    };
    // The pieces' builds are timed without freeing what they built.
    const auto piece = [&](std::vector<double>& out, const Config& config) {
        const uint64_t t0 = rte_rdtsc();
        const std::unique_ptr<Snapshot> built = build(config, nullptr, nullptr);
        out.push_back(cycles_to_ms(d, rte_rdtsc() - t0));
        return out.back();
    };
    // yaml-cpp alone on the same file's text (YAML::Load, the tree freed): every reload of this file pays it
    // before a table is built, so with today's rules' build beside it, it is the least a reload of changed rules
    // takes. The file is read once, here, outside the timed region.
    std::vector<double> yaml_ms;
    const std::string yaml_text = [&] {
        std::ifstream in(path);
        if (!in) fail("reload: cannot read " + path);
        return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }();
    const auto yaml_alone = [&] {
        const uint64_t t0 = rte_rdtsc();
        { const YAML::Node root = YAML::Load(yaml_text); }
        yaml_ms.push_back(cycles_to_ms(d, rte_rdtsc() - t0));
        return yaml_ms.back();
    };
    const auto lb_piece = [&] {
        const uint64_t t0 = rte_rdtsc();
        BackendRegistry registry = backends;
        const std::shared_ptr<const LbTables> built = build_lb_tables(running, registry, healthy, socket);
        lb_ms.push_back(cycles_to_ms(d, rte_rdtsc() - t0));
        return lb_ms.back();
    };
    const uint64_t t_start = rte_rdtsc();
    auto r = interleaved(reps, {reload, reference, [&] { return piece(rules_ms, rules_only); }, lb_piece, reload_kept,
                                yaml_alone}, false);
    std::this_thread::sleep_for(kQuietBeforeReload);
    stop.store(true, std::memory_order_relaxed);
    if (with_worker) wait_worker(worker_lcore);
    std::printf("reload: %zu reloads with their references and pieces in %.1f s\n", spans.size(),
                static_cast<double>(rte_rdtsc() - t_start) / static_cast<double>(d.tsc_hz));

    const Stat ref = stat_of(r[1]);
    const std::string acl = "rte_acl create+add+build alone, " + ordinal_count(reference_rules.size()) + " rules";
    const std::string what = "reload " + ordinal_count(kReloadRules) + " rules + " + ordinal_count(kBlocklistPrefixes) +
                             "-prefix early-drop set";
    const auto add = [&](const char* id, const std::string& measurement, const std::vector<double>& v) {
        table.add(Row{.id = id, .measurement = measurement, .unit = "ms", .reference = acl, .ref = ref,
                      .sluice = stat_of(v), .has_ref = reference_valid});
    };
    add("reload", what + ": YAML -> published", r[0]);
    if (reps != o.reps) table.note("reload: median of " + std::to_string(reps) + " repetitions, not " + std::to_string(o.reps) + " (see above).");
    add("reload-load", "  of which load_config_file (YAML, checks, 100k-line file)", load_ms);
    add("reload-build", "  of which build_snapshot (+ restart check, live state)", build_ms);
    add("reload-publish", "  of which publish (swap, RCU grace period)", publish_ms);
    add("reload-free", "then freeing the old snapshot", free_ms);
    add("reload-rules", "build_snapshot, rules only (no early-drop set, services)", rules_ms);
    add("reload-set", "build_snapshot, early-drop set only (LPM, 100k), 1 run", {set_ms});
    add("reload-lb", "build_lb_tables (3 services, Maglev 65537)", lb_ms);
    add("reload-kept", "the same config reloaded as the daemon does (rte_acl, early-drop tables kept)", kept_ms);
    add("reload-yaml", "yaml-cpp alone: YAML::Load of the same file's text (tree freed)", yaml_ms);
    // interleaved() ran each piece once per repetition, in the same order: the floor pairs them up.
    if (rules_ms.size() != reps || yaml_ms.size() != reps) fail("reload: the pieces' repetitions do not pair up");
    std::vector<double> floor_ms(reps);
    for (std::size_t i = 0; i < reps; ++i) floor_ms[i] = rules_ms[i] + yaml_ms[i];
    add("reload-floor", "floor of a reload of changed rules: rules' build + yaml-cpp alone", floor_ms);

    if (with_worker) {
        // Per reload: the median window in the quiet stretch before it (nothing but the worker running), the lowest
        // window in that stretch (the noise floor), and the lowest and the median window from load_config_file to
        // the old snapshot freed.
        const double per_window_to_mpps = 1e6 / static_cast<double>(kWindowUs) / 1e6;
        const auto window_of = [&](uint64_t tsc) { return static_cast<std::size_t>((tsc - worker.start_tsc) / window_tsc); };
        const uint64_t quiet_tsc = d.tsc_hz * static_cast<uint64_t>(kQuietBeforeReload.count()) / 1000;
        std::vector<double> before, quiet_min, during_min, during_median, ratios, cycles_before, cycles_during;
        // The stage's cycles per packet over a range of windows, bursts the OS preempted left out: what the reload
        // costs the worker through the caches and memory, apart from the CPU time it lost on a shared machine.
        const auto cycles_per_packet = [&](std::size_t from, std::size_t to) {
            uint64_t cycles = 0, packets = 0;
            for (std::size_t w = from; w < to; ++w) cycles += window_cycles[w], packets += window_timed[w];
            return packets ? static_cast<double>(cycles) / static_cast<double>(packets) : 0.0;
        };
        for (const Span& s : spans) {
            if (s.begin < worker.start_tsc + quiet_tsc) continue;
            const std::size_t b = window_of(s.begin), e = std::min(window_of(s.end), windows.size() - 1);
            const std::size_t q = window_of(s.begin - quiet_tsc) + 1;  // whole windows inside the quiet stretch
            if (q >= b || b >= windows.size()) continue;
            const std::vector<double> quiet(windows.begin() + static_cast<std::ptrdiff_t>(q), windows.begin() + static_cast<std::ptrdiff_t>(b));
            const std::vector<double> during(windows.begin() + static_cast<std::ptrdiff_t>(b), windows.begin() + static_cast<std::ptrdiff_t>(e) + 1);
            const Stat sq = stat_of(quiet), sd = stat_of(during);
            before.push_back(sq.median * per_window_to_mpps);
            quiet_min.push_back(sq.min * per_window_to_mpps);
            during_min.push_back(sd.min * per_window_to_mpps);
            during_median.push_back(sd.median * per_window_to_mpps);
            cycles_before.push_back(cycles_per_packet(q, b));
            cycles_during.push_back(cycles_per_packet(b, e + 1));
            std::size_t low = 0;
            for (const double w : during) low += w < 0.9 * sq.median;
            std::printf("reload %zu: %zu windows of %" PRIu64 " us from YAML to the old snapshot freed: %.2f Mpps before "
                        "(lowest quiet window %.2f), lowest during %.2f (%.2fx), median during %.2f; %zu windows below "
                        "0.9x; stage %.0f cycles/pkt before, %.0f during (bursts not preempted)\n",
                        ratios.size() + 1, during.size(), kWindowUs, before.back(), quiet_min.back(), during_min.back(),
                        before.back() > 0 ? during_min.back() / before.back() : 0.0, during_median.back(), low,
                        cycles_before.back(), cycles_during.back());
            ratios.push_back(during_min.back() / before.back());
        }
        const std::string window = std::to_string(kWindowUs) + " us window";
        const std::string reference_rate = "median " + window + " in the 100 ms before";
        table.add(Row{.id = "reload-rate-min", .measurement = "forwarded during a reload: lowest " + window,
                      .unit = "Mpps", .reference = reference_rate, .ref = stat_of(before), .sluice = stat_of(during_min)});
        table.add(Row{.id = "reload-rate-median", .measurement = "forwarded during a reload: median " + window,
                      .unit = "Mpps", .reference = reference_rate, .ref = stat_of(before), .sluice = stat_of(during_median)});
        table.add(Row{.id = "reload-stage-cycles", .measurement = "worker stage during a reload (not preempted)",
                      .unit = "cycles/pkt", .reference = "the same in the 100 ms before", .ref = stat_of(cycles_before),
                      .sluice = stat_of(cycles_during)});
        table.add(Row{.id = "reload-rate-quiet-min", .measurement = "forwarded, no reload: lowest " + window + " (noise)",
                      .unit = "Mpps", .reference = reference_rate, .ref = stat_of(before), .sluice = stat_of(quiet_min)});
        const std::string drops = drops_since(ctx.counters, drops_before);
        std::printf("reload: the worker forwarded %" PRIu64 " packets of %u connections in %.1f s (%.2f Mpps)%s%s\n",
                    worker.packets, live - refused, worker.seconds(), worker.mpps(), drops.empty() ? "" : "; drops: ",
                    drops.c_str());
        check_run(worker, "reload worker");
    }
    dataplane.reset();
    check_pool(d, "reload");
}

// ---------------------------------------------------------------------------------------------------------------
// Scaling (section scaling): the worker path on one lcore alone, then on two at once, each worker with the context
// the Dataplane builds for it (its own connection table, NAT ports, counters, TX queue) and its own connections. In
// process: this machine has 2 vCPUs, no room for a traffic generator and RX lcores beside two workers, so each
// worker writes and parses its own frames (an RX lcore's share, not timed in the stage figures) and runs
// firewall_burst + forward_burst with the snapshot of section lb (1k rules, three services).
constexpr double kScalingSeconds = 0.5;   // each established-packet run
constexpr uint32_t kScalingSyns = 65536;  // SYNs per worker per new-connection run

void section_scaling(Dpdk& d, const Options& o, Table& table) {
    const unsigned main_lcore = rte_get_main_lcore(), second = second_lcore();
    std::printf("scaling: measured in process, each worker writing its own frames: this machine has %ld vCPUs, no "
                "room for a traffic generator and an RX lcore beside two workers\n",
                sysconf(_SC_NPROCESSORS_ONLN));
    if (second >= RTE_MAX_LCORE) {
        std::printf("scaling: skipped: the EAL has one lcore (give it two, e.g. -- -l 0,1)\n");
        return;
    }
    const std::vector<unsigned> lcores{main_lcore, second};
    const uint32_t live = o.lb_conns;
    auto dataplane = bench_dataplane(d, lcores, 2 * (live + kScalingSyns) + 1024,
                                     make_snapshot(d, generate_rules(1000, o.seed), true));
    const Snapshot& snapshot = dataplane->snapshot();
    const std::vector<LcoreContext*> workers = worker_contexts(*dataplane);
    Rng rng(o.seed + 40);
    const std::vector<FiveTuple> clients = lb_clients(2 * (live + kScalingSyns), rng);
    std::vector<std::vector<PacketSpec>> established(2), syns(2);
    const uint64_t t0 = rte_rdtsc();
    for (std::size_t w = 0; w < 2; ++w) {
        LcoreContext& ctx = *workers[w];
        touch_all_slots(*ctx.conn_table);
        const auto first = clients.begin() + static_cast<std::ptrdiff_t>(w * (live + kScalingSyns));
        const std::vector<FiveTuple> mine(first, first + live), fresh(first + live, first + live + kScalingSyns);
        const OpenedConns opened = open_connections(d, ctx, snapshot, mine, kVipNat, true);
        established[w].resize(o.packets);
        for (PacketSpec& p : established[w]) {
            const uint32_t i = uniform(rng, 0, live - 1);
            p = uniform(rng, 0, 1) ? opened.reply[i] : opened.forward[i];
        }
        syns[w] = packets_to(fresh, kVipNat, kTcpSyn);
        if (ctx.conn_table->size() != 2 * live)
            std::printf("WARNING: scaling: worker %zu has %u table entries, %u expected\n", w, ctx.conn_table->size(), 2 * live);
    }
    std::printf("scaling: %u nat connections per worker opened through the worker path in %.1f s\n", live,
                static_cast<double>(rte_rdtsc() - t0) / static_cast<double>(d.tsc_hz));

    // Runs the workers given (indexes into workers, worker k on lcores[k]) at once; worker 0 on the calling lcore.
    const auto measure = [&](const std::vector<std::size_t>& which, bool new_conns) {
        std::vector<WorkerRun> runs(which.size());
        const uint64_t start = rte_rdtsc() + d.tsc_hz / 50;  // 20 ms for the remote lcore to wake up
        for (std::size_t k = 0; k < which.size(); ++k) {
            const std::size_t w = which[k];
            runs[k] = WorkerRun{.d = &d, .ctx = workers[w], .stream = new_conns ? &syns[w] : &established[w],
                                .start_tsc = start,
                                .end_tsc = new_conns ? UINT64_MAX : start + static_cast<uint64_t>(kScalingSeconds * static_cast<double>(d.tsc_hz)),
                                .one_pass = new_conns};
        }
        for (std::size_t k = 0; k < which.size(); ++k)
            if (which[k] != 0) launch_worker(runs[k], lcores[which[k]]);
        for (std::size_t k = 0; k < which.size(); ++k)
            if (which[k] == 0) run_worker(&runs[k]);
        for (std::size_t k = 0; k < which.size(); ++k)
            if (which[k] != 0) wait_worker(lcores[which[k]]);
        for (const WorkerRun& r : runs) check_run(r, "scaling");
        if (new_conns)  // closed again (expiry's work, untimed) for the next run
            for (const std::size_t w : which) {
                for (const int32_t position : positions_of(*workers[w]->conn_table, syns[w]))
                    if (position >= 0) workers[w]->conn_table->remove(position);
                if (workers[w]->conn_table->size() != 2 * live)
                    std::printf("WARNING: scaling: worker %zu: %u table entries after a new-connection run, %u expected\n",
                                w, workers[w]->conn_table->size(), 2 * live);
            }
        return runs;
    };
    // One worker alone alternates between the two lcores; interleaved with the runs of both.
    const auto drops_before = [&] {
        std::vector<std::array<uint64_t, kDropReasonCount>> v;
        for (const LcoreContext* c : workers) v.push_back(c->counters.drops);
        return v;
    }();
    for (const bool new_conns : {false, true}) {
        unsigned turn = 0;
        std::vector<double> stage_one, stage_two, speedup;
        auto r = interleaved(o.reps, {[&] {
                                          const auto runs = measure({turn++ % 2}, new_conns);
                                          stage_one.push_back(runs[0].stage_cycles_per_packet());
                                          return runs[0].mpps();
                                      },
                                      [&] {
                                          const auto runs = measure({0, 1}, new_conns);
                                          stage_two.push_back((runs[0].stage_cycles_per_packet() + runs[1].stage_cycles_per_packet()) / 2);
                                          return runs[0].mpps() + runs[1].mpps();
                                      }});
        stage_one.erase(stage_one.begin());
        stage_two.erase(stage_two.begin());
        for (std::size_t k = 0; k < r[0].size(); ++k) speedup.push_back(r[1][k] / r[0][k]);
        const std::string what = new_conns ? "new nat conns, " + ordinal_count(kScalingSyns) + " SYNs/worker"
                                           : "established nat, " + ordinal_count(live) + " conns/worker";
        const std::string id = new_conns ? "scaling-new" : "scaling-established";
        table.add(Row{.id = id, .measurement = "scaling, " + what + ": 2 workers at once",
                      .unit = new_conns ? "M conn/s" : "Mpps", .reference = "1 worker alone",
                      .ref = stat_of(r[0]), .sluice = stat_of(r[1])});
        table.add(Row{.id = id + "-speedup", .measurement = "scaling 1 -> 2 workers, " + what + " (speed-up)",
                      .unit = "x", .reference = "target (issue)", .ref = Stat{1.8, 1.8, 1.8},
                      .sluice = stat_of(speedup)});
        table.add(Row{.id = id + "-stage", .measurement = "  firewall + forward per " + std::string(new_conns ? "conn" : "pkt") + ", 2 at once",
                      .unit = new_conns ? "cycles/conn" : "cycles/pkt", .reference = "1 worker alone",
                      .ref = stat_of(stage_one), .sluice = stat_of(stage_two)});
    }
    for (std::size_t w = 0; w < workers.size(); ++w) {
        const std::string drops = drops_since(workers[w]->counters, drops_before[w]);
        if (!drops.empty()) std::printf("WARNING: scaling: worker %zu dropped packets: %s\n", w, drops.c_str());
    }
    dataplane.reset();
    check_pool(d, "scaling");
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
        for (const std::size_t count : {std::size_t{10}, std::size_t{1000}, std::size_t{10000}}) {
            const auto rules = generate_rules(count, o.seed);
            write_rules(o.write_dir + "/rules-" + std::to_string(count) + ".txt", rules);
            write_trace(o.write_dir + "/trace-" + std::to_string(count) + ".txt", generate_trace(rules, 65536, o.seed));
        }
        std::printf("wrote rules-{10,1000,10000}.txt and trace-{10,1000,10000}.txt to %s\n", o.write_dir.c_str());
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
    utsname un{};
    uname(&un);
    std::printf("sluice_bench %s\nmachine: %s, %ld CPUs, TSC %.3f GHz, kernel %s\nEAL: %s (%s)\n"
                "load average at start: %s\nrte_rdtsc_precise pair: %" PRIu64 " cycles (subtracted per burst)\n",
                start_time.c_str(), cpu_model().c_str(), sysconf(_SC_NPROCESSORS_ONLN),
                static_cast<double>(d.tsc_hz) / 1e9, un.release, d.eal_line.c_str(),
                d.hugepages ? "hugepages" : "no hugepages", load_start.c_str(), d.rdtsc_overhead);
    std::fflush(stdout);

    Table table;
    std::vector<std::pair<std::string, std::string>> meta;
    std::vector<std::string> loads;
    const CpuSample cpu_start = cpu_sample();
    const auto section = [&](const char* name, const std::function<void()>& body) {
        if (!o.sections.count(name)) return;
        const CpuSample a = cpu_sample();
        const uint64_t t0 = rte_rdtsc();
        g_preempted = PreemptionCount{};
        body();
        const CpuSample b = cpu_sample();
        char line[240];
        int len = std::snprintf(line, sizeof line, "%s: %.1f s, other processes used %.0f%% of all CPU time meanwhile",
                                name, static_cast<double>(rte_rdtsc() - t0) / static_cast<double>(d.tsc_hz),
                                100 * others_share(a, b));
        if (g_preempted.bursts)
            std::snprintf(line + len, sizeof line - len, "; %" PRIu64 " of %" PRIu64 " timed bursts (%.2f%%) left out as preempted",
                          g_preempted.excluded, g_preempted.bursts, 100.0 * g_preempted.excluded / g_preempted.bursts);
        loads.push_back(line);
        std::printf("%s\n", line);
        std::fflush(stdout);
    };
    section("parse", [&] { section_parse(d, o, table); });
    section("classify", [&] { section_classify(d, o, table, files, meta); });
    section("established", [&] { section_established(d, o, table); });
    section("new", [&] { section_new(d, o, table); });
    section("lb", [&] { section_lb(d, o, table); });
    section("memory", [&] { section_memory(d, o, table); });
    section("reload", [&] { section_reload(d, o, table); });
    section("scaling", [&] { section_scaling(d, o, table); });
    const CpuSample cpu_end = cpu_sample();
    const double others = others_share(cpu_start, cpu_end);

    table.note("\nMedian of " + std::to_string(o.reps) + " repetitions, interleaved with their reference; " +
               std::to_string(o.packets) + " packets per repetition of parse/established, bursts of " +
               std::to_string(kBurst) + ". Ratio = sluice / reference.");
    char line[200];
    std::snprintf(line, sizeof line, "Load average at start %s, at end %s; other processes used %.0f%% of all CPU time "
                  "during the run (%s).", load_start.c_str(), loadavg().c_str(), 100 * others,
                  others > 0.05 ? "noisy: figures are high and spread out" : "quiet");
    table.note(line);
    table.print();

    if (!o.results_file.empty()) {
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
    stop_dpdk(d);
    return 0;
}

}  // namespace
}  // namespace sluice::bench

int main(int argc, char** argv) { return sluice::bench::run(argc, argv); }

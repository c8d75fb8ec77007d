// The measuring harness every section shares: the EAL, a pool, a net_null port and one worker's context; frames
// written into mbufs; bursts timed with the preempted ones left out; variants interleaved; the checks after a
// section (the pool full again, the drops counted).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <rte_mbuf.h>

#include "common/five_tuple.hpp"
#include "conntrack/conn_table.hpp"
#include "options.hpp"
#include "pipeline/lcore_context.hpp"
#include "report.hpp"

namespace sluice::bench {

constexpr uint16_t kFrameLength = 60;  // 64 B on the wire with the CRC
constexpr uint8_t kTcpSyn = 0x02, kTcpAck = 0x10, kTcpSynAck = 0x12;
constexpr double kTargetNewConnsPerSecond = 2e6;  // the firewall issue's goal, per worker

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

void start_eal(Dpdk& d, const Options& o, const char* argv0);
void start_port(Dpdk& d);
void stop_dpdk(Dpdk& d);
void measure_rdtsc_overhead(Dpdk& d);

// Makes table the worker's connection table, hooked as the Dataplane hooks a worker's.
void attach_conn_table(Dpdk& d, ConnTable& table);

// A name no other table or context of this process has: prefix and a counter.
std::string unique_name(const std::string& prefix);
inline std::string table_name() { return unique_name("bench_ct"); }

double seconds_since(const Dpdk& d, uint64_t tsc_start);
double cycles_to_ms(const Dpdk& d, uint64_t cycles);
// Millions of packets or connections per second from the cycles each takes (the slowest becomes the minimum).
Stat millions_per_second(const Dpdk& d, const Stat& cycles);

// A packet of a stream: its tuple (network byte order) and, for TCP, its flags.
struct PacketSpec {
    FiveTuple tuple;
    uint8_t tcp_flags = 0;
};

// A 60-byte Ethernet/IPv4 frame: TCP without options, or UDP with 18 bytes of payload; valid IPv4 checksum. An
// IPv6 tuple gives an Ethernet/IPv6 frame of its headers alone.
void write_frame(rte_mbuf* m, const PacketSpec& p, uint16_t port, bool checksum_good);

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
extern PreemptionCount g_preempted;

// The cycles of a timed region between two rte_rdtsc_precise() readings, the pair's own cost subtracted.
uint64_t timed_cycles(const Dpdk& d, uint64_t t0, uint64_t t1);

// Timed groups (cycles, items): cycles per item over the groups that were not preempted, counted in g_preempted.
double cycles_per_item(const Dpdk& d, const std::vector<std::pair<uint64_t, uint32_t>>& groups);

// One pass over the stream: stage cycles per packet over the bursts that were not preempted (the rte_rdtsc_precise
// pair's own cost subtracted per burst).
double timed_pass(Dpdk& d, const std::vector<PacketSpec>& stream, const Stage& stage, PassOptions po = {});

// A pass whose time is not wanted (setting connections up): its bursts are not counted as timed ones.
void untimed_pass(Dpdk& d, const std::vector<PacketSpec>& stream, const Stage& stage);

// Runs the variants interleaved, reps times each, after one warm-up pass each (unless !warm_up); per-packet cycles
// of each.
std::vector<std::vector<double>> interleaved(unsigned reps, const std::vector<std::function<double()>>& variants,
                                             bool warm_up = true);

void check_pool(Dpdk& d, const char* section);

// Drop counters of the worker, to tell what the stages did with the packets.
using DropCounts = std::array<uint64_t, kDropReasonCount>;
inline DropCounts drops_of(const Dpdk& d) { return d.ctx->counters.drops; }
std::string drops_since(const LcoreCounters& counters, const DropCounts& before);
inline std::string drops_since(const Dpdk& d, const DropCounts& before) { return drops_since(d.ctx->counters, before); }

}  // namespace sluice::bench

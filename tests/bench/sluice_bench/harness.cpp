// The measuring harness: the EAL with its default arguments, the pool, the net_null port and the worker's context
// (the way Dataplane::build makes one), frames, timed passes, and the checks after a section.
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <new>

#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_ip.h>
#include <rte_lcore.h>
#include <rte_malloc.h>
#include <rte_tcp.h>
#include <rte_udp.h>

#include "dpdk/mempool.hpp"
#include "harness.hpp"
#include "packet/packet_meta.hpp"
#include "pipeline/dataplane.hpp"
#include "pipeline/forward_stage.hpp"
#include "report.hpp"

namespace sluice::bench {

PreemptionCount g_preempted;

namespace {

// The EAL runtime directory of our own file prefix (/var/run/dpdk/bench-<pid>), removed at exit: the EAL leaves
// it behind even with --in-memory. Empty until the EAL runs, or when the EAL arguments came from the command line.
std::string g_runtime_dir;

void remove_runtime_dir() {
    if (g_runtime_dir.empty()) return;
    std::error_code ignored;
    std::filesystem::remove_all(g_runtime_dir, ignored);
    g_runtime_dir.clear();
}

uint32_t name_counter = 0;

unsigned free_hugepages_2m() {
    std::ifstream f("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages");
    unsigned n = 0;
    f >> n;
    return n;
}

// Another CPU this process may run on than cpu (for the second lcore of reload, scaling and walk), or -1.
int other_cpu(unsigned cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0) return -1;
    for (int c = 0; c < std::min(CPU_SETSIZE, RTE_MAX_LCORE); ++c)
        if (CPU_ISSET(c, &set) && static_cast<unsigned>(c) != cpu) return c;
    return -1;
}

}  // namespace

[[noreturn]] void fail(const std::string& message) {
    std::fprintf(stderr, "sluice_bench: %s\n", message.c_str());
    remove_runtime_dir();
    std::exit(1);
}

void start_eal(Dpdk& d, const Options& o, const char* argv0) {
    std::vector<std::string> args{argv0};
    if (o.eal.empty()) {
        d.own_prefix = true;
        std::string lcores = std::to_string(o.lcore);
        if (o.sections.count("reload") || o.sections.count("scaling") || o.sections.count("walk"))
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
    const auto names_null = [](const std::string& a) { return a.find("net_null") != std::string::npos; };
    if (std::none_of(args.begin(), args.end(), names_null)) args.emplace_back("--vdev=net_null0,no-rx=1");
    for (std::size_t i = 1; i < args.size(); ++i) d.eal_line += (i > 1 ? " " : "") + args[i];
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (rte_eal_init(static_cast<int>(args.size()), argv.data()) < 0)
        fail("rte_eal_init(" + d.eal_line + "): " + rte_strerror(rte_errno));
    const std::string runtime_dir = rte_eal_get_runtime_dir();
    if (d.own_prefix && runtime_dir.find("/bench-" + std::to_string(getpid())) != std::string::npos)
        g_runtime_dir = runtime_dir;
    if (!register_packet_meta())
        fail(std::string("cannot register the PacketMeta dynfield: ") + rte_strerror(rte_errno));
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
    // A tracking worker's counters (stateful_burst counts every allowed packet under its rule, and every packet of
    // a balanced connection under its backend). The NAT port pool is per section (see section_lb); the connection
    // tables get release_connection as their release hook (attach_conn_table).
    ctx.rule_traffic = static_cast<RuleTraffic*>(
        rte_zmalloc_socket("bench_rule_traffic", sizeof(RuleTraffic) * kMaxCountedRules, kCacheLine, socket));
    ctx.backend_traffic = static_cast<BackendTraffic*>(
        rte_zmalloc_socket("bench_backend_traffic", sizeof(BackendTraffic) * kMaxBackends, kCacheLine, socket));
    if (!ctx.rule_traffic || !ctx.backend_traffic) fail("out of memory for the rule and backend counters");
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

std::string unique_name(const std::string& prefix) { return prefix + std::to_string(name_counter++); }

double seconds_since(const Dpdk& d, uint64_t tsc_start) {
    return static_cast<double>(rte_rdtsc() - tsc_start) / static_cast<double>(d.tsc_hz);
}

double cycles_to_ms(const Dpdk& d, uint64_t cycles) {
    return 1e3 * static_cast<double>(cycles) / static_cast<double>(d.tsc_hz);
}

Stat millions_per_second(const Dpdk& d, const Stat& cycles) {
    const double hz = static_cast<double>(d.tsc_hz);
    return Stat{hz / cycles.median / 1e6, hz / cycles.max / 1e6, hz / cycles.min / 1e6};
}

namespace {

// The L4 header after an IP header at l4: TCP without options, or UDP over the rest of the frame.
void write_l4(uint8_t* l4, const PacketSpec& p, uint16_t l4_length) {
    const FiveTuple& t = p.tuple;
    if (t.proto == IPPROTO_TCP) {
        auto* th = reinterpret_cast<rte_tcp_hdr*>(l4);
        th->src_port = t.src_port;
        th->dst_port = t.dst_port;
        th->sent_seq = RTE_BE32(1);
        th->data_off = 0x50;
        th->tcp_flags = p.tcp_flags;
        th->rx_win = RTE_BE16(65535);
    } else {
        auto* uh = reinterpret_cast<rte_udp_hdr*>(l4);
        uh->src_port = t.src_port;
        uh->dst_port = t.dst_port;
        uh->dgram_len = htons(l4_length);
    }
}

// IPv6: the 40-byte header leaves no room in 60 bytes, so the frame is as long as its headers (74 B TCP, 62 B UDP).
void write_frame_v6(rte_mbuf* m, const PacketSpec& p, rte_ether_hdr* eth) {
    const FiveTuple& t = p.tuple;
    const uint16_t l4_length = t.proto == IPPROTO_TCP ? sizeof(rte_tcp_hdr) : sizeof(rte_udp_hdr);
    m->data_len = m->pkt_len = sizeof(rte_ether_hdr) + sizeof(rte_ipv6_hdr) + l4_length;
    std::memset(eth + 1, 0, m->data_len - sizeof(rte_ether_hdr));
    eth->ether_type = RTE_BE16(RTE_ETHER_TYPE_IPV6);
    auto* ip = reinterpret_cast<rte_ipv6_hdr*>(eth + 1);
    ip->vtc_flow = RTE_BE32(6u << 28);
    ip->payload_len = htons(l4_length);
    ip->proto = t.proto;
    ip->hop_limits = 64;
    std::memcpy(ip->src_addr, t.src.bytes, 16);
    std::memcpy(ip->dst_addr, t.dst.bytes, 16);
    write_l4(reinterpret_cast<uint8_t*>(ip + 1), p, l4_length);
}

}  // namespace

void write_frame(rte_mbuf* m, const PacketSpec& p, uint16_t port, bool checksum_good) {
    auto* data = rte_pktmbuf_mtod(m, uint8_t*);
    std::memset(data, 0, kFrameLength);
    m->data_len = m->pkt_len = kFrameLength;
    m->port = port;
    m->ol_flags = checksum_good ? RTE_MBUF_F_RX_IP_CKSUM_GOOD : 0;
    auto* eth = reinterpret_cast<rte_ether_hdr*>(data);
    eth->dst_addr = rte_ether_addr{{0x02, 0, 0, 0, 0, 0x01}};
    eth->src_addr = rte_ether_addr{{0x02, 0, 0, 0, 0, 0x02}};
    const FiveTuple& t = p.tuple;
    if (t.family == IpFamily::ipv6) {
        write_frame_v6(m, p, eth);
        return;
    }
    eth->ether_type = RTE_BE16(RTE_ETHER_TYPE_IPV4);
    auto* ip = reinterpret_cast<rte_ipv4_hdr*>(eth + 1);
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
    write_l4(reinterpret_cast<uint8_t*>(ip + 1), p, l4_length);
}

uint64_t timed_cycles(const Dpdk& d, uint64_t t0, uint64_t t1) {
    return t1 - t0 > d.rdtsc_overhead ? t1 - t0 - d.rdtsc_overhead : 0;
}

double cycles_per_item(const Dpdk& d, const std::vector<std::pair<uint64_t, uint32_t>>& groups) {
    if (groups.empty()) return 0;
    std::vector<uint64_t> sorted;
    for (const auto& g : groups) sorted.push_back(g.first);
    std::nth_element(sorted.begin(), sorted.begin() + sorted.size() / 2, sorted.end());
    const uint64_t limit = std::max(20 * sorted[sorted.size() / 2], d.tsc_hz / 10'000);
    uint64_t cycles = 0, items = 0;
    for (const auto& [c, n] : groups) {
        ++g_preempted.bursts;
        if (c > limit) {
            ++g_preempted.excluded;
            continue;
        }
        cycles += c;
        items += n;
    }
    return items ? static_cast<double>(cycles) / static_cast<double>(items) : 0;
}

double timed_pass(Dpdk& d, const std::vector<PacketSpec>& stream, const Stage& stage, PassOptions po) {
    rte_mbuf* pkts[kBurst];
    DropReason verdicts[kBurst];
    uint64_t malformed = 0;
    std::vector<std::pair<uint64_t, uint32_t>> bursts;  // cycles, packets
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
        bursts.emplace_back(timed_cycles(d, t0, t1), n);
        if (back) rte_pktmbuf_free_bulk(pkts, back);
    }
    if (malformed) fail(std::to_string(malformed) + " benchmark frames failed to parse (a bug in sluice_bench)");
    return cycles_per_item(d, bursts);
}

void untimed_pass(Dpdk& d, const std::vector<PacketSpec>& stream, const Stage& stage) {
    const PreemptionCount saved = g_preempted;
    timed_pass(d, stream, stage);
    g_preempted = saved;
}

std::vector<std::vector<double>> interleaved(unsigned reps, const std::vector<std::function<double()>>& variants,
                                             bool warm_up) {
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

std::string drops_since(const LcoreCounters& counters, const DropCounts& before) {
    std::string out;
    for (std::size_t r = 0; r < kDropReasonCount; ++r) {
        const uint64_t n = counters.drops[r] - before[r];
        if (n)
            out += (out.empty() ? "" : ", ") + std::string(drop_reason_name(static_cast<DropReason>(r))) + " " +
                   std::to_string(n);
    }
    return out;
}

void attach_conn_table(Dpdk& d, ConnTable& table) {
    table.set_release_hook(release_connection, d.ctx);
    d.ctx->conn_table = &table;
}

}  // namespace sluice::bench

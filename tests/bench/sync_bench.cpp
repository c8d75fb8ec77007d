// What the state-sync channel carries (lib/sync, docs/benchmarks.md "State sync"): two SyncChannels in this process,
// each on its own thread as in the daemon, talking over loopback UDP. The main thread stands for the workers: it
// keeps the sender's event ring full of distinct connections' events and empties the receiver's apply ring. Printed:
// the events per second that arrive in the apply ring (encoding, HMAC-SHA256, sendto, recvfrom, MAC check, decoding
// and the ring on both sides), the sender's own rate, the losses and resends, and the bytes one event takes on the
// wire (the datagram's share with its IPv4 and UDP headers). A measuring tool: no test runs it, it asserts nothing.
//
//   sync_bench [seconds (default 3)] [-- EAL arguments]
#include <arpa/inet.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <rte_eal.h>
#include <rte_ring.h>

#include "common/sync_loopback.hpp"
#include "sync/sync_channel.hpp"

using namespace sluice;

namespace {

constexpr unsigned kRingSize = 16384;  // sync.ring_size's default
constexpr std::size_t kIpUdpBytes = 28;

rte_ring* ring(const char* name) {
    rte_ring* r =
        rte_ring_create_elem(name, sizeof(SyncEvent), kRingSize, SOCKET_ID_ANY, RING_F_SP_ENQ | RING_F_SC_DEQ);
    if (!r) {
        std::fprintf(stderr, "sync_bench: cannot create ring %s\n", name);
        std::exit(1);
    }
    return r;
}

// Connection number n's opened event, as a worker writes it for a NAT connection.
SyncEvent event_of(uint32_t n) {
    SyncEvent e{};
    e.tuple.family = IpFamily::ipv4;
    e.tuple.proto = 6;
    const uint32_t client = htonl(0xc6336400u + (n >> 16)), vip = htonl(0x0a000001);
    std::memcpy(e.tuple.src.bytes, &client, 4);
    std::memcpy(e.tuple.dst.bytes, &vip, 4);
    e.tuple.src_port = static_cast<uint16_t>(n);
    e.tuple.dst_port = 80;
    e.kind = SyncEventKind::opened;
    e.state = ConnState::tcp_established;
    e.rule_index = 1;
    e.backend = 1;
    e.nat_port = static_cast<uint16_t>(1024 + n % 60000);
    e.lifetime_s = 3600;
    return e;
}

}  // namespace

int main(int argc, char** argv) {
    double seconds = 3;
    std::vector<std::string> eal{argv[0]};
    int i = 1;
    if (i < argc && std::string(argv[i]) != "--") seconds = std::atof(argv[i++]);
    if (i < argc && std::string(argv[i]) == "--") {
        for (++i; i < argc; ++i) eal.emplace_back(argv[i]);
    } else {
        for (const char* a : {"--no-huge", "-m", "256", "--no-pci", "--no-telemetry", "-l", "0"}) eal.emplace_back(a);
        eal.push_back("--file-prefix=sync-bench-" + std::to_string(::getpid()));
    }
    std::vector<char*> eal_argv;
    for (std::string& a : eal) eal_argv.push_back(a.data());
    if (rte_eal_init(static_cast<int>(eal_argv.size()), eal_argv.data()) < 0) {
        std::fprintf(stderr, "sync_bench: EAL init failed\n");
        return 1;
    }
    const std::string key = "sync-bench-key-of-more-than-thirty-two-bytes";
    const auto base = static_cast<uint16_t>(20000 + ::getpid() % 20000);
    rte_ring *out = ring("bench_out"), *out_idle = ring("bench_out_idle"), *in_idle = ring("bench_in_idle"),
             *in = ring("bench_in");
    // The sender's apply ring and the receiver's event ring stay empty: each end only sends, or only receives.
    SyncChannel sender({loopback_sync_address(base), {loopback_sync_address(base + 1)}, key, 1}, {out}, {in_idle},
                       nullptr);
    SyncChannel receiver({loopback_sync_address(base + 1), {loopback_sync_address(base)}, key, 2}, {out_idle}, {in},
                         nullptr);
    sender.start();
    receiver.start();

    std::vector<SyncEvent> batch(256);
    std::vector<SyncEvent> taken(256);
    uint32_t next = 0;
    const auto fill = [&] {
        for (SyncEvent& e : batch) e = event_of(next++);
        next -= static_cast<uint32_t>(
            batch.size() - rte_ring_sp_enqueue_burst_elem(out, batch.data(), sizeof(SyncEvent), batch.size(), nullptr));
    };
    const auto began = std::chrono::steady_clock::now();
    const auto until = began + std::chrono::duration<double>(seconds);
    uint64_t applied = 0;
    while (std::chrono::steady_clock::now() < until) {
        fill();
        applied += rte_ring_sc_dequeue_burst_elem(in, taken.data(), sizeof(SyncEvent), taken.size(), nullptr);
    }
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
    sender.stop();
    receiver.stop();
    applied += rte_ring_sc_dequeue_burst_elem(in, taken.data(), sizeof(SyncEvent), taken.size(), nullptr);

    const SyncCounters &s = sender.counters(), &r = receiver.counters();
    // Datagrams sent once (resends are the receiver's losses asked for again; keepalives are a few).
    const uint64_t sent = s.events_sent.load(), resent = s.resent.load();
    const uint64_t fresh = s.datagrams_sent.load() - resent;
    const double per_datagram = fresh ? static_cast<double>(sent) / static_cast<double>(fresh) : 0.0;
    const double overhead = static_cast<double>(kSyncHeaderBytes + kSyncMacBytes + kIpUdpBytes);
    std::printf("sync channel over loopback, %.1f s, one sender thread and one receiver thread:\n", elapsed);
    std::printf("  events sent      %10.0f /s  (%.1f a datagram)\n", static_cast<double>(sent) / elapsed, per_datagram);
    std::printf("  events applied   %10.0f /s  (taken from the receiver's apply ring)\n",
                static_cast<double>(applied) / elapsed);
    std::printf("  lost on the way  %10.1f %%  (gaps %llu; datagrams resent %llu; apply ring full %llu)\n",
                sent ? 100.0 * (1.0 - static_cast<double>(r.events_received.load()) / static_cast<double>(sent)) : 0,
                static_cast<unsigned long long>(r.gaps.load()), static_cast<unsigned long long>(resent),
                static_cast<unsigned long long>(r.apply_dropped.load()));
    std::printf("  bytes on the wire per event  %.1f  (%zu of its own, %.0f of IPv4, UDP, header and MAC shared)\n",
                per_datagram ? static_cast<double>(kSyncEventBytes) + overhead / per_datagram : 0.0, kSyncEventBytes,
                overhead);
    rte_eal_cleanup();
    return 0;
}

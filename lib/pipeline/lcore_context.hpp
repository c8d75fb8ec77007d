// Everything one data-plane lcore owns: its queues, rings, TX buffers, scratch arrays and counters, in one
// cache-aligned struct allocated on the lcore's socket. Written only by its lcore once launched; the control thread
// reads the counters and the quiesced flag, and writes nothing but the shared phase.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>

#include <rte_ethdev.h>
#include <rte_rcu_qsbr.h>
#include <rte_ring.h>

#include "common/compiler.hpp"
#include "common/siphash.hpp"
#include "conntrack/conn_table.hpp"
#include "dpdk/mempool.hpp"
#include "nat/nat_ports.hpp"
#include "pipeline/counters.hpp"
#include "pipeline/flow_walk.hpp"
#include "pipeline/fragments.hpp"
#include "pipeline/snapshot.hpp"

namespace sluice {

inline constexpr std::size_t kMaxWorkers = 16;
inline constexpr std::size_t kMaxRxQueuesPerLcore = 32;
// Rules that get packet/byte counters, by stable id (ids are never reused, so a daemon that reloads with ever new
// rule names stops counting the newest after this many).
inline constexpr uint32_t kMaxCountedRules = 65536;

// Packets and bytes of the connections each rule allowed, by stable rule id; one per worker, written by it only.
struct RuleTraffic {
    uint64_t packets;
    uint64_t bytes;
};

// New, closed (so active = new - closed), packets and bytes of each backend's connections, by stable backend id;
// one array per worker, written by it only.
struct BackendTraffic {
    uint64_t new_connections;
    uint64_t closed_connections;
    uint64_t packets;
    uint64_t bytes;
};

// A worker saw an ARP/ND sender (for the control thread's resolver). 32 bytes: an rte_ring element.
struct NeighbourEvent {
    IpAddress address;
    rte_ether_addr mac;
    uint16_t port;  // the interface it was seen on (packet/vlan.hpp: a port, or one of its VLANs)
    IpFamily family;
    uint8_t reserved[7];
};
static_assert(sizeof(NeighbourEvent) == 32);

// The control thread asks worker 0 to send a solicitation. 40 bytes: an rte_ring element.
struct NeighbourRequest {
    IpAddress sender;
    IpAddress target;
    uint16_t port;  // the interface to solicit on
    IpFamily family;
    uint8_t reserved[5];
};
static_assert(sizeof(NeighbourRequest) == 40);

// A firewall decision to log (rules with `log: true`), worker -> control thread. 48 bytes: an rte_ring element.
struct DecisionLogRecord {
    FiveTuple tuple;
    uint32_t rule;     // rule id in the snapshot that decided, UINT32_MAX: the default
    uint16_t in_port;  // the interface (packet/vlan.hpp)
    RuleAction action;
    uint8_t reserved;
};
static_assert(sizeof(DecisionLogRecord) == 48);

// How a packet that passed the stateful stage leaves: routed by its ingress port, or rewritten for a backend.
// nat_icmp_to_client / nat_icmp_to_backend: an ICMP error about a packet of a nat connection, translated as that
// packet was (from the backends' side, by the alias; from the clients' side, about a reply to the client).
// answer_to_initiator / answer_to_responder: sluice's own segment to one end of a connection (a challenge ACK),
// written whole: it leaves the way that end's packets of the connection leave, never back to the frame's sender.
enum class RouteKind : uint8_t {
    plain,
    to_backend,
    nat_reply,
    nat_icmp_to_client,
    nat_icmp_to_backend,
    answer_to_initiator,
    answer_to_responder,
};
inline constexpr uint32_t kNoService = UINT32_MAX;

struct PacketRoute {
    int32_t conn = -1;     // the connection's entry (to_backend, nat_icmp_to_backend, answer_*; -1 for a dsr/tunnel
                           // FIN or RST sent on without one), or its alias entry (nat_reply, nat_icmp_to_client)
    uint32_t backend = 0;  // stable backend id (to_backend, nat_reply; answer_to_responder: kNoBackend or a nat one)
    RouteKind kind = RouteKind::plain;
};

// The life of the data plane, advanced only by the control thread. Shutdown goes running -> rx_stopping (RX lcores
// stop polling ports and say so) -> draining (workers empty their rings, flush TX and return).
enum class Phase : int { running, rx_stopping, draining };

// State every lcore reads and only the control thread writes. The snapshot is replaced with one atomic store; each
// lcore reports a quiescent state (rte_rcu_qsbr) at the end of every loop iteration, when it holds no reference to
// it, and the control thread frees the old one only after every lcore has (DPDK lib/rcu, QSBR).
struct alignas(kCacheLine) SharedState {
    std::atomic<Phase> phase{Phase::running};
    std::atomic<const Snapshot*> snapshot{nullptr};
    rte_rcu_qsbr* qsbr = nullptr;
};

struct RxQueue {
    uint16_t port_id;
    uint16_t queue_id;
};

// What the TX buffer's error callback needs to count a packet the TX queue refused.
struct TxDropSink {
    LcoreCounters* counters;
    uint16_t port_id;
};

struct alignas(kCacheLine) LcoreContext {
    // Set by the control thread before launch, read-only afterwards.
    unsigned lcore_id = 0;
    bool rx = false;
    bool worker = false;
    uint16_t worker_index = 0;  // this lcore's worker slot, when worker
    uint16_t worker_count = 0;
    // RX: parse_burst fills each meta.flow_hash, because something reads it: the steering to one of several
    // workers, or the connection table. Plain forwarding with one worker skips it (a third of the parse's cost,
    // docs/benchmarks.md). Both are fixed for the dataplane's life; a snapshot with ECMP routes turns hashing on.
    bool hash_flows = true;
    uint16_t tx_queue = 0;
    uint16_t rx_queue_count = 0;
    uint32_t idle_sleep_us = 0;
    unsigned qsbr_thread_id = 0;
    std::array<RxQueue, kMaxRxQueuesPerLcore> rx_queues{};
    std::array<rte_ring*, kMaxWorkers> worker_rings{};  // input ring of every worker
    std::array<uint16_t, RTE_MAX_ETHPORTS> tx_ports{};  // ports this worker may send on
    uint16_t tx_port_count = 0;
    std::array<rte_eth_dev_tx_buffer*, RTE_MAX_ETHPORTS> tx_buffers{};
    std::array<TxDropSink, RTE_MAX_ETHPORTS> tx_drop_sinks{};
    SharedState* shared = nullptr;
    ConnTable* conn_table = nullptr;            // workers, when the firewall is on
    RuleTraffic* rule_traffic = nullptr;        // kMaxCountedRules entries, with conn_table
    BackendTraffic* backend_traffic = nullptr;  // kMaxBackends entries, with conn_table
    NatPortPool* nat_ports = nullptr;           // with conn_table
    FragmentTracker* fragments = nullptr;       // rx lcores, when connections are tracked (fragments.hpp)
    rte_ring* neighbour_events = nullptr;       // every worker -> control thread (MP/SC)
    rte_ring* decision_log = nullptr;           // every worker -> control thread (MP/SC)
    rte_ring* neighbour_requests = nullptr;     // control thread -> worker 0 only (SP/SC)
    rte_mempool* pool = nullptr;                // worker 0: where its solicitations come from
    SipHashKey syn_cookie_key{};                // workers: the process's SYN cookie key (syn_proxy.hpp)
    uint64_t syn_cookie_period_tsc = 0;         // a cookie period in TSC cycles

    // State sync (sync_steps.hpp), when on: this worker's events to the sync thread, and peers' events for it.
    rte_ring* sync_out = nullptr;  // worker -> sync thread (SP/SC)
    rte_ring* sync_in = nullptr;   // sync thread -> worker (SP/SC)
    uint64_t tsc_hz = 0;           // rte_get_tsc_hz(), for the events' lifetimes
    std::array<uint16_t, static_cast<std::size_t>(ConnState::count)> sync_refresh_s{};  // refresh interval by state
    uint32_t sync_cursor = 0;                                                           // the refresh walk's next slot

    // Set by the control thread (a walk of this worker's connections, flow_walk.hpp); cleared by it once done.
    std::atomic<FlowWalk*> walk{nullptr};
    uint64_t walk_slice_tsc = 0;          // kWalkSliceUs in TSC cycles
    uint64_t walk_busy_interval_tsc = 0;  // kWalkBusyIntervalUs in TSC cycles

    // Written by the lcore.
    alignas(kCacheLine) std::atomic<bool> rx_quiesced{false};
    uint64_t next_drain_tsc = 0;
    uint64_t drain_interval_tsc = 0;
    uint64_t next_walk_tsc = 0;   // while packets flow, no walk slice before then
    uint64_t next_glean_tsc = 0;  // no request to resolve a connected host before then (forward_stage.cpp)
    uint32_t idle_streak = 0;
    double log_tokens = 0;  // decision-log token bucket (firewall.log_rate, burst of one second)
    uint64_t log_refill_tsc = 0;
    TokenBucket new_connections{0.0, 0};  // Snapshot::new_connections; starts full (refilled since tsc 0)
    TokenBucket error_replies{0.0, 0};    // Snapshot::error_replies; the same
    LcoreCounters counters;

    // Scratch: one pending burst per destination worker, filled by the RX stage.
    std::array<std::array<rte_mbuf*, kBurst>, kMaxWorkers> pending{};
    std::array<uint16_t, kMaxWorkers> pending_count{};
};

// Puts m into the worker's TX buffer of port, counted as sent there (a refusal is taken back by count_tx_drops),
// with its VLAN tag in front when it leaves tagged (packet/vlan.hpp: an answer on the VLAN it came in on, or the
// forward stage's way out).
inline void send_out(LcoreContext& ctx, uint16_t port, rte_mbuf* m) {
    if (SLUICE_UNLIKELY(m->ol_flags & RTE_MBUF_F_TX_VLAN) && !insert_vlan_tag(m)) {
        ctx.counters.drop(DropReason::vlan_no_room);
        rte_pktmbuf_free(m);
        return;
    }
    PortCounters& out = ctx.counters.ports[port];
    counter_add(out.tx_packets);
    counter_add(out.tx_bytes, rte_pktmbuf_pkt_len(m));
    rte_eth_tx_buffer(port, ctx.tx_queue, ctx.tx_buffers[port], m);
}

// An error reply of the worker's own (a reject, a too-big or time-exceeded error), within its budget
// (Snapshot::error_replies): write() builds it over the packet and says whether there is one to send (none for an
// ICMP error, IPv4 without DF...).
// False when nothing was written; one over the budget is counted. The packet it answers is dropped either way.
template <typename Write>
bool write_error_reply(LcoreContext& ctx, const Snapshot& snapshot, uint64_t now_tsc, Write&& write) {
    const RateLimit& limit = snapshot.error_replies;
    if (limit.tokens_per_tsc == 0) return write();
    if (!take_token(ctx.error_replies, limit, now_tsc)) {
        counter_add(ctx.counters.error_replies_limited);
        return false;
    }
    if (write()) return true;
    ctx.error_replies.tokens += 1.0;  // nothing was sent: the token goes back
    return false;
}

// The lcore entry point handed to rte_eal_remote_launch; arg is the LcoreContext.
int lcore_main(void* arg);

// One turn of an lcore's loop on the calling thread at now_tsc: its RX queues, its worker ring and pipeline, a
// bounded expiry and a TX drain. For a Dataplane that is never launched (Dataplane::run_inline: in-process tests);
// returns the packets it moved.
uint32_t run_lcore_once(LcoreContext& ctx, const Snapshot& snapshot, uint64_t now_tsc);

}  // namespace sluice

// The poll loop of every data-plane lcore (after DPDK's l3fwd): RX a burst per queue, parse it once, hash it
// symmetrically and hand each packet to the worker that owns its flow; as a worker, dequeue a burst and run the
// pipeline stage; drain TX buffers on a TSC timer. No locks, syscalls or allocation here, except the optional
// idle sleep when nothing arrived for a while.
#include <algorithm>

#include <rte_cycles.h>
#include <rte_pause.h>

#include "common/ip_proto.hpp"
#include "nat/nat_owner.hpp"
#include "packet/neighbour.hpp"
#include "packet/packet_meta.hpp"
#include "pipeline/early_drop.hpp"
#include "pipeline/forward_stage.hpp"
#include "pipeline/lcore_context.hpp"
#include "pipeline/stateful_stage.hpp"
#include "pipeline/sync_steps.hpp"

namespace sluice {
namespace {

constexpr uint32_t kIdleStreakBeforeSleep = 64;
constexpr uint64_t kDrainIntervalUs = 100;
constexpr uint32_t kExpiryBudget = 8;  // connections expired per loop iteration at most (bounded work)

constexpr uint32_t kNeighbourRequestPolls = 64;  // worker 0 looks at its solicitation requests this often
constexpr unsigned kNeighbourRequestBurst = 8;

// ARP and ND frames never reach the firewall: their senders are reported to the control thread's resolver, and a
// solicitation for one of sluice's addresses is answered in place out of the port it came in on. The others are
// consumed (neighbour_frame). Returns the burst without them.
uint16_t neighbour_burst(LcoreContext& ctx, const Snapshot& snapshot, rte_mbuf** pkts, uint16_t count) {
    uint16_t kept = 0;
    for (uint16_t i = 0; i < count; ++i) {
        rte_mbuf* m = pkts[i];
        const PacketMeta& meta = *packet_meta(m);
        if (SLUICE_LIKELY(!(meta.flags & kMetaNeighbour))) {
            pkts[kept++] = m;
            continue;
        }
        NeighbourMessage message;
        if (parse_neighbour(rte_pktmbuf_mtod(m, const uint8_t*), rte_pktmbuf_data_len(m), meta, message)) {
            if (message.has_sender_mac && ctx.neighbour_events) {
                NeighbourEvent event{message.sender, message.sender_mac, ingress_interface(m), message.family, {}};
                // Full (an ARP storm outpacing the control thread): the next one teaches it; counted so it shows.
                if (rte_ring_mp_enqueue_elem(ctx.neighbour_events, &event, sizeof event) != 0)
                    counter_add(ctx.counters.neighbour_events_lost);
            }
            if (message.solicitation && owns(snapshot, message.family, message.target, ingress_interface(m)) &&
                make_neighbour_reply(m, meta, message, snapshot.port_mac[m->port])) {
                counter_add(ctx.counters.neighbour_replies);
                send_out(ctx, m->port, m);
                continue;
            }
        }
        ctx.counters.drop(DropReason::neighbour_frame);
        rte_pktmbuf_free(m);
    }
    return kept;
}

// Worker 0: sends the solicitations the control thread asked for.
void send_solicitations(LcoreContext& ctx, const Snapshot& snapshot) {
    NeighbourRequest requests[kNeighbourRequestBurst];
    const unsigned n = rte_ring_dequeue_burst_elem(ctx.neighbour_requests, requests, sizeof(NeighbourRequest),
                                                   kNeighbourRequestBurst, nullptr);
    for (unsigned k = 0; k < n; ++k) {
        const NeighbourRequest& r = requests[k];
        const uint16_t port = interface_port(r.port);
        rte_mbuf* m = make_neighbour_solicitation(ctx.pool, r.family, r.sender, r.target, snapshot.port_mac[port]);
        if (!m) break;  // the pool is empty: the resolver asks again in a second
        set_egress_vlan(m, interface_vlan(r.port));
        counter_add(ctx.counters.neighbour_solicitations);
        send_out(ctx, port, m);
    }
}

// The worker's pipeline over one burst: neighbour frames, firewall and load balancer (when on), then forwarding.
// Takes ownership of every mbuf.
void run_pipeline(LcoreContext& ctx, const Snapshot& snapshot, rte_mbuf** pkts, uint16_t count, uint64_t now_tsc) {
    count = neighbour_burst(ctx, snapshot, pkts, count);
    if (ctx.conn_table && (snapshot.firewall->enabled || snapshot.lb->enabled())) {
        PacketRoute routes[kBurst];
        count = stateful_burst(ctx, snapshot, pkts, count, now_tsc, routes);
        if (count) forward_burst(ctx, snapshot, pkts, count, routes);
        return;
    }
    if (count) forward_burst(ctx, snapshot, pkts, count);
}

// Sends each pending burst to its worker: straight into this lcore's own pipeline when it is that worker (no ring
// hop), else into the worker's ring. What a full ring refuses is dropped and counted.
void flush_pending(LcoreContext& ctx, const Snapshot& snapshot, uint64_t now_tsc) {
    for (uint16_t w = 0; w < ctx.worker_count; ++w) {
        const uint16_t n = ctx.pending_count[w];
        if (n == 0) continue;
        ctx.pending_count[w] = 0;
        rte_mbuf** burst = ctx.pending[w].data();
        if (ctx.worker && w == ctx.worker_index) {
            run_pipeline(ctx, snapshot, burst, n, now_tsc);
            continue;
        }
        const unsigned sent = rte_ring_enqueue_burst(ctx.worker_rings[w], reinterpret_cast<void**>(burst), n, nullptr);
        counter_add(ctx.counters.ring_enqueued, sent);
        if (SLUICE_UNLIKELY(sent < n)) {
            ctx.counters.drop(DropReason::ring_full, n - sent);
            rte_pktmbuf_free_bulk(burst + sent, n - sent);
        }
    }
}

// Fragments under connection tracking get their datagram's ports (fragments.hpp) or are dropped; others pass.
uint16_t fragment_burst(LcoreContext& ctx, rte_mbuf** pkts, uint16_t count, uint64_t now_tsc) {
    uint16_t kept = 0;
    for (uint16_t i = 0; i < count; ++i) {
        rte_mbuf* m = pkts[i];
        if (SLUICE_UNLIKELY(packet_meta(m)->flags & kMetaFragment)) {
            const DropReason verdict = ctx.fragments->annotate(m, now_tsc);
            if (verdict != DropReason::none) {
                ctx.counters.drop(verdict);
                rte_pktmbuf_free(m);
                continue;
            }
        }
        pkts[kept++] = m;
    }
    ctx.fragments->sweep(now_tsc);
    return kept;
}

uint32_t rx_stage(LcoreContext& ctx, const Snapshot& snapshot, uint64_t now_tsc) {
    uint32_t received = 0;
    rte_mbuf* pkts[kBurst];
    DropReason verdicts[kBurst];
    for (uint16_t q = 0; q < ctx.rx_queue_count; ++q) {
        const RxQueue& rxq = ctx.rx_queues[q];
        const uint16_t n = rte_eth_rx_burst(rxq.port_id, rxq.queue_id, pkts, kBurst);
        if (n == 0) continue;
        received += n;
        PortCounters& port = ctx.counters.ports[rxq.port_id];
        uint64_t bytes = 0;
        for (uint16_t i = 0; i < n; ++i) bytes += rte_pktmbuf_pkt_len(pkts[i]);
        counter_add(port.rx_packets, n);
        counter_add(port.rx_bytes, bytes);

        parse_burst(pkts, n, verdicts, ctx.hash_flows || snapshot.routes.ecmp, &snapshot.martians, &snapshot.vlans);
        rte_mbuf* dropped[kBurst];
        uint16_t dropped_count = 0, valid = 0;
        for (uint16_t i = 0; i < n; ++i) {
            if (SLUICE_UNLIKELY(verdicts[i] != DropReason::none)) {
                ctx.counters.drop(verdicts[i]);
                dropped[dropped_count++] = pkts[i];
            } else {
                pkts[valid++] = pkts[i];
            }
        }
        if (dropped_count) rte_pktmbuf_free_bulk(dropped, dropped_count);
        // Blocklisted sources go before they cost a ring slot.
        if (snapshot.firewall->blocklist_v4 || snapshot.firewall->blocklist_v6)
            valid = early_drop_burst(ctx, *snapshot.firewall, pkts, valid);
        if (ctx.fragments) valid = fragment_burst(ctx, pkts, valid, now_tsc);
        if (ctx.worker_count == 1) {
            // One worker takes every packet: nothing to sort (the loop below costs a dependent counter update in
            // memory per packet).
            std::copy_n(pkts, valid, ctx.pending[0].data());
            ctx.pending_count[0] = valid;
        } else {
            const NatPool& pool = snapshot.lb->nat_pool;
            for (uint16_t i = 0; i < valid; ++i) {
                const uint16_t w = owning_worker(pkts[i], *packet_meta(pkts[i]), pool, ctx.worker_count);
                ctx.pending[w][ctx.pending_count[w]++] = pkts[i];
            }
        }
        flush_pending(ctx, snapshot, now_tsc);  // a pending burst never outlives one RX burst, so it never overflows
    }
    return received;
}

uint32_t worker_stage(LcoreContext& ctx, const Snapshot& snapshot, uint64_t now_tsc) {
    rte_mbuf* pkts[kBurst];
    const unsigned n =
        rte_ring_dequeue_burst(ctx.worker_rings[ctx.worker_index], reinterpret_cast<void**>(pkts), kBurst, nullptr);
    if (n == 0) return 0;
    counter_add(ctx.counters.ring_dequeued, n);
    run_pipeline(ctx, snapshot, pkts, static_cast<uint16_t>(n), now_tsc);
    return n;
}

void drain_tx(LcoreContext& ctx) {
    for (uint16_t i = 0; i < ctx.tx_port_count; ++i) {
        const uint16_t port = ctx.tx_ports[i];
        rte_eth_tx_buffer_flush(port, ctx.tx_queue, ctx.tx_buffers[port]);
    }
}

}  // namespace

uint32_t run_lcore_once(LcoreContext& ctx, const Snapshot& snapshot, uint64_t now_tsc) {
    uint32_t moved = 0;
    if (ctx.rx) moved += rx_stage(ctx, snapshot, now_tsc);
    if (ctx.worker) {
        moved += worker_stage(ctx, snapshot, now_tsc);
        if (ctx.conn_table) counter_add(ctx.counters.conn_expired, ctx.conn_table->expire(now_tsc, kExpiryBudget));
        if (ctx.sync_out) sync_housekeeping(ctx, snapshot, now_tsc);
        drain_tx(ctx);
    }
    return moved;
}

int lcore_main(void* arg) {
    LcoreContext& ctx = *static_cast<LcoreContext*>(arg);
    SharedState& shared = *ctx.shared;
    ctx.drain_interval_tsc = (rte_get_tsc_hz() + 1'000'000 - 1) / 1'000'000 * kDrainIntervalUs;
    ctx.next_drain_tsc = rte_rdtsc() + ctx.drain_interval_tsc;
    rte_rcu_qsbr_thread_online(shared.qsbr, ctx.qsbr_thread_id);
    // The previous iteration's start, when it moved packets: its whole length (this iteration's start minus that)
    // counts as busy, expiry and TX drain included. No second TSC read per iteration.
    uint64_t busy_start = 0;
    bool was_busy = false;

    for (;;) {
        const Phase phase = shared.phase.load(std::memory_order_acquire);
        const Snapshot& snapshot = *shared.snapshot.load(std::memory_order_acquire);
        const uint64_t now = rte_rdtsc();
        if (was_busy) counter_add(ctx.counters.busy_cycles, now - busy_start);
        uint32_t moved = 0;
        bool walked = false;

        if (ctx.rx) {
            if (SLUICE_LIKELY(phase == Phase::running)) moved += rx_stage(ctx, snapshot, now);
            else if (!ctx.rx_quiesced.load(std::memory_order_relaxed))
                ctx.rx_quiesced.store(true, std::memory_order_release);  // nothing of ours is pending any more
        }
        if (ctx.worker) {
            moved += worker_stage(ctx, snapshot, now);
            if (ctx.neighbour_requests && ctx.counters.polls % kNeighbourRequestPolls == 0 &&
                !rte_ring_empty(ctx.neighbour_requests))
                send_solicitations(ctx, snapshot);
            if (ctx.conn_table) counter_add(ctx.counters.conn_expired, ctx.conn_table->expire(now, kExpiryBudget));
            if (SLUICE_UNLIKELY(ctx.sync_out != nullptr)) sync_housekeeping(ctx, snapshot, now);
            walked = walk_slice(ctx, now, moved != 0);
        }

        if (SLUICE_UNLIKELY(phase == Phase::draining) && moved == 0) {
            // No producer is left (every RX lcore quiesced before this phase), so an empty ring stays empty.
            if (ctx.worker) drain_tx(ctx);
            rte_rcu_qsbr_thread_offline(shared.qsbr, ctx.qsbr_thread_id);
            return 0;
        }

        if (ctx.worker && now >= ctx.next_drain_tsc) {
            drain_tx(ctx);
            ctx.next_drain_tsc = now + ctx.drain_interval_tsc;
        }

        // This iteration's snapshot reference is dead from here on.
        rte_rcu_qsbr_quiescent(shared.qsbr, ctx.qsbr_thread_id);
        counter_add(ctx.counters.polls);
        was_busy = moved != 0;
        busy_start = now;
        if (moved) {
            counter_add(ctx.counters.busy_polls);
            ctx.idle_streak = 0;
        } else if (walked) {
            ctx.idle_streak = 0;  // walking the connections is the work: an idle sleep would wait out each slice
        } else if (ctx.idle_sleep_us && ++ctx.idle_streak >= kIdleStreakBeforeSleep) {
            // Opt-in: lets lcores that share a CPU (or the kernel, in the lab) run. Off by default. The lcore
            // already reported quiescent, so a sleeping lcore delays a snapshot swap by at most one sleep.
            rte_delay_us_sleep(ctx.idle_sleep_us);
        } else {
            rte_pause();
        }
    }
}

}  // namespace sluice

// Per-lcore counters: written by the owning lcore only (counter_add, no atomics with a lock prefix), read and summed
// by the control and telemetry threads.
#pragma once

#include <array>
#include <cstdint>

#include <rte_ethdev.h>

#include "common/compiler.hpp"
#include "common/drop_reason.hpp"

namespace sluice {

struct PortCounters {
    uint64_t rx_packets = 0;
    uint64_t rx_bytes = 0;
    uint64_t tx_packets = 0;
    uint64_t tx_bytes = 0;
};

struct alignas(kCacheLine) LcoreCounters {
    std::array<uint64_t, kDropReasonCount> drops{};
    uint64_t polls = 0;         // loop iterations: the heartbeat
    uint64_t busy_polls = 0;    // iterations that moved at least one packet
    uint64_t busy_cycles = 0;   // TSC cycles those iterations took, whole: busy share = busy_cycles / (seconds x TSC Hz)
    uint64_t ring_enqueued = 0; // handed to another worker
    uint64_t ring_dequeued = 0;
    uint64_t conn_inserts = 0;    // connections this worker started tracking
    uint64_t conn_expired = 0;    // and stopped tracking (timed out or removed early); live = inserts - expired
    uint64_t rejects_sent = 0;    // RSTs and ICMP unreachables sent for reject rules
    uint64_t too_big_sent = 0;    // ICMP "fragmentation needed" / ICMPv6 "packet too big" sent for packets over the MTU
    uint64_t error_replies_limited = 0;  // rejects, too-big and time-exceeded errors not sent: over dataplane.max_error_replies_per_second
    uint64_t echo_replies = 0;    // ICMP/ICMPv6 echo replies sent for pings of sluice's own addresses
    uint64_t time_exceeded_sent = 0;  // ICMP time exceeded sent for packets whose TTL expired (from the port's address)
    uint64_t neighbour_replies = 0;        // ARP replies and NAs sent for sluice's addresses
    uint64_t neighbour_solicitations = 0;  // ARP requests and NSs sent to resolve next hops and backends
    uint64_t neighbour_events_lost = 0;    // learned neighbours the full event ring could not take to the control thread
    uint64_t log_suppressed = 0;           // decisions to log that the log rate (or a full ring) left out
    uint64_t lb_adoptions = 0;             // dsr/tunnel connections picked up mid-stream (no SYN seen: ECMP moved them)
    uint64_t lb_stateless_forwards = 0;    // FINs and RSTs of unknown dsr/tunnel connections sent on by Maglev, no entry
    uint64_t syn_cookies_sent = 0;         // SYN+ACKs with a cookie sent for syn_proxy services (no state made)
    uint64_t syn_cookies_accepted = 0;     // ACKs with a valid cookie: the connection opened towards its backend
    std::array<PortCounters, RTE_MAX_ETHPORTS> ports{};

    void drop(DropReason reason, uint64_t n = 1) { counter_add(drops[static_cast<std::size_t>(reason)], n); }
};

// Sums of every lcore's counters, as the control thread sees them.
struct CounterTotals {
    std::array<uint64_t, kDropReasonCount> drops{};
    uint64_t polls = 0;
    uint64_t busy_polls = 0;
    uint64_t busy_cycles = 0;
    uint64_t ring_enqueued = 0;
    uint64_t ring_dequeued = 0;
    uint64_t conn_inserts = 0;
    uint64_t conn_expired = 0;
    uint64_t rejects_sent = 0;
    uint64_t too_big_sent = 0;
    uint64_t error_replies_limited = 0;
    uint64_t echo_replies = 0;
    uint64_t time_exceeded_sent = 0;
    uint64_t neighbour_replies = 0;
    uint64_t neighbour_solicitations = 0;
    uint64_t neighbour_events_lost = 0;
    uint64_t log_suppressed = 0;
    uint64_t lb_adoptions = 0;
    uint64_t lb_stateless_forwards = 0;
    uint64_t syn_cookies_sent = 0;
    uint64_t syn_cookies_accepted = 0;
    std::array<PortCounters, RTE_MAX_ETHPORTS> ports{};

    void add(const LcoreCounters& c);
    uint64_t total_drops() const;
};

}  // namespace sluice

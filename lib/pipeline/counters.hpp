// Per-lcore counters: written by the owning lcore only (counter_add, no atomics with a lock prefix), read and summed
// by the control and telemetry threads.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include <rte_ethdev.h>

#include "common/compiler.hpp"
#include "common/drop_reason.hpp"

namespace sluice {

// Every lcore counter, declared once (the drop reasons' habit): the LcoreCounters member, its CounterTotals sum, its
// /sluice/stats key and its Prometheus family all come from this table, so a counter cannot be added to one view
// and forgotten in another. Columns: member, telemetry key ("": not shown), Prometheus counter family ("": none),
// which lcores export it (every lcore with an "lcore" label, workers with a "worker" label, or only workers with a
// connection table), its unit (a count, or TSC cycles exported as seconds), and its help text.
#define SLUICE_LCORE_COUNTERS(X)                                                                                     \
    X(polls, "polls", "sluice_lcore_polls_total", every_lcore, count, "Poll loop iterations (the lcore heartbeat)")  \
    X(busy_polls, "busy_polls", "sluice_lcore_busy_polls_total", every_lcore, count,                                 \
      "Poll loop iterations that moved packets")                                                                     \
    X(busy_cycles, "busy_cycles", "sluice_lcore_busy_seconds_total", every_lcore, tsc_cycles,                        \
      "Time the poll loop spent in iterations that moved packets; rate() is the lcore's load, 0 to 1")               \
    X(ring_enqueued, "ring_enqueued", "", every_lcore, count, "Packets an RX lcore handed to a worker's input ring") \
    X(ring_dequeued, "ring_dequeued", "", every_lcore, count, "Packets a worker took from its input ring")           \
    X(conn_inserts, "conn_inserts", "sluice_conntrack_inserts_total", table_workers, count,                          \
      "Connections a worker started tracking")                                                                       \
    X(conn_expired, "conn_expired", "sluice_conntrack_expired_total", table_workers, count,                          \
      "Connections a worker stopped tracking (timed out, or removed early: a backend removed with drop, a NAT "      \
      "connection that found no port, a client that gave up a SYN-proxy handshake)")                                 \
    X(rejects_sent, "rejects_sent", "sluice_rejects_sent_total", workers, count,                                     \
      "TCP RSTs and ICMP unreachables sent for reject rules")                                                        \
    X(challenge_acks_sent, "tcp_challenge_acks_sent", "sluice_tcp_challenge_acks_sent_total", workers, count,        \
      "Challenge ACKs a worker sent for TCP RSTs in the window but not exact and SYNs on established connections")   \
    X(too_big_sent, "too_big_sent", "sluice_icmp_too_big_sent_total", workers, count,                                \
      "ICMP fragmentation-needed and ICMPv6 packet-too-big errors sent back for packets over the egress MTU")        \
    X(error_replies_limited, "error_replies_limited", "sluice_error_replies_limited_total", workers, count,          \
      "Reject replies and ICMP too-big, time-exceeded and unreachable errors a worker did not send: over "           \
      "dataplane.max_error_replies_per_second")                                                                      \
    X(rate_limit_overflow, "rate_limit_overflow", "sluice_rate_limit_overflow_total", workers, count,                \
      "New connections of per-source rate-limited rules judged on the rule's shared overflow bucket (the worker's "  \
      "table of sources was full)")                                                                                  \
    X(echo_replies, "echo_replies", "sluice_icmp_echo_replies_total", workers, count,                                \
      "ICMP and ICMPv6 echo replies sent for pings of sluice's own addresses (ports' addresses, VIPs, NAT pool)")    \
    X(time_exceeded_sent, "time_exceeded_sent", "sluice_icmp_time_exceeded_sent_total", workers, count,              \
      "ICMP time-exceeded errors sent for packets whose TTL or hop limit expired, from the ingress port's address")  \
    X(unreachables_sent, "unreachables_sent", "sluice_icmp_unreachable_sent_total", workers, count,                  \
      "ICMP/ICMPv6 destination unreachables sent for packets with no route or a reject route")                       \
    X(neighbour_replies, "neighbour_replies", "", every_lcore, count,                                                \
      "ARP replies and NAs sent for sluice's addresses")                                                             \
    X(neighbour_solicitations, "neighbour_solicitations", "", every_lcore, count,                                    \
      "ARP requests and NSs sent to resolve next hops and backends")                                                 \
    X(neighbour_events_lost, "neighbour_events_lost", "", every_lcore, count,                                        \
      "Learned neighbours the full event ring could not take to the control thread")                                 \
    X(log_suppressed, "", "", every_lcore, count, "Decisions to log that the log rate (or a full ring) left out")    \
    X(lb_adoptions, "lb_stateless_adoptions", "sluice_lb_stateless_adoptions_total", workers, count,                 \
      "dsr/tunnel connections a worker picked up mid-stream by Maglev (no SYN seen: another instance opened them)")  \
    X(lb_stateless_forwards, "lb_stateless_forwards", "sluice_lb_stateless_forwards_total", workers, count,          \
      "FINs and RSTs of unknown dsr/tunnel connections a worker sent to their Maglev backend without an entry")      \
    X(syn_cookies_sent, "syn_cookies_sent", "sluice_syn_cookies_sent_total", workers, count,                         \
      "SYN+ACKs with a SYN cookie a worker sent for syn_proxy services (no state made)")                             \
    X(syn_cookies_accepted, "syn_cookies_accepted", "sluice_syn_cookies_accepted_total", workers, count,             \
      "ACKs with a valid SYN cookie: connections a worker opened towards their backend")                             \
    X(sync_events_queued, "sync_events_queued", "sluice_sync_events_queued_total", table_workers, count,             \
      "Connection events a worker handed to the sync thread (opened, state changes, refreshes, closed)")             \
    X(sync_events_dropped, "sync_events_dropped", "sluice_sync_events_dropped_total", table_workers, count,          \
      "Connection events a worker dropped because its sync ring was full (the refresh walk sends them again)")       \
    X(sync_installed, "sync_installed", "sluice_sync_installed_total", table_workers, count,                         \
      "Connections a worker learned from a peer instance and installed in its table")                                \
    X(sync_updated, "sync_updated", "sluice_sync_updated_total", table_workers, count,                               \
      "Peers' events that updated (or removed) a connection already in a worker's table")                            \
    X(sync_refused, "sync_refused", "sluice_sync_refused_total", table_workers, count,                               \
      "Peers' connections a worker could not install: table full, NAT port taken here, or a backend it does not know")

enum class LcoreCounter : uint8_t {
#define SLUICE_LCORE_COUNTER_ENUM(member, ...) member,
    SLUICE_LCORE_COUNTERS(SLUICE_LCORE_COUNTER_ENUM)
#undef SLUICE_LCORE_COUNTER_ENUM
};

// Each port's software counters, kept by the lcores: /sluice/stats "port/NAME/<member>", Prometheus
// sluice_port_<member>_total{port}.
#define SLUICE_PORT_COUNTERS(X)          \
    X(rx_packets, "Packets received")    \
    X(rx_bytes, "Bytes received")        \
    X(tx_packets, "Packets transmitted") \
    X(tx_bytes, "Bytes transmitted")

struct PortCounters {
#define SLUICE_PORT_COUNTER_MEMBER(member, help) uint64_t member = 0;
    SLUICE_PORT_COUNTERS(SLUICE_PORT_COUNTER_MEMBER)
#undef SLUICE_PORT_COUNTER_MEMBER
};

struct alignas(kCacheLine) LcoreCounters {
    std::array<uint64_t, kDropReasonCount> drops{};
#define SLUICE_LCORE_COUNTER_MEMBER(member, key, family, exported_by, unit, help) uint64_t member = 0;
    SLUICE_LCORE_COUNTERS(SLUICE_LCORE_COUNTER_MEMBER)
    std::array<PortCounters, RTE_MAX_ETHPORTS> ports{};

    void drop(DropReason reason, uint64_t n = 1) { counter_add(drops[static_cast<std::size_t>(reason)], n); }
};
// Whole cache lines: the next lcore's counters never share one with these.
static_assert(sizeof(LcoreCounters) % kCacheLine == 0 && alignof(LcoreCounters) == kCacheLine);

// Sums of every lcore's counters, as the control thread sees them.
struct CounterTotals {
    std::array<uint64_t, kDropReasonCount> drops{};
    SLUICE_LCORE_COUNTERS(SLUICE_LCORE_COUNTER_MEMBER)
#undef SLUICE_LCORE_COUNTER_MEMBER
    std::array<PortCounters, RTE_MAX_ETHPORTS> ports{};

    void add(const LcoreCounters& c);
    uint64_t total_drops() const;
};

// Which lcores export a counter to Prometheus, and under which label.
enum class CounterExporters : uint8_t {
    every_lcore,    // label lcore="<EAL lcore id>"
    workers,        // label worker="<worker index>"
    table_workers,  // workers with a connection table, label worker="<worker index>"
};

enum class CounterUnit : uint8_t {
    count,
    tsc_cycles,  // exported as seconds
};

struct LcoreCounterInfo {
    std::string_view name;           // the member's name
    uint64_t LcoreCounters::*lcore;  // the owning lcore's slot
    uint64_t CounterTotals::*total;  // its sum
    std::string_view telemetry_key;  // "": not in /sluice/stats
    std::string_view family;         // "": not exported to Prometheus
    CounterExporters exported_by;
    CounterUnit unit;
    std::string_view help;
};

inline constexpr std::array kLcoreCounterInfo = {
// One entry per counter, its fields in LcoreCounterInfo's order: clang-format would lay them out in columns.
// clang-format off
#define SLUICE_LCORE_COUNTER_INFO(member, key, family, exported_by, unit, help)                                    \
    LcoreCounterInfo{#member, &LcoreCounters::member, &CounterTotals::member, key, family,                          \
                     CounterExporters::exported_by, CounterUnit::unit, help},
    SLUICE_LCORE_COUNTERS(SLUICE_LCORE_COUNTER_INFO)
#undef SLUICE_LCORE_COUNTER_INFO
    // clang-format on
};

struct PortCounterInfo {
    std::string_view name;  // the member's name, and the telemetry key after "port/NAME/"
    uint64_t PortCounters::*member;
    std::string_view family;
    std::string_view help;
};

inline constexpr std::array kPortCounterInfo = {
#define SLUICE_PORT_COUNTER_INFO(member, help) \
    PortCounterInfo{#member, &PortCounters::member, "sluice_port_" #member "_total", help},
    SLUICE_PORT_COUNTERS(SLUICE_PORT_COUNTER_INFO)
#undef SLUICE_PORT_COUNTER_INFO
};

}  // namespace sluice

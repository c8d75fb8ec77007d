#include "pipeline/counters.hpp"

namespace sluice {

void CounterTotals::add(const LcoreCounters& c) {
    for (std::size_t i = 0; i < kDropReasonCount; ++i) drops[i] += counter_read(c.drops[i]);
    polls += counter_read(c.polls);
    busy_polls += counter_read(c.busy_polls);
    busy_cycles += counter_read(c.busy_cycles);
    ring_enqueued += counter_read(c.ring_enqueued);
    ring_dequeued += counter_read(c.ring_dequeued);
    conn_inserts += counter_read(c.conn_inserts);
    conn_expired += counter_read(c.conn_expired);
    rejects_sent += counter_read(c.rejects_sent);
    too_big_sent += counter_read(c.too_big_sent);
    error_replies_limited += counter_read(c.error_replies_limited);
    echo_replies += counter_read(c.echo_replies);
    time_exceeded_sent += counter_read(c.time_exceeded_sent);
    neighbour_replies += counter_read(c.neighbour_replies);
    neighbour_solicitations += counter_read(c.neighbour_solicitations);
    neighbour_events_lost += counter_read(c.neighbour_events_lost);
    log_suppressed += counter_read(c.log_suppressed);
    lb_adoptions += counter_read(c.lb_adoptions);
    lb_stateless_forwards += counter_read(c.lb_stateless_forwards);
    syn_cookies_sent += counter_read(c.syn_cookies_sent);
    syn_cookies_accepted += counter_read(c.syn_cookies_accepted);
    for (std::size_t p = 0; p < ports.size(); ++p) {
        ports[p].rx_packets += counter_read(c.ports[p].rx_packets);
        ports[p].rx_bytes += counter_read(c.ports[p].rx_bytes);
        ports[p].tx_packets += counter_read(c.ports[p].tx_packets);
        ports[p].tx_bytes += counter_read(c.ports[p].tx_bytes);
    }
}

uint64_t CounterTotals::total_drops() const {
    uint64_t sum = 0;
    for (uint64_t d : drops) sum += d;
    return sum;
}

}  // namespace sluice

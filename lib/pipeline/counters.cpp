#include "pipeline/counters.hpp"

namespace sluice {

void CounterTotals::add(const LcoreCounters& c) {
    for (std::size_t i = 0; i < kDropReasonCount; ++i) drops[i] += counter_read(c.drops[i]);
    for (const LcoreCounterInfo& info : kLcoreCounterInfo) this->*info.total += counter_read(c.*info.lcore);
    for (std::size_t p = 0; p < ports.size(); ++p)
        for (const PortCounterInfo& info : kPortCounterInfo)
            ports[p].*info.member += counter_read(c.ports[p].*info.member);
}

uint64_t CounterTotals::total_drops() const {
    uint64_t sum = 0;
    for (uint64_t d : drops) sum += d;
    return sum;
}

}  // namespace sluice

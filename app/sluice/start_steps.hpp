// The daemon's start and stop steps that need no state of its own: the lcores the config names, the packet pools
// sized for the ports, and the totals logged at exit. Control thread only.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include <rte_mempool.h>

#include "config/config.hpp"
#include "dpdk/port.hpp"
#include "pipeline/counters.hpp"

namespace sluice {

// Refuses lcores the EAL did not enable and the main lcore (the control thread's).
void check_lcores(const Config& config);

// One pool per NUMA socket that has a port. Each pool is sized for its ports' descriptors plus every ring and
// lcore (a conservative bound when lcores span sockets). docs/architecture.md has the formula.
std::map<int, rte_mempool*> create_pools(const Config& config, const std::vector<std::unique_ptr<Port>>& ports,
                                         uint16_t workers);

// Each port's packets and bytes, and every drop reason that counted, to the log.
void log_totals(const CounterTotals& totals, const std::vector<std::unique_ptr<Port>>& ports);

}  // namespace sluice

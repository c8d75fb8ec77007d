// sluice's commands on the DPDK telemetry socket (dpdk-telemetry.py and sluicectl use them).
// Callbacks run on DPDK's telemetry thread; they only read per-lcore counters and port stats.
#pragma once

#include <string>
#include <vector>

#include <rte_mempool.h>

#include "pipeline/dataplane.hpp"

namespace sluice {

struct TelemetryPort {
    std::string name;
    uint16_t port_id;
};

// What the commands read. Owned by the daemon, which attaches it once the data plane runs and detaches it before
// tearing the data plane down.
struct TelemetryView {
    const Dataplane* dataplane = nullptr;
    std::vector<TelemetryPort> ports;
    std::vector<const rte_mempool*> pools;
};

// Registers /sluice/stats. Control thread, once, after rte_eal_init.
void register_telemetry_commands();
// nullptr detaches: commands then answer with an error.
void attach_telemetry_view(const TelemetryView* view);

}  // namespace sluice

// sluice's commands on the DPDK telemetry socket (dpdk-telemetry.py and sluicectl use them).
// Callbacks run on DPDK's telemetry thread; they only read per-lcore counters and port stats.
#pragma once

#include <functional>

#include "control/status.hpp"

namespace sluice {

// Runs a reload on the control thread and returns once it is done; set by the daemon.
using ReloadRequester = std::function<ReloadRecord()>;
// Explains a query ("tcp SRC:PORT DST:PORT [PORT]") on the control thread; one line per decision.
using ExplainRequester = std::function<std::vector<std::string>(const std::string&)>;

// Registers /sluice/stats, /sluice/rules, /sluice/config, /sluice/reload and /sluice/explain. Control thread, once, after rte_eal_init.
void register_telemetry_commands();
// Attaches what the commands read (the daemon does it once the data plane runs); nullptr detaches, and commands
// then answer with an error.
void attach_telemetry(const StatusView* view, ReloadRequester reload, ExplainRequester explain);

}  // namespace sluice

// sluice's commands on the DPDK telemetry socket (dpdk-telemetry.py and sluicectl use them).
// Callbacks run on DPDK's telemetry thread; they only read per-lcore counters and port stats.
#pragma once

#include <functional>

#include "control/status.hpp"

namespace sluice {

// Runs a reload on the control thread and returns once it is done; set by the daemon.
using ReloadRequester = std::function<ReloadRecord()>;
// Answers a command with parameters on the control thread, one line per item (explain, flows, dry-run).
using LinesRequester = std::function<std::vector<std::string>(const std::string&)>;

// The commands answered with lines: their requesters, by command.
struct LineCommands {
    LinesRequester explain;  // /sluice/explain: "PROTO SRC:PORT DST:PORT [PORT]"
    LinesRequester flows;    // /sluice/flows: "[ADDRESS] [port N] [tcp|udp|...]"
    LinesRequester dry_run;  // /sluice/dryrun: "[FILE]"
    LinesRequester drain;    // /sluice/drain: no parameters
};

// Registers /sluice/stats, /sluice/rules, /sluice/backends, /sluice/config, /sluice/reload, /sluice/explain,
// /sluice/flows, /sluice/dryrun, /sluice/bgp and /sluice/drain. Control thread, once, after rte_eal_init.
void register_telemetry_commands();
// Attaches what the commands read (the daemon does it once the data plane runs); nullptr detaches, and commands
// then answer with an error.
void attach_telemetry(const StatusView* view, ReloadRequester reload, LineCommands lines);

}  // namespace sluice

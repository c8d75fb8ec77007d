// sluice's commands on the DPDK telemetry socket (dpdk-telemetry.py and sluicectl use them).
// Callbacks run on DPDK's telemetry thread; they only read per-lcore counters and port stats.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "control/status.hpp"

namespace sluice {

// Runs a reload on the control thread and returns once it is done; set by the daemon.
using ReloadRequester = std::function<ReloadRecord()>;
// Answers a command with parameters on the control thread, one line per item (explain, flows, dry-run).
using LinesRequester = std::function<std::vector<std::string>(const std::string&)>;

// The commands answered with lines: their requesters, by command.
struct LineCommands {
    LinesRequester explain;     // /sluice/explain: "PROTO SRC:PORT DST:PORT [PORT]"
    LinesRequester flows;       // /sluice/flows: "[ADDRESS] [port N] [tcp|udp|...]"
    LinesRequester dry_run;     // /sluice/dryrun: "[FILE]"
    LinesRequester drain;       // /sluice/drain: no parameters
    LinesRequester routes;      // /sluice/routes: no parameters
    LinesRequester neighbours;  // /sluice/neighbours: no parameters
};

// Reload errors as a telemetry reply can carry them. A telemetry string holds RTE_TEL_MAX_STRING_LEN - 1 bytes and
// DPDK 22.11 cuts the rest silently, so each error goes out whole as consecutive pieces (cut between UTF-8
// characters), counts[i] saying how many error i took. A reply is at most 16 KiB and an array 512 entries: the errors
// that would not fit are replaced by one line saying how many were left out.
struct TelemetryTextPieces {
    std::vector<std::string> pieces;
    std::vector<uint64_t> counts;
};
TelemetryTextPieces split_for_telemetry(const std::vector<std::string>& texts, std::size_t json_budget_bytes,
                                        std::size_t max_pieces);

// Registers /sluice/stats, /sluice/rules, /sluice/backends, /sluice/config, /sluice/reload, /sluice/explain,
// /sluice/flows, /sluice/dryrun, /sluice/bgp, /sluice/drain, /sluice/routes and
// /sluice/neighbours. Control thread, once, after rte_eal_init.
void register_telemetry_commands();
// Attaches what the commands read (the daemon does it once the data plane runs); nullptr detaches, and commands
// then answer with an error.
void attach_telemetry(const StatusView* view, ReloadRequester reload, LineCommands lines);

}  // namespace sluice

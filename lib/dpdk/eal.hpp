// EAL start-up: the argument list sluice hands to rte_eal_init, and the guard that cleans the EAL up.
// Control thread only.
#pragma once

#include <string>
#include <vector>

#include "dpdk/port.hpp"

namespace sluice {

// argv for rte_eal_init: program name, the config's `eal:` list, one --vdev (or -a for a PCI address) per port,
// --no-pci when no port is a PCI device (so sluice never grabs a NIC it was not given), then the command line's
// extra arguments (after `--`), which come last so they win.
std::vector<std::string> build_eal_args(const std::string& program, const std::vector<std::string>& config_args,
                                        const std::vector<PortSpec>& ports, const std::vector<std::string>& extra_args);

// Why DPDK secondary processes (dpdk-dumpcap, dpdk-pdump, dpdk-proc-info) cannot attach with these EAL arguments:
// the first argument that prevents it and its reason, or an empty string when they can.
std::string secondary_process_blocker(const std::vector<std::string>& eal_args);

// Initialises the EAL or throws StartupError; rte_eal_cleanup runs when the guard goes.
class EalGuard {
public:
    explicit EalGuard(const std::vector<std::string>& args);
    ~EalGuard();
    EalGuard(const EalGuard&) = delete;
    EalGuard& operator=(const EalGuard&) = delete;
};

}  // namespace sluice

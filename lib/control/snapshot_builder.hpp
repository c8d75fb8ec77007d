// Builds the immutable Snapshot the lcores read from a validated config. Control thread.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <rte_ether.h>

#include "control/config.hpp"
#include "pipeline/snapshot.hpp"

namespace sluice {

// What the builder needs to know of a started port.
struct PortIdentity {
    std::string name;
    uint16_t id = 0;
    rte_ether_addr mac{};
};

// Builds the forwarding table, the firewall's rte_acl contexts and early-drop LPM tables (on socket), and room for
// the per-lcore rule counters of lcore_count lcores. Needs the EAL when the firewall is on. Throws
// std::invalid_argument when the config names a port that is not in ports, std::runtime_error when a table cannot
// be built.
// Stable rule ids by name, for the daemon's life: a rule keeps its id (and its counters) across reloads.
using StableRuleIds = std::map<std::string, uint32_t>;

std::unique_ptr<Snapshot> build_snapshot(const Config& config, const std::vector<PortIdentity>& ports,
                                         std::size_t lcore_count = 1, int socket = 0, std::size_t worker_count = 1,
                                         StableRuleIds* stable_ids = nullptr);

}  // namespace sluice

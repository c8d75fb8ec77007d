// Builds the immutable Snapshot the lcores read from a validated config. Pure (no EAL); control thread.
#pragma once

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

// Throws std::invalid_argument when the config names a port that is not in ports (the validator prevents it for a
// config the running ports were built from).
std::unique_ptr<Snapshot> build_snapshot(const Config& config, const std::vector<PortIdentity>& ports);

}  // namespace sluice

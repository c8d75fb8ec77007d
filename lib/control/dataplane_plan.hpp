// The data plane's shape for a config: which lcore polls which RX queues and works, ring and table sizes, NAT
// port ranges. Control thread, at start (the daemon; in-process tests build the same data plane from it).
#pragma once

#include <vector>

#include "config/config.hpp"
#include "control/snapshot_builder.hpp"
#include "pipeline/dataplane.hpp"

namespace sluice {

// ports: the config's ports, in its order, as the EAL knows them.
DataplaneSpec dataplane_spec(const Config& config, const std::vector<PortIdentity>& ports);

}  // namespace sluice

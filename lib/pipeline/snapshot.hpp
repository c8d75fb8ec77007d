// The immutable tables the lcores read: built by the control thread, published with one atomic store, read once
// per loop iteration. Nothing in a Snapshot changes after publication.
#pragma once

#include <array>
#include <cstdint>

#include <rte_ether.h>
#include <rte_ethdev.h>

namespace sluice {

// Where a packet that came in on a port leaves, and with which MAC addresses.
struct ForwardEntry {
    rte_ether_addr dst_mac{};  // the next hop's
    rte_ether_addr src_mac{};  // the egress port's own
    uint16_t out_port = 0;
    bool valid = false;
};

struct Snapshot {
    std::array<ForwardEntry, RTE_MAX_ETHPORTS> forward_by_in_port{};
};

}  // namespace sluice

// Early drop on the RX lcore: packets whose source is in an early-drop prefix set (firewall.early_drop) are dropped
// before they are steered to a worker, counted blocklisted. Neighbour frames (ARP, NS/NA) are never judged: they
// are sluice's own, not forwarded. RX lcores only (early_drop_burst); fast-path safe.
#pragma once

#include <cstdint>

#include <rte_mbuf.h>

#include "pipeline/lcore_context.hpp"
#include "pipeline/snapshot.hpp"

namespace sluice {

// Removes the packets whose source is in an early-drop set; returns how many are left (compacted to the front).
uint16_t early_drop_burst(LcoreContext& ctx, const FirewallTables& firewall, rte_mbuf** pkts, uint16_t count);

// Whether source is in an early-drop set: the same lookup for one address (explain; control thread).
bool early_dropped(const FirewallTables& firewall, IpFamily family, const IpAddress& source);

}  // namespace sluice

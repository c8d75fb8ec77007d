// The worker's stateful stage (firewall and load-balancing decision): connection lookup first (established traffic
// never pays for the rule set or Maglev), rte_acl classification over the burst only for packets that would open a
// connection, then allow (track; pick a backend when the destination is a service), deny, or reject (the refusal
// leaves through the ingress port). ICMP errors pass as related to the connection they quote or are dropped.
// Owning worker only; fast-path safe.
#pragma once

#include <cstdint>

#include <rte_mbuf.h>

#include "pipeline/lcore_context.hpp"
#include "pipeline/snapshot.hpp"

namespace sluice {

// Filters pkts in place and returns how many may go on (compacted to the front); the others are freed or sent back
// as rejects, and counted. count <= kBurst. New connections to a service get a backend (Maglev) and, for nat, a
// pool port and a second key for the replies; routes[k] (when given) says how kept packet k leaves.
// Without a firewall (services only) packets that belong to no service pass untracked.
uint16_t firewall_burst(LcoreContext& ctx, const Snapshot& snapshot, rte_mbuf** pkts, uint16_t count, uint64_t now_tsc,
                        PacketRoute* routes = nullptr);

// Early drop on the RX lcore: removes packets whose source is in an early-drop prefix set (counted blocklisted).
uint16_t blocklist_burst(LcoreContext& ctx, const FirewallTables& firewall, rte_mbuf** pkts, uint16_t count);

}  // namespace sluice

// The worker's L2/L3 forwarding stage: the way out (the ingress port's forward entry, else the route table: rte_fib
// bulk lookups, ECMP by the flow's hash, ICMP unreachable for no route), TTL/hop-limit decrement with an RFC 1624
// checksum update, MAC rewrite to the next hop (or a backend's MAC), the way out's VLAN tag (ports[].vlans), the load
// balancer's rewrites, and TX through the worker's own queue.
// Owning worker only; fast-path safe.
#pragma once

#include <cstdint>

#include <rte_mbuf.h>

#include "pipeline/lcore_context.hpp"
#include "pipeline/snapshot.hpp"

namespace sluice {

// Takes ownership of every mbuf: each is either buffered for TX or dropped and counted. routes (from
// stateful_burst, may be null) mark packets of balanced connections: rewritten for their backend (nat, dsr,
// tunnel) or back to their client (nat replies), then sent by the route to the address they leave for.
void forward_burst(LcoreContext& ctx, const Snapshot& snapshot, rte_mbuf** pkts, uint16_t count,
                   const PacketRoute* routes = nullptr);

// The TX buffer's error callback: counts refused packets as tx_full and frees them.
void count_tx_drops(rte_mbuf** unsent, uint16_t count, void* sink);

}  // namespace sluice

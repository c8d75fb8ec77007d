// The worker's stateful stage: connection tracking, the firewall's rules and the load balancer's decision, over a
// burst. Known connections are settled by the connection lookup alone (established traffic never pays for the rule
// set or Maglev); the other packets are triaged (sluice's own addresses, services, the SYN proxy, mid-stream pickup),
// classified by rte_acl per family, admitted (rule rate limits, the worker's new-connection cap) and opened (the
// entry, the Maglev backend, the NAT port and its reply key); refusals leave through the ingress port as rejects.
// ICMP errors pass as related to the connection they quote or are dropped. Owning worker only; fast-path safe.
// docs/architecture.md, "The stateful stage", walks through the phases.
#pragma once

#include <cstdint>

#include <rte_mbuf.h>

#include "pipeline/lcore_context.hpp"
#include "pipeline/snapshot.hpp"

namespace sluice {

// Filters pkts in place and returns how many may go on (compacted to the front); the others are freed or sent back
// (rejects, SYN cookies, echo replies), and counted. count <= kBurst. New connections to a service get a backend
// (Maglev) and, for nat, a pool port and a second key for the replies; routes[k] (when given) says how kept packet
// k leaves. Without a firewall (services only) packets that belong to no service pass untracked.
uint16_t stateful_burst(LcoreContext& ctx, const Snapshot& snapshot, rte_mbuf** pkts, uint16_t count, uint64_t now_tsc,
                        PacketRoute* routes = nullptr);

// Where a packet that belongs to no connection is headed, as the stateful stage triages it before the rules.
enum class NewPacketTarget : uint8_t {
    nat_pool,     // a NAT pool address: only replies of NAT connections are welcome (nat_no_connection)
    own_address,  // a port's address or a VIP that nothing of sluice's serves on this port (to_own_address)
    service,      // a VIP's service: the rules decide, then the load balancer
    untracked,    // no service and no firewall: passes untracked
    rules,        // no service: the rules decide
};
struct NewPacketDestination {
    NewPacketTarget target;
    int32_t service;  // index in lb.services when target is service
};

// The tcp_window_check of a new TCP connection: its rule's (rule: the config id, or kDefaultRule), else its
// service's, else the firewall's default.
TcpWindowCheck tcp_window_check_for(const FirewallTables& fw, uint32_t rule, const LbService* service);

// echo: the packet is an echo request to one of sluice's addresses (answered once the rules allow it).
NewPacketDestination new_packet_destination(const Snapshot& snapshot, const FiveTuple& tuple, bool echo);

}  // namespace sluice

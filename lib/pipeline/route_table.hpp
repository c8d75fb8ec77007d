// The route table the workers look destinations up in (rte_fib for IPv4, rte_fib6 for IPv6): connected routes from
// the ports' addresses, host routes to the next hops and backends sluice resolves, the config's static routes and the
// routes of a mirrored kernel table. The control thread writes it (routing/route_table_writer.hpp); workers only read
// it, through the Snapshot.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include <rte_ethdev.h>
#include <rte_ether.h>

#include "classify/rule.hpp"
#include "common/five_tuple.hpp"
#include "packet/vlan.hpp"

struct rte_fib;
struct rte_fib6;
struct rte_hash;

namespace sluice {

// Where a packet leaves, and with which MAC addresses: a forward entry's next hop, or one of a route's.
struct ForwardEntry {
    rte_ether_addr dst_mac{};  // the next hop's
    rte_ether_addr src_mac{};  // the egress port's own
    uint16_t out_port = 0;
    bool valid = false;
    bool awaiting_neighbour = false;  // next_hop given by address and not resolved yet: neighbour_unresolved
    uint16_t vlan = 0;                // the 802.1Q tag it leaves with (ports[].vlans); 0: untagged
};

// The way out on an interface (packet/vlan.hpp: a port, or one of its VLANs) to a neighbour at mac.
inline ForwardEntry forward_entry(uint16_t interface, const rte_ether_addr& mac,
                                  const std::array<rte_ether_addr, RTE_MAX_ETHPORTS>& port_mac) {
    const uint16_t port = interface_port(interface);
    return {
        .dst_mac = mac, .src_mac = port_mac[port], .out_port = port, .valid = true, .vlan = interface_vlan(interface)};
}

// via: to one of its next hops (ECMP); connected: to the destination itself on the route's port; blackhole: dropped;
// reject: dropped with an ICMP/ICMPv6 destination unreachable (administratively prohibited).
enum class RouteAction : uint8_t { via, connected, blackhole, reject };
// Where a route came from: a port's addresses, a host route to a next hop or backend sluice resolves, the config, a
// mirrored kernel table (routing.kernel_table). At one prefix the lowest value but kernel wins: config, neighbour,
// connected, then kernel (RouteTableWriter).
enum class RouteSource : uint8_t { connected, neighbour, config, kernel };
inline constexpr std::size_t kRouteSourceCount = 4;
const char* route_source_name(RouteSource source);

// A route as the control thread compiled it from the config, before its next hops are resolved.
struct CompiledRoute {
    struct Hop {
        IpAddress address{};
        uint16_t port = 0;  // the interface (packet/vlan.hpp) whose link it is on
        uint32_t weight = 1;
    };
    IpFamily family = IpFamily::none;
    Prefix prefix;
    RouteAction action = RouteAction::via;
    RouteSource source = RouteSource::config;
    uint16_t port = 0;  // connected: the link's interface (packet/vlan.hpp: a port, or one of its VLANs)
    std::vector<Hop> hops;
};

// One copy of the route table: the FIBs (a prefix's value: its route id + 1; 0: no route) and what each route does.
// Routes alike (same source, action and next hops) share a group, so a full table resolves few ECMP tables. The
// RouteTableWriter keeps two copies and writes only the one no snapshot holds (docs/adr/0006): rte_fib in DPDK 22.11
// has no RCU and frees tbl8 groups a concurrent lookup may still be reading. The snapshots a change of neighbours
// publishes share a copy.
struct RouteFib {
    rte_fib* v4 = nullptr;
    rte_fib6* v6 = nullptr;
    std::vector<uint32_t> group_of;     // by route id: its index in groups
    std::vector<CompiledRoute> groups;  // by group id: family, source, action, port, hops (no prefix); unused ones
                                        // have no hops and action blackhole
    RouteFib() = default;
    RouteFib(const RouteFib&) = delete;
    RouteFib& operator=(const RouteFib&) = delete;
    ~RouteFib();
};

// A route with its next hops resolved, as the workers use it.
struct RouteEntry {
    RouteAction action = RouteAction::blackhole;
    uint16_t port = 0;        // connected: the link's interface
    uint32_t first_slot = 0;  // via: its ECMP slots are RouteTables::slots[first_slot, first_slot + slot_count)
    uint32_t slot_count = 0;  // via: 0 while none of its next hops is resolved (neighbour_unresolved)
    uint32_t first_hop = 0;   // via: its next hops are RouteTables::hops[first_hop, first_hop + hops.size())
};

// Slots of a route's ECMP table (a prime, for Maglev): a next hop that leaves moves only its own flows.
inline constexpr uint32_t kEcmpSlots = 251;

// The key of a host on a connected link in RouteTables::hosts.
struct HostKey {
    IpAddress address;  // the family's bytes, the rest zero
    uint64_t family;    // 64 bits: no padding, whose bytes rte_hash would hash
};
static_assert(sizeof(HostKey) == 24);

struct RouteTables {
    std::shared_ptr<const RouteFib> fib;  // null: no routes at all
    std::vector<RouteEntry> entries;      // like fib->groups
    std::vector<uint32_t> slots;          // -> hops
    std::vector<ForwardEntry> hops;
    // Hosts on connected links sluice resolved because packets were routed to them (glean): HostKey -> index in
    // hops. Null while there are none.
    std::shared_ptr<rte_hash> hosts;
    bool ecmp = false;  // a route has several next hops: the RX lcores hash every flow (LcoreContext::hash_flows)

    // The next hop of a flow (its symmetric hash) on a via route; null while none of its next hops is resolved.
    const ForwardEntry* next_hop(const RouteEntry& entry, uint32_t flow_hash) const {
        if (entry.slot_count == 0) return nullptr;
        const uint32_t slot = static_cast<uint32_t>((uint64_t{flow_hash} * entry.slot_count) >> 32);
        return &hops[slots[entry.first_slot + slot]];
    }
    // The route of a FIB lookup's value (not 0).
    const RouteEntry& entry_of(uint64_t found) const { return entries[fib->group_of[found - 1]]; }
    // The route of one address and its prefix, or null: for the control thread (explain); workers look up whole
    // bursts.
    const RouteEntry* find(IpFamily family, const IpAddress& address, Prefix* matched = nullptr) const;
};

}  // namespace sluice

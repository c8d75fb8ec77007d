// The immutable tables the lcores read: built by the control thread, published with one atomic store, read once
// per loop iteration, freed by the control thread after an RCU grace period. Nothing in a Snapshot changes after
// publication except the per-lcore rule counters, each written by its own lcore only.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <rte_ethdev.h>
#include <rte_ether.h>

#include "classify/acl_classifier.hpp"
#include "classify/prefix_set_table.hpp"
#include "classify/rule.hpp"
#include "common/ip_proto.hpp"
#include "conntrack/tcp_state.hpp"
#include "lb/lb_tables.hpp"
#include "packet/martian.hpp"
#include "packet/parse.hpp"
#include "packet/vlan.hpp"
#include "pipeline/route_table.hpp"
#include "pipeline/source_limiter.hpp"
#include "pipeline/token_bucket.hpp"

namespace sluice {

// An address sluice answers ARP/ND for (and ICMP echo): its own on an interface, or a VIP / NAT pool address (on
// every one).
struct OwnedAddress {
    IpAddress address{};
    IpFamily family = IpFamily::none;
    uint16_t port = kAnyPort;  // the interface (packet/vlan.hpp: a port, or one of its VLANs)
    static constexpr uint16_t kAnyPort = UINT16_MAX;
};

// Whether address is one of sluice's own (Snapshot::port_addresses, service_addresses) on port; port kAnyPort: on
// any port. A linear scan: for neighbour frames and echo requests, never for every packet.
struct Snapshot;
bool owns(const Snapshot& snapshot, IpFamily family, const IpAddress& address, uint16_t port);
// Whether address is one of the ports' own addresses (on any port): scanned for each new connection, so only those
// (a few), never the VIPs (the load balancer's VIP table knows those).
bool is_port_address(const Snapshot& snapshot, IpFamily family, const IpAddress& address);
// The first of port's own addresses (ports[].addresses) of family, or null: where sluice's ICMP errors come from.
const IpAddress* port_address(const Snapshot& snapshot, IpFamily family, uint16_t port);

// New connections (or refused first packets) decided by each rule, per lcore: lcore slot s writes
// hits[s * rule_count + rule] only. The last index, rule_count, counts the default action.
struct RuleHits {
    std::vector<uint64_t> hits;
    std::size_t rule_count = 0;
};

// The rate-limited rules' buckets, one set per lcore slot (written by that lcore only): a bucket for a `per: rule`
// limit, a SourceLimiter for a `per: source` one.
struct RateLimiterState {
    std::vector<uint32_t> index;  // by rule id: its bucket's or its SourceLimiter's index in a slot's range
    std::size_t buckets_per_slot = 0;
    std::vector<TokenBucket> buckets;  // slot s owns [s * buckets_per_slot, (s + 1) * buckets_per_slot)
    std::size_t source_limiters_per_slot = 0;
    std::vector<std::unique_ptr<SourceLimiter>> source_limiters;  // by slot likewise
};

// The early-drop sets' tables and the prefixes they were built from. The snapshots of reloads that leave those
// prefixes as they were share them; the last one frees them.
struct Blocklist {
    std::unique_ptr<const PrefixSetTable> v4, v6;  // null: no prefix of that family
    std::vector<Prefix> v4_prefixes;  // what the tables hold, in address order (control/blocklist_builder.hpp)
    std::vector<Prefix> v6_prefixes;
};

// The L4 bytes of the packet that most likely opened a connection of this tuple, for the rules' verdict on a
// tuple alone (explain, a reload's flow walk): a TCP SYN, an ICMP echo request; nothing else for other protocols.
inline L4MatchBytes opening_match_bytes(const FiveTuple& tuple) {
    L4MatchBytes l4;
    if (tuple.proto == kIpProtoTcp) l4.tcp_flags = tcp::kSyn;
    else if (tuple.proto == kIpProtoIcmp && tuple.family == IpFamily::ipv4) l4.icmp_type = kIcmpEchoRequest;
    else if (tuple.proto == kIpProtoIcmpv6 && tuple.family == IpFamily::ipv6) l4.icmp_type = kIcmp6EchoRequest;
    return l4;
}

// What the rules say of a new connection: the rule that matched (its id, its place in the config) or the default.
inline constexpr uint32_t kDefaultRule = UINT32_MAX;
struct RuleVerdict {
    uint32_t rule = kDefaultRule;
    RuleAction action = RuleAction::allow;
};

struct FirewallTables {
    bool enabled = false;
    bool loose_pickup = false;
    TcpWindowCheck tcp_window_check = TcpWindowCheck::strict;  // for TCP connections whose rule and service say nothing
    RuleAction default_action = RuleAction::allow;
    std::shared_ptr<const AclClassifier> acl_v4;  // shared with the snapshot before when its rules stay the same
    std::shared_ptr<const AclClassifier> acl_v6;
    std::vector<uint32_t> v4_rule_ids;  // index in acl_v4's rules -> rule id (its place in the config)
    std::vector<uint32_t> v6_rule_ids;
    std::vector<RuleAction> actions;   // by rule id
    std::vector<uint32_t> stable_ids;  // by rule id: the rule's id for the daemon's life (by name), kept in entries
    std::vector<std::string> rule_names;
    const PrefixSetTable* blocklist_v4 = nullptr;  // early-drop prefix sets, matched on source addresses by RX
    const PrefixSetTable* blocklist_v6 = nullptr;  // lcores (both owned by blocklist)
    std::shared_ptr<const Blocklist> blocklist;
    std::size_t blocklist_prefixes = 0;
    std::unique_ptr<RuleHits> hits;                            // mutable counters, see RuleHits
    std::vector<RateLimit> limits;                             // by rule id
    std::vector<uint8_t> log_rule;                             // by rule id: 1 when its decisions are logged
    std::vector<std::optional<TcpWindowCheck>> window_checks;  // by rule id: its tcp_window_check, when it sets one
    bool log_default = false;
    double log_tokens_per_tsc = 0;              // each worker's decision-log budget (firewall.log_rate)
    std::unique_ptr<RateLimiterState> limiter;  // mutable, per lcore slot; null when no rule is limited

    FirewallTables() = default;
    FirewallTables(const FirewallTables&) = delete;

    const AclClassifier* acl(IpFamily family) const { return family == IpFamily::ipv4 ? acl_v4.get() : acl_v6.get(); }
    const std::vector<uint32_t>& rule_ids(IpFamily family) const {
        return family == IpFamily::ipv4 ? v4_rule_ids : v6_rule_ids;
    }
    // The rule -> action mapping, for a result of acl(family)->classify (kNoMatch: the default).
    RuleVerdict verdict(IpFamily family, uint32_t matched) const {
        if (matched == AclClassifier::kNoMatch) return {kDefaultRule, default_action};
        const uint32_t rule = rule_ids(family)[matched];
        return {rule, actions[rule]};
    }
    // The rules' verdict on one tuple that came in on in_port with those L4 bytes: for the control thread (explain,
    // flow walks); the stateful stage classifies whole bursts.
    RuleVerdict classify_one(const FiveTuple& tuple, uint16_t in_port, const L4MatchBytes& l4) const {
        uint32_t matched = AclClassifier::kNoMatch;
        const FiveTuple* one = &tuple;
        if (const AclClassifier* classifier = acl(tuple.family)) classifier->classify(&one, &in_port, &l4, &matched, 1);
        return verdict(tuple.family, matched);
    }
    FirewallTables& operator=(const FirewallTables&) = delete;
};

// The firewall and load-balancer tables are shared between snapshots: a health-check transition publishes a new
// snapshot with new Maglev tables and the same rule set (no rte_acl rebuild). Both are never null.
struct Snapshot {
    // forward: a packet that came in on a port with a valid entry leaves by it, whatever its destination (an
    // ingress policy route); packets of the other ports are looked up in routes.
    std::array<ForwardEntry, RTE_MAX_ETHPORTS> forward_by_in_port{};
    RouteTables routes;
    std::array<rte_ether_addr, RTE_MAX_ETHPORTS> port_mac{};  // each port's own MAC, for replies (reject)
    std::array<uint16_t, RTE_MAX_ETHPORTS> port_mtu{};
    // The VLANs each port carries (ports[].vlans): the RX lcores drop frames tagged for others (vlan_unknown).
    PortVlans vlans;
    // sluice's own addresses, answered in ARP/ND and echo (scanned linearly): the ports' `addresses`, each on its
    // port; VIPs and NAT pool addresses, once each, on every port.
    std::vector<OwnedAddress> port_addresses;
    std::vector<OwnedAddress> service_addresses;
    // Addresses no packet from the network may carry (dataplane.martians), checked by the RX lcores as they parse.
    MartianFilter martians;
    // New connections each worker may open (dataplane: max_new_connections_per_second, new_connection_burst),
    // whatever rule allowed them; tokens_per_tsc 0: no cap. The bucket is the worker's own (LcoreContext), so a
    // reload changes the rate and burst without refilling it.
    RateLimit new_connections{};
    // Error replies each worker may send (dataplane: max_error_replies_per_second, error_reply_burst): reject rules'
    // RSTs and ICMP unreachables, ICMP too-big and time-exceeded errors. Kept from a spoofed flood turning sluice
    // into a reflector, as Linux's icmp_ratelimit does; tokens_per_tsc 0: no cap. The worker's own bucket, as above.
    RateLimit error_replies{};
    std::shared_ptr<FirewallTables> firewall = std::make_shared<FirewallTables>();
    std::shared_ptr<const LbTables> lb = std::make_shared<LbTables>();
};

}  // namespace sluice

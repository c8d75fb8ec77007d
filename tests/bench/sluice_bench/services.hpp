// The snapshots the sections run on: forwarding null -> null, ClassBench-like rules, and the load balancer's
// services. Three TCP services on 192.0.2.100/101/102 port 80, one per mode (nat, dsr, tunnel), each with
// kLbBackends backends of weight 1 and a Maglev table of kLbMaglevSize slots; a NAT pool of kLbPoolV4 IPv4 addresses
// (10.1.0.100 and up, each 64512 ports for a single worker: enough for a pass of new connections) and one IPv6
// address, as config/sluice.yaml has.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "classbench.hpp"
#include "config/config.hpp"
#include "harness.hpp"
#include "pipeline/snapshot.hpp"

namespace sluice::bench {

constexpr uint32_t kLbBackends = 10;
constexpr uint32_t kLbMaglevSize = 65537;
constexpr uint32_t kLbPoolV4 = 8;
constexpr uint32_t kVipNat = 0xc0000264;     // 192.0.2.100 (host order)
constexpr uint32_t kVipDsr = 0xc0000265;     // 192.0.2.101
constexpr uint32_t kVipTunnel = 0xc0000266;  // 192.0.2.102
constexpr uint32_t kNotAVip = 0xc00002c8;    // 192.0.2.200: the destination of the connections of no service
constexpr uint16_t kVipPort = 80, kNatBackendPort = 8080;

IpAddress v4(uint32_t host);

// Adds the three services and the NAT pool to config.
void add_services(Config& config);

// A snapshot forwarding null -> null with the rules (all allow, default allow) when firewall, and the three
// services when services.
std::unique_ptr<Snapshot> make_snapshot(const Dpdk& d, const std::vector<RuleSpec>& rules, bool services = false,
                                        bool firewall = true);

}  // namespace sluice::bench

// A firewall rule as the control plane compiles it: one address family, lists resolved (prefix sets expanded,
// port names resolved to DPDK port ids). Plain data; control thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/five_tuple.hpp"

namespace sluice {

struct Prefix {
    IpAddress address{};  // network byte order, host bits zero
    uint8_t length = 0;   // 0..32 (IPv4) or 0..128 (IPv6)
    friend bool operator==(const Prefix&, const Prefix&) = default;
};

struct PortRange {  // host byte order, inclusive
    uint16_t first = 0;
    uint16_t last = 65535;
    friend bool operator==(const PortRange&, const PortRange&) = default;
};

enum class RuleAction : uint8_t { allow, deny, reject };

inline constexpr uint16_t kAnyProtocol = 256;

struct Rule {
    std::string name;
    IpFamily family = IpFamily::ipv4;
    std::vector<uint16_t> in_ports;            // DPDK port ids; empty: any
    std::vector<Prefix> sources;               // empty: any
    std::vector<Prefix> destinations;          // empty: any
    uint16_t protocol = kAnyProtocol;          // kIpProto* (common/ip_proto.hpp) or kAnyProtocol
    std::vector<PortRange> source_ports;       // empty: any. Only meaningful for TCP/UDP/SCTP rules
    std::vector<PortRange> destination_ports;  // empty: any
    RuleAction action = RuleAction::allow;
};

}  // namespace sluice

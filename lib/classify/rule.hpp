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

// An inclusive range of ICMP/ICMPv6 types or codes.
struct IcmpRange {
    uint8_t first = 0;
    uint8_t last = 255;
    friend bool operator==(const IcmpRange&, const IcmpRange&) = default;
};

// A TCP rule's test of the flags byte (RFC 9293 3.1, with ECE and CWR): (flags & mask) == value, as pf's
// `flags S/SA` and nftables' `tcp flags syn / syn,ack`. mask 0 matches every packet.
struct TcpFlagsMatch {
    uint8_t value = 0;
    uint8_t mask = 0;
    friend bool operator==(const TcpFlagsMatch&, const TcpFlagsMatch&) = default;
};

// The bytes of a packet's L4 header that rules match besides the ports: the TCP flags of a TCP packet, the type and
// code of an ICMP packet of the family's own ICMP protocol (ICMPv6 for IPv6); 0 otherwise.
struct L4MatchBytes {
    uint8_t tcp_flags = 0;
    uint8_t icmp_type = 0;
    uint8_t icmp_code = 0;
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
    std::vector<IcmpRange> icmp_types;         // empty: any. Only meaningful for ICMP rules of the family's ICMP
    std::vector<IcmpRange> icmp_codes;         // empty: any
    TcpFlagsMatch tcp_flags;                   // only meaningful for TCP rules
    RuleAction action = RuleAction::allow;
};

}  // namespace sluice

// The layout of rte_acl's search key and rules in an AclClassifier, per address family: the key's structs, the
// rule fields' indexes, and the rule type. Internal to lib/classify (acl_classifier.cpp, acl_expansion.cpp).
#pragma once

#include <cstdint>
#include <type_traits>

#include <rte_acl.h>

#include "common/five_tuple.hpp"
#include "common/ip_proto.hpp"

namespace sluice::acl {

// The search key rte_acl reads for one packet, in network byte order. rte_acl's layout rules (rte_acl.h,
// programmer's guide "Packet Classification and Access Control"): the first field is one byte, every other field
// belongs to a 4-byte input group whose bytes are all covered by fields. Field offsets below are offsets into these
// structs; the data pointers handed to rte_acl_classify point at their first byte.
//
// The ingress port and the TCP flags get a whole 4-byte group each (a narrower field would leave part of a group
// uncovered). When no rule names a port or tests flags, rte_acl drops that always-wild group at build time, so it
// costs nothing then. ICMP has no ports: an ICMP packet of the family's own ICMP protocol carries its type and code
// in the port slots, and ICMP rules match them there (one input group for both, no more fields).
struct Ipv4Key {
    uint8_t proto;
    uint8_t pad[3];
    uint32_t in_port;  // big-endian DPDK port id
    uint32_t src;
    uint32_t dst;
    uint16_t src_port;   // ICMP: the type, big-endian
    uint16_t dst_port;   // ICMP: the code
    uint32_t tcp_flags;  // big-endian: the flags byte is the last one
};
static_assert(sizeof(Ipv4Key) == 24);

struct Ipv6Key {
    uint8_t proto;
    uint8_t pad[3];
    uint32_t in_port;
    uint32_t src[4];
    uint32_t dst[4];
    uint16_t src_port;
    uint16_t dst_port;
    uint32_t tcp_flags;
};
static_assert(sizeof(Ipv6Key) == 48);

// Field indexes inside an rte_acl rule (rte_acl_field[]); the address fields of IPv6 take four slots each.
enum : uint8_t { kFieldProto = 0, kFieldInPort = 1, kFieldSrc = 2 };

template <IpFamily F>
struct Layout;

template <>
struct Layout<IpFamily::ipv4> {
    using Key = Ipv4Key;
    static constexpr uint32_t kAddrWords = 1;
};

template <>
struct Layout<IpFamily::ipv6> {
    using Key = Ipv6Key;
    static constexpr uint32_t kAddrWords = 4;
};

template <IpFamily F>
constexpr uint32_t field_dst() {
    return kFieldSrc + Layout<F>::kAddrWords;
}
template <IpFamily F>
constexpr uint32_t field_src_port() {
    return field_dst<F>() + Layout<F>::kAddrWords;
}
template <IpFamily F>
constexpr uint32_t field_tcp_flags() {
    return field_src_port<F>() + 2;
}
template <IpFamily F>
constexpr uint32_t field_count() {
    return field_tcp_flags<F>() + 1;
}
static_assert(field_count<IpFamily::ipv6>() <= RTE_ACL_MAX_FIELDS);

// The family's own ICMP protocol: the one whose type and code rules match (config refuses the other).
template <IpFamily F>
constexpr uint8_t own_icmp() {
    return F == IpFamily::ipv4 ? kIpProtoIcmp : kIpProtoIcmpv6;
}

RTE_ACL_RULE_DEF(AclRule4, field_count<IpFamily::ipv4>());
RTE_ACL_RULE_DEF(AclRule6, field_count<IpFamily::ipv6>());

template <IpFamily F>
using AclRule = std::conditional_t<F == IpFamily::ipv4, AclRule4, AclRule6>;

}  // namespace sluice::acl

// Helpers for the classify tests: rule and tuple builders, and the plain linear first-match matcher the rte_acl
// classifier is checked against. The reference is written straight from the Rule comments, sharing no code with
// lib/classify, so a shared misunderstanding of byte order or field layout cannot hide.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "classify/acl_classifier.hpp"
#include "classify/rule.hpp"
#include "common/five_tuple.hpp"

namespace sluice::test {

inline IpAddress addr4(const char* text) {
    in_addr a{};
    if (inet_pton(AF_INET, text, &a) != 1) throw std::invalid_argument(text);
    return IpAddress::from_v4(a.s_addr);
}

inline IpAddress addr6(const char* text) {
    in6_addr a{};
    if (inet_pton(AF_INET6, text, &a) != 1) throw std::invalid_argument(text);
    return IpAddress::from_v6(a.s6_addr);
}

// Zeroes the host bits of `a` past `length`.
inline IpAddress mask_address(IpAddress a, unsigned length) {
    for (unsigned byte = 0; byte < 16; ++byte) {
        const unsigned first_bit = byte * 8;
        if (length >= first_bit + 8) continue;
        const unsigned keep = length > first_bit ? length - first_bit : 0;
        a.bytes[byte] &= static_cast<uint8_t>(keep == 0 ? 0 : 0xff << (8 - keep));
    }
    return a;
}

inline Prefix prefix4(const char* text, uint8_t length) { return Prefix{mask_address(addr4(text), length), length}; }
inline Prefix prefix6(const char* text, uint8_t length) { return Prefix{mask_address(addr6(text), length), length}; }

// Ports in host byte order here; the tuple stores them in network byte order, as parse_frame does.
inline FiveTuple tuple4(uint8_t proto, const char* src, const char* dst, uint16_t sport, uint16_t dport) {
    FiveTuple t;
    t.family = IpFamily::ipv4;
    t.proto = proto;
    t.src = addr4(src);
    t.dst = addr4(dst);
    t.src_port = htons(sport);
    t.dst_port = htons(dport);
    return t;
}

inline FiveTuple tuple6(uint8_t proto, const char* src, const char* dst, uint16_t sport, uint16_t dport) {
    FiveTuple t = tuple4(proto, "0.0.0.0", "0.0.0.0", sport, dport);
    t.family = IpFamily::ipv6;
    t.src = addr6(src);
    t.dst = addr6(dst);
    return t;
}

inline uint32_t classify_one(const AclClassifier& c, const FiveTuple& t, uint16_t in_port = 0,
                             const L4MatchBytes& l4 = {}) {
    const FiveTuple* tp = &t;
    uint32_t result = 0;
    c.classify(&tp, &in_port, &l4, &result, 1);
    return result;
}

// ---- the reference: a linear scan, first match wins ----

inline bool prefix_contains(const Prefix& p, const IpAddress& a) { return mask_address(a, p.length) == p.address; }

inline bool rule_uses_ports(const Rule& r) {
    return r.protocol == IPPROTO_TCP || r.protocol == IPPROTO_UDP || r.protocol == IPPROTO_SCTP;
}

// The family's own ICMP protocol, whose type and code ICMP rules test.
inline bool rule_tests_icmp(const Rule& r) {
    return r.protocol == (r.family == IpFamily::ipv4 ? int{IPPROTO_ICMP} : int{IPPROTO_ICMPV6});
}

inline bool rule_matches(const Rule& r, const FiveTuple& t, uint16_t in_port, const L4MatchBytes& l4) {
    if (!r.in_ports.empty() && std::find(r.in_ports.begin(), r.in_ports.end(), in_port) == r.in_ports.end())
        return false;
    if (r.protocol != kAnyProtocol && r.protocol != t.proto) return false;
    auto any_prefix = [](const std::vector<Prefix>& list, const IpAddress& a) {
        return list.empty() ||
               std::any_of(list.begin(), list.end(), [&](const Prefix& p) { return prefix_contains(p, a); });
    };
    if (!any_prefix(r.sources, t.src) || !any_prefix(r.destinations, t.dst)) return false;
    if (r.protocol == IPPROTO_TCP && (l4.tcp_flags & r.tcp_flags.mask) != r.tcp_flags.value) return false;
    if (rule_tests_icmp(r)) {
        auto any_icmp = [](const std::vector<IcmpRange>& list, uint8_t value) {
            return list.empty() || std::any_of(list.begin(), list.end(), [&](const IcmpRange& range) {
                       return range.first <= value && value <= range.last;
                   });
        };
        return any_icmp(r.icmp_types, l4.icmp_type) && any_icmp(r.icmp_codes, l4.icmp_code);
    }
    if (!rule_uses_ports(r)) return true;
    auto any_range = [](const std::vector<PortRange>& list, uint16_t port_be) {
        const uint16_t port = ntohs(port_be);
        return list.empty() || std::any_of(list.begin(), list.end(),
                                           [&](const PortRange& pr) { return pr.first <= port && port <= pr.last; });
    };
    return any_range(r.source_ports, t.src_port) && any_range(r.destination_ports, t.dst_port);
}

inline uint32_t reference_first_match(const std::vector<Rule>& rules, const FiveTuple& t, uint16_t in_port,
                                      const L4MatchBytes& l4) {
    for (std::size_t i = 0; i < rules.size(); ++i)
        if (rule_matches(rules[i], t, in_port, l4)) return static_cast<uint32_t>(i);
    return AclClassifier::kNoMatch;
}

}  // namespace sluice::test

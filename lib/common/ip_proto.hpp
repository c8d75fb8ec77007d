#pragma once

#include <cstdint>

namespace sluice {

// IANA protocol numbers: the IPv4 protocol and IPv6 next-header field values sluice reads or writes. One vocabulary
// for lib/, typed as the header field is (<netinet/in.h>'s IPPROTO_* are ints).
inline constexpr uint8_t kIpProtoHopByHop = 0;  // IPv6 hop-by-hop options (RFC 8200 4.3)
inline constexpr uint8_t kIpProtoIcmp = 1;
inline constexpr uint8_t kIpProtoIpip = 4;  // IPv4 in IP (RFC 2003)
inline constexpr uint8_t kIpProtoTcp = 6;
inline constexpr uint8_t kIpProtoUdp = 17;
inline constexpr uint8_t kIpProtoIpv6 = 41;      // IPv6 in IP (RFC 2473)
inline constexpr uint8_t kIpProtoRouting = 43;   // IPv6 routing header
inline constexpr uint8_t kIpProtoFragment = 44;  // IPv6 fragment header
inline constexpr uint8_t kIpProtoAh = 51;        // authentication header: its length counts 4-byte words
inline constexpr uint8_t kIpProtoIcmpv6 = 58;
inline constexpr uint8_t kIpProtoDestOpts = 60;  // IPv6 destination options
inline constexpr uint8_t kIpProtoSctp = 132;

}  // namespace sluice

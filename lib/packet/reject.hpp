// Errors sluice sends back to a packet's sender, built in place in its mbuf.
//
// Turns a packet into the refusal a `reject` rule sends back: a TCP RST for TCP (RFC 9293 §3.10.7.1), an ICMP
// destination unreachable "administratively prohibited" (RFC 792 / RFC 1812 code 13) or ICMPv6 code 1 (RFC 4443)
// for the rest. The reply is built in place in the same mbuf, from the packet's destination to its source, with
// the ingress port's MAC as source. Fast-path safe (no allocation); owning worker only.
#pragma once

#include <rte_ether.h>
#include <rte_mbuf.h>

#include "packet/packet_meta.hpp"

namespace sluice {

// False when no reply may be sent (the packet is itself a RST or an ICMP error, or a non-first fragment); the
// caller then only drops it.
bool make_reject(rte_mbuf* m, const PacketMeta& meta, const rte_ether_addr& own_mac);

// Turns a packet too big for the egress link (mtu: its IP MTU) into the error a router sends back so its sender
// learns the path MTU: ICMP "fragmentation needed" with the next-hop MTU (RFC 1191) for IPv4 with DF set, ICMPv6
// "packet too big" (RFC 8201) for IPv6; built in place as make_reject's are. False when none may be sent: IPv4
// without DF (its sender allowed fragmentation, which sluice does not do), an ICMP error, a later fragment, a
// multicast or broadcast destination, a source that is no unicast address, a TTL or hop limit that expires here.
bool make_too_big(rte_mbuf* m, const PacketMeta& meta, uint16_t mtu, const rte_ether_addr& own_mac);

// Turns a packet whose TTL or hop limit expires here into ICMP "time exceeded in transit" (type 11 / ICMPv6 type 3,
// code 0), from `source` (the ingress port's own address: traceroute shows the hop as it is), built in place as
// make_too_big's are. False when none may be sent (an ICMP error, a later fragment, a multicast or broadcast
// destination, a source that is no unicast address).
bool make_time_exceeded(rte_mbuf* m, const PacketMeta& meta, const IpAddress& source, const rte_ether_addr& own_mac);

// Turns a packet sluice cannot route into ICMP destination unreachable from `source` (the ingress port's own
// address), built in place as make_time_exceeded's is: "net unreachable" (type 3 code 0 / ICMPv6 type 1 code 0, no
// route to destination) when no route matched, "administratively prohibited" (3/13, ICMPv6 1/1) for a reject route.
// False when none may be sent (as make_time_exceeded).
bool make_unreachable(rte_mbuf* m, const PacketMeta& meta, bool prohibited, const IpAddress& source,
                      const rte_ether_addr& own_mac);

// Whether the packet is an ICMP echo request (ICMPv6: type 128), the one query sluice answers for its own addresses.
bool is_echo_request(const rte_mbuf* m, const PacketMeta& meta);

// Turns an echo request to one of sluice's addresses into its echo reply (RFC 792, RFC 4443 4.2), in place: addresses
// swapped, TTL 64, the same identifier, sequence and data, sent back out of the ingress port with its MAC. False
// when none may be sent: not an echo request, a fragment (sluice does not reassemble), IPv6 extension headers, a bad
// ICMP checksum, or a source that is no unicast address (unspecified, multicast, broadcast: RFC 1122 3.2.2.6).
bool make_echo_reply(rte_mbuf* m, const PacketMeta& meta, const rte_ether_addr& own_mac);

}  // namespace sluice

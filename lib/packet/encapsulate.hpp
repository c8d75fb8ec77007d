// IPIP / IPv6-in-IPv6 encapsulation of one parsed packet (Katran's outer header), for tunnel services. Pure apart
// from the mbuf it is given; fast-path safe.
#pragma once

#include <cstdint>

#include <rte_mbuf.h>

#include "common/five_tuple.hpp"
#include "packet/packet_meta.hpp"

namespace sluice {

// Replaces the L2 header with a fresh Ethernet header and an outer IP header of the packet's family (IPIP, protocol 4,
// for IPv4; next header 41 for IPv6) from outer_src to outer_dst, TTL/hop limit 64; the inner packet is left as it
// came (Ethernet padding trimmed). The Ethernet addresses are left for the caller. Returns false (nothing
// changed) when the result would exceed mtu (the outer IP packet's size) or the mbuf lacks headroom.
bool encapsulate(rte_mbuf* m, const PacketMeta& meta, const IpAddress& outer_src, const IpAddress& outer_dst,
                 uint16_t mtu);

}  // namespace sluice

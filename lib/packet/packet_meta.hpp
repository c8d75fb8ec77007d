// What the RX lcore learned about a frame (PacketMeta and its flags), and how it travels to the worker: in a
// registered dynamic field of the mbuf, so the worker never parses again.
#pragma once

#include <cstdint>
#include <type_traits>

#include <rte_mbuf.h>
#include <rte_mbuf_dyn.h>

#include "common/five_tuple.hpp"
// Code that reads a PacketMeta mostly fills it too: the parser of a frame and of a burst come with it.
#include "packet/parse.hpp"
#include "packet/parse_burst.hpp"

namespace sluice {

struct PacketMeta {
    uint32_t flow_hash;  // symmetric_flow_hash of the tuple
    uint16_t l3_offset;  // from the start of the frame to the IP header (14, 18 or 22)
    uint16_t l4_offset;  // from the start of the frame to the L4 header, 0 when there is none (non-first fragment)
    IpFamily family;
    uint8_t l4_proto;  // kIpProto* (common/ip_proto.hpp), after the IPv6 extension headers
    uint8_t flags;     // kMeta*
    uint8_t reserved;
    uint16_t fragment_src_port;  // kMetaFragmentPorts: the datagram's ports, from its first fragment (network order)
    uint16_t fragment_dst_port;
};
// The mbuf's dynamic field area (44 bytes) is shared by every PMD and library that registers a field; the meta is
// written and read there in place, as plain bytes.
static_assert(sizeof(PacketMeta) == 16 && alignof(PacketMeta) == 4);
static_assert(std::is_trivially_copyable_v<PacketMeta> && std::is_standard_layout_v<PacketMeta>);

inline constexpr uint8_t kMetaFragment = 1;   // an IPv4 or IPv6 fragment (hashed on addresses and protocol only)
inline constexpr uint8_t kMetaIcmpError = 2;  // an ICMP/ICMPv6 error: the tuple and hash are those of the quoted flow
inline constexpr uint8_t kMetaNeighbour = 4;  // an ARP frame, or an ICMPv6 NS/NA (neighbour.hpp, classify_neighbour)
inline constexpr uint8_t kMetaFragmentTiny = 8;    // a first fragment that ends inside its L4 header (RFC 1858)
inline constexpr uint8_t kMetaFragmentPorts = 16;  // fragment_*_port hold the ports (fragments.hpp); flow_hash has them

// Offset of the PacketMeta dynfield; set once by register_packet_meta() before any lcore starts.
extern int g_packet_meta_offset;

// Control thread, once after EAL init. Returns false (rte_errno set) when the dynfield area is exhausted.
bool register_packet_meta();

inline PacketMeta* packet_meta(rte_mbuf* m) { return RTE_MBUF_DYNFIELD(m, g_packet_meta_offset, PacketMeta*); }

}  // namespace sluice

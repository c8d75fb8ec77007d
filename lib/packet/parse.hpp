// Parses one frame once, on the RX lcore: validates the L2/L3/L4 headers, fills the five-tuple and the offsets the
// worker needs, and names the reason when the frame is malformed. Pure and allocation-free; fast-path safe.
#pragma once

#include <cstdint>

#include "common/drop_reason.hpp"
#include "common/five_tuple.hpp"
#include "common/ip_proto.hpp"

namespace sluice {

struct PacketMeta;  // packet_meta.hpp

// ICMP echo types: the identifier is an echo's flow "port"; sluice answers requests to its own addresses.
inline constexpr uint8_t kIcmpEchoRequest = 8, kIcmpEchoReply = 0;
inline constexpr uint8_t kIcmp6EchoRequest = 128, kIcmp6EchoReply = 129;

// Whether an ICMP/ICMPv6 type is an error message (RFC 792, RFC 4443 2.1), which quotes the packet it answers.
inline bool is_icmp_error(uint8_t proto, uint8_t type) {
    if (proto == kIpProtoIcmp) return type == 3 || type == 4 || type == 5 || type == 11 || type == 12;
    return proto == kIpProtoIcmpv6 && type >= 1 && type <= 4;
}

// Where a fragment sits in its datagram, for a frame parse_frame accepted with kMetaFragment.
struct FragmentInfo {
    uint32_t id;      // IPv4: 16 bits; IPv6: the fragment header's 32
    uint32_t offset;  // bytes
    bool more;        // more fragments follow
};
FragmentInfo fragment_info(const uint8_t* frame, const PacketMeta& meta);
// The ports (network order) in the L4 header of a first fragment that is not kMetaFragmentTiny; 0 for protocols
// without ports (an ICMP echo's identifier in both, as for unfragmented packets).
void first_fragment_ports(const uint8_t* frame, const PacketMeta& meta, uint16_t& src_port, uint16_t& dst_port);

struct ParseOptions {
    bool ipv4_checksum_verified = false;  // the NIC already checked it (RTE_MBUF_F_RX_IP_CKSUM_GOOD)
    bool hash_flow = true;                // fill meta.flow_hash; false leaves it 0 (LcoreContext::hash_flows)
};

// Returns DropReason::none and fills meta and tuple, or the reason the frame must be dropped. datagram_end gets the
// offset just past the IP datagram (its total length, or payload length + 40, from l3_offset), or length for a frame
// with no IP datagram: the bytes past it (Ethernet padding, or anything appended) belong to no header, and the RX
// lcore trims them so no stage forwards them.
DropReason parse_frame(const uint8_t* frame, uint32_t length, ParseOptions options, PacketMeta& meta, FiveTuple& tuple,
                       uint32_t& datagram_end);

// The worker's side: rebuilds the tuple parse_frame gave a frame it accepted, from the frame and its meta, without
// validating again; tcp_flags gets the TCP flag byte (0 for other protocols and for ICMP errors). Writes the whole
// tuple on every path (stateful_burst keeps its tuples in raw storage on that promise).
void tuple_from_meta(const uint8_t* frame, uint32_t length, const PacketMeta& meta, FiveTuple& tuple,
                     uint8_t& tcp_flags);

// The type and code of a frame's own ICMP header (ICMP in IPv4, ICMPv6 in IPv6) for the rules to match, for a frame
// parse_frame accepted; 0 and 0 when it has none (another protocol, an error, a fragment past the first).
void icmp_type_code(const uint8_t* frame, const PacketMeta& meta, uint8_t& type, uint8_t& code);

}  // namespace sluice

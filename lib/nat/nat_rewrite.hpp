// The translation of one parsed packet, in place: addresses and ports with RFC 1624 incremental checksum updates
// (IPv4 header, TCP/UDP pseudo-header and ports), and the ICMP errors that quote a translated packet (RFC 5508).
// Pure apart from the mbuf they are given; fast-path safe.
#pragma once

#include <cstdint>

#include <rte_mbuf.h>

#include "common/five_tuple.hpp"
#include "packet/packet_meta.hpp"

namespace sluice {

// Rewrites the packet's source to src:src_port and destination to dst:dst_port (ports in network order; the
// family stays the packet's). TCP checksums are updated; UDP ones too unless the IPv4 sender left it 0 (none).
// The packet must have an L4 header (meta.l4_offset != 0) of TCP or UDP.
void nat_rewrite(rte_mbuf* m, const PacketMeta& meta, const IpAddress& src, uint16_t src_port, const IpAddress& dst,
                 uint16_t dst_port);

// Translates an ICMP error about a packet of a nat connection the way NAT translated the packet it quotes (RFC 5508
// section 4.2): the outer destination becomes outer_dst, the quote's source and destination become
// quoted_src:quoted_src_port and quoted_dst:quoted_dst_port (ports in network order; a quoted_src_port of 0 keeps
// the quote's). The outer and quoted IPv4 header checksums and, where the quote holds it, the quoted TCP/UDP
// checksum are updated; the ICMP checksum is computed again. meta is the error's as parse_frame left it (the quote
// holds an IP header; the frame ends with the datagram). Returns false, changing nothing, unless the quote is of TCP
// or UDP with its ports (not an IPv4 later fragment).
bool nat_rewrite_icmp_error(rte_mbuf* m, const PacketMeta& meta, const IpAddress& outer_dst,
                            const IpAddress& quoted_src, uint16_t quoted_src_port, const IpAddress& quoted_dst,
                            uint16_t quoted_dst_port);

}  // namespace sluice

// Carries the RX lcore's PacketMeta to the worker inside the mbuf, in a registered dynamic field.
#pragma once

#include <rte_mbuf.h>
#include <rte_mbuf_dyn.h>

#include "common/drop_reason.hpp"
#include "packet/parse.hpp"

namespace sluice {

// Offset of the PacketMeta dynfield; set once by register_packet_meta() before any lcore starts.
extern int g_packet_meta_offset;

// Control thread, once after EAL init. Returns false (rte_errno set) when the dynfield area is exhausted.
bool register_packet_meta();

inline PacketMeta* packet_meta(rte_mbuf* m) { return RTE_MBUF_DYNFIELD(m, g_packet_meta_offset, PacketMeta*); }

// Parses a burst in place: fills each mbuf's PacketMeta and verdicts[i] (DropReason::none when valid), and trims
// each frame to its IP datagram (padding and appended bytes go; parse_frame's datagram_end).
// Frames are single-segment (scatter RX is never enabled), so headers are read from the first segment; a chained
// frame (net_pcap's above the data room) keeps only that segment, since a datagram it accepts fits there.
// hash_flows: fill each meta.flow_hash (ParseOptions::hash_flow; the RX lcore passes LcoreContext::hash_flows).
void parse_burst(rte_mbuf* const* pkts, uint16_t count, DropReason* verdicts, bool hash_flows);

}  // namespace sluice

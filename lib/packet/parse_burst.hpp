// The RX lcore's parse of a received burst: parse_frame, the VLAN, neighbour and martian checks on each frame,
// the result left in its mbuf's PacketMeta (packet_meta.hpp). Fast-path safe.
#pragma once

#include <cstdint>

#include <rte_mbuf.h>

#include "common/drop_reason.hpp"

namespace sluice {

class MartianFilter;  // martian.hpp
class PortVlans;      // vlan.hpp

// Parses a burst in place: fills each mbuf's PacketMeta and verdicts[i] (DropReason::none when valid), and trims
// each frame to its IP datagram (padding and appended bytes go; parse_frame's datagram_end).
// Frames are single-segment (scatter RX is never enabled), so headers are read from the first segment; a chained
// frame (net_pcap's above the data room) keeps only that segment, since a datagram it accepts fits there.
// hash_flows: fill each meta.flow_hash (ParseOptions::hash_flow; the RX lcore passes LcoreContext::hash_flows).
// martians: the snapshot's filter; an IP packet it finds martian gets its reason as verdict. Null: none is checked.
// vlans: the VLANs the ports carry (take_vlan_tag): a tagged frame of one of them leaves the parse untagged, its tag
// in the mbuf; any other tagged frame gets vlan_unknown. Null: no port carries a VLAN.
void parse_burst(rte_mbuf* const* pkts, uint16_t count, DropReason* verdicts, bool hash_flows,
                 const MartianFilter* martians = nullptr, const PortVlans* vlans = nullptr);

}  // namespace sluice

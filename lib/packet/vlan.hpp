// 802.1Q sub-interfaces (ports[].vlans): the ids of sluice's L3 interfaces, which VLANs each port carries, and how a
// tag travels. The RX lcore moves a frame's tag into its mbuf (vlan_tci, as a NIC's VLAN stripping would), so every
// stage sees untagged Ethernet; send_out puts the tag the packet leaves with back in front. Fast-path safe.
#pragma once

#include <array>
#include <bitset>
#include <cstdint>

#include <rte_mbuf.h>

#include "common/drop_reason.hpp"

namespace sluice {

struct PacketMeta;  // packet_meta.hpp

// An L3 interface's id: a port's own (untagged) link has the port's id; the port's VLAN v has (port + 1) << 12 | v.
// Ids name their port and VLAN without a table and stay the same across reloads (rules' in_ports, connections).
// Only ports 0..kMaxVlanPort may carry VLANs, so that ids fit in 16 bits; UINT16_MAX (port 15, VLAN 4095) is none.
inline constexpr uint16_t kMaxVlanPort = 14;
inline constexpr uint16_t kMaxVlanId = 4094;  // 0 is "priority-tagged", 4095 reserved (802.1Q 9.6)

constexpr uint16_t interface_id(uint16_t port, uint16_t vlan) {
    return vlan ? static_cast<uint16_t>((port + 1) << 12 | vlan) : port;
}
constexpr uint16_t interface_port(uint16_t interface) {
    return interface < (1u << 12) ? interface : static_cast<uint16_t>((interface >> 12) - 1);
}
constexpr uint16_t interface_vlan(uint16_t interface) {
    return interface < (1u << 12) ? 0 : static_cast<uint16_t>(interface & 0xfff);
}

// The VLANs each port carries. A frame tagged with another is dropped (vlan_unknown). Built by the control thread,
// read by the RX lcores through the Snapshot.
class PortVlans {
public:
    void add(uint16_t port, uint16_t vlan) { carried_[port].set(vlan); }
    // vlan < 4096 (12 bits): operator[], which checks nothing and never throws, unlike test().
    bool carries(uint16_t port, uint16_t vlan) const { return port <= kMaxVlanPort && carried_[port][vlan]; }

private:
    std::array<std::bitset<4096>, kMaxVlanPort + 1> carried_{};
};

// The RX lcore's step after parse_frame for a tagged frame (meta.l3_offset past the Ethernet header, or a tag the
// NIC stripped): a single 802.1Q tag of a VLAN the port carries (or a priority tag, VLAN 0) moves into the mbuf
// (vlan_tci; RTE_MBUF_F_TX_VLAN so that an answer goes back on that VLAN) and the frame, meta and datagram_end
// shift to untagged Ethernet. Anything else returns vlan_unknown: another VLAN, 802.1ad, two tags.
DropReason take_vlan_tag(rte_mbuf* m, PacketMeta& meta, uint32_t& datagram_end, const PortVlans* vlans);

// The interface a received packet came in on (take_vlan_tag kept its VLAN); before the forward stage sets the way
// out.
inline uint16_t ingress_interface(const rte_mbuf* m) {
    return (m->ol_flags & RTE_MBUF_F_RX_VLAN_STRIPPED) ? interface_id(m->port, m->vlan_tci & 0xfff) : m->port;
}

// The tag a packet leaves with: vlan 0 for none.
inline void set_egress_vlan(rte_mbuf* m, uint16_t vlan) {
    m->vlan_tci = vlan;
    if (vlan) m->ol_flags |= RTE_MBUF_F_TX_VLAN;
    else m->ol_flags &= ~RTE_MBUF_F_TX_VLAN;
}

// Puts the tag of an mbuf with RTE_MBUF_F_TX_VLAN in front of its frame (in the headroom). False when there is no
// room (never for a received or freshly allocated mbuf: they have RTE_PKTMBUF_HEADROOM).
bool insert_vlan_tag(rte_mbuf* m);

}  // namespace sluice

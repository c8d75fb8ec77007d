#include "packet/vlan.hpp"

#include <cstring>

#include <rte_byteorder.h>
#include <rte_ether.h>

#include "packet/packet_meta.hpp"

namespace sluice {

DropReason take_vlan_tag(rte_mbuf* m, PacketMeta& meta, uint32_t& datagram_end, const PortVlans* vlans) {
    constexpr uint16_t kUntagged = sizeof(rte_ether_hdr);
    uint8_t* frame = rte_pktmbuf_mtod(m, uint8_t*);
    const bool stripped = m->ol_flags & RTE_MBUF_F_RX_VLAN_STRIPPED;  // by the NIC: the frame holds no tag of it
    uint16_t tci;
    if (stripped) {
        if (meta.l3_offset != kUntagged) return DropReason::vlan_unknown;
        tci = m->vlan_tci;
    } else {
        uint16_t tpid;
        std::memcpy(&tpid, frame + 12, 2);
        if (meta.l3_offset != kUntagged + sizeof(rte_vlan_hdr) || tpid != RTE_BE16(RTE_ETHER_TYPE_VLAN))
            return DropReason::vlan_unknown;
        tci = static_cast<uint16_t>(frame[14] << 8 | frame[15]);
    }
    const uint16_t vlan = tci & 0xfff;
    if (vlan != 0 && (!vlans || !vlans->carries(m->port, vlan))) return DropReason::vlan_unknown;
    if (!stripped) {
        std::memmove(frame + sizeof(rte_vlan_hdr), frame, size_t{2} * RTE_ETHER_ADDR_LEN);
        rte_pktmbuf_adj(m, sizeof(rte_vlan_hdr));
        meta.l3_offset = kUntagged;
        if (meta.l4_offset) meta.l4_offset = static_cast<uint16_t>(meta.l4_offset - sizeof(rte_vlan_hdr));
        datagram_end -= sizeof(rte_vlan_hdr);
    }
    // A priority tag (VLAN 0) belongs to the port's own link: answers leave untagged.
    m->vlan_tci = vlan ? tci : 0;
    m->ol_flags |= RTE_MBUF_F_RX_VLAN | RTE_MBUF_F_RX_VLAN_STRIPPED;
    if (vlan) m->ol_flags |= RTE_MBUF_F_TX_VLAN;
    else m->ol_flags &= ~RTE_MBUF_F_TX_VLAN;
    return DropReason::none;
}

bool insert_vlan_tag(rte_mbuf* m) {
    uint8_t* old_start = rte_pktmbuf_mtod(m, uint8_t*);
    auto* frame = reinterpret_cast<uint8_t*>(rte_pktmbuf_prepend(m, sizeof(rte_vlan_hdr)));
    if (!frame) return false;
    std::memmove(frame, old_start, size_t{2} * RTE_ETHER_ADDR_LEN);
    const uint16_t tpid = RTE_BE16(RTE_ETHER_TYPE_VLAN), tci = rte_cpu_to_be_16(m->vlan_tci);
    std::memcpy(frame + 12, &tpid, 2);
    std::memcpy(frame + 14, &tci, 2);
    m->ol_flags &= ~RTE_MBUF_F_TX_VLAN;
    return true;
}

}  // namespace sluice

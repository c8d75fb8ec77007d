#include "packet/parse_burst.hpp"

#include <rte_ether.h>

#include "common/compiler.hpp"
#include "common/ip_proto.hpp"
#include "packet/martian.hpp"
#include "packet/neighbour.hpp"
#include "packet/packet_meta.hpp"
#include "packet/vlan.hpp"

namespace sluice {
namespace {

// Cuts everything after the IP datagram, so NAT, tunnels and forwarding emit exactly the datagram. parse_frame read
// the first segment only and a datagram it accepts fits there (scatter RX is off; net_pcap alone chains segments, for
// a frame above the data room), so the trailer is the end of that segment and every segment after it.
void trim_to_datagram(rte_mbuf* m, uint32_t datagram_end) {
    if (SLUICE_UNLIKELY(m->next != nullptr)) {
        for (rte_mbuf* segment = m->next; segment != nullptr;) {
            rte_mbuf* next = segment->next;
            rte_pktmbuf_free_seg(segment);
            segment = next;
        }
        m->next = nullptr;
        m->nb_segs = 1;
        m->pkt_len = m->data_len;
    }
    rte_pktmbuf_trim(m, static_cast<uint16_t>(m->data_len - datagram_end));
}

}  // namespace

void parse_burst(rte_mbuf* const* pkts, uint16_t count, DropReason* verdicts, bool hash_flows,
                 const MartianFilter* martians, const PortVlans* vlans) {
    constexpr uint16_t kPrefetchAhead = 4;
    for (uint16_t i = 0; i < count && i < kPrefetchAhead; ++i) rte_prefetch0(rte_pktmbuf_mtod(pkts[i], void*));
    for (uint16_t i = 0; i < count; ++i) {
        if (i + kPrefetchAhead < count) rte_prefetch0(rte_pktmbuf_mtod(pkts[i + kPrefetchAhead], void*));
        rte_mbuf* m = pkts[i];
        const ParseOptions options{
            .ipv4_checksum_verified = (m->ol_flags & RTE_MBUF_F_RX_IP_CKSUM_MASK) == RTE_MBUF_F_RX_IP_CKSUM_GOOD,
            .hash_flow = hash_flows,
        };
        FiveTuple tuple;
        const uint8_t* frame = rte_pktmbuf_mtod(m, const uint8_t*);
        PacketMeta& meta = *packet_meta(m);
        uint32_t datagram_end;
        verdicts[i] = parse_frame(frame, rte_pktmbuf_data_len(m), options, meta, tuple, datagram_end);
        // A tagged ARP frame is not_ip until its tag is gone.
        if (SLUICE_UNLIKELY(meta.l3_offset != sizeof(rte_ether_hdr) || (m->ol_flags & RTE_MBUF_F_RX_VLAN_STRIPPED)) &&
            (verdicts[i] == DropReason::none || verdicts[i] == DropReason::not_ip)) {
            if (const DropReason tag = take_vlan_tag(m, meta, datagram_end, vlans); tag != DropReason::none)
                verdicts[i] = tag;
            frame = rte_pktmbuf_mtod(m, const uint8_t*);
        }
        if (SLUICE_UNLIKELY(verdicts[i] == DropReason::not_ip || meta.l4_proto == kIpProtoIcmpv6))
            verdicts[i] = classify_neighbour(frame, rte_pktmbuf_data_len(m), verdicts[i], meta);
        // Neighbour frames are sluice's own control traffic, never forwarded: DAD's :: source is theirs.
        if (martians && SLUICE_LIKELY(verdicts[i] == DropReason::none) && !(meta.flags & kMetaNeighbour))
            verdicts[i] = martians->check(frame, meta, tuple);
        if (SLUICE_UNLIKELY(rte_pktmbuf_pkt_len(m) > datagram_end)) trim_to_datagram(m, datagram_end);
    }
}

}  // namespace sluice

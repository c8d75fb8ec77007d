#include "packet/packet_meta.hpp"

#include "common/compiler.hpp"
#include "packet/neighbour.hpp"

namespace sluice {

int g_packet_meta_offset = -1;

bool register_packet_meta() {
    static const rte_mbuf_dynfield kField = {
        .name = "sluice_packet_meta",
        .size = sizeof(PacketMeta),
        .align = alignof(PacketMeta),
        .flags = 0,
    };
    g_packet_meta_offset = rte_mbuf_dynfield_register(&kField);
    return g_packet_meta_offset >= 0;
}

void parse_burst(rte_mbuf* const* pkts, uint16_t count, DropReason* verdicts) {
    constexpr uint16_t kPrefetchAhead = 4;
    for (uint16_t i = 0; i < count && i < kPrefetchAhead; ++i) rte_prefetch0(rte_pktmbuf_mtod(pkts[i], void*));
    for (uint16_t i = 0; i < count; ++i) {
        if (i + kPrefetchAhead < count) rte_prefetch0(rte_pktmbuf_mtod(pkts[i + kPrefetchAhead], void*));
        rte_mbuf* m = pkts[i];
        const ParseOptions options{
            .ipv4_checksum_verified = (m->ol_flags & RTE_MBUF_F_RX_IP_CKSUM_MASK) == RTE_MBUF_F_RX_IP_CKSUM_GOOD,
        };
        FiveTuple tuple;
        const uint8_t* frame = rte_pktmbuf_mtod(m, const uint8_t*);
        PacketMeta& meta = *packet_meta(m);
        verdicts[i] = parse_frame(frame, rte_pktmbuf_data_len(m), options, meta, tuple);
        if (SLUICE_UNLIKELY(verdicts[i] == DropReason::not_ip || meta.l4_proto == 58))
            verdicts[i] = classify_neighbour(frame, rte_pktmbuf_data_len(m), verdicts[i], meta);
    }
}

}  // namespace sluice

#include "pipeline/early_drop.hpp"

#include "common/compiler.hpp"
#include "packet/packet_meta.hpp"

namespace sluice {

uint16_t early_drop_burst(LcoreContext& ctx, const FirewallTables& fw, rte_mbuf** pkts, uint16_t count) {
    bool blocked[kBurst];
    for (uint16_t i = 0; i < count; ++i) {
        const PacketMeta& meta = *packet_meta(pkts[i]);
        blocked[i] = false;
        // ARP has no IP header (its bytes at 12-15 are part of the sender's MAC and address), and ND's sources
        // (fe80::/10, :: in DAD) sit in every bogon list: neighbours must resolve whatever the sets hold.
        if (SLUICE_UNLIKELY(meta.flags & kMetaNeighbour)) continue;
        const uint8_t* ip = rte_pktmbuf_mtod_offset(pkts[i], const uint8_t*, meta.l3_offset);
        if (meta.family == IpFamily::ipv4) blocked[i] = fw.blocklist_v4 && fw.blocklist_v4->contains(ip + 12);
        else blocked[i] = fw.blocklist_v6 && fw.blocklist_v6->contains(ip + 8);
    }
    rte_mbuf* dropped[kBurst];
    uint16_t kept = 0, dropped_count = 0;
    for (uint16_t i = 0; i < count; ++i) {
        if (blocked[i]) dropped[dropped_count++] = pkts[i];
        else pkts[kept++] = pkts[i];
    }
    if (dropped_count) {
        ctx.counters.drop(DropReason::blocklisted, dropped_count);
        rte_pktmbuf_free_bulk(dropped, dropped_count);
    }
    return kept;
}

bool early_dropped(const FirewallTables& fw, IpFamily family, const IpAddress& source) {
    const PrefixSetTable* table = family == IpFamily::ipv4 ? fw.blocklist_v4 : fw.blocklist_v6;
    return table && table->contains(source.bytes);
}

}  // namespace sluice

#include "pipeline/early_drop.hpp"

#include <cstring>

#include <rte_fib.h>
#include <rte_lpm6.h>

#include "common/compiler.hpp"
#include "packet/packet_meta.hpp"

namespace sluice {

uint16_t early_drop_burst(LcoreContext& ctx, const FirewallTables& fw, rte_mbuf** pkts, uint16_t count) {
    uint32_t v4_sources[kBurst];
    uint64_t v4_hops[kBurst];
    uint16_t v4_index[kBurst], v4_count = 0;
    uint8_t v6_sources[kBurst][16];
    int32_t v6_hops[kBurst];
    uint16_t v6_index[kBurst], v6_count = 0;
    bool blocked[kBurst] = {};
    for (uint16_t i = 0; i < count; ++i) {
        const PacketMeta& meta = *packet_meta(pkts[i]);
        // ARP has no IP header (its bytes at 12-15 are part of the sender's MAC and address), and ND's sources
        // (fe80::/10, :: in DAD) sit in every bogon list: neighbours must resolve whatever the sets hold.
        if (SLUICE_UNLIKELY(meta.flags & kMetaNeighbour)) continue;
        const uint8_t* ip = rte_pktmbuf_mtod_offset(pkts[i], const uint8_t*, meta.l3_offset);
        if (meta.family == IpFamily::ipv4 && fw.blocklist_v4) {
            uint32_t be;
            std::memcpy(&be, ip + 12, 4);
            v4_sources[v4_count] = rte_be_to_cpu_32(be);  // rte_fib works in host byte order
            v4_index[v4_count++] = i;
        } else if (meta.family == IpFamily::ipv6 && fw.blocklist_v6) {
            std::memcpy(v6_sources[v6_count], ip + 8, 16);
            v6_index[v6_count++] = i;
        }
    }
    if (v4_count) {
        rte_fib_lookup_bulk(fw.blocklist_v4, v4_sources, v4_hops, v4_count);
        for (uint16_t k = 0; k < v4_count; ++k) blocked[v4_index[k]] = v4_hops[k] != 0;
    }
    if (v6_count) {
        rte_lpm6_lookup_bulk_func(fw.blocklist_v6, v6_sources, v6_hops, v6_count);
        for (uint16_t k = 0; k < v6_count; ++k) blocked[v6_index[k]] = v6_hops[k] >= 0;
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
    if (family == IpFamily::ipv4 && fw.blocklist_v4) {
        uint32_t host = rte_be_to_cpu_32(source.words[0]);
        uint64_t hop = 0;
        return rte_fib_lookup_bulk(fw.blocklist_v4, &host, &hop, 1) == 0 && hop != 0;
    }
    if (family == IpFamily::ipv6 && fw.blocklist_v6) {
        uint8_t bytes[1][16];
        std::memcpy(bytes[0], source.bytes, 16);
        int32_t hop = -1;
        rte_lpm6_lookup_bulk_func(fw.blocklist_v6, bytes, &hop, 1);
        return hop >= 0;
    }
    return false;
}

}  // namespace sluice

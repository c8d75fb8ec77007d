#include "packet/encapsulate.hpp"

#include <cstring>

#include <rte_ether.h>
#include <rte_ip.h>

#include "common/ip_proto.hpp"
#include "packet/checksum.hpp"

namespace sluice {
namespace {

constexpr uint8_t kOuterTtl = 64;

}  // namespace

bool encapsulate(rte_mbuf* m, const PacketMeta& meta, const IpAddress& outer_src, const IpAddress& outer_dst,
                 uint16_t mtu) {
    const uint8_t* l3 = rte_pktmbuf_mtod_offset(m, const uint8_t*, meta.l3_offset);
    const bool v4 = meta.family == IpFamily::ipv4;
    uint32_t inner_len;
    if (v4) {
        inner_len = rte_be_to_cpu_16(reinterpret_cast<const rte_ipv4_hdr*>(l3)->total_length);
    } else {
        inner_len = rte_be_to_cpu_16(reinterpret_cast<const rte_ipv6_hdr*>(l3)->payload_len) + sizeof(rte_ipv6_hdr);
    }
    const uint32_t outer_len = v4 ? sizeof(rte_ipv4_hdr) : sizeof(rte_ipv6_hdr);
    if (inner_len + outer_len > mtu) return false;
    const uint32_t grow = sizeof(rte_ether_hdr) + outer_len;
    if (rte_pktmbuf_headroom(m) + meta.l3_offset < grow) return false;

    rte_pktmbuf_adj(m, meta.l3_offset);
    const uint32_t padding = rte_pktmbuf_pkt_len(m) - inner_len;  // parse checked the IP length fits the frame
    if (padding) rte_pktmbuf_trim(m, static_cast<uint16_t>(padding));
    auto* eth = reinterpret_cast<rte_ether_hdr*>(rte_pktmbuf_prepend(m, static_cast<uint16_t>(grow)));
    uint8_t* outer = reinterpret_cast<uint8_t*>(eth + 1);
    if (v4) {
        eth->ether_type = RTE_BE16(RTE_ETHER_TYPE_IPV4);
        auto* ip = reinterpret_cast<rte_ipv4_hdr*>(outer);
        std::memset(ip, 0, sizeof *ip);
        ip->version_ihl = RTE_IPV4_VHL_DEF;
        ip->type_of_service = reinterpret_cast<const rte_ipv4_hdr*>(outer + outer_len)->type_of_service;
        ip->total_length = rte_cpu_to_be_16(static_cast<uint16_t>(inner_len + outer_len));
        ip->time_to_live = kOuterTtl;
        ip->next_proto_id = kIpProtoIpip;
        std::memcpy(&ip->src_addr, outer_src.bytes, 4);
        std::memcpy(&ip->dst_addr, outer_dst.bytes, 4);
        ip->hdr_checksum = checksum_ipv4_header(ip, sizeof *ip);
    } else {
        eth->ether_type = RTE_BE16(RTE_ETHER_TYPE_IPV6);
        auto* ip = reinterpret_cast<rte_ipv6_hdr*>(outer);
        // Traffic class copied from the inner header, as the inner IPv4 TOS is above (RFC 2983's uniform model).
        const uint32_t inner_flow =
            rte_be_to_cpu_32(reinterpret_cast<const rte_ipv6_hdr*>(outer + outer_len)->vtc_flow);
        ip->vtc_flow = rte_cpu_to_be_32((6u << 28) | (inner_flow & 0x0ff00000u));
        ip->payload_len = rte_cpu_to_be_16(static_cast<uint16_t>(inner_len));
        ip->proto = kIpProtoIpv6;
        ip->hop_limits = kOuterTtl;
        std::memcpy(ip->src_addr, outer_src.bytes, 16);
        std::memcpy(ip->dst_addr, outer_dst.bytes, 16);
    }
    return true;
}

}  // namespace sluice

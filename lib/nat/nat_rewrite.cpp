#include "nat/nat_rewrite.hpp"

#include <cstring>

#include <rte_ether.h>
#include <rte_ip.h>

#include "common/ip_proto.hpp"
#include "packet/checksum.hpp"

namespace sluice {
namespace {

// The checksum field of the packet's L4 header, or null when it has none to update (UDP over IPv4 without one).
uint16_t* l4_checksum(uint8_t* l4, uint8_t proto, IpFamily family) {
    if (proto == kIpProtoTcp) return reinterpret_cast<uint16_t*>(l4 + 16);
    auto* udp = reinterpret_cast<uint16_t*>(l4 + 6);
    if (family == IpFamily::ipv4 && *udp == 0) return nullptr;
    return udp;
}

// Writes an IP header's source and destination (ip: its first byte), updating an IPv4 header's checksum; returns
// the addresses' checksum delta, which a TCP/UDP checksum (its pseudo-header holds them) takes too. One template
// per family, so that the address length is a constant and the sums and copies unroll.
template <IpFamily F>
uint64_t rewrite_addresses(uint8_t* ip, const IpAddress& src, const IpAddress& dst) {
    constexpr bool kV4 = F == IpFamily::ipv4;
    constexpr std::size_t kAddressLen = kV4 ? 4 : 16;
    uint8_t* src_field = ip + (kV4 ? 12 : 8);
    uint8_t* dst_field = src_field + kAddressLen;
    const uint64_t delta =
        checksum_delta(src_field, src.bytes, kAddressLen) + checksum_delta(dst_field, dst.bytes, kAddressLen);
    if constexpr (kV4) {
        auto* header = reinterpret_cast<rte_ipv4_hdr*>(ip);
        header->hdr_checksum = checksum_apply_delta(header->hdr_checksum, delta);
    }
    std::memcpy(src_field, src.bytes, kAddressLen);
    std::memcpy(dst_field, dst.bytes, kAddressLen);
    return delta;
}
void rewrite_addresses(uint8_t* ip, bool v4, const IpAddress& src, const IpAddress& dst) {
    if (v4) rewrite_addresses<IpFamily::ipv4>(ip, src, dst);
    else rewrite_addresses<IpFamily::ipv6>(ip, src, dst);
}

// nat_rewrite of a packet with an L4 header, for one family.
template <IpFamily F>
void nat_rewrite_l4(uint8_t* l3, uint8_t* l4, uint8_t proto, const IpAddress& src, uint16_t src_port,
                    const IpAddress& dst, uint16_t dst_port) {
    uint16_t* checksum = l4_checksum(l4, proto, F);
    const uint16_t ports_new[2] = {src_port, dst_port};
    const uint64_t ports = checksum_delta(l4, ports_new, 4);
    const uint64_t addresses = rewrite_addresses<F>(l3, src, dst);
    if (checksum) {
        uint16_t l4_sum = checksum_apply_delta(*checksum, addresses + ports);
        // UDP sends a computed 0 as 0xffff (RFC 768); a TCP checksum of 0 and one of 0xffff are the same value.
        if (proto == kIpProtoUdp && l4_sum == 0) l4_sum = 0xffff;
        *checksum = l4_sum;
    }
    std::memcpy(l4, ports_new, 4);
}

}  // namespace

void nat_rewrite(rte_mbuf* m, const PacketMeta& meta, const IpAddress& src, uint16_t src_port, const IpAddress& dst,
                 uint16_t dst_port) {
    uint8_t* frame = rte_pktmbuf_mtod(m, uint8_t*);
    uint8_t* l3 = frame + meta.l3_offset;
    const bool v4 = meta.family == IpFamily::ipv4;
    if (meta.l4_offset == 0) {
        // A later fragment: the ports and the L4 checksum (over the whole datagram) are in the first fragment,
        // whose rewrite updated them; here only the addresses change.
        rewrite_addresses(l3, v4, src, dst);
        return;
    }
    uint8_t* l4 = frame + meta.l4_offset;
    if (v4) nat_rewrite_l4<IpFamily::ipv4>(l3, l4, meta.l4_proto, src, src_port, dst, dst_port);
    else nat_rewrite_l4<IpFamily::ipv6>(l3, l4, meta.l4_proto, src, src_port, dst, dst_port);
}

bool nat_rewrite_icmp_error(rte_mbuf* m, const PacketMeta& meta, const IpAddress& outer_dst,
                            const IpAddress& quoted_src, uint16_t quoted_src_port, const IpAddress& quoted_dst,
                            uint16_t quoted_dst_port) {
    uint8_t* frame = rte_pktmbuf_mtod(m, uint8_t*);
    uint8_t* l3 = frame + meta.l3_offset;
    const bool v4 = meta.family == IpFamily::ipv4;
    const std::size_t address_len = v4 ? 4 : 16;
    uint8_t* icmp = frame + meta.l4_offset;
    const uint32_t icmp_len = rte_pktmbuf_data_len(m) - meta.l4_offset;

    uint8_t* q = icmp + 8;
    const uint32_t q_len = icmp_len - 8;
    const uint32_t q_header = v4 ? (q[0] & 0x0fu) * 4u : static_cast<uint32_t>(sizeof(rte_ipv6_hdr));
    const uint8_t q_proto = v4 ? q[9] : q[6];
    uint8_t* q_src = q + (v4 ? 12 : 8);
    uint8_t* q_dst = q_src + address_len;
    uint8_t* q_l4 = q + q_header;
    if ((q_proto != kIpProtoTcp && q_proto != kIpProtoUdp) || q_len < q_header + 8) return false;
    if (v4 && (rte_be_to_cpu_16(reinterpret_cast<const rte_ipv4_hdr*>(q)->fragment_offset) & RTE_IPV4_HDR_OFFSET_MASK))
        return false;  // a later fragment: what follows its header is data, not ports
    uint16_t ports_old[2], ports_new[2];
    std::memcpy(ports_old, q_l4, 4);
    ports_new[0] = quoted_src_port ? quoted_src_port : ports_old[0];
    ports_new[1] = quoted_dst_port;

    // The quoted segment's checksum, when the quote reaches it: the pseudo-header and the ports change under it.
    uint16_t* q_sum = nullptr;
    if (q_proto == kIpProtoTcp && q_len >= q_header + 18) q_sum = reinterpret_cast<uint16_t*>(q_l4 + 16);
    else if (q_proto == kIpProtoUdp) q_sum = l4_checksum(q_l4, q_proto, meta.family);
    if (q_sum) {
        uint16_t sum = checksum_update_bytes(*q_sum, q_src, quoted_src.bytes, address_len);
        sum = checksum_update_bytes(sum, q_dst, quoted_dst.bytes, address_len);
        sum = checksum_update_bytes(sum, ports_old, ports_new, 4);
        if (q_proto == kIpProtoUdp && sum == 0) sum = 0xffff;
        *q_sum = sum;
    }
    rewrite_addresses(q, v4, quoted_src, quoted_dst);
    std::memcpy(q_l4, ports_new, 4);

    IpAddress outer_src{};
    std::memcpy(outer_src.bytes, l3 + (v4 ? 12 : 8), address_len);  // stays: the router's or the client's
    rewrite_addresses(l3, v4, outer_src, outer_dst);

    // Errors are rare and the quote changed in many places: the ICMP checksum is summed again. ICMPv6's covers
    // a pseudo-header (RFC 4443 2.3) of the outer addresses, the message's length and next header 58.
    icmp[2] = icmp[3] = 0;
    uint32_t sum = rte_raw_cksum(icmp, icmp_len);
    if (!v4) {
        sum += rte_raw_cksum(l3 + 8, 32);
        const uint32_t length_be = rte_cpu_to_be_32(icmp_len);
        const uint32_t next_header_be = rte_cpu_to_be_32(kIpProtoIcmpv6);
        sum += rte_raw_cksum(&length_be, 4);
        sum += rte_raw_cksum(&next_header_be, 4);
    }
    const uint16_t icmp_sum = static_cast<uint16_t>(~checksum_fold(sum));
    std::memcpy(icmp + 2, &icmp_sum, 2);
    return true;
}

}  // namespace sluice

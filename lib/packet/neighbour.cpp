#include "packet/neighbour.hpp"

#include <cstddef>
#include <cstring>

#include <rte_arp.h>
#include <rte_icmp.h>
#include <rte_ip.h>
#include <rte_mempool.h>

#include "common/ip_proto.hpp"

namespace sluice {
namespace {

constexpr uint8_t kNdRouterSolicitation = 133;  // the first ND type (RFC 4861 4.1) ...
constexpr uint8_t kNdSolicitation = 135;
constexpr uint8_t kNdAdvertisement = 136;
constexpr uint8_t kNdRedirect = 137;  // ... and the last
constexpr uint8_t kOptionSourceLinkAddress = 1;
constexpr uint8_t kOptionTargetLinkAddress = 2;
constexpr uint8_t kNdHopLimit = 255;                  // RFC 4861: anything else was forwarded, and is ignored
constexpr uint32_t kNdHeader = 24;                    // type, code, checksum, reserved/flags, target
constexpr uint32_t kAdvertisementFlags = 0x60000000;  // solicited | override

// The link-layer address option of type `wanted` among the ND options in [p, end).
bool find_link_address(const uint8_t* p, const uint8_t* end, uint8_t wanted, rte_ether_addr& mac) {
    while (end - p >= 2) {
        const uint32_t len = p[1] * 8u;
        if (len == 0 || p + len > end) return false;  // RFC 4861 4.6: a zero length is invalid
        if (p[0] == wanted && len >= 8) {
            std::memcpy(mac.addr_bytes, p + 2, 6);
            return true;
        }
        p += len;
    }
    return false;
}

void ipv6_checksum(rte_ipv6_hdr* ip) {
    auto* icmp = reinterpret_cast<rte_icmp_hdr*>(ip + 1);
    icmp->icmp_cksum = 0;
    icmp->icmp_cksum = rte_ipv6_udptcp_cksum(ip, icmp);  // the pseudo-header sum works for any upper layer
}

}  // namespace

DropReason classify_neighbour(const uint8_t* frame, uint32_t length, DropReason verdict, PacketMeta& meta) {
    if (verdict == DropReason::not_ip) {
        if (length < sizeof(rte_ether_hdr) + sizeof(rte_arp_hdr)) return verdict;
        const auto* eth = reinterpret_cast<const rte_ether_hdr*>(frame);
        if (eth->ether_type != RTE_BE16(RTE_ETHER_TYPE_ARP)) return verdict;
        meta = PacketMeta{};
        meta.l3_offset = sizeof(rte_ether_hdr);
        meta.family = IpFamily::ipv4;
        meta.flags = kMetaNeighbour;
        return DropReason::none;  // flow_hash 0: every ARP frame goes to worker 0
    }
    if (verdict != DropReason::none || meta.family != IpFamily::ipv6 || meta.l4_proto != kIpProtoIcmpv6 ||
        meta.l4_offset == 0 || (meta.flags & kMetaIcmpError) || meta.l4_offset >= length)
        return verdict;
    const uint8_t type = frame[meta.l4_offset];
    if (type < kNdRouterSolicitation || type > kNdRedirect) return verdict;
    // RFC 6980 5: ND in a packet with a fragment header is ignored (fragments hide its options from RA guard and
    // the like); RFC 4861 6.1, 7.1.1, 7.1.2, 8.1: a hop limit below 255 means it came from off-link. Neither is
    // learned from, answered or forwarded.
    if ((meta.flags & kMetaFragment) || frame[meta.l3_offset + offsetof(rte_ipv6_hdr, hop_limits)] != kNdHopLimit)
        return DropReason::nd_invalid;
    if (type == kNdSolicitation || type == kNdAdvertisement) {
        meta.flags |= kMetaNeighbour;
        meta.flow_hash = 0;
    }
    return verdict;
}

namespace {

// parse_neighbour's reading of the frame, before it judges the sender's MAC.
bool read_neighbour(const uint8_t* frame, uint32_t length, const PacketMeta& meta, NeighbourMessage& message) {
    message = NeighbourMessage{};
    if (meta.family == IpFamily::ipv4) {
        if (length < meta.l3_offset + sizeof(rte_arp_hdr)) return false;
        const auto* arp = reinterpret_cast<const rte_arp_hdr*>(frame + meta.l3_offset);
        if (arp->arp_hardware != RTE_BE16(RTE_ARP_HRD_ETHER) || arp->arp_protocol != RTE_BE16(RTE_ETHER_TYPE_IPV4) ||
            arp->arp_hlen != 6 || arp->arp_plen != 4)
            return false;
        const uint16_t op = rte_be_to_cpu_16(arp->arp_opcode);
        if (op != RTE_ARP_OP_REQUEST && op != RTE_ARP_OP_REPLY) return false;
        message.solicitation = op == RTE_ARP_OP_REQUEST;
        message.family = IpFamily::ipv4;
        message.sender = IpAddress::from_v4(arp->arp_data.arp_sip);
        message.target = IpAddress::from_v4(arp->arp_data.arp_tip);
        message.sender_mac = arp->arp_data.arp_sha;
        message.has_sender_mac = message.sender.words[0] != 0;  // an ARP probe (sender 0.0.0.0) teaches nothing
        return true;
    }
    const auto* ip = reinterpret_cast<const rte_ipv6_hdr*>(frame + meta.l3_offset);
    const uint8_t* icmp = frame + meta.l4_offset;
    const uint8_t* end = frame + meta.l3_offset + sizeof(rte_ipv6_hdr) + rte_be_to_cpu_16(ip->payload_len);
    // The hop limit (255) and the absence of a fragment header were checked by classify_neighbour.
    if (end > frame + length || end - icmp < kNdHeader || icmp[1] != 0) return false;
    message.family = IpFamily::ipv6;
    message.solicitation = icmp[0] == kNdSolicitation;
    std::memcpy(message.target.bytes, icmp + 8, 16);
    if (message.solicitation) {
        std::memcpy(message.sender.bytes, ip->src_addr, 16);
        const bool unspecified = message.sender.quads[0] == 0 && message.sender.quads[1] == 0;
        message.has_sender_mac =
            !unspecified && find_link_address(icmp + kNdHeader, end, kOptionSourceLinkAddress, message.sender_mac);
    } else {
        message.sender = message.target;  // an advertisement speaks for its target address
        message.has_sender_mac = find_link_address(icmp + kNdHeader, end, kOptionTargetLinkAddress, message.sender_mac);
        if (!message.has_sender_mac) {
            message.sender_mac = reinterpret_cast<const rte_ether_hdr*>(frame)->src_addr;
            message.has_sender_mac = true;
        }
    }
    return true;
}

}  // namespace

bool parse_neighbour(const uint8_t* frame, uint32_t length, const PacketMeta& meta, NeighbourMessage& message) {
    if (!read_neighbour(frame, length, meta, message)) return false;
    // No host owns a group (multicast or broadcast) MAC: learned, it would send a next hop's traffic to every host
    // on the link, and an answer to it would go to all of them too.
    if (rte_is_multicast_ether_addr(&message.sender_mac)) message.has_sender_mac = false;
    return true;
}

bool make_neighbour_reply(rte_mbuf* m, const PacketMeta& meta, const NeighbourMessage& message,
                          const rte_ether_addr& own_mac) {
    if (!message.solicitation || !message.has_sender_mac) return false;
    uint8_t* frame = rte_pktmbuf_mtod(m, uint8_t*);
    auto* eth = reinterpret_cast<rte_ether_hdr*>(frame);
    eth->dst_addr = message.sender_mac;
    eth->src_addr = own_mac;
    if (message.family == IpFamily::ipv4) {
        auto* arp = reinterpret_cast<rte_arp_hdr*>(frame + meta.l3_offset);
        arp->arp_opcode = RTE_BE16(RTE_ARP_OP_REPLY);
        arp->arp_data.arp_tha = message.sender_mac;
        arp->arp_data.arp_tip = message.sender.words[0];
        arp->arp_data.arp_sha = own_mac;
        arp->arp_data.arp_sip = message.target.words[0];
        return true;
    }
    // The NS's Ethernet header and VLAN tags (kept, as the ARP reply keeps them: the answer stays on the asker's VLAN),
    // then IPv6 + NA with a target link-layer address option; the rest of the NS is dropped.
    const uint32_t length = meta.l3_offset + sizeof(rte_ipv6_hdr) + kNdHeader + 8;
    if (rte_pktmbuf_pkt_len(m) < length &&
        !rte_pktmbuf_append(m, static_cast<uint16_t>(length - rte_pktmbuf_pkt_len(m))))
        return false;
    if (rte_pktmbuf_pkt_len(m) > length) rte_pktmbuf_trim(m, static_cast<uint16_t>(rte_pktmbuf_pkt_len(m) - length));
    auto* ip = reinterpret_cast<rte_ipv6_hdr*>(frame + meta.l3_offset);
    ip->vtc_flow = RTE_BE32(6u << 28);
    ip->payload_len = RTE_BE16(kNdHeader + 8);
    ip->proto = kIpProtoIcmpv6;
    ip->hop_limits = kNdHopLimit;
    std::memcpy(ip->src_addr, message.target.bytes, 16);
    std::memcpy(ip->dst_addr, message.sender.bytes, 16);
    uint8_t* icmp = reinterpret_cast<uint8_t*>(ip + 1);
    icmp[0] = kNdAdvertisement;
    icmp[1] = 0;
    const uint32_t flags = RTE_BE32(kAdvertisementFlags);
    std::memcpy(icmp + 4, &flags, 4);
    std::memcpy(icmp + 8, message.target.bytes, 16);
    icmp[24] = kOptionTargetLinkAddress;
    icmp[25] = 1;
    std::memcpy(icmp + 26, own_mac.addr_bytes, 6);
    ipv6_checksum(ip);
    return true;
}

rte_mbuf* make_neighbour_solicitation(rte_mempool* pool, IpFamily family, const IpAddress& sender,
                                      const IpAddress& target, const rte_ether_addr& own_mac) {
    rte_mbuf* m = rte_pktmbuf_alloc(pool);
    if (!m) return nullptr;
    if (family == IpFamily::ipv4) {
        constexpr uint16_t kLength = sizeof(rte_ether_hdr) + sizeof(rte_arp_hdr);
        auto* eth = reinterpret_cast<rte_ether_hdr*>(rte_pktmbuf_append(m, kLength));
        std::memset(eth, 0xff, sizeof eth->dst_addr);
        eth->src_addr = own_mac;
        eth->ether_type = RTE_BE16(RTE_ETHER_TYPE_ARP);
        auto* arp = reinterpret_cast<rte_arp_hdr*>(eth + 1);
        arp->arp_hardware = RTE_BE16(RTE_ARP_HRD_ETHER);
        arp->arp_protocol = RTE_BE16(RTE_ETHER_TYPE_IPV4);
        arp->arp_hlen = 6;
        arp->arp_plen = 4;
        arp->arp_opcode = RTE_BE16(RTE_ARP_OP_REQUEST);
        arp->arp_data.arp_sha = own_mac;
        arp->arp_data.arp_sip = sender.words[0];
        std::memset(&arp->arp_data.arp_tha, 0, sizeof arp->arp_data.arp_tha);
        arp->arp_data.arp_tip = target.words[0];
        return m;
    }
    constexpr uint16_t kLength = sizeof(rte_ether_hdr) + sizeof(rte_ipv6_hdr) + kNdHeader + 8;
    auto* eth = reinterpret_cast<rte_ether_hdr*>(rte_pktmbuf_append(m, kLength));
    // Solicited-node multicast group ff02::1:ffXX:XXXX of the target, and its MAC 33:33:ff:XX:XX:XX (RFC 4291, 2464).
    uint8_t group[16] = {
        0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xff, target.bytes[13], target.bytes[14], target.bytes[15]};
    const uint8_t group_mac[6] = {0x33, 0x33, 0xff, target.bytes[13], target.bytes[14], target.bytes[15]};
    std::memcpy(eth->dst_addr.addr_bytes, group_mac, 6);
    eth->src_addr = own_mac;
    eth->ether_type = RTE_BE16(RTE_ETHER_TYPE_IPV6);
    auto* ip = reinterpret_cast<rte_ipv6_hdr*>(eth + 1);
    ip->vtc_flow = RTE_BE32(6u << 28);
    ip->payload_len = RTE_BE16(kNdHeader + 8);
    ip->proto = kIpProtoIcmpv6;
    ip->hop_limits = kNdHopLimit;
    std::memcpy(ip->src_addr, sender.bytes, 16);
    std::memcpy(ip->dst_addr, group, 16);
    uint8_t* icmp = reinterpret_cast<uint8_t*>(ip + 1);
    std::memset(icmp, 0, kNdHeader + 8);
    icmp[0] = kNdSolicitation;
    std::memcpy(icmp + 8, target.bytes, 16);
    icmp[24] = kOptionSourceLinkAddress;
    icmp[25] = 1;
    std::memcpy(icmp + 26, own_mac.addr_bytes, 6);
    ipv6_checksum(ip);
    return m;
}

}  // namespace sluice

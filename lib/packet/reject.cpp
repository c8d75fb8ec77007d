#include "packet/reject.hpp"

#include <cstring>

#include <rte_icmp.h>
#include <rte_ip.h>
#include <rte_tcp.h>

#include "common/ip_proto.hpp"
#include "packet/checksum.hpp"

namespace sluice {
namespace {

constexpr uint8_t kReplyTtl = 64;
constexpr uint16_t kIpv6MinMtu = 1280;

void write_ethernet(uint8_t* at, const rte_ether_addr& dst, const rte_ether_addr& src, uint16_t ether_type_be) {
    auto* eth = reinterpret_cast<rte_ether_hdr*>(at);
    eth->dst_addr = dst;
    eth->src_addr = src;
    eth->ether_type = ether_type_be;
}

bool tcp_rst(rte_mbuf* m, const PacketMeta& meta, const rte_ether_addr& own_mac) {
    uint8_t* frame = rte_pktmbuf_mtod(m, uint8_t*);
    auto* tcp = reinterpret_cast<rte_tcp_hdr*>(frame + meta.l4_offset);
    if (tcp->tcp_flags & RTE_TCP_RST_FLAG) return false;  // never answer a RST
    const rte_ether_addr peer = reinterpret_cast<rte_ether_hdr*>(frame)->src_addr;
    uint32_t payload;
    uint8_t* l3 = frame + meta.l3_offset;
    if (meta.family == IpFamily::ipv4) {
        const auto* ip = reinterpret_cast<const rte_ipv4_hdr*>(l3);
        payload =
            rte_be_to_cpu_16(ip->total_length) - (meta.l4_offset - meta.l3_offset) - (tcp->data_off >> 4) * uint32_t{4};
    } else {
        const auto* ip = reinterpret_cast<const rte_ipv6_hdr*>(l3);
        payload = rte_be_to_cpu_16(ip->payload_len) + sizeof(rte_ipv6_hdr) - (meta.l4_offset - meta.l3_offset) -
                  (tcp->data_off >> 4) * std::size_t{4};
    }
    // RFC 9293 3.10.7.1: with an ACK, <SEQ=SEG.ACK><CTL=RST>; without, <SEQ=0><ACK=SEG.SEQ+SEG.LEN><CTL=RST,ACK>.
    const bool had_ack = tcp->tcp_flags & RTE_TCP_ACK_FLAG;
    const uint32_t seg_len =
        payload + ((tcp->tcp_flags & RTE_TCP_SYN_FLAG) ? 1 : 0) + ((tcp->tcp_flags & RTE_TCP_FIN_FLAG) ? 1 : 0);
    const uint32_t seq = had_ack ? rte_be_to_cpu_32(tcp->recv_ack) : 0;
    const uint32_t ack = had_ack ? 0 : rte_be_to_cpu_32(tcp->sent_seq) + seg_len;
    const uint16_t src_port = tcp->src_port;  // packed fields: no std::swap
    tcp->src_port = tcp->dst_port;
    tcp->dst_port = src_port;
    tcp->sent_seq = rte_cpu_to_be_32(seq);
    tcp->recv_ack = rte_cpu_to_be_32(ack);
    tcp->data_off = 5 << 4;
    tcp->tcp_flags = had_ack ? RTE_TCP_RST_FLAG : (RTE_TCP_RST_FLAG | RTE_TCP_ACK_FLAG);
    tcp->rx_win = 0;
    tcp->cksum = 0;
    tcp->tcp_urp = 0;

    // Plain Ethernet right before the IP header (VLAN tags are not kept), then trim to the headers.
    const uint16_t strip = static_cast<uint16_t>(meta.l3_offset - sizeof(rte_ether_hdr));
    uint32_t l4_from_l3 = meta.l4_offset - meta.l3_offset;
    if (meta.family == IpFamily::ipv4) {
        auto* ip = reinterpret_cast<rte_ipv4_hdr*>(l3);
        const uint32_t src = ip->src_addr;
        ip->src_addr = ip->dst_addr;
        ip->dst_addr = src;
        ip->total_length = rte_cpu_to_be_16(static_cast<uint16_t>(l4_from_l3 + sizeof(rte_tcp_hdr)));
        ip->time_to_live = kReplyTtl;
        ip->fragment_offset = 0;
        ip->packet_id = 0;
        ip->hdr_checksum = 0;
        ip->hdr_checksum = checksum_ipv4_header(ip, rte_ipv4_hdr_len(ip));
        tcp->cksum = rte_ipv4_udptcp_cksum(ip, tcp);
        write_ethernet(l3 - sizeof(rte_ether_hdr), peer, own_mac, RTE_BE16(RTE_ETHER_TYPE_IPV4));
    } else {
        auto* ip = reinterpret_cast<rte_ipv6_hdr*>(l3);
        if (l4_from_l3 != sizeof(rte_ipv6_hdr)) {
            // The RST carries no extension headers: the TCP header moves up behind the IPv6 header (the checksum's
            // pseudo-header takes the payload length and next header from the IPv6 header alone).
            std::memmove(l3 + sizeof(rte_ipv6_hdr), tcp, sizeof(rte_tcp_hdr));
            tcp = reinterpret_cast<rte_tcp_hdr*>(l3 + sizeof(rte_ipv6_hdr));
            ip->proto = kIpProtoTcp;
            l4_from_l3 = sizeof(rte_ipv6_hdr);
        }
        uint8_t tmp[16];
        std::memcpy(tmp, ip->src_addr, 16);
        std::memcpy(ip->src_addr, ip->dst_addr, 16);
        std::memcpy(ip->dst_addr, tmp, 16);
        ip->payload_len =
            rte_cpu_to_be_16(static_cast<uint16_t>(l4_from_l3 - sizeof(rte_ipv6_hdr) + sizeof(rte_tcp_hdr)));
        ip->hop_limits = kReplyTtl;
        tcp->cksum = rte_ipv6_udptcp_cksum(ip, tcp);
        write_ethernet(l3 - sizeof(rte_ether_hdr), peer, own_mac, RTE_BE16(RTE_ETHER_TYPE_IPV6));
    }
    rte_pktmbuf_adj(m, strip);
    rte_pktmbuf_trim(
        m, static_cast<uint16_t>(rte_pktmbuf_pkt_len(m) - (sizeof(rte_ether_hdr) + l4_from_l3 + sizeof(rte_tcp_hdr))));
    return true;
}

// [eth][new IP][ICMP 8][the offending packet's IP header + what fits]: prepend the new headers before the old IP
// header, which stays where it is. type and code are the family's; rest_be is the header's last 4 bytes. From
// `source`, or (null) from the packet's destination.
bool icmp_error(rte_mbuf* m, const PacketMeta& meta, const rte_ether_addr& own_mac, uint8_t type, uint8_t code,
                uint32_t rest_be, const IpAddress* source = nullptr) {
    uint8_t* frame = rte_pktmbuf_mtod(m, uint8_t*);
    const rte_ether_addr peer = reinterpret_cast<rte_ether_hdr*>(frame)->src_addr;
    const bool v4 = meta.family == IpFamily::ipv4;
    const uint16_t ip_len = v4 ? sizeof(rte_ipv4_hdr) : sizeof(rte_ipv6_hdr);
    const uint16_t head = static_cast<uint16_t>(sizeof(rte_ether_hdr) + ip_len + 8);
    const uint16_t old_l3 = meta.l3_offset;
    // Where the quoted packet starts once the new headers are in front of it.
    if (old_l3 < head && !rte_pktmbuf_prepend(m, static_cast<uint16_t>(head - old_l3))) return false;
    if (old_l3 > head) rte_pktmbuf_adj(m, static_cast<uint16_t>(old_l3 - head));
    frame = rte_pktmbuf_mtod(m, uint8_t*);
    uint8_t* quote = frame + head;
    const uint32_t available = rte_pktmbuf_pkt_len(m) - head;
    uint32_t quoted;
    if (v4) {
        quoted = std::min<uint32_t>(available, (quote[0] & 0x0f) * 4u + 8);  // RFC 792: header + 64 bits
    } else {
        quoted = std::min<uint32_t>(available, kIpv6MinMtu - (ip_len + 8));  // RFC 4443: as much as fits in 1280
    }
    rte_pktmbuf_trim(m, static_cast<uint16_t>(available - quoted));

    uint8_t* l3 = frame + sizeof(rte_ether_hdr);
    auto* icmp = reinterpret_cast<rte_icmp_hdr*>(l3 + ip_len);
    icmp->icmp_type = type;
    icmp->icmp_code = code;
    icmp->icmp_cksum = 0;
    std::memcpy(reinterpret_cast<uint8_t*>(icmp) + 4, &rest_be, 4);
    if (v4) {
        auto* ip = reinterpret_cast<rte_ipv4_hdr*>(l3);
        const auto* original = reinterpret_cast<const rte_ipv4_hdr*>(quote);
        ip->version_ihl = RTE_IPV4_VHL_DEF;
        ip->type_of_service = 0;
        ip->total_length = rte_cpu_to_be_16(static_cast<uint16_t>(ip_len + 8 + quoted));
        ip->packet_id = 0;
        ip->fragment_offset = 0;
        ip->time_to_live = kReplyTtl;
        ip->next_proto_id = kIpProtoIcmp;
        ip->dst_addr = original->src_addr;
        ip->src_addr = original->dst_addr;  // answered as the destination, unless sluice has an address of its own here
        if (source) std::memcpy(&ip->src_addr, source->bytes, 4);
        ip->hdr_checksum = 0;
        ip->hdr_checksum = checksum_ipv4_header(ip, rte_ipv4_hdr_len(ip));
        icmp->icmp_cksum = static_cast<uint16_t>(~rte_raw_cksum(icmp, 8 + quoted));
        write_ethernet(frame, peer, own_mac, RTE_BE16(RTE_ETHER_TYPE_IPV4));
    } else {
        auto* ip = reinterpret_cast<rte_ipv6_hdr*>(l3);
        const auto* original = reinterpret_cast<const rte_ipv6_hdr*>(quote);
        ip->vtc_flow = rte_cpu_to_be_32(6u << 28);
        ip->payload_len = rte_cpu_to_be_16(static_cast<uint16_t>(8 + quoted));
        ip->proto = kIpProtoIcmpv6;
        ip->hop_limits = kReplyTtl;
        std::memcpy(ip->dst_addr, original->src_addr, 16);
        std::memcpy(ip->src_addr, source ? source->bytes : original->dst_addr, 16);
        icmp->icmp_cksum = rte_ipv6_udptcp_cksum(ip, icmp);  // the pseudo-header rule is the same for ICMPv6
        write_ethernet(frame, peer, own_mac, RTE_BE16(RTE_ETHER_TYPE_IPV6));
    }
    return true;
}

// Whether sluice may answer this packet with an ICMP error or an echo reply (RFC 1812 4.3.2.7, RFC 4443 2.4 e,
// RFC 1122 3.2.2.6): not an ICMP error, a later fragment, a packet to a multicast or broadcast address, or one from
// an address that is no unicast address (the answer would go to many, or nowhere). Nor a first fragment that cuts
// its own L4 header (RFC 1858: the RX lcore drops those): an error quoting it would carry no whole ports, and
// sluice's own parser refuses such a quote (icmp_bad_quote).
bool may_answer(const uint8_t* l3, const PacketMeta& meta) {
    if ((meta.flags & (kMetaIcmpError | kMetaFragmentTiny)) || ((meta.flags & kMetaFragment) && meta.l4_offset == 0))
        return false;
    if (meta.family == IpFamily::ipv4) {
        const uint8_t src_first = l3[12], dst_first = l3[16];
        return dst_first < 224 && src_first != 0 && src_first < 224;
    }
    static constexpr uint8_t kUnspecified[16] = {};
    const auto* ip = reinterpret_cast<const rte_ipv6_hdr*>(l3);
    return ip->dst_addr[0] != 0xff && ip->src_addr[0] != 0xff && std::memcmp(ip->src_addr, kUnspecified, 16) != 0;
}

// Plain Ethernet right before the IP header (VLAN tags are not kept), to the frame's sender from own_mac.
void answer_on_ethernet(rte_mbuf* m, const PacketMeta& meta, const rte_ether_addr& own_mac) {
    uint8_t* frame = rte_pktmbuf_mtod(m, uint8_t*);
    const rte_ether_addr peer = reinterpret_cast<rte_ether_hdr*>(frame)->src_addr;
    const uint16_t ether_type =
        meta.family == IpFamily::ipv4 ? RTE_BE16(RTE_ETHER_TYPE_IPV4) : RTE_BE16(RTE_ETHER_TYPE_IPV6);
    write_ethernet(frame + meta.l3_offset - sizeof(rte_ether_hdr), peer, own_mac, ether_type);
    rte_pktmbuf_adj(m, static_cast<uint16_t>(meta.l3_offset - sizeof(rte_ether_hdr)));
}

}  // namespace

bool is_echo_request(const rte_mbuf* m, const PacketMeta& meta) {
    // A tiny first fragment may end before its ICMP header (the RX lcore drops those, but this must not read past).
    if (meta.l4_offset == 0 || (meta.flags & kMetaIcmpError) || rte_pktmbuf_data_len(m) < meta.l4_offset + 8u)
        return false;
    const uint8_t type = *rte_pktmbuf_mtod_offset(m, const uint8_t*, meta.l4_offset);
    return meta.family == IpFamily::ipv4 ? meta.l4_proto == kIpProtoIcmp && type == kIcmpEchoRequest
                                         : meta.l4_proto == kIpProtoIcmpv6 && type == kIcmp6EchoRequest;
}

bool make_echo_reply(rte_mbuf* m, const PacketMeta& meta, const rte_ether_addr& own_mac) {
    uint8_t* l3 = rte_pktmbuf_mtod_offset(m, uint8_t*, meta.l3_offset);
    if (!is_echo_request(m, meta) || (meta.flags & kMetaFragment) || !may_answer(l3, meta)) return false;
    auto* icmp = rte_pktmbuf_mtod_offset(m, rte_icmp_hdr*, meta.l4_offset);
    // A corrupted request gets no reply (as in Linux): the reply's checksum is updated from the request's.
    if (meta.family == IpFamily::ipv4) {
        const uint32_t length = rte_be_to_cpu_16(reinterpret_cast<const rte_ipv4_hdr*>(l3)->total_length) -
                                (meta.l4_offset - meta.l3_offset);
        if (rte_raw_cksum(icmp, length) != 0xffff) return false;
    } else if (meta.l4_offset - meta.l3_offset != sizeof(rte_ipv6_hdr) ||
               rte_ipv6_udptcp_cksum_verify(reinterpret_cast<const rte_ipv6_hdr*>(l3), icmp) != 0) {
        return false;  // extension headers: not answered (the reply would carry them back)
    }
    uint16_t old_word, new_word;  // type and code: the only change the ICMP checksum sees (the swap keeps the sum)
    std::memcpy(&old_word, icmp, 2);
    if (meta.family == IpFamily::ipv4) {
        auto* ip = reinterpret_cast<rte_ipv4_hdr*>(l3);
        const uint32_t src = ip->src_addr;
        ip->src_addr = ip->dst_addr;
        ip->dst_addr = src;
        ip->time_to_live = kReplyTtl;
        ip->hdr_checksum = 0;
        ip->hdr_checksum =
            checksum_ipv4_header(ip, rte_ipv4_hdr_len(ip));  // options, if any, are returned as they came
        icmp->icmp_type = kIcmpEchoReply;
    } else {
        auto* ip = reinterpret_cast<rte_ipv6_hdr*>(l3);
        uint8_t tmp[16];
        std::memcpy(tmp, ip->src_addr, 16);
        std::memcpy(ip->src_addr, ip->dst_addr, 16);
        std::memcpy(ip->dst_addr, tmp, 16);
        ip->hop_limits = kReplyTtl;
        icmp->icmp_type = kIcmp6EchoReply;
    }
    std::memcpy(&new_word, icmp, 2);
    icmp->icmp_cksum = checksum_update16(icmp->icmp_cksum, old_word, new_word);
    answer_on_ethernet(m, meta, own_mac);
    return true;
}

bool make_reject(rte_mbuf* m, const PacketMeta& meta, const rte_ether_addr& own_mac) {
    if (meta.flags & (kMetaIcmpError | kMetaFragment)) {
        // No error about an error (RFC 1122 3.2.2); a fragment is refused silently (the first one carries the tuple).
        return false;
    }
    if (meta.l4_proto == kIpProtoTcp && meta.l4_offset) return tcp_rst(m, meta, own_mac);
    const bool v4 = meta.family == IpFamily::ipv4;
    return icmp_error(m, meta, own_mac, v4 ? 3 : 1, v4 ? 13 : 1, 0);  // unreachable: administratively prohibited
}

bool make_too_big(rte_mbuf* m, const PacketMeta& meta, uint16_t mtu, const rte_ether_addr& own_mac) {
    const uint8_t* l3 = rte_pktmbuf_mtod_offset(m, const uint8_t*, meta.l3_offset);
    if (!may_answer(l3, meta)) return false;
    if (meta.family == IpFamily::ipv4) {
        const auto* ip = reinterpret_cast<const rte_ipv4_hdr*>(l3);
        // Without DF the sender allowed fragmentation, which sluice does not do: the packet is only dropped.
        if (!(rte_be_to_cpu_16(ip->fragment_offset) & RTE_IPV4_HDR_DF_FLAG) || ip->time_to_live <= 1) return false;
        return icmp_error(m, meta, own_mac, 3, 4, rte_cpu_to_be_32(mtu));  // fragmentation needed (RFC 1191)
    }
    if (reinterpret_cast<const rte_ipv6_hdr*>(l3)->hop_limits <= 1) return false;  // expired first
    return icmp_error(m, meta, own_mac, 2, 0, rte_cpu_to_be_32(mtu));  // packet too big (RFC 4443 3.2, RFC 8201)
}

bool make_time_exceeded(rte_mbuf* m, const PacketMeta& meta, const IpAddress& source, const rte_ether_addr& own_mac) {
    if (!may_answer(rte_pktmbuf_mtod_offset(m, const uint8_t*, meta.l3_offset), meta)) return false;
    const bool v4 = meta.family == IpFamily::ipv4;
    return icmp_error(m, meta, own_mac, v4 ? 11 : 3, 0, 0,
                      &source);  // time exceeded in transit (RFC 792, RFC 4443 3.3)
}

bool make_unreachable(rte_mbuf* m, const PacketMeta& meta, bool prohibited, const IpAddress& source,
                      const rte_ether_addr& own_mac) {
    if (!may_answer(rte_pktmbuf_mtod_offset(m, const uint8_t*, meta.l3_offset), meta)) return false;
    const bool v4 = meta.family == IpFamily::ipv4;
    const uint8_t code = prohibited ? (v4 ? 13 : 1) : 0;  // RFC 792, RFC 1812 5.2.7.1; RFC 4443 3.1
    return icmp_error(m, meta, own_mac, v4 ? 3 : 1, code, 0, &source);
}

}  // namespace sluice

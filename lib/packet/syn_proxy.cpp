#include "packet/syn_proxy.hpp"

#include <cstring>

#include <rte_ip.h>
#include <rte_tcp.h>

#include "common/ip_proto.hpp"
#include "packet/checksum.hpp"

namespace sluice {
namespace {

constexpr uint32_t kCookieMacShift = 5;
constexpr uint32_t kCookiePeriodMask = 0x7;
constexpr uint8_t kTcpOptionEnd = 0;
constexpr uint8_t kTcpOptionNop = 1;
constexpr uint8_t kTcpOptionMss = 2;
constexpr uint8_t kTcpOptionWindowScale = 3;

// The value bytes of the option `kind` of exactly `length` bytes, or null when the header has none or its
// options are malformed.
const uint8_t* find_tcp_option(const uint8_t* tcp, uint32_t header_length, uint8_t wanted, uint8_t wanted_length) {
    for (uint32_t at = sizeof(rte_tcp_hdr); at < header_length;) {
        const uint8_t kind = tcp[at];
        if (kind == kTcpOptionEnd) break;
        if (kind == kTcpOptionNop) {
            ++at;
            continue;
        }
        if (at + 1 >= header_length) break;
        const uint8_t length = tcp[at + 1];
        if (length < 2 || at + length > header_length) break;
        if (kind == wanted && length == wanted_length) return tcp + at + 2;
        at += length;
    }
    return nullptr;
}
constexpr uint8_t kSegmentTtl = 64;

// The MAC covers the MSS index too, so a client cannot choose the MSS sluice announces to the backend.
uint32_t cookie_mac(const SipHashKey& key, const FiveTuple& tuple, uint32_t client_isn, uint64_t period,
                    uint32_t mss_index) {
    struct {
        uint8_t src[16];
        uint8_t dst[16];
        uint16_t src_port;
        uint16_t dst_port;
        uint32_t isn;
        uint64_t period_and_mss;
    } input;
    std::memcpy(input.src, tuple.src.bytes, 16);
    std::memcpy(input.dst, tuple.dst.bytes, 16);
    input.src_port = tuple.src_port;
    input.dst_port = tuple.dst_port;
    input.isn = client_isn;
    input.period_and_mss = period << 2 | mss_index;
    static_assert(sizeof input == 48);  // no padding: every byte hashed is set
    return static_cast<uint32_t>(siphash24(key, &input, sizeof input) >> (64 - (32 - kCookieMacShift)));
}

void shift_word(uint8_t* tcp, std::size_t offset, uint32_t delta) {
    uint32_t old_be;
    std::memcpy(&old_be, tcp + offset, 4);
    const uint32_t new_be = rte_cpu_to_be_32(rte_be_to_cpu_32(old_be) + delta);
    auto* header = reinterpret_cast<rte_tcp_hdr*>(tcp);
    header->cksum = checksum_update_bytes(header->cksum, &old_be, &new_be, 4);
    std::memcpy(tcp + offset, &new_be, 4);
}

}  // namespace

uint8_t syn_cookie_mss_index(uint16_t client_mss) {
    uint8_t index = 0;
    for (uint8_t i = 1; i < 4; ++i)
        if (kSynCookieMss[i] <= client_mss) index = i;
    return index;
}

uint32_t syn_cookie_make(const SipHashKey& key, const FiveTuple& tuple, uint32_t client_isn, uint64_t period,
                         uint8_t mss_index) {
    return cookie_mac(key, tuple, client_isn, period, mss_index & 0x3u) << kCookieMacShift |
           static_cast<uint32_t>(period & kCookiePeriodMask) << 2 | (mss_index & 0x3u);
}

int syn_cookie_check(const SipHashKey& key, const FiveTuple& tuple, uint32_t client_isn, uint32_t cookie,
                     uint64_t period) {
    const uint32_t cookie_period = (cookie >> 2) & kCookiePeriodMask;
    for (uint64_t candidate : {period, period - 1}) {
        if ((candidate & kCookiePeriodMask) != cookie_period) continue;
        if (cookie_mac(key, tuple, client_isn, candidate, cookie & 0x3u) == cookie >> kCookieMacShift)
            return static_cast<int>(cookie & 0x3u);
    }
    return -1;
}

uint16_t tcp_mss_option(const uint8_t* tcp, uint32_t header_length) {
    const uint8_t* value = find_tcp_option(tcp, header_length, kTcpOptionMss, 4);
    return value ? static_cast<uint16_t>(value[0] << 8 | value[1]) : 0;
}

int tcp_window_scale_option(const uint8_t* tcp, uint32_t header_length) {
    const uint8_t* value = find_tcp_option(tcp, header_length, kTcpOptionWindowScale, 3);
    return value ? value[0] : -1;
}

bool write_tcp_segment(rte_mbuf* m, PacketMeta& meta, const TcpSegment& segment, const rte_ether_addr& dst_mac,
                       const rte_ether_addr& src_mac) {
    const bool v4 = segment.family == IpFamily::ipv4;
    const uint16_t ip_length = v4 ? sizeof(rte_ipv4_hdr) : sizeof(rte_ipv6_hdr);
    const uint16_t tcp_length = static_cast<uint16_t>(sizeof(rte_tcp_hdr) + (segment.mss ? 4 : 0));
    const uint16_t frame_length = static_cast<uint16_t>(sizeof(rte_ether_hdr) + ip_length + tcp_length);
    if (rte_pktmbuf_data_len(m) < frame_length) {
        if (!rte_pktmbuf_append(m, static_cast<uint16_t>(frame_length - rte_pktmbuf_data_len(m)))) return false;
    } else {
        rte_pktmbuf_trim(m, static_cast<uint16_t>(rte_pktmbuf_data_len(m) - frame_length));
    }
    uint8_t* frame = rte_pktmbuf_mtod(m, uint8_t*);
    auto* eth = reinterpret_cast<rte_ether_hdr*>(frame);
    eth->dst_addr = dst_mac;
    eth->src_addr = src_mac;
    eth->ether_type = v4 ? RTE_BE16(RTE_ETHER_TYPE_IPV4) : RTE_BE16(RTE_ETHER_TYPE_IPV6);

    uint8_t* l3 = frame + sizeof(rte_ether_hdr);
    auto* tcp = reinterpret_cast<rte_tcp_hdr*>(l3 + ip_length);
    tcp->src_port = segment.src_port;
    tcp->dst_port = segment.dst_port;
    tcp->sent_seq = rte_cpu_to_be_32(segment.seq);
    tcp->recv_ack = rte_cpu_to_be_32(segment.ack);
    tcp->data_off = static_cast<uint8_t>((tcp_length / 4) << 4);
    tcp->tcp_flags = segment.flags;
    tcp->rx_win = rte_cpu_to_be_16(segment.window);
    tcp->cksum = 0;
    tcp->tcp_urp = 0;
    if (segment.mss) {
        uint8_t* option = reinterpret_cast<uint8_t*>(tcp + 1);
        option[0] = kTcpOptionMss;
        option[1] = 4;
        option[2] = static_cast<uint8_t>(segment.mss >> 8);
        option[3] = static_cast<uint8_t>(segment.mss);
    }
    if (v4) {
        auto* ip = reinterpret_cast<rte_ipv4_hdr*>(l3);
        ip->version_ihl = RTE_IPV4_VHL_DEF;
        ip->type_of_service = 0;
        ip->total_length = rte_cpu_to_be_16(static_cast<uint16_t>(ip_length + tcp_length));
        ip->packet_id = 0;
        ip->fragment_offset = RTE_BE16(RTE_IPV4_HDR_DF_FLAG);
        ip->time_to_live = kSegmentTtl;
        ip->next_proto_id = kIpProtoTcp;
        std::memcpy(&ip->src_addr, segment.src.bytes, 4);
        std::memcpy(&ip->dst_addr, segment.dst.bytes, 4);
        ip->hdr_checksum = 0;
        ip->hdr_checksum = checksum_ipv4_header(ip, rte_ipv4_hdr_len(ip));
        tcp->cksum = rte_ipv4_udptcp_cksum(ip, tcp);
    } else {
        auto* ip = reinterpret_cast<rte_ipv6_hdr*>(l3);
        ip->vtc_flow = rte_cpu_to_be_32(6u << 28);
        ip->payload_len = rte_cpu_to_be_16(tcp_length);
        ip->proto = kIpProtoTcp;
        ip->hop_limits = kSegmentTtl;
        std::memcpy(ip->src_addr, segment.src.bytes, 16);
        std::memcpy(ip->dst_addr, segment.dst.bytes, 16);
        tcp->cksum = rte_ipv6_udptcp_cksum(ip, tcp);
    }
    meta.l3_offset = sizeof(rte_ether_hdr);
    meta.l4_offset = static_cast<uint16_t>(sizeof(rte_ether_hdr) + ip_length);
    meta.family = segment.family;
    meta.l4_proto = kIpProtoTcp;
    meta.flags &= static_cast<uint8_t>(~(kMetaFragment | kMetaFragmentTiny | kMetaFragmentPorts | kMetaIcmpError));
    return true;
}

void tcp_shift_seq(uint8_t* tcp, uint32_t delta) { shift_word(tcp, offsetof(rte_tcp_hdr, sent_seq), delta); }
void tcp_shift_ack(uint8_t* tcp, uint32_t delta) { shift_word(tcp, offsetof(rte_tcp_hdr, recv_ack), delta); }

}  // namespace sluice

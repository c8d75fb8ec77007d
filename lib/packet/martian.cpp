#include "packet/martian.hpp"

#include <algorithm>
#include <cstring>

#include <rte_byteorder.h>

#include "common/compiler.hpp"
#include "common/ip_proto.hpp"
#include "packet/packet_meta.hpp"

namespace sluice {
namespace {

constexpr uint32_t kLimitedBroadcast = 0xffffffff;
constexpr uint32_t kLinkLocalV4 = 0xa9fe;    // 169.254.0.0/16, as its top 16 bits
constexpr uint8_t kMaxBroadcastPrefix = 30;  // a /31 (RFC 3021) or /32 has no broadcast address

bool bytes_less(const IpAddress& a, const IpAddress& b) { return std::memcmp(a.bytes, b.bytes, 16) < 0; }

bool link_local_v6(const IpAddress& a) { return a.bytes[0] == 0xfe && (a.bytes[1] & 0xc0) == 0x80; }  // fe80::/10

bool has_ports(uint8_t proto) { return proto == kIpProtoTcp || proto == kIpProtoUdp; }

// Whether a TCP or UDP packet carries port 0 on either side. An ICMP error's ports are its quote's (not checked),
// a later fragment has none, a tiny first fragment's are cut (parse flagged it; the fragment tracker drops it).
bool port_zero(const uint8_t* frame, const PacketMeta& meta, const FiveTuple& tuple) {
    if (!has_ports(meta.l4_proto)) return false;
    if (SLUICE_UNLIKELY(meta.flags & kMetaFragment)) {
        if (meta.l4_offset == 0 || (meta.flags & kMetaFragmentTiny)) return false;
        uint16_t src_port, dst_port;
        first_fragment_ports(frame, meta, src_port, dst_port);
        return src_port == 0 || dst_port == 0;
    }
    return tuple.src_port == 0 || tuple.dst_port == 0;
}

}  // namespace

void MartianFilter::add_service_address(IpFamily family, const IpAddress& address) {
    if (family == IpFamily::ipv4) own_v4_.push_back(rte_be_to_cpu_32(address.words[0]));
    else own_v6_.push_back(address);
    last_byte_[family == IpFamily::ipv4 ? address.bytes[3] : address.bytes[15]] |= kListedSource;
}

void MartianFilter::add_port_address(IpFamily family, const IpAddress& address, uint8_t length) {
    add_service_address(family, address);
    (family == IpFamily::ipv4 ? port_v4_ : port_v6_).push_back(address);
    if (family != IpFamily::ipv4 || length == 0 || length > kMaxBroadcastPrefix) return;  // IPv6 has no broadcast
    const uint32_t broadcast = rte_be_to_cpu_32(address.words[0]) | (kLimitedBroadcast >> length);
    broadcasts_v4_.push_back(broadcast);
    last_byte_[static_cast<uint8_t>(broadcast)] |= kListedSource | kListedDestination;
}

void MartianFilter::seal() {
    std::sort(own_v4_.begin(), own_v4_.end());
    own_v4_.erase(std::unique(own_v4_.begin(), own_v4_.end()), own_v4_.end());
    std::sort(own_v6_.begin(), own_v6_.end(), bytes_less);
    own_v6_.erase(std::unique(own_v6_.begin(), own_v6_.end()), own_v6_.end());
    std::sort(broadcasts_v4_.begin(), broadcasts_v4_.end());
    broadcasts_v4_.erase(std::unique(broadcasts_v4_.begin(), broadcasts_v4_.end()), broadcasts_v4_.end());
}

bool MartianFilter::own_v4(uint32_t address) const {
    return std::binary_search(own_v4_.begin(), own_v4_.end(), address);
}

bool MartianFilter::own_v6(const IpAddress& address) const {
    return std::binary_search(own_v6_.begin(), own_v6_.end(), address, bytes_less);
}

bool MartianFilter::port_address(IpFamily family, const IpAddress& address) const {
    const std::vector<IpAddress>& ports = family == IpFamily::ipv4 ? port_v4_ : port_v6_;
    return std::find(ports.begin(), ports.end(), address) != ports.end();
}

bool MartianFilter::directed_broadcast(uint32_t address) const {
    return std::binary_search(broadcasts_v4_.begin(), broadcasts_v4_.end(), address);
}

// Sources first (RFC 1812 5.3.7), then destinations, the land check, and sluice's own and broadcast addresses last.
DropReason MartianFilter::check_v4(uint32_t src, uint32_t dst, uint8_t proto) const {
    const uint32_t src_first = src >> 24, dst_first = dst >> 24;
    if (SLUICE_UNLIKELY(src_first == 0)) return DropReason::martian_source_unspecified;
    if (SLUICE_UNLIKELY(src_first == 127)) return DropReason::martian_source_loopback;
    if (SLUICE_UNLIKELY(src_first >= 224)) {
        if (src == kLimitedBroadcast) return DropReason::martian_source_broadcast;
        return src_first < 240 ? DropReason::martian_source_multicast : DropReason::martian_source_reserved;
    }
    if (SLUICE_UNLIKELY(dst_first == 0)) return DropReason::martian_destination_unspecified;
    if (SLUICE_UNLIKELY(dst_first == 127)) return DropReason::martian_destination_loopback;
    if (SLUICE_UNLIKELY(dst_first >= 224)) {
        if (dst == kLimitedBroadcast) return DropReason::martian_destination_broadcast;
        if (dst_first >= 240) return DropReason::martian_destination_reserved;
        return proto == kIpProtoTcp ? DropReason::martian_destination_multicast  // TCP is unicast only
                                    : DropReason::multicast_not_routed;
    }
    // RFC 3927 7: link-local packets never cross a router; on the link they may only be for sluice itself (a port's
    // address: a ping), never for a VIP, whose connections go on to other links.
    const bool src_link_local = (src >> 16) == kLinkLocalV4, dst_link_local = (dst >> 16) == kLinkLocalV4;
    if (SLUICE_UNLIKELY(src_link_local || dst_link_local) &&
        !port_address(IpFamily::ipv4, IpAddress::from_v4(rte_cpu_to_be_32(dst))))
        return src_link_local ? DropReason::martian_source_link_local : DropReason::martian_destination_link_local;
    if (SLUICE_UNLIKELY(src == dst)) return DropReason::martian_land;
    if (own_v4(src)) return DropReason::martian_source_own;
    if (directed_broadcast(src)) return DropReason::martian_source_broadcast;
    if (directed_broadcast(dst)) return DropReason::martian_destination_broadcast;
    return DropReason::none;
}

DropReason MartianFilter::check_v6(const IpAddress& src, const IpAddress& dst, uint8_t proto) const {
    static constexpr uint32_t kLoopbackWord = RTE_BE32(1), kV4MappedWord = RTE_BE32(0xffff);
    if (SLUICE_UNLIKELY(src.bytes[0] == 0xff)) return DropReason::martian_source_multicast;
    if (SLUICE_UNLIKELY(src.quads[0] == 0)) {  // ::/64 holds ::, ::1 and ::ffff:0:0/96
        if (src.words[2] == 0 && src.words[3] == 0) return DropReason::martian_source_unspecified;
        if (src.words[2] == 0 && src.words[3] == kLoopbackWord) return DropReason::martian_source_loopback;
        if (src.words[2] == kV4MappedWord) return DropReason::martian_source_v4_mapped;
    }
    if (SLUICE_UNLIKELY(dst.quads[0] == 0 && dst.words[2] == 0)) {
        if (dst.words[3] == 0) return DropReason::martian_destination_unspecified;
        if (dst.words[3] == kLoopbackWord) return DropReason::martian_destination_loopback;
    }
    if (SLUICE_UNLIKELY(dst.bytes[0] == 0xff))
        return proto == kIpProtoTcp ? DropReason::martian_destination_multicast : DropReason::multicast_not_routed;
    // RFC 4291 2.5.6: routers forward no packet with a link-local source or destination.
    const bool src_link_local = link_local_v6(src), dst_link_local = link_local_v6(dst);
    if (SLUICE_UNLIKELY(src_link_local || dst_link_local) && !port_address(IpFamily::ipv6, dst))
        return src_link_local ? DropReason::martian_source_link_local : DropReason::martian_destination_link_local;
    if (SLUICE_UNLIKELY(src == dst)) return DropReason::martian_land;
    if (SLUICE_UNLIKELY(own_v6(src))) return DropReason::martian_source_own;
    return DropReason::none;
}

DropReason MartianFilter::check_slowly(const uint8_t* frame, const PacketMeta& meta, const FiveTuple& tuple) const {
    const uint8_t* ip = frame + meta.l3_offset;
    DropReason verdict;
    if (meta.family == IpFamily::ipv4) {
        uint32_t src, dst;
        std::memcpy(&src, ip + 12, 4);
        std::memcpy(&dst, ip + 16, 4);
        verdict = check_v4(rte_be_to_cpu_32(src), rte_be_to_cpu_32(dst), meta.l4_proto);
    } else {
        verdict = check_v6(IpAddress::from_v6(ip + 8), IpAddress::from_v6(ip + 24), meta.l4_proto);
    }
    if (verdict != DropReason::none) return verdict;
    return port_zero(frame, meta, tuple) ? DropReason::martian_port_zero : DropReason::none;
}

DropReason MartianFilter::check(const FiveTuple& tuple) const {
    if (!checks(tuple.family)) return DropReason::none;
    const DropReason verdict =
        tuple.family == IpFamily::ipv4
            ? check_v4(rte_be_to_cpu_32(tuple.src.words[0]), rte_be_to_cpu_32(tuple.dst.words[0]), tuple.proto)
            : check_v6(tuple.src, tuple.dst, tuple.proto);
    if (verdict != DropReason::none) return verdict;
    return has_ports(tuple.proto) && (tuple.src_port == 0 || tuple.dst_port == 0) ? DropReason::martian_port_zero
                                                                                  : DropReason::none;
}

}  // namespace sluice

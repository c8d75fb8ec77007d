// Martian packets (RFC 1812 5.3.7, RFC 6890, RFC 4291 2.5): addresses that no packet from the network may carry,
// source equal to destination (a land attack), TCP/UDP port 0; and multicast destinations, since sluice routes no
// multicast (multicast_not_routed, not a martian reason: a LAN's group traffic is normal). The RX lcore checks every IP
// packet once, right after parsing, so neither the firewall, the load balancer nor plain forwarding ever sees one.
// docs/security.md, "Martian addresses", lists each check. Built by the control thread; read-only afterwards, fast-path
// safe.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/drop_reason.hpp"
#include "common/five_tuple.hpp"
#include "common/ip_proto.hpp"
#include "packet/packet_meta.hpp"

namespace sluice {

// Whether a drop reason is one of the martian checks' (declared together, from martian_source_broadcast to
// martian_port_zero, in drop_reason.hpp).
constexpr bool is_martian(DropReason reason) {
    return reason >= DropReason::martian_source_broadcast && reason <= DropReason::martian_port_zero;
}

class MartianFilter {
public:
    // Control thread: whether each family is checked (dataplane.martians), and sluice's own addresses, which no
    // packet from the network comes from. A port's address also gives its network's directed broadcast, and is the
    // one destination a link-local source may have (sluice itself, on that link). Call seal() once after the last
    // add, before the filter is published.
    void set_checked(bool ipv4, bool ipv6) {
        ipv4_ = ipv4;
        ipv6_ = ipv6;
    }
    void add_port_address(IpFamily family, const IpAddress& address, uint8_t length);
    void add_service_address(IpFamily family, const IpAddress& address);  // a NAT pool address, a VIP
    void seal();

    bool checks(IpFamily family) const { return family == IpFamily::ipv4 ? ipv4_ : ipv6_; }

    // The reason an IP packet parse_frame accepted is a martian, or DropReason::none. Addresses are read from the
    // IP header at frame + meta.l3_offset (an ICMP error's tuple is its quote's); ports from tuple, or from a first
    // fragment's L4 header. Not for neighbour frames (ARP, NS/NA): DAD's :: source and multicast groups are theirs.
    // Inline: plain unicast settles with a few table loads ORed together and one branch, on every packet.
    DropReason check(const uint8_t* frame, const PacketMeta& meta, const FiveTuple& tuple) const {
        const uint8_t* ip = frame + meta.l3_offset;
        unsigned unusual;
        if (meta.family == IpFamily::ipv4) {
            if (!ipv4_) return DropReason::none;
            unusual = kUnusualFirstByteV4[ip[12]] | kUnusualFirstByteV4[ip[16]] | (last_byte_[ip[15]] & kListedSource) |
                      (last_byte_[ip[19]] & kListedDestination) | (std::memcmp(ip + 12, ip + 16, 4) == 0);
        } else {
            if (!ipv6_) return DropReason::none;
            unusual = kUnusualFirstByteV6[ip[8]] | kUnusualFirstByteV6[ip[24]] | (last_byte_[ip[23]] & kListedSource) |
                      (std::memcmp(ip + 8, ip + 24, 16) == 0);
        }
        const bool port_to_check = (meta.l4_proto == kIpProtoTcp || meta.l4_proto == kIpProtoUdp) &&
                                   ((meta.flags & kMetaFragment) || tuple.src_port == 0 || tuple.dst_port == 0);
        if (SLUICE_LIKELY(!unusual && !port_to_check)) return DropReason::none;
        return check_slowly(frame, meta, tuple);
    }
    // The same verdict on the tuple of an unfragmented packet that is no ICMP error (explain; any thread).
    DropReason check(const FiveTuple& tuple) const;

private:
    // First bytes of the addresses that may be martian by their class alone. IPv4: 0/8, 127/8, 169.254/16, 224/3.
    // IPv6: ::/8 (::, ::1, IPv4-mapped), fe80::/10, ff00::/8.
    static constexpr std::array<uint8_t, 256> kUnusualFirstByteV4 = [] {
        std::array<uint8_t, 256> t{};
        t[0] = t[127] = t[169] = 1;
        for (std::size_t b = 224; b < 256; ++b) t[b] = 1;
        return t;
    }();
    static constexpr std::array<uint8_t, 256> kUnusualFirstByteV6 = [] {
        std::array<uint8_t, 256> t{};
        t[0x00] = t[0xfe] = t[0xff] = 1;
        return t;
    }();
    static constexpr uint8_t kListedSource = 2, kListedDestination = 4;  // bits of last_byte_

    DropReason check_slowly(const uint8_t* frame, const PacketMeta& meta, const FiveTuple& tuple) const;
    DropReason check_v4(uint32_t src, uint32_t dst, uint8_t proto) const;
    DropReason check_v6(const IpAddress& src, const IpAddress& dst, uint8_t proto) const;
    bool own_v4(uint32_t address) const;
    bool own_v6(const IpAddress& address) const;
    bool directed_broadcast(uint32_t address) const;
    bool port_address(IpFamily family, const IpAddress& address) const;

    bool ipv4_ = true;
    bool ipv6_ = true;
    // By an address's last byte: kListedSource when an own address or a directed broadcast ends with it,
    // kListedDestination when a directed broadcast does.
    std::array<uint8_t, 256> last_byte_{};
    std::vector<uint32_t> own_v4_;         // host order, sorted
    std::vector<IpAddress> own_v6_;        // sorted as bytes
    std::vector<uint32_t> broadcasts_v4_;  // host order, sorted
    std::vector<IpAddress> port_v4_;       // the ports' own addresses (a few: scanned, for link-local packets only)
    std::vector<IpAddress> port_v6_;
};

}  // namespace sluice

// Martian packets (RFC 1812 5.3.7, RFC 6890, RFC 4291 2.5): addresses that no packet from the network may carry,
// source equal to destination (a land attack), TCP/UDP port 0. The RX lcore checks every IP packet once, right after
// parsing, so neither the firewall, the load balancer nor plain forwarding ever sees one. docs/security.md,
// "Martian addresses", lists each check. Built by the control thread; read-only afterwards, fast-path safe.
#pragma once

#include <cstdint>
#include <vector>

#include "common/drop_reason.hpp"
#include "common/five_tuple.hpp"

namespace sluice {

struct PacketMeta;  // packet_meta.hpp

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
    DropReason check(const uint8_t* frame, const PacketMeta& meta, const FiveTuple& tuple) const;
    // The same verdict on the tuple of an unfragmented packet that is no ICMP error (explain; any thread).
    DropReason check(const FiveTuple& tuple) const;

private:
    DropReason check_v4(uint32_t src, uint32_t dst, uint8_t proto) const;
    DropReason check_v6(const IpAddress& src, const IpAddress& dst, uint8_t proto) const;
    bool own_v4(uint32_t address) const;
    bool own_v6(const IpAddress& address) const;
    bool directed_broadcast(uint32_t address) const;
    bool port_address(IpFamily family, const IpAddress& address) const;
    void list_last_byte(uint8_t last_byte) { listed_last_byte_[last_byte >> 6] |= uint64_t{1} << (last_byte & 63); }
    // One bit per value of an address's last byte, set for the own addresses and directed broadcasts: most packets
    // are settled by one bit test, without a search of the arrays below.
    bool maybe_listed(uint8_t last_byte) const { return (listed_last_byte_[last_byte >> 6] >> (last_byte & 63)) & 1; }

    bool ipv4_ = true;
    bool ipv6_ = true;
    uint64_t listed_last_byte_[4] = {};
    std::vector<uint32_t> own_v4_;         // host order, sorted
    std::vector<IpAddress> own_v6_;        // sorted as bytes
    std::vector<uint32_t> broadcasts_v4_;  // host order, sorted
    std::vector<IpAddress> port_v4_;       // the ports' own addresses (a few: scanned, for link-local packets only)
    std::vector<IpAddress> port_v6_;
};

}  // namespace sluice

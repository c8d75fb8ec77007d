// The packets of the SYN proxy (docs/architecture.md, "SYN proxy"): SYN cookies, and TCP segments sluice writes
// itself (the SYN+ACK to a client, the SYN and the ACK to a backend). Fast-path safe (no allocation); owning
// worker only.
//
// A cookie is the initial sequence number of sluice's SYN+ACK. Its 32 bits: a 27-bit SipHash MAC of the client's
// tuple, its ISN, the time period and the MSS index | 3 low bits of the period | a 2-bit index into kSynCookieMss. A
// period is 64 s; a cookie is accepted in its period and the next one (64-128 s), as Linux accepts its own for 2
// minutes.
#pragma once

#include <cstdint>

#include <rte_ether.h>
#include <rte_mbuf.h>

#include "common/five_tuple.hpp"
#include "common/siphash.hpp"
#include "packet/packet_meta.hpp"

namespace sluice {

// The MSS values a cookie can carry (the common Ethernet ones, the IPv6 minimum path and RFC 879's default).
inline constexpr uint16_t kSynCookieMss[4] = {536, 1220, 1440, 1460};
inline constexpr uint64_t kSynCookiePeriodSeconds = 64;

// The largest kSynCookieMss index whose MSS is at most the client's (0: no MSS option, or a smaller one).
uint8_t syn_cookie_mss_index(uint16_t client_mss);

// tuple: the client's SYN (client -> VIP). period: seconds / kSynCookiePeriodSeconds.
uint32_t syn_cookie_make(const SipHashKey& key, const FiveTuple& tuple, uint32_t client_isn, uint64_t period,
                         uint8_t mss_index);

// The kSynCookieMss index the cookie carries when it is one sluice made for this tuple and ISN in this period or
// the one before; -1 otherwise.
int syn_cookie_check(const SipHashKey& key, const FiveTuple& tuple, uint32_t client_isn, uint32_t cookie,
                     uint64_t period);

// The MSS option of a TCP header (tcp points at it, header_length = data offset x 4, within the frame); 0 when
// it has none or the options are malformed.
uint16_t tcp_mss_option(const uint8_t* tcp, uint32_t header_length);
// Its window scale option's shift count (RFC 7323 2.2), -1 when it has none.
int tcp_window_scale_option(const uint8_t* tcp, uint32_t header_length);

struct TcpSegment {
    IpFamily family = IpFamily::ipv4;
    IpAddress src{};
    IpAddress dst{};
    uint16_t src_port = 0;  // network order
    uint16_t dst_port = 0;
    uint32_t seq = 0;  // host order
    uint32_t ack = 0;
    uint8_t flags = 0;  // RTE_TCP_*_FLAG
    uint16_t window = 0;
    uint16_t mss = 0;  // > 0: an MSS option is sent

    // Addresses, ports and family from a packet's tuple: its own direction, or reversed for an answer to it.
    void set_endpoints(const FiveTuple& tuple, bool answer) {
        family = tuple.family;
        src = answer ? tuple.dst : tuple.src;
        dst = answer ? tuple.src : tuple.dst;
        src_port = answer ? tuple.dst_port : tuple.src_port;
        dst_port = answer ? tuple.src_port : tuple.dst_port;
    }
};

// Turns the mbuf into exactly this segment behind a plain Ethernet header (no VLAN tag, no IP options or
// extension headers, no payload): IPv4 TTL 64 with DF, IPv6 hop limit 64, both checksums computed. meta's offsets
// and protocol are updated so later stages (NAT rewrite, forwarding) work on it. False when the mbuf has no room.
bool write_tcp_segment(rte_mbuf* m, PacketMeta& meta, const TcpSegment& segment, const rte_ether_addr& dst_mac,
                       const rte_ether_addr& src_mac);

// Adds delta to the TCP header's sequence number (or acknowledgment number) and updates its checksum in place
// (RFC 1624): the SYN proxy's translation between the cookie's sequence space and the backend's.
void tcp_shift_seq(uint8_t* tcp, uint32_t delta);
void tcp_shift_ack(uint8_t* tcp, uint32_t delta);

}  // namespace sluice

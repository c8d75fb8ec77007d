// Frames for in-process packet tests: Ethernet + IPv4/IPv6 + TCP/UDP/ICMP echo with every checksum right, and the
// readers a test needs to check what came out. Checksums come from lib/packet/checksum.hpp, the data path's own.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "packet/checksum.hpp"

namespace sluice::test {

using Bytes = std::vector<uint8_t>;

inline constexpr uint8_t kSyn = 0x02, kAck = 0x10, kRst = 0x04, kFin = 0x01;

struct FrameSpec {
    std::string src;  // IPv4 or IPv6 text; the family follows
    std::string dst;
    uint8_t proto = IPPROTO_UDP;
    uint16_t src_port = 0;  // ICMP echo: the identifier
    uint16_t dst_port = 0;
    uint8_t tcp_flags = kSyn;
    uint32_t seq = 1000;
    uint32_t ack = 0;
    uint16_t window = 65535;  // TCP
    int wscale = -1;          // TCP: >= 0 adds a window scale option (RFC 7323) with this shift
    uint8_t ttl = 64;
    std::size_t payload = 0;
    uint8_t src_mac_last = 0x01;  // 02:00:00:00:00:NN
    uint8_t dst_mac_last = 0x02;
    int icmp_type = -1;  // ICMP/ICMPv6: the type; -1: the family's echo request
    uint8_t icmp_code = 0;
};

// An ICMP message (ICMPv6 for IPv6 addresses) of that type; for the echo types, id is the identifier.
inline FrameSpec icmp_spec(const char* src, const char* dst, int type, uint16_t id = 0) {
    FrameSpec f;
    f.src = src, f.dst = dst, f.proto = IPPROTO_ICMP, f.src_port = id, f.icmp_type = type;
    return f;
}

inline FrameSpec tcp_spec(const char* src, uint16_t sport, const char* dst, uint16_t dport, uint8_t flags = kSyn) {
    FrameSpec f;
    f.src = src, f.dst = dst, f.proto = IPPROTO_TCP, f.src_port = sport, f.dst_port = dport, f.tcp_flags = flags;
    return f;
}

inline FrameSpec udp_spec(const char* src, uint16_t sport, const char* dst, uint16_t dport) {
    FrameSpec f = tcp_spec(src, sport, dst, dport, 0);
    f.proto = IPPROTO_UDP;
    return f;
}

inline void put16(uint8_t* p, uint16_t v) {
    p[0] = static_cast<uint8_t>(v >> 8);
    p[1] = static_cast<uint8_t>(v);
}
inline void put32(uint8_t* p, uint32_t v) {
    put16(p, static_cast<uint16_t>(v >> 16));
    put16(p + 2, static_cast<uint16_t>(v));
}
inline uint16_t get16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }

inline bool is_v6(const std::string& address) { return address.find(':') != std::string::npos; }

inline Bytes address_bytes(const std::string& text) {
    Bytes b(is_v6(text) ? 16 : 4);
    if (inet_pton(is_v6(text) ? AF_INET6 : AF_INET, text.c_str(), b.data()) != 1)
        throw std::runtime_error("bad address " + text);
    return b;
}

// The L4 checksum over the pseudo-header and segment (RFC 768, 793, 4443; ICMPv4 has no pseudo-header), in the
// buffer's byte order: stored as is, and 0 over a segment whose checksum is right.
inline uint16_t l4_checksum(const Bytes& src, const Bytes& dst, uint8_t proto, const uint8_t* l4, std::size_t len) {
    Bytes sum_over;
    if (proto != IPPROTO_ICMP) {
        sum_over.insert(sum_over.end(), src.begin(), src.end());
        sum_over.insert(sum_over.end(), dst.begin(), dst.end());
        const uint8_t tail[] = {0, 0, static_cast<uint8_t>(len >> 8), static_cast<uint8_t>(len), 0, 0, 0, proto};
        if (src.size() == 4) sum_over.insert(sum_over.end(), {0, proto, tail[2], tail[3]});
        else sum_over.insert(sum_over.end(), std::begin(tail), std::end(tail));
    }
    sum_over.insert(sum_over.end(), l4, l4 + len);
    return checksum_compute(sum_over.data(), sum_over.size());
}

inline Bytes frame(const FrameSpec& f) {
    const Bytes src = address_bytes(f.src), dst = address_bytes(f.dst);
    const bool v6 = src.size() == 16;
    const std::size_t tcp_options = f.proto == IPPROTO_TCP && f.wscale >= 0 ? 4 : 0;
    std::size_t l4_len = f.proto == IPPROTO_TCP ? 20 + tcp_options : 8;
    l4_len += f.payload;
    Bytes l4(l4_len, 0);
    if (f.proto == IPPROTO_TCP) {
        put16(&l4[0], f.src_port);
        put16(&l4[2], f.dst_port);
        put32(&l4[4], f.seq);
        put32(&l4[8], f.ack);
        l4[12] = static_cast<uint8_t>((5 + tcp_options / 4) << 4);
        l4[13] = f.tcp_flags;
        put16(&l4[14], f.window);
        if (tcp_options) {  // NOP, then window scale (kind 3, length 3)
            l4[20] = 1, l4[21] = 3, l4[22] = 3;
            l4[23] = static_cast<uint8_t>(f.wscale);
        }
    } else if (f.proto == IPPROTO_UDP) {
        put16(&l4[0], f.src_port);
        put16(&l4[2], f.dst_port);
        put16(&l4[4], static_cast<uint16_t>(l4_len));
    } else {  // ICMP: echo request unless told
        l4[0] = static_cast<uint8_t>(f.icmp_type >= 0 ? f.icmp_type : v6 ? 128 : 8);
        l4[1] = f.icmp_code;
        put16(&l4[4], f.src_port);
        put16(&l4[6], 1);
    }
    const std::size_t sum_at = f.proto == IPPROTO_TCP ? 16 : f.proto == IPPROTO_UDP ? 6 : 2;
    const uint8_t proto = f.proto == IPPROTO_ICMP && v6 ? uint8_t{IPPROTO_ICMPV6} : f.proto;
    const uint16_t l4_sum = l4_checksum(src, dst, proto, l4.data(), l4.size());
    std::memcpy(&l4[sum_at], &l4_sum, 2);

    Bytes out(14, 0);
    out[0] = 0x02, out[5] = f.dst_mac_last;
    out[6] = 0x02, out[11] = f.src_mac_last;
    put16(&out[12], v6 ? 0x86dd : 0x0800);
    Bytes ip(v6 ? 40 : 20, 0);
    if (v6) {
        ip[0] = 0x60;
        put16(&ip[4], static_cast<uint16_t>(l4.size()));
        ip[6] = proto;
        ip[7] = f.ttl;
        std::memcpy(&ip[8], src.data(), 16);
        std::memcpy(&ip[24], dst.data(), 16);
    } else {
        ip[0] = 0x45;
        put16(&ip[2], static_cast<uint16_t>(20 + l4.size()));
        ip[6] = 0x40;  // DF
        ip[8] = f.ttl;
        ip[9] = proto;
        std::memcpy(&ip[12], src.data(), 4);
        std::memcpy(&ip[16], dst.data(), 4);
        const uint16_t ip_sum = checksum_compute(ip.data(), 20);
        std::memcpy(&ip[10], &ip_sum, 2);
    }
    out.insert(out.end(), ip.begin(), ip.end());
    out.insert(out.end(), l4.begin(), l4.end());
    return out;
}

// One fragment of whole, a frame() of an unfragmented datagram: the bytes [offset, offset + length) of its IP
// payload (offset a multiple of 8), with identification id and the more-fragments flag. IPv6 gets a fragment header
// (offset 0 and no more fragments: an atomic fragment, RFC 6946).
inline Bytes fragment_of(const Bytes& whole, uint32_t id, std::size_t offset, std::size_t length, bool more) {
    const bool v6 = get16(&whole[12]) == 0x86dd;
    const std::size_t l3_end = 14 + (v6 ? 40 : 20);
    Bytes out(whole.begin(), whole.begin() + static_cast<std::ptrdiff_t>(l3_end));
    uint8_t* ip = &out[14];
    if (v6) {
        uint8_t header[8] = {ip[6], 0};
        put16(header + 2, static_cast<uint16_t>(offset | (more ? 1 : 0)));
        put32(header + 4, id);
        ip[6] = 44;
        put16(ip + 4, static_cast<uint16_t>(8 + length));
        out.insert(out.end(), header, header + 8);
    } else {
        put16(ip + 2, static_cast<uint16_t>(20 + length));
        put16(ip + 4, static_cast<uint16_t>(id));
        put16(ip + 6, static_cast<uint16_t>((more ? 0x2000 : 0) | offset / 8));
        ip[10] = ip[11] = 0;
        const uint16_t ip_sum = checksum_compute(ip, 20);
        std::memcpy(ip + 10, &ip_sum, 2);
    }
    const auto payload = whole.begin() + static_cast<std::ptrdiff_t>(l3_end + offset);
    out.insert(out.end(), payload, payload + static_cast<std::ptrdiff_t>(length));
    return out;
}

// The frame with an 802.1Q tag (TPID 0x8100, VLAN vlan, priority pcp) after its MAC addresses.
inline Bytes tagged(const Bytes& untagged_frame, uint16_t vlan, uint8_t pcp = 0) {
    Bytes out(untagged_frame.size() + 4);
    std::copy_n(untagged_frame.begin(), 12, out.begin());
    put16(&out[12], 0x8100);
    put16(&out[14], static_cast<uint16_t>(pcp << 13 | vlan));
    std::copy(untagged_frame.begin() + 12, untagged_frame.end(), out.begin() + 16);
    return out;
}

// The VLAN of a frame's outer 802.1Q tag; -1 when it has none.
inline int vlan_of(const Bytes& b) { return get16(&b[12]) == 0x8100 ? get16(&b[14]) & 0xfff : -1; }

// The frame without its outer 802.1Q tag (as it is when it has none).
inline Bytes untagged(const Bytes& b) {
    if (vlan_of(b) < 0) return b;
    Bytes out(b.size() - 4);
    std::copy_n(b.begin(), 12, out.begin());
    std::copy(b.begin() + 16, b.end(), out.begin() + 12);
    return out;
}

// What a test reads back from a frame sluice sent (Ethernet with at most one 802.1Q tag, IPv4 or IPv6 without
// extension headers).
struct SeenFrame {
    std::string src, dst;
    uint8_t proto = 0;
    uint16_t src_port = 0, dst_port = 0;
    uint8_t tcp_flags = 0;
    uint32_t seq = 0, ack = 0;  // TCP
    uint16_t window = 0;
    uint8_t ttl = 0;
    uint8_t dst_mac_last = 0;
    bool checksums_ok = false;
    int vlan = -1;  // its 802.1Q tag's VLAN; -1: untagged
};

inline SeenFrame read_frame(const Bytes& b) {
    if (vlan_of(b) >= 0) {
        SeenFrame s = read_frame(untagged(b));
        s.vlan = vlan_of(b);
        return s;
    }
    SeenFrame s;
    const bool v6 = get16(&b[12]) == 0x86dd;
    const uint8_t* ip = &b[14];
    char text[INET6_ADDRSTRLEN];
    const std::size_t alen = v6 ? 16 : 4;
    const uint8_t* src = ip + (v6 ? 8 : 12);
    const uint8_t* dst = ip + (v6 ? 24 : 16);
    s.src = inet_ntop(v6 ? AF_INET6 : AF_INET, src, text, sizeof text);
    s.dst = inet_ntop(v6 ? AF_INET6 : AF_INET, dst, text, sizeof text);
    s.proto = ip[v6 ? 6 : 9];
    s.ttl = ip[v6 ? 7 : 8];
    s.dst_mac_last = b[5];
    const std::size_t ihl = v6 ? 40 : (ip[0] & 0x0f) * 4u;
    const std::size_t l4_len = v6 ? get16(ip + 4) : get16(ip + 2) - ihl;
    const uint8_t* l4 = ip + ihl;
    if (s.proto == IPPROTO_TCP || s.proto == IPPROTO_UDP) {
        s.src_port = get16(l4);
        s.dst_port = get16(l4 + 2);
    }
    if (s.proto == IPPROTO_TCP) {
        s.tcp_flags = l4[13];
        s.seq = static_cast<uint32_t>(get16(l4 + 4)) << 16 | get16(l4 + 6);
        s.ack = static_cast<uint32_t>(get16(l4 + 8)) << 16 | get16(l4 + 10);
        s.window = get16(l4 + 14);
    }
    const bool ip_ok = v6 || checksum_compute(ip, ihl) == 0;
    const Bytes src_b(src, src + alen), dst_b(dst, dst + alen);
    s.checksums_ok = ip_ok && l4_checksum(src_b, dst_b, s.proto, l4, l4_len) == 0;
    return s;
}

// An ARP request (RFC 826) from sender_mac / sender_ip asking for target_ip, to the broadcast MAC.
inline Bytes arp_request(const std::array<uint8_t, 6>& sender_mac, const std::string& sender_ip,
                         const std::string& target_ip) {
    Bytes out(14 + 28, 0);
    std::fill_n(out.begin(), 6, 0xff);
    std::copy(sender_mac.begin(), sender_mac.end(), out.begin() + 6);
    put16(&out[12], 0x0806);
    uint8_t* arp = &out[14];
    put16(arp, 1);  // Ethernet
    put16(arp + 2, 0x0800);
    arp[4] = 6, arp[5] = 4;
    put16(arp + 6, 1);  // request
    std::copy(sender_mac.begin(), sender_mac.end(), arp + 8);
    const Bytes sender = address_bytes(sender_ip), target = address_bytes(target_ip);
    std::copy(sender.begin(), sender.end(), arp + 14);
    std::copy(target.begin(), target.end(), arp + 24);
    return out;
}

// An ICMPv6 neighbour solicitation (RFC 4861 4.3) for target from source, to target's solicited-node group with hop
// limit 255, checksum right. A source link-layer address option names sender_mac unless source is :: (DAD).
inline Bytes neighbour_solicitation(const std::array<uint8_t, 6>& sender_mac, const std::string& source,
                                    const std::string& target) {
    const Bytes src = address_bytes(source), target_bytes = address_bytes(target);
    const bool dad = source == "::";
    Bytes group = address_bytes("ff02::1:ff00:0");
    std::copy(target_bytes.begin() + 13, target_bytes.end(), group.begin() + 13);
    Bytes icmp(dad ? 24 : 32, 0);
    icmp[0] = 135;
    std::copy(target_bytes.begin(), target_bytes.end(), icmp.begin() + 8);
    if (!dad) {
        icmp[24] = 1, icmp[25] = 1;  // source link-layer address, 8 bytes
        std::copy(sender_mac.begin(), sender_mac.end(), icmp.begin() + 26);
    }
    const uint16_t sum = l4_checksum(src, group, IPPROTO_ICMPV6, icmp.data(), icmp.size());
    std::memcpy(&icmp[2], &sum, 2);
    Bytes out(14, 0);
    out[0] = 0x33, out[1] = 0x33;
    std::copy(group.begin() + 12, group.end(), out.begin() + 2);
    std::copy(sender_mac.begin(), sender_mac.end(), out.begin() + 6);
    put16(&out[12], 0x86dd);
    Bytes ip(40, 0);
    ip[0] = 0x60;
    put16(&ip[4], static_cast<uint16_t>(icmp.size()));
    ip[6] = IPPROTO_ICMPV6;
    ip[7] = 255;
    std::copy(src.begin(), src.end(), ip.begin() + 8);
    std::copy(group.begin(), group.end(), ip.begin() + 24);
    out.insert(out.end(), ip.begin(), ip.end());
    out.insert(out.end(), icmp.begin(), icmp.end());
    return out;
}

}  // namespace sluice::test

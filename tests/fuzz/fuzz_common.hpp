// Helpers shared by the libFuzzer targets (see docs/security.md, "Fuzzing"): a check that aborts with a message
// (libFuzzer turns the abort into a crash report and saves the input), big-endian loads, and the reference model of
// the tuple an ICMP error quotes, written from what parse.hpp/parse.cpp promise rather than from their code.
#pragma once

#include <netinet/in.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/five_tuple.hpp"

#define FUZZ_CHECK(cond, ...)                                                                        \
    do {                                                                                             \
        if (!(cond)) {                                                                               \
            std::fprintf(stderr, "\nFUZZ_CHECK failed at %s:%d: %s\n  ", __FILE__, __LINE__, #cond); \
            std::fprintf(stderr, __VA_ARGS__);                                                       \
            std::fputc('\n', stderr);                                                                \
            std::abort();                                                                            \
        }                                                                                            \
    } while (0)

namespace sluice::fuzz {

inline uint16_t be16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }
// A port as the tuple stores it: the two bytes as they sit in the packet (network order).
inline uint16_t raw16(const uint8_t* p) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return v;
}

inline std::string str(const FiveTuple& t) { return to_string(t) + " family " + std::to_string(int(t.family)); }

// ICMP echo types per ICMP protocol: the identifier is the flow's "port" (both slots) only for the echo types of the
// packet's own ICMP protocol, as parse_l4 decides for the flow itself.
inline bool is_echo(uint8_t proto, uint8_t type) {
    if (proto == IPPROTO_ICMP) return type == 0 || type == 8;
    return proto == IPPROTO_ICMPV6 && (type == 128 || type == 129);
}

inline bool is_icmp_error_type(uint8_t proto, uint8_t type) {
    if (proto == IPPROTO_ICMP) return type == 3 || type == 4 || type == 5 || type == 11 || type == 12;
    return proto == IPPROTO_ICMPV6 && type >= 1 && type <= 4;
}

// The flow ports of a non-error ICMP/ICMPv6 message (its 8-byte header at l4), as docs/config.md states them: an
// echo's identifier in both; a query's type as the destination port (its reply's: the source port, holding the
// query's type); an error none; any other type as the destination port, from source port 0.
inline void reference_icmp_ports(uint8_t proto, const uint8_t* l4, uint16_t& src_port, uint16_t& dst_port) {
    src_port = dst_port = 0;
    if (is_icmp_error_type(proto, l4[0])) return;  // a quoted error: no flow of its own
    if (is_echo(proto, l4[0])) {
        src_port = dst_port = raw16(l4 + 4);
        return;
    }
    const bool reply = proto == IPPROTO_ICMP ? (l4[0] == 14 || l4[0] == 16 || l4[0] == 18) : l4[0] == 140;
    const uint8_t type[2] = {0, static_cast<uint8_t>(reply ? l4[0] - 1 : l4[0])};
    (reply ? src_port : dst_port) = raw16(type);
}

// The tuple of the flow an ICMP error quotes (q: the quoted IP header, avail: bytes of quote up to the end of the
// error's IP datagram), or false when the quote is unusable. parse.cpp's promises (parse.hpp, read_quoted_tuple):
//  - the quote is an IP header of the error's own family (IPv4: IHL >= 5 and the whole header present; IPv6: the
//    fixed 40 bytes, extension headers not walked) followed, for TCP/UDP/SCTP/ICMP/ICMPv6, by at least 8 L4 bytes;
//  - the tuple is the quoted packet's own (not reversed): its source, destination and protocol, in the error's family;
//  - a later IPv4 fragment (offset != 0) quotes no ports, like the flow tuple of any non-first fragment;
//  - TCP/UDP/SCTP ports are the first 4 L4 bytes; an ICMP echo's identifier fills both slots; an ICMP query's
//    type is the destination port (its reply's: the source port, holding the query's type); any other ICMP type is
//    the destination port, from source port 0 (docs/config.md, ICMP connections).
inline bool reference_quote(const uint8_t* q, uint32_t avail, IpFamily family, FiveTuple& t) {
    t = FiveTuple{};
    uint32_t header_length;
    if (family == IpFamily::ipv4) {
        if (avail < 20 || (q[0] >> 4) != 4) return false;
        header_length = (q[0] & 0x0f) * 4u;
        if (header_length < 20 || header_length > avail) return false;
        t.proto = q[9];
        std::memcpy(t.src.bytes, q + 12, 4);
        std::memcpy(t.dst.bytes, q + 16, 4);
    } else {
        if (avail < 40 || (q[0] >> 4) != 6) return false;
        header_length = 40;
        t.proto = q[6];
        std::memcpy(t.src.bytes, q + 8, 16);
        std::memcpy(t.dst.bytes, q + 24, 16);
    }
    t.family = family;
    if (family == IpFamily::ipv4 && (be16(q + 6) & 0x1fff)) return true;  // a later fragment: no L4 header quoted
    const uint8_t* l4 = q + header_length;
    const uint32_t l4_avail = avail - header_length;
    switch (t.proto) {
    case IPPROTO_TCP:
    case IPPROTO_UDP:
    case IPPROTO_SCTP:
        if (l4_avail < 8) return false;
        t.src_port = raw16(l4);
        t.dst_port = raw16(l4 + 2);
        return true;
    case IPPROTO_ICMP:
    case IPPROTO_ICMPV6:
        if (l4_avail < 8) return false;
        reference_icmp_ports(t.proto, l4, t.src_port, t.dst_port);
        return true;
    default: return true;
    }
}

}  // namespace sluice::fuzz

// The five-tuple that names a flow, and the symmetric hash that sends both directions of a flow to one worker.
// Thread-safe (pure); fast-path safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include <rte_hash_crc.h>

#include "common/compiler.hpp"

namespace sluice {

enum class IpFamily : uint8_t { none = 0, ipv4 = 4, ipv6 = 6 };

// An IPv4 or IPv6 address in network byte order; IPv4 lives in the first four bytes, the rest are zero.
struct IpAddress {
    union {
        uint8_t bytes[16];
        uint32_t words[4];
        uint64_t quads[2];
    };

    static IpAddress from_v4(uint32_t be) {
        IpAddress a{};
        a.words[0] = be;
        return a;
    }
    static IpAddress from_v6(const uint8_t* p) {
        IpAddress a;
        std::memcpy(a.bytes, p, 16);
        return a;
    }
    friend bool operator==(const IpAddress& a, const IpAddress& b) {
        return a.quads[0] == b.quads[0] && a.quads[1] == b.quads[1];
    }
};
static_assert(sizeof(IpAddress) == 16);

// Ports (or the ICMP echo identifier, in both port slots) in network byte order. Zeroed padding matters: the
// tuple is hashed and compared as bytes by the connection table.
struct FiveTuple {
    IpAddress src{};
    IpAddress dst{};
    uint16_t src_port = 0;
    uint16_t dst_port = 0;
    uint8_t proto = 0;
    IpFamily family = IpFamily::none;
    uint16_t reserved = 0;

    FiveTuple reversed() const {
        FiveTuple r = *this;
        r.src = dst;
        r.dst = src;
        r.src_port = dst_port;
        r.dst_port = src_port;
        return r;
    }
    friend bool operator==(const FiveTuple& a, const FiveTuple& b) { return std::memcmp(&a, &b, sizeof a) == 0; }
};
static_assert(sizeof(FiveTuple) == 40);

// Writes both ports of t with one store (store_as_one_word): the symmetric hash and the connection key read them as
// one word right after the parser writes them, and two 16-bit stores made that load wait (the hot spot of a
// pipeline lcore's parse_frame).
inline void set_ports(FiveTuple& t, uint16_t src_port, uint16_t dst_port) {
    static_assert(offsetof(FiveTuple, dst_port) == offsetof(FiveTuple, src_port) + 2);
    struct Ports {
        uint16_t src, dst;
    };
    store_as_one_word(reinterpret_cast<uint8_t*>(&t) + offsetof(FiveTuple, src_port), Ports{src_port, dst_port});
}

// Whether the tuple's source is the lower endpoint: the one order of the two endpoints that the symmetric hash and
// the connection table's canonical key both use.
inline bool source_is_low(const FiveTuple& t) {
    if (t.family == IpFamily::ipv4) {
        const uint32_t a = t.src.words[0], b = t.dst.words[0];
        return !(a > b || (a == b && t.src_port > t.dst_port));
    }
    const int order = std::memcmp(t.src.bytes, t.dst.bytes, 16);
    return !(order > 0 || (order == 0 && t.src_port > t.dst_port));
}

// The flow hash of an IPv4 flow whose endpoints are already in canonical order (low first): what
// symmetric_flow_hash computes for it, from values rather than a tuple (the connection table's 16-byte keys).
inline uint32_t ordered_ipv4_flow_hash(uint32_t low, uint32_t high, uint16_t low_port, uint16_t high_port, uint8_t proto) {
    uint32_t h = rte_hash_crc_4byte(low, (uint32_t{proto} << 8) | static_cast<uint32_t>(IpFamily::ipv4));
    h = rte_hash_crc_4byte(high, h);
    return rte_hash_crc_4byte(uint32_t{low_port} << 16 | high_port, h);
}

// Orders the two endpoints before hashing, so hash(t) == hash(t.reversed()) for every tuple: the RX lcore needs no
// state to send a reply to the worker that saw the request. CRC32C (SSE4.2) is a few cycles per 4-byte word.
inline uint32_t symmetric_flow_hash(const FiveTuple& t) {
    // The seed is protocol and family; each branch spells its family as a constant. Read from the tuple, the two
    // bytes became one 16-bit load, which cannot take its data from the parser's two byte stores just before and
    // waits for them to retire (a third of this function's samples on a forwarding lcore).
    const auto seed = [&t](IpFamily family) { return (uint32_t{t.proto} << 8) | static_cast<uint32_t>(family); };
    const bool swap = !source_is_low(t);
    if (t.family == IpFamily::ipv4) {
        const uint32_t a = t.src.words[0], b = t.dst.words[0];
        return swap ? ordered_ipv4_flow_hash(b, a, t.dst_port, t.src_port, t.proto)
                    : ordered_ipv4_flow_hash(a, b, t.src_port, t.dst_port, t.proto);
    }
    const uint32_t ports = swap ? (uint32_t{t.dst_port} << 16 | t.src_port) : (uint32_t{t.src_port} << 16 | t.dst_port);
    const IpAddress& lo = swap ? t.dst : t.src;
    const IpAddress& hi = swap ? t.src : t.dst;
    uint32_t h = rte_hash_crc_8byte(lo.quads[0], seed(IpFamily::ipv6));
    h = rte_hash_crc_8byte(lo.quads[1], h);
    h = rte_hash_crc_8byte(hi.quads[0], h);
    h = rte_hash_crc_8byte(hi.quads[1], h);
    return rte_hash_crc_4byte(ports, h);
}

std::string to_string(const IpAddress& a, IpFamily family);
std::string to_string(const FiveTuple& t);

}  // namespace sluice

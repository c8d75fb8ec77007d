// The five-tuple that names a flow, and the symmetric hashes that send both directions of a flow to one worker and
// one backend. Thread-safe (pure, or reading a key fixed at start); fast-path safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include <wmmintrin.h>  // AES-NI: the build passes -maes (meson.build)
#if !defined(__AES__)
#error "sluice's flow hash runs AES rounds: build with -maes, for x86-64 CPUs with AES-NI"
#endif

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

// Whether the tuple's source is the lower endpoint: the one order of the two endpoints that the symmetric hashes and
// the connection table's canonical key all use.
inline bool source_is_low(const FiveTuple& t) {
    if (t.family == IpFamily::ipv4) {
        // (address, port) pairs compared as one number each: no branch on an order that is random per packet.
        const uint64_t source = uint64_t{t.src.words[0]} << 16 | t.src_port;
        const uint64_t destination = uint64_t{t.dst.words[0]} << 16 | t.dst_port;
        return source <= destination;
    }
    const int order = std::memcmp(t.src.bytes, t.dst.bytes, 16);
    return !(order > 0 || (order == 0 && t.src_port > t.dst_port));
}

// The round keys of symmetric_flow_hash: drawn from getrandom when the process starts (five_tuple.cpp, a static
// initializer, so before any table holds a hash), and not changed after.
struct alignas(kCacheLine) FlowHashKey {
    uint64_t words[20];  // ten 128-bit AES round keys
};
namespace flow_hash_detail {
extern FlowHashKey process_key;
}  // namespace flow_hash_detail

// Replaces the process's flow-hash key: for tests and benchmarks that need the same values from run to run, before
// any table holds a hash and while no lcore runs (a plain write).
void set_flow_hash_key(const FlowHashKey& key);

namespace flow_hash_detail {

// The seed word of both hashes: protocol and family. Each caller spells its family as a constant: read from the
// tuple, the two bytes became one 16-bit load, which cannot take its data from the parser's two byte stores just
// before and waits for them to retire (a third of the hash's samples on a forwarding lcore).
inline uint32_t seed(uint8_t proto, IpFamily family) { return (uint32_t{proto} << 8) | static_cast<uint32_t>(family); }

inline __m128i round_key(unsigned i) {
    return _mm_load_si128(reinterpret_cast<const __m128i*>(&process_key.words[std::size_t{2} * i]));
}

// Three AES rounds over one block under the process's keys 0-3: every output bit depends on every input bit.
inline uint32_t finish(__m128i x) {
    x = _mm_xor_si128(x, round_key(0));
    x = _mm_aesenc_si128(x, round_key(1));
    x = _mm_aesenc_si128(x, round_key(2));
    x = _mm_aesenc_si128(x, round_key(3));
    return static_cast<uint32_t>(_mm_cvtsi128_si32(x));
}

// Two rounds over an IPv6 address, under keys first..first+2: an address becomes a block no sender can predict
// before the two are combined.
inline __m128i scramble(const IpAddress& a, unsigned first) {
    __m128i x = _mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a.bytes)), round_key(first));
    x = _mm_aesenc_si128(x, round_key(first + 1));
    return _mm_aesenc_si128(x, round_key(first + 2));
}

// The keyed mix: AES rounds under the process's random key, as Go's runtime hashes its maps against flooding.
// CRC32C is a little cheaper but linear: a sender can compute as many tuples with one CRC as it likes, whatever
// the seed (two inputs of one length collide under every seed or none), and fill one bucket of the connection table
// or one worker. SipHash-1-3 costs about twice these rounds (docs/adr/0003). Not a MAC: it only
// has to keep senders from choosing collisions.
struct KeyedMix {
    static uint32_t v4(uint32_t low, uint32_t high, uint32_t ports, uint32_t seed) {
        return finish(_mm_set_epi32(static_cast<int>(seed), static_cast<int>(ports), static_cast<int>(high),
                                    static_cast<int>(low)));
    }
    static uint32_t v6(const IpAddress& low, const IpAddress& high, uint32_t ports, uint32_t seed) {
        const __m128i both = _mm_xor_si128(scramble(low, 4), scramble(high, 7));
        return finish(_mm_xor_si128(both, _mm_set_epi32(0, 0, static_cast<int>(seed), static_cast<int>(ports))));
    }
};

// The unkeyed mix: CRC32C (SSE4.2), the same in every process and on every machine.
struct StableMix {
    static uint32_t v4(uint32_t low, uint32_t high, uint32_t ports, uint32_t seed) {
        uint32_t h = rte_hash_crc_4byte(low, seed);
        h = rte_hash_crc_4byte(high, h);
        return rte_hash_crc_4byte(ports, h);
    }
    static uint32_t v6(const IpAddress& low, const IpAddress& high, uint32_t ports, uint32_t seed) {
        uint32_t h = rte_hash_crc_8byte(low.quads[0], seed);
        h = rte_hash_crc_8byte(low.quads[1], h);
        h = rte_hash_crc_8byte(high.quads[0], h);
        h = rte_hash_crc_8byte(high.quads[1], h);
        return rte_hash_crc_4byte(ports, h);
    }
};

// Orders the two endpoints before mixing, so hash(t) == hash(t.reversed()) for every tuple.
template <class Mix>
inline uint32_t ordered_hash(const FiveTuple& t) {
    const bool swap = !source_is_low(t);
    if (t.family == IpFamily::ipv4) {
        const uint32_t a = t.src.words[0], b = t.dst.words[0];
        return swap ? Mix::v4(b, a, uint32_t{t.dst_port} << 16 | t.src_port, seed(t.proto, IpFamily::ipv4))
                    : Mix::v4(a, b, uint32_t{t.src_port} << 16 | t.dst_port, seed(t.proto, IpFamily::ipv4));
    }
    const uint32_t ports = swap ? (uint32_t{t.dst_port} << 16 | t.src_port) : (uint32_t{t.src_port} << 16 | t.dst_port);
    return Mix::v6(swap ? t.dst : t.src, swap ? t.src : t.dst, ports, seed(t.proto, IpFamily::ipv6));
}

}  // namespace flow_hash_detail

// The flow hash of an IPv4 flow whose endpoints are already in canonical order (low first): what
// symmetric_flow_hash computes for it, from values rather than a tuple (the connection table's 16-byte keys).
inline uint32_t ordered_ipv4_flow_hash(uint32_t low, uint32_t high, uint16_t low_port, uint16_t high_port,
                                       uint8_t proto) {
    using namespace flow_hash_detail;
    return KeyedMix::v4(low, high, uint32_t{low_port} << 16 | high_port, seed(proto, IpFamily::ipv4));
}

// The flow hash of the connection table and of the RX lcores' choice of worker, keyed by the process's random key
// (KeyedMix): hash(t) == hash(t.reversed()), so the RX lcore needs no state to send a reply to the worker that saw
// the request. Values differ from process to process.
inline uint32_t symmetric_flow_hash(const FiveTuple& t) {
    return flow_hash_detail::ordered_hash<flow_hash_detail::KeyedMix>(t);
}

// The worker a flow belongs to by its symmetric flow hash: a 32-bit hash mapped onto [0, workers) without a
// division (Lemire's multiply-shift). The RX lcores' rule for every packet but a translated connection's replies
// (nat/nat_owner.hpp).
inline uint16_t worker_for_hash(uint32_t hash, uint16_t workers) {
    return static_cast<uint16_t>((uint64_t{hash} * workers) >> 32);
}

// The flow hash of Maglev's choice of backend: unkeyed (CRC32C), so every sluice process computes the same value,
// and boxes behind one ECMP group, or a box after a restart, send a flow to the same backend. Symmetric too. The
// workers compute it for new connections only (first packets, the SYN proxy's SYNs, mid-stream pickups); the
// control thread for explain and the reload's dry run.
inline uint32_t stable_flow_hash(const FiveTuple& t) {
    return flow_hash_detail::ordered_hash<flow_hash_detail::StableMix>(t);
}

// Keyed hashes (KeyedMix) for the other tables whose keys senders choose. A datagram's, for the fragment table:
// both addresses (in order), its id, protocol and family.
inline uint32_t keyed_datagram_hash(const IpAddress& src, const IpAddress& dst, uint32_t id, uint8_t proto,
                                    IpFamily family) {
    using namespace flow_hash_detail;
    return family == IpFamily::ipv4 ? KeyedMix::v4(src.words[0], dst.words[0], id, seed(proto, family))
                                    : KeyedMix::v6(src, dst, id, seed(proto, family));
}

// The sender a source address stands for, where limits count per sender: an IPv4 address, or an IPv6 address's
// /64 (a host is given a /64 and may send from any address in it, so a whole address would let one host count as
// many).
inline IpAddress sender_of(IpAddress src, IpFamily family) {
    if (family == IpFamily::ipv6) src.words[2] = src.words[3] = 0;
    return src;
}

// A source address's, for the per-source rate limiter's buckets.
inline uint32_t keyed_source_hash(const IpAddress& src, IpFamily family) {
    using namespace flow_hash_detail;
    return family == IpFamily::ipv4 ? KeyedMix::v4(src.words[0], 0, 0, seed(0, IpFamily::ipv4))
                                    : KeyedMix::v6(src, IpAddress{}, 0, seed(0, IpFamily::ipv6));
}

std::string to_string(const IpAddress& a, IpFamily family);
std::string to_string(const FiveTuple& t);

}  // namespace sluice

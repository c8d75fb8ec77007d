// SipHash-2-4 (Aumasson and Bernstein, 2012): a keyed pseudo-random function over short inputs, as the Linux
// kernel uses for SYN cookies. sluice's cookies need a PRF, not a checksum: a linear hash (CRC, Toeplitz) lets an
// attacker who sees a few of its own cookies compute everyone else's. Pure; fast-path safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace sluice {

struct SipHashKey {
    uint64_t k0 = 0;
    uint64_t k1 = 0;
};

namespace siphash_detail {

constexpr uint64_t rotl(uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }

inline void round(uint64_t& v0, uint64_t& v1, uint64_t& v2, uint64_t& v3) {
    v0 += v1;
    v1 = rotl(v1, 13);
    v1 ^= v0;
    v0 = rotl(v0, 32);
    v2 += v3;
    v3 = rotl(v3, 16);
    v3 ^= v2;
    v0 += v3;
    v3 = rotl(v3, 21);
    v3 ^= v0;
    v2 += v1;
    v1 = rotl(v1, 17);
    v1 ^= v2;
    v2 = rotl(v2, 32);
}

}  // namespace siphash_detail

// The 64-bit SipHash-2-4 of len bytes (words read little-endian, as the reference implementation does).
inline uint64_t siphash24(const SipHashKey& key, const void* data, std::size_t len) {
    using siphash_detail::round;
    uint64_t v0 = 0x736f6d6570736575ULL ^ key.k0;
    uint64_t v1 = 0x646f72616e646f6dULL ^ key.k1;
    uint64_t v2 = 0x6c7967656e657261ULL ^ key.k0;
    uint64_t v3 = 0x7465646279746573ULL ^ key.k1;
    const auto* p = static_cast<const uint8_t*>(data);
    const std::size_t whole = len & ~std::size_t{7};
    for (std::size_t i = 0; i < whole; i += 8) {
        uint64_t m = 0;
        for (int b = 0; b < 8; ++b) m |= uint64_t{p[i + b]} << (8 * b);
        v3 ^= m;
        round(v0, v1, v2, v3);
        round(v0, v1, v2, v3);
        v0 ^= m;
    }
    uint64_t last = uint64_t{len & 0xff} << 56;
    for (std::size_t b = 0; b < (len & 7); ++b) last |= uint64_t{p[whole + b]} << (8 * b);
    v3 ^= last;
    round(v0, v1, v2, v3);
    round(v0, v1, v2, v3);
    v0 ^= last;
    v2 ^= 0xff;
    for (int i = 0; i < 4; ++i) round(v0, v1, v2, v3);
    return v0 ^ v1 ^ v2 ^ v3;
}

}  // namespace sluice

// Internet checksum helpers: the full sum (RFC 1071) and the incremental update (RFC 1624, eqn. 3).
// Pure; fast-path safe.
#pragma once

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace sluice {

// Folds a 32-bit one's-complement accumulator to 16 bits.
constexpr uint16_t checksum_fold(uint32_t sum) {
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    return static_cast<uint16_t>(sum);
}

// RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m'). All values are 16-bit words as they sit in memory (any byte order, as
// long as it is the same for all three): one's-complement sums are byte-order independent.
constexpr uint16_t checksum_update16(uint16_t checksum, uint16_t old_word, uint16_t new_word) {
    const uint32_t sum = uint32_t{static_cast<uint16_t>(~checksum)} + uint16_t(~old_word) + new_word;
    return static_cast<uint16_t>(~checksum_fold(sum));
}

// RFC 1624 eqn. 3 split in two, for a rewrite that several checksums cover (NAT's addresses: the IPv4 header's
// and the TCP/UDP pseudo-header's): checksum_delta is the ~m + m' part of rewriting len bytes (a multiple of 4: an
// address, two ports) from old_data to new_data, summed by 32-bit words, unfolded; deltas add. checksum_apply_delta
// gives HC' = ~(~HC + delta). Folding a sum of 32-bit words gives the sum of their 16-bit halves, in any byte order.
inline uint64_t checksum_delta(const void* old_data, const void* new_data, std::size_t len) {
    assert(len % 4 == 0);  // the loop reads whole words
    const auto* o = static_cast<const uint8_t*>(old_data);
    const auto* n = static_cast<const uint8_t*>(new_data);
    uint64_t sum = 0;
    for (std::size_t i = 0; i < len; i += 4) {
        uint32_t old_word, new_word;
        std::memcpy(&old_word, o + i, 4);
        std::memcpy(&new_word, n + i, 4);
        sum += uint32_t{~old_word};
        sum += new_word;
    }
    return sum;
}
inline uint16_t checksum_apply_delta(uint16_t checksum, uint64_t delta) {
    uint64_t sum = delta + static_cast<uint16_t>(~checksum);
    sum = (sum & 0xffffffff) + (sum >> 32);  // one's complement: the carries go around
    sum = (sum & 0xffffffff) + (sum >> 32);
    return static_cast<uint16_t>(~checksum_fold(static_cast<uint32_t>(sum)));
}

// RFC 1624 over several words at once: old_data and new_data are the len bytes (a multiple of 4) before and after
// a rewrite, e.g. an address.
inline uint16_t checksum_update_bytes(uint16_t checksum, const void* old_data, const void* new_data, std::size_t len) {
    return checksum_apply_delta(checksum, checksum_delta(old_data, new_data, len));
}

// RFC 1071 checksum of a buffer, returned in the buffer's byte order (store it as is).
inline uint16_t checksum_compute(const void* data, std::size_t len) {
    const auto* p = static_cast<const uint8_t*>(data);
    uint32_t sum = 0;
    for (; len > 1; p += 2, len -= 2) sum += uint16_t(p[0] | (p[1] << 8));
    if (len) sum += p[0];
    return static_cast<uint16_t>(~checksum_fold(sum));
}

// checksum_compute for an IPv4 header (length = IHL x 4: a multiple of 4, 20 to 60), by 32-bit words: the parser
// checks one per packet. The five words every header has are summed in straight line: as one loop, GCC vectorised
// it with a set-up and a tail longer than the sum.
inline uint16_t checksum_ipv4_header(const void* header, std::size_t length) {
    assert(length >= 20 && length % 4 == 0);
    const auto* p = static_cast<const uint8_t*>(header);
    const auto word = [p](std::size_t off) {
        uint32_t w;
        std::memcpy(&w, p + off, 4);
        return uint64_t{w};
    };
    uint64_t sum = word(0) + word(4) + word(8) + word(12) + word(16);
    for (std::size_t off = 20; off < length; off += 4) sum += word(off);  // options: rare
    sum = (sum & 0xffffffff) + (sum >> 32);                               // one's-complement: the carries go around
    sum = (sum & 0xffffffff) + (sum >> 32);
    return static_cast<uint16_t>(~checksum_fold(static_cast<uint32_t>(sum)));
}

}  // namespace sluice

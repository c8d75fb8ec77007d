// Flows crafted to share one stable (CRC32C) flow hash: what a sender who knows an unkeyed hash can send.
#pragma once

#include <netinet/in.h>

#include <array>
#include <bitset>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "common/five_tuple.hpp"

namespace sluice::test {

// Tuples that all have the same stable (CRC32C) hash, built the way a sender would: CRC32C over inputs of one
// length is affine in their bits, so the bit flips whose effects on the hash cancel are the kernel of a 32-row
// matrix over GF(2). Each flip is one bit of the low three bytes of either address or of either port; the fourth
// byte of each address stays apart (1 and 200), so the endpoints' order never changes.
inline std::vector<FiveTuple> tuples_sharing_one_crc(std::size_t log2_count) {
    FiveTuple t;
    t.family = IpFamily::ipv4;
    t.proto = IPPROTO_UDP;
    t.src.bytes[3] = 1;
    t.dst.bytes[3] = 200;
    struct Flip {
        std::size_t offset;  // of the byte in the tuple
        uint8_t mask;
    };
    std::vector<Flip> flips;
    const auto flip_bits = [&flips](std::size_t offset, std::size_t bytes) {
        for (std::size_t i = 0; i < bytes; ++i)
            for (int b = 0; b < 8; ++b) flips.push_back({offset + i, static_cast<uint8_t>(1u << b)});
    };
    flip_bits(offsetof(FiveTuple, src), 3);
    flip_bits(offsetof(FiveTuple, dst), 3);
    flip_bits(offsetof(FiveTuple, src_port), 2);
    flip_bits(offsetof(FiveTuple, dst_port), 2);
    const auto flip = [](FiveTuple& u, const Flip& f) { reinterpret_cast<uint8_t*>(&u)[f.offset] ^= f.mask; };
    const uint32_t at_base = stable_flow_hash(t);
    // Gaussian elimination: each row is a flip's effect on the hash and the set of flips (bits of a mask) that
    // make it up; a row that reduces to no effect is a combination of flips that leaves the hash alone.
    struct Row {
        uint32_t effect;
        std::bitset<80> flips;
    };
    std::array<std::optional<Row>, 32> pivot;
    std::vector<std::bitset<80>> kernel;
    for (std::size_t k = 0; k < flips.size() && kernel.size() < log2_count; ++k) {
        FiveTuple u = t;
        flip(u, flips[k]);
        Row row{stable_flow_hash(u) ^ at_base, {}};
        row.flips.set(k);
        for (int bit = 31; bit >= 0 && row.effect != 0; --bit) {
            if (!(row.effect >> bit & 1)) continue;
            if (!pivot[bit]) {
                pivot[bit] = row;
                row.effect = 0;
                row.flips.reset();
            } else {
                row.effect ^= pivot[bit]->effect;
                row.flips ^= pivot[bit]->flips;
            }
        }
        if (row.flips.any()) kernel.push_back(row.flips);
    }
    std::vector<FiveTuple> out;
    for (uint32_t combo = 0; combo < (1u << kernel.size()); ++combo) {
        std::bitset<80> chosen;
        for (std::size_t j = 0; j < kernel.size(); ++j)
            if (combo >> j & 1) chosen ^= kernel[j];
        FiveTuple u = t;
        for (std::size_t k = 0; k < flips.size(); ++k)
            if (chosen[k]) flip(u, flips[k]);
        out.push_back(u);
    }
    return out;
}

}  // namespace sluice::test

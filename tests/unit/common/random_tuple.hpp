// Random five-tuples for tests (deterministic with a seeded generator).
#pragma once

#include <random>

#include "common/five_tuple.hpp"

namespace sluice::test {

inline FiveTuple random_tuple(std::mt19937_64& rng, IpFamily family, uint8_t proto) {
    FiveTuple t;
    t.family = family;
    t.proto = proto;
    if (family == IpFamily::ipv4) {
        t.src = IpAddress::from_v4(static_cast<uint32_t>(rng()));
        t.dst = IpAddress::from_v4(static_cast<uint32_t>(rng()));
    } else {
        for (int i = 0; i < 2; ++i) {
            t.src.quads[i] = rng();
            t.dst.quads[i] = rng();
        }
    }
    t.src_port = static_cast<uint16_t>(rng());
    t.dst_port = static_cast<uint16_t>(rng());
    return t;
}

}  // namespace sluice::test

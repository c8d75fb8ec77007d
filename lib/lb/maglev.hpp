// Maglev consistent hashing (Eisenbud et al., "Maglev: A Fast and Reliable Software Network Load Balancer",
// NSDI 2016, section 3.4), with weights. The table is a pure function of the backends' names, weights and the table
// size: two sluice instances with the same config fill identical tables, so a fleet behind ECMP agrees on the
// backend of every 5-tuple. Pure, allocation only in build; control thread builds, lcores only index the result.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sluice {

inline constexpr uint32_t kDefaultMaglevTableSize = 65537;
inline constexpr uint32_t kMaxMaglevTableSize = 1000003;  // a prime; 2 MB of uint16 slots per service at most
inline constexpr uint16_t kMaglevNoBackend = UINT16_MAX;  // a table whose backends all have weight 0

struct MaglevBackend {
    std::string name;     // what the permutation is derived from, e.g. "10.1.0.11:8080" (stable across configs)
    uint32_t weight = 1;  // 0: takes no slot (draining or down)
};

bool is_prime(uint32_t n);

// The lookup table: slot -> index into `backends`. Every slot is filled when at least one backend has a weight;
// otherwise every slot is kMaglevNoBackend. Each backend gets close to size * weight / total slots (the paper's
// round-robin fill, where a backend takes as many turns per round as its share of the largest weight). size must
// be a prime above the backend count (checked by the config); backends.size() < kMaglevNoBackend.
std::vector<uint16_t> build_maglev_table(const std::vector<MaglevBackend>& backends, uint32_t size);

// The slot of a flow: its stable_flow_hash (five_tuple.hpp: the same in every sluice process) modulo the table size.
inline uint32_t maglev_slot(uint32_t stable_hash, uint32_t size) { return stable_hash % size; }

}  // namespace sluice

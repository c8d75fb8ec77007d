#include "lb/maglev.hpp"

#include <cassert>

namespace sluice {
namespace {

// Two independent 64-bit FNV-1a hashes of the name (different offset bases): the paper's h1 and h2. FNV is fixed by
// its specification, unlike std::hash, so every build of sluice derives the same permutations.
uint64_t fnv1a(const std::string& s, uint64_t basis) {
    uint64_t h = basis;
    for (unsigned char c : s) {
        h ^= c;
        h *= 0x100000001b3ULL;
    }
    // FNV's low bits mix poorly for short inputs: finish with a 64-bit avalanche (splitmix64's).
    h ^= h >> 30;
    h *= 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebULL;
    h ^= h >> 31;
    return h;
}

}  // namespace

bool is_prime(uint32_t n) {
    if (n < 2) return false;
    if (n % 2 == 0) return n == 2;
    for (uint32_t d = 3; uint64_t{d} * d <= n; d += 2)
        if (n % d == 0) return false;
    return true;
}

std::vector<uint16_t> build_maglev_table(const std::vector<MaglevBackend>& backends, uint32_t size) {
    assert(size >= 2 && backends.size() < kMaglevNoBackend);
    std::vector<uint16_t> table(size, kMaglevNoBackend);
    uint32_t max_weight = 0;
    for (const MaglevBackend& b : backends) max_weight = b.weight > max_weight ? b.weight : max_weight;
    if (max_weight == 0) return table;

    // Paper section 3.4: backend i visits slots offset_i, offset_i + skip_i, ... (mod size), skip_i in [1, size-1]
    // so the walk is a permutation of the slots (size is prime), and takes the first free one on each turn.
    const std::size_t n = backends.size();
    std::vector<uint32_t> offset(n), skip(n), next(n, 0);
    std::vector<uint64_t> credit(n, 0);
    for (std::size_t i = 0; i < n; ++i) {
        offset[i] = static_cast<uint32_t>(fnv1a(backends[i].name, 0xcbf29ce484222325ULL) % size);
        skip[i] = static_cast<uint32_t>(fnv1a(backends[i].name, 0x84222325cbf29ce4ULL) % (size - 1) + 1);
    }
    // Weights: each round adds a backend's weight to its credit, and it takes one turn per max_weight of credit, so
    // the heaviest backend takes a turn every round and the others in proportion (Katran's and Envoy's approach).
    uint32_t filled = 0;
    while (filled < size) {
        for (std::size_t i = 0; i < n && filled < size; ++i) {
            credit[i] += backends[i].weight;
            while (credit[i] >= max_weight && filled < size) {
                credit[i] -= max_weight;
                uint32_t slot;
                do {
                    slot = static_cast<uint32_t>((offset[i] + uint64_t{skip[i]} * next[i]) % size);
                    ++next[i];
                } while (table[slot] != kMaglevNoBackend);
                table[slot] = static_cast<uint16_t>(i);
                ++filled;
            }
        }
    }
    return table;
}

}  // namespace sluice

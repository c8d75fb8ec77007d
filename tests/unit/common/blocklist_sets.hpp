// Large early-drop sets for the scale test and the benchmark (deterministic with a seeded generator), and a
// reference that says whether an address is listed by exact matches of each listed length (no trie, no sorting).
//
// Clustered sets look like reputation lists: their prefixes sit in provider blocks (4,096 IPv4 /16s, 256 IPv6
// /32s) and, for IPv6, /64s in customer /56s. Sparse sets spread single long prefixes over the whole space: the
// case that costs a trie (or a DIR-24-8 or rte_lpm6 table) the most memory per prefix.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <set>
#include <unordered_set>
#include <vector>

#include <rte_byteorder.h>

#include "classify/rule.hpp"

namespace sluice::test {

inline Prefix v4_prefix(uint32_t host, uint8_t length) {
    const uint32_t mask = length == 0 ? 0 : ~uint32_t{0} << (32 - length);
    return Prefix{IpAddress::from_v4(rte_cpu_to_be_32(host & mask)), length};
}

// host bits of a 128-bit address (hi, lo in host order) cleared beyond length.
inline Prefix v6_prefix(uint64_t hi, uint64_t lo, uint8_t length) {
    if (length < 64) {
        hi &= length == 0 ? 0 : ~uint64_t{0} << (64 - length);
        lo = 0;
    } else if (length < 128) {
        lo &= length == 64 ? 0 : ~uint64_t{0} << (128 - length);
    }
    Prefix p;
    p.length = length;
    p.address.quads[0] = rte_cpu_to_be_64(hi);
    p.address.quads[1] = rte_cpu_to_be_64(lo);
    return p;
}

inline uint64_t v6_hi(const IpAddress& a) { return rte_be_to_cpu_64(a.quads[0]); }
inline uint64_t v6_lo(const IpAddress& a) { return rte_be_to_cpu_64(a.quads[1]); }

// Provider /16s: a few thousand, so that /24s and addresses of a list share /16s as real lists' do.
struct V4Clusters {
    std::vector<uint32_t> blocks;  // /16s, host order, outside 0/8, 10/8, 127/8 and 224/3
    explicit V4Clusters(std::mt19937_64& rng, std::size_t count = 4096) {
        std::set<uint32_t> chosen;
        while (chosen.size() < count) {
            const uint32_t b = static_cast<uint32_t>(rng()) & 0xffff0000u;
            const uint32_t first = b >> 24;
            if (first == 0 || first == 10 || first == 127 || first >= 224) continue;
            chosen.insert(b);
        }
        blocks.assign(chosen.begin(), chosen.end());
    }
    uint32_t address(std::mt19937_64& rng) const {
        return blocks[rng() % blocks.size()] | (static_cast<uint32_t>(rng()) & 0xffffu);
    }
};

// 70 % /32, 25 % /24, 4.9 % /25-/31, 0.1 % /17-/23 (a mix like FireHOL's lists), in the clusters' /16s. Some
// repeat or nest, as in merged lists.
inline std::vector<Prefix> clustered_v4(std::size_t count, const V4Clusters& clusters, std::mt19937_64& rng) {
    std::vector<Prefix> out;
    out.reserve(count);
    while (out.size() < count) {
        const unsigned pick = static_cast<unsigned>(rng() % 1000);
        const uint8_t length = pick < 700   ? 32
                               : pick < 950 ? 24
                               : pick < 999 ? static_cast<uint8_t>(25 + rng() % 7)
                                            : static_cast<uint8_t>(17 + rng() % 7);
        out.push_back(v4_prefix(clusters.address(rng), length));
    }
    return out;
}

// Single addresses anywhere outside the reserved /8s: about one tbl8 group each.
inline std::vector<Prefix> sparse_v4(std::size_t count, std::mt19937_64& rng) {
    std::vector<Prefix> out;
    out.reserve(count);
    while (out.size() < count) {
        const uint32_t a = static_cast<uint32_t>(rng());
        const uint32_t first = a >> 24;
        if (first == 0 || first == 10 || first == 127 || first >= 224) continue;
        out.push_back(v4_prefix(a, 32));
    }
    return out;
}

// Provider /32s in 2000::/3 and customer /56s inside them.
struct V6Clusters {
    std::vector<uint64_t> providers;  // the leading 32 bits, in the high half of hi
    std::vector<uint64_t> sites;      // the leading 56 bits (hi with the last byte zero)
    V6Clusters(std::mt19937_64& rng, std::size_t provider_count = 256, std::size_t site_count = 65536) {
        std::set<uint64_t> chosen;
        while (chosen.size() < provider_count) chosen.insert((0x20000000u | (rng() & 0x1fffffffu)) << 32);
        providers.assign(chosen.begin(), chosen.end());
        for (std::size_t i = 0; i < site_count; ++i)
            sites.push_back(providers[rng() % providers.size()] | (rng() & 0xffffff00u));
    }
    uint64_t in_provider(std::mt19937_64& rng) const {
        return providers[rng() % providers.size()] | (rng() & 0xffffffffu);
    }
    uint64_t in_site(std::mt19937_64& rng) const { return sites[rng() % sites.size()] | (rng() & 0xffu); }
};

// 40 % /48s in the providers' /32s, 58 % /64s in the sites' /56s, 1.9 % /128s in the sites, 0.1 % /40-/47s in
// the providers.
inline std::vector<Prefix> clustered_v6(std::size_t count, const V6Clusters& clusters, std::mt19937_64& rng) {
    std::vector<Prefix> out;
    out.reserve(count);
    while (out.size() < count) {
        const unsigned pick = static_cast<unsigned>(rng() % 1000);
        if (pick < 400) out.push_back(v6_prefix(clusters.in_provider(rng), 0, 48));
        else if (pick < 980) out.push_back(v6_prefix(clusters.in_site(rng), 0, 64));
        else if (pick < 999) out.push_back(v6_prefix(clusters.in_site(rng), rng(), 128));
        else out.push_back(v6_prefix(clusters.in_provider(rng), 0, static_cast<uint8_t>(40 + rng() % 8)));
    }
    return out;
}

// /48s or /64s (length) anywhere in 2000::/3.
inline std::vector<Prefix> sparse_v6(std::size_t count, uint8_t length, std::mt19937_64& rng) {
    std::vector<Prefix> out;
    out.reserve(count);
    while (out.size() < count) out.push_back(v6_prefix((uint64_t{1} << 61) | (rng() >> 3), 0, length));
    return out;
}

// Whether an address is listed: an exact match of its leading bits for each length listed.
class ListedReference {
public:
    explicit ListedReference(const std::vector<Prefix>& prefixes) {
        for (const Prefix& p : prefixes) {
            lengths_.insert(p.length);
            keys_.insert(Key{v6_hi(p.address), v6_lo(p.address), p.length});
        }
    }
    bool listed(const IpAddress& address, bool v4) const {
        for (const uint8_t length : lengths_) {
            const Prefix p = v4 ? v4_prefix(rte_be_to_cpu_32(address.words[0]), length)
                                : v6_prefix(v6_hi(address), v6_lo(address), length);
            if (keys_.count(Key{v6_hi(p.address), v6_lo(p.address), length})) return true;
        }
        return false;
    }

private:
    struct Key {
        uint64_t hi, lo;
        uint8_t length;
        bool operator==(const Key&) const = default;
    };
    struct KeyHash {
        std::size_t operator()(const Key& k) const { return (k.hi * 0x9e3779b97f4a7c15ull) ^ k.lo ^ k.length; }
    };
    std::set<uint8_t> lengths_;
    std::unordered_set<Key, KeyHash> keys_;
};

}  // namespace sluice::test

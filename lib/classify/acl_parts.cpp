#include "classify/acl_parts.hpp"

#include <algorithm>
#include <bit>
#include <functional>
#include <string_view>
#include <unordered_map>
#include <utility>

namespace sluice {
namespace {

// A key no rule matches passes through every part of a classifier: past kMaxParts * kPartRules rte_acl rules, the
// parts grow instead of multiplying.
constexpr std::size_t kMaxParts = 16;

// A region whose rules changed in an edit (a reload that changes few regions) is built as pieces this many times
// smaller: rte_acl_build's time grows faster than its rule count, so an edit's build is several times shorter, at
// the price of a few more contexts for keys that no earlier part matches, in that region only.
constexpr std::size_t kPiecesPerPart = 4;

// What a rule matches (the family, protocol, ports, prefixes, ICMP ranges and TCP flags; not its name or action,
// which are not rte_acl's: the firewall reads them by rule id), as bytes, each list closed by its length.
void match_bytes(const Rule& r, std::string& out) {
    out.clear();
    const auto bytes = [&out](const void* data, std::size_t n) { out.append(static_cast<const char*>(data), n); };
    const auto list = [&](const auto& items, auto&& each) {
        for (const auto& item : items) each(item);
        const std::size_t n = items.size();
        bytes(&n, sizeof n);
    };
    const auto prefix = [&](const Prefix& p) {
        bytes(p.address.bytes, sizeof p.address.bytes);
        bytes(&p.length, 1);
    };
    const auto range = [&](const auto& x) {
        bytes(&x.first, sizeof x.first);
        bytes(&x.last, sizeof x.last);
    };
    bytes(&r.family, sizeof r.family);
    bytes(&r.protocol, sizeof r.protocol);
    list(r.in_ports, [&](uint16_t port) { bytes(&port, sizeof port); });
    list(r.sources, prefix);
    list(r.destinations, prefix);
    list(r.source_ports, range);
    list(r.destination_ports, range);
    list(r.icmp_types, range);
    list(r.icmp_codes, range);
    bytes(&r.tcp_flags.value, 1);
    bytes(&r.tcp_flags.mask, 1);
}

// Where the rules are cut, as regions of about part_rules rte_acl rules, each cut again into pieces of about
// part_rules / kPiecesPerPart. A piece ends after a rule whose match hash picks it, once the piece holds half its
// size, or at twice its size; a region ends at such a piece end, picked the same way at the region's size. A cut
// depends only on the rules just before it, so an edit, an insertion or a removal moves the cuts of its own piece
// and region at most.
struct Region {
    uint32_t first = 0;
    uint32_t count = 0;
    std::vector<std::pair<uint32_t, uint32_t>> pieces;  // (first, count), covering the region in order
};

std::vector<Region> cut_regions(const std::vector<MatchKey>& keys, const std::vector<std::size_t>& counts,
                                std::size_t part_rules) {
    const std::size_t piece_rules = std::max<std::size_t>(part_rules / kPiecesPerPart, 1);
    const std::size_t least = std::max<std::size_t>(part_rules / 2, 1);
    const std::size_t piece_least = std::max<std::size_t>(piece_rules / 2, 1);
    std::vector<Region> regions(1);
    std::size_t held = 0, piece_held = 0;
    uint32_t piece_first = 0;
    for (uint32_t i = 0; i < keys.size(); ++i) {
        held += counts[i];
        piece_held += counts[i];
        const uint64_t h = keys[i].fnv;
        if ((piece_held < piece_least || h % piece_least != 0) && piece_held < 2 * piece_rules) continue;
        regions.back().pieces.emplace_back(piece_first, i + 1 - piece_first);
        piece_first = i + 1;
        piece_held = 0;
        if ((held >= least && h % least == 0) || held >= 2 * part_rules) {
            regions.emplace_back();
            held = 0;
        }
    }
    if (piece_first < keys.size())
        regions.back().pieces.emplace_back(piece_first, static_cast<uint32_t>(keys.size()) - piece_first);
    if (regions.back().pieces.empty()) regions.pop_back();
    for (Region& r : regions) {
        r.first = r.pieces.front().first;
        r.count = r.pieces.back().first + r.pieces.back().second - r.first;
    }
    return regions;
}

}  // namespace

std::vector<MatchKey> match_keys(const std::vector<Rule>& rules) {
    std::vector<MatchKey> keys;
    keys.reserve(rules.size());
    std::string buffer;
    for (const Rule& r : rules) {
        match_bytes(r, buffer);
        uint64_t h = 0xcbf29ce484222325ull;
        for (const char c : buffer) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001b3ull;
        keys.push_back({h, std::hash<std::string_view>{}(buffer)});
    }
    return keys;
}

MatchKey part_key(std::span<const MatchKey> keys, uint32_t first, uint32_t count) {
    MatchKey k{count, count};
    for (uint32_t i = first; i < first + count; ++i) {
        k.fnv = (k.fnv ^ keys[i].fnv) * 0x100000001b3ull;
        k.murmur = std::rotl(k.murmur ^ keys[i].murmur, 29) * 0x9e3779b97f4a7c15ull;
    }
    return k;
}

std::vector<AclPart> cut_into_parts(const std::vector<MatchKey>& keys, const std::vector<std::size_t>& counts,
                                    std::size_t expanded, std::size_t part_rules, std::span<const AclPart> running) {
    std::unordered_multimap<uint64_t, const AclPart*> reusable;
    for (const AclPart& p : running) reusable.emplace(p.key.fnv, &p);
    // The running part whose rules match as rules [first, first + count) do, or null.
    const auto running_part = [&](uint32_t first, uint32_t count) -> const AclPart* {
        const MatchKey key = part_key(keys, first, count);
        const auto [from, to] = reusable.equal_range(key.fnv);
        for (auto it = from; it != to; ++it)
            if (it->second->count == count && it->second->key == key) return it->second;
        return nullptr;
    };
    // A key no rule matches passes through every part: their number is bounded, their size grows past it. A power
    // of two, so that a few rules more or less leave the cuts where they were.
    const auto regions = cut_regions(keys, counts, std::max(part_rules, std::bit_ceil(expanded / kMaxParts)));
    // Per region: the running part that serves it whole, else the running parts that serve its pieces (a region an
    // earlier edit built in pieces), else nothing: it changed.
    std::vector<const AclPart*> whole(regions.size());
    std::vector<std::vector<const AclPart*>> pieces(regions.size());
    std::size_t changed = 0;
    for (std::size_t r = 0; r < regions.size(); ++r) {
        whole[r] = running_part(regions[r].first, regions[r].count);
        if (whole[r]) continue;
        for (const auto& [first, count] : regions[r].pieces) pieces[r].push_back(running_part(first, count));
        changed += std::count(pieces[r].begin(), pieces[r].end(), nullptr) != 0;
    }
    // An edit (at most a quarter of the regions changed, or one): its regions are built in pieces, each piece the
    // running classifier has kept. Otherwise a changed region is built whole, as at start: with nothing running to
    // keep pieces of, a first build of a single region is no edit.
    const bool edit = !reusable.empty() && changed <= std::max<std::size_t>(1, regions.size() / 4);
    std::vector<AclPart> parts;
    const auto add = [&](uint32_t first, uint32_t count, const AclPart* old) {
        AclPart part{nullptr, first, count, 0, {}, part_key(keys, first, count)};
        if (old) {
            part.ctx = old->ctx;
            part.method = old->method;
            part.report = old->report;
        }
        parts.push_back(std::move(part));
    };
    for (std::size_t r = 0; r < regions.size(); ++r) {
        const bool kept_pieces = !whole[r] && std::count(pieces[r].begin(), pieces[r].end(), nullptr) == 0;
        if (whole[r] || (!kept_pieces && !edit)) {
            add(regions[r].first, regions[r].count, whole[r]);
            continue;
        }
        for (std::size_t p = 0; p < regions[r].pieces.size(); ++p)
            add(regions[r].pieces[p].first, regions[r].pieces[p].second, pieces[r][p]);
    }
    return parts;
}

}  // namespace sluice

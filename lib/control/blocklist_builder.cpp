#include "control/blocklist_builder.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

namespace sluice {
namespace {

bool address_order(const Prefix& a, const Prefix& b) {
    const int c = std::memcmp(a.address.bytes, b.address.bytes, sizeof a.address.bytes);
    return c != 0 ? c < 0 : a.length < b.length;
}

// Whether outer holds inner (outer no longer), comparing the leading outer.length bits.
bool covers(const Prefix& outer, const Prefix& inner) {
    if (outer.length > inner.length) return false;
    const unsigned whole = outer.length / 8u, rest = outer.length % 8u;
    if (std::memcmp(outer.address.bytes, inner.address.bytes, whole) != 0) return false;
    if (rest == 0) return true;
    const uint8_t mask = static_cast<uint8_t>(0xffu << (8 - rest));
    return (outer.address.bytes[whole] & mask) == (inner.address.bytes[whole] & mask);
}

}  // namespace

void sort_distinct(std::vector<Prefix>& prefixes) {
    std::sort(prefixes.begin(), prefixes.end(), address_order);
    prefixes.erase(std::unique(prefixes.begin(), prefixes.end()), prefixes.end());
}

void drop_covered(std::vector<Prefix>& sorted) {
    // In address order a covering prefix comes before all it covers, and they follow it without a gap, so only the
    // last prefix kept can cover the next one.
    std::size_t kept = 0;
    for (const Prefix& p : sorted)
        if (kept == 0 || !covers(sorted[kept - 1], p)) sorted[kept++] = p;
    sorted.resize(kept);
}

std::shared_ptr<const Blocklist> build_blocklist(std::vector<Prefix> v4, std::vector<Prefix> v6, int socket,
                                                 const std::shared_ptr<const Blocklist>& previous) {
    drop_covered(v4);
    drop_covered(v6);
    if (previous && previous->v4_prefixes == v4 && previous->v6_prefixes == v6) return previous;
    auto built = std::make_shared<Blocklist>();
    try {
        if (!v4.empty()) built->v4 = PrefixSetTable::build(IpFamily::ipv4, v4, socket);
        if (!v6.empty()) built->v6 = PrefixSetTable::build(IpFamily::ipv6, v6, socket);
    } catch (const std::runtime_error& e) {
        throw std::runtime_error(std::string("early-drop sets: ") + e.what());
    }
    built->v4_prefixes = std::move(v4);
    built->v6_prefixes = std::move(v6);
    return built;
}

}  // namespace sluice

#include "control/neighbours.hpp"

#include <cstring>

namespace sluice {

void NeighbourTable::set_targets(const std::vector<NeighbourTarget>& targets) {
    std::map<Key, Entry> next;
    for (const NeighbourTarget& t : targets) {
        Entry& e = next[key(t.family, t.address)];
        if (const auto old = entries_.find(key(t.family, t.address)); old != entries_.end()) e = old->second;
        e.target = t;
    }
    entries_ = std::move(next);
}

bool NeighbourTable::learn(IpFamily family, const IpAddress& address, const rte_ether_addr& mac,
                           Clock::time_point now) {
    const auto it = entries_.find(key(family, address));
    if (it == entries_.end()) return false;  // not an address sluice needs: nothing to keep (bounded by the config)
    Entry& e = it->second;
    const bool changed = !e.mac || std::memcmp(e.mac->addr_bytes, mac.addr_bytes, 6) != 0;
    e.mac = mac;
    e.confirmed = now;
    e.unanswered = 0;
    return changed;
}

std::vector<NeighbourTarget> NeighbourTable::due(Clock::time_point now) {
    std::vector<NeighbourTarget> out;
    for (auto& [k, e] : entries_) {
        const bool stale = !e.mac || now - e.confirmed >= kReachable;
        if (!stale || now - e.last_solicited < kRetry) continue;
        if (e.mac) ++e.unanswered;  // a probe of a resolved entry: counts until the answer resets it
        e.last_solicited = now;
        out.push_back(e.target);
    }
    return out;
}

bool NeighbourTable::expire(Clock::time_point now) {
    bool changed = false;
    for (auto& [k, e] : entries_) {
        if (e.mac && e.unanswered > kProbes && now - e.confirmed >= kReachable) {
            e.mac.reset();
            e.unanswered = 0;
            changed = true;
        }
    }
    return changed;
}

std::optional<rte_ether_addr> NeighbourTable::lookup(IpFamily family, const IpAddress& address) const {
    const auto it = entries_.find(key(family, address));
    return it == entries_.end() ? std::nullopt : it->second.mac;
}

std::size_t NeighbourTable::resolved() const {
    std::size_t n = 0;
    for (const auto& [k, e] : entries_) n += e.mac.has_value();
    return n;
}

}  // namespace sluice

#include "routing/neighbours.hpp"

#include <cstring>

#include <spdlog/fmt/fmt.h>

namespace sluice {

void NeighbourTable::set_targets(const std::vector<NeighbourTarget>& targets) {
    std::map<Key, Entry> next;
    for (const NeighbourTarget& t : targets) {
        Entry& e = next[key(t)];
        if (const auto old = entries_.find(key(t)); old != entries_.end()) e = old->second;
        e.target = t;
        e.gleaned = false;  // a target now: it has a host route
    }
    gleaned_count_ = 0;
    for (const auto& [k, e] : entries_)
        if (e.gleaned && next.emplace(k, e).second) ++gleaned_count_;
    entries_ = std::move(next);
}

bool NeighbourTable::want(const NeighbourTarget& target) {
    if (gleaned_count_ >= kMaxGleaned) return false;
    const auto [it, added] = entries_.try_emplace(key(target));
    if (!added) return false;
    it->second.target = target;
    it->second.gleaned = true;
    ++gleaned_count_;
    return true;
}

std::vector<std::pair<NeighbourTarget, rte_ether_addr>> NeighbourTable::gleaned() const {
    std::vector<std::pair<NeighbourTarget, rte_ether_addr>> out;
    for (const auto& [k, e] : entries_)
        if (e.gleaned && e.mac) out.emplace_back(e.target, *e.mac);
    return out;
}

bool NeighbourTable::learn(uint16_t interface, IpFamily family, const IpAddress& address, const rte_ether_addr& mac,
                           Clock::time_point now) {
    const auto it = entries_.find(key(interface, family, address));
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
        if (!stale(e, now) || now - e.last_solicited < timing_.retransmit) continue;
        // A probe of a resolved entry, or any solicitation of a gleaned one: counts until an answer resets it; once
        // all went unanswered, expire() forgets the entry.
        if (e.mac || e.gleaned) {
            if (e.unanswered >= timing_.probes) continue;
            ++e.unanswered;
        }
        e.last_solicited = now;
        out.push_back(e.target);
    }
    return out;
}

bool NeighbourTable::expire(Clock::time_point now) {
    bool changed = false;
    for (auto it = entries_.begin(); it != entries_.end();) {
        Entry& e = it->second;
        // The last probe had its retransmit interval to be answered.
        const bool silent =
            e.unanswered >= timing_.probes && stale(e, now) && now - e.last_solicited >= timing_.retransmit;
        if (e.gleaned && silent) {
            changed |= e.mac.has_value();  // a host nobody asks for again is not kept
            --gleaned_count_;
            it = entries_.erase(it);
            continue;
        }
        if (e.mac && silent) {
            e.mac.reset();
            e.unanswered = 0;
            changed = true;
        }
        ++it;
    }
    return changed;
}

std::optional<rte_ether_addr> NeighbourTable::lookup(uint16_t interface, IpFamily family,
                                                     const IpAddress& address) const {
    const auto it = entries_.find(key(interface, family, address));
    return it == entries_.end() ? std::nullopt : it->second.mac;
}

std::size_t NeighbourTable::resolved() const {
    std::size_t n = 0;
    for (const auto& [k, e] : entries_) n += e.mac.has_value();
    return n;
}

std::size_t NeighbourTable::unresolved_targets() const {
    std::size_t n = 0;
    for (const auto& [k, e] : entries_) n += !e.gleaned && !e.mac;
    return n;
}

std::vector<NeighbourTable::Listing> NeighbourTable::listing(Clock::time_point now) const {
    std::vector<Listing> out;
    out.reserve(entries_.size());
    for (const auto& [k, e] : entries_) {
        Listing l{e.target, e.mac, std::nullopt, e.unanswered, e.gleaned, e.mac && stale(e, now)};
        if (e.confirmed != Clock::time_point{}) l.age = now - e.confirmed;
        out.push_back(l);
    }
    return out;
}

std::vector<std::string> describe_neighbours(const std::vector<NeighbourTable::Listing>& listing,
                                             const std::function<std::string(uint16_t)>& port_name,
                                             std::size_t max_lines) {
    if (listing.empty()) return {"no neighbours"};
    std::vector<std::string> lines;
    for (const NeighbourTable::Listing& n : listing) {
        if (lines.size() == max_lines) {
            lines.push_back(std::to_string(listing.size() - max_lines) + " more not shown");
            break;
        }
        std::string line = to_string(n.target.address, n.target.family) + " on " + port_name(n.target.port_id);
        if (n.mac) {
            const auto& m = n.mac->addr_bytes;
            line += fmt::format(" at {:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", m[0], m[1], m[2], m[3], m[4], m[5]);
        }
        line += !n.mac ? " unresolved" : n.probing ? " resolved, probing" : " resolved, reachable";
        if (n.age)
            line += ", confirmed " + std::to_string(std::chrono::duration_cast<std::chrono::seconds>(*n.age).count()) +
                    " s ago";
        if (n.unanswered) line += ", " + std::to_string(n.unanswered) + " unanswered";
        line += n.gleaned ? " (host)" : " (next hop)";
        lines.push_back(std::move(line));
    }
    return lines;
}

}  // namespace sluice

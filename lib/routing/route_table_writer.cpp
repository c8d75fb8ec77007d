#include "routing/route_table_writer.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <unordered_set>

#include <rte_errno.h>
#include <rte_fib.h>
#include <rte_fib6.h>
#include <rte_rib.h>
#include <rte_rib6.h>

namespace sluice {
namespace {

std::atomic<uint64_t> g_copy_generation{0};  // rte_fib names its tables; every copy gets fresh names

// At one prefix the route of the first source here wins.
constexpr RouteSource kRanked[] = {RouteSource::config, RouteSource::neighbour, RouteSource::connected,
                                   RouteSource::kernel};

std::string group_key(const CompiledRoute& r) {
    std::string key;
    key.push_back(static_cast<char>(r.family));
    key.push_back(static_cast<char>(r.source));
    key.push_back(static_cast<char>(r.action));
    key.append(reinterpret_cast<const char*>(&r.port), sizeof r.port);
    for (const CompiledRoute::Hop& hop : r.hops) {
        key.append(reinterpret_cast<const char*>(hop.address.bytes), 16);
        key.append(reinterpret_cast<const char*>(&hop.port), sizeof hop.port);
        key.append(reinterpret_cast<const char*>(&hop.weight), sizeof hop.weight);
    }
    return key;
}

// Room beyond what a copy holds when it is built: growth up to that much is written in, not built again.
uint32_t with_room(std::size_t needed, std::size_t least) {
    return static_cast<uint32_t>(needed + std::max(least, needed / 4));
}

}  // namespace

RouteTableWriter::Key RouteTableWriter::key_of(IpFamily family, const Prefix& prefix) {
    return {family, {prefix.address.quads[0], prefix.address.quads[1]}, prefix.length};
}

uint32_t RouteTableWriter::acquire_group(const CompiledRoute& route) {
    std::string key = group_key(route);
    if (const auto known = group_ids_.find(key); known != group_ids_.end()) {
        ++groups_[known->second].uses;
        return known->second;
    }
    uint32_t id;
    if (!free_groups_.empty()) {
        id = free_groups_.back();
        free_groups_.pop_back();
    } else {
        id = static_cast<uint32_t>(groups_.size());
        groups_.emplace_back();
    }
    Group& g = groups_[id];
    g.route = route;
    g.route.prefix = {};
    g.key = key;
    g.uses = 1;
    group_ids_.emplace(std::move(key), id);
    return id;
}

void RouteTableWriter::release_group(uint32_t group) {
    Group& g = groups_[group];
    if (--g.uses > 0) return;
    group_ids_.erase(g.key);
    g = Group{};
    g.route.action = RouteAction::blackhole;  // what a copy's unused group says, should anything reach it
    free_groups_.push_back(group);
}

void RouteTableWriter::set_candidate(Routes::iterator at, RouteSource source, uint32_t group) {
    const Key& key = at->first;
    Slot& slot = at->second;
    uint32_t& candidate = slot.candidates[static_cast<std::size_t>(source)];
    if (candidate == group) {
        if (group != kNone) release_group(group);  // taken twice: once by the caller
        else if (slot.empty() && slot.id == kNone && !slot.dirty) routes_.erase(at);
        return;
    }
    if (candidate != kNone) release_group(candidate);
    candidate = group;
    if (!slot.dirty) {
        slot.dirty = true;
        dirty_.push_back(key);
    }
}

bool RouteTableWriter::mark_given(Slot& slot, RouteSource source) const {
    if (slot.pass != pass_) {
        slot.pass = pass_;
        slot.given = 0;
    }
    const auto bit = static_cast<uint8_t>(1u << static_cast<unsigned>(source));
    if (slot.given & bit) return false;
    slot.given |= bit;
    return true;
}

void RouteTableWriter::remove_not_given(uint8_t sources) {
    // A candidate removed marks its prefix dirty, which keeps the prefix (and the iterator) until the commit.
    for (auto at = routes_.begin(); at != routes_.end(); ++at)
        for (std::size_t s = 0; s < kRouteSourceCount; ++s) {
            const Slot& slot = at->second;
            const bool given = slot.pass == pass_ && (slot.given >> s & 1u);
            if ((sources >> s & 1u) && slot.candidates[s] != kNone && !given)
                set_candidate(at, static_cast<RouteSource>(s), kNone);
        }
}

void RouteTableWriter::replace_config_routes(const std::vector<CompiledRoute>& routes) {
    ++pass_;
    for (const CompiledRoute& r : routes) {
        const auto at = routes_.try_emplace(key_of(r.family, r.prefix)).first;
        if (!mark_given(at->second, r.source)) continue;  // one route per prefix and source: the first
        set_candidate(at, r.source, acquire_group(r));
    }
    uint8_t config_sources = 0;
    for (std::size_t s = 0; s < kRouteSourceCount; ++s)
        if (static_cast<RouteSource>(s) != RouteSource::kernel) config_sources |= static_cast<uint8_t>(1u << s);
    remove_not_given(config_sources);
}

void RouteTableWriter::set_kernel_route(const CompiledRoute& route) {
    CompiledRoute r = route;
    r.source = RouteSource::kernel;
    set_candidate(routes_.try_emplace(key_of(r.family, r.prefix)).first, RouteSource::kernel, acquire_group(r));
}

void RouteTableWriter::remove_kernel_route(IpFamily family, const Prefix& prefix) {
    if (const auto at = routes_.find(key_of(family, prefix)); at != routes_.end())
        set_candidate(at, RouteSource::kernel, kNone);
}

void RouteTableWriter::replace_kernel_routes(const std::vector<CompiledRoute>& routes) {
    ++pass_;
    for (const CompiledRoute& r : routes) {
        mark_given(routes_.try_emplace(key_of(r.family, r.prefix)).first->second, RouteSource::kernel);
        set_kernel_route(r);
    }
    remove_not_given(static_cast<uint8_t>(1u << static_cast<unsigned>(RouteSource::kernel)));
}

std::shared_ptr<const RouteFib> RouteTableWriter::commit() {
    const auto started = std::chrono::steady_clock::now();
    report_ = {};
    if (dirty_.empty()) return current_;
    // The installed state moves first (ids, groups, counts); a copy that cannot be written puts it back.
    struct Undo {
        Key key;
        uint32_t id, group;
        RouteSource source;
    };
    std::vector<Undo> undo;
    const std::vector<uint32_t> group_of_before = group_of_;
    const std::vector<uint32_t> free_ids_before = free_ids_;
    const auto counts_before = counts_;
    std::vector<FibOp> ops;
    for (const Key& key : dirty_) {
        const auto found = routes_.find(key);
        if (found == routes_.end()) continue;
        Slot& slot = found->second;
        const RouteSource* winner = nullptr;
        for (const RouteSource& source : kRanked)
            if (slot.candidates[static_cast<std::size_t>(source)] != kNone) {
                winner = &source;
                break;
            }
        undo.push_back({key, slot.id, slot.group, slot.source});
        const IpFamily family = std::get<0>(key);
        Prefix prefix;
        std::memcpy(prefix.address.quads, std::get<1>(key).data(), 16);
        prefix.length = std::get<2>(key);
        if (slot.id != kNone) --counts_[static_cast<std::size_t>(slot.source)];
        if (!winner) {
            if (slot.id == kNone) continue;
            ops.push_back({false, family, prefix, slot.id});
            free_ids_.push_back(slot.id);
            slot.id = slot.group = kNone;
            ++report_.changes;
            continue;
        }
        if (slot.id == kNone) {
            if (!free_ids_.empty()) {
                slot.id = free_ids_.back();
                free_ids_.pop_back();
            } else {
                slot.id = static_cast<uint32_t>(group_of_.size());
                group_of_.push_back(kNone);
            }
            ops.push_back({true, family, prefix, slot.id});
        }
        const uint32_t group = slot.candidates[static_cast<std::size_t>(*winner)];
        if (slot.group != group || group_of_[slot.id] != group) ++report_.changes;
        slot.group = group;
        slot.source = *winner;
        group_of_[slot.id] = group;
        ++counts_[static_cast<std::size_t>(slot.source)];
    }
    if (ops.empty() && report_.changes == 0) {  // the same routes won again (a reload that kept them)
        clear_dirty();
        return current_;
    }
    std::shared_ptr<RouteFib> copy;
    try {
        copy = writable_copy(ops);
        if (copy && keep_spare_ready_ && !spare_) {
            spare_ = build_copy();
            spare_misses_.clear();
        }
    } catch (...) {
        for (auto u = undo.rbegin(); u != undo.rend(); ++u) {
            Slot& slot = routes_[u->key];
            slot.id = u->id, slot.group = u->group, slot.source = u->source;
        }
        group_of_ = group_of_before;
        free_ids_ = free_ids_before;
        counts_ = counts_before;
        throw;
    }
    clear_dirty();
    report_.milliseconds =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
    return current_;
}

void RouteTableWriter::clear_dirty() {
    for (const Key& key : dirty_) {
        const auto found = routes_.find(key);
        if (found == routes_.end()) continue;
        found->second.dirty = false;
        if (found->second.empty() && found->second.id == kNone) routes_.erase(found);
    }
    dirty_.clear();
}

std::shared_ptr<RouteFib> RouteTableWriter::writable_copy(const std::vector<FibOp>& ops) {
    std::size_t installed = 0;
    for (std::size_t n : counts_) installed += n;
    if (installed == 0) {
        // No route at all: the workers see none; both copies go with the snapshots that hold them.
        spare_.reset();
        spare_misses_.clear();
        current_.reset();
        return nullptr;
    }
    std::shared_ptr<RouteFib> copy;
    // A copy a snapshot still holds is never written (use_count: the snapshots that hold it, on this thread).
    if (spare_ && current_ && spare_.use_count() == 1) {
        copy = std::move(spare_);
        bool written = true;
        for (const FibOp& op : spare_misses_) written = written && apply(*copy, op);
        for (const FibOp& op : ops) written = written && apply(*copy, op);
        report_.fib_ops = spare_misses_.size() + ops.size();
        if (!written) copy.reset();
    }
    spare_.reset();
    if (copy) {
        copy->group_of = group_of_;
        copy->groups.resize(groups_.size());
        for (std::size_t g = 0; g < groups_.size(); ++g) copy->groups[g] = groups_[g].route;
    } else {
        copy = build_copy();
        report_.rebuilt = true;
    }
    spare_ = std::move(current_);
    spare_misses_ = ops;
    current_ = copy;
    return copy;
}

bool RouteTableWriter::apply(RouteFib& copy, const FibOp& op, bool fresh) const {
    if (op.family == IpFamily::ipv4) {
        if (!copy.v4) return false;
        const uint32_t ip = rte_be_to_cpu_32(op.prefix.address.words[0]);
        // rte_fib_add on a prefix it holds reports success even when it could not write the change: delete first.
        if (!fresh && rte_rib_lookup_exact(rte_fib_get_rib(copy.v4), ip, op.prefix.length) &&
            rte_fib_delete(copy.v4, ip, op.prefix.length) < 0)
            return false;
        return !op.add || rte_fib_add(copy.v4, ip, op.prefix.length, op.id + 1) == 0;
    }
    if (!copy.v6) return false;
    if (!fresh && rte_rib6_lookup_exact(rte_fib6_get_rib(copy.v6), op.prefix.address.bytes, op.prefix.length) &&
        rte_fib6_delete(copy.v6, op.prefix.address.bytes, op.prefix.length) < 0)
        return false;
    return !op.add || rte_fib6_add(copy.v6, op.prefix.address.bytes, op.prefix.length, op.id + 1) == 0;
}

std::shared_ptr<RouteFib> RouteTableWriter::build_copy() {
    auto copy = std::make_shared<RouteFib>();
    std::size_t v4_count = 0, v6_count = 0;
    std::unordered_set<uint32_t> v4_groups;  // a prefix longer than /24 needs a tbl8 group for its /24
    uint64_t v6_groups = 0;                  // each prefix can need (length - 24) / 8 tbl8 groups beyond /24
    for (const auto& [key, slot] : routes_) {
        if (slot.id == kNone) continue;
        const uint8_t length = std::get<2>(key);
        if (std::get<0>(key) == IpFamily::ipv4) {
            ++v4_count;
            if (length > 24) {
                uint32_t word;
                std::memcpy(&word, std::get<1>(key).data(), 4);
                v4_groups.insert(rte_be_to_cpu_32(word) >> 8);
            }
        } else {
            ++v6_count;
            v6_groups += length > 24 ? (length - 24 + 7) / 8 : 0;
        }
    }
    const uint64_t generation = g_copy_generation.fetch_add(1);
    if (v4_count) {
        rte_fib_conf conf{};
        conf.type = RTE_FIB_DIR24_8;
        conf.default_nh = 0;
        conf.max_routes = static_cast<int>(with_room(v4_count, 1024));
        conf.dir24_8.nh_sz = RTE_FIB_DIR24_8_4B;
        conf.dir24_8.num_tbl8 = with_room(v4_groups.size(), 256);
        const std::string name = "sl_rt4_" + std::to_string(generation);
        copy->v4 = rte_fib_create(name.c_str(), socket_, &conf);
        if (!copy->v4)
            throw std::runtime_error("routes (IPv4): rte_fib_create: " + std::string(rte_strerror(rte_errno)));
    }
    if (v6_count) {
        rte_fib6_conf conf{};
        conf.type = RTE_FIB6_TRIE;
        conf.default_nh = 0;
        conf.max_routes = static_cast<int>(with_room(v6_count, 1024));
        conf.trie.nh_sz = RTE_FIB6_TRIE_4B;
        conf.trie.num_tbl8 = static_cast<uint32_t>(std::min<uint64_t>(with_room(v6_groups, 256), 1u << 24));
        const std::string name = "sl_rt6_" + std::to_string(generation);
        copy->v6 = rte_fib6_create(name.c_str(), socket_, &conf);
        if (!copy->v6)
            throw std::runtime_error("routes (IPv6): rte_fib6_create: " + std::string(rte_strerror(rte_errno)));
    }
    // Shorter prefixes first: DIR-24-8 then never walks the more specific routes under a prefix it adds (writing
    // around each of them), which took most of a full table's build in random order.
    std::vector<std::pair<uint8_t, const Routes::value_type*>> installed;
    installed.reserve(v4_count + v6_count);
    for (const auto& route : routes_)
        if (route.second.id != kNone) installed.emplace_back(std::get<2>(route.first), &route);
    std::stable_sort(installed.begin(), installed.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [length, route] : installed) {
        const auto& [key, slot] = *route;
        Prefix prefix;
        std::memcpy(prefix.address.quads, std::get<1>(key).data(), 16);
        prefix.length = length;
        if (!apply(*copy, {true, std::get<0>(key), prefix, slot.id}, true))
            throw std::runtime_error("routes: cannot add a route (out of memory?)");
    }
    copy->group_of = group_of_;
    copy->groups.resize(groups_.size());
    for (std::size_t g = 0; g < groups_.size(); ++g) copy->groups[g] = groups_[g].route;
    return copy;
}

}  // namespace sluice

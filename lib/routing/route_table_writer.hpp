// The route table as the control thread keeps it: every route by prefix and source, the one that wins at each prefix
// (static, then host, then connected, then kernel), and two copies of the FIBs (RouteFib). A change is written into
// the copy no snapshot holds, which the next snapshot then takes; the same change is replayed onto the other copy at
// the next commit, once the snapshot that held it is retired. So a route added or removed costs one rte_fib_add or
// rte_fib_delete per copy, never a rebuild, and no worker reads a table while it is written (docs/adr/0006).
// Control thread only; not fast-path code.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "pipeline/route_table.hpp"

namespace sluice {

// What the last commit did, for logs and benchmarks.
struct RouteCommitReport {
    std::size_t changes = 0;  // prefixes added, removed or given other next hops
    std::size_t fib_ops = 0;  // rte_fib/rte_fib6 adds and deletes on the copy written (replayed ones included)
    bool rebuilt = false;     // the copy was built whole (the first commits, or it was full)
    double milliseconds = 0;
};

class RouteTableWriter {
public:
    explicit RouteTableWriter(int socket = 0) : socket_(socket) {}
    RouteTableWriter(const RouteTableWriter&) = delete;
    RouteTableWriter& operator=(const RouteTableWriter&) = delete;

    // Every route of the sources the config gives (static, host, connected) replaced by routes.
    void replace_config_routes(const std::vector<CompiledRoute>& routes);
    // The kernel route at its prefix set (added or replaced) or removed.
    void set_kernel_route(const CompiledRoute& route);
    void remove_kernel_route(IpFamily family, const Prefix& prefix);
    // Every kernel route replaced by routes (a dump after the kernel's notifications were lost).
    void replace_kernel_routes(const std::vector<CompiledRoute>& routes);

    // Changes not committed yet.
    std::size_t pending() const { return dirty_.size(); }
    // The table with every change so far, for the next snapshot: the last commit's when nothing changed, else the
    // spare copy with the changes written in (built whole when there is none or it is full). The copy returned by
    // the commit before must no longer be held by any snapshot but the one being replaced (a held copy is never
    // written: another is built). Null when there is no route at all. Throws std::runtime_error when a table cannot
    // be built; the routes stay as they were then.
    std::shared_ptr<const RouteFib> commit();
    const RouteCommitReport& last_commit() const { return report_; }

    // Routes in the table (the winner at each prefix) by source, as of the last commit.
    const std::array<std::size_t, kRouteSourceCount>& counts() const { return counts_; }
    // Keep the spare copy built from the first commit on, so that the first change is not a whole build (a kernel
    // table is mirrored).
    void keep_spare_ready() { keep_spare_ready_ = true; }

private:
    static constexpr uint32_t kNone = UINT32_MAX;
    using Key = std::tuple<IpFamily, std::array<uint64_t, 2>, uint8_t>;  // family, address, length
    struct Slot {
        std::array<uint32_t, kRouteSourceCount> candidates{kNone, kNone, kNone, kNone};  // group by source, or kNone
        uint32_t id = kNone;                                                             // installed: its route id
        uint32_t group = kNone;                                                          // installed: its group
        RouteSource source = RouteSource::kernel;                                        // installed: its winner's
        bool dirty = false;                                                              // in dirty_
        uint8_t given = 0;  // sources given in replace pass `pass` (a bit each)
        uint32_t pass = 0;
        bool empty() const {
            return std::all_of(candidates.begin(), candidates.end(), [](uint32_t g) { return g == kNone; });
        }
    };
    struct Group {
        CompiledRoute route;  // no prefix
        std::string key;
        uint32_t uses = 0;  // candidates
    };
    struct FibOp {
        bool add;
        IpFamily family;
        Prefix prefix;
        uint32_t id;
    };

    static Key key_of(IpFamily family, const Prefix& prefix);
    uint32_t acquire_group(const CompiledRoute& route);
    void release_group(uint32_t group);
    struct KeyHash {
        std::size_t operator()(const Key& k) const {
            const auto& [family, quads, length] = k;
            uint64_t h = quads[0] * 0x9e3779b97f4a7c15ull ^ quads[1] * 0xc2b2ae3d27d4eb4full;
            h ^= (uint64_t{length} << 8 | static_cast<uint64_t>(family)) * 0x165667b19e3779f9ull;
            return static_cast<std::size_t>(h ^ h >> 29);
        }
    };
    // Hashed: a full table's prefixes are looked up one by one, in no useful order.
    using Routes = std::unordered_map<Key, Slot, KeyHash>;
    void set_candidate(Routes::iterator at, RouteSource source, uint32_t group);  // kNone: removes it
    // A replace_* call's routes: each (prefix, source) once. False when it was given before in this pass.
    bool mark_given(Slot& slot, RouteSource source) const;
    // After a replace_* pass: the candidates of `sources` (a bit each) that it did not give are removed.
    void remove_not_given(uint8_t sources);
    // The copy to write: the spare with the last commit's and ops written in, or a new one built whole.
    std::shared_ptr<RouteFib> writable_copy(const std::vector<FibOp>& ops);
    std::shared_ptr<RouteFib> build_copy();
    // After a commit: the dirty marks gone, and the prefixes with no route left forgotten.
    void clear_dirty();
    // fresh: the copy is being built and cannot hold the prefix yet.
    bool apply(RouteFib& copy, const FibOp& op, bool fresh = false) const;

    int socket_;
    Routes routes_;
    std::vector<Key> dirty_;  // prefixes whose candidates changed since the last commit, each once
    uint32_t pass_ = 0;       // replace_* calls so far
    std::vector<Group> groups_;
    std::unordered_map<std::string, uint32_t> group_ids_;
    std::vector<uint32_t> free_groups_;
    std::vector<uint32_t> group_of_;  // by route id
    std::vector<uint32_t> free_ids_;
    std::array<std::size_t, kRouteSourceCount> counts_{};  // installed routes by their winner's source
    std::shared_ptr<RouteFib> current_, spare_;
    std::vector<FibOp> spare_misses_;  // the last commit's operations, not yet written into spare_
    RouteCommitReport report_;
    uint64_t generation_ = 0;
    bool keep_spare_ready_ = false;
};

}  // namespace sluice

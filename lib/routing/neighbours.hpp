// sluice's own ARP/ND resolver (RFC 826, RFC 4861 section 7.3 in spirit): the addresses it must reach (next hops
// given by address, backends on its links) are its targets; workers report every ARP/ND sender they see, and the
// table keeps what targets said. Unresolved targets are solicited every retransmit interval; resolved ones are probed
// again once not confirmed for the reachable time, and forgotten when `probes` probes went unanswered (Linux's
// REACHABLE, PROBE and FAILED states, without STALE's delay). Control thread only; not fast-path code.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <rte_ether.h>

#include "common/five_tuple.hpp"

namespace sluice {

struct NeighbourTarget {
    IpFamily family = IpFamily::none;
    IpAddress address{};
    uint16_t port_id = 0;  // the interface whose link it is on (packet/vlan.hpp: a port, or one of its VLANs)
    IpAddress sender{};    // sluice's own address on that link: the source of its solicitations
};

class NeighbourTable {
public:
    using Clock = std::chrono::steady_clock;
    // The config's neighbours section (its defaults are Linux's).
    struct Timing {
        Clock::duration reachable = std::chrono::seconds(30);  // then probed again
        Clock::duration retransmit = std::chrono::seconds(1);  // between solicitations or probes
        int probes = 3;                                        // unanswered probes before an entry is dropped
    };

    static constexpr std::size_t kMaxGleaned = 4096;  // hosts resolved for connected routes at once

    // Applies from the next due() and expire() on; entries keep what they learned.
    void set_timing(const Timing& timing) { timing_ = timing; }
    const Timing& timing() const { return timing_; }

    // The addresses to resolve; learned MACs of targets that remain are kept, and so are gleaned hosts.
    void set_targets(const std::vector<NeighbourTarget>& targets);

    // A worker routed a packet to target, a host on a connected link that is no target (glean): resolved and probed
    // like a target while it answers; forgotten when `probes` solicitations or probes go unanswered. At most
    // kMaxGleaned at once (others are ignored until room frees up). True when it was new.
    bool want(const NeighbourTarget& target);
    // The gleaned hosts resolved now, with their MACs.
    std::vector<std::pair<NeighbourTarget, rte_ether_addr>> gleaned() const;

    // A worker saw `address` at `mac` on interface. True when a target's MAC changed (the snapshot must be rebuilt).
    // An address is learned on its own link only: the same address heard on another VLAN teaches nothing.
    bool learn(uint16_t interface, IpFamily family, const IpAddress& address, const rte_ether_addr& mac,
               Clock::time_point now);

    // Targets to solicit now (each at most once per retransmit interval).
    std::vector<NeighbourTarget> due(Clock::time_point now);

    // Drops entries whose probes went unanswered. True when one was dropped (rebuild).
    bool expire(Clock::time_point now);

    std::optional<rte_ether_addr> lookup(uint16_t interface, IpFamily family, const IpAddress& address) const;
    std::size_t resolved() const;
    std::size_t size() const { return entries_.size(); }
    // Targets (next hops, backends on a link) with no MAC now: their traffic is dropped as neighbour_unresolved.
    std::size_t unresolved_targets() const;

    // One entry as sluicectl neighbours shows it, in address order.
    struct Listing {
        NeighbourTarget target;
        std::optional<rte_ether_addr> mac;
        std::optional<Clock::duration> age;  // since its MAC was last confirmed (none before the first answer)
        int unanswered = 0;                  // solicitations or probes since the last answer
        bool gleaned = false;                // a host on a connected link, not a next hop of the config
        bool probing = false;                // resolved, but not confirmed within the reachable time
    };
    std::vector<Listing> listing(Clock::time_point now) const;

private:
    struct Entry {
        NeighbourTarget target;
        std::optional<rte_ether_addr> mac;
        Clock::time_point confirmed{};
        Clock::time_point last_solicited{};
        int unanswered = 0;
        bool gleaned = false;
    };
    // Not resolved, or not confirmed within the reachable time: to be solicited or probed.
    bool stale(const Entry& e, Clock::time_point now) const { return !e.mac || now - e.confirmed >= timing_.reachable; }

    Timing timing_;
    std::size_t gleaned_count_ = 0;
    // By (interface, address): a port's VLANs are links of their own.
    using Key = std::tuple<uint16_t, uint8_t, uint64_t, uint64_t>;
    static Key key(uint16_t interface, IpFamily family, const IpAddress& a) {
        return {interface, static_cast<uint8_t>(family), a.quads[0], a.quads[1]};
    }
    static Key key(const NeighbourTarget& t) { return key(t.port_id, t.family, t.address); }
    std::map<Key, Entry> entries_;
};

// sluicectl neighbours: one line per entry, "ADDRESS on PORT [at MAC] STATE[, confirmed N s ago][, K unanswered]
// (next hop|host)", at most max_lines of them and a line saying how many more (a telemetry reply holds 16 KiB).
std::vector<std::string> describe_neighbours(const std::vector<NeighbourTable::Listing>& listing,
                                             const std::function<std::string(uint16_t)>& port_name,
                                             std::size_t max_lines);

}  // namespace sluice

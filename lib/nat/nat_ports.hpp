// The source ports one worker hands out for translated connections. A translated connection only needs its 5-tuple
// unique, so each (pool address, destination address) has a port space of its own, whatever the destination's port:
// destinations on different addresses never compete for ports, and a pool address carries ~64k connections per
// destination address, not in all. A destination is whom the translation sends a connection to (a `nat` service's
// backend, by its stable id); destinations on one address share a space, so two can never be given reply tuples that
// meet (one with a fixed port and one that keeps the client's would otherwise).
// A worker owns exactly the ports p with p % worker_count == worker_index, in every space, so the reply to a
// translated connection (destination -> pool address:p) names its owning worker by its destination port
// (nat_owner.hpp).
// A space is a bitmap of the worker's ports (one bit each) with a summary bit per 64-port word, so finding a free
// port reads at most a few words. Ports are taken from a cursor that goes round, so a freed port waits a whole turn
// before it is reused: the destination's TIME_WAIT for that 4-tuple has the longest time to end.
// Memory: about 8 KiB per (pool address, destination address) for the full 1024-65535 range, split among the
// workers; a space is made when its destination first appears in a snapshot and kept until the daemon stops (stable
// destination ids are never reused, so bindings survive reloads and a removed backend's connections keep theirs).
// Threads: prepare() control thread only, before the snapshot naming the destinations is published (the publishing
// release store orders it before a worker's first use); allocate, peek_next and release owning worker only (fast-path
// safe: no allocation); in_use and capacity any thread. take: owning worker only.
// Instances that sync their state (lib/sync) share the pool addresses, so each allocates only from its share of every
// space: share s of n owns the worker's ports whose index among them is s modulo n (the others are marked taken from
// the start and never handed out here), so two instances never give one destination the same source port. A peer's
// port is taken from its connection without being tracked here: only the peer allocates it.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/compiler.hpp"
#include "common/five_tuple.hpp"

namespace sluice {

// Destination ids run below this (the load balancer's stable backend ids: lb/lb_tables.hpp's kMaxBackends).
inline constexpr uint32_t kMaxNatDestinations = 65536;

// A destination of translated connections: its stable id and the address whose space it draws from.
struct NatDestination {
    uint32_t id = 0;
    IpAddress address{};
    IpFamily family = IpFamily::none;
};

// Successive guesses of the ports allocate() will hand out in one space (NatPortPool::peek_next).
struct NatPortGuess {
    uint32_t destination = 0;
    uint8_t address = 0;
    uint32_t given = 0;  // guesses made so far
    uint64_t from = 0;   // where the next guess's search starts
};

class NatPortPool {
public:
    // Ports [first, last] (host order) owned by worker_index of worker_count, on each of `addresses` pool addresses;
    // this instance allocates from share share_index of shares.
    NatPortPool(uint16_t first, uint16_t last, uint16_t worker_index, uint16_t worker_count, std::size_t addresses,
                uint16_t share_index = 0, uint16_t shares = 1);
    ~NatPortPool();
    NatPortPool(const NatPortPool&) = delete;
    NatPortPool& operator=(const NatPortPool&) = delete;

    // Gives every destination its port space, made or shared by address. Control thread.
    void prepare(const std::vector<NatDestination>& destinations);

    // A free port (host order) toward destination (stable id) on pool address `address`, or 0 when none is left.
    // `guess`, a port peek_next gave for this space (0: none), is taken when it is still free: the search it saves
    // would find it, unless an earlier guess of the space went unused, which then waits a turn of the cursor.
    uint16_t allocate(std::size_t address, uint32_t destination, uint16_t guess = 0) {
        Lane lane = lane_of(address, destination);
        if (*lane.in_use == ports_) return 0;
        const uint32_t guessed = guess ? (guess - first_port_) / step_ : 0;
        const uint32_t bit = guess && !(lane.used[guessed / 64] & (uint64_t{1} << (guessed % 64)))
                                 ? guessed
                                 : free_bit_from(lane, *lane.cursor);
        lane.used[bit / 64] |= uint64_t{1} << (bit % 64);
        mark_word(lane, bit / 64);
        *lane.cursor = bit + 1 == ports_ ? 0 : bit + 1;
        counter_add(*lane.in_use);
        return port_of(bit);
    }

    // Takes a given port (a connection learned from a peer instance, lib/sync): false when it is not this worker's
    // or is taken already.
    bool take(std::size_t address, uint32_t destination, uint16_t port) {
        if (destination >= by_destination_.size() || !by_destination_[destination] || address >= addresses_ ||
            port < first_port_ || (port - first_port_) % step_ != 0 || (port - first_port_) / step_ >= ports_)
            return false;
        Lane lane = lane_of(address, destination);
        const uint32_t bit = (port - first_port_) / step_;
        if (!in_share(bit)) return true;  // the peer's: it alone allocates it
        if (lane.used[bit / 64] & (uint64_t{1} << (bit % 64))) return false;
        lane.used[bit / 64] |= uint64_t{1} << (bit % 64);
        mark_word(lane, bit / 64);
        counter_add(*lane.in_use);
        return true;
    }

    // The port the guess.given-th next allocate(guess.address, guess.destination) would return (0 when fewer are free),
    // nothing taken; one search per call.
    uint16_t peek_next(NatPortGuess& guess) const {
        const Lane lane = lane_of(guess.address, guess.destination);
        if (guess.given >= ports_ - *lane.in_use) return 0;
        const uint32_t bit = free_bit_from(lane, guess.given++ == 0 ? *lane.cursor : guess.from);
        guess.from = bit + 1 == ports_ ? 0 : bit + 1;
        return port_of(bit);
    }

    // Gives back a port allocate(address, destination) returned.
    void release(std::size_t address, uint32_t destination, uint16_t port) {
        Lane lane = lane_of(address, destination);
        const uint32_t bit = (port - first_port_) / step_;
        if (!in_share(bit)) return;  // a peer's port: never marked here
        lane.used[bit / 64] &= ~(uint64_t{1} << (bit % 64));
        lane.full[bit / 64 / 64] &= ~(uint64_t{1} << (bit / 64 % 64));
        std::atomic_ref<uint64_t>(*lane.in_use).store(*lane.in_use - 1, std::memory_order_relaxed);
    }

    // Ports taken toward destination on pool address `address` (0 for a destination with no space); any thread.
    std::size_t in_use(std::size_t address, uint32_t destination) const;
    // Ports each space holds for this worker and instance.
    std::size_t capacity() const { return ports_ - reserved_; }
    std::size_t free_ports(std::size_t address, uint32_t destination) const {
        return capacity() - in_use(address, destination);
    }

private:
    // One space's state on one pool address, inside its block of words.
    struct Lane {
        uint64_t* in_use;
        uint64_t* cursor;  // the bit the next search starts at
        uint64_t* full;    // summary: bit w set when word w of used has no free bit
        uint64_t* used;    // bit i set when port_of(i) is taken
    };

    Lane lane_of(std::size_t address, uint32_t destination) const {
        uint64_t* at = by_destination_[destination] + address * lane_words_;
        return Lane{at, at + 1, at + 2, at + 2 + summary_words_};
    }
    uint16_t port_of(uint32_t bit) const { return static_cast<uint16_t>(first_port_ + bit * step_); }
    bool in_share(uint32_t bit) const { return shares_ == 1 || bit % shares_ == share_index_; }
    // The first free bit at or after `from`, going round; the lane must have one. Inline: the word at `from` nearly
    // always has one (ports are taken in turn).
    uint32_t free_bit_from(const Lane& lane, uint64_t from) const {
        const auto word = static_cast<uint32_t>(from / 64);
        const uint64_t room = ~lane.used[word] & (~uint64_t{0} << (from % 64));
        if (SLUICE_LIKELY(room != 0)) return word * 64 + static_cast<uint32_t>(__builtin_ctzll(room));
        return free_bit_after_word(lane, word);
    }
    // Marks the bits of other instances' shares taken in a new lane (`at`: its first word), counted in in_use.
    void reserve_other_shares(uint64_t* at) const;
    // The first free bit in the words after `word`, going round (the summary says which, 64 words at a time).
    uint32_t free_bit_after_word(const Lane& lane, uint32_t word) const;
    static void mark_word(const Lane& lane, uint32_t word) {
        if (lane.used[word] == ~uint64_t{0}) lane.full[word / 64] |= uint64_t{1} << (word % 64);
    }

    uint32_t first_port_ = 0;  // the worker's lowest port
    uint32_t step_ = 1;        // worker_count: the distance between two of its ports
    uint32_t ports_ = 0;       // the worker's ports per space
    uint32_t words_ = 0;       // 64-bit words of the used bitmap
    uint32_t summary_words_ = 0;
    std::size_t lane_words_ = 0;
    std::size_t addresses_ = 0;
    uint32_t share_index_ = 0, shares_ = 1;
    uint32_t reserved_ = 0;  // the worker's ports of other instances' shares, marked taken in every lane
    std::vector<uint64_t*> by_destination_;                      // stable id -> its space's block (kMaxNatDestinations)
    std::map<std::string, std::unique_ptr<uint64_t[]>> spaces_;  // address -> block
};

}  // namespace sluice

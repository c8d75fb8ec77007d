// Connection tracking for one worker: a table over rte_hash owned by that worker alone (no locks, no sharing),
// one entry per connection found from either direction, a TCP state machine in the spirit of nf_conntrack, and
// bounded incremental expiry. Fast-path safe (no allocation after construction); owning worker only, except
// construction/destruction (control thread, before launch / after stop).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "common/compiler.hpp"
#include "common/five_tuple.hpp"
#include "conntrack/tcp_flags.hpp"
#include "conntrack/tcp_window.hpp"

struct rte_hash;

namespace sluice {

enum class ConnState : uint8_t {
    tcp_syn_sent,
    tcp_syn_recv,
    tcp_established,
    tcp_fin_wait,
    tcp_close_wait,
    tcp_last_ack,
    tcp_time_wait,
    tcp_close,
    udp_unreplied,  // only the initiator has sent
    udp_replied,    // traffic seen both ways
    icmp,           // echo and other ICMP/ICMPv6 query "connections"
    other,          // any other IP protocol
    count
};

const char* conn_state_name(ConnState state);

// Seconds an entry lives after its last packet, per state. Defaults follow nf_conntrack's spirit, shortened where
// a gateway under attack needs it.
struct ConnTimeouts {
    uint32_t tcp_syn_sent = 30;
    uint32_t tcp_syn_recv = 30;
    uint32_t tcp_established = 3600;
    uint32_t tcp_fin_wait = 120;
    uint32_t tcp_close_wait = 60;
    uint32_t tcp_last_ack = 30;
    uint32_t tcp_time_wait = 120;
    uint32_t tcp_close = 10;
    uint32_t udp_unreplied = 30;
    uint32_t udp_replied = 180;
    uint32_t icmp = 30;
    uint32_t other = 600;
    friend bool operator==(const ConnTimeouts&, const ConnTimeouts&) = default;
};

// The timeout of a state, in seconds.
uint32_t timeout_seconds(const ConnTimeouts& timeouts, ConnState state);

// One connection in 32 bytes: half of its slot's cache line, the other half its TcpWindow (ConnSlot), so that a TCP
// packet reads one line of the table. The key (the canonical tuple) lives in the rte_hash of its family; the slot
// sits in a parallel array at the key's position (IPv6 positions follow the IPv4 ones). A slot is a connection or,
// with kConnFlagAlias, a connection's second key: the first 8 bytes are both kinds', an alias's ConnAlias lies over
// the rest of the line.
struct alignas(32) ConnEntry {
    uint32_t peer;  // NAT: the other key's entry (alias <-> primary), kNoPeer otherwise
    ConnState state;
    uint8_t flags;     // kConnFlagLive, kConnFlagAlias, plus the TCP state table's sub-state bits
    uint16_t in_port;  // the port the opening packet came in on (reload --dry-run re-judges it)
    // A connection's own fields from here on (an alias's ConnAlias lies over them).
    uint32_t expires;     // ConnTable's tick (ConnTable::tick) it expires at; compared modulo 2^32 (expired())
    uint32_t packets[2];  // [0] initiator -> responder, [1] replies; they wrap at 2^32
    uint32_t backend;     // load balancer: the backend's stable id + 1, 0 when the connection is not balanced
    // The rule that allowed it (for per-rule counters; kConnRuleNotCounted for the default or a rule past it).
    uint32_t rule_index : 23;
    uint32_t initiator_is_low : 1;  // 1 when the initiator is the lower endpoint in canonical order
    uint32_t nat_address : 8;       // NAT: index of its pool address
    uint16_t nat_port;              // NAT: the pool port (host order) the connection holds, 0 when none
    uint16_t synced_s;              // sync: when peers were last told of it (seconds, modulo 2^16; lib/sync)
};
static_assert(sizeof(ConnEntry) == 32 && offsetof(ConnEntry, expires) == 8 && offsetof(ConnEntry, nat_port) == 28);

// A rule index an entry stores for the default action or any rule at or past it: per-rule counters cover fewer
// rules (kMaxCountedRules), so such a connection is counted under none, as the default's are.
inline constexpr uint32_t kConnRuleNotCounted = (1u << 23) - 1;

// What a NAT alias slot (kConnFlagAlias: the backend-side key of a connection, see insert_alias) holds instead of a
// connection's fields and window: where the replies go back to, so that rewriting a reply reads the alias's own
// cache line rather than looking up the connection's key; and for a syn_proxy connection, its sequence numbers'
// shift.
struct ConnAlias {
    IpAddress client;
    IpAddress vip;
    uint16_t client_port;  // host order, as the VIP's
    uint16_t vip_port;
    uint32_t seq_shift;       // syn_proxy: the backend's ISN minus the cookie; while pending, the cookie itself
    uint16_t pending_window;  // syn_proxy, while pending: the client's receive window, for the backend's handshake
};

// One slot of the table: one cache line. A connection's entry and its TCP window (a TCP packet reads and writes
// both; other protocols leave the window unused), or an alias's shared 8 bytes and its ConnAlias.
struct alignas(kCacheLine) ConnSlot {
    union {
        struct {
            ConnEntry entry;
            TcpWindow window;
        };
        struct {
            uint64_t alias_header;  // ConnEntry's peer, state, flags and in_port
            ConnAlias alias;
        };
    };
};
static_assert(sizeof(ConnSlot) == kCacheLine && alignof(ConnSlot) == kCacheLine);
static_assert(offsetof(ConnSlot, window) == 32 && offsetof(ConnSlot, alias) == offsetof(ConnEntry, expires) &&
              offsetof(ConnSlot, alias) + sizeof(ConnAlias) <= kCacheLine);

// The slot holds a connection (expiry scans the slot array, not the hash, and skips free slots with this bit).
inline constexpr uint8_t kConnFlagLive = 0x01;
// The slot is a second key of a connection (the NAT side: backend <-> pool address), not a connection: its peer is
// the connection's entry, and it lives and dies with it. Not the sub-state bits (tcp_state.hpp uses 0x02, 0x04).
inline constexpr uint8_t kConnFlagAlias = 0x08;
inline constexpr uint32_t kNoPeer = UINT32_MAX;
// sluice sees one direction only (dsr and tunnel: the backend answers the client directly), so the two-sided TCP
// state machine cannot apply: a SYN opens, any ACK establishes, a FIN starts the close and a RST ends it.
inline constexpr uint8_t kConnFlagOneWay = 0x10;
// A syn_proxy connection: the client took sluice's cookie as the server's ISN, the backend chose its own, so every
// packet's sequence (to the client) or acknowledgment (to the backend) number moves by a shift. Set on the
// connection and on its alias, whose entry holds the shift (ConnTable::seq_shift).
inline constexpr uint8_t kConnFlagSynProxy = 0x20;
// ... and the backend has not answered sluice's SYN yet: the alias holds the cookie, not the shift, and the
// client's packets wait (they are dropped and resent by the client).
inline constexpr uint8_t kConnFlagSynProxyPending = 0x40;
// Learned from a peer instance (lib/sync) and not yet carried a packet here: its owner keeps peers up to date, so
// this instance does not send it back to them.
inline constexpr uint8_t kConnFlagLearned = 0x80;

// What a packet did to its connection.
enum class TrackVerdict : uint8_t { ok, invalid };

class ConnTable {
public:
    static constexpr uint32_t kMaxBurst = 64;  // RTE_HASH_LOOKUP_BULK_MAX
    static constexpr std::size_t kMaxNameLength = 18;

    // capacity: entries of both families together (a full table refuses inserts); of them at most ipv6_capacity
    // IPv6 ones (0: default_ipv6_capacity(capacity)). tsc_hz: rte_get_tsc_hz(). Throws std::runtime_error when rte_hash
    // cannot be created (name must be unique per process and at most kMaxNameLength characters: rte_hash names its
    // rings "HT_<name>_v6" and "HT_EXT_<name>_v6" and truncates them silently to 28 characters, so two long names that
    // share a prefix would collide; the IPv6 table is named "<name>_v6", so no other table may be).
    // Two rte_hash tables, one per family, so that an IPv4 key takes 16 bytes: its rte_hash slot (with the data
    // pointer) is 32 bytes and never straddles two cache lines. A 40-byte key's slot is 48 bytes and half of them
    // do; rte_hash prefetches only the first line before it compares the key (at 1M connections the established
    // path took 25-30 % longer with one 40-byte-key table).
    // Memory per IPv4 connection: a 64 B slot (entry and TCP window) + 32 B key slot + 8-13 B bucket share + 4-7 B
    // free-slot ring, about 110 B; per IPv6 connection the key slot is 48 B, about 126 B (docs/benchmarks.md has the
    // budget, with the IPv6 share's own slots).
    // When a table's entries are above 96% of the next power of two, it also reserves rte_hash's extendable buckets (+9
    // B per entry) so that every insert fits; below that, plain cuckoo hashing holds them (measured: the first cuckoo
    // failure comes at >= 97.6% load).
    ConnTable(const std::string& name, uint32_t capacity, int socket_id, const ConnTimeouts& timeouts, uint64_t tsc_hz,
              uint32_t ipv6_capacity = 0);
    ~ConnTable();
    // A sixteenth of capacity, but at least 1024 (or capacity, when smaller): the IPv6 table costs about 126 B per
    // entry whether used or not, so it is not sized for every connection being IPv6.
    static uint32_t default_ipv6_capacity(uint32_t capacity) {
        const uint32_t floor = capacity < 1024 ? capacity : 1024;
        return capacity / 16 > floor ? capacity / 16 : floor;
    }
    ConnTable(const ConnTable&) = delete;
    ConnTable& operator=(const ConnTable&) = delete;

    // Finds each tuple's connection, from either direction. hashes[i] must be symmetric_flow_hash(*tuples[i]).
    // positions[i] = entry index, or -1. count <= kMaxBurst. source_low, when given, gets bit i set when tuple i's
    // source is the lower endpoint (source_is_low: the key's order, computed anyway), for is_reply_from.
    void lookup_bulk(const FiveTuple* const* tuples, const uint32_t* hashes, uint32_t count, int32_t* positions,
                     uint64_t* source_low = nullptr) const;

    // Brings the table's buckets for these tuples into the cache (a lookup whose answer is not kept), so that
    // inserting them next, one after another, does not wait for each one's misses in turn. count <= kMaxBurst.
    void warm(const FiveTuple* const* tuples, const uint32_t* hashes, uint32_t count) const {
        int32_t positions[kMaxBurst];
        lookup_bulk(tuples, hashes, count, positions);
    }

    // Adds a connection initiated by tuple in state initial (see initial_state()); returns its index, or -1 when
    // the table (or, for IPv6, its share) is full (the caller drops the packet and counts it; existing entries are
    // never evicted for it).
    // Counts nothing and expires after initial's timeout: the caller then calls track() for the opening packet
    // like for any other (it leaves the initial state as it is). A tuple already in the table gets its existing
    // index back, untouched. hash must be symmetric_flow_hash(tuple).
    int32_t insert(const FiveTuple& tuple, uint32_t hash, ConnState initial, uint32_t rule_index, uint64_t now_tsc);

    // Adds a second key for connection `primary` (a NAT connection's backend-side tuple), found by lookup_bulk like
    // any key; resolve() maps it to the connection. Returns the alias index, -1 when the table (or its IPv6 share)
    // is full, or kAliasTaken when the tuple belongs to another connection (the caller then removes the connection).
    // Removing either removes both.
    static constexpr int32_t kAliasTaken = -2;
    int32_t insert_alias(const FiveTuple& tuple, uint32_t hash, int32_t primary);

    // The connection a looked-up index belongs to; via_alias tells that the packet came by the NAT-side key (so
    // it is a reply: the backend -> pool side only ever carries replies).
    int32_t resolve(int32_t index, bool& via_alias) const {
        via_alias = slots_[index].entry.flags & kConnFlagAlias;
        return via_alias ? static_cast<int32_t>(slots_[index].entry.peer) : index;
    }

    // Called with the connection's entry when a balanced connection (backend or nat_port set) is removed (expired
    // or removed), so the owner returns its NAT port and counts it closed. Owning worker only.
    using ReleaseHook = void (*)(void* arg, const ConnEntry& entry);
    void set_release_hook(ReleaseHook hook, void* arg) {
        release_hook_ = hook;
        release_arg_ = arg;
    }

    // Called by expire() with each connection it is about to remove (state sync tells the peers). Owning worker only.
    using ExpiryHook = void (*)(void* arg, ConnTable& table, int32_t index, uint64_t now_tsc);
    void set_expiry_hook(ExpiryHook hook, void* arg) {
        expiry_hook_ = hook;
        expiry_arg_ = arg;
    }

    // Where the replies of an alias's connection go back to (ConnAlias).
    void set_origin(int32_t alias, const IpAddress& client, uint16_t client_port, const IpAddress& vip,
                    uint16_t vip_port) {
        ConnAlias& a = slots_[alias].alias;
        a.client = client;
        a.client_port = client_port;
        a.vip = vip;
        a.vip_port = vip_port;
    }
    void origin(int32_t alias, IpAddress& client, uint16_t& client_port, IpAddress& vip, uint16_t& vip_port) const {
        const ConnAlias& a = slots_[alias].alias;
        client = a.client;
        client_port = a.client_port;
        vip = a.vip;
        vip_port = a.vip_port;
    }

    // A syn_proxy connection's sequence shift (or, while pending, the cookie), kept on its alias.
    void set_seq_shift(int32_t alias, uint32_t shift) { slots_[alias].alias.seq_shift = shift; }
    uint32_t seq_shift(int32_t alias) const { return slots_[alias].alias.seq_shift; }
    // ... and, while pending, the client's receive window (for the ACK that completes the backend's handshake).
    void set_pending_window(int32_t alias, uint16_t window) { slots_[alias].alias.pending_window = window; }
    uint16_t pending_window(int32_t alias) const { return slots_[alias].alias.pending_window; }

    // The canonical key stored for an index (a lookup in rte_hash's key store; not for every packet).
    bool key_at(int32_t index, FiveTuple& key) const;
    // The canonical key of a live entry (flag kConnFlagLive), read straight from rte_hash's key store: no verifying
    // lookup, so a walk over every slot costs two sequential reads per slot, not a hash and a bucket read more.
    void live_key(int32_t index, FiveTuple& key) const;
    // Where live_key reads index's key: to prefetch it.
    const void* key_address(int32_t index) const;

    ConnEntry& entry(int32_t index) { return slots_[index].entry; }
    const ConnEntry& entry(int32_t index) const { return slots_[index].entry; }
    // Where index's slot starts: to prefetch it (entry and window share the line).
    const void* slot_address(int32_t index) const { return &slots_[index]; }

    // A TCP connection's sequence and window tracking (tcp_window.hpp), in the second half of the entry's cache line:
    // read and written only for TCP packets. The opener of a TCP connection sets it (a slot's previous connection
    // or alias leaves its bytes behind).
    TcpWindow& window(int32_t index) { return slots_[index].window; }
    const TcpWindow& window(int32_t index) const { return slots_[index].window; }

    // Expiry runs on a coarse clock: the TSC shifted right by a shift chosen at construction, so that an entry's
    // expiry fits 32 bits. Its half range (2^31 ticks) spans at least a day and twice the longest timeout: an entry
    // is compared with the clock modulo 2^32, and expiry's sweep reaches every slot far sooner than that.
    uint32_t tick(uint64_t tsc) const { return static_cast<uint32_t>(tsc >> tick_shift_); }
    unsigned tick_shift() const { return tick_shift_; }
    // True when connection entry e is past its expiry at now_tsc.
    bool expired(const ConnEntry& e, uint64_t now_tsc) const { return expired_at(e, tick(now_tsc)); }
    // The same at now_tick = tick(now_tsc), which a burst computes once for all its packets.
    static bool expired_at(const ConnEntry& e, uint32_t now_tick) {
        return static_cast<int32_t>(e.expires - now_tick) <= 0;
    }
    // TSC cycles connection entry e has left to live at now_tsc, 0 when it is expired (to a tick's precision).
    uint64_t lifetime_tsc(const ConnEntry& e, uint64_t now_tsc) const {
        const auto left = static_cast<int32_t>(e.expires - tick(now_tsc));
        return left > 0 ? uint64_t{static_cast<uint32_t>(left)} << tick_shift_ : 0;
    }
    // Makes connection entry e expire lifetime_tsc cycles after now_tsc (rounded up to a tick; capped at the longest
    // lifetime the clock can tell, 2^31 - 1 ticks, should a peer's sync event ask for more).
    void set_lifetime(ConnEntry& e, uint64_t now_tsc, uint64_t lifetime_tsc) const {
        e.expires = tick(now_tsc) + ticks_of(lifetime_tsc);
    }
    // The rule index an entry stores for a stable rule id (kConnRuleNotCounted for the default and any id past it).
    static uint32_t stored_rule(uint32_t rule_index) {
        return rule_index < kConnRuleNotCounted ? rule_index : kConnRuleNotCounted;
    }

    // True when tuple travels from the responder to the initiator of connection index.
    bool is_reply(int32_t index, const FiveTuple& tuple) const { return is_reply_from(index, source_is_low(tuple)); }
    // The same from source_is_low(tuple), as lookup_bulk gives it.
    bool is_reply_from(int32_t index, bool source_low) const {
        return source_low != (slots_[index].entry.initiator_is_low != 0);
    }

    // Advances the state machine for one packet of connection index (tcp_flags: the TCP header's flag byte, 0 for
    // other protocols), counts it (packets only: per-connection byte counts are not kept), and pushes the expiry out by
    // the new state's timeout. invalid: the packet makes no sense in this state (e.g. a SYN on an established
    // connection from the wrong side); the caller drops it. An invalid packet is not counted and changes nothing. A few
    // TCP packets are let through without a state change or a new expiry (nf_conntrack's "ignore": a retransmitted
    // SYN+ACK on an established connection).
    TrackVerdict track(int32_t index, const FiveTuple& tuple, uint8_t tcp_flags, uint64_t now_tsc) {
        return track_direction(index, is_reply(index, tuple), tcp_flags, now_tsc);
    }
    // The same with the direction known (reply: from the responder). Inline for most packets: a segment with ACK
    // alone (PSH, URG, ECE, CWR aside) on an established connection, one-way or not, or a datagram of a UDP flow
    // with replies. Neither the state table nor the one-way rules move the state, and established carries no
    // sub-state bits (every move into it writes 0), so there are none to clear here.
    TrackVerdict track_direction(int32_t index, bool reply, uint8_t tcp_flags, uint64_t now_tsc) {
        return track_direction(index, reply, tcp_flags, now_tsc, tick(now_tsc));
    }
    // The same with now_tick = tick(now_tsc) computed once for a burst.
    TrackVerdict track_direction(int32_t index, bool reply, uint8_t tcp_flags, uint64_t now_tsc, uint32_t now_tick) {
        ConnEntry& e = slots_[index].entry;
        const bool steady = (e.state == ConnState::tcp_established &&
                             (tcp_flags & (tcp::kFin | tcp::kSyn | tcp::kRst | tcp::kAck)) == tcp::kAck) ||
                            e.state == ConnState::udp_replied;
        if (SLUICE_UNLIKELY(!steady)) return track_moving(index, reply, tcp_flags, now_tsc);
        e.packets[reply] += 1;
        e.expires = now_tick + timeout_ticks_[static_cast<std::size_t>(e.state)];
        return TrackVerdict::ok;
    }

    // The state a connection starts in, for its first packet; invalid when that packet cannot open one (a TCP
    // packet without SYN, or with SYN+ACK/RST/FIN) unless loose_pickup (then mid-stream TCP opens as established).
    static TrackVerdict initial_state(const FiveTuple& tuple, uint8_t tcp_flags, bool loose_pickup, ConnState& state);

    // Removes up to `budget` expired entries, scanning at most 4 x budget slots from where the previous call
    // stopped (a bounded amount of work per poll iteration, never a full-table scan). Returns how many it removed.
    uint32_t expire(uint64_t now_tsc, uint32_t budget);

    // Removes one connection now (e.g. after a TCP RST), with its alias; an alias index removes its connection.
    // A free index is left alone.
    void remove(int32_t index);

    // Entries in use: connections plus NAT aliases (a NAT connection takes two of the capacity), of both families.
    uint32_t size() const { return size_; }
    // Every index an entry can have is below this: a walk over the table goes 0 .. slot_count() - 1.
    uint32_t slot_count() const { return slot_count_; }
    uint32_t capacity() const { return capacity_; }
    uint32_t ipv6_capacity() const { return ipv6_capacity_; }
    // IPv6 entries in use (connections and their aliases). Any thread may read it (metrics): the owning worker
    // writes it with relaxed atomic stores, like the per-lcore counters.
    uint32_t ipv6_size() const { return std::atomic_ref<const uint32_t>(ipv6_size_).load(std::memory_order_relaxed); }
    const ConnTimeouts& timeouts() const { return timeouts_; }

private:
    // track_direction for the packets that may move the state (the state table, the one-way rules).
    TrackVerdict track_moving(int32_t index, bool reply, uint8_t tcp_flags, uint64_t now_tsc);
    // Adds tuple's canonical key to its family's table: its index (a tuple already there gets its own back), or -1
    // when the table (or its family's share) is full. Counts nothing: count_added() does, for a new entry.
    int32_t add_key(const FiveTuple& tuple, uint32_t hash, bool& low_is_source);
    void count_added(int32_t index);
    void add_ipv6_size(int32_t delta) {
        std::atomic_ref<uint32_t>(ipv6_size_)
            .store(ipv6_size_ + static_cast<uint32_t>(delta), std::memory_order_relaxed);
    }
    void remove_key(int32_t index);
    uint32_t ticks_of(uint64_t tsc) const {
        const uint64_t ticks = (tsc + (uint64_t{1} << tick_shift_) - 1) >> tick_shift_;
        return ticks < kMaxLifetimeTicks ? static_cast<uint32_t>(ticks) : kMaxLifetimeTicks;
    }
    static constexpr uint32_t kMaxLifetimeTicks = INT32_MAX;

    // rte_hash keeps its keys in one array: its start and stride, measured at construction (locate_key_store).
    struct KeyStore {
        const char* base = nullptr;
        std::size_t stride = 0;
    };

    rte_hash* ipv4_ = nullptr;  // 16-byte keys (Ipv4Key in the .cpp); positions 0 .. ipv4_slots_ - 1
    rte_hash* ipv6_ = nullptr;  // 40-byte keys (FiveTuple); positions ipv4_slots_ .. slot_count_ - 1
    ReleaseHook release_hook_ = nullptr;
    void* release_arg_ = nullptr;
    ExpiryHook expiry_hook_ = nullptr;
    void* expiry_arg_ = nullptr;
    KeyStore ipv4_keys_, ipv6_keys_;
    ConnSlot* slots_ = nullptr;
    uint32_t capacity_ = 0;
    uint32_t ipv6_capacity_ = 0;
    uint32_t ipv4_slots_ = 0;  // every position the IPv4 table can return is below it
    uint32_t slot_count_ = 0;  // slots_ length: ipv4_slots_ plus the IPv6 table's positions
    uint32_t size_ = 0;
    uint32_t ipv6_size_ = 0;  // IPv6 entries among size_ (written through add_ipv6_size: metrics read it)
    uint32_t aliases_ = 0;    // NAT aliases among size_ (none: lookup_bulk skips prefetching their peers)
    uint32_t expire_cursor_ = 0;
    uint64_t tsc_hz_ = 0;
    unsigned tick_shift_ = 0;
    uint32_t timeout_ticks_[static_cast<std::size_t>(ConnState::count)] = {};
    ConnTimeouts timeouts_;
};

// Writes every byte of key: the canonical key of a tuple, endpoints ordered as symmetric_flow_hash orders them, so
// both directions of a connection give the same key (same bytes: IPv4 keeps only the first address word, padding
// is zero) and symmetric_flow_hash(key) == symmetric_flow_hash(tuple). low_is_source tells whether tuple's source
// is the lower endpoint. Written in place: a key returned by value was copied at once by loads that had to wait for
// its stores (most of lookup_bulk's own time). key must not be tuple itself. Pure; fast-path safe.
void canonical_key(const FiveTuple& tuple, FiveTuple& key, bool& low_is_source);

}  // namespace sluice

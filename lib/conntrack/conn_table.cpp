#include "conntrack/conn_table.hpp"

#include <algorithm>
#include <bit>
#include <cassert>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <tuple>
#include <utility>

#include <rte_common.h>
#include <rte_errno.h>
#include <rte_hash.h>
#include <rte_malloc.h>
#include <rte_prefetch.h>

#include "common/ip_proto.hpp"
#include "conntrack/tcp_state.hpp"

namespace sluice {
namespace {

constexpr const char* kStateNames[] = {
    "tcp_syn_sent",  "tcp_syn_recv", "tcp_established", "tcp_fin_wait", "tcp_close_wait", "tcp_last_ack",
    "tcp_time_wait", "tcp_close",    "udp_unreplied",   "udp_replied",  "icmp",           "other",
};
static_assert(std::size(kStateNames) == static_cast<std::size_t>(ConnState::count));

// rte_hash refuses fewer entries than one bucket holds (RTE_HASH_BUCKET_ENTRIES, private to rte_cuckoo_hash.h).
constexpr uint32_t kMinHashEntries = 8;
// Above this share of the bucket slots (rte_align32pow2(entries)), plain cuckoo hashing may fail an insert
// before the table is full: over 98 random fills of 2^10..2^20 slots the first failure came at 97.6% to 99.9%
// load, and 5 M delete+insert operations at 95.4% load (1,000,000 in 2^20 slots) never failed. Above it the
// table asks for rte_hash's extendable buckets, which cost 9 B per connection but always fit.
constexpr uint32_t kPlainCuckooLoadPercent = 96;

// The last 8 bytes of both families' keys: the ports in key order, protocol, family and a zero reserved field, as
// FiveTuple lays them out. Written with one store (store_as_one_word): rte_hash reads keys in words at once.
struct KeyTail {
    uint16_t low_port, high_port;
    uint8_t proto;
    IpFamily family;
    uint16_t reserved;
};
static_assert(sizeof(KeyTail) == 8 && offsetof(FiveTuple, src_port) == 32 && offsetof(FiveTuple, dst_port) == 34 &&
              offsetof(FiveTuple, proto) == 36 && offsetof(FiveTuple, family) == 37 &&
              offsetof(FiveTuple, reserved) == 38);

// The IPv4 table's key: canonical_key's fields without the 24 zero bytes of the two IPv4 addresses.
struct Ipv4Key {
    uint32_t low, high;  // the endpoints' addresses in key order, network byte order
    KeyTail tail;
};
static_assert(sizeof(Ipv4Key) == 16 && offsetof(Ipv4Key, tail) == 8);

// The same as canonical_key for an IPv4 tuple, with two 8-byte stores (rte_hash reads the key in words at once).
void canonical_ipv4_key(const FiveTuple& t, Ipv4Key& key, bool& low_is_source) {
    low_is_source = source_is_low(t);
    // Both orders built and one chosen by a mask, not a branch: the order is random from packet to packet (half of
    // them replies), so a branch on it mispredicts half the time (and GCC turns a select of the words into one).
    static_assert(std::endian::native == std::endian::little);  // the words below are laid out as Ipv4Key's fields
    const uint64_t addresses_forward = uint64_t{t.src.words[0]} | uint64_t{t.dst.words[0]} << 32;
    const uint64_t ports_forward = uint64_t{t.src_port} | uint64_t{t.dst_port} << 16;
    const uint64_t ports_reverse = uint64_t{t.dst_port} | uint64_t{t.src_port} << 16;
    const uint64_t rest = uint64_t{t.proto} << 32 | uint64_t{static_cast<uint8_t>(IpFamily::ipv4)} << 40;
    const uint64_t addresses_reverse = std::rotl(addresses_forward, 32);
    const uint64_t keep_forward = 0 - static_cast<uint64_t>(low_is_source);
    auto* out = reinterpret_cast<uint8_t*>(&key);
    store_as_one_word(out, addresses_reverse ^ ((addresses_forward ^ addresses_reverse) & keep_forward));
    store_as_one_word(out + 8, rest | (ports_reverse ^ ((ports_forward ^ ports_reverse) & keep_forward)));
}

// The canonical key (canonical_key's FiveTuple) an IPv4 key stands for.
FiveTuple tuple_of(const Ipv4Key& key) {
    FiveTuple t;
    t.src = IpAddress::from_v4(key.low);
    t.dst = IpAddress::from_v4(key.high);
    t.src_port = key.tail.low_port;
    t.dst_port = key.tail.high_port;
    t.proto = key.tail.proto;
    t.family = IpFamily::ipv4;
    return t;
}

// rte_hash's own hash functions, used by the calls that take no precomputed hash: rte_hash_get_key_with_position()
// re-hashes the stored key to check it. They must agree with the hashes callers pass to the *_with_hash calls, i.e.
// be symmetric_flow_hash; rte_hash_crc over the key bytes would put those lookups in the wrong buckets.
uint32_t ipv4_key_hash(const void* key, uint32_t /*key_len*/, uint32_t /*init_val*/) {
    const auto& k = *static_cast<const Ipv4Key*>(key);
    return ordered_ipv4_flow_hash(k.low, k.high, k.tail.low_port, k.tail.high_port, k.tail.proto);
}
uint32_t ipv6_key_hash(const void* key, uint32_t /*key_len*/, uint32_t /*init_val*/) {
    return symmetric_flow_hash(*static_cast<const FiveTuple*>(key));
}

// One family's table for `entries` keys; nullptr (rte_errno set) when rte_hash cannot make it.
rte_hash* create_family_table(const std::string& name, uint32_t entries, uint32_t key_len, rte_hash_function hash,
                              int socket_id) {
    if (entries < kMinHashEntries) entries = kMinHashEntries;
    const uint64_t bucket_slots = rte_align32pow2(entries);
    const bool extendable = uint64_t{entries} * 100 > bucket_slots * kPlainCuckooLoadPercent;
    rte_hash_parameters params{};
    params.name = name.c_str();
    params.entries = entries;
    params.key_len = key_len;
    params.hash_func = hash;
    params.hash_func_init_val = 0;
    params.socket_id = socket_id;
    // Single owner: no multi-writer (its per-lcore slot caches would also widen the position range), no
    // read-write concurrency flags (they add locks or a table-change counter to every lookup).
    params.extra_flag = extendable ? RTE_HASH_EXTRA_FLAGS_EXT_TABLE : 0;
    // IPv4 keys (16 bytes) are compared by rte_hash's SSE compare; IPv6 keys (40) with memcmp(), as rte_hash has
    // SSE compares for multiples of 16 only. A custom 5 x 8-byte compare through rte_hash_set_cmp_func() measured
    // no better, so the default stays.
    return rte_hash_create(&params);
}

// Where rte_hash's key store starts and how far apart its keys are: from the addresses of two keys added and
// removed again (rte_hash_get_key_with_position points into the store). Throws if the store is not one array.
template <typename Key>
std::pair<const char*, std::size_t> locate_key_store(rte_hash* table, const Key& first, const Key& second) {
    const int32_t a = rte_hash_add_key(table, &first);
    const int32_t b = rte_hash_add_key(table, &second);
    void* at_a = nullptr;
    void* at_b = nullptr;
    const bool found = a >= 0 && b >= 0 && a != b && rte_hash_get_key_with_position(table, a, &at_a) == 0 &&
                       rte_hash_get_key_with_position(table, b, &at_b) == 0;
    if (a >= 0) rte_hash_del_key(table, &first);
    if (b >= 0) rte_hash_del_key(table, &second);
    const std::ptrdiff_t apart = static_cast<const char*>(at_b) - static_cast<const char*>(at_a);
    if (!found || apart % (b - a) != 0 || apart / (b - a) < static_cast<std::ptrdiff_t>(sizeof(Key)))
        throw std::runtime_error("rte_hash's key store is not one array of keys");
    const auto stride = static_cast<std::size_t>(apart / (b - a));
    return {static_cast<const char*>(at_a) - static_cast<std::ptrdiff_t>(stride) * a, stride};
}

inline bool is_tcp_state(ConnState s) { return s <= ConnState::tcp_close; }

// The expiry clock's shift (ConnTable::tick): the smallest for which 2^31 ticks span a day and twice the longest
// timeout. A finer tick only adds precision nobody reads; a coarser one would let an entry that expiry's sweep has
// not reached yet look alive again after half the range.
unsigned tick_shift_for(const ConnTimeouts& timeouts, uint64_t tsc_hz) {
    uint64_t longest = 0;
    for (std::size_t s = 0; s < static_cast<std::size_t>(ConnState::count); ++s)
        longest = std::max<uint64_t>(longest, timeout_seconds(timeouts, static_cast<ConnState>(s)));
    const unsigned __int128 span = static_cast<unsigned __int128>(std::max<uint64_t>(2 * longest, 86400)) * tsc_hz;
    unsigned shift = 0;
    while ((span >> shift) > INT32_MAX) ++shift;
    return shift;
}

}  // namespace

uint32_t timeout_seconds(const ConnTimeouts& t, ConnState s) {
    switch (s) {
    case ConnState::tcp_syn_sent: return t.tcp_syn_sent;
    case ConnState::tcp_syn_recv: return t.tcp_syn_recv;
    case ConnState::tcp_established: return t.tcp_established;
    case ConnState::tcp_fin_wait: return t.tcp_fin_wait;
    case ConnState::tcp_close_wait: return t.tcp_close_wait;
    case ConnState::tcp_last_ack: return t.tcp_last_ack;
    case ConnState::tcp_time_wait: return t.tcp_time_wait;
    case ConnState::tcp_close: return t.tcp_close;
    case ConnState::udp_unreplied: return t.udp_unreplied;
    case ConnState::udp_replied: return t.udp_replied;
    case ConnState::icmp: return t.icmp;
    case ConnState::other: return t.other;
    case ConnState::count: break;
    }
    return 0;
}

const char* conn_state_name(ConnState state) {
    const auto i = static_cast<std::size_t>(state);
    return i < std::size(kStateNames) ? kStateNames[i] : "unknown";
}

void canonical_key(const FiveTuple& tuple, FiveTuple& key, bool& low_is_source) {
    assert(&key != &tuple);                // the stores below would overwrite fields still to be read
    if (tuple.family == IpFamily::ipv4) {  // the IPv4 table's key, spelled as a FiveTuple
        Ipv4Key compact;
        canonical_ipv4_key(tuple, compact, low_is_source);
        key = tuple_of(compact);
        return;
    }
    low_is_source = source_is_low(tuple);
    const FiveTuple& t = tuple;
    const IpAddress& low = low_is_source ? t.src : t.dst;
    const IpAddress& high = low_is_source ? t.dst : t.src;
    const uint16_t low_port = low_is_source ? t.src_port : t.dst_port;
    const uint16_t high_port = low_is_source ? t.dst_port : t.src_port;
    // Five 8-byte stores rather than one per field: rte_hash reads the key in words (on insert, at once).
    auto* out = reinterpret_cast<uint8_t*>(&key);
    const auto store = [out](std::size_t word, uint64_t value) { std::memcpy(out + 8 * word, &value, 8); };
    store(0, low.quads[0]);
    store(1, low.quads[1]);
    store(2, high.quads[0]);
    store(3, high.quads[1]);
    store_as_one_word(out + 32, KeyTail{low_port, high_port, t.proto, t.family, 0});
}

ConnTable::ConnTable(const std::string& name, uint32_t capacity, int socket_id, const ConnTimeouts& timeouts,
                     uint64_t tsc_hz, uint32_t ipv6_capacity)
    : capacity_(capacity), ipv6_capacity_(ipv6_capacity == 0 ? default_ipv6_capacity(capacity) : ipv6_capacity),
      tsc_hz_(tsc_hz), timeouts_(timeouts) {
    if (capacity == 0 || capacity > RTE_HASH_ENTRIES_MAX)
        throw std::runtime_error("conntrack table '" + name + "': capacity " + std::to_string(capacity) +
                                 " is not within 1.." + std::to_string(RTE_HASH_ENTRIES_MAX));
    // Entry indexes are int32_t: both tables' positions together must stay below INT32_MAX.
    if (uint64_t{capacity} + ipv6_capacity_ + 2 > uint64_t{INT32_MAX})
        throw std::runtime_error("conntrack table '" + name + "': capacity " + std::to_string(capacity) +
                                 " plus IPv6 capacity " + std::to_string(ipv6_capacity_) + " is too large");
    if (ipv6_capacity_ > capacity)
        throw std::runtime_error("conntrack table '" + name + "': IPv6 capacity " + std::to_string(ipv6_capacity_) +
                                 " is above the capacity " + std::to_string(capacity));
    if (name.empty() || name.size() > kMaxNameLength)
        throw std::runtime_error("conntrack table '" + name + "': the name must have 1 to " +
                                 std::to_string(kMaxNameLength) + " characters (rte_hash truncates ring names)");

    const auto fail = [&](const std::string& what) {
        rte_free(slots_);
        slots_ = nullptr;
        rte_hash_free(ipv4_);
        rte_hash_free(ipv6_);
        ipv4_ = ipv6_ = nullptr;
        throw std::runtime_error("conntrack table '" + name + "': " + what);
    };
    ipv4_ = create_family_table(name, capacity, sizeof(Ipv4Key), ipv4_key_hash, socket_id);
    if (ipv4_ == nullptr)
        fail("rte_hash_create(" + std::to_string(capacity) + " IPv4 entries) failed: " + rte_strerror(rte_errno));
    ipv6_ = create_family_table(name + "_v6", ipv6_capacity_, sizeof(FiveTuple), ipv6_key_hash, socket_id);
    if (ipv6_ == nullptr)
        fail("rte_hash_create(" + std::to_string(ipv6_capacity_) + " IPv6 entries) failed: " + rte_strerror(rte_errno));

    try {
        Ipv4Key ipv4_first{}, ipv4_second{};
        ipv4_second.tail.low_port = 1;
        std::tie(ipv4_keys_.base, ipv4_keys_.stride) = locate_key_store(ipv4_, ipv4_first, ipv4_second);
        FiveTuple ipv6_first{}, ipv6_second{};
        ipv6_first.family = ipv6_second.family = IpFamily::ipv6;
        ipv6_second.src_port = 1;
        std::tie(ipv6_keys_.base, ipv6_keys_.stride) = locate_key_store(ipv6_, ipv6_first, ipv6_second);
    } catch (const std::exception& e) {
        fail(e.what());
    }

    // Positions are key slot - 1, below rte_hash_max_key_id() (= entries without multi-writer); one spare entry
    // per table because the documentation reads "max key ID that could possibly be returned" as inclusive.
    ipv4_slots_ = static_cast<uint32_t>(rte_hash_max_key_id(ipv4_)) + 1;
    slot_count_ = ipv4_slots_ + static_cast<uint32_t>(rte_hash_max_key_id(ipv6_)) + 1;
    slots_ = static_cast<ConnSlot*>(
        rte_zmalloc_socket("sluice_conntrack", std::size_t{slot_count_} * sizeof(ConnSlot), kCacheLine, socket_id));
    if (slots_ == nullptr)
        fail("cannot allocate " + std::to_string(slot_count_) + " slots of " + std::to_string(sizeof(ConnSlot)) + " B");

    tick_shift_ = tick_shift_for(timeouts_, tsc_hz_);
    for (std::size_t s = 0; s < static_cast<std::size_t>(ConnState::count); ++s)
        timeout_ticks_[s] = ticks_of(uint64_t{timeout_seconds(timeouts_, static_cast<ConnState>(s))} * tsc_hz_);
}

ConnTable::~ConnTable() {
    rte_free(slots_);
    rte_hash_free(ipv4_);
    rte_hash_free(ipv6_);
}

void ConnTable::lookup_bulk(const FiveTuple* const* tuples, const uint32_t* hashes, uint32_t count, int32_t* positions,
                            uint64_t* source_low) const {
    assert(count <= kMaxBurst);
    if (count == 0) return;
    // Raw storage: the keys are all written below, no need to zero them per burst first.
    union Keys {
        Keys() {}
        Ipv4Key ipv4[kMaxBurst];
    } keys4;
    union Keys6 {
        Keys6() {}
        FiveTuple ipv6[kMaxBurst];
    } keys6;
    const void* ptrs4[kMaxBurst];
    const void* ptrs6[kMaxBurst];
    uint32_t at6[kMaxBurst];  // the burst index of each IPv6 key
    uint32_t n4 = 0, n6 = 0;
    uint64_t low_bits = 0;
    for (uint32_t i = 0; i < count; ++i) {
        bool low;
        if (SLUICE_LIKELY(tuples[i]->family == IpFamily::ipv4)) {
            canonical_ipv4_key(*tuples[i], keys4.ipv4[n4], low);
            ptrs4[n4] = &keys4.ipv4[n4];
            ++n4;
        } else {
            canonical_key(*tuples[i], keys6.ipv6[n6], low);  // every byte written (FiveTuple is trivially copyable)
            at6[n6] = i;
            ptrs6[n6] = &keys6.ipv6[n6];
            ++n6;
        }
        low_bits |= uint64_t{low} << i;
    }
    if (source_low) *source_low = low_bits;
    // The sig arrays are only read; the prototype lacks the const.
    auto* sigs = const_cast<hash_sig_t*>(hashes);
    if (SLUICE_LIKELY(n6 == 0)) {
        rte_hash_lookup_with_hash_bulk(ipv4_, ptrs4, sigs, count, positions);
    } else {
        // A burst with IPv6: each family's keys go to its table, the positions back to the burst's order.
        hash_sig_t sigs4[kMaxBurst], sigs6[kMaxBurst];
        int32_t found4[kMaxBurst], found6[kMaxBurst];
        uint32_t k4 = 0, k6 = 0;
        for (uint32_t i = 0; i < count; ++i) {
            if (k6 < n6 && at6[k6] == i) sigs6[k6++] = hashes[i];
            else sigs4[k4++] = hashes[i];
        }
        if (n4 > 0) rte_hash_lookup_with_hash_bulk(ipv4_, ptrs4, sigs4, n4, found4);
        rte_hash_lookup_with_hash_bulk(ipv6_, ptrs6, sigs6, n6, found6);
        k4 = k6 = 0;
        for (uint32_t i = 0; i < count; ++i) {
            if (k6 < n6 && at6[k6] == i) {
                const int32_t p = found6[k6++];
                positions[i] = p < 0 ? p : p + static_cast<int32_t>(ipv4_slots_);
            } else {
                positions[i] = found4[k4++];
            }
        }
    }
    for (uint32_t i = 0; i < count; ++i) {
        if (positions[i] < 0) positions[i] = -1;    // -ENOENT
        else rte_prefetch0(&slots_[positions[i]]);  // track() comes next: overlap the burst's slot misses
    }
    // A NAT reply finds the alias, and track() then needs the connection's own entry: read the aliases' peers in
    // a loop of their own, so that their misses overlap too instead of each following its alias's miss. (A table
    // without aliases skips the loop: it would only wait for the entries earlier.)
    if (aliases_ == 0) return;
    for (uint32_t i = 0; i < count; ++i) {
        if (positions[i] < 0) continue;
        const ConnEntry& e = slots_[positions[i]].entry;
        if (e.flags & kConnFlagAlias) rte_prefetch0(&slots_[e.peer]);
    }
}

int32_t ConnTable::insert(const FiveTuple& tuple, uint32_t hash, ConnState initial, uint32_t rule_index,
                          uint64_t now_tsc) {
    bool low;
    const int32_t pos = add_key(tuple, hash, low);
    if (SLUICE_UNLIKELY(pos < 0)) return -1;
    ConnEntry& e = slots_[pos].entry;
    if (SLUICE_UNLIKELY(e.flags & kConnFlagLive)) return pos;  // already tracked: rte_hash returned its position
    e = ConnEntry{};
    e.peer = kNoPeer;
    e.state = initial;
    e.flags = kConnFlagLive;
    e.in_port = UINT16_MAX;
    e.expires = tick(now_tsc) + timeout_ticks_[static_cast<std::size_t>(initial)];
    e.rule_index = stored_rule(rule_index);
    e.initiator_is_low = low ? 1 : 0;
    count_added(pos);
    return pos;
}

int32_t ConnTable::insert_alias(const FiveTuple& tuple, uint32_t hash, int32_t primary) {
    bool low;
    const int32_t pos = add_key(tuple, hash, low);
    if (SLUICE_UNLIKELY(pos < 0)) return -1;
    ConnSlot& slot = slots_[pos];
    if (SLUICE_UNLIKELY(slot.entry.flags & kConnFlagLive)) return kAliasTaken;
    slot.entry = ConnEntry{};
    slot.alias = ConnAlias{};
    slot.entry.peer = static_cast<uint32_t>(primary);
    slot.entry.flags = kConnFlagLive | kConnFlagAlias;  // expiry skips aliases: they go with their connection
    slots_[primary].entry.peer = static_cast<uint32_t>(pos);
    count_added(pos);
    ++aliases_;
    return pos;
}

int32_t ConnTable::add_key(const FiveTuple& tuple, uint32_t hash, bool& low_is_source) {
    assert(hash == symmetric_flow_hash(tuple));
    if (SLUICE_UNLIKELY(size_ >= capacity_)) return -1;
    int32_t pos;
    if (SLUICE_LIKELY(tuple.family == IpFamily::ipv4)) {
        Ipv4Key key;
        canonical_ipv4_key(tuple, key, low_is_source);
        pos = rte_hash_add_key_with_hash(ipv4_, &key, hash);
    } else {
        if (SLUICE_UNLIKELY(ipv6_size_ >= ipv6_capacity_)) return -1;
        FiveTuple key;
        canonical_key(tuple, key, low_is_source);
        pos = rte_hash_add_key_with_hash(ipv6_, &key, hash);
        if (pos >= 0) pos += static_cast<int32_t>(ipv4_slots_);
    }
    return pos < 0 ? -1 : pos;  // -ENOSPC: no cuckoo path (only without extendable buckets)
}

void ConnTable::count_added(int32_t index) {
    ++size_;
    if (static_cast<uint32_t>(index) >= ipv4_slots_) add_ipv6_size(1);
}

bool ConnTable::key_at(int32_t index, FiveTuple& key) const {
    void* stored = nullptr;
    if (static_cast<uint32_t>(index) < ipv4_slots_) {
        if (rte_hash_get_key_with_position(ipv4_, index, &stored) != 0) return false;
        key = tuple_of(*static_cast<const Ipv4Key*>(stored));
    } else {
        if (rte_hash_get_key_with_position(ipv6_, index - static_cast<int32_t>(ipv4_slots_), &stored) != 0)
            return false;
        std::memcpy(&key, stored, sizeof key);
    }
    return true;
}

const void* ConnTable::key_address(int32_t index) const {
    const auto i = static_cast<uint32_t>(index);
    return i < ipv4_slots_ ? ipv4_keys_.base + ipv4_keys_.stride * i
                           : ipv6_keys_.base + ipv6_keys_.stride * (i - ipv4_slots_);
}

void ConnTable::live_key(int32_t index, FiveTuple& key) const {
    const void* stored = key_address(index);
    if (static_cast<uint32_t>(index) < ipv4_slots_) key = tuple_of(*static_cast<const Ipv4Key*>(stored));
    else std::memcpy(&key, stored, sizeof key);
}

TrackVerdict ConnTable::track_moving(int32_t index, bool reply, uint8_t tcp_flags, uint64_t now_tsc) {
    ConnEntry& e = slots_[index].entry;
    bool refresh = true;
    if (SLUICE_UNLIKELY(e.flags & kConnFlagOneWay) && is_tcp_state(e.state)) {
        if (tcp_flags & tcp::kRst) e.state = ConnState::tcp_close;
        else if (tcp_flags & tcp::kSyn) e.state = e.state == ConnState::tcp_close ? ConnState::tcp_syn_sent : e.state;
        else if (tcp_flags & tcp::kFin) e.state = ConnState::tcp_fin_wait;
        else if (e.state == ConnState::tcp_syn_sent) e.state = ConnState::tcp_established;
    } else if (is_tcp_state(e.state)) {
        const tcp::Transition t = tcp::step(e.state, e.flags, reply, tcp::classify(tcp_flags));
        if (t.step == tcp::Step::invalid) return TrackVerdict::invalid;
        if (t.step == tcp::Step::advance) {
            e.state = t.state;
            e.flags = static_cast<uint8_t>((e.flags & ~tcp::kSubStateFlags) | t.flags);
        } else {
            refresh = false;
        }
    } else if (e.state == ConnState::udp_unreplied && reply) {
        e.state = ConnState::udp_replied;
    }
    e.packets[reply] += 1;
    if (refresh) e.expires = tick(now_tsc) + timeout_ticks_[static_cast<std::size_t>(e.state)];
    return TrackVerdict::ok;
}

TrackVerdict ConnTable::initial_state(const FiveTuple& tuple, uint8_t tcp_flags, bool loose_pickup, ConnState& state) {
    switch (tuple.proto) {
    case kIpProtoTcp:
        switch (tcp::classify(tcp_flags)) {
        case tcp::Kind::syn: state = ConnState::tcp_syn_sent; return TrackVerdict::ok;
        case tcp::Kind::ack:
            // Mid-stream pickup (nf_conntrack_tcp_loose): the first packet seen is the sender's, so the sender
            // becomes the initiator. FIN, RST and SYN+ACK never open a connection.
            if (!loose_pickup) return TrackVerdict::invalid;
            state = ConnState::tcp_established;
            return TrackVerdict::ok;
        default: return TrackVerdict::invalid;
        }
    case kIpProtoUdp: state = ConnState::udp_unreplied; return TrackVerdict::ok;
    case kIpProtoIcmp:
    case kIpProtoIcmpv6: state = ConnState::icmp; return TrackVerdict::ok;
    default: state = ConnState::other; return TrackVerdict::ok;
    }
}

uint32_t ConnTable::expire(uint64_t now_tsc, uint32_t budget) {
    if (budget == 0 || size_ == 0) return 0;
    // Scans the slot array rather than rte_hash_iterate(): iterate skips empty bucket slots in an unbounded
    // loop (a nearly empty 1M table costs a full bucket scan per call), and deleting while it walks can move a
    // key from an extendable bucket behind the cursor. The array is walked in order, so the prefetcher keeps up.
    uint64_t scan = uint64_t{budget} * 4;
    if (scan > slot_count_) scan = slot_count_;
    uint32_t cursor = expire_cursor_;
    uint32_t removed = 0;
    for (; scan > 0 && removed < budget; --scan) {
        const ConnEntry& e = slots_[cursor].entry;
        // An alias has no expiry of its own (ConnAlias lies over it): it goes with its connection.
        if ((e.flags & (kConnFlagLive | kConnFlagAlias)) == kConnFlagLive && expired(e, now_tsc)) {
            if (expiry_hook_) expiry_hook_(expiry_arg_, *this, static_cast<int32_t>(cursor), now_tsc);
            remove(static_cast<int32_t>(cursor));
            ++removed;
        }
        if (++cursor == slot_count_) cursor = 0;
    }
    expire_cursor_ = cursor;
    // The next call goes on from the cursor, one poll later: start its lines now. Each call reads too few of them
    // for the hardware prefetcher to keep ahead, so every slot read would be a miss.
    for (uint64_t ahead = std::min<uint64_t>(uint64_t{budget} * 4, slot_count_); ahead > 0; --ahead) {
        rte_prefetch0(&slots_[cursor]);
        if (++cursor == slot_count_) cursor = 0;
    }
    return removed;
}

void ConnTable::remove(int32_t index) {
    ConnEntry& e = slots_[index].entry;
    if (!(e.flags & kConnFlagLive)) return;
    if (e.flags & kConnFlagAlias) {
        remove(static_cast<int32_t>(e.peer));
        return;
    }
    if (e.peer != kNoPeer) remove_key(static_cast<int32_t>(e.peer));
    if ((e.nat_port != 0 || e.backend != 0) && release_hook_) release_hook_(release_arg_, e);
    remove_key(index);
}

void ConnTable::remove_key(int32_t index) {
    ConnEntry& e = slots_[index].entry;
    const bool ipv6 = static_cast<uint32_t>(index) >= ipv4_slots_;
    rte_hash* table = ipv6 ? ipv6_ : ipv4_;
    const int32_t position = ipv6 ? index - static_cast<int32_t>(ipv4_slots_) : index;
    void* key = nullptr;
    // The key lives in rte_hash's key store; this call checks it is still there (a lookup through the key hash).
    const int found = rte_hash_get_key_with_position(table, position, &key);
    assert(found == 0);
    if (SLUICE_LIKELY(found == 0)) {
        const uint32_t hash = ipv6 ? ipv6_key_hash(key, 0, 0) : ipv4_key_hash(key, 0, 0);
        [[maybe_unused]] const int32_t deleted = rte_hash_del_key_with_hash(table, key, hash);
        assert(deleted == position);
    }
    if (e.flags & kConnFlagAlias) --aliases_;
    if (ipv6) add_ipv6_size(-1);
    e.flags = 0;
    --size_;
}

}  // namespace sluice

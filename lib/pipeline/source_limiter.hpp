// The token buckets of one `per: source` rate-limited rule on one lcore: a bucket per sender (an IPv4 address, an IPv6
// /64: sender_of), in an rte_hash keyed by it (a keyed hash: senders choose their sources, and must not aim
// collisions). A source is forgotten once its bucket would be full again, which changes nothing (a new source starts
// full); the least recently used go first (an AgeList), up to kExpirePerInsert at each new source. At most kCapacity
// sources (the rte_hash has an eighth more room, so its cuckoo search does not fail short of that): when the table has
// no room, a new source is judged on the rule's overflow bucket, one source's rate shared by every source the table
// could not take (counted: rate_limit_overflow). So a source's own bucket is never reset by another's, whatever the
// number of sources; one refused room and given it later may have had tokens of the overflow bucket as well: at most
// its limit twice over, and all the overflow sources together at most one source's. Built by the control thread with
// the snapshot (one per lcore slot and rule); used by that lcore only. Fast-path safe: no allocation, lock or syscall
// after construction.
#pragma once

#include <cstdint>
#include <string>

#include <rte_hash.h>

#include "common/age_list.hpp"
#include "common/five_tuple.hpp"
#include "pipeline/token_bucket.hpp"

namespace sluice {

class SourceLimiter {
public:
    static constexpr uint32_t kCapacity = 65536;  // sources per rule and lcore: about 5 MB
    static constexpr uint32_t kTableEntries = kCapacity + kCapacity / 8;
    static constexpr uint32_t kExpirePerInsert = 2;

    // limit: the rule's, per worker. Throws std::runtime_error when the table cannot be made.
    SourceLimiter(const std::string& name, int socket, const RateLimit& limit);
    ~SourceLimiter();
    SourceLimiter(const SourceLimiter&) = delete;
    SourceLimiter& operator=(const SourceLimiter&) = delete;

    // Takes a token from the bucket of source's sender; false when it has none. overflowed: the table had no room for a
    // new source, and the token came (or did not) from the overflow bucket.
    bool take(const IpAddress& source, IpFamily family, uint64_t now_tsc, bool& overflowed);
    uint32_t sources() const;  // tracked now

private:
    struct Key {
        IpAddress address;  // sender_of: an IPv4 address in its first 4 bytes, an IPv6 /64 in its first 8; the rest 0
        uint32_t family;
        uint32_t zero;  // compared as bytes
    };
    static_assert(sizeof(Key) == 24, "no padding: rte_hash compares keys as bytes");
    static uint32_t key_hash(const void* key, uint32_t length, uint32_t seed);  // an rte_hash_function

    void expire(uint64_t now_tsc);

    rte_hash* table_ = nullptr;
    TokenBucket* buckets_ = nullptr;  // by rte_hash position
    AgeList ages_{kTableEntries};
    uint32_t sources_ = 0;
    RateLimit limit_;
    TokenBucket overflow_;
};

}  // namespace sluice

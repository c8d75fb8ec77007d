// Fragments under connection tracking: shallow virtual reassembly on the RX lcore, as VPP's sv-reass does. Nothing
// is buffered or reassembled; the first fragment of a datagram (which holds the L4 header) teaches the lcore the
// datagram's ports, and every fragment then carries them (PacketMeta::fragment_*_port) and hashes on the full
// five-tuple, so it reaches its connection's worker and is judged as part of that connection.
// Policy (docs/security.md):
// - a first fragment whose L4 header is cut (RFC 1858 tiny fragment): dropped, fragment_invalid;
// - a later TCP fragment that starts inside the TCP header (offset < 20 bytes, the overlap attack): fragment_invalid;
// - a later fragment whose first fragment this lcore has not seen (lost, not yet arrived, or over 2 s ago):
//   fragment_unmatched. Senders send the first fragment first; reordered datagrams are lost, not misjudged;
// - a second first fragment of a pending datagram: fragment_duplicate (the first one's ports and steering stay);
// - a datagram from a source with kPerSourceLimit pending already: fragment_source_limit. A source is an IPv4
//   address or an IPv6 /64 (one host's share), counted in two keyed count-min rows of kSourceSlots counters. A
//   source is refused only when both its counters are full: a few flooding sources block another only if they
//   share both of its counters (about (flooders / kSourceSlots)^2);
// - a datagram more than kCapacity pending at once: fragment_table_full.
// An IPv6 atomic fragment (offset 0, no more fragments: RFC 6946) is a whole datagram: it carries its own ports and
// is never recorded. Datagrams expire oldest first (an AgeList): every first fragment expires up to
// kExpirePerInsert of them before it takes a slot, and every poll up to kExpirePerPoll, so entries past their
// lifetime never hold room that arrivals need.
// One tracker per RX lcore (all fragments of a datagram share its addresses, so RSS puts them on one queue).
// Fast-path safe: no allocation, lock or syscall after construction.
#pragma once

#include <cstdint>
#include <string>

#include <rte_hash.h>
#include <rte_mbuf.h>

#include "common/age_list.hpp"
#include "common/drop_reason.hpp"
#include "common/five_tuple.hpp"

namespace sluice {

class FragmentTracker {
public:
    static constexpr uint32_t kCapacity = 4096;  // datagrams in flight per RX lcore
    static constexpr uint32_t kLifetimeMs = 2000;
    static constexpr uint32_t kPerSourceLimit = 64;  // datagrams pending per source (IPv4 address, IPv6 /64)
    static constexpr uint32_t kSourceSlots = 4096;   // counters per count-min row
    static constexpr uint32_t kExpirePerInsert = 2;
    static constexpr uint32_t kExpirePerPoll = 4;

    FragmentTracker(const std::string& name, int socket, uint64_t tsc_hz);  // throws std::runtime_error
    ~FragmentTracker();
    FragmentTracker(const FragmentTracker&) = delete;
    FragmentTracker& operator=(const FragmentTracker&) = delete;

    // For a frame parse_frame accepted with kMetaFragment: gives it its datagram's ports and flow hash, or names
    // the reason to drop it.
    DropReason annotate(rte_mbuf* m, uint64_t now_tsc);
    // Forgets a few datagrams whose last fragment never came; called every poll.
    void sweep(uint64_t now_tsc) { expire(now_tsc, kExpirePerPoll); }
    uint32_t pending() const;  // datagrams recorded now

private:
    struct Key {
        IpAddress src;
        IpAddress dst;
        uint32_t id;
        uint8_t proto;
        IpFamily family;
        uint16_t zero;  // compared as bytes
    };
    static_assert(sizeof(Key) == 40, "no padding: rte_hash compares keys as bytes");
    static uint32_t key_hash(const void* key, uint32_t length, uint32_t seed);  // an rte_hash_function
    struct Record {
        uint16_t src_port;
        uint16_t dst_port;
        uint16_t source_slot[2];  // the source's counter in each count-min row
        uint64_t expires_tsc;
    };
    static_assert(kSourceSlots <= UINT16_MAX + 1u && kPerSourceLimit <= UINT16_MAX);

    void source_slots(const Key& key, uint16_t (&slots)[2]) const;
    // Records a first fragment's datagram, or names why not.
    DropReason record(const Key& key, uint16_t src_port, uint16_t dst_port, uint64_t now_tsc);
    void remove(int32_t position, const void* key);
    void expire(uint64_t now_tsc, uint32_t budget);

    rte_hash* table_ = nullptr;
    Record* records_ = nullptr;
    uint16_t (*source_counts_)[kSourceSlots] = nullptr;  // [2][kSourceSlots]: datagrams pending per source slot
    AgeList ages_{kCapacity};
    uint64_t lifetime_tsc_;
};

}  // namespace sluice

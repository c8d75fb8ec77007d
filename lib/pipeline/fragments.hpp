// Fragments under connection tracking: shallow virtual reassembly on the RX lcore, as VPP's sv-reass does. Nothing
// is buffered or reassembled; the first fragment of a datagram (which holds the L4 header) teaches the lcore the
// datagram's ports, and every fragment then carries them (PacketMeta::fragment_*_port) and hashes on the full
// five-tuple, so it reaches its connection's worker and is judged as part of that connection.
// Policy (docs/security.md):
// - a first fragment whose L4 header is cut (RFC 1858 tiny fragment): dropped, fragment_invalid;
// - a later TCP fragment that starts inside the TCP header (offset < 20 bytes, the overlap attack): fragment_invalid;
// - a later fragment whose first fragment this lcore has not seen (lost, not yet arrived, or over 2 s ago):
//   fragment_unmatched. Senders send the first fragment first; reordered datagrams are lost, not misjudged;
// - a datagram more than kCapacity pending at once: fragment_table_full.
// One tracker per RX lcore (all fragments of a datagram share its addresses, so RSS puts them on one queue).
// Fast-path safe: no allocation, lock or syscall after construction.
#pragma once

#include <cstdint>
#include <string>

#include <rte_hash.h>
#include <rte_mbuf.h>

#include "common/drop_reason.hpp"
#include "common/five_tuple.hpp"

namespace sluice {

class FragmentTracker {
public:
    static constexpr uint32_t kCapacity = 4096;  // datagrams in flight per RX lcore
    static constexpr uint32_t kLifetimeMs = 2000;

    FragmentTracker(const std::string& name, int socket, uint64_t tsc_hz);  // throws std::runtime_error
    ~FragmentTracker();
    FragmentTracker(const FragmentTracker&) = delete;
    FragmentTracker& operator=(const FragmentTracker&) = delete;

    // For a frame parse_frame accepted with kMetaFragment: gives it its datagram's ports and flow hash, or names
    // the reason to drop it.
    DropReason annotate(rte_mbuf* m, uint64_t now_tsc);
    // Forgets a few datagrams whose last fragment never came (at most once a millisecond); called every poll.
    void sweep(uint64_t now_tsc);

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
        uint64_t expires_tsc;
    };

    rte_hash* table_ = nullptr;
    Record* records_ = nullptr;
    uint64_t lifetime_tsc_;
    uint32_t sweep_cursor_ = 0;
    uint64_t next_sweep_tsc_ = 0;
};

}  // namespace sluice

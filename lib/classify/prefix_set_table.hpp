// A set of prefixes of one family, read-only, answering "is this address in the set?" (the early-drop sets).
//
// A multibit trie: a root of 65,536 slots indexed by the address's first 16 bits, then nodes of 8 bits. A node's
// 256 slots are two bitmaps (the slot is listed; the slot has a child) and the index of its first child, its
// children stored together, so a child is found by counting the child bits before its slot (the layout of
// poptrie, Asai and Ohara, SIGCOMM 2015, without its leaf compression). A node takes 72 bytes where a DIR-24-8 or
// rte_lpm6 group of 256 next hops takes 1 KiB, and only a set's answer (listed or not) is kept, never a next hop.
//
// Built on the control thread (build), read by any lcore (contains: fast-path safe, no writes); memory from the
// DPDK heap on the given socket. Not copyable; freed by its owner once no lcore reads it (after QSBR).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "classify/rule.hpp"

namespace sluice {

class PrefixSetTable {
public:
    struct Node {
        uint32_t first_child;  // index in the node array of the child of the lowest child slot
        uint8_t below[4];      // child slots before each quarter of 64 slots
        uint64_t listed[4];
        uint64_t child[4];
    };
    static_assert(sizeof(Node) == 72);

    // prefixes: one family's, in address order (bytes in network order), none covering another
    // (control/blocklist_builder.hpp sort_distinct and drop_covered). Throws std::runtime_error when the DPDK heap
    // has not the room.
    static std::unique_ptr<PrefixSetTable> build(IpFamily family, const std::vector<Prefix>& prefixes, int socket);

    PrefixSetTable(const PrefixSetTable&) = delete;
    PrefixSetTable& operator=(const PrefixSetTable&) = delete;
    ~PrefixSetTable();

    // address: 4 (IPv4) or 16 (IPv6) bytes in network order.
    bool contains(const uint8_t* address) const {
        uint32_t slot = root_[static_cast<unsigned>(address[0]) << 8 | address[1]];
        if (slot < kFirstNode) return slot == kListed;
        const Node* node = &nodes_[slot - kFirstNode];
        for (unsigned i = 2;; ++i) {
            const unsigned quarter = address[i] >> 6;
            const uint64_t bit = uint64_t{1} << (address[i] & 63);
            if (node->listed[quarter] & bit) return true;
            if (!(node->child[quarter] & bit)) return false;  // never set on the last byte
            node = &nodes_[node->first_child + node->below[quarter] + std::popcount(node->child[quarter] & (bit - 1))];
        }
    }

    IpFamily family() const { return width_ == 4 ? IpFamily::ipv4 : IpFamily::ipv6; }
    std::size_t node_count() const { return node_count_; }
    std::size_t bytes() const { return kRootSlots * sizeof(uint32_t) + node_count_ * sizeof(Node); }

    static constexpr std::size_t kRootSlots = 1u << 16;

private:
    static constexpr uint32_t kListed = 1;     // a root slot: 0 not listed, 1 listed,
    static constexpr uint32_t kFirstNode = 2;  // else kFirstNode + the index of its node

    PrefixSetTable() = default;

    unsigned width_ = 4;  // address bytes
    uint32_t* root_ = nullptr;
    Node* nodes_ = nullptr;
    std::size_t node_count_ = 0;
};

}  // namespace sluice

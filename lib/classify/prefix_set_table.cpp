#include "classify/prefix_set_table.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <stdexcept>
#include <string>

#include <rte_common.h>
#include <rte_malloc.h>

namespace sluice {
namespace {

// The node array while it grows; copied into the DPDK heap once whole.
class TrieBuilder {
public:
    explicit TrieBuilder(const std::vector<Prefix>& prefixes) : prefixes_(prefixes) {}

    std::vector<uint32_t> root(uint32_t listed, uint32_t first_node) {
        std::vector<uint32_t> slots(PrefixSetTable::kRootSlots, 0);
        for (std::size_t i = 0; i < prefixes_.size();) {
            const Prefix& p = prefixes_[i];
            const uint32_t slot = static_cast<uint32_t>(p.address.bytes[0]) << 8 | p.address.bytes[1];
            if (p.length <= 16) {
                std::fill_n(slots.begin() + slot, std::size_t{1} << (16 - p.length), listed);
                ++i;
                continue;
            }
            const std::size_t end = run_end(i, 0, 16);
            const std::size_t index = allocate(1);
            fill(index, i, end, 2);
            slots[slot] = first_node + static_cast<uint32_t>(index);
            i = end;
        }
        return slots;
    }

    std::vector<PrefixSetTable::Node>& nodes() { return nodes_; }

private:
    // The end of the run of prefixes from `from` that share their first `bytes` bytes and the next `bits` bits.
    std::size_t run_end(std::size_t from, unsigned bytes, unsigned bits) const {
        const uint8_t* first = prefixes_[from].address.bytes;
        std::size_t end = from + 1;
        while (end < prefixes_.size() && std::memcmp(prefixes_[end].address.bytes, first, bytes + bits / 8) == 0) ++end;
        return end;
    }

    std::size_t allocate(std::size_t count) {
        const std::size_t first = nodes_.size();
        nodes_.resize(first + count, PrefixSetTable::Node{});
        return first;
    }

    // Node `index` for the prefixes [begin, end), which share their first `depth` bytes and are all longer.
    void fill(std::size_t index, std::size_t begin, std::size_t end, unsigned depth) {
        struct Child {
            unsigned slot;
            std::size_t begin, end;
        };
        std::vector<Child> children;
        PrefixSetTable::Node node{};
        for (std::size_t i = begin; i < end;) {
            const Prefix& p = prefixes_[i];
            const unsigned slot = p.address.bytes[depth];
            if (p.length <= 8 * (depth + 1)) {  // ends in this node: its slots are listed
                const unsigned span = 1u << (8 * (depth + 1) - p.length);
                for (unsigned s = slot; s < slot + span; ++s) node.listed[s >> 6] |= uint64_t{1} << (s & 63);
                ++i;
                continue;
            }
            // None ends in this slot: a prefix that did would cover the run, and no prefix covers another.
            const std::size_t run = run_end(i, depth, 8);
            node.child[slot >> 6] |= uint64_t{1} << (slot & 63);
            children.push_back({slot, i, run});
            i = run;
        }
        for (unsigned q = 1; q < 4; ++q)
            node.below[q] = static_cast<uint8_t>(node.below[q - 1] + std::popcount(node.child[q - 1]));
        node.first_child = static_cast<uint32_t>(allocate(children.size()));
        nodes_[index] = node;
        for (std::size_t c = 0; c < children.size(); ++c)
            fill(node.first_child + c, children[c].begin, children[c].end, depth + 1);
    }

    const std::vector<Prefix>& prefixes_;
    std::vector<PrefixSetTable::Node> nodes_;
};

}  // namespace

std::unique_ptr<PrefixSetTable> PrefixSetTable::build(IpFamily family, const std::vector<Prefix>& prefixes,
                                                      int socket) {
    std::unique_ptr<PrefixSetTable> table(new PrefixSetTable());
    table->width_ = family == IpFamily::ipv4 ? 4 : 16;
    TrieBuilder builder(prefixes);
    const std::vector<uint32_t> root = builder.root(kListed, kFirstNode);
    const std::vector<Node>& nodes = builder.nodes();
    const std::size_t root_bytes = root.size() * sizeof(uint32_t);
    table->root_ = static_cast<uint32_t*>(rte_malloc_socket("sl_prefix_root", root_bytes, RTE_CACHE_LINE_SIZE, socket));
    if (!nodes.empty())
        table->nodes_ = static_cast<Node*>(
            rte_malloc_socket("sl_prefix_nodes", nodes.size() * sizeof(Node), RTE_CACHE_LINE_SIZE, socket));
    if (!table->root_ || (!nodes.empty() && !table->nodes_))
        throw std::runtime_error(std::to_string(prefixes.size()) + " prefixes need " +
                                 std::to_string((root_bytes + nodes.size() * sizeof(Node) + (1u << 20) - 1) >> 20) +
                                 " MiB of DPDK memory on socket " + std::to_string(socket) +
                                 ", which it has not free (hugepages)");
    std::memcpy(table->root_, root.data(), root_bytes);
    if (!nodes.empty()) std::memcpy(table->nodes_, nodes.data(), nodes.size() * sizeof(Node));
    table->node_count_ = nodes.size();
    return table;
}

PrefixSetTable::~PrefixSetTable() {
    rte_free(root_);
    rte_free(nodes_);
}

}  // namespace sluice

#include "nat/nat_ports.hpp"

#include <cstring>

namespace sluice {

NatPortPool::NatPortPool(uint16_t first, uint16_t last, uint16_t worker_index, uint16_t worker_count,
                         std::size_t addresses, uint16_t share_index, uint16_t shares)
    : step_(worker_count), addresses_(addresses), share_index_(share_index), shares_(shares ? shares : 1),
      by_destination_(kMaxNatDestinations, nullptr) {
    first_port_ = first + (worker_index + worker_count - first % worker_count) % worker_count;
    ports_ = first_port_ > last ? 0 : (last - first_port_) / step_ + 1;
    const uint32_t mine = ports_ > share_index_ ? (ports_ - share_index_ + shares_ - 1) / shares_ : 0;
    reserved_ = ports_ - mine;
    words_ = (ports_ + 63) / 64;
    summary_words_ = (words_ + 63) / 64;
    lane_words_ = 2 + summary_words_ + words_;
}

NatPortPool::~NatPortPool() = default;

void NatPortPool::prepare(const std::vector<NatDestination>& destinations) {
    for (const NatDestination& destination : destinations) {
        if (destination.id >= by_destination_.size() || by_destination_[destination.id]) continue;
        std::string key(reinterpret_cast<const char*>(destination.address.bytes), sizeof(destination.address.bytes));
        key += static_cast<char>(destination.family);
        std::unique_ptr<uint64_t[]>& block = spaces_[key];
        if (!block) {
            block = std::make_unique<uint64_t[]>(addresses_ * lane_words_);  // zeroed: every port free
            for (std::size_t a = 0; a < addresses_; ++a) {
                uint64_t* lane = block.get() + a * lane_words_;
                // Bits past the last port (or word) count as taken: a search never stops on them.
                if (ports_ % 64) lane[2 + summary_words_ + words_ - 1] = ~uint64_t{0} << (ports_ % 64);
                if (words_ % 64) lane[2 + summary_words_ - 1] = ~uint64_t{0} << (words_ % 64);
                reserve_other_shares(lane);
            }
        }
        by_destination_[destination.id] = block.get();
    }
}

void NatPortPool::reserve_other_shares(uint64_t* at) const {
    if (shares_ == 1) return;
    const Lane lane{at, at + 1, at + 2, at + 2 + summary_words_};
    for (uint32_t bit = 0; bit < ports_; ++bit)
        if (!in_share(bit)) lane.used[bit / 64] |= uint64_t{1} << (bit % 64);
    for (uint32_t word = 0; word < words_; ++word) mark_word(lane, word);
    *lane.in_use = reserved_;
    *lane.cursor = share_index_;  // the first port of the share: the search starts on a free bit
}

uint32_t NatPortPool::free_bit_after_word(const Lane& lane, uint32_t word) const {
    const uint32_t next = word + 1 == words_ ? 0 : word + 1;
    uint32_t summary = next / 64;
    uint64_t open = ~lane.full[summary] & (~uint64_t{0} << (next % 64));
    while (open == 0) {
        summary = summary + 1 == summary_words_ ? 0 : summary + 1;
        open = ~lane.full[summary];
    }
    const uint32_t found = summary * 64 + static_cast<uint32_t>(__builtin_ctzll(open));
    return found * 64 + static_cast<uint32_t>(__builtin_ctzll(~lane.used[found]));
}

std::size_t NatPortPool::in_use(std::size_t address, uint32_t destination) const {
    if (destination >= by_destination_.size() || !by_destination_[destination]) return 0;
    return counter_read(*lane_of(address, destination).in_use) - reserved_;
}

}  // namespace sluice

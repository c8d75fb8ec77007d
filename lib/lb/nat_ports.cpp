#include "lb/nat_ports.hpp"

namespace sluice {

NatPortPool::NatPortPool(uint16_t first, uint16_t last, uint16_t worker_index, uint16_t worker_count,
                         std::size_t addresses) {
    std::vector<uint16_t> mine;
    for (uint32_t p = first; p <= last; ++p)
        if (nat_port_owner(static_cast<uint16_t>(p), worker_count) == worker_index)
            mine.push_back(static_cast<uint16_t>(p));
    queues_.resize(addresses);
    for (Queue& q : queues_) {
        q.ports = mine;
        q.count = mine.size();
    }
}

}  // namespace sluice

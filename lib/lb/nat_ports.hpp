// The source ports one worker hands out on each NAT pool address. A worker owns exactly the ports p with
// p % worker_count == worker_index, so the reply to a NAT connection (backend -> pool address:p) names its owning
// worker by its destination port, and the RX lcore sends it there with no shared state and no NIC flow rule.
// Ports are reused oldest-freed first, so a backend's TIME_WAIT for a 4-tuple has the longest time to end.
// Fast-path safe (no allocation after construction); owning worker only.
#pragma once

#include <cstdint>
#include <vector>

namespace sluice {

inline constexpr std::size_t kMaxNatPoolAddresses = 16;

class NatPortPool {
public:
    // Ports [first, last] (host order) owned by worker_index of worker_count, on each of `addresses` pool addresses.
    NatPortPool(uint16_t first, uint16_t last, uint16_t worker_index, uint16_t worker_count, std::size_t addresses);

    // A free port (host order) on pool address `address`, or 0 when none is left.
    uint16_t allocate(std::size_t address) {
        Queue& q = queues_[address];
        if (q.count == 0) return 0;
        const uint16_t port = q.ports[q.head];
        q.head = q.head + 1 == q.ports.size() ? 0 : q.head + 1;
        --q.count;
        return port;
    }

    // The port the k-th next allocate() on `address` would return (0 when fewer are free), nothing taken.
    uint16_t peek(std::size_t address, std::size_t k) const {
        const Queue& q = queues_[address];
        if (k >= q.count) return 0;
        std::size_t at = q.head + k;
        if (at >= q.ports.size()) at -= q.ports.size();
        return q.ports[at];
    }

    // Gives back a port allocate() returned.
    void release(std::size_t address, uint16_t port) {
        Queue& q = queues_[address];
        std::size_t tail = q.head + q.count;
        if (tail >= q.ports.size()) tail -= q.ports.size();
        q.ports[tail] = port;
        ++q.count;
    }

    std::size_t free_ports(std::size_t address) const { return queues_[address].count; }
    std::size_t capacity() const { return queues_.empty() ? 0 : queues_[0].ports.size(); }

private:
    struct Queue {
        std::vector<uint16_t> ports;  // a ring of the free ports: [head, head + count)
        std::size_t head = 0;
        std::size_t count = 0;
    };
    std::vector<Queue> queues_;
};

// The worker that owns NAT port `port` (host order): the rule the RX lcores apply to replies.
inline uint16_t nat_port_owner(uint16_t port, uint16_t worker_count) {
    return static_cast<uint16_t>(port % worker_count);
}

}  // namespace sluice

// Packet mempools: the sizing formula (pure, see docs/architecture.md) and creation on hugepages.
// Control thread only.
#pragma once

#include <cstdint>
#include <string>

#include <rte_mempool.h>

namespace sluice {

// Everything that can hold an mbuf at once, for the ports and lcores that share one pool.
struct MempoolDemand {
    uint64_t rx_descriptors = 0;  // sum over RX queues of their ring size
    uint64_t tx_descriptors = 0;  // sum over TX queues of their ring size
    uint64_t ring_slots = 0;      // capacity of the worker input rings
    uint32_t lcores = 0;          // data-plane lcores taking from the pool
    uint32_t ports = 0;           // ports: each worker buffers up to a burst per port before TX
    uint32_t workers = 0;         // each RX lcore holds up to a burst per worker before enqueueing
    uint32_t max_frame = 1518;    // largest frame received (sets the data room)
};

struct MempoolPlan {
    uint32_t mbufs = 0;       // 2^k - 1, the size rte_mempool handles best
    uint32_t cache_size = 0;  // per-lcore cache
    uint16_t data_room = 0;   // RTE_PKTMBUF_HEADROOM + max_frame, at least the default 2048 + headroom
    uint64_t bytes = 0;       // memory the pool takes on hugepages, objects and headers
    uint64_t hugepages_2m = 0;
};

inline constexpr uint32_t kBurst = 32;
inline constexpr uint32_t kMempoolCache = 256;
inline constexpr uint32_t kMempoolHeadroom = 4096;  // a margin for PMD-internal holds and control-thread packets

MempoolPlan plan_mempool(const MempoolDemand& demand);

// Creates the pool on socket or throws StartupError; when hugepages are short the message says how many are
// needed and how to reserve them.
rte_mempool* create_packet_pool(const std::string& name, const MempoolPlan& plan, int socket);

// mbufs not back in the pool (0 when every mbuf is home).
uint32_t mbufs_in_use(const rte_mempool* pool);

}  // namespace sluice

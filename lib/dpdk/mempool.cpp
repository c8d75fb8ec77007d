#include "dpdk/mempool.hpp"

#include <algorithm>
#include <bit>

#include <rte_errno.h>
#include <rte_mbuf.h>

#include "dpdk/startup_error.hpp"

namespace sluice {

MempoolPlan plan_mempool(const MempoolDemand& d) {
    MempoolPlan plan;
    plan.cache_size = kMempoolCache;
    // A per-lcore cache can hold up to 1.5x its size (rte_mempool's flush threshold).
    const uint64_t in_caches = uint64_t{d.lcores} * (kMempoolCache * 3 / 2);
    // In flight on an lcore: the RX burst, one pending burst per worker ring, one TX buffer per port.
    const uint64_t in_flight = uint64_t{d.lcores} * kBurst * (1 + d.workers + d.ports);
    const uint64_t need = d.rx_descriptors + d.tx_descriptors + d.ring_slots + in_caches + in_flight + kMempoolHeadroom;
    plan.mbufs = static_cast<uint32_t>(std::bit_ceil(need + 1) - 1);
    plan.data_room =
        static_cast<uint16_t>(RTE_PKTMBUF_HEADROOM + std::max<uint32_t>(d.max_frame, RTE_MBUF_DEFAULT_DATAROOM));
    rte_mempool_objsz sz{};
    const uint32_t element = sizeof(rte_mbuf) + plan.data_room;
    const uint64_t per_object = rte_mempool_calc_obj_size(element, 0, &sz);
    // Objects, the per-lcore cache structures and a page of headers.
    plan.bytes = uint64_t{plan.mbufs} * per_object + (1u << 21);
    plan.hugepages_2m = (plan.bytes + (1u << 21) - 1) >> 21;
    return plan;
}

rte_mempool* create_packet_pool(const std::string& name, const MempoolPlan& plan, int socket) {
    rte_mempool* pool = rte_pktmbuf_pool_create(name.c_str(), plan.mbufs, plan.cache_size, 0, plan.data_room, socket);
    if (pool) return pool;
    const int err = rte_errno;
    std::string message = "mempool '" + name + "' of " + std::to_string(plan.mbufs) + " mbufs on socket " +
                          std::to_string(socket) + ": " + rte_strerror(err);
    if (err == ENOMEM)
        message += ". It needs about " + std::to_string(plan.hugepages_2m) +
                   " free 2 MiB hugepages on top of what DPDK already uses; reserve more with 'echo N > "
                   "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages' (deploy/install-deps.sh does it; "
                   "SLUICE_HUGEPAGES sets N) or lower the descriptor counts";
    throw StartupError(message);
}

uint32_t mbufs_in_use(const rte_mempool* pool) { return rte_mempool_in_use_count(pool); }

}  // namespace sluice

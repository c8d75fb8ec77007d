#include <catch2/catch.hpp>

#include <rte_mbuf.h>

#include "dpdk/mempool.hpp"
#include "dpdk/port.hpp"

using namespace sluice;

TEST_CASE("mempool plan: room for every descriptor, ring slot, cache and burst", "[mempool]") {
    MempoolDemand d;
    d.rx_descriptors = 2 * 1024;      // two ports, one RX queue each
    d.tx_descriptors = 2 * 2 * 1024;  // two ports, two workers
    d.ring_slots = 2 * 4096;
    d.lcores = 2;
    d.ports = 2;
    d.workers = 2;
    const MempoolPlan plan = plan_mempool(d);
    const uint64_t need = 2048 + 4096 + 8192 + 2 * 384 + 2 * kBurst * (1 + 2 + 2) + kMempoolHeadroom;
    CHECK(plan.mbufs >= need);
    CHECK(((plan.mbufs + 1) & plan.mbufs) == 0);  // 2^k - 1
    CHECK(plan.mbufs < 2 * need);
    CHECK(plan.data_room == RTE_MBUF_DEFAULT_BUF_SIZE);
    CHECK(plan.bytes > uint64_t{plan.mbufs} * (sizeof(rte_mbuf) + plan.data_room));
    CHECK(plan.hugepages_2m == (plan.bytes + (1 << 21) - 1) / (1 << 21));
}

TEST_CASE("mempool plan: grows with the demand", "[mempool]") {
    MempoolDemand small;
    small.rx_descriptors = 512;
    small.lcores = 1;
    MempoolDemand large = small;
    large.rx_descriptors = 64 * 1024;
    CHECK(plan_mempool(large).mbufs > plan_mempool(small).mbufs);
    CHECK(plan_mempool(large).mbufs >= 64 * 1024);
}

TEST_CASE("mempool plan: jumbo MTU widens the data room", "[mempool]") {
    MempoolDemand d;
    d.max_frame = max_frame_size(9000);
    const MempoolPlan plan = plan_mempool(d);
    CHECK(plan.data_room >= RTE_PKTMBUF_HEADROOM + 9000 + 14 + 8 + 4);
}

#include <array>
#include <cstring>
#include <random>
#include <set>

#include <catch2/catch.hpp>

#include <rte_thash.h>

#include "dpdk/port.hpp"

using namespace sluice;

TEST_CASE("tx fast free: on every port while all mbufs come from one socket's pool", "[port]") {
    CHECK(plan_tx_fast_free({0}, 0) == std::vector<bool>{true});
    CHECK(plan_tx_fast_free({0, 0, 0}, 0) == std::vector<bool>{true, true, true});
    CHECK(plan_tx_fast_free({1, 1}, 1) == std::vector<bool>{true, true});
}

TEST_CASE("tx fast free: off on every port once pools of two sockets may meet on a TX queue", "[port]") {
    // Port 1 on socket 1 forwards what port 0 received (socket 0's pool), and port 0 what port 1 received.
    CHECK(plan_tx_fast_free({0, 1}, 0) == std::vector<bool>{false, false});
    // Even ports all on socket 1 would free the solicitations built from socket 0's pool into socket 1's.
    CHECK(plan_tx_fast_free({1, 1}, 0) == std::vector<bool>{false, false});
    CHECK(plan_tx_fast_free({0, 0, 1, 0}, 0) == std::vector<bool>(4, false));
}

namespace {

// What a NIC's Toeplitz RSS computes for an IPv4 or IPv6 TCP/UDP packet (addresses, then source and destination
// ports), with key.
uint32_t toeplitz_v4(uint32_t src, uint32_t dst, uint16_t sport, uint16_t dport, const std::vector<uint8_t>& key) {
    rte_ipv4_tuple tuple{};
    tuple.src_addr = src;
    tuple.dst_addr = dst;
    tuple.sport = sport;
    tuple.dport = dport;
    return rte_softrss(reinterpret_cast<uint32_t*>(&tuple), RTE_THASH_V4_L4_LEN, key.data());
}

uint32_t toeplitz_v6(const std::array<uint32_t, 4>& src, const std::array<uint32_t, 4>& dst, uint16_t sport,
                     uint16_t dport, const std::vector<uint8_t>& key) {
    rte_ipv6_tuple tuple{};
    std::memcpy(tuple.src_addr, src.data(), 16);
    std::memcpy(tuple.dst_addr, dst.data(), 16);
    tuple.sport = sport;
    tuple.dport = dport;
    return rte_softrss(reinterpret_cast<uint32_t*>(&tuple), RTE_THASH_V6_L4_LEN, key.data());
}

}  // namespace

TEST_CASE("symmetric RSS key: 0x6d5a repeated over the device's key size", "[port]") {
    const std::vector<uint8_t> key = symmetric_rss_key(52);
    REQUIRE(key.size() == 52);
    for (std::size_t i = 0; i < key.size(); i += 2) {
        CHECK(key[i] == 0x6d);
        CHECK(key[i + 1] == 0x5a);
    }
    CHECK(symmetric_rss_key(40).size() == 40);
}

TEST_CASE("symmetric RSS key: both directions of a flow hash alike, so a NIC gives them one RX queue", "[port]") {
    const std::vector<uint8_t> key = symmetric_rss_key(40);
    // DPDK's default (Microsoft's) key, which NICs use when given none: not symmetric.
    const std::vector<uint8_t> asymmetric = {0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67,
                                             0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0, 0xd0, 0xca, 0x2b, 0xcb,
                                             0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30,
                                             0xf2, 0x0c, 0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa};
    std::mt19937 random(27);
    const auto next = [&] { return static_cast<uint32_t>(random()); };
    std::set<uint32_t> queues_of_two;
    int asymmetric_differs = 0;
    for (int i = 0; i < 1000; ++i) {
        const uint32_t a = next(), b = next();
        const auto pa = static_cast<uint16_t>(next()), pb = static_cast<uint16_t>(next());
        const uint32_t forward = toeplitz_v4(a, b, pa, pb, key);
        CHECK(forward == toeplitz_v4(b, a, pb, pa, key));
        queues_of_two.insert(forward % 2);
        asymmetric_differs += toeplitz_v4(a, b, pa, pb, asymmetric) != toeplitz_v4(b, a, pb, pa, asymmetric);

        const std::array<uint32_t, 4> c{next(), next(), next(), next()};
        const std::array<uint32_t, 4> d{next(), next(), next(), next()};
        CHECK(toeplitz_v6(c, d, pa, pb, key) == toeplitz_v6(d, c, pb, pa, key));
    }
    CHECK(queues_of_two.size() == 2);  // flows still spread over the queues
    CHECK(asymmetric_differs > 900);   // the check above would catch a key that is not symmetric
}

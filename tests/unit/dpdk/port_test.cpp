#include <catch2/catch.hpp>

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

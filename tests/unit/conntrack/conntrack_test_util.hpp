// Helpers shared by the conntrack tests: tuples, unique table names and a fake clock.
#pragma once

#include <netinet/in.h>

#include <cstdint>
#include <random>
#include <string>

#include <rte_memory.h>

#include "common/five_tuple.hpp"
#include "common/random_tuple.hpp"
#include "conntrack/conn_table.hpp"

namespace sluice::test {

// The tests run on a fake clock: 1000 "TSC cycles" per second, so a timeout of n seconds is n * 1000 cycles.
inline constexpr uint64_t kFakeTscHz = 1000;

// rte_hash names must be unique in the process.
inline std::string unique_table_name() {
    static int counter = 0;
    return "ct_test_" + std::to_string(counter++);
}

inline FiveTuple v4_tuple(uint8_t proto, uint32_t src, uint16_t src_port, uint32_t dst, uint16_t dst_port) {
    FiveTuple t;
    t.family = IpFamily::ipv4;
    t.proto = proto;
    t.src = IpAddress::from_v4(htonl(src));
    t.dst = IpAddress::from_v4(htonl(dst));
    t.src_port = htons(src_port);
    t.dst_port = htons(dst_port);
    return t;
}

// The i-th of up to 2^32 distinct IPv4 TCP tuples (a client spread over addresses and ports towards one VIP).
inline FiveTuple nth_tuple(uint32_t i) {
    return v4_tuple(IPPROTO_TCP, 0x0a000000u | (i >> 8), static_cast<uint16_t>(1024 + (i & 0xff)), 0xc0a80001u, 443);
}

}  // namespace sluice::test

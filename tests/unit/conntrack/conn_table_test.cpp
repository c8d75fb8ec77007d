// ConnTable over rte_hash: canonical keys, lookups from both directions, a full table, bounded expiry, scale.
#include <catch2/catch.hpp>

#include <netinet/in.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <random>
#include <set>
#include <vector>

#include <rte_log.h>
#include <rte_malloc.h>

#include "conntrack/conn_table.hpp"
#include "conntrack_test_util.hpp"

using namespace sluice;
using namespace sluice::test;

namespace {

// Looks tuples up in bursts of ConnTable::kMaxBurst, the way a worker does; returns the positions.
std::vector<int32_t> lookup_all(const ConnTable& table, const std::vector<FiveTuple>& tuples) {
    std::vector<int32_t> out(tuples.size());
    const FiveTuple* ptrs[ConnTable::kMaxBurst];
    uint32_t hashes[ConnTable::kMaxBurst];
    for (std::size_t base = 0; base < tuples.size(); base += ConnTable::kMaxBurst) {
        const auto n = static_cast<uint32_t>(std::min<std::size_t>(ConnTable::kMaxBurst, tuples.size() - base));
        for (uint32_t i = 0; i < n; ++i) {
            ptrs[i] = &tuples[base + i];
            hashes[i] = symmetric_flow_hash(tuples[base + i]);
        }
        table.lookup_bulk(ptrs, hashes, n, &out[base]);
    }
    return out;
}

std::vector<FiveTuple> reversed_all(const std::vector<FiveTuple>& tuples) {
    std::vector<FiveTuple> out;
    out.reserve(tuples.size());
    for (const auto& t : tuples) out.push_back(t.reversed());
    return out;
}

// Bytes allocated from the DPDK heaps of every socket (what the table takes from the EAL's memory).
std::size_t dpdk_heap_allocated() {
    std::size_t total = 0;
    for (int socket = 0; socket < RTE_MAX_NUMA_NODES; ++socket) {
        rte_malloc_socket_stats stats{};
        if (rte_malloc_get_socket_stats(socket, &stats) == 0) total += stats.heap_allocsz_bytes;
    }
    return total;
}

// canonical_key into a key whose bytes start as garbage: the key must come out the same whatever was there.
FiveTuple key_of(const FiveTuple& t, bool& low_is_source) {
    FiveTuple key;
    std::memset(reinterpret_cast<unsigned char*>(&key), 0xab, sizeof key);
    canonical_key(t, key, low_is_source);
    return key;
}

}  // namespace

TEST_CASE("canonical_key: both directions give the same key bytes", "[conntrack]") {
    std::mt19937_64 rng(7);
    for (IpFamily family : {IpFamily::ipv4, IpFamily::ipv6}) {
        for (int i = 0; i < 20000; ++i) {
            FiveTuple t = random_tuple(rng, family, (i & 1) ? IPPROTO_TCP : IPPROTO_UDP);
            if (i % 10 == 0) t.dst = t.src;  // same address both ends: the ports decide the order
            INFO(to_string(t));
            bool low_fwd = false, low_rev = false;
            const FiveTuple fwd = key_of(t, low_fwd);
            const FiveTuple rev = key_of(t.reversed(), low_rev);
            REQUIRE(std::memcmp(&fwd, &rev, sizeof fwd) == 0);
            if (t.src == t.dst && t.src_port == t.dst_port) {
                REQUIRE(low_fwd);  // the same endpoint twice: nothing to swap
                REQUIRE(low_rev);
            } else {
                REQUIRE(low_fwd != low_rev);
            }
            // The key names the same flow and hashes like it, so the caller's hash fits the key.
            REQUIRE(symmetric_flow_hash(fwd) == symmetric_flow_hash(t));
            REQUIRE(fwd.proto == t.proto);
            REQUIRE(fwd.family == t.family);
            REQUIRE(fwd.reserved == 0);
            // The low endpoint is the source of the key; the key is its own canonical form.
            const FiveTuple& expected_low_side = low_fwd ? t : t.reversed();
            REQUIRE(fwd == expected_low_side);
            bool low_key = false;
            REQUIRE(key_of(fwd, low_key) == fwd);
            REQUIRE(low_key);
        }
    }
}

TEST_CASE("canonical_key: IPv4 keys carry only the first address word", "[conntrack]") {
    FiveTuple clean = v4_tuple(IPPROTO_UDP, 0x0a000001, 5000, 0x0a000002, 53);
    FiveTuple dirty = clean;
    dirty.src.words[2] = 0xdeadbeef;  // symmetric_flow_hash ignores these words: the key must too
    dirty.dst.words[3] = 0x12345678;
    dirty.reserved = 0x55aa;
    bool low1 = false, low2 = false;
    const FiveTuple a = key_of(clean, low1);
    const FiveTuple b = key_of(dirty, low2);
    CHECK(std::memcmp(&a, &b, sizeof a) == 0);
    CHECK(low1 == low2);
}

TEST_CASE("ConnTable: a connection is found from both directions", "[conntrack]") {
    ConnTable table(unique_table_name(), 1024, SOCKET_ID_ANY, ConnTimeouts{}, kFakeTscHz);
    std::mt19937_64 rng(11);
    std::vector<FiveTuple> flows;
    std::set<int32_t> indices;
    for (int i = 0; i < 600; ++i) {
        const FiveTuple t =
            random_tuple(rng, (i % 3) ? IpFamily::ipv4 : IpFamily::ipv6, (i % 2) ? IPPROTO_TCP : IPPROTO_UDP);
        ConnState initial{};
        REQUIRE(ConnTable::initial_state(t, 0x02, false, initial) == TrackVerdict::ok);
        const int32_t index = table.insert(t, symmetric_flow_hash(t), initial, static_cast<uint32_t>(i), 0);
        REQUIRE(index >= 0);
        REQUIRE(indices.insert(index).second);  // a fresh index per connection
        flows.push_back(t);
    }
    REQUIRE(table.size() == 600);

    const std::vector<int32_t> forward = lookup_all(table, flows);
    const std::vector<int32_t> backward = lookup_all(table, reversed_all(flows));
    for (std::size_t i = 0; i < flows.size(); ++i) {
        INFO(to_string(flows[i]));
        REQUIRE(forward[i] >= 0);
        REQUIRE(forward[i] == backward[i]);
        REQUIRE_FALSE(table.is_reply(forward[i], flows[i]));
        REQUIRE(table.is_reply(forward[i], flows[i].reversed()));
        REQUIRE(table.entry(forward[i]).rule_index == i);
        REQUIRE(table.entry(forward[i]).state ==
                (flows[i].proto == IPPROTO_TCP ? ConnState::tcp_syn_sent : ConnState::udp_unreplied));
    }

    SECTION("unknown tuples are not found") {
        std::vector<FiveTuple> unknown;
        for (int i = 0; i < 100; ++i) unknown.push_back(random_tuple(rng, IpFamily::ipv4, IPPROTO_TCP));
        FiveTuple other_proto = flows[0];
        other_proto.proto = IPPROTO_SCTP;
        unknown.push_back(other_proto);
        FiveTuple other_port = flows[1];
        other_port.dst_port = static_cast<uint16_t>(other_port.dst_port + 1);
        unknown.push_back(other_port);
        for (int32_t p : lookup_all(table, unknown)) CHECK(p == -1);
    }

    SECTION("inserting a tracked connection again returns its index and changes nothing") {
        const int32_t index = forward[5];
        table.entry(index).backend = 77;
        CHECK(table.insert(flows[5].reversed(), symmetric_flow_hash(flows[5]), ConnState::other, 9, 0) == index);
        CHECK(table.size() == 600);
        CHECK(table.entry(index).backend == 77);
        CHECK(table.entry(index).rule_index == 5);
    }

    SECTION("a removed connection is gone from both directions and its slot is reused") {
        const int32_t index = forward[3];
        table.remove(index);
        CHECK(table.size() == 599);
        table.remove(index);  // a free index is left alone
        CHECK(table.size() == 599);
        CHECK(lookup_all(table, {flows[3]})[0] == -1);
        CHECK(lookup_all(table, {flows[3].reversed()})[0] == -1);
        CHECK(lookup_all(table, {flows[4]})[0] == forward[4]);
        CHECK(table.insert(flows[3].reversed(), symmetric_flow_hash(flows[3]), ConnState::udp_unreplied, 0, 0) >= 0);
        CHECK(table.size() == 600);
    }

    SECTION("a full burst of 64 and an empty burst") {
        std::vector<FiveTuple> burst(flows.begin(), flows.begin() + ConnTable::kMaxBurst);
        const FiveTuple* ptrs[ConnTable::kMaxBurst];
        uint32_t hashes[ConnTable::kMaxBurst];
        int32_t positions[ConnTable::kMaxBurst];
        for (uint32_t i = 0; i < ConnTable::kMaxBurst; ++i) {
            ptrs[i] = &burst[i];
            hashes[i] = symmetric_flow_hash(burst[i]);
        }
        table.lookup_bulk(ptrs, hashes, ConnTable::kMaxBurst, positions);
        for (uint32_t i = 0; i < ConnTable::kMaxBurst; ++i) CHECK(positions[i] == forward[i]);
        positions[0] = 12345;
        table.lookup_bulk(ptrs, hashes, 0, positions);
        CHECK(positions[0] == 12345);
    }
}

TEST_CASE("ConnTable: lookup_bulk tells each packet's direction, both families in one burst", "[conntrack]") {
    ConnTable table(unique_table_name(), 256, SOCKET_ID_ANY, ConnTimeouts{}, kFakeTscHz, 128);
    std::mt19937_64 rng(11);
    std::vector<FiveTuple> burst;
    std::vector<int32_t> conns;
    for (uint32_t i = 0; i < ConnTable::kMaxBurst; ++i) {
        const FiveTuple t = random_tuple(rng, i % 3 ? IpFamily::ipv4 : IpFamily::ipv6, IPPROTO_TCP);
        conns.push_back(table.insert(t, symmetric_flow_hash(t), ConnState::tcp_established, 0, 0));
        REQUIRE(conns.back() >= 0);
        burst.push_back(i % 2 ? t.reversed() : t);  // every other packet a reply
    }
    const FiveTuple* ptrs[ConnTable::kMaxBurst];
    uint32_t hashes[ConnTable::kMaxBurst];
    int32_t positions[ConnTable::kMaxBurst];
    for (uint32_t i = 0; i < ConnTable::kMaxBurst; ++i) {
        ptrs[i] = &burst[i];
        hashes[i] = symmetric_flow_hash(burst[i]);
    }
    uint64_t source_low = 0;
    table.lookup_bulk(ptrs, hashes, ConnTable::kMaxBurst, positions, &source_low);
    for (uint32_t i = 0; i < ConnTable::kMaxBurst; ++i) {
        REQUIRE(positions[i] == conns[i]);
        const bool low = (source_low >> i) & 1;
        CHECK(low == source_is_low(burst[i]));
        CHECK(table.is_reply_from(positions[i], low) == (i % 2 == 1));
        CHECK(table.is_reply_from(positions[i], low) == table.is_reply(positions[i], burst[i]));
    }
}

TEST_CASE("ConnTable: a NAT alias keeps its origin, shift and window apart and leaves the connection's counters",
          "[conntrack]") {
    ConnTable table(unique_table_name(), 64, SOCKET_ID_ANY, ConnTimeouts{}, kFakeTscHz);
    const FiveTuple client_side = v4_tuple(IPPROTO_TCP, 0x0a000001, 40000, 0xc6336401, 443);   // client -> VIP
    const FiveTuple backend_side = v4_tuple(IPPROTO_TCP, 0x0a010002, 8443, 0xcb007101, 1025);  // backend -> pool
    const int32_t conn = table.insert(client_side, symmetric_flow_hash(client_side), ConnState::tcp_syn_sent, 7, 0);
    REQUIRE(conn >= 0);
    REQUIRE(table.track(conn, client_side, 0x02, 0) == TrackVerdict::ok);
    TcpWindow window{};
    window.side[0] = TcpWindowSide{1001, 66536, 0};
    set_tcp_window_maxwin(window, 0, 65535);
    window.flags[0] = kWindowSideSeen | kWindowSideSyn;
    table.window(conn) = window;
    const int32_t alias = table.insert_alias(backend_side, symmetric_flow_hash(backend_side), conn);
    REQUIRE(alias >= 0);
    REQUIRE(alias != conn);

    table.set_origin(alias, client_side.src, 40000, client_side.dst, 443);
    table.set_seq_shift(alias, 0xdeadbeef);
    table.set_pending_window(alias, 29200);
    IpAddress client{}, vip{};
    uint16_t client_port = 0, vip_port = 0;
    table.origin(alias, client, client_port, vip, vip_port);
    CHECK(client == client_side.src);
    CHECK(vip == client_side.dst);
    CHECK(client_port == 40000);
    CHECK(vip_port == 443);
    CHECK(table.seq_shift(alias) == 0xdeadbeef);
    CHECK(table.pending_window(alias) == 29200);

    bool via_alias = false;
    CHECK(table.resolve(alias, via_alias) == conn);
    CHECK(via_alias);
    const ConnEntry& e = table.entry(conn);
    CHECK(e.packets[0] == 1);
    CHECK(e.rule_index == 7);
    CHECK(e.backend == 0);
    CHECK(e.nat_port == 0);
    CHECK(e.peer == static_cast<uint32_t>(alias));
    CHECK(std::memcmp(&table.window(conn), &window, sizeof window) == 0);  // the alias's line is its own

    // Another connection whose replies would come with the same tuple is told so, apart from a full table.
    const FiveTuple other_client = v4_tuple(IPPROTO_TCP, 0x0a000009, 40001, 0xc6336401, 443);
    const int32_t other = table.insert(other_client, symmetric_flow_hash(other_client), ConnState::tcp_syn_sent, 7, 0);
    REQUIRE(other >= 0);
    CHECK(table.insert_alias(backend_side, symmetric_flow_hash(backend_side), other) == ConnTable::kAliasTaken);
    CHECK(table.resolve(alias, via_alias) == conn);  // the first connection keeps its alias
    table.remove(other);

    table.remove(conn);  // the alias goes with its connection
    CHECK(table.size() == 0);
    CHECK(lookup_all(table, {backend_side})[0] < 0);
}

TEST_CASE("ConnTable: a full table refuses new connections and keeps the old ones", "[conntrack]") {
    // 5 is below rte_hash's minimum of 8 entries; 1000 fits plain cuckoo buckets (1024 slots); 1024 and 4096 are
    // powers of two, where the table needs rte_hash's extendable buckets to hold every one of them.
    for (uint32_t capacity : {5u, 1000u, 1024u, 4096u}) {
        INFO("capacity " << capacity);
        ConnTable table(unique_table_name(), capacity, SOCKET_ID_ANY, ConnTimeouts{}, kFakeTscHz);
        REQUIRE(table.capacity() == capacity);
        std::vector<FiveTuple> flows;
        for (uint32_t i = 0; i < capacity; ++i) {
            flows.push_back(nth_tuple(i));
            REQUIRE(table.insert(flows.back(), symmetric_flow_hash(flows.back()), ConnState::tcp_syn_sent, 0, 0) >= 0);
        }
        REQUIRE(table.size() == capacity);
        const FiveTuple extra = nth_tuple(capacity);
        CHECK(table.insert(extra, symmetric_flow_hash(extra), ConnState::tcp_syn_sent, 0, 0) == -1);
        CHECK(table.size() == capacity);
        const std::vector<int32_t> found = lookup_all(table, flows);
        std::set<int32_t> distinct;
        for (int32_t p : found) {
            REQUIRE(p >= 0);
            distinct.insert(p);
        }
        CHECK(distinct.size() == capacity);
        CHECK(lookup_all(table, {extra})[0] == -1);

        // One leaves, one more fits.
        table.remove(found[0]);
        CHECK(table.insert(extra, symmetric_flow_hash(extra), ConnState::tcp_syn_sent, 0, 0) >= 0);
        CHECK(table.insert(flows[0], symmetric_flow_hash(flows[0]), ConnState::tcp_syn_sent, 0, 0) == -1);
    }
}

TEST_CASE("ConnTable: IPv6 connections fill a share of their own; IPv4 ones the rest", "[conntrack]") {
    // Capacity 64 of which 16 IPv6: the 17th IPv6 connection is refused while IPv4 ones still fit, up to 64 in all.
    ConnTable table(unique_table_name(), 64, SOCKET_ID_ANY, ConnTimeouts{}, kFakeTscHz, 16);
    REQUIRE(table.capacity() == 64);
    REQUIRE(table.ipv6_capacity() == 16);
    std::mt19937_64 rng(5);
    std::vector<FiveTuple> v6, v4;
    std::set<int32_t> indices;
    const auto insert = [&](const FiveTuple& t) {
        return table.insert(t, symmetric_flow_hash(t), ConnState::udp_unreplied, 0, 0);
    };
    for (int i = 0; i < 16; ++i) {
        v6.push_back(random_tuple(rng, IpFamily::ipv6, IPPROTO_UDP));
        const int32_t index = insert(v6.back());
        REQUIRE(index >= 0);
        REQUIRE(static_cast<uint32_t>(index) < table.slot_count());
        REQUIRE(indices.insert(index).second);
    }
    const FiveTuple extra6 = random_tuple(rng, IpFamily::ipv6, IPPROTO_UDP);
    CHECK(insert(extra6) == -1);
    for (int i = 0; i < 48; ++i) {
        v4.push_back(random_tuple(rng, IpFamily::ipv4, IPPROTO_UDP));
        const int32_t index = insert(v4.back());
        REQUIRE(index >= 0);
        REQUIRE(static_cast<uint32_t>(index) < table.slot_count());
        REQUIRE(indices.insert(index).second);  // no index is shared between the families' tables
    }
    CHECK(table.size() == 64);
    const FiveTuple extra4 = random_tuple(rng, IpFamily::ipv4, IPPROTO_UDP);
    CHECK(insert(extra4) == -1);

    // Bursts that mix both families find every connection, in the burst's order.
    std::vector<FiveTuple> mixed;
    for (std::size_t i = 0; i < 48; ++i) {
        mixed.push_back(i % 3 == 1 ? v6[i / 3].reversed() : v4[i]);
        if (i % 7 == 0) mixed.push_back(extra6);
    }
    const std::vector<int32_t> found = lookup_all(table, mixed);
    for (std::size_t i = 0; i < mixed.size(); ++i) {
        INFO(to_string(mixed[i]));
        if (mixed[i] == extra6) {
            CHECK(found[i] == -1);
            continue;
        }
        REQUIRE(found[i] >= 0);
        // The stored key of each is the tuple's canonical key, whichever table holds it.
        FiveTuple stored, expected;
        bool low;
        canonical_key(mixed[i], expected, low);
        REQUIRE(table.key_at(found[i], stored));
        CHECK(stored == expected);
        // The walk's unchecked read of the key store gives the same key.
        FiveTuple read_directly;
        table.live_key(found[i], read_directly);
        CHECK(read_directly == expected);
    }

    // An IPv4 connection leaves: the IPv6 share is still full, an IPv4 one fits.
    table.remove(lookup_all(table, {v4[0]})[0]);
    CHECK(insert(extra6) == -1);
    CHECK(insert(extra4) >= 0);
    // An IPv6 connection leaves: one more IPv6 fits, and then the whole table is full again.
    table.remove(lookup_all(table, {v6[0]})[0]);
    CHECK(lookup_all(table, {v6[0]})[0] == -1);
    CHECK(insert(extra6) >= 0);
    CHECK(table.size() == 64);
    CHECK(insert(v4[0]) == -1);
    CHECK(lookup_all(table, {extra6, extra4, v6[1]}) == std::vector<int32_t>{lookup_all(table, {extra6})[0],
                                                                             lookup_all(table, {extra4})[0],
                                                                             lookup_all(table, {v6[1]})[0]});
}

TEST_CASE("ConnTable: rejects bad construction parameters", "[conntrack]") {
    CHECK_THROWS_AS(ConnTable(unique_table_name(), 0, SOCKET_ID_ANY, ConnTimeouts{}, kFakeTscHz), std::runtime_error);
    CHECK_THROWS_AS(ConnTable("a_name_of_19_chars_", 16, SOCKET_ID_ANY, ConnTimeouts{}, kFakeTscHz),
                    std::runtime_error);
    CHECK_THROWS_AS(ConnTable(unique_table_name(), 16, SOCKET_ID_ANY, ConnTimeouts{}, kFakeTscHz, 17),
                    std::runtime_error);
    const std::string name = unique_table_name();
    ConnTable first(name, 16, SOCKET_ID_ANY, ConnTimeouts{}, kFakeTscHz);
    const uint32_t log_level = rte_log_get_global_level();
    rte_log_set_global_level(RTE_LOG_EMERG);  // rte_ring/rte_hash log the expected failure as an error
    CHECK_THROWS_AS(ConnTable(name, 16, SOCKET_ID_ANY, ConnTimeouts{}, kFakeTscHz), std::runtime_error);
    // The IPv6 table cannot be made (its name is taken): the IPv4 one made before it is freed again, so the name
    // can be used once the other table is gone.
    const std::string base = unique_table_name();
    {
        ConnTable taken(base + "_v6", 16, SOCKET_ID_ANY, ConnTimeouts{}, kFakeTscHz);
        CHECK_THROWS_AS(ConnTable(base, 16, SOCKET_ID_ANY, ConnTimeouts{}, kFakeTscHz), std::runtime_error);
    }
    rte_log_set_global_level(log_level);
    CHECK_NOTHROW(ConnTable(base, 16, SOCKET_ID_ANY, ConnTimeouts{}, kFakeTscHz));
}

TEST_CASE("ConnTable: entries expire after their state's timeout, a budget at a time", "[conntrack]") {
    ConnTimeouts timeouts;
    timeouts.udp_unreplied = 1;  // 1000 fake cycles
    timeouts.udp_replied = 3;
    constexpr uint32_t kFlows = 1000;
    ConnTable table(unique_table_name(), 1024, SOCKET_ID_ANY, timeouts, kFakeTscHz);
    std::vector<FiveTuple> flows;
    for (uint32_t i = 0; i < kFlows; ++i) {
        flows.push_back(v4_tuple(IPPROTO_UDP, 0x0a000001, static_cast<uint16_t>(1000 + i), 0x08080808, 53));
        REQUIRE(table.insert(flows.back(), symmetric_flow_hash(flows.back()), ConnState::udp_unreplied, 0, 0) >= 0);
    }
    std::vector<int32_t> index = lookup_all(table, flows);
    REQUIRE(table.lifetime_tsc(table.entry(index[0]), 0) == 1000);

    // Nothing is due before its timeout, however many times expiry runs.
    for (int i = 0; i < 200; ++i) REQUIRE(table.expire(999, 16) == 0);
    REQUIRE(table.size() == kFlows);

    // Every tenth flow sees traffic at t=500: a request (stays unreplied, due at 1500) or a reply (replied, 3500).
    for (uint32_t i = 0; i < kFlows; i += 10) {
        const bool reply = (i % 20) == 0;
        REQUIRE(table.track(index[i], reply ? flows[i].reversed() : flows[i], 0, 500) == TrackVerdict::ok);
        REQUIRE(table.entry(index[i]).state == (reply ? ConnState::udp_replied : ConnState::udp_unreplied));
    }

    // At t=1000 the other 900 are due: each call removes at most its budget, the calls together remove all.
    uint32_t removed = 0;
    int calls = 0;
    while (removed < 900 && calls < 10000) {
        const uint32_t n = table.expire(1000, 7);
        REQUIRE(n <= 7);
        removed += n;
        ++calls;
    }
    CHECK(removed == 900);
    CHECK(calls >= 900 / 7);
    CHECK(table.size() == 100);
    for (int i = 0; i < 300; ++i) CHECK(table.expire(1000, 7) == 0);  // a few full passes: nothing else is due
    index = lookup_all(table, flows);
    for (uint32_t i = 0; i < kFlows; ++i) CHECK((index[i] >= 0) == (i % 10 == 0));

    // At t=1500 the 50 unreplied ones go, at t=3500 the replied ones.
    for (int i = 0; i < 300; ++i) table.expire(1500, 7);
    CHECK(table.size() == 50);
    for (int i = 0; i < 300; ++i) table.expire(3499, 7);
    CHECK(table.size() == 50);
    for (int i = 0; i < 300; ++i) table.expire(3500, 7);
    CHECK(table.size() == 0);
}

TEST_CASE("ConnTable: expiry compares ticks modulo 2^32, so the clock may wrap under a connection", "[conntrack]") {
    ConnTimeouts timeouts;
    timeouts.udp_unreplied = 1;  // 1000 fake cycles
    ConnTable table(unique_table_name(), 64, SOCKET_ID_ANY, timeouts, kFakeTscHz);
    REQUIRE(table.tick_shift() == 0);                  // a fake clock of 1000 Hz: a day fits 31 bits as it is
    const uint64_t start = (uint64_t{1} << 32) - 400;  // the tick wraps 400 cycles after the insert
    const FiveTuple dns = v4_tuple(IPPROTO_UDP, 0x0a000001, 5353, 0x08080808, 53);
    const int32_t i = table.insert(dns, symmetric_flow_hash(dns), ConnState::udp_unreplied, 0, start);
    REQUIRE(i >= 0);
    CHECK(table.entry(i).expires == 600);  // past the wrap
    CHECK(table.lifetime_tsc(table.entry(i), start) == 1000);
    CHECK(table.lifetime_tsc(table.entry(i), start + 999) == 1);
    for (uint64_t now : {start, start + 399, start + 400, start + 999}) {
        INFO("now " << now);
        CHECK_FALSE(table.expired(table.entry(i), now));
        CHECK(table.expire(now, 16) == 0);
    }
    CHECK(table.expired(table.entry(i), start + 1000));
    CHECK(table.lifetime_tsc(table.entry(i), start + 1000) == 0);
    CHECK(table.expire(start + 1000, 16) == 1);
    CHECK(table.size() == 0);
}

TEST_CASE("ConnTable: the expiry tick is coarse enough for a day and twice the longest timeout, fine below that",
          "[conntrack]") {
    constexpr uint64_t kHz = 2'900'000'000;  // a real TSC's rate
    ConnTimeouts timeouts;
    const FiveTuple flow = v4_tuple(IPPROTO_UDP, 0x0a000001, 5353, 0x08080808, 53);
    for (const uint32_t longest : {timeouts.tcp_established, 30u * 86400}) {
        INFO("longest timeout " << longest << " s");
        timeouts.tcp_established = longest;
        ConnTable table(unique_table_name(), 64, SOCKET_ID_ANY, timeouts, kHz);
        const unsigned shift = table.tick_shift();
        const uint64_t half_range = uint64_t{1} << (31 + shift);  // in TSC cycles
        CHECK(half_range >= std::max<uint64_t>(2ull * longest, 86400) * kHz);
        CHECK(half_range / 2 < std::max<uint64_t>(2ull * longest, 86400) * kHz);  // the smallest shift that does

        // An established connection lives its timeout to a tick's precision, from any point of the clock.
        const uint64_t now = 123'456'789'012'345;
        const int32_t i = table.insert(flow, symmetric_flow_hash(flow), ConnState::tcp_established, 0, now);
        REQUIRE(i >= 0);
        const uint64_t lifetime = uint64_t{longest} * kHz, tick = uint64_t{1} << shift;
        CHECK(table.lifetime_tsc(table.entry(i), now) + tick > lifetime);
        CHECK(table.lifetime_tsc(table.entry(i), now) <= lifetime + tick);
        CHECK_FALSE(table.expired(table.entry(i), now + lifetime - tick));
        CHECK(table.expired(table.entry(i), now + lifetime + tick));

        // A lifetime past what the clock can tell (a peer's sync event may carry any) is capped, never wrapped.
        table.set_lifetime(table.entry(i), now, uint64_t{UINT32_MAX} * kHz);
        CHECK_FALSE(table.expired(table.entry(i), now + half_range - 2 * tick));
        CHECK(table.expired(table.entry(i), now + half_range));
        table.remove(i);
    }
}

TEST_CASE("ConnTable: rule indexes past what an entry holds are stored as not counted", "[conntrack]") {
    ConnTable table(unique_table_name(), 64, SOCKET_ID_ANY, ConnTimeouts{}, kFakeTscHz);
    const uint32_t rules[] = {0, 65535, kConnRuleNotCounted - 1, kConnRuleNotCounted, UINT32_MAX};
    const uint32_t stored[] = {0, 65535, kConnRuleNotCounted - 1, kConnRuleNotCounted, kConnRuleNotCounted};
    for (std::size_t k = 0; k < std::size(rules); ++k) {
        const FiveTuple t = v4_tuple(IPPROTO_UDP, 0x0a000001, static_cast<uint16_t>(1000 + k), 0x08080808, 53);
        const int32_t i = table.insert(t, symmetric_flow_hash(t), ConnState::udp_unreplied, rules[k], 0);
        REQUIRE(i >= 0);
        CHECK(table.entry(i).rule_index == stored[k]);
        CHECK(table.entry(i).initiator_is_low == (source_is_low(t) ? 1u : 0u));  // its neighbour in the word
    }
}

TEST_CASE("ConnTable: expiry and removal reach IPv6 entries too", "[conntrack]") {
    ConnTimeouts timeouts;
    timeouts.udp_unreplied = 1;  // 1000 fake cycles
    ConnTable table(unique_table_name(), 512, SOCKET_ID_ANY, timeouts, kFakeTscHz, 256);
    std::mt19937_64 rng(8);
    std::vector<FiveTuple> flows;
    for (int i = 0; i < 400; ++i) {
        flows.push_back(random_tuple(rng, i % 2 ? IpFamily::ipv6 : IpFamily::ipv4, IPPROTO_UDP));
        REQUIRE(table.insert(flows.back(), symmetric_flow_hash(flows.back()), ConnState::udp_unreplied, 0, 0) >= 0);
    }
    REQUIRE(table.ipv6_size() == 200);
    for (int i = 0; i < 200; ++i) table.expire(1000, 8);  // 32 slots a call: several passes over 768 slots
    CHECK(table.size() == 0);
    CHECK(table.ipv6_size() == 0);
    for (int32_t p : lookup_all(table, flows)) CHECK(p == -1);
    // Every slot is free again: the IPv6 share takes 256 new ones.
    for (int i = 0; i < 256; ++i) {
        const FiveTuple t = random_tuple(rng, IpFamily::ipv6, IPPROTO_UDP);
        REQUIRE(table.insert(t, symmetric_flow_hash(t), ConnState::udp_unreplied, 0, 0) >= 0);
    }
    CHECK(table.ipv6_size() == 256);
}

TEST_CASE("ConnTable: the IPv6 share's default is a sixteenth of the capacity, at least 1024 (or the capacity)",
          "[conntrack]") {
    CHECK(ConnTable::default_ipv6_capacity(10'000'000) == 625'000);
    CHECK(ConnTable::default_ipv6_capacity(1'000'000) == 62'500);
    CHECK(ConnTable::default_ipv6_capacity(32'768) == 2048);
    CHECK(ConnTable::default_ipv6_capacity(16'384) == 1024);
    CHECK(ConnTable::default_ipv6_capacity(4096) == 1024);
    CHECK(ConnTable::default_ipv6_capacity(1024) == 1024);
    CHECK(ConnTable::default_ipv6_capacity(100) == 100);
    ConnTable table(unique_table_name(), 100'000, SOCKET_ID_ANY, ConnTimeouts{}, kFakeTscHz);
    CHECK(table.ipv6_capacity() == 6'250);
}

TEST_CASE("ConnTable: one expire call looks at no more than 4 x budget slots", "[conntrack]") {
    ConnTimeouts timeouts;
    timeouts.udp_unreplied = 1;
    ConnTable table(unique_table_name(), 1024, SOCKET_ID_ANY, timeouts, kFakeTscHz);
    std::vector<FiveTuple> flows;
    for (uint32_t i = 0; i < 1024; ++i) {
        flows.push_back(v4_tuple(IPPROTO_UDP, 0x0a000001, static_cast<uint16_t>(1000 + i), 0x08080808, 53));
        REQUIRE(table.insert(flows.back(), symmetric_flow_hash(flows.back()), ConnState::udp_unreplied, 0, 0) >= 0);
    }
    const std::vector<int32_t> index = lookup_all(table, flows);
    // All but one are refreshed: the one left is due at 1000, the others at 1900.
    int32_t due = -1;
    for (uint32_t i = 0; i < flows.size(); ++i) {
        if (i == 700) {
            due = index[i];
            continue;
        }
        table.track(index[i], flows[i], 0, 900);
    }
    // The cursor starts at slot 0 and moves 4 slots per call with budget 1: finding slot `due` takes
    // at least due / 4 calls.
    int calls = 0;
    while (table.size() == 1024 && calls < 100000) {
        table.expire(1000, 1);
        ++calls;
    }
    CHECK(table.size() == 1023);
    CHECK(calls >= due / 4);
    CHECK(calls <= due / 4 + 1);
    CHECK(lookup_all(table, {flows[700]})[0] == -1);
}

TEST_CASE("ConnTable: one million connections, memory per connection", "[conntrack]") {
    // 1,000,000 fills 95% of rte_hash's 2^20 bucket slots: plain cuckoo buckets. 2^20 exactly needs the
    // extendable buckets as well. Both stay within the test EAL's 1 GiB (one table at a time).
    for (uint32_t capacity : {1000000u, 1u << 20}) {
        INFO("capacity " << capacity);
        std::vector<FiveTuple> flows;
        flows.reserve(capacity);
        for (uint32_t i = 0; i < capacity; ++i) flows.push_back(nth_tuple(i));

        const std::size_t before = dpdk_heap_allocated();
        {
            ConnTable table(unique_table_name(), capacity, SOCKET_ID_ANY, ConnTimeouts{}, kFakeTscHz);
            const std::size_t bytes = dpdk_heap_allocated() - before;
            const double per_connection = static_cast<double>(bytes) / capacity;
            std::printf("conntrack: capacity %u: %zu bytes of DPDK memory, %.1f B per connection\n", capacity, bytes,
                        per_connection);
            // A 64 B slot (entry and TCP window) per key position, about 1.07 of them per connection (the IPv6 share,
            // a sixteenth, has its own), 32 B key slot, buckets and free-slot ring: about 116 B (130 B at 2^20, with
            // the extendable buckets).
            CHECK(per_connection <= (capacity == 1000000u ? 118.0 : 132.0));

            // One assertion per loop, not per connection: three million Catch2 assertions cost minutes under ASan.
            uint32_t refused = 0, lost = 0;
            for (uint32_t i = 0; i < capacity; ++i)
                refused += table.insert(flows[i], symmetric_flow_hash(flows[i]), ConnState::tcp_syn_sent, i, 0) < 0;
            REQUIRE(refused == 0);
            REQUIRE(table.size() == capacity);
            const std::vector<int32_t> found = lookup_all(table, reversed_all(flows));
            for (uint32_t i = 0; i < capacity; ++i) lost += found[i] < 0 || table.entry(found[i]).rule_index != i;
            REQUIRE(lost == 0);
        }
        CHECK(dpdk_heap_allocated() == before);  // the destructor gives it all back
    }
}

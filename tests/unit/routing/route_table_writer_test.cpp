// The route table's writer: a change goes into the copy no snapshot holds, the copy a snapshot holds is never
// written, the change is replayed onto the other copy at the next commit, a static route wins over a kernel route at
// one prefix, and a table that fills up is built again larger. Timings of one change in 1k and 100k routes are
// printed, not asserted (sluice_bench --only routes measures 1M).
#include <arpa/inet.h>

#include <chrono>
#include <cstdio>
#include <cstring>

#include <catch2/catch.hpp>
#include <rte_fib.h>
#include <rte_fib6.h>

#include "routing/route_table_writer.hpp"

using namespace sluice;

namespace {

IpAddress address(const char* text, IpFamily& family) {
    IpAddress a{};
    family = std::strchr(text, ':') ? IpFamily::ipv6 : IpFamily::ipv4;
    REQUIRE(inet_pton(family == IpFamily::ipv4 ? AF_INET : AF_INET6, text, a.bytes) == 1);
    return a;
}

CompiledRoute route(const char* prefix_text, uint8_t length, const char* hop, RouteSource source) {
    CompiledRoute r;
    r.prefix = {address(prefix_text, r.family), length};
    r.source = source;
    if (hop) {
        IpFamily family;
        r.hops.push_back({address(hop, family), 0, 1});
    } else {
        r.action = RouteAction::blackhole;
    }
    return r;
}

// The route a copy finds for text: "blackhole", the first next hop's address, or "" (no route).
std::string lookup(const RouteFib& fib, const char* text) {
    IpFamily family;
    const IpAddress a = address(text, family);
    uint64_t found = 0;
    if (family == IpFamily::ipv4) {
        if (!fib.v4) return "";
        uint32_t ip = rte_be_to_cpu_32(a.words[0]);
        rte_fib_lookup_bulk(fib.v4, &ip, &found, 1);
    } else {
        if (!fib.v6) return "";
        uint8_t ip[1][RTE_FIB6_IPV6_ADDR_SIZE];
        std::memcpy(ip[0], a.bytes, 16);
        rte_fib6_lookup_bulk(fib.v6, ip, &found, 1);
    }
    if (found == 0) return "";
    const CompiledRoute& group = fib.groups[fib.group_of[found - 1]];
    if (group.action == RouteAction::blackhole) return "blackhole";
    return std::string(route_source_name(group.source)) + " " + to_string(group.hops.at(0).address, group.family);
}

}  // namespace

TEST_CASE("route table writer: changes go into the copy no snapshot holds, then are replayed onto the other",
          "[routes][writer]") {
    RouteTableWriter writer;
    writer.replace_config_routes({route("198.51.100.0", 24, "192.0.2.11", RouteSource::config),
                                  route("2001:db8:5::", 48, "2001:db8:1::11", RouteSource::config)});
    std::shared_ptr<const RouteFib> a = writer.commit();
    REQUIRE(a);
    CHECK(writer.last_commit().rebuilt);
    CHECK(lookup(*a, "198.51.100.7") == "static 192.0.2.11");
    CHECK(lookup(*a, "2001:db8:5::1") == "static 2001:db8:1::11");

    // A kernel route: a new copy (the first spare is built whole); the published one is not written.
    writer.set_kernel_route(route("203.0.113.0", 24, "192.0.2.21", RouteSource::kernel));
    CHECK(writer.pending() == 1);
    std::shared_ptr<const RouteFib> b = writer.commit();
    REQUIRE(b);
    CHECK(b != a);
    CHECK(lookup(*b, "203.0.113.9") == "kernel 192.0.2.21");
    CHECK(lookup(*a, "203.0.113.9") == "");
    CHECK(writer.counts()[static_cast<std::size_t>(RouteSource::kernel)] == 1);
    CHECK(writer.counts()[static_cast<std::size_t>(RouteSource::config)] == 2);

    // a is retired (no snapshot holds it): the next change goes into it, with b's change replayed first.
    const RouteFib* a_address = a.get();
    a.reset();
    writer.set_kernel_route(route("2001:db8:7::", 48, "2001:db8:1::12", RouteSource::kernel));
    writer.remove_kernel_route(IpFamily::ipv4, route("203.0.113.0", 24, nullptr, RouteSource::kernel).prefix);
    writer.set_kernel_route(route("203.0.114.0", 24, "192.0.2.22", RouteSource::kernel));
    std::shared_ptr<const RouteFib> c = writer.commit();
    CHECK(c.get() == a_address);
    CHECK_FALSE(writer.last_commit().rebuilt);
    CHECK(writer.last_commit().changes == 3);
    CHECK(writer.last_commit().fib_ops == 4);  // b's add replayed, then this commit's add, delete and add
    CHECK(lookup(*c, "203.0.113.9") == "");
    CHECK(lookup(*c, "203.0.114.9") == "kernel 192.0.2.22");
    CHECK(lookup(*c, "2001:db8:7::1") == "kernel 2001:db8:1::12");
    CHECK(lookup(*c, "198.51.100.7") == "static 192.0.2.11");
    CHECK(lookup(*b, "203.0.113.9") == "kernel 192.0.2.21");  // b is still published: untouched

    // Nothing changed: the same copy, no commit work.
    b.reset();
    CHECK(writer.commit() == c);
    writer.replace_config_routes({route("198.51.100.0", 24, "192.0.2.11", RouteSource::config),
                                  route("2001:db8:5::", 48, "2001:db8:1::11", RouteSource::config)});
    CHECK(writer.pending() == 0);
    CHECK(writer.commit() == c);
}

TEST_CASE("route table writer: a static route wins over a kernel route at one prefix", "[routes][writer]") {
    RouteTableWriter writer;
    writer.set_kernel_route(route("198.51.100.0", 24, "192.0.2.21", RouteSource::kernel));
    writer.replace_config_routes({route("198.51.100.0", 24, "192.0.2.11", RouteSource::config)});
    auto fib = writer.commit();
    CHECK(lookup(*fib, "198.51.100.1") == "static 192.0.2.11");
    CHECK(writer.counts()[static_cast<std::size_t>(RouteSource::kernel)] == 0);
    fib.reset();
    writer.replace_config_routes({});  // the static route goes: the kernel's takes its place
    fib = writer.commit();
    CHECK(lookup(*fib, "198.51.100.1") == "kernel 192.0.2.21");
    CHECK(writer.counts()[static_cast<std::size_t>(RouteSource::kernel)] == 1);
    fib.reset();
    writer.remove_kernel_route(IpFamily::ipv4, route("198.51.100.0", 24, nullptr, RouteSource::kernel).prefix);
    CHECK_FALSE(writer.commit());  // no route left at all
}

TEST_CASE("route table writer: a copy a snapshot still holds is not written; a full copy is built again",
          "[routes][writer]") {
    RouteTableWriter writer;
    writer.replace_config_routes({route("198.51.100.0", 24, "192.0.2.11", RouteSource::config)});
    auto a = writer.commit();
    writer.set_kernel_route(route("203.0.113.0", 24, "192.0.2.21", RouteSource::kernel));
    auto b = writer.commit();
    writer.set_kernel_route(route("203.0.114.0", 24, "192.0.2.21", RouteSource::kernel));
    auto c = writer.commit();  // a is still held: a third copy
    CHECK(c != a);
    CHECK(c != b);
    CHECK(writer.last_commit().rebuilt);
    CHECK(lookup(*a, "203.0.113.1") == "");
    CHECK(lookup(*c, "203.0.113.1") == "kernel 192.0.2.21");
    CHECK(lookup(*c, "203.0.114.1") == "kernel 192.0.2.21");

    // Past the room a copy was made with (1024 routes beyond what it held): built again, larger, with all of them.
    a.reset();
    b.reset();
    for (uint32_t i = 0; i < 3000; ++i) {
        const std::string p = "10." + std::to_string(i >> 8) + "." + std::to_string(i & 0xff) + ".0";
        writer.set_kernel_route(route(p.c_str(), 24, "192.0.2.21", RouteSource::kernel));
    }
    c.reset();
    c = writer.commit();
    CHECK(writer.last_commit().rebuilt);
    CHECK(lookup(*c, "10.11.183.1") == "kernel 192.0.2.21");
    CHECK(lookup(*c, "198.51.100.1") == "static 192.0.2.11");
}

TEST_CASE("route table writer: the cost of one change (printed)", "[routes][writer]") {
    for (uint32_t count : {1000u, 100000u}) {
        RouteTableWriter writer;
        writer.keep_spare_ready();
        for (uint32_t i = 0; i < count; ++i) {
            const uint32_t network = (10u << 24) | (i << 8);
            char text[INET_ADDRSTRLEN];
            const uint32_t be = rte_cpu_to_be_32(network);
            inet_ntop(AF_INET, &be, text, sizeof text);
            writer.set_kernel_route(route(text, 24, i % 2 ? "192.0.2.21" : "192.0.2.22", RouteSource::kernel));
        }
        const auto t0 = std::chrono::steady_clock::now();
        auto fib = writer.commit();
        const double build_ms =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        double commit_ms[2];
        const char* next_hops[2] = {"192.0.2.23", "192.0.2.24"};
        for (int round = 0; round < 2; ++round) {
            writer.set_kernel_route(route("203.0.113.0", 24, "192.0.2.23", RouteSource::kernel));
            writer.remove_kernel_route(IpFamily::ipv4, route("203.0.113.0", 24, nullptr, RouteSource::kernel).prefix);
            writer.set_kernel_route(route("198.51.100.0", 24, next_hops[round], RouteSource::kernel));
            fib.reset();  // the snapshot that held the spare retired
            fib = writer.commit();
            commit_ms[round] = writer.last_commit().milliseconds;
            CHECK_FALSE(writer.last_commit().rebuilt);
        }
        std::printf("route table writer: %u routes: built in %.1f ms (both copies); one route changed: committed in "
                    "%.3f ms, then %.3f ms (replaying the other copy's change too)\n",
                    count, build_ms, commit_ms[0], commit_ms[1]);
        CHECK(lookup(*fib, "198.51.100.1") == "kernel 192.0.2.24");
    }
}

// Section routes: forward_burst with the route table (rte_fib/rte_fib6 bulk lookups, a default route and 1k or 1M
// random IPv4 prefixes of /8-/24, or 100k IPv6 ones of /20-/48, behind three ECMP next hops) beside forward_burst by
// the ingress port's forward entry; then, for IPv4, what a kernel route change costs in that table (RouteTableWriter):
// one route and a burst of 10k written into the spare copy and resolved into a snapshot (the time to visible, less the
// publication's grace period), and the worker's cycles per packet on its first pass over the copy it was just given,
// beside its steady state.
#include <cstdio>
#include <cstring>
#include <ctime>
#include <memory>

#include <rte_cycles.h>
#include <rte_lcore.h>

#include "control/snapshot_builder.hpp"
#include "pipeline/forward_stage.hpp"
#include "routing/route_table_writer.hpp"
#include "sections.hpp"
#include "services.hpp"
#include "traffic.hpp"

namespace sluice::bench {
namespace {

IpAddress address_of(IpFamily family, uint32_t v4_host_order, uint8_t v6_last) {
    if (family == IpFamily::ipv4) return IpAddress::from_v4(rte_cpu_to_be_32(v4_host_order));
    uint8_t bytes[16] = {0x20, 0x01, 0x0d, 0xb8, 0xff, 0xff};  // 2001:db8:ffff::/64
    bytes[15] = v6_last;
    return IpAddress::from_v6(bytes);
}

// A random prefix as in a full BGP table: IPv4 /8-/24, IPv6 in 2000::/3 of /20-/48.
Prefix random_prefix(IpFamily family, Rng& rng) {
    const bool v4 = family == IpFamily::ipv4;
    const auto length = static_cast<uint8_t>(v4 ? uniform(rng, 8, 24) : uniform(rng, 20, 48));
    uint8_t bytes[16];
    for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
    if (!v4) bytes[0] = static_cast<uint8_t>(0x20 | (bytes[0] & 0x1f));
    for (unsigned bit = length; bit < 128; ++bit) bytes[bit / 8] &= static_cast<uint8_t>(~(0x80u >> (bit % 8)));
    if (!v4) return {IpAddress::from_v6(bytes), length};
    uint32_t network_order;
    std::memcpy(&network_order, bytes, 4);
    return {IpAddress::from_v4(network_order), length};
}

// A port with 192.0.2.1/24 and 2001:db8:ffff::1/64, the default route of the family and `count` random prefixes via
// .11-.13 (::11-::13), all resolved.
std::unique_ptr<Snapshot> routed_snapshot(const Dpdk& d, IpFamily family, uint32_t count, Rng& rng,
                                          RouteTableWriter& writer, LiveState& live) {
    Config config;
    config.ports.push_back(PortSpec{.name = "null"});
    config.port_addresses.push_back(PortAddress{.port = "null",
                                                .address = address_of(family, 0xc0000201u, 1),
                                                .family = family,
                                                .length = static_cast<uint8_t>(family == IpFamily::ipv4 ? 24 : 64)});
    std::vector<RouteNextHop> hops;
    for (uint32_t last : {11u, 12u, 13u})
        hops.push_back({address_of(family, 0xc0000200u | last, static_cast<uint8_t>(last)), "null", 1});
    config.routes.push_back(RouteConfig{.family = family, .next_hops = hops});  // the default route
    for (uint32_t i = 0; i < count; ++i)
        config.routes.push_back(RouteConfig{.prefix = random_prefix(family, rng), .family = family, .next_hops = hops});
    live.neighbours = [](uint16_t, IpFamily f, const IpAddress& a) -> std::optional<rte_ether_addr> {
        return rte_ether_addr{{0x02, 0, 0, 0, 0x0b, f == IpFamily::ipv4 ? a.bytes[3] : a.bytes[15]}};
    };
    live.routes = &writer;
    writer.keep_spare_ready();
    const std::vector<PortIdentity> ports{PortIdentity{"null", d.port, d.port_mac}};
    try {
        return build_snapshot(config, ports, 1, static_cast<int>(rte_socket_id()), 1, live);
    } catch (const std::exception& e) {
        fail(std::string("build_snapshot (routes): ") + e.what());
    }
}

// The flows with random global IPv6 addresses (2000::/3) in place of their IPv4 ones.
std::vector<FiveTuple> as_ipv6(std::vector<FiveTuple> flows, Rng& rng) {
    for (FiveTuple& f : flows) {
        for (IpAddress* a : {&f.src, &f.dst}) {
            uint8_t bytes[16];
            for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
            bytes[0] = static_cast<uint8_t>(0x20 | (bytes[0] & 0x1f));
            *a = IpAddress::from_v6(bytes);
        }
        f.family = IpFamily::ipv6;
    }
    return flows;
}

double thread_cpu_seconds() {
    timespec t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

}  // namespace

void section_routes(Dpdk& d, const Options& o, Table& table) {
    const auto forwarded = make_snapshot(d, {}, false, false);  // the forward entry of the port
    LcoreContext& ctx = *d.ctx;
    Rng rng(o.seed);
    const std::vector<FiveTuple> flows_v4 = distinct_flows(4096, rng, 70);
    const std::vector<FiveTuple> flows_v6 = as_ipv6(flows_v4, rng);
    const std::vector<PacketSpec> stream_v4 = random_packets(flows_v4, o.packets, rng);
    const std::vector<PacketSpec> stream_v6 = random_packets(flows_v6, o.packets, rng);
    struct Case {
        IpFamily family;
        uint32_t count;
        const char* label;
    };
    for (const Case& c : {Case{IpFamily::ipv4, 1000, "1k"}, Case{IpFamily::ipv4, 1000000, "1M"},
                          Case{IpFamily::ipv6, 100000, "v6-100k"}}) {
        const bool v4 = c.family == IpFamily::ipv4;
        const std::vector<PacketSpec>& stream = v4 ? stream_v4 : stream_v6;
        const std::string label = c.label;
        const uint64_t t0 = rte_rdtsc();
        const double cpu0 = thread_cpu_seconds();
        RouteTableWriter writer(static_cast<int>(rte_socket_id()));
        LiveState live;
        std::unique_ptr<Snapshot> routed = routed_snapshot(d, c.family, c.count, rng, writer, live);
        // The thread's CPU time too: on a shared machine the wall time is mostly other processes'.
        std::printf("routes: %u IPv%c prefixes built in %.2f s, %.2f s of CPU (both copies)\n", c.count, v4 ? '4' : '6',
                    seconds_since(d, t0), thread_cpu_seconds() - cpu0);
        const Stage by_forward = [&](rte_mbuf** pkts, uint16_t n) -> uint16_t {
            forward_burst(ctx, *forwarded, pkts, n);
            return 0;
        };
        const Stage by_route = [&](rte_mbuf** pkts, uint16_t n) -> uint16_t {
            forward_burst(ctx, *routed, pkts, n);
            return 0;
        };
        const auto drops_before = drops_of(d);
        auto r = interleaved(o.reps, {[&] { return timed_pass(d, stream, by_forward); },
                                      [&] { return timed_pass(d, stream, by_route); }});
        const std::string drops = drops_since(d, drops_before);
        table.add(Row{.id = "routes-" + label,
                      .measurement = "forward_burst by the route table, " + label.substr(v4 ? 0 : 3) +
                                     (v4 ? " IPv4" : " IPv6") + " routes, ECMP over 3",
                      .unit = "cycles/pkt",
                      .reference = "forward_burst by the port's forward entry",
                      .ref = stat_of(r[0]),
                      .sluice = stat_of(r[1]),
                      .note = drops.empty() ? "" : "routes " + label + ": drops " + drops});
        if (!v4) continue;  // kernel route changes are measured on the IPv4 tables
        const double steady = stat_of(r[1]).median;

        // Kernel route changes: written into the spare copy, the snapshot rebuilt around it (as the daemon does).
        const std::vector<PortIdentity> ports{PortIdentity{"null", d.port, d.port_mac}};
        Config config;
        config.ports.push_back(PortSpec{.name = "null"});
        const auto kernel_route = [&](uint32_t network, uint8_t last) {
            CompiledRoute route{.family = IpFamily::ipv4,
                                .prefix = {IpAddress::from_v4(rte_cpu_to_be_32(network)), 24},
                                .source = RouteSource::kernel};
            route.hops.push_back({IpAddress::from_v4(rte_cpu_to_be_32(0xc0000200u | last)), d.port, 1});
            return route;
        };
        const auto visible_ms = [&](auto&& change) {
            const uint64_t started = rte_rdtsc();
            change();
            routed = with_routes(*routed, writer.commit(), config, ports, static_cast<int>(rte_socket_id()), live);
            return seconds_since(d, started) * 1000;
        };
        std::vector<double> one_ms, burst_ms, first_pass;
        bool rebuilt = false;
        for (uint32_t rep = 0; rep < 3; ++rep) {  // new prefixes each time: rte_fib adds, not only new next hops
            one_ms.push_back(visible_ms([&] { writer.set_kernel_route(kernel_route(0xcb007100u + (rep << 8), 11)); }));
            rebuilt |= writer.last_commit().rebuilt;
            first_pass.push_back(timed_pass(d, stream, by_route));  // the worker's first pass over the new copy
            burst_ms.push_back(visible_ms([&] {
                for (uint32_t i = 0; i < 10000; ++i)
                    writer.set_kernel_route(kernel_route(((100 + rep) << 24) | (i << 8), 12));
            }));
            rebuilt |= writer.last_commit().rebuilt;
        }
        table.add(
            Row{.id = "routes-" + label + "-change",
                .measurement = "one kernel route changed in " + label + " routes, until a snapshot holds it",
                .unit = "ms",
                .reference = "a burst of 10k kernel routes",
                .ref = stat_of(burst_ms),
                .sluice = stat_of(one_ms),
                .note = rebuilt ? "routes " + label + ": a copy was built whole (the burst outgrew its room)" : ""});
        table.add(Row{.id = "routes-" + label + "-swap",
                      .measurement = "forward_burst's first pass over a copy just swapped in, " + label + " routes",
                      .unit = "cycles/pkt",
                      .reference = "steady state",
                      .ref = constant_stat(steady),
                      .sluice = stat_of(first_pass)});
    }
    check_pool(d, "routes");
}

}  // namespace sluice::bench

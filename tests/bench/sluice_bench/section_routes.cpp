// Section routes: forward_burst with the route table (rte_fib bulk lookups, a default route and 1k or 1M random
// IPv4 prefixes of /8 to /24 behind three ECMP next hops) beside forward_burst by the ingress port's forward entry.
#include <cstdio>
#include <memory>

#include <rte_cycles.h>
#include <rte_lcore.h>

#include "control/snapshot_builder.hpp"
#include "pipeline/forward_stage.hpp"
#include "sections.hpp"
#include "services.hpp"
#include "traffic.hpp"

namespace sluice::bench {
namespace {

// A port with 192.0.2.1/24, the default route and `count` random prefixes via 192.0.2.11-13, all resolved.
std::unique_ptr<Snapshot> routed_snapshot(const Dpdk& d, uint32_t count, Rng& rng) {
    Config config;
    config.ports.push_back(PortSpec{.name = "null"});
    config.port_addresses.push_back(PortAddress{.port = "null",
                                                .address = IpAddress::from_v4(rte_cpu_to_be_32(0xc0000201u)),
                                                .family = IpFamily::ipv4,
                                                .length = 24});
    std::vector<RouteNextHop> hops;
    for (uint32_t last : {11u, 12u, 13u})
        hops.push_back({IpAddress::from_v4(rte_cpu_to_be_32(0xc0000200u | last)), "null", 1});
    config.routes.push_back(RouteConfig{.family = IpFamily::ipv4, .next_hops = hops});  // 0.0.0.0/0
    for (uint32_t i = 0; i < count; ++i) {
        const uint8_t length = static_cast<uint8_t>(uniform(rng, 8, 24));  // as a full BGP table: none longer
        const uint32_t address = static_cast<uint32_t>(rng()) & (length ? ~0u << (32 - length) : 0u);
        config.routes.push_back(RouteConfig{.prefix = {IpAddress::from_v4(rte_cpu_to_be_32(address)), length},
                                            .family = IpFamily::ipv4,
                                            .next_hops = hops});
    }
    LiveState live;
    live.neighbours = [](uint16_t, IpFamily, const IpAddress& a) -> std::optional<rte_ether_addr> {
        return rte_ether_addr{{0x02, 0, 0, 0, 0x0b, a.bytes[3]}};
    };
    const std::vector<PortIdentity> ports{PortIdentity{"null", d.port, d.port_mac}};
    try {
        return build_snapshot(config, ports, 1, static_cast<int>(rte_socket_id()), 1, live);
    } catch (const std::exception& e) {
        fail(std::string("build_snapshot (routes): ") + e.what());
    }
}

}  // namespace

void section_routes(Dpdk& d, const Options& o, Table& table) {
    const auto forwarded = make_snapshot(d, {}, false, false);  // the forward entry of the port
    LcoreContext& ctx = *d.ctx;
    Rng rng(o.seed);
    const std::vector<FiveTuple> flows = distinct_flows(4096, rng, 70);
    const std::vector<PacketSpec> stream = random_packets(flows, o.packets, rng);
    for (const uint32_t count : {1000u, 1000000u}) {
        const uint64_t t0 = rte_rdtsc();
        const auto routed = routed_snapshot(d, count, rng);
        std::printf("routes: %u prefixes built in %.2f s\n", count, seconds_since(d, t0));
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
        const std::string label = count >= 1000000 ? "1M" : "1k";
        table.add(Row{.id = "routes-" + label,
                      .measurement = "forward_burst by the route table, " + label + " IPv4 routes, ECMP over 3",
                      .unit = "cycles/pkt",
                      .reference = "forward_burst by the port's forward entry",
                      .ref = stat_of(r[0]),
                      .sluice = stat_of(r[1]),
                      .note = drops.empty() ? "" : "routes " + label + ": drops " + drops});
    }
    check_pool(d, "routes");
}

}  // namespace sluice::bench

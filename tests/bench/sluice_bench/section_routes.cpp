// Section routes: forward_burst with the route table (rte_fib/rte_fib6 bulk lookups, a default route and 1k or 1M
// random IPv4 prefixes of /8-/24, or 100k IPv6 ones of /20-/48, behind three ECMP next hops) beside forward_burst by
// the ingress port's forward entry.
#include <cstdio>
#include <cstring>
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
std::unique_ptr<Snapshot> routed_snapshot(const Dpdk& d, IpFamily family, uint32_t count, Rng& rng) {
    Config config;
    config.ports.push_back(PortSpec{.name = "null"});
    config.port_addresses.push_back(PortAddress{.port = "null",
                                                .address = address_of(family, 0xc0000201u, 1),
                                                .family = family,
                                                .length = uint8_t(family == IpFamily::ipv4 ? 24 : 64)});
    std::vector<RouteNextHop> hops;
    for (uint32_t last : {11u, 12u, 13u})
        hops.push_back({address_of(family, 0xc0000200u | last, static_cast<uint8_t>(last)), "null", 1});
    config.routes.push_back(RouteConfig{.family = family, .next_hops = hops});  // the default route
    for (uint32_t i = 0; i < count; ++i) {
        config.routes.push_back(RouteConfig{.prefix = random_prefix(family, rng), .family = family, .next_hops = hops});
    }
    LiveState live;
    live.neighbours = [](IpFamily f, const IpAddress& a) -> std::optional<rte_ether_addr> {
        return rte_ether_addr{{0x02, 0, 0, 0, 0x0b, f == IpFamily::ipv4 ? a.bytes[3] : a.bytes[15]}};
    };
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
        const uint64_t t0 = rte_rdtsc();
        const auto routed = routed_snapshot(d, c.family, c.count, rng);
        std::printf("routes: %u IPv%c prefixes built in %.2f s\n", c.count, v4 ? '4' : '6', seconds_since(d, t0));
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
        const std::string count = std::string(c.label).substr(v4 ? 0 : 3);
        table.add(Row{.id = std::string("routes-") + c.label,
                      .measurement = "forward_burst by the route table, " + count + (v4 ? " IPv4" : " IPv6") +
                                     " routes, ECMP over 3",
                      .unit = "cycles/pkt",
                      .reference = "forward_burst by the port's forward entry",
                      .ref = stat_of(r[0]),
                      .sluice = stat_of(r[1]),
                      .note = drops.empty() ? "" : std::string("routes ") + c.label + ": drops " + drops});
    }
    check_pool(d, "routes");
}

}  // namespace sluice::bench

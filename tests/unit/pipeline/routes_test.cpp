// The route table through the whole data path (PipelineLab): longest-prefix match, ECMP by the flow's symmetric
// hash over resolved next hops, blackhole, reject and no route (ICMP unreachable), connected and host routes, the
// in-port's forward entry taking precedence, and a reload that changes a route under traffic.
#include <catch2/catch.hpp>

#include <map>
#include <set>

#include "pipeline/pipeline_lab.hpp"

using namespace sluice;
using namespace sluice::test;

namespace {

constexpr const char* kPorts = R"(
ports:
  - {name: lan, device: ring_lan, addresses: [10.0.0.1/24, "2001:db8::1/64"]}
  - {name: wan, device: ring_wan, addresses: [192.0.2.1/24, "2001:db8:1::1/64"]}
lcores: [{id: 1, roles: [rx, worker]}]
)";

constexpr const char* kRoutes = R"(
routes:
  - {prefix: 198.51.100.0/24, next_hops: [192.0.2.11]}
  - {prefix: 198.51.100.128/25, next_hops: [{address: 192.0.2.12, port: wan}]}
  - {prefix: 203.0.113.0/24, next_hops: [192.0.2.21, 192.0.2.22, 192.0.2.23]}
  - {prefix: 100.64.0.0/16, type: blackhole}
  - {prefix: 100.65.0.0/16, type: reject}
  - {prefix: "2001:db8:5::/48", next_hops: ["2001:db8:1::11"]}
)";

// The next hops of kRoutes resolved, each at 02:00:00:00:0b:<its last address byte>.
void resolve_all(PipelineLab& lab) {
    for (const char* a : {"192.0.2.11", "192.0.2.12", "192.0.2.21", "192.0.2.22", "192.0.2.23"})
        lab.set_neighbour(a, mac(static_cast<uint8_t>(std::stoi(std::string(a).substr(8)))));
    lab.set_neighbour("2001:db8:1::11", mac(0x11));
}

FrameSpec udp(const std::string& src, uint16_t sport, const std::string& dst) {
    FrameSpec f = udp_spec("", sport, "", 53);
    f.src = src, f.dst = dst;
    return f;
}

uint64_t drops(PipelineLab& lab, DropReason reason) { return lab.drops(reason); }

}  // namespace

TEST_CASE("routes: the longest prefix wins, the TTL is decremented, IPv6 too", "[routes][pipeline]") {
    PipelineLab lab(std::string(kPorts) + kRoutes);
    resolve_all(lab);
    auto out = lab.exchange("lan", {frame(udp("10.0.0.5", 1000, "198.51.100.5"))}, "wan");
    REQUIRE(out.size() == 1);
    SeenFrame seen = read_frame(out[0]);
    CHECK(seen.dst_mac_last == 11);
    CHECK(seen.ttl == 63);
    CHECK(seen.checksums_ok);
    out = lab.exchange("lan", {frame(udp("10.0.0.5", 1000, "198.51.100.200"))}, "wan");
    REQUIRE(out.size() == 1);
    CHECK(read_frame(out[0]).dst_mac_last == 12);
    out = lab.exchange("lan", {frame(udp("2001:db8::5", 1000, "2001:db8:5::9"))}, "wan");
    REQUIRE(out.size() == 1);
    CHECK(read_frame(out[0]).dst_mac_last == 0x11);
    CHECK(read_frame(out[0]).ttl == 63);
}

TEST_CASE("routes: an unresolved next hop drops as neighbour_unresolved; host and connected routes",
          "[routes][pipeline]") {
    PipelineLab lab(std::string(kPorts) + kRoutes);
    CHECK(lab.exchange("lan", {frame(udp("10.0.0.5", 1000, "198.51.100.5"))}, "wan").empty());
    CHECK(drops(lab, DropReason::neighbour_unresolved) == 1);
    resolve_all(lab);
    // A next hop's own address: its host route.
    auto out = lab.exchange("lan", {frame(udp("10.0.0.5", 1000, "192.0.2.21"))}, "wan");
    REQUIRE(out.size() == 1);
    CHECK(read_frame(out[0]).dst_mac_last == 21);
    // Another host on a connected link: dropped, and the control thread asked to resolve it (glean) ...
    lab.dataplane().take_neighbour_events();
    CHECK(lab.exchange("lan", {frame(udp("10.0.0.5", 1000, "192.0.2.99"))}, "wan").empty());
    CHECK(drops(lab, DropReason::neighbour_unresolved) == 2);
    CHECK(drops(lab, DropReason::no_route) == 0);
    const std::vector<NeighbourEvent> asked = lab.dataplane().take_neighbour_events();
    REQUIRE(asked.size() == 1);
    CHECK(to_string(asked[0].address, asked[0].family) == "192.0.2.99");
    CHECK(asked[0].port == lab.port_id("wan"));
    CHECK(rte_is_zero_ether_addr(&asked[0].mac));
    // ... which, once resolved, reaches it.
    lab.add_connected_host("192.0.2.99", "wan", mac(99));
    out = lab.exchange("lan", {frame(udp("10.0.0.5", 1000, "192.0.2.99"))}, "wan");
    REQUIRE(out.size() == 1);
    CHECK(read_frame(out[0]).dst_mac_last == 99);
}

TEST_CASE("routes: ECMP spreads flows over three next hops evenly, each flow stays, a dead next hop leaves",
          "[routes][pipeline]") {
    PipelineLab lab(std::string(kPorts) + kRoutes);
    resolve_all(lab);
    constexpr int kFlows = 3000;
    std::map<int, uint8_t> hop_of;  // flow -> next hop's MAC
    std::map<uint8_t, int> flows_on;
    for (int round = 0; round < 2; ++round) {
        for (int base = 0; base < kFlows; base += 500) {
            std::vector<Bytes> frames;
            for (int f = base; f < base + 500; ++f) {
                const std::string src = "10.0.0." + std::to_string(2 + f % 200);
                const std::string dst = "203.0.113." + std::to_string(1 + f % 250);
                frames.push_back(frame(udp(src, static_cast<uint16_t>(1024 + f), dst)));
            }
            const auto out = lab.exchange("lan", frames, "wan");
            REQUIRE(out.size() == frames.size());
            for (std::size_t k = 0; k < out.size(); ++k) {
                const int flow = read_frame(out[k]).src_port - 1024;
                const uint8_t hop = read_frame(out[k]).dst_mac_last;
                if (round == 0) {
                    hop_of[flow] = hop;
                    ++flows_on[hop];
                } else {
                    CHECK(hop_of[flow] == hop);  // the same flow, the same next hop
                }
            }
        }
    }
    REQUIRE(flows_on.size() == 3);
    for (const auto& [hop, n] : flows_on) {
        INFO("next hop " << int{hop} << " took " << n << " flows");
        CHECK(n >= kFlows / 3 * 0.9);
        CHECK(n <= kFlows / 3 * 1.1);
    }
    // 192.0.2.23 stops answering ARP: its flows move, the others' stay.
    lab.set_neighbour("192.0.2.23", std::nullopt);
    std::vector<Bytes> frames;
    for (int f = 0; f < 500; ++f)
        frames.push_back(frame(udp("10.0.0." + std::to_string(2 + f % 200), static_cast<uint16_t>(1024 + f),
                                   "203.0.113." + std::to_string(1 + f % 250))));
    const auto out = lab.exchange("lan", frames, "wan");
    REQUIRE(out.size() == frames.size());
    for (const Bytes& b : out) {
        const SeenFrame seen = read_frame(b);
        CHECK(seen.dst_mac_last != 23);
        if (hop_of[seen.src_port - 1024] != 23) CHECK(seen.dst_mac_last == hop_of[seen.src_port - 1024]);
    }
}

TEST_CASE("routes: blackhole drops, reject and no route answer with ICMP unreachable", "[routes][pipeline]") {
    PipelineLab lab(std::string(kPorts) + kRoutes);
    resolve_all(lab);
    lab.send("lan", {frame(udp("10.0.0.5", 1000, "100.64.1.1"))});
    lab.run();
    CHECK(lab.take_sent("lan").empty());
    CHECK(lab.take_sent("wan").empty());
    CHECK(drops(lab, DropReason::route_blackhole) == 1);

    const auto icmp_back = [&](const std::string& src, const std::string& dst) {
        lab.send("lan", {frame(udp(src, 1000, dst))});
        lab.run();
        CHECK(lab.take_sent("wan").empty());
        return lab.take_sent("lan");
    };
    auto back = icmp_back("10.0.0.5", "100.65.1.1");
    REQUIRE(back.size() == 1);
    SeenFrame seen = read_frame(back[0]);
    CHECK(seen.proto == IPPROTO_ICMP);
    CHECK(seen.src == "10.0.0.1");  // from the ingress port's own address
    CHECK(seen.dst == "10.0.0.5");
    CHECK(back[0][14 + 20] == 3);
    CHECK(back[0][14 + 21] == 13);  // administratively prohibited
    CHECK(drops(lab, DropReason::route_reject) == 1);

    back = icmp_back("10.0.0.5", "8.8.8.8");
    REQUIRE(back.size() == 1);
    CHECK(back[0][14 + 20] == 3);
    CHECK(back[0][14 + 21] == 0);  // net unreachable
    CHECK(drops(lab, DropReason::no_route) == 1);

    back = icmp_back("2001:db8::5", "2001:db8:77::1");
    REQUIRE(back.size() == 1);
    seen = read_frame(back[0]);
    CHECK(seen.proto == IPPROTO_ICMPV6);
    CHECK(seen.src == "2001:db8::1");
    CHECK(seen.checksums_ok);
    CHECK(back[0][14 + 40] == 1);
    CHECK(back[0][14 + 41] == 0);  // no route to destination
    CHECK(drops(lab, DropReason::no_route) == 2);
    CHECK(lab.totals().unreachables_sent == 3);
}

TEST_CASE("routes: a port's forward entry takes precedence over the table", "[routes][pipeline]") {
    PipelineLab lab(std::string(kPorts) + kRoutes + R"(
forward:
  - {from: wan, to: lan, next_hop_mac: "02:00:00:00:0a:01"}
)");
    resolve_all(lab);
    auto out = lab.exchange("wan", {frame(udp("198.51.100.5", 53, "8.8.8.8"))}, "lan");
    REQUIRE(out.size() == 1);
    CHECK(read_frame(out[0]).dst_mac_last == 0x01);
    out = lab.exchange("lan", {frame(udp("10.0.0.5", 1000, "198.51.100.5"))}, "wan");
    REQUIRE(out.size() == 1);
    CHECK(read_frame(out[0]).dst_mac_last == 11);
}

TEST_CASE("routes: a reload that changes a route under traffic loses nothing", "[routes][pipeline]") {
    PipelineLab lab(std::string(kPorts) + kRoutes);
    resolve_all(lab);
    std::string changed = kRoutes;
    changed.replace(changed.find("next_hops: [192.0.2.11]"), 23, "next_hops: [192.0.2.21]");
    constexpr int kPackets = 2000;
    std::vector<Bytes> frames;
    for (int i = 0; i < kPackets; ++i)
        frames.push_back(frame(udp("10.0.0." + std::to_string(2 + i % 200), static_cast<uint16_t>(2000 + i % 300),
                                   "198.51.100." + std::to_string(1 + i % 100))));
    std::map<uint8_t, int> by_hop;
    for (int sent = 0; sent < kPackets; sent += 250) {
        lab.send("lan", std::vector<Bytes>(frames.begin() + sent, frames.begin() + sent + 250));
        lab.dataplane().run_inline(lab.now_tsc());  // part of it moves; the rest waits in the rings
        if (sent == kPackets / 2) lab.reload(std::string(kPorts) + changed);
        lab.run();
        for (const Bytes& b : lab.take_sent("wan")) ++by_hop[read_frame(b).dst_mac_last];
    }
    CHECK(by_hop[11] + by_hop[21] == kPackets);
    CHECK(by_hop[11] >= kPackets / 2);
    CHECK(by_hop[21] > 0);
    CHECK(lab.totals().total_drops() == 0);
}

TEST_CASE("routes: a nat backend behind a router, and its client behind another, by the same lookup",
          "[routes][pipeline]") {
    PipelineLab lab(std::string(kPorts) + R"(
routes:
  - {prefix: 0.0.0.0/0, next_hops: [10.0.0.254]}
  - {prefix: 172.16.0.0/16, next_hops: [192.0.2.11]}
load_balancer:
  nat_pool: [192.0.2.100]
services:
  - {name: web, vip: 10.0.0.80, port: 80, protocol: tcp, mode: nat, backends: [{address: 172.16.0.10, port: 8080}]}
)");
    lab.set_neighbour("10.0.0.254", mac(0xfe));
    lab.set_neighbour("192.0.2.11", mac(11));
    auto out = lab.exchange("lan", {frame(tcp_spec("198.18.0.5", 40000, "10.0.0.80", 80))}, "wan");
    REQUIRE(out.size() == 1);
    SeenFrame seen = read_frame(out[0]);
    CHECK(seen.dst == "172.16.0.10");
    CHECK(seen.src == "192.0.2.100");
    CHECK(seen.dst_mac_last == 11);  // the router towards the backend
    FrameSpec reply = tcp_spec("172.16.0.10", 8080, "192.0.2.100", seen.src_port, kSyn | kAck);
    reply.ack = 1001;
    out = lab.exchange("wan", {frame(reply)}, "lan");
    REQUIRE(out.size() == 1);
    seen = read_frame(out[0]);
    CHECK(seen.src == "10.0.0.80");
    CHECK(seen.dst == "198.18.0.5");
    CHECK(seen.dst_mac_last == 0xfe);  // back to the client by the default route
    const std::vector<std::string> table = describe_routes(lab.snapshot(), lab.ports());
    CHECK(std::find(table.begin(), table.end(), "172.16.0.0/16 static via 192.0.2.11 on wan (02:00:00:00:0b:0b)") !=
          table.end());
    CHECK(std::find(table.begin(), table.end(), "10.0.0.0/24 connected on lan") != table.end());
}

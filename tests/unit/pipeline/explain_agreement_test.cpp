// explain (sluicectl explain) against the data path: thousands of random first packets of new flows go through
// sluice (PipelineLab: parse, early drop, the stateful stage, forwarding), and for each one what happened must be
// what decide_new_packet said on the same snapshot: dropped under the same reason, rejected, answered with a SYN
// cookie, or forwarded, to the backend it named.
#include <catch2/catch.hpp>

#include <random>
#include <set>

#include "control/explain.hpp"
#include "pipeline/pipeline_lab.hpp"

using namespace sluice;
using namespace sluice::test;

namespace {

const char* kConfig = R"(
ports:
  - {name: client, device: ring_client, addresses: [203.0.113.1/24]}
  - {name: server, device: ring_server, addresses: [10.9.0.1/24]}
lcores: [{id: 1, roles: [rx, worker]}]
forward:
  - {from: client, to: server, next_hop_mac: "02:00:00:00:00:0b"}
  - {from: server, to: client, next_hop_mac: "02:00:00:00:00:0a"}
firewall:
  prefix_sets:
    - {name: bad, prefixes: [198.51.100.0/25], early_drop: true}
  table_size: 65536
  default: deny
  rules:
    - {name: no-telnet, protocol: tcp, destination_ports: 23, action: reject}
    - {name: quarantine, source: 198.18.0.0/24, action: deny}
    - {name: web, protocol: tcp, destination_ports: [80, 443, 8443], action: allow}
    - {name: dns, protocol: udp, destination_ports: 53, action: allow}
    - {name: high, protocol: udp, source: 198.18.0.0/16, destination_ports: 1024-65535, action: allow}
    - {name: inside-out, in_ports: [server], action: allow}
load_balancer:
  nat_pool: [10.1.0.100]
  tunnel_source: [10.1.0.1]
services:
  - name: web
    vip: 192.0.2.100
    port: 80
    protocol: tcp
    mode: nat
    backends: [{address: 10.1.0.11, port: 8080}, {address: 10.1.0.12, port: 8080}, {address: 10.1.0.13, port: 8080}]
  - name: dns
    vip: 192.0.2.100
    port: 53
    protocol: udp
    mode: dsr
    backends: [{address: 10.1.0.21, mac: "02:00:00:00:03:21"}, {address: 10.1.0.22, mac: "02:00:00:00:03:22"}]
  - name: tls
    vip: 192.0.2.101
    port: 443
    protocol: tcp
    mode: tunnel
    backends: [{address: 10.1.0.31}, {address: 10.1.0.32}]
  - name: guarded
    vip: 192.0.2.101
    port: 8443
    protocol: tcp
    mode: nat
    syn_proxy: true
    backends: [{address: 10.1.0.41, port: 8443}]
)";

struct Flow {
    FrameSpec spec;
    std::string in_port;
};

// Sources and destinations drawn so that every branch of the decision comes up: early-drop and quarantined
// sources, VIPs on served and unserved ports, the pool address, the ports' own addresses, and plain hosts.
Flow random_flow(std::mt19937& rng) {
    const auto pick = [&rng](auto const& options) { return options[rng() % std::size(options)]; };
    static const char* const kSources[] = {"198.51.100.", "198.18.0.", "198.18.5.", "203.0.113.", "10.9.0."};
    static const char* const kDestinations[] = {"192.0.2.100", "192.0.2.101", "10.1.0.100", "203.0.113.1",
                                                "10.9.0.1",    "198.18.9.9",  "10.2.3.4"};
    static const uint16_t kPorts[] = {23, 53, 80, 81, 443, 8443, 2000, 40000};
    Flow f;
    f.spec.src = std::string(pick(kSources)) + std::to_string(2 + rng() % 250);
    f.spec.dst = pick(kDestinations);
    f.spec.proto = rng() % 2 ? IPPROTO_TCP : IPPROTO_UDP;
    f.spec.src_port = static_cast<uint16_t>(1024 + rng() % 60000);
    f.spec.dst_port = pick(kPorts);
    f.spec.tcp_flags = kSyn;
    f.in_port = f.spec.src.starts_with("10.9.") ? "server" : "client";
    return f;
}

FiveTuple tuple_of(const FrameSpec& s) {
    FiveTuple t{};
    const Bytes src = address_bytes(s.src), dst = address_bytes(s.dst);
    std::memcpy(t.src.bytes, src.data(), src.size());
    std::memcpy(t.dst.bytes, dst.data(), dst.size());
    t.family = src.size() == 4 ? IpFamily::ipv4 : IpFamily::ipv6;
    t.proto = s.proto;
    set_ports(t, htons(s.src_port), htons(s.dst_port));
    return t;
}

std::string name_of(NewPacketFate fate) {
    switch (fate) {
    case NewPacketFate::forwarded: return "forwarded";
    case NewPacketFate::dropped: return "dropped";
    case NewPacketFate::rejected: return "rejected";
    case NewPacketFate::answered_with_cookie: return "answered with a cookie";
    }
    return "?";
}

}  // namespace

TEST_CASE("explain: says what the data path does with thousands of random new flows", "[explain][pipeline]") {
    PipelineLab lab(kConfig);
    std::mt19937 rng(26);
    std::set<std::pair<std::string, std::string>> seen;  // flows and their reverses: every packet is a first one
    std::map<std::string, int> outcomes;
    int compared = 0;
    for (int n = 0; n < 3000; ++n) {
        const Flow flow = random_flow(rng);
        const std::string key =
            flow.spec.src + ":" + std::to_string(flow.spec.src_port) + "-" + std::to_string(flow.spec.proto);
        const std::string to = flow.spec.dst + ":" + std::to_string(flow.spec.dst_port);
        if (!seen.insert({key, to}).second || seen.count({to + "-" + std::to_string(flow.spec.proto), key})) continue;
        const FiveTuple tuple = tuple_of(flow.spec);
        const Snapshot& snapshot = lab.snapshot();
        const NewPacketDecision said =
            decide_new_packet(snapshot, tuple, lab.port_id(flow.in_port), opening_match_bytes(tuple));

        const CounterTotals before = lab.totals();
        lab.send(flow.in_port, {frame(flow.spec)});
        lab.run();
        const std::vector<Bytes> to_server = lab.take_sent("server"), to_client = lab.take_sent("client");
        const CounterTotals after = lab.totals();
        const auto dropped = [&](DropReason r) {
            return after.drops[static_cast<std::size_t>(r)] - before.drops[static_cast<std::size_t>(r)];
        };
        const std::vector<Bytes>& back = flow.in_port == "client" ? to_client : to_server;
        const std::vector<Bytes>& on = flow.in_port == "client" ? to_server : to_client;
        INFO(to_string(tuple) << " in on " << flow.in_port << ": explain says " << name_of(said.fate) << " ("
                              << drop_reason_name(said.reason) << ")");
        ++outcomes[name_of(said.fate) + " " + std::string(drop_reason_name(said.reason))];
        ++compared;
        switch (said.fate) {
        case NewPacketFate::dropped:
            REQUIRE(dropped(said.reason) == 1);
            REQUIRE((on.empty() && back.empty()));
            break;
        case NewPacketFate::rejected:
            REQUIRE(dropped(DropReason::rule_reject) == 1);
            REQUIRE(on.empty());
            break;
        case NewPacketFate::answered_with_cookie:
            REQUIRE(after.total_drops() == before.total_drops());
            REQUIRE(back.size() == 1);
            REQUIRE(read_frame(back[0]).tcp_flags == (kSyn | kAck));
            break;
        case NewPacketFate::forwarded: {
            REQUIRE(after.total_drops() == before.total_drops());
            REQUIRE(on.size() == 1);
            if (said.backend == kNoBackend) break;
            const LbBackend& backend = snapshot.lb->backends[said.backend];
            const SeenFrame out = read_frame(on[0]);
            if (backend.mode == LbMode::dsr) CHECK(out.dst_mac_last == backend.mac.addr_bytes[5]);
            else CHECK(out.dst == to_string(backend.address, backend.family));
            break;
        }
        }
    }
    CHECK(compared > 2500);
    // Every kind of decision came up (so the agreement above covers each).
    CAPTURE(outcomes);
    for (const char* outcome :
         {"dropped blocklisted", "dropped rule_deny", "rejected rule_reject", "dropped to_own_address",
          "dropped nat_no_connection", "answered with a cookie none", "forwarded none"})
        CHECK(outcomes[outcome] > 0);
    CHECK(lab.mbufs_out() == 0);
}

// Golden packet tables (Katran's testing/ habit): each row is a description, a frame sent into a port, and what must
// come out: a frame on a port with the fields given, or a drop under its reason. Rows of a table run in order
// through one sluice data path (PipelineLab), so later rows see the connections earlier ones opened.
#include <catch2/catch.hpp>

#include <optional>

#include "pipeline/pipeline_lab.hpp"

using namespace sluice;
using namespace sluice::test;

namespace {

// A frame that must come out: fields left empty (or 0) are not checked.
struct Expected {
    std::string port;
    std::string src, dst;
    uint16_t src_port = 0, dst_port = 0;
    uint8_t tcp_flags = 0;
    uint8_t ttl = 0;
    uint8_t dst_mac_last = 0;
};

struct GoldenRow {
    const char* description;
    std::string in_port;
    FrameSpec frame;
    bool reply_to_last = false;  // frame: the last row's output frame answered (addresses and ports swapped)
    std::optional<Expected> out;
    DropReason drop = DropReason::none;
};

FrameSpec answer(const SeenFrame& seen, uint8_t tcp_flags) {
    FrameSpec f;
    f.src = seen.dst, f.dst = seen.src;
    f.proto = seen.proto;
    f.src_port = seen.dst_port, f.dst_port = seen.src_port;
    f.tcp_flags = tcp_flags;
    f.ack = 1001;
    return f;
}

void run_table(PipelineLab& lab, const std::vector<GoldenRow>& rows) {
    SeenFrame last;
    for (const GoldenRow& row : rows) {
        INFO(row.description);
        const FrameSpec spec = row.reply_to_last ? answer(last, row.frame.tcp_flags) : row.frame;
        const CounterTotals before = lab.totals();
        lab.send(row.in_port, {frame(spec)});
        lab.run();
        std::vector<Bytes> sent;
        for (const PortIdentity& p : lab.ports())
            for (Bytes& b : lab.take_sent(p.name)) {
                if (row.out && p.name == row.out->port) sent.push_back(std::move(b));
                else FAIL_CHECK("a frame came out on " << p.name);
            }
        const CounterTotals after = lab.totals();
        const auto dropped = [&](DropReason r) {
            return after.drops[static_cast<std::size_t>(r)] - before.drops[static_cast<std::size_t>(r)];
        };
        if (row.drop != DropReason::none) CHECK(dropped(row.drop) == 1);
        CHECK(after.total_drops() - before.total_drops() == (row.drop == DropReason::none ? 0u : 1u));
        if (!row.out) {
            CHECK(sent.empty());
            continue;
        }
        REQUIRE(sent.size() == 1);
        last = read_frame(sent[0]);
        const Expected& e = *row.out;
        CHECK(last.checksums_ok);
        if (!e.src.empty()) CHECK(last.src == e.src);
        if (!e.dst.empty()) CHECK(last.dst == e.dst);
        if (e.src_port) CHECK(last.src_port == e.src_port);
        if (e.dst_port) CHECK(last.dst_port == e.dst_port);
        if (e.tcp_flags) CHECK(last.tcp_flags == e.tcp_flags);
        if (e.ttl) CHECK(last.ttl == e.ttl);
        if (e.dst_mac_last) CHECK(last.dst_mac_last == e.dst_mac_last);
    }
    CHECK(lab.mbufs_out() == 0);
}

const char* kFirewallConfig = R"(
ports:
  - {name: lan, device: ring_lan}
  - {name: wan, device: ring_wan}
lcores: [{id: 1, roles: [rx, worker]}]
forward:
  - {from: lan, to: wan, next_hop_mac: "02:00:00:00:00:0b"}
  - {from: wan, to: lan, next_hop_mac: "02:00:00:00:00:0a"}
firewall:
  prefix_sets:
    - {name: bad, prefixes: [198.51.100.0/24], early_drop: true}
  default: deny
  rules:
    - {name: inside-out, in_ports: [lan], action: allow}
    - {name: no-telnet, in_ports: [wan], protocol: tcp, destination_ports: 23, action: reject}
)";

// Rules that test what the L4 header says besides ports: ICMP types, TCP flags (docs/config.md, "tcp_flags").
const char* kL4RulesConfig = R"(
ports:
  - {name: lan, device: ring_lan}
  - {name: wan, device: ring_wan}
lcores: [{id: 1, roles: [rx, worker]}]
forward:
  - {from: lan, to: wan, next_hop_mac: "02:00:00:00:00:0b"}
  - {from: wan, to: lan, next_hop_mac: "02:00:00:00:00:0a"}
firewall:
  default: deny
  loose_pickup: true
  rules:
    - {name: ping-host, in_ports: [wan], destination: 10.0.0.2, protocol: icmp, icmp_type: echo-request,
       action: allow}
    - {name: ping6-host, in_ports: [wan], destination: "2001:db8::2", protocol: icmpv6,
       icmp_type: [echo-request], icmp_code: 0, action: allow}
    - {name: no-syn-fin, protocol: tcp, tcp_flags: "syn,fin/syn,fin", action: deny}
    - {name: no-urgent-syn, protocol: tcp, tcp_flags: "syn,urg/syn,urg", action: deny}
    - {name: web-opens-with-syn, in_ports: [wan], destination: 10.0.0.2, protocol: tcp, destination_ports: 80,
       tcp_flags: "syn/syn,ack", action: allow}
    - {name: inside-out, in_ports: [lan], action: allow}
)";

const char* kBalancerConfig = R"(
ports:
  - {name: client, device: ring_client}
  - {name: server, device: ring_server}
lcores: [{id: 1, roles: [rx, worker]}]
forward:
  - {from: client, to: server, next_hop_mac: "02:00:00:00:00:0b"}
  - {from: server, to: client, next_hop_mac: "02:00:00:00:00:0a"}
load_balancer:
  nat_pool: [10.1.0.100]
services:
  - name: web
    vip: 192.0.2.100
    port: 80
    protocol: tcp
    mode: nat
    backends: [{address: 10.1.0.11, port: 8080}]
  - name: dns
    vip: 192.0.2.101
    port: 53
    protocol: udp
    mode: dsr
    backends: [{address: 10.1.0.21, mac: "02:00:00:00:03:21"}]
)";

}  // namespace

TEST_CASE("golden: the stateful firewall's verdicts on real frames", "[golden][pipeline]") {
    PipelineLab lab(kFirewallConfig);
    // A table reads as one row per case.
    // clang-format off
    run_table(lab, {
        {"a SYN from the inside opens a connection and is routed out, TTL - 1", "lan",
         tcp_spec("10.0.0.2", 40000, "203.0.113.9", 443), false,
         Expected{"wan", "10.0.0.2", "203.0.113.9", 40000, 443, kSyn, 63}},
        {"its SYN+ACK from the outside passes as a reply", "wan", {.tcp_flags = kSyn | kAck}, true,
         Expected{"lan", "203.0.113.9", "10.0.0.2", 443, 40000, kSyn | kAck, 63}},
        {"an unsolicited SYN from the outside meets the default: deny", "wan",
         tcp_spec("203.0.113.9", 5555, "10.0.0.2", 22), false, std::nullopt, DropReason::rule_deny},
        {"telnet from the outside is rejected: a RST goes back out of wan", "wan",
         tcp_spec("203.0.113.9", 5556, "10.0.0.2", 23), false,
         Expected{"wan", "10.0.0.2", "203.0.113.9", 23, 5556, kRst | kAck, 0}, DropReason::rule_reject},
        {"an ACK of no connection cannot open one", "lan", tcp_spec("10.0.0.2", 40001, "203.0.113.9", 443, kAck), false,
         std::nullopt, DropReason::ct_no_connection},
        {"a source in an early-drop set goes on the RX lcore", "wan", udp_spec("198.51.100.7", 53, "10.0.0.2", 5353),
         false, std::nullopt, DropReason::blocklisted},
        {"UDP from the inside opens a connection", "lan", udp_spec("10.0.0.2", 5000, "203.0.113.53", 53), false,
         Expected{"wan", "10.0.0.2", "203.0.113.53", 5000, 53, 0, 63}},
        {"and its answer passes back", "wan", udp_spec("203.0.113.53", 53, "10.0.0.2", 5000), false,
         Expected{"lan", "203.0.113.53", "10.0.0.2", 53, 5000, 0, 63}},
        {"IPv6 from the inside passes", "lan", udp_spec("2001:db8::2", 5000, "2001:db8:ff::1", 53), false,
         Expected{"wan", "2001:db8::2", "2001:db8:ff::1", 5000, 53, 0, 63}},
    });
    // clang-format on
}

TEST_CASE("golden: rules that test ICMP types and TCP flags decide new connections", "[golden][pipeline]") {
    PipelineLab lab(kL4RulesConfig);
    const auto ecn_syn = static_cast<uint8_t>(kSyn | 0x40 | 0x80);  // ECE and CWR: an ECN-setup SYN (RFC 3168)
    FrameSpec echo6_code1 = icmp_spec("2001:db8:ff::9", "2001:db8::2", 128, 13);
    echo6_code1.icmp_code = 1;
    // clang-format off
    run_table(lab, {
        {"an echo request to the host is allowed", "wan", icmp_spec("203.0.113.9", "10.0.0.2", 8, 7), false,
         Expected{"lan", "203.0.113.9", "10.0.0.2", 0, 0, 0, 63}},
        {"the host's echo reply passes with the connection the request opened", "lan",
         icmp_spec("10.0.0.2", "203.0.113.9", 0, 7), false, Expected{"wan", "10.0.0.2", "203.0.113.9", 0, 0, 0, 63}},
        {"an echo reply to the host that answers nothing is no echo request: the default denies it", "wan",
         icmp_spec("203.0.113.9", "10.0.0.2", 0, 8), false, std::nullopt, DropReason::rule_deny},
        {"a timestamp request to the host is denied", "wan", icmp_spec("203.0.113.9", "10.0.0.2", 13, 9), false,
         std::nullopt, DropReason::rule_deny},
        {"an echo request to another host is denied", "wan", icmp_spec("203.0.113.9", "10.0.0.3", 8, 10), false,
         std::nullopt, DropReason::rule_deny},
        {"an ICMPv6 echo request to the IPv6 host is allowed", "wan",
         icmp_spec("2001:db8:ff::9", "2001:db8::2", 128, 11), false,
         Expected{"lan", "2001:db8:ff::9", "2001:db8::2", 0, 0, 0, 63}},
        {"an ICMPv6 echo reply that answers nothing is denied", "wan",
         icmp_spec("2001:db8:ff::9", "2001:db8::2", 129, 12), false, std::nullopt, DropReason::rule_deny},
        {"an echo request of code 1 is not the code the IPv6 rule allows", "wan", echo6_code1, false, std::nullopt,
         DropReason::rule_deny},
        {"a SYN from the outside to the web server opens a connection", "wan",
         tcp_spec("203.0.113.9", 41000, "10.0.0.2", 80), false,
         Expected{"lan", "203.0.113.9", "10.0.0.2", 41000, 80, kSyn, 63}},
        {"its SYN+ACK passes as a reply", "lan", {.tcp_flags = kSyn | kAck}, true,
         Expected{"wan", "10.0.0.2", "203.0.113.9", 80, 41000, kSyn | kAck, 63}},
        {"and the client's ACK follows the connection (the rules decided only its first packet)", "wan",
         {.tcp_flags = kAck}, true, Expected{"lan", "203.0.113.9", "10.0.0.2", 41000, 80, kAck, 63}},
        {"an ECN-setup SYN passes: ECE and CWR are outside the mask", "wan",
         tcp_spec("203.0.113.9", 41001, "10.0.0.2", 80, ecn_syn), false,
         Expected{"lan", "203.0.113.9", "10.0.0.2", 41001, 80, ecn_syn, 63}},
        {"an ACK of no connection would be picked up (loose_pickup), but the rule wants a SYN without ACK", "wan",
         tcp_spec("203.0.113.9", 41002, "10.0.0.2", 80, kAck), false, std::nullopt, DropReason::rule_deny},
        {"a SYN with URG set is denied, from the inside too", "lan",
         tcp_spec("10.0.0.2", 40000, "203.0.113.9", 443, kSyn | 0x20), false, std::nullopt, DropReason::rule_deny},
        {"a plain SYN from the inside is allowed", "lan", tcp_spec("10.0.0.2", 40001, "203.0.113.9", 443), false,
         Expected{"wan", "10.0.0.2", "203.0.113.9", 40001, 443, kSyn, 63}},
        {"a SYN+FIN never opens a connection, whatever the rules say", "lan",
         tcp_spec("10.0.0.2", 40002, "203.0.113.9", 443, kSyn | kFin), false, std::nullopt,
         DropReason::ct_no_connection},
    });
    // clang-format on
}

TEST_CASE("golden: the load balancer's NAT and DSR on real frames", "[golden][pipeline]") {
    PipelineLab lab(kBalancerConfig);
    // A table reads as one row per case.
    // clang-format off
    run_table(lab, {
        {"a SYN to a nat VIP leaves from the pool address to the backend's port", "client",
         tcp_spec("203.0.113.7", 41000, "192.0.2.100", 80), false,
         Expected{"server", "10.1.0.100", "10.1.0.11", 0, 8080, kSyn, 63}},
        {"the backend's SYN+ACK to the pool address goes back from the VIP to the client", "server", {.tcp_flags = kSyn | kAck}, true,
         Expected{"client", "192.0.2.100", "203.0.113.7", 80, 41000, kSyn | kAck, 63}},
        {"a packet to the pool address of no connection is dropped", "server",
         tcp_spec("10.1.0.11", 8080, "10.1.0.100", 3333, kAck), false, std::nullopt, DropReason::nat_no_connection},
        {"a VIP on a port no service listens on is sluice's own: dropped", "client",
         udp_spec("203.0.113.7", 4000, "192.0.2.100", 81), false, std::nullopt, DropReason::to_own_address},
        {"a dsr service rewrites the destination MAC alone (the VIP stays, and the TTL)", "client",
         udp_spec("203.0.113.7", 4001, "192.0.2.101", 53), false,
         Expected{"server", "203.0.113.7", "192.0.2.101", 4001, 53, 0, 64, 0x21}},
        {"a mid-stream ACK to a nat VIP has no state here: dropped", "client",
         tcp_spec("203.0.113.8", 41001, "192.0.2.100", 80, kAck), false, std::nullopt, DropReason::lb_nat_no_state},
    });
    // clang-format on
}

TEST_CASE("golden: an ICMP message allowed between two hosts lets only its answer follow, no other type",
          "[golden][pipeline]") {
    PipelineLab lab(R"(
ports:
  - {name: lan, device: ring_lan}
  - {name: wan, device: ring_wan}
lcores: [{id: 1, roles: [rx, worker]}]
forward:
  - {from: lan, to: wan, next_hop_mac: "02:00:00:00:00:0b"}
  - {from: wan, to: lan, next_hop_mac: "02:00:00:00:00:0a"}
firewall:
  default: deny
  rules:
    - {name: clock, in_ports: [lan], protocol: icmp, icmp_type: timestamp-request, action: allow}
    - {name: node-info, in_ports: [lan], protocol: icmpv6, icmp_type: 139, action: allow}
)");
    // clang-format off
    run_table(lab, {
        {"a timestamp request from the inside is allowed", "lan", icmp_spec("10.0.0.2", "203.0.113.9", 13, 5), false,
         Expected{"wan", "10.0.0.2", "203.0.113.9", 0, 0, 0, 63}},
        {"its reply passes back with the connection it opened", "wan", icmp_spec("203.0.113.9", "10.0.0.2", 14, 5),
         false, Expected{"lan", "203.0.113.9", "10.0.0.2", 0, 0, 0, 63}},
        {"a router advertisement back is no answer to it: denied", "wan", icmp_spec("203.0.113.9", "10.0.0.2", 9),
         false, std::nullopt, DropReason::rule_deny},
        {"an address mask request back: denied", "wan", icmp_spec("203.0.113.9", "10.0.0.2", 17), false,
         std::nullopt, DropReason::rule_deny},
        {"an address mask request out, which no rule allows: denied", "lan", icmp_spec("10.0.0.2", "203.0.113.9", 17),
         false, std::nullopt, DropReason::rule_deny},
        {"an echo reply out whose identifier is the timestamp's type: no connection of it", "lan",
         icmp_spec("10.0.0.2", "203.0.113.9", 0, 13), false, std::nullopt, DropReason::rule_deny},
        {"an ICMPv6 node information query out is allowed", "lan", icmp_spec("2001:db8::2", "2001:db8:ff::1", 139),
         false, Expected{"wan", "2001:db8::2", "2001:db8:ff::1", 0, 0, 0, 63}},
        {"its reply passes back", "wan", icmp_spec("2001:db8:ff::1", "2001:db8::2", 140), false,
         Expected{"lan", "2001:db8:ff::1", "2001:db8::2", 0, 0, 0, 63}},
        {"an MLD query back is not its answer: denied", "wan", icmp_spec("2001:db8:ff::1", "2001:db8::2", 130),
         false, std::nullopt, DropReason::rule_deny},
    });
    // clang-format on
    CHECK(lab.mbufs_out() == 0);
}

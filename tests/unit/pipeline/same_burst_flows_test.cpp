// Flows whose first packets share one RX burst: the first packet of each flow is decided
// (one rule hit, one rate-limit or new-connection token, one entry), and the flow's later packets in the burst
// follow that decision: forwarded and rewritten as the connection's packets, or refused with it under its reason.
#include <catch2/catch.hpp>

#include <map>
#include <set>

#include "pipeline/pipeline_lab.hpp"

using namespace sluice;
using namespace sluice::test;

namespace {

constexpr uint16_t kFlows = 8;

// kFlows UDP flows from the client 203.0.113.7 (source ports 5000...) to dst:port, each of `packets` back-to-back
// packets: f0 f0 f0 f1 f1 f1 ...
std::vector<Bytes> back_to_back(const char* dst, uint16_t port, unsigned packets) {
    std::vector<Bytes> frames;
    for (uint16_t f = 0; f < kFlows; ++f)
        for (unsigned p = 0; p < packets; ++p) frames.push_back(frame(udp_spec("203.0.113.7", 5000 + f, dst, port)));
    return frames;
}

// How many packets of each flow (by client source port) came out.
std::map<uint16_t, unsigned> packets_per_flow(const std::vector<Bytes>& sent) {
    std::map<uint16_t, unsigned> per_flow;
    for (const Bytes& b : sent) ++per_flow[read_frame(b).src_port];
    return per_flow;
}

// Rule hits summed over the lcore slots; rule: the compiled index (config order).
uint64_t rule_hits(const PipelineLab& lab, std::size_t rule) {
    const RuleHits& hits = *lab.snapshot().firewall->hits;
    uint64_t sum = 0;
    for (std::size_t at = rule; at < hits.hits.size(); at += hits.rule_count + 1) sum += hits.hits[at];
    return sum;
}

// Packets counted under a rule (its traffic, by stable id) over the lcores.
uint64_t rule_packets(PipelineLab& lab, std::size_t rule) {
    const uint32_t stable = lab.snapshot().firewall->stable_ids[rule];
    uint64_t packets = 0;
    lab.dataplane().for_each_lcore([&](const LcoreContext& ctx) {
        if (ctx.rule_traffic) packets += counter_read(ctx.rule_traffic[stable].packets);
    });
    return packets;
}

// Two ports forwarding to each other and one rx + worker lcore; a test appends its own sections.
const std::string kTwoWayPorts = R"(
ports:
  - {name: client, device: ring_client}
  - {name: server, device: ring_server}
lcores: [{id: 1, roles: [rx, worker]}]
forward:
  - {from: client, to: server, next_hop_mac: "02:00:00:00:00:0b"}
  - {from: server, to: client, next_hop_mac: "02:00:00:00:00:0a"}
)";

// One firewall rule (and default: deny); dataplane: that section, or empty.
std::string firewall_config(const std::string& dataplane, const std::string& rule) {
    return kTwoWayPorts + dataplane + "\nfirewall:\n  default: deny\n  rules:\n    - " + rule + "\n";
}

}  // namespace

TEST_CASE("same burst: a rule's rate_limit takes one token per connection, not per packet", "[pipeline][burst]") {
    PipelineLab lab(firewall_config("", "{name: dns, protocol: udp, action: allow, rate_limit: {rate: 8, burst: 8}}"));
    const unsigned packets = GENERATE(2u, 3u);
    INFO(packets << " packets a flow");
    const std::vector<Bytes> sent = lab.exchange("client", back_to_back("198.51.100.53", 53, packets), "server");

    CHECK(sent.size() == kFlows * packets);  // was 4 flows of 2 (8 drops), or 3 flows of 3 (16 drops)
    for (const auto& [port, count] : packets_per_flow(sent)) CHECK(count == packets);
    CHECK(packets_per_flow(sent).size() == kFlows);
    CHECK(lab.drops(DropReason::rate_limited) == 0);
    CHECK(rule_hits(lab, 0) == kFlows);
    CHECK(lab.totals().conn_inserts == kFlows);
    CHECK(lab.mbufs_out() == 0);
}

TEST_CASE("same burst: a flow over the rate limit is dropped whole, under rate_limited", "[pipeline][burst]") {
    PipelineLab lab(firewall_config("", "{name: dns, protocol: udp, action: allow, rate_limit: {rate: 4, burst: 4}}"));
    const std::vector<Bytes> sent = lab.exchange("client", back_to_back("198.51.100.53", 53, 3), "server");

    // The first four flows take the four tokens, and every packet of theirs passes; the other four lose all three.
    const std::map<uint16_t, unsigned> per_flow = packets_per_flow(sent);
    CHECK(per_flow == std::map<uint16_t, unsigned>{{5000, 3}, {5001, 3}, {5002, 3}, {5003, 3}});
    CHECK(lab.drops(DropReason::rate_limited) == 4 * 3);
    CHECK(lab.totals().total_drops() == 4 * 3);
    CHECK(rule_hits(lab, 0) == kFlows);  // every flow was decided once, admitted or not
    CHECK(lab.totals().conn_inserts == 4);
    CHECK(lab.mbufs_out() == 0);
}

TEST_CASE("same burst: max_new_connections_per_second counts connections", "[pipeline][burst]") {
    SECTION("all eight connections under the cap: no packet of theirs is new_conn_limited") {
        PipelineLab lab(firewall_config("dataplane: {max_new_connections_per_second: 8}",
                                        "{name: dns, protocol: udp, action: allow}"));
        const unsigned packets = GENERATE(2u, 3u, 5u);
        INFO(packets << " packets a flow");
        const std::vector<Bytes> sent = lab.exchange("client", back_to_back("198.51.100.53", 53, packets), "server");
        CHECK(sent.size() == kFlows * packets);  // was K-1 new_conn_limited drops
        CHECK(lab.drops(DropReason::new_conn_limited) == 0);
        CHECK(lab.totals().conn_inserts == kFlows);
        CHECK(rule_hits(lab, 0) == kFlows);
    }
    SECTION("four over the cap: those four flows are dropped whole") {
        PipelineLab lab(firewall_config("dataplane: {max_new_connections_per_second: 4}",
                                        "{name: dns, protocol: udp, action: allow}"));
        const std::vector<Bytes> sent = lab.exchange("client", back_to_back("198.51.100.53", 53, 3), "server");
        CHECK(packets_per_flow(sent) == std::map<uint16_t, unsigned>{{5000, 3}, {5001, 3}, {5002, 3}, {5003, 3}});
        CHECK(lab.drops(DropReason::new_conn_limited) == 4 * 3);
        CHECK(lab.totals().total_drops() == 4 * 3);
        CHECK(lab.totals().conn_inserts == 4);
        CHECK(lab.mbufs_out() == 0);
    }
}

TEST_CASE("same burst: a flow the full table refuses is dropped whole, under ct_table_full", "[pipeline][burst]") {
    PipelineLab lab(kTwoWayPorts + R"(
firewall:
  default: deny
  table_size: 1024
  rules:
    - {name: dns, protocol: udp, action: allow}
)");
    // Fill the table from another client, one packet a flow, until it refuses (in chunks: the RX ring is small).
    constexpr uint16_t kFill = 1100, kChunk = 100;
    for (uint16_t start = 0; start < kFill; start += kChunk) {
        std::vector<Bytes> fill;
        for (uint16_t f = start; f < start + kChunk; ++f)
            fill.push_back(frame(udp_spec("203.0.113.8", 10000 + f, "198.51.100.53", 53)));
        lab.exchange("client", fill, "server");
    }
    const uint64_t inserted = lab.totals().conn_inserts, refused = lab.drops(DropReason::ct_table_full);
    REQUIRE(refused > 0);
    REQUIRE(inserted + refused == kFill);

    CHECK(lab.exchange("client", back_to_back("198.51.100.53", 53, 3), "server").empty());
    CHECK(lab.drops(DropReason::ct_table_full) - refused == kFlows * 3);
    CHECK(lab.totals().total_drops() - refused == kFlows * 3);
    CHECK(rule_hits(lab, 0) == kFill + kFlows);  // each of the eight flows decided once
    CHECK(lab.totals().conn_inserts == inserted);
    CHECK(lab.mbufs_out() == 0);
}

TEST_CASE("same burst: rule hits count connections decided, allowed or denied", "[pipeline][burst]") {
    SECTION("allowed: 8 hits for 8 flows of 3 packets, and 8 entries") {
        PipelineLab lab(firewall_config("", "{name: dns, protocol: udp, action: allow}"));
        CHECK(lab.exchange("client", back_to_back("198.51.100.53", 53, 3), "server").size() == kFlows * 3);
        CHECK(rule_hits(lab, 0) == kFlows);  // was 24
        CHECK(lab.totals().conn_inserts == kFlows);
        // The packets themselves are counted under the rule (its traffic), all 24 of them.
        CHECK(rule_packets(lab, 0) == kFlows * 3);
    }
    SECTION("denied: one hit a flow, every packet dropped as rule_deny") {
        PipelineLab lab(firewall_config("", "{name: no-dns, protocol: udp, action: deny}"));
        CHECK(lab.exchange("client", back_to_back("198.51.100.53", 53, 3), "server").empty());
        CHECK(rule_hits(lab, 0) == kFlows);
        CHECK(lab.drops(DropReason::rule_deny) == kFlows * 3);
        CHECK(lab.totals().conn_inserts == 0);
        CHECK(lab.mbufs_out() == 0);
    }
    SECTION("rejected: one hit a flow, every packet rejected (and answered, within the error-reply budget)") {
        PipelineLab lab(firewall_config("", "{name: no-dns, protocol: udp, action: reject}"));
        lab.exchange("client", back_to_back("198.51.100.53", 53, 3), "server");
        CHECK(rule_hits(lab, 0) == kFlows);
        CHECK(lab.drops(DropReason::rule_reject) == kFlows * 3);
        CHECK(lab.totals().total_drops() == kFlows * 3);
        CHECK(lab.totals().conn_inserts == 0);
        lab.take_sent("client");
        CHECK(lab.mbufs_out() == 0);
    }
}

TEST_CASE("same burst: a NAT flow's packets all leave with its one pool port and backend", "[pipeline][burst]") {
    PipelineLab lab(kTwoWayPorts + R"(
firewall:
  default: deny
  rules:
    - {name: to-dns, destination: 192.0.2.100/32, protocol: udp, action: allow}
load_balancer:
  nat_pool: [10.1.0.100]
services:
  - name: dns
    vip: 192.0.2.100
    port: 53
    protocol: udp
    mode: nat
    backends: [{address: 10.1.0.11, port: 5353}, {address: 10.1.0.12, port: 5353}, {address: 10.1.0.13, port: 5353},
               {address: 10.1.0.14, port: 5353}]
)");
    // The client's source port of each flow is lost in the rewrite; the payload length tells the flows apart.
    std::vector<Bytes> frames;
    for (uint16_t f = 0; f < kFlows; ++f)
        for (unsigned p = 0; p < 3; ++p) {
            FrameSpec spec = udp_spec("203.0.113.7", 5000 + f, "192.0.2.100", 53);
            spec.payload = 16 + f;
            frames.push_back(frame(spec));
        }
    const std::vector<Bytes> sent = lab.exchange("client", frames, "server");
    REQUIRE(sent.size() == kFlows * 3);

    std::map<std::size_t, std::set<std::pair<std::string, uint16_t>>> bindings;  // flow -> {(backend, pool port)}
    std::set<std::pair<std::string, uint16_t>> pool_ports;                       // each backend has its own port space
    for (const Bytes& b : sent) {
        const SeenFrame seen = read_frame(b);
        CHECK(seen.checksums_ok);
        CHECK(seen.src == "10.1.0.100");
        CHECK(seen.dst_port == 5353);
        bindings[b.size()].insert({seen.dst, seen.src_port});
        pool_ports.insert({seen.dst, seen.src_port});
    }
    CHECK(bindings.size() == kFlows);
    for (const auto& [size, binding] : bindings) CHECK(binding.size() == 1);
    CHECK(pool_ports.size() == kFlows);  // one port per connection, none taken for a later packet
    CHECK(lab.totals().conn_inserts == kFlows);
    CHECK(rule_hits(lab, 0) == kFlows);
    CHECK(lab.mbufs_out() == 0);
}

TEST_CASE("same burst: the SYN proxy's cookie ACK opens once; the client's next packet waits", "[pipeline][burst]") {
    PipelineLab lab(kTwoWayPorts + R"(
firewall:
  default: deny
  rules:
    - {name: web, destination: 192.0.2.100/32, protocol: tcp, destination_ports: 80, action: allow}
load_balancer:
  nat_pool: [10.1.0.100]
services:
  - name: web
    vip: 192.0.2.100
    port: 80
    protocol: tcp
    mode: nat
    syn_proxy: true
    backends: [{address: 10.1.0.11, port: 8080}]
)");
    const std::vector<Bytes> answer =
        lab.exchange("client", {frame(tcp_spec("203.0.113.7", 41000, "192.0.2.100", 80))}, "client");
    REQUIRE(answer.size() == 1);
    REQUIRE(read_frame(answer[0]).tcp_flags == (kSyn | kAck));
    const uint8_t* seq = &answer[0][14 + 20 + 4];  // the SYN+ACK's sequence number: the cookie
    const uint32_t cookie = static_cast<uint32_t>(get16(seq)) << 16 | get16(seq + 2);
    CHECK(rule_hits(lab, 0) == 0);  // a SYN answered with a cookie takes no hit: its ACK does

    // The ACK that brings the cookie back, and the request right behind it, in one burst.
    FrameSpec ack = tcp_spec("203.0.113.7", 41000, "192.0.2.100", 80, kAck);
    ack.seq = 1001, ack.ack = cookie + 1;
    FrameSpec request = ack;
    request.payload = 100;
    const std::vector<Bytes> sent = lab.exchange("client", {frame(ack), frame(request)}, "server");
    REQUIRE(sent.size() == 1);
    CHECK(read_frame(sent[0]).tcp_flags == kSyn);  // sluice's SYN to the backend, once
    CHECK(read_frame(sent[0]).dst == "10.1.0.11");
    CHECK(lab.drops(DropReason::syn_proxy_pending) == 1);  // the request waits for the backend (resent by the client)
    CHECK(lab.totals().total_drops() == 1);
    CHECK(rule_hits(lab, 0) == 1);
    CHECK(lab.totals().conn_inserts == 1);
    CHECK(lab.take_sent("client").empty());
    CHECK(lab.mbufs_out() == 0);
}

// NAT port spaces per backend through the whole data path (PipelineLab): one pool address carries far more than
// its ~64k ports' worth of connections when they go to several backends, and a backend whose space is full refuses
// its new connections alone, under nat_ports_exhausted, while the others still open and its old ones still flow.
#include <catch2/catch.hpp>

#include <arpa/inet.h>

#include <cstring>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "lb/lb_decision.hpp"
#include "pipeline/pipeline_lab.hpp"

using namespace sluice;
using namespace sluice::test;

namespace {

// Two workers and four nat backends of one service, one pool address, the default nat_ports (1024-65535).
const char* kFourBackends = R"(
ports:
  - {name: client, device: ring_client}
  - {name: server, device: ring_server}
lcores: [{id: 1, roles: [rx, worker]}, {id: 2, roles: [worker]}]
forward:
  - {from: client, to: server, next_hop_mac: "02:00:00:00:00:0b"}
  - {from: server, to: client, next_hop_mac: "02:00:00:00:00:0a"}
firewall:
  table_size: 300000
  default: allow
load_balancer:
  nat_pool: [10.1.0.100]
services:
  - name: web
    vip: 192.0.2.100
    port: 80
    protocol: tcp
    mode: nat
    backends:
      - {address: 10.1.0.11, port: 8080}
      - {address: 10.1.0.12, port: 8080}
      - {address: 10.1.0.13, port: 8080}
      - {address: 10.1.0.14, port: 8080}
)";

// One worker with four NAT ports; the services follow.
const std::string kOneWorkerFourPorts = R"(
ports:
  - {name: client, device: ring_client}
  - {name: server, device: ring_server}
lcores: [{id: 1, roles: [rx, worker]}]
forward:
  - {from: client, to: server, next_hop_mac: "02:00:00:00:00:0b"}
  - {from: server, to: client, next_hop_mac: "02:00:00:00:00:0a"}
load_balancer:
  nat_pool: [10.1.0.100]
  nat_ports: 20000-20003
)";

// Two backends.
const std::string kFourPorts = kOneWorkerFourPorts + R"(
services:
  - name: web
    vip: 192.0.2.100
    port: 80
    protocol: tcp
    mode: nat
    backends: [{address: 10.1.0.11, port: 8080}, {address: 10.1.0.12, port: 8080}]
)";

// Client k of many: 198.18.0.0/15 and a source port, distinct for every k below 2^21.
FrameSpec client_syn(uint32_t k) {
    static thread_local std::string address;
    const uint32_t host = 0xc6120000u + (k >> 5);
    address = std::to_string(host >> 24) + "." + std::to_string(host >> 16 & 255) + "." +
              std::to_string(host >> 8 & 255) + "." + std::to_string(host & 255);
    FrameSpec f;
    f.src = address, f.dst = "192.0.2.100", f.proto = IPPROTO_TCP;
    f.src_port = static_cast<uint16_t>(40000 + (k & 31)), f.dst_port = 80, f.tcp_flags = kSyn;
    return f;
}

// The address in a frame's (IPv4) text, as the data path holds it.
IpAddress v4(const std::string& text) {
    const Bytes b = address_bytes(text);
    uint32_t be;
    std::memcpy(&be, b.data(), 4);
    return IpAddress::from_v4(be);
}

// The stable id of the backend Maglev gives a client's flow on the lab's snapshot.
uint32_t backend_of(const PipelineLab& lab, const FrameSpec& s) {
    FiveTuple t;
    t.family = IpFamily::ipv4;
    t.proto = s.proto;
    t.src = v4(s.src);
    t.dst = v4(s.dst);
    set_ports(t, htons(s.src_port), htons(s.dst_port));
    return pick_backend(lab.snapshot().lb->services[0], stable_flow_hash(t));
}

// Ports in use toward backend (stable id) on the pool address, summed over the workers: what the gauges show.
std::size_t ports_in_use(PipelineLab& lab, uint32_t backend) {
    std::size_t n = 0;
    lab.dataplane().for_each_lcore([&](const LcoreContext& ctx) {
        if (ctx.nat_ports) n += ctx.nat_ports->in_use(0, backend);
    });
    return n;
}

// The backend's SYN+ACK to what left sluice.
FrameSpec backend_answer(const SeenFrame& left) {
    FrameSpec f;
    f.src = left.dst, f.dst = left.src, f.proto = IPPROTO_TCP;
    f.src_port = left.dst_port, f.dst_port = left.src_port;
    f.tcp_flags = kSyn | kAck;
    f.ack = 1001;
    return f;
}

}  // namespace

TEST_CASE("nat: 200k concurrent connections through one pool address to four backends", "[pipeline][nat]") {
    PipelineLab lab(kFourBackends);
    constexpr uint32_t kConnections = 200'000;
    constexpr uint32_t kAlone = 1'000;  // the last ones open one by one: their replies are checked
    constexpr uint32_t kBatch = 500;
    std::map<std::string, std::set<uint16_t>> ports_by_backend;
    const auto opened = [&](const Bytes& b) {
        const SeenFrame s = read_frame(b);
        CHECK(s.src == "10.1.0.100");
        CHECK(s.dst_port == 8080);
        CHECK(ports_by_backend[s.dst].insert(s.src_port).second);  // a (backend, pool port) pair is unique
        return s;
    };
    for (uint32_t first = 0; first < kConnections - kAlone; first += kBatch) {
        std::vector<Bytes> frames;
        for (uint32_t k = first; k < first + kBatch; ++k) frames.push_back(frame(client_syn(k)));
        const std::vector<Bytes> sent = lab.exchange("client", frames, "server");
        REQUIRE(sent.size() == kBatch);
        for (const Bytes& b : sent) opened(b);
    }
    std::vector<std::pair<FrameSpec, SeenFrame>> alone;
    for (uint32_t k = kConnections - kAlone; k < kConnections; ++k) {
        const std::vector<Bytes> sent = lab.exchange("client", {frame(client_syn(k))}, "server");
        REQUIRE(sent.size() == 1);
        alone.emplace_back(client_syn(k), opened(sent[0]));
    }
    CHECK(lab.drops(DropReason::nat_ports_exhausted) == 0);
    CHECK(lab.drops(DropReason::ct_table_full) == 0);
    REQUIRE(ports_by_backend.size() == 4);
    std::size_t total = 0;
    for (const auto& [backend, ports] : ports_by_backend) {
        INFO(backend << " has " << ports.size() << " connections");
        CHECK(ports.size() > 40'000);
        total += ports.size();
    }
    CHECK(total == kConnections);  // over three times the ~64.5k ports of the pool address
    for (uint32_t id = 0; id < 4; ++id)
        CHECK(ports_in_use(lab, id) == ports_by_backend["10.1.0." + std::to_string(11 + id)].size());

    // The backends answer: each reply finds its connection on the worker its pool port names, and reaches the
    // client it belongs to from the VIP.
    for (const auto& [syn, left] : alone) {
        const std::vector<Bytes> back = lab.exchange("server", {frame(backend_answer(left))}, "client");
        REQUIRE(back.size() == 1);
        const SeenFrame s = read_frame(back[0]);
        CHECK(s.src == "192.0.2.100");
        CHECK(s.src_port == 80);
        CHECK(s.dst == syn.src);
        CHECK(s.dst_port == syn.src_port);
        CHECK(s.tcp_flags == (kSyn | kAck));
    }
}

TEST_CASE("nat: a backend whose port space is full refuses its new connections alone", "[pipeline][nat]") {
    PipelineLab lab(kFourPorts);
    // Clients whose flows Maglev gives to each backend (stable ids 0 and 1), five of each.
    std::vector<FrameSpec> to[2];
    for (uint32_t k = 0; to[0].size() < 5 || to[1].size() < 5; ++k) {
        const FrameSpec syn = client_syn(k);
        const uint32_t backend = backend_of(lab, syn);
        REQUIRE(backend < 2);
        if (to[backend].size() < 5) to[backend].push_back(syn);
    }
    const auto open = [&](const FrameSpec& syn) { return lab.exchange("client", {frame(syn)}, "server"); };
    std::vector<SeenFrame> first;
    std::set<uint16_t> ports;
    for (int k = 0; k < 4; ++k) {
        const std::vector<Bytes> sent = open(to[0][k]);
        REQUIRE(sent.size() == 1);
        first.push_back(read_frame(sent[0]));
        CHECK(first.back().dst == "10.1.0.11");
        ports.insert(first.back().src_port);
    }
    CHECK(ports == std::set<uint16_t>{20000, 20001, 20002, 20003});
    CHECK(ports_in_use(lab, 0) == 4);
    CHECK(open(to[0][4]).empty());  // backend 0's space is full: its fifth connection is refused
    CHECK(lab.drops(DropReason::nat_ports_exhausted) == 1);

    // The other backend has all four ports of its own space.
    ports.clear();
    for (int k = 0; k < 4; ++k) {
        const std::vector<Bytes> sent = open(to[1][k]);
        REQUIRE(sent.size() == 1);
        const SeenFrame s = read_frame(sent[0]);
        CHECK(s.dst == "10.1.0.12");
        ports.insert(s.src_port);
    }
    CHECK(ports == std::set<uint16_t>{20000, 20001, 20002, 20003});
    CHECK(open(to[1][4]).empty());
    CHECK(lab.drops(DropReason::nat_ports_exhausted) == 2);

    // Old connections never pay for it: backend 0's first connection still flows both ways.
    FrameSpec ack = to[0][0];
    ack.tcp_flags = kAck;
    ack.seq = 1001, ack.ack = 1001;  // the handshake's third segment
    const std::vector<Bytes> reply = lab.exchange("server", {frame(backend_answer(first[0]))}, "client");
    REQUIRE(reply.size() == 1);
    CHECK(read_frame(reply[0]).dst == to[0][0].src);
    const std::vector<Bytes> onward = lab.exchange("client", {frame(ack)}, "server");
    REQUIRE(onward.size() == 1);
    CHECK(read_frame(onward[0]).src_port == first[0].src_port);
    CHECK(lab.drops(DropReason::nat_ports_exhausted) == 2);
}

// Two services whose backends share an address: one keeps the client's destination port (80), the other names
// port 80. Their connections' replies both come from 10.1.0.11:80, so one port space serves both.
const std::string kSharedAddress = kOneWorkerFourPorts + R"(
services:
  - name: keeps-port
    vip: 192.0.2.100
    port: 80
    protocol: tcp
    mode: nat
    backends: [{address: 10.1.0.11}]
  - name: fixed-port
    vip: 192.0.2.101
    port: 80
    protocol: tcp
    mode: nat
    backends: [{address: 10.1.0.11, port: 80}]
)";

TEST_CASE("nat: backends on one address share a port space whatever their ports", "[pipeline][nat]") {
    PipelineLab lab(kSharedAddress);
    FrameSpec to_keeps = client_syn(0), to_fixed = client_syn(1);
    to_fixed.dst = "192.0.2.101";
    std::set<std::pair<std::string, uint16_t>> replies;  // (backend address:port, pool port): each must be unique
    for (const FrameSpec& syn : {to_keeps, to_fixed, client_syn(2)}) {
        const std::vector<Bytes> sent = lab.exchange("client", {frame(syn)}, "server");
        REQUIRE(sent.size() == 1);
        const SeenFrame s = read_frame(sent[0]);
        CHECK(s.dst == "10.1.0.11");
        CHECK(s.dst_port == 80);
        CHECK(replies.insert({s.dst + ":" + std::to_string(s.dst_port), s.src_port}).second);
    }
    CHECK(lab.drops(DropReason::ct_table_full) == 0);
    CHECK(ports_in_use(lab, 0) == 3);  // one space, counted under either backend
    CHECK(ports_in_use(lab, 1) == 3);
}

// Several RX queues per port polled by several RX lcores, through the whole data path (PipelineLab): whichever queue
// and RX lcore a packet comes in on, the software steering hands it to the worker that owns its flow, so both
// directions of a connection meet one connection table, and NAT replies (to the pool address) their owner.
#include <catch2/catch.hpp>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "pipeline/pipeline_lab.hpp"

using namespace sluice;
using namespace sluice::test;

namespace {

// Two ports of two RX queues each; two RX-only lcores (each polls one queue of each port) and two workers. The
// firewall lets only the client side open connections: a reply that reached a worker without the connection would
// be a new connection from the server side, and dropped.
const char* kTwoQueues = R"(
ports:
  - {name: client, device: ring_client, rx_queues: 2}
  - {name: server, device: ring_server, rx_queues: 2}
lcores:
  - {id: 1, roles: [rx]}
  - {id: 2, roles: [rx]}
  - {id: 3, roles: [worker]}
  - {id: 4, roles: [worker]}
forward:
  - {from: client, to: server, next_hop_mac: "02:00:00:00:00:0b"}
  - {from: server, to: client, next_hop_mac: "02:00:00:00:00:0a"}
firewall:
  default: deny
  rules:
    - {name: inside-out, in_ports: [client], action: allow}
load_balancer:
  nat_pool: [10.1.0.100]
services:
  - name: web
    vip: 192.0.2.100
    port: 80
    protocol: tcp
    mode: nat
    backends: [{address: 10.1.0.11, port: 8080}, {address: 10.1.0.12, port: 8080}]
)";

constexpr int kFlows = 64;
constexpr uint32_t kClientIsn = 1000, kServerIsn = 5000;
constexpr std::size_t kSegment = 100;

std::string client_address(int k) { return "198.18.0." + std::to_string(k + 1); }
uint16_t client_port(int k) { return static_cast<uint16_t>(40000 + k); }

FrameSpec segment(const std::string& src, uint16_t sport, const std::string& dst, uint16_t dport, uint8_t flags,
                  uint32_t seq, uint32_t ack, std::size_t payload = 0) {
    FrameSpec f;
    f.src = src, f.dst = dst, f.proto = IPPROTO_TCP, f.src_port = sport, f.dst_port = dport;
    f.tcp_flags = flags, f.seq = seq, f.ack = ack, f.payload = payload;
    return f;
}

// Each frame into its queue of port, then one run of every lcore: what left on out_port.
std::vector<SeenFrame> step(PipelineLab& lab, const std::string& port,
                            const std::vector<std::pair<FrameSpec, uint16_t>>& frames, const std::string& out_port) {
    for (const auto& [spec, queue] : frames) lab.send(port, {frame(spec)}, queue);
    lab.run();
    std::vector<SeenFrame> seen;
    for (const Bytes& b : lab.take_sent(out_port)) seen.push_back(read_frame(b));
    return seen;
}

// Per lcore, in plan order: a counter of every lcore.
std::vector<uint64_t> per_lcore(PipelineLab& lab, uint64_t LcoreCounters::*counter) {
    std::vector<uint64_t> values;
    lab.dataplane().for_each_lcore(
        [&](const LcoreContext& ctx) { values.push_back(counter_read(ctx.counters.*counter)); });
    return values;
}

}  // namespace

TEST_CASE("rx queues: every packet of a connection reaches its worker, whichever queue and RX lcore it came in on",
          "[pipeline][rx_queues]") {
    PipelineLab lab(kTwoQueues);
    // The replies of flow k come in on the other queue than its client's packets: the other RX lcore steers them.
    const auto client_queue = [](int k) { return static_cast<uint16_t>(k % 2); };
    const auto server_queue = [](int k) { return static_cast<uint16_t>((k + 1) % 2); };
    const std::string server = "10.1.0.50";

    std::vector<std::pair<FrameSpec, uint16_t>> syns, syn_acks, acks, data;
    for (int k = 0; k < kFlows; ++k) {
        const std::string client = client_address(k);
        syns.push_back({segment(client, client_port(k), server, 443, kSyn, kClientIsn, 0), client_queue(k)});
        syn_acks.push_back(
            {segment(server, 443, client, client_port(k), kSyn | kAck, kServerIsn, kClientIsn + 1), server_queue(k)});
        acks.push_back(
            {segment(client, client_port(k), server, 443, kAck, kClientIsn + 1, kServerIsn + 1), server_queue(k)});
        // Three segments in a row on one queue: they leave in the order they came.
        for (uint32_t i = 0; i < 3; ++i)
            data.push_back({segment(server, 443, client, client_port(k), kAck, kServerIsn + 1 + i * kSegment,
                                    kClientIsn + 1, kSegment),
                            client_queue(k)});
    }
    CHECK(step(lab, "client", syns, "server").size() == kFlows);
    CHECK(step(lab, "server", syn_acks, "client").size() == kFlows);
    CHECK(step(lab, "client", acks, "server").size() == kFlows);
    const std::vector<SeenFrame> delivered = step(lab, "server", data, "client");
    CHECK(delivered.size() == 3 * kFlows);
    std::map<std::string, std::vector<uint32_t>> seqs;
    for (const SeenFrame& s : delivered) seqs[s.dst].push_back(s.seq - kServerIsn - 1);
    CHECK(seqs.size() == kFlows);
    for (const auto& [client, offsets] : seqs) {
        INFO(client);
        CHECK(offsets == std::vector<uint32_t>{0, kSegment, 2 * kSegment});
    }
    CHECK(lab.totals().total_drops() == 0);

    // One connection per flow, all told: no reply opened a second one on another worker. Both RX lcores handed
    // packets over and both workers own connections.
    const std::vector<uint64_t> inserts = per_lcore(lab, &LcoreCounters::conn_inserts);
    const std::vector<uint64_t> handed = per_lcore(lab, &LcoreCounters::ring_enqueued);
    REQUIRE(inserts.size() == 4);
    CHECK(inserts[0] + inserts[1] == 0);
    CHECK(inserts[2] + inserts[3] == kFlows);
    CHECK(inserts[2] > 0);
    CHECK(inserts[3] > 0);
    CHECK(handed[0] > 0);
    CHECK(handed[1] > 0);
}

TEST_CASE("rx queues: NAT replies to the pool address reach the worker that opened the connection",
          "[pipeline][rx_queues][nat]") {
    PipelineLab lab(kTwoQueues);
    std::vector<std::pair<FrameSpec, uint16_t>> syns;
    for (int k = 0; k < kFlows; ++k)
        syns.push_back({segment(client_address(k), client_port(k), "192.0.2.100", 80, kSyn, kClientIsn, 0),
                        static_cast<uint16_t>(k % 2)});
    const std::vector<SeenFrame> opened = step(lab, "client", syns, "server");
    REQUIRE(opened.size() == kFlows);

    // Each backend answers on both queues in turn: a reply's queue has nothing to do with its connection's worker.
    std::vector<std::pair<FrameSpec, uint16_t>> answers;
    for (std::size_t i = 0; i < opened.size(); ++i) {
        const SeenFrame& left = opened[i];
        CHECK(left.src == "10.1.0.100");
        answers.push_back(
            {segment(left.dst, left.dst_port, left.src, left.src_port, kSyn | kAck, kServerIsn, left.seq + 1),
             static_cast<uint16_t>(i % 2)});
    }
    const std::vector<SeenFrame> back = step(lab, "server", answers, "client");
    CHECK(back.size() == kFlows);
    std::map<std::string, int> per_client;
    for (const SeenFrame& s : back) {
        CHECK(s.src == "192.0.2.100");
        CHECK(s.src_port == 80);
        CHECK(s.tcp_flags == (kSyn | kAck));
        ++per_client[s.dst + ":" + std::to_string(s.dst_port)];
    }
    CHECK(per_client.size() == kFlows);  // every client got its own answer, once
    CHECK(lab.totals().total_drops() == 0);
}

TEST_CASE("rx queues: worker rings take several producers only when several RX lcores feed them",
          "[pipeline][rx_queues]") {
    const auto producer_sync = [](const char* yaml) {
        PipelineLab lab(yaml);
        std::vector<rte_ring_sync_type> types;
        lab.dataplane().for_each_lcore([&](const LcoreContext& ctx) {
            if (ctx.worker) types.push_back(ctx.worker_rings[ctx.worker_index]->prod.sync_type);
        });
        return types;
    };
    CHECK(producer_sync(kTwoQueues) == std::vector<rte_ring_sync_type>{RTE_RING_SYNC_MT, RTE_RING_SYNC_MT});
    const char* one_rx = R"(
ports:
  - {name: client, device: ring_client, rx_queues: 2}
lcores: [{id: 1, roles: [rx, worker]}, {id: 2, roles: [worker]}]
forward:
  - {from: client, to: client, next_hop_mac: "02:00:00:00:00:0b"}
)";
    CHECK(producer_sync(one_rx) == std::vector<rte_ring_sync_type>{RTE_RING_SYNC_ST, RTE_RING_SYNC_ST});
}

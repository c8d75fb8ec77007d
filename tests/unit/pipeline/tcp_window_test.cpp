// TCP sequence and window tracking on the whole data path (PipelineLab): blind RST injection through plain
// forwarding, NAT and the SYN proxy (out-of-window RSTs dropped, in-window ones answered with a challenge ACK, an
// exact one closes), window scaling, and a SYN on an established connection.
#include <catch2/catch.hpp>

#include <rte_cycles.h>
#include <spdlog/fmt/fmt.h>

#include "control/explain.hpp"
#include "control/flow_listing.hpp"
#include "pipeline/flow_walk.hpp"
#include "pipeline/lcore_context.hpp"
#include "pipeline/pipeline_lab.hpp"

using namespace sluice;
using namespace sluice::test;

namespace {

struct Out {
    std::string port;
    SeenFrame frame;
};

FrameSpec segment(const char* src, uint16_t sport, const char* dst, uint16_t dport, uint8_t flags, uint32_t seq,
                  uint32_t ack, std::size_t payload = 0, uint16_t window = 65535, int wscale = -1) {
    FrameSpec f = tcp_spec(src, sport, dst, dport, flags);
    f.seq = seq, f.ack = ack, f.payload = payload, f.window = window, f.wscale = wscale;
    return f;
}

// Sends one frame into port in; everything sluice sent, on any port.
std::vector<Out> send_one(PipelineLab& lab, const std::string& in, const FrameSpec& f) {
    lab.send(in, {frame(f)});
    lab.run();
    std::vector<Out> out;
    for (const PortIdentity& p : lab.ports())
        for (const Bytes& b : lab.take_sent(p.name)) out.push_back({p.name, read_frame(b)});
    return out;
}

constexpr uint32_t kFar = 0x40000000;  // a quarter of the sequence space away: outside any window
constexpr uint8_t kPush = 0x08;

const char* kForwardConfig = R"(
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
    - {name: inside-out, in_ports: [lan], action: allow}
)";

const char* kNatConfig = R"(
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
  - {name: web, vip: 192.0.2.100, port: 80, protocol: tcp, mode: nat, backends: [{address: 10.1.0.11, port: 8080}]}
  - name: guarded
    vip: 192.0.2.101
    port: 80
    protocol: tcp
    mode: nat
    syn_proxy: true
    backends: [{address: 10.1.0.12, port: 8080}]
)";

}  // namespace

TEST_CASE("tcp window: blind RSTs, window scaling and SYNs through plain forwarding", "[pipeline][tcp_window]") {
    PipelineLab lab(kForwardConfig);
    const char *client = "10.0.0.2", *server = "203.0.113.9";
    const auto from_client = [&](uint8_t flags, uint32_t seq, uint32_t ack, std::size_t payload = 0) {
        return send_one(lab, "lan", segment(client, 40000, server, 443, flags, seq, ack, payload, 502));
    };
    const auto from_server = [&](uint8_t flags, uint32_t seq, uint32_t ack, std::size_t payload = 0) {
        return send_one(lab, "wan", segment(server, 443, client, 40000, flags, seq, ack, payload, 502));
    };
    // Both SYNs scale by 7: the client's window of 502 is 64256 bytes.
    REQUIRE(send_one(lab, "lan", segment(client, 40000, server, 443, kSyn, 1000, 0, 0, 64240, 7)).size() == 1);
    REQUIRE(send_one(lab, "wan", segment(server, 443, client, 40000, kSyn | kAck, 5000, 1001, 0, 65160, 7)).size() ==
            1);
    REQUIRE(from_client(kAck, 1001, 5001).size() == 1);
    REQUIRE(from_server(kAck, 5001, 1001, 100).size() == 1);

    // A blind RST far outside the window: dropped, nothing sent.
    CHECK(from_server(kRst, 5101 + kFar, 0).empty());
    CHECK(lab.drops(DropReason::tcp_rst_out_of_window) == 1);

    // In the window but not exact: a challenge ACK goes back to its sender, as the client would send it.
    std::vector<Out> out = from_server(kRst | kAck, 5101 + 10, 1001);
    REQUIRE(out.size() == 1);
    CHECK(out[0].port == "wan");
    CHECK(out[0].frame.src == client);
    CHECK(out[0].frame.dst == server);
    CHECK(out[0].frame.tcp_flags == kAck);
    CHECK(out[0].frame.seq == 1001);
    CHECK(out[0].frame.ack == 5001);  // what the client acknowledged, not the server's 100 bytes it has not
    CHECK(out[0].frame.checksums_ok);
    CHECK(lab.drops(DropReason::tcp_rst_challenged) == 1);
    CHECK(lab.totals().challenge_acks_sent == 1);

    // Window scaling: 30000 bytes ahead is past 502 but inside 502 << 7; past 64256 is outside.
    CHECK(from_server(kAck, 5101 + 30000, 1001, 100).size() == 1);
    CHECK(from_server(kAck, 5001 + 64256 + 1000, 1001, 100).empty());
    CHECK(lab.drops(DropReason::tcp_out_of_window) == 1);
    // An ACK of data the client never sent.
    CHECK(from_server(kAck, 35201, 1001 + 500000).empty());
    CHECK(lab.drops(DropReason::tcp_out_of_window) == 2);

    // A SYN on the established connection: answered with a challenge ACK from the server's side, not passed on.
    out = send_one(lab, "lan", segment(client, 40000, server, 443, kSyn, 777777, 0, 0, 64240, 7));
    REQUIRE(out.size() == 1);
    CHECK(out[0].port == "lan");
    CHECK(out[0].frame.src == server);
    CHECK(out[0].frame.tcp_flags == kAck);
    CHECK(out[0].frame.seq == 35201);
    CHECK(out[0].frame.ack == 1001);
    CHECK(lab.drops(DropReason::tcp_syn_challenged) == 1);

    // None of them closed the connection: past the close timeout (10 s), it still carries data.
    lab.advance_seconds(11);
    CHECK(from_client(kAck, 1001, 35201, 10).size() == 1);

    // The RST at the server's next sequence closes it.
    out = from_server(kRst, 35201, 0);
    REQUIRE(out.size() == 1);
    CHECK(out[0].port == "lan");
    lab.advance_seconds(11);
    CHECK(from_client(kAck, 1011, 35201).empty());
    CHECK(lab.drops(DropReason::ct_no_connection) == 1);
    CHECK(lab.mbufs_out() == 0);
}

TEST_CASE("tcp window: blind RSTs through NAT, from either side", "[pipeline][tcp_window]") {
    PipelineLab lab(kNatConfig);
    const char *client = "203.0.113.7", *vip = "192.0.2.100", *backend = "10.1.0.11", *pool = "10.1.0.100";
    std::vector<Out> out = send_one(lab, "client", segment(client, 41000, vip, 80, kSyn, 1000, 0));
    REQUIRE(out.size() == 1);
    const uint16_t port = out[0].frame.src_port;  // the connection's pool port
    const auto from_client = [&](uint8_t flags, uint32_t seq, uint32_t ack, std::size_t payload = 0) {
        return send_one(lab, "client", segment(client, 41000, vip, 80, flags, seq, ack, payload));
    };
    const auto from_backend = [&](uint8_t flags, uint32_t seq, uint32_t ack, std::size_t payload = 0) {
        return send_one(lab, "server", segment(backend, 8080, pool, port, flags, seq, ack, payload));
    };
    REQUIRE(from_backend(kSyn | kAck, 7000, 1001).size() == 1);
    REQUIRE(from_client(kAck, 1001, 7001).size() == 1);

    CHECK(from_backend(kRst, 7001 + kFar, 0).empty());
    CHECK(from_client(kRst, 1001 + kFar, 0).empty());
    CHECK(lab.drops(DropReason::tcp_rst_out_of_window) == 2);

    // In the window, from the client's side: challenged from the VIP (the client's view of the server).
    out = from_client(kRst, 1001 + 5, 0);
    REQUIRE(out.size() == 1);
    CHECK(out[0].port == "client");
    CHECK(out[0].frame.src == vip);
    CHECK(out[0].frame.src_port == 80);
    CHECK(out[0].frame.dst == client);
    CHECK(out[0].frame.seq == 7001);
    CHECK(out[0].frame.ack == 1001);
    // ... and from the backend's side: challenged from the pool address and port (the backend's view).
    out = from_backend(kRst, 7001 + 5, 0);
    REQUIRE(out.size() == 1);
    CHECK(out[0].port == "server");
    CHECK(out[0].frame.src == pool);
    CHECK(out[0].frame.src_port == port);
    CHECK(out[0].frame.dst == backend);
    CHECK(out[0].frame.seq == 1001);
    CHECK(out[0].frame.ack == 7001);
    CHECK(out[0].frame.checksums_ok);
    CHECK(lab.drops(DropReason::tcp_rst_challenged) == 2);

    lab.advance_seconds(11);
    out = from_client(kAck, 1001, 7001, 10);
    REQUIRE(out.size() == 1);
    CHECK(out[0].port == "server");

    // The backend's exact RST closes it: then the client's next packet finds no state.
    out = from_backend(kRst, 7001, 0);
    REQUIRE(out.size() == 1);
    CHECK(out[0].port == "client");
    lab.advance_seconds(11);
    CHECK(from_client(kAck, 1011, 7001).empty());
    CHECK(lab.drops(DropReason::lb_nat_no_state) == 1);
    CHECK(lab.mbufs_out() == 0);
}

TEST_CASE("tcp window: blind RSTs through the SYN proxy's sequence shift", "[pipeline][tcp_window]") {
    PipelineLab lab(kNatConfig);
    const char *client = "203.0.113.8", *vip = "192.0.2.101", *backend = "10.1.0.12", *pool = "10.1.0.100";
    const auto from_client = [&](uint8_t flags, uint32_t seq, uint32_t ack, std::size_t payload = 0) {
        return send_one(lab, "client", segment(client, 42000, vip, 80, flags, seq, ack, payload));
    };
    std::vector<Out> out = from_client(kSyn, 1000, 0);
    REQUIRE(out.size() == 1);
    REQUIRE(out[0].frame.tcp_flags == (kSyn | kAck));
    const uint32_t cookie = out[0].frame.seq;
    out = from_client(kAck, 1001, cookie + 1);
    REQUIRE(out.size() == 1);
    REQUIRE(out[0].port == "server");
    REQUIRE(out[0].frame.tcp_flags == kSyn);
    const uint16_t port = out[0].frame.src_port;
    const auto from_backend = [&](uint8_t flags, uint32_t seq, uint32_t ack, std::size_t payload = 0) {
        return send_one(lab, "server", segment(backend, 8080, pool, port, flags, seq, ack, payload));
    };
    out = from_backend(kSyn | kAck, 9000, 1001);  // sluice completes the backend's handshake itself
    REQUIRE(out.size() == 1);
    REQUIRE(out[0].frame.tcp_flags == kAck);
    out = from_backend(kAck, 9001, 1001, 100);
    REQUIRE(out.size() == 1);
    CHECK(out[0].port == "client");
    CHECK(out[0].frame.seq == cookie + 1);  // in the client's (the cookie's) space

    CHECK(from_client(kRst, 1001 + kFar, 0).empty());
    CHECK(from_backend(kRst, 9101 + kFar, 0).empty());
    CHECK(lab.drops(DropReason::tcp_rst_out_of_window) == 2);

    // The backend's side: the challenge carries the backend's own sequence space.
    out = from_backend(kRst, 9101 + 10, 0);
    REQUIRE(out.size() == 1);
    CHECK(out[0].port == "server");
    CHECK(out[0].frame.src == pool);
    CHECK(out[0].frame.seq == 1001);
    CHECK(out[0].frame.ack == 9001);  // the client has not acknowledged the backend's 100 bytes yet
    // The client's side: the cookie's.
    out = from_client(kRst, 1001 + 3, 0);
    REQUIRE(out.size() == 1);
    CHECK(out[0].port == "client");
    CHECK(out[0].frame.src == vip);
    CHECK(out[0].frame.seq == cookie + 101);
    CHECK(out[0].frame.ack == 1001);

    lab.advance_seconds(11);
    out = from_client(kAck, 1001, cookie + 101, 10);
    REQUIRE(out.size() == 1);
    CHECK(out[0].port == "server");
    CHECK(out[0].frame.ack == 9101);

    out = from_backend(kRst, 9101, 0);  // exact, in the backend's space
    REQUIRE(out.size() == 1);
    CHECK(out[0].port == "client");
    CHECK(out[0].frame.seq == cookie + 101);
    lab.advance_seconds(11);
    CHECK(from_client(kAck, 1011, cookie + 101).empty());
    CHECK(lab.mbufs_out() == 0);
}

TEST_CASE("tcp window: tcp_window_check liberal and off, from the firewall's default and a rule",
          "[pipeline][tcp_window]") {
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
  tcp_window_check: liberal
  rules:
    - {name: legacy, in_ports: [lan], protocol: tcp, destination_ports: 23, action: allow, tcp_window_check: off}
    - {name: inside-out, in_ports: [lan], action: allow}
)");
    const char *client = "10.0.0.2", *server = "203.0.113.9";
    for (uint16_t port : {443, 23}) {
        INFO("port " << port);
        const bool off = port == 23;
        const auto from_client = [&](uint8_t flags, uint32_t seq, uint32_t ack, std::size_t payload = 0) {
            return send_one(lab, "lan", segment(client, 40000, server, port, flags, seq, ack, payload));
        };
        const auto from_server = [&](uint8_t flags, uint32_t seq, uint32_t ack, std::size_t payload = 0) {
            return send_one(lab, "wan", segment(server, port, client, 40000, flags, seq, ack, payload));
        };
        REQUIRE(from_client(kSyn, 1000, 0).size() == 1);
        REQUIRE(from_server(kSyn | kAck, 5000, 1001).size() == 1);
        REQUIRE(from_client(kAck, 1001, 5001).size() == 1);
        // Data far outside the window passes either way (liberal learns from it; off does not look).
        CHECK(from_server(kAck, 5001 + kFar, 1001, 10).size() == 1);
        // A RST far away: liberal answers it with a challenge ACK and keeps the connection; off lets it close it.
        std::vector<Out> out = from_server(kRst, 5001 + 2 * kFar, 0);
        REQUIRE(out.size() == 1);
        CHECK(out[0].port == (off ? "lan" : "wan"));
        lab.advance_seconds(11);
        CHECK(from_client(kAck, 1001, 5001).size() == (off ? 0u : 1u));
    }
    CHECK(lab.drops(DropReason::tcp_rst_challenged) == 1);
    CHECK(lab.mbufs_out() == 0);
}

TEST_CASE("tcp window: a dsr connection (one way) is checked loosely", "[pipeline][tcp_window]") {
    PipelineLab lab(R"(
ports:
  - {name: client, device: ring_client}
  - {name: server, device: ring_server}
lcores: [{id: 1, roles: [rx, worker]}]
forward:
  - {from: client, to: server, next_hop_mac: "02:00:00:00:00:0b"}
  - {from: server, to: client, next_hop_mac: "02:00:00:00:00:0a"}
services:
  - {name: web, vip: 192.0.2.100, port: 80, protocol: tcp, mode: dsr,
     backends: [{address: 10.1.0.21, mac: "02:00:00:00:03:21"}]}
)");
    const char *client = "203.0.113.7", *vip = "192.0.2.100";
    const auto from_client = [&](uint8_t flags, uint32_t seq, uint32_t ack, std::size_t payload = 0) {
        return send_one(lab, "client", segment(client, 43000, vip, 80, flags, seq, ack, payload));
    };
    REQUIRE(from_client(kSyn, 1000, 0).size() == 1);
    REQUIRE(from_client(kAck, 1001, 5001).size() == 1);
    REQUIRE(from_client(kAck, 1001, 5001, 100).size() == 1);
    // Not at the client's next sequence: a challenge ACK from the VIP (its sequence: the client's latest ACK), the
    // entry kept. The backend's window is never seen, so nothing is judged out of it.
    std::vector<Out> out = from_client(kRst, 1101 + kFar, 0);
    REQUIRE(out.size() == 1);
    CHECK(out[0].port == "client");
    CHECK(out[0].frame.src == vip);
    CHECK(out[0].frame.seq == 5001);
    CHECK(out[0].frame.ack == 1101);
    CHECK(lab.drops(DropReason::tcp_rst_challenged) == 1);
    lab.advance_seconds(11);
    REQUIRE(from_client(kAck, 1101, 5001).size() == 1);
    CHECK(lab.totals().lb_adoptions == 0);  // still tracked: not picked up again
    // At the exact sequence: to the backend, and the entry ends (the next ACK is picked up mid-stream).
    out = from_client(kRst, 1101, 0);
    REQUIRE(out.size() == 1);
    CHECK(out[0].port == "server");
    lab.advance_seconds(11);
    REQUIRE(from_client(kAck, 1101, 5001).size() == 1);
    CHECK(lab.totals().lb_adoptions == 1);
    CHECK(lab.mbufs_out() == 0);
}

TEST_CASE("tcp window: a challenge ACK goes to the end the segment claims to come from, not to the frame's sender",
          "[pipeline][tcp_window]") {
    // A host beside the server (its own MAC, 02:00:00:00:00:66) sends a SYN and an in-window RST in the server's
    // name: answered to it, the challenge ACK would give it the exact sequence of a RST that closes the connection.
    PipelineLab lab(kForwardConfig);
    const char *client = "10.0.0.2", *server = "203.0.113.9";
    const auto send_as = [&](const std::string& port, uint8_t src_mac, const char* src, uint16_t sport, const char* dst,
                             uint16_t dport, uint8_t flags, uint32_t seq, uint32_t ack) {
        FrameSpec f = segment(src, sport, dst, dport, flags, seq, ack);
        f.src_mac_last = src_mac;
        return send_one(lab, port, f);
    };
    REQUIRE(send_as("lan", 0x0a, client, 40000, server, 443, kSyn, 1000, 0).size() == 1);
    REQUIRE(send_as("wan", 0x0b, server, 443, client, 40000, kSyn | kAck, 5000, 1001).size() == 1);
    REQUIRE(send_as("lan", 0x0a, client, 40000, server, 443, kAck, 1001, 5001).size() == 1);

    for (const uint8_t flags : {kSyn, kRst}) {
        INFO("flags " << int(flags));
        // From the server's LAN: to the server's next hop (0b), as the client's packets to it go.
        std::vector<Out> out = send_as("wan", 0x66, server, 443, client, 40000, flags, 5001 + 7, 0);
        REQUIRE(out.size() == 1);
        CHECK(out[0].port == "wan");
        CHECK(out[0].frame.dst_mac_last == 0x0b);
        CHECK(out[0].frame.dst == server);
        CHECK(out[0].frame.tcp_flags == kAck);
        CHECK(out[0].frame.ttl == 64);  // sluice's own segment: no hop counted
        // From the client's side in the server's name: still to the server.
        out = send_as("lan", 0x66, server, 443, client, 40000, flags, 5001 + 7, 0);
        REQUIRE(out.size() == 1);
        CHECK(out[0].port == "wan");
        CHECK(out[0].frame.dst_mac_last == 0x0b);
        // In the client's name from the server's side: to the client.
        out = send_as("wan", 0x66, client, 40000, server, 443, flags, 1001 + 7, 0);
        REQUIRE(out.size() == 1);
        CHECK(out[0].port == "lan");
        CHECK(out[0].frame.dst_mac_last == 0x0a);
        CHECK(out[0].frame.dst == client);
    }
    CHECK(lab.totals().challenge_acks_sent == 6);
    // The connection lives on.
    lab.advance_seconds(11);
    CHECK(send_as("lan", 0x0a, client, 40000, server, 443, kAck, 1001, 5001).size() == 1);
    CHECK(lab.mbufs_out() == 0);
}

TEST_CASE("tcp window: routed, a challenge ACK goes by the route to its destination, to the host's own MAC",
          "[pipeline][tcp_window][routes]") {
    PipelineLab lab(R"(
ports:
  - {name: lan, device: ring_lan, addresses: [10.0.0.1/24]}
  - {name: wan, device: ring_wan, addresses: [192.0.2.1/24]}
lcores: [{id: 1, roles: [rx, worker]}]
routes:
  - {prefix: 198.51.100.0/24, next_hops: [192.0.2.11]}
firewall:
  default: deny
  rules:
    - {name: inside-out, in_ports: [lan], action: allow}
)");
    lab.set_neighbour("192.0.2.11", std::array<uint8_t, 6>{0x02, 0, 0, 0, 0, 0x11});
    lab.add_connected_host("10.0.0.2", "lan", {0x02, 0, 0, 0, 0, 0x02});
    const char *client = "10.0.0.2", *server = "198.51.100.9";
    const auto send_as = [&](const std::string& port, uint8_t src_mac, const char* src, uint16_t sport, const char* dst,
                             uint16_t dport, uint8_t flags, uint32_t seq, uint32_t ack) {
        FrameSpec f = segment(src, sport, dst, dport, flags, seq, ack);
        f.src_mac_last = src_mac;
        return send_one(lab, port, f);
    };
    REQUIRE(send_as("lan", 0x02, client, 40000, server, 443, kSyn, 1000, 0).size() == 1);
    REQUIRE(send_as("wan", 0x11, server, 443, client, 40000, kSyn | kAck, 5000, 1001).size() == 1);
    REQUIRE(send_as("lan", 0x02, client, 40000, server, 443, kAck, 1001, 5001).size() == 1);
    // A host on the client's LAN, in the client's name: the ACK goes to the client's MAC.
    std::vector<Out> out = send_as("lan", 0x66, client, 40000, server, 443, kSyn, 77777, 0);
    REQUIRE(out.size() == 1);
    CHECK(out[0].port == "lan");
    CHECK(out[0].frame.dst_mac_last == 0x02);
    CHECK(out[0].frame.seq == 5001);
    // In the server's name: by the route to the server, its next hop.
    out = send_as("lan", 0x66, server, 443, client, 40000, kRst, 5001 + 3, 0);
    REQUIRE(out.size() == 1);
    CHECK(out[0].port == "wan");
    CHECK(out[0].frame.dst_mac_last == 0x11);
    CHECK(out[0].frame.ttl == 64);
    CHECK(out[0].frame.checksums_ok);
    CHECK(lab.totals().challenge_acks_sent == 2);
    CHECK(lab.mbufs_out() == 0);
}

TEST_CASE("syn proxy: while the backend has not answered, only a pure ACK resends the SYN; data and FIN wait",
          "[pipeline][tcp_window][syn_proxy]") {
    PipelineLab lab(kNatConfig);
    const char *client = "203.0.113.9", *vip = "192.0.2.101", *backend = "10.1.0.12", *pool = "10.1.0.100";
    const auto from_client = [&](uint8_t flags, uint32_t seq, uint32_t ack, std::size_t payload = 0) {
        return send_one(lab, "client", segment(client, 42001, vip, 80, flags, seq, ack, payload));
    };
    std::vector<Out> out = from_client(kSyn, 1000, 0);
    REQUIRE(out.size() == 1);
    const uint32_t cookie = out[0].frame.seq;
    out = from_client(kAck, 1001, cookie + 1);
    REQUIRE(out.size() == 1);
    REQUIRE(out[0].frame.tcp_flags == kSyn);
    const uint16_t port = out[0].frame.src_port;
    const uint64_t pending = lab.drops(DropReason::syn_proxy_pending);

    // The client's request right after its ACK, in a later burst: the cookie ACK's numbers, but data. Not a SYN.
    CHECK(from_client(kAck | kPush, 1001, cookie + 1, 100).empty());
    CHECK(from_client(kFin | kAck, 1001, cookie + 1).empty());
    CHECK(lab.drops(DropReason::syn_proxy_pending) == pending + 2);
    // A retransmitted cookie ACK still resends the SYN (the first may have been lost).
    out = from_client(kAck, 1001, cookie + 1);
    REQUIRE(out.size() == 1);
    CHECK(out[0].port == "server");
    CHECK(out[0].frame.tcp_flags == kSyn);
    CHECK(out[0].frame.seq == 1000);
    CHECK(out[0].frame.src_port == port);

    // The backend answers; the client's request, sent again, reaches it in the backend's sequence space.
    out = send_one(lab, "server", segment(backend, 8080, pool, port, kSyn | kAck, 9000, 1001));
    REQUIRE(out.size() == 1);
    REQUIRE(out[0].frame.tcp_flags == kAck);
    out = from_client(kAck | kPush, 1001, cookie + 1, 100);
    REQUIRE(out.size() == 1);
    CHECK(out[0].port == "server");
    CHECK(out[0].frame.tcp_flags == (kAck | kPush));
    CHECK(out[0].frame.ack == 9001);
    CHECK(lab.mbufs_out() == 0);
}

TEST_CASE("tcp window: flows list each side's window, explain names the check a connection gets",
          "[pipeline][tcp_window][flows][explain]") {
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
    - {name: legacy, in_ports: [lan], protocol: tcp, destination_ports: 23, action: allow, tcp_window_check: off}
    - {name: inside-out, in_ports: [lan], action: allow}
)");
    const char *client = "10.0.0.2", *server = "203.0.113.9";
    REQUIRE(send_one(lab, "lan", segment(client, 40000, server, 443, kSyn, 1000, 0, 0, 64240, 7)).size() == 1);
    REQUIRE(send_one(lab, "wan", segment(server, 443, client, 40000, kSyn | kAck, 5000, 1001, 0, 65160, 7)).size() ==
            1);
    REQUIRE(send_one(lab, "lan", segment(client, 40000, server, 443, kAck, 1001, 5001, 0, 502)).size() == 1);
    REQUIRE(send_one(lab, "wan", segment(server, 443, client, 40000, kAck, 5001, 1001, 100, 509)).size() == 1);
    REQUIRE(send_one(lab, "wan", segment(server, 443, client, 40000, kRst, 5001 + 50, 0)).size() == 1);  // challenged

    // The worker's table, walked as `sluicectl flows` walks it.
    LcoreContext worker;
    lab.dataplane().for_each_lcore([&](const LcoreContext& ctx) {
        if (ctx.worker) worker.conn_table = ctx.conn_table;
    });
    REQUIRE(worker.conn_table);
    std::vector<std::unique_ptr<FlowWalk>> walks;
    walks.push_back(std::make_unique<FlowWalk>());
    walks[0]->max_records = 8;
    walks[0]->records.reserve(8);
    advance_flow_walk(worker, *walks[0], UINT64_MAX);
    REQUIRE(walks[0]->records.size() == 1);
    const TcpWindow& w = walks[0]->records[0].window;
    CHECK(tcp_window_check_of(w) == TcpWindowCheck::strict);
    CHECK(w.side[0].end == 1001);
    CHECK(w.side[0].maxack == 5001);  // the client has not acknowledged the server's 100 bytes
    CHECK(w.side[1].end == 5101);
    CHECK(w.side[1].maxack == 1001);
    CHECK(w.flags[1] & kWindowSideChallenged);
    CHECK_FALSE(w.flags[0] & kWindowSideChallenged);
    const auto lines = flow_lines(walks, 8, lab.now_tsc(), rte_get_tsc_hz(), [](uint32_t) { return std::string(); });
    REQUIRE(lines.size() == 2);
    INFO(lines[1]);
    CHECK(lines[1].find("window strict; initiator end 1001 maxend ") != std::string::npos);
    CHECK(lines[1].find(" maxack 5001 scale 7; responder end 5101 ") != std::string::npos);
    CHECK(lines[1].ends_with(" maxack 1001 scale 7 challenged"));

    // explain: the check a new connection would get, from its rule or the firewall's default.
    const auto explained = [&](uint16_t port) {
        ExplainQuery query;
        std::string error;
        REQUIRE(parse_explain_query(fmt::format("tcp {}:40001 {}:{} lan", client, server, port), query, error));
        std::string text;
        for (const std::string& line : explain(lab.snapshot(), lab.ports(), 1, query)) text += line + "\n";
        return text;
    };
    CHECK(explained(443).find("tcp window: the connection's sequence numbers are checked strict") != std::string::npos);
    CHECK(explained(23).find("tcp window: the connection's sequence numbers are checked off") != std::string::npos);
    CHECK(lab.mbufs_out() == 0);
}

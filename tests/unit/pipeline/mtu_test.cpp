// Ports of different MTUs through the whole data path (PipelineLab): a packet over the egress port's MTU gets ICMP
// "fragmentation needed" (IPv4 with DF) or ICMPv6 "packet too big" with that MTU back, quoting it as it came; IPv4
// without DF is dropped under a reason of its own; a packet of exactly the MTU passes; a jumbo frame between two 9000
// ports leaves whole, routed and through a nat VIP.
#include <catch2/catch.hpp>

#include <cstring>

#include <rte_eth_ring.h>
#include <rte_ethdev.h>

#include "dpdk/startup_error.hpp"
#include "pipeline/pipeline_lab.hpp"

using namespace sluice;
using namespace sluice::test;

namespace {

// lan and dc take jumbo frames, wan the Ethernet default.
constexpr const char* kConfig = R"(
ports:
  - {name: lan, device: ring_lan, mtu: 9000, addresses: [10.0.0.1/24, "2001:db8::1/64"]}
  - {name: wan, device: ring_wan, addresses: [192.0.2.1/24, "2001:db8:1::1/64"]}
  - {name: dc, device: ring_dc, mtu: 9000, addresses: [172.16.0.1/24]}
lcores: [{id: 1, roles: [rx, worker]}]
routes:
  - {prefix: 198.51.100.0/24, next_hops: [192.0.2.11]}
  - {prefix: "2001:db8:5::/48", next_hops: ["2001:db8:1::11"]}
  - {prefix: 203.0.113.0/24, next_hops: [172.16.0.254]}
load_balancer:
  nat_pool: [172.16.0.100]
services:
  - name: web
    vip: 10.0.0.80
    port: 80
    protocol: tcp
    mode: nat
    backends: [{address: 172.16.0.10, port: 8080, mac: "02:00:00:00:0c:0a"}]
)";

void resolve(PipelineLab& lab) {
    lab.set_neighbour("192.0.2.11", mac(11));
    lab.set_neighbour("2001:db8:1::11", mac(0x11));
    lab.set_neighbour("172.16.0.254", mac(0xfe));
    lab.add_connected_host("10.0.0.5", "lan", mac(5));  // the clients, for the replies
}

// A UDP datagram whose IP packet is ip_bytes long.
Bytes udp_of_size(const char* src, const char* dst, std::size_t ip_bytes) {
    FrameSpec f = udp_spec(src, 4000, dst, 5000);
    f.payload = ip_bytes - (is_v6(src) ? 40 : 20) - 8;
    return frame(f);
}

// The IPv4 frame with DF cleared (its header checksum made right again).
Bytes without_df(Bytes b) {
    b[14 + 6] &= static_cast<uint8_t>(~0x40);
    b[14 + 10] = b[14 + 11] = 0;
    const uint16_t sum = checksum_compute(&b[14], 20);
    std::memcpy(&b[14 + 10], &sum, 2);
    return b;
}

uint32_t get32(const uint8_t* p) { return static_cast<uint32_t>(get16(p)) << 16 | get16(p + 2); }

}  // namespace

TEST_CASE("mtu: IPv4 with DF over the egress MTU gets fragmentation needed with it, quoting the packet as it came",
          "[mtu][pipeline]") {
    PipelineLab lab(kConfig);
    resolve(lab);
    const Bytes big = udp_of_size("10.0.0.5", "198.51.100.7", 1501);
    CHECK(lab.exchange("lan", {big}, "wan").empty());
    const std::vector<Bytes> back = lab.take_sent("lan");
    REQUIRE(back.size() == 1);
    const SeenFrame seen = read_frame(back[0]);
    CHECK(seen.proto == IPPROTO_ICMP);
    CHECK(seen.dst == "10.0.0.5");
    CHECK(seen.checksums_ok);
    const uint8_t* icmp = &back[0][14 + 20];
    CHECK(icmp[0] == 3);
    CHECK(icmp[1] == 4);                          // fragmentation needed and DF set (RFC 792)
    CHECK(get16(icmp + 6) == 1500);               // next-hop MTU (RFC 1191)
    REQUIRE(back[0].size() == 14 + 20 + 8 + 28);  // the IP header and the first 8 bytes of its data
    CHECK(Bytes(icmp + 8, icmp + 8 + 28) == Bytes(big.begin() + 14, big.begin() + 14 + 28));
    CHECK(lab.drops(DropReason::frame_too_big) == 1);
    CHECK(lab.totals().too_big_sent == 1);
    CHECK(lab.mbufs_out() == 0);
}

TEST_CASE("mtu: IPv6 over the egress MTU gets packet too big with it", "[mtu][pipeline]") {
    PipelineLab lab(kConfig);
    resolve(lab);
    const Bytes big = udp_of_size("2001:db8::5", "2001:db8:5::7", 1501);
    CHECK(lab.exchange("lan", {big}, "wan").empty());
    const std::vector<Bytes> back = lab.take_sent("lan");
    REQUIRE(back.size() == 1);
    const SeenFrame seen = read_frame(back[0]);
    CHECK(seen.proto == IPPROTO_ICMPV6);
    CHECK(seen.dst == "2001:db8::5");
    CHECK(seen.checksums_ok);
    const uint8_t* icmp = &back[0][14 + 40];
    CHECK(icmp[0] == 2);  // packet too big (RFC 4443 3.2)
    CHECK(icmp[1] == 0);
    CHECK(get32(icmp + 4) == 1500);
    REQUIRE(back[0].size() == 14 + 1280);  // as much of the packet as fits in the minimum MTU
    CHECK(Bytes(icmp + 8, back[0].data() + back[0].size()) == Bytes(big.begin() + 14, big.begin() + 14 + 1280 - 48));
    CHECK(lab.drops(DropReason::frame_too_big) == 1);
}

TEST_CASE("mtu: IPv4 without DF over the egress MTU is dropped, counted apart, and answered by nothing",
          "[mtu][pipeline]") {
    PipelineLab lab(kConfig);
    resolve(lab);
    CHECK(lab.exchange("lan", {without_df(udp_of_size("10.0.0.5", "198.51.100.7", 1501))}, "wan").empty());
    CHECK(lab.take_sent("lan").empty());
    CHECK(lab.drops(DropReason::frame_too_big_no_df) == 1);
    CHECK(lab.drops(DropReason::frame_too_big) == 0);
    CHECK(lab.totals().too_big_sent == 0);
}

TEST_CASE("mtu: a packet of exactly the egress MTU passes, both families and without DF", "[mtu][pipeline]") {
    PipelineLab lab(kConfig);
    resolve(lab);
    const auto out = lab.exchange("lan",
                                  {udp_of_size("10.0.0.5", "198.51.100.7", 1500),
                                   without_df(udp_of_size("10.0.0.5", "198.51.100.8", 1500)),
                                   udp_of_size("2001:db8::5", "2001:db8:5::7", 1500)},
                                  "wan");
    REQUIRE(out.size() == 3);
    for (const Bytes& b : out) {
        CHECK(b.size() == 14 + 1500);
        CHECK(read_frame(b).checksums_ok);
    }
    CHECK(lab.totals().total_drops() == 0);
}

TEST_CASE("mtu: a 9000-byte packet between two jumbo ports is routed whole; 9001 bytes is not", "[mtu][pipeline]") {
    PipelineLab lab(kConfig);
    resolve(lab);
    const Bytes jumbo = udp_of_size("10.0.0.5", "203.0.113.9", 9000);
    auto out = lab.exchange("lan", {jumbo}, "dc");
    REQUIRE(out.size() == 1);
    CHECK(out[0].size() == 14 + 9000);
    const SeenFrame seen = read_frame(out[0]);
    CHECK(seen.dst_mac_last == 0xfe);
    CHECK(seen.ttl == 63);
    CHECK(seen.checksums_ok);
    CHECK(Bytes(out[0].begin() + 14 + 28, out[0].end()) == Bytes(jumbo.begin() + 14 + 28, jumbo.end()));

    CHECK(lab.exchange("lan", {udp_of_size("10.0.0.5", "203.0.113.9", 9001)}, "dc").empty());
    const std::vector<Bytes> back = lab.take_sent("lan");
    REQUIRE(back.size() == 1);
    CHECK(get16(&back[0][14 + 20 + 6]) == 9000);
    CHECK(lab.mbufs_out() == 0);
}

TEST_CASE("mtu: a jumbo TCP segment through a nat VIP reaches its backend whole, and the reply its client",
          "[mtu][pipeline]") {
    PipelineLab lab(kConfig);
    resolve(lab);
    auto out = lab.exchange("lan", {frame(tcp_spec("10.0.0.5", 40000, "10.0.0.80", 80))}, "dc");
    REQUIRE(out.size() == 1);
    const uint16_t nat_port = read_frame(out[0]).src_port;
    FrameSpec syn_ack = tcp_spec("172.16.0.10", 8080, "172.16.0.100", nat_port, kSyn | kAck);
    syn_ack.seq = 5000, syn_ack.ack = 1001;
    REQUIRE(lab.exchange("dc", {frame(syn_ack)}, "lan").size() == 1);

    FrameSpec data = tcp_spec("10.0.0.5", 40000, "10.0.0.80", 80, kAck);
    data.seq = 1001, data.ack = 5001, data.payload = 9000 - 20 - 20;
    out = lab.exchange("lan", {frame(data)}, "dc");
    REQUIRE(out.size() == 1);
    CHECK(out[0].size() == 14 + 9000);
    SeenFrame seen = read_frame(out[0]);
    CHECK(seen.src == "172.16.0.100");
    CHECK(seen.dst == "172.16.0.10");
    CHECK(seen.dst_port == 8080);
    CHECK(seen.checksums_ok);

    FrameSpec reply = tcp_spec("172.16.0.10", 8080, "172.16.0.100", nat_port, kAck);
    reply.seq = 5001, reply.ack = 1001 + 8960, reply.payload = 8960;
    out = lab.exchange("dc", {frame(reply)}, "lan");
    REQUIRE(out.size() == 1);
    CHECK(out[0].size() == 14 + 9000);
    seen = read_frame(out[0]);
    CHECK(seen.src == "10.0.0.80");
    CHECK(seen.dst == "10.0.0.5");
    CHECK(seen.checksums_ok);
    CHECK(lab.totals().total_drops() == 0);
}

TEST_CASE("mtu: a port does not start on mbufs too small for its largest frame", "[mtu][pipeline]") {
    rte_ring* ring = rte_ring_create("mtu_small_pool", 64, static_cast<int>(rte_socket_id()), 0);
    REQUIRE(ring);
    const int id = rte_eth_from_ring(ring);
    REQUIRE(id >= 0);
    rte_mempool* pool = rte_pktmbuf_pool_create("mtu_small_pool", 255, 0, 0, RTE_MBUF_DEFAULT_BUF_SIZE,
                                                static_cast<int>(rte_socket_id()));
    REQUIRE(pool);
    char name[RTE_ETH_NAME_MAX_LEN];
    REQUIRE(rte_eth_dev_get_name_by_port(static_cast<uint16_t>(id), name) == 0);
    PortSpec spec{.name = "jumbo", .device = name, .mtu = 9000};
    {
        Port port(spec);
        CHECK_THROWS_WITH(port.start(1, pool, false),
                          "port 'jumbo': mtu 9000 needs mbufs of 9026 bytes of data, pool 'mtu_small_pool' has 2048");
    }
    rte_mempool_free(pool);
    rte_ring_free(ring);
}

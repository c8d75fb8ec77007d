// 802.1Q sub-interfaces (ports[].vlans) through the whole data path (PipelineLab): tagged ARP and ND answered on
// their VLAN, routing between two VLANs and the untagged link of one trunk (each frame leaves with its way out's
// tag), frames of a VLAN the port does not carry dropped and counted, rules on a VLAN (in_ports), and a NAT service
// whose client and backend sit on VLANs. sluice's own tagged solicitations (sent by lcore_main only, which the lab
// does not run) are tested in tests/integration/test_vlans.py.
#include <catch2/catch.hpp>

#include "packet/vlan.hpp"
#include "pipeline/pipeline_lab.hpp"

using namespace sluice;
using namespace sluice::test;

namespace {

constexpr const char* kTrunk = R"(
ports:
  - name: trunk
    device: ring_trunk
    addresses: [10.0.0.1/24, "2001:db8::1/64"]
    vlans:
      - {id: 100, addresses: [10.100.0.1/24, "2001:db8:100::1/64"]}
      - {id: 200, name: guest, addresses: [10.200.0.1/24]}
  - {name: wan, device: ring_wan, addresses: [192.0.2.1/24]}
lcores: [{id: 1, roles: [rx, worker]}]
routes:
  - {prefix: 198.51.100.0/24, next_hops: [{address: 10.100.0.254, port: trunk.100}]}
  - {prefix: 203.0.113.0/24, next_hops: [192.0.2.254]}
)";

constexpr std::array<uint8_t, 6> kHost{0x02, 0, 0, 0, 0x0c, 0x05};

FrameSpec udp(const char* src, uint16_t sport, const char* dst) { return udp_spec(src, sport, dst, 53); }

// Hosts on the trunk's three links and on wan, resolved as the daemon's glean would.
void resolve_hosts(PipelineLab& lab) {
    lab.add_connected_host("10.100.0.5", "trunk.100", mac(0x15));
    lab.add_connected_host("10.200.0.7", "trunk.200", mac(0x27));
    lab.add_connected_host("10.0.0.9", "trunk", mac(0x09));
    lab.add_connected_host("192.0.2.50", "wan", mac(0x50));
}

}  // namespace

TEST_CASE("vlans: a tagged ARP request is answered on its VLAN, and only for that VLAN's addresses",
          "[vlans][pipeline]") {
    PipelineLab lab(kTrunk);
    lab.dataplane().take_neighbour_events();
    auto out = lab.exchange("trunk", {tagged(arp_request(kHost, "10.100.0.5", "10.100.0.1"), 100)}, "trunk");
    REQUIRE(out.size() == 1);
    CHECK(vlan_of(out[0]) == 100);
    const Bytes reply = untagged(out[0]);
    REQUIRE(reply.size() >= 42);
    CHECK(get16(&reply[12]) == 0x0806);
    CHECK(get16(&reply[20]) == 2);  // an ARP reply
    CHECK(Bytes(reply.begin(), reply.begin() + 6) == Bytes(kHost.begin(), kHost.end()));
    CHECK(Bytes(reply.begin() + 28, reply.begin() + 32) == address_bytes("10.100.0.1"));
    // The sender is learned on its VLAN's interface.
    const auto events = lab.dataplane().take_neighbour_events();
    REQUIRE(events.size() == 1);
    CHECK(events[0].port == interface_id(lab.port_id("trunk"), 100));
    // VLAN 100's address asked on VLAN 200, or untagged: not answered.
    CHECK(lab.exchange("trunk", {tagged(arp_request(kHost, "10.200.0.5", "10.100.0.1"), 200)}, "trunk").empty());
    CHECK(lab.exchange("trunk", {arp_request(kHost, "10.0.0.5", "10.100.0.1")}, "trunk").empty());
    CHECK(lab.drops(DropReason::neighbour_frame) == 2);
    // The port's own address, asked untagged: answered untagged.
    out = lab.exchange("trunk", {arp_request(kHost, "10.0.0.5", "10.0.0.1")}, "trunk");
    REQUIRE(out.size() == 1);
    CHECK(vlan_of(out[0]) == -1);
}

TEST_CASE("vlans: a tagged neighbour solicitation gets a tagged advertisement", "[vlans][pipeline]") {
    PipelineLab lab(kTrunk);
    const auto out = lab.exchange(
        "trunk", {tagged(neighbour_solicitation(kHost, "2001:db8:100::5", "2001:db8:100::1"), 100)}, "trunk");
    REQUIRE(out.size() == 1);
    CHECK(vlan_of(out[0]) == 100);
    const Bytes na = untagged(out[0]);
    REQUIRE(na.size() >= 14 + 40 + 32);
    CHECK(get16(&na[12]) == 0x86dd);
    CHECK(na[14 + 40] == 136);  // neighbour advertisement
    CHECK(Bytes(na.begin() + 14 + 40 + 8, na.begin() + 14 + 40 + 24) == address_bytes("2001:db8:100::1"));
    CHECK(Bytes(na.begin() + 14 + 24, na.begin() + 14 + 40) == address_bytes("2001:db8:100::5"));
}

TEST_CASE("vlans: a trunk routes between its two VLANs and its untagged link, each frame with its way out's tag",
          "[vlans][pipeline]") {
    PipelineLab lab(kTrunk);
    resolve_hosts(lab);
    lab.set_neighbour("10.100.0.254", mac(0xfe));
    lab.set_neighbour("192.0.2.254", mac(0x54));
    struct Case {
        const char* description;
        std::string in_port;
        int in_vlan;  // -1: untagged
        FrameSpec spec;
        std::string out_port;
        int out_vlan;
        uint8_t out_mac;
    };
    const std::vector<Case> cases = {
        {"VLAN 100 to VLAN 200", "trunk", 100, udp("10.100.0.5", 1000, "10.200.0.7"), "trunk", 200, 0x27},
        {"VLAN 200 to VLAN 100", "trunk", 200, udp("10.200.0.7", 53, "10.100.0.5"), "trunk", 100, 0x15},
        {"VLAN 100 to the untagged link", "trunk", 100, udp("10.100.0.5", 1001, "10.0.0.9"), "trunk", -1, 0x09},
        {"the untagged link to VLAN 200", "trunk", -1, udp("10.0.0.9", 1002, "10.200.0.7"), "trunk", 200, 0x27},
        {"VLAN 200 to wan", "trunk", 200, udp("10.200.0.7", 1003, "192.0.2.50"), "wan", -1, 0x50},
        {"wan to a static route via VLAN 100", "wan", -1, udp("192.0.2.50", 1004, "198.51.100.9"), "trunk", 100, 0xfe},
        {"VLAN 100 to a static route on wan", "trunk", 100, udp("10.100.0.5", 1005, "203.0.113.9"), "wan", -1, 0x54},
        {"a priority tag (VLAN 0) is the untagged link's", "trunk", 0, udp("10.0.0.9", 1006, "10.100.0.5"), "trunk",
         100, 0x15},
    };
    for (const Case& c : cases) {
        INFO(c.description);
        const Bytes in = c.in_vlan < 0 ? frame(c.spec) : tagged(frame(c.spec), static_cast<uint16_t>(c.in_vlan), 5);
        lab.send(c.in_port, {in});
        lab.run();
        const auto out = lab.take_sent(c.out_port);
        REQUIRE(out.size() == 1);
        CHECK(vlan_of(out[0]) == c.out_vlan);
        const SeenFrame seen = read_frame(out[0]);
        CHECK(seen.dst_mac_last == c.out_mac);
        CHECK(seen.ttl == 63);
        CHECK(seen.checksums_ok);
        CHECK(seen.dst == c.spec.dst);
        CHECK(lab.take_sent(c.out_port == "trunk" ? "wan" : "trunk").empty());
    }
    CHECK(lab.drops(DropReason::vlan_unknown) == 0);
}

TEST_CASE("vlans: a host on a VLAN's link is gleaned on that VLAN; an ICMP error goes back tagged",
          "[vlans][pipeline]") {
    PipelineLab lab(kTrunk);
    lab.dataplane().take_neighbour_events();
    CHECK(lab.exchange("wan", {frame(udp("192.0.2.50", 1000, "10.200.0.99"))}, "trunk").empty());
    CHECK(lab.drops(DropReason::neighbour_unresolved) == 1);
    const auto asked = lab.dataplane().take_neighbour_events();
    REQUIRE(asked.size() == 1);
    CHECK(asked[0].port == interface_id(lab.port_id("trunk"), 200));
    // No route to 172.16.0.1: the unreachable comes from VLAN 100's own address, on VLAN 100.
    const auto out = lab.exchange("trunk", {tagged(frame(udp("10.100.0.5", 1000, "172.16.0.1")), 100)}, "trunk");
    REQUIRE(out.size() == 1);
    CHECK(vlan_of(out[0]) == 100);
    const SeenFrame seen = read_frame(out[0]);
    CHECK(seen.src == "10.100.0.1");
    CHECK(seen.dst == "10.100.0.5");
    CHECK(seen.proto == IPPROTO_ICMP);
    CHECK(lab.drops(DropReason::no_route) == 1);
}

TEST_CASE("vlans: frames of a VLAN the port does not carry, 802.1ad and double tags are dropped and counted",
          "[vlans][pipeline]") {
    PipelineLab lab(kTrunk);
    resolve_hosts(lab);
    const Bytes plain = frame(udp("10.100.0.5", 1000, "10.200.0.7"));
    CHECK(lab.exchange("trunk", {tagged(plain, 300)}, "trunk").empty());
    CHECK(lab.drops(DropReason::vlan_unknown) == 1);
    CHECK(lab.exchange("wan", {tagged(plain, 100)}, "trunk").empty());  // wan carries no VLAN at all
    CHECK(lab.drops(DropReason::vlan_unknown) == 2);
    CHECK(lab.exchange("trunk", {tagged(tagged(plain, 100), 100)}, "trunk").empty());  // two tags
    CHECK(lab.drops(DropReason::vlan_unknown) == 3);
    Bytes service_tag = tagged(plain, 100);
    put16(&service_tag[12], 0x88a8);
    CHECK(lab.exchange("trunk", {service_tag}, "trunk").empty());
    CHECK(lab.drops(DropReason::vlan_unknown) == 4);
    CHECK(lab.exchange("trunk", {tagged(arp_request(kHost, "10.3.0.5", "10.3.0.1"), 300)}, "trunk").empty());
    CHECK(lab.drops(DropReason::vlan_unknown) == 5);
    // A reload that adds VLAN 300 lets its frames in.
    std::string with_300 = kTrunk;
    const std::string anchor = "      - {id: 200, name: guest, addresses: [10.200.0.1/24]}\n";
    with_300.insert(with_300.find(anchor) + anchor.size(), "      - {id: 300, addresses: [10.3.0.1/24]}\n");
    lab.reload(with_300);
    const auto out = lab.exchange("trunk", {tagged(arp_request(kHost, "10.3.0.5", "10.3.0.1"), 300)}, "trunk");
    REQUIRE(out.size() == 1);
    CHECK(vlan_of(out[0]) == 300);
    CHECK(lab.drops(DropReason::vlan_unknown) == 5);
}

TEST_CASE("vlans: in_ports names a VLAN: its rule applies to that VLAN's packets only", "[vlans][pipeline]") {
    PipelineLab lab(std::string(kTrunk) + R"(
firewall:
  default: deny
  rules:
    - {name: guests-out, in_ports: [guest], action: allow}
    - {name: untagged-out, in_ports: [trunk], destination: 192.0.2.0/24, action: allow}
)");
    resolve_hosts(lab);
    auto out = lab.exchange("trunk", {tagged(frame(udp("10.200.0.7", 1000, "192.0.2.50")), 200)}, "wan");
    CHECK(out.size() == 1);
    CHECK(lab.exchange("trunk", {tagged(frame(udp("10.100.0.5", 1000, "192.0.2.50")), 100)}, "wan").empty());
    CHECK(lab.drops(DropReason::rule_deny) == 1);
    out = lab.exchange("trunk", {frame(udp("10.0.0.9", 1000, "192.0.2.50"))}, "wan");
    CHECK(out.size() == 1);
    // The connection VLAN 200 opened takes its replies back to VLAN 200.
    out = lab.exchange("wan", {frame(udp_spec("192.0.2.50", 53, "10.200.0.7", 1000))}, "trunk");
    REQUIRE(out.size() == 1);
    CHECK(vlan_of(out[0]) == 200);
}

TEST_CASE("vlans: a NAT service with its client on one VLAN and its backend on another", "[vlans][pipeline]") {
    PipelineLab lab(std::string(kTrunk) + R"(
load_balancer:
  nat_pool: [10.100.0.250]
services:
  - name: web
    vip: 192.0.2.100
    port: 80
    protocol: tcp
    mode: nat
    backends: [{address: 10.100.0.20, port: 8080}]
)");
    resolve_hosts(lab);
    lab.set_neighbour("10.100.0.20", mac(0x20));
    // The client on VLAN 200 opens a connection to the VIP: it reaches the backend on VLAN 100.
    auto out = lab.exchange("trunk", {tagged(frame(tcp_spec("10.200.0.7", 40000, "192.0.2.100", 80)), 200)}, "trunk");
    REQUIRE(out.size() == 1);
    CHECK(vlan_of(out[0]) == 100);
    const SeenFrame to_backend = read_frame(out[0]);
    CHECK(to_backend.dst == "10.100.0.20");
    CHECK(to_backend.dst_port == 8080);
    CHECK(to_backend.src == "10.100.0.250");
    CHECK(to_backend.dst_mac_last == 0x20);
    CHECK(to_backend.checksums_ok);
    // The backend's SYN+ACK comes back tagged 100 and leaves for the client tagged 200, from the VIP.
    FrameSpec reply = tcp_spec("10.100.0.20", 8080, "10.100.0.250", to_backend.src_port, kSyn | kAck);
    reply.ack = 1001;
    out = lab.exchange("trunk", {tagged(frame(reply), 100)}, "trunk");
    REQUIRE(out.size() == 1);
    CHECK(vlan_of(out[0]) == 200);
    const SeenFrame to_client = read_frame(out[0]);
    CHECK(to_client.src == "192.0.2.100");
    CHECK(to_client.src_port == 80);
    CHECK(to_client.dst == "10.200.0.7");
    CHECK(to_client.dst_port == 40000);
    CHECK(to_client.dst_mac_last == 0x27);
    CHECK(to_client.checksums_ok);
    // The VIP answers ARP on the VLANs too.
    out = lab.exchange("trunk", {tagged(arp_request(kHost, "10.200.0.7", "192.0.2.100"), 200)}, "trunk");
    REQUIRE(out.size() == 1);
    CHECK(vlan_of(out[0]) == 200);
}

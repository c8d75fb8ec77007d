// Martian packets through the whole data path (PipelineLab): dropped on the RX lcore under their reason before the
// firewall, the load balancer or plain forwarding sees them, so none opens a connection or a NAT port; the switch of
// each family lets them through again; and neighbour frames (ARP, ND), which are sluice's own, are judged by neither
// the martian check nor the early-drop sets.
#include <catch2/catch.hpp>

#include "pipeline/pipeline_lab.hpp"

using namespace sluice;
using namespace sluice::test;

namespace {

constexpr const char* kPorts = R"(
ports:
  - {name: client, device: ring_client, addresses: [10.0.0.254/24, "2001:db8::fe/64"]}
  - {name: server, device: ring_server}
lcores: [{id: 1, roles: [rx, worker]}]
forward:
  - {from: client, to: server, next_hop_mac: "02:00:00:00:00:0b"}
  - {from: server, to: client, next_hop_mac: "02:00:00:00:00:0a"}
)";

constexpr const char* kFirewallAndServices = R"(
firewall:
  default: allow
load_balancer:
  nat_pool: [10.1.0.100]
services:
  - {name: web, vip: 192.0.2.100, port: 80, protocol: tcp, mode: nat, backends: [{address: 10.1.0.11, port: 8080}]}
  - name: dns
    vip: 192.0.2.101
    port: 53
    protocol: udp
    mode: dsr
    backends: [{address: 10.1.0.21, mac: "02:00:00:00:03:21"}]
)";

std::string config(const std::string& extra = kFirewallAndServices) { return std::string(kPorts) + extra; }

// Every frame sluice sent, on any port.
std::vector<Bytes> take_all(PipelineLab& lab) {
    std::vector<Bytes> all;
    for (const PortIdentity& p : lab.ports())
        for (Bytes& b : lab.take_sent(p.name)) all.push_back(std::move(b));
    return all;
}

// Sends one frame in on `port`; checks it was dropped under `reason` alone, leaving nothing behind: no frame out,
// no connection, no NAT port.
void expect_martian(PipelineLab& lab, const std::string& port, const FrameSpec& spec, DropReason reason) {
    INFO(spec.src << " -> " << spec.dst << " proto " << int{spec.proto} << " ports " << spec.src_port << " -> "
                  << spec.dst_port << " in on " << port << ": " << drop_reason_name(reason));
    const CounterTotals before = lab.totals();
    lab.send(port, {frame(spec)});
    lab.run();
    CHECK(take_all(lab).empty());
    const CounterTotals after = lab.totals();
    const auto index = static_cast<std::size_t>(reason);
    CHECK(after.drops[index] - before.drops[index] == 1);
    CHECK(after.total_drops() - before.total_drops() == 1);
    CHECK(after.conn_inserts == before.conn_inserts);
    CHECK(lab.mbufs_out() == 0);
}

// Sends one frame in on `port`; returns what came out on out_port (nothing may come out elsewhere).
std::vector<Bytes> pass(PipelineLab& lab, const std::string& port, const FrameSpec& spec, const std::string& out_port) {
    const uint64_t drops_before = lab.totals().total_drops();
    std::vector<Bytes> out = lab.exchange(port, {frame(spec)}, out_port);
    CHECK(take_all(lab).empty());
    CHECK(lab.totals().total_drops() == drops_before);
    return out;
}

}  // namespace

TEST_CASE("martians: a SYN from 255.255.255.255 to a NAT VIP opens nothing and leaves nothing", "[martian][pipeline]") {
    PipelineLab lab(config());
    expect_martian(lab, "client", tcp_spec("255.255.255.255", 40000, "192.0.2.100", 80),
                   DropReason::martian_source_broadcast);
    // The same SYN from a real client is NAT'd: the drop above was the check's, not the service's.
    const std::vector<Bytes> out = pass(lab, "client", tcp_spec("203.0.113.7", 40000, "192.0.2.100", 80), "server");
    REQUIRE(out.size() == 1);
    CHECK(read_frame(out[0]).src == "10.1.0.100");
    CHECK(lab.totals().conn_inserts == 1);
}

TEST_CASE("martians: a land SYN VIP:80 -> VIP:80 is dropped", "[martian][pipeline]") {
    PipelineLab lab(config());
    expect_martian(lab, "client", tcp_spec("192.0.2.100", 80, "192.0.2.100", 80), DropReason::martian_land);
    expect_martian(lab, "client", tcp_spec("203.0.113.7", 80, "203.0.113.7", 80), DropReason::martian_land);
}

TEST_CASE("martians: every class, through the NAT service and through the firewall", "[martian][pipeline]") {
    PipelineLab lab(config());
    using R = DropReason;
    struct Source {
        const char* address;
        DropReason reason;
    };
    const Source sources[] = {
        {"255.255.255.255", R::martian_source_broadcast},
        {"10.0.0.255", R::martian_source_broadcast},
        {"224.0.0.9", R::martian_source_multicast},
        {"0.0.0.0", R::martian_source_unspecified},
        {"127.0.0.1", R::martian_source_loopback},
        {"169.254.7.7", R::martian_source_link_local},
        {"240.0.0.7", R::martian_source_reserved},
        {"10.0.0.254", R::martian_source_own},
        {"10.1.0.100", R::martian_source_own},
    };
    for (const Source& s : sources) {
        expect_martian(lab, "client", tcp_spec(s.address, 40000, "192.0.2.100", 80), s.reason);  // the nat service
        expect_martian(lab, "client", udp_spec(s.address, 5000, "198.51.100.9", 53), s.reason);  // the firewall
    }
    const Source sources6[] = {
        {"ff02::1", R::martian_source_multicast},  {"::", R::martian_source_unspecified},
        {"::1", R::martian_source_loopback},       {"::ffff:203.0.113.7", R::martian_source_v4_mapped},
        {"fe80::7", R::martian_source_link_local}, {"2001:db8::fe", R::martian_source_own},
    };
    for (const Source& s : sources6)
        expect_martian(lab, "client", udp_spec(s.address, 5000, "2001:db8:ff::9", 53), s.reason);

    struct Destination {
        FrameSpec frame;
        DropReason reason;
    };
    const Destination destinations[] = {
        {udp_spec("203.0.113.7", 5000, "0.0.0.0", 53), R::martian_destination_unspecified},
        {tcp_spec("203.0.113.7", 40000, "127.0.0.1", 80), R::martian_destination_loopback},
        {tcp_spec("203.0.113.7", 40000, "248.0.0.1", 80), R::martian_destination_reserved},
        {udp_spec("203.0.113.7", 5000, "255.255.255.255", 53), R::martian_destination_broadcast},
        {udp_spec("203.0.113.7", 5000, "10.0.0.255", 53), R::martian_destination_broadcast},
        {tcp_spec("203.0.113.7", 40000, "239.1.1.1", 80), R::martian_destination_multicast},
        {tcp_spec("203.0.113.7", 40000, "169.254.1.1", 80), R::martian_destination_link_local},
        {udp_spec("2001:db8:ff::7", 5000, "::1", 53), R::martian_destination_loopback},
        {tcp_spec("2001:db8:ff::7", 40000, "ff05::2", 80), R::martian_destination_multicast},
        {udp_spec("203.0.113.7", 5000, "239.1.1.1", 5000), R::multicast_not_routed},
        {udp_spec("2001:db8:ff::7", 5000, "ff0e::1", 5000), R::multicast_not_routed},
        {tcp_spec("2001:db8:ff::7", 40000, "2001:db8:ff::7", 80), R::martian_land},
    };
    for (const Destination& d : destinations) expect_martian(lab, "client", d.frame, d.reason);
    CHECK(lab.totals().conn_inserts == 0);
}

TEST_CASE("martians: TCP and UDP port 0, to a service and through the firewall", "[martian][pipeline]") {
    PipelineLab lab(config());
    expect_martian(lab, "client", tcp_spec("203.0.113.7", 0, "192.0.2.100", 80), DropReason::martian_port_zero);
    expect_martian(lab, "client", udp_spec("203.0.113.7", 0, "192.0.2.101", 53), DropReason::martian_port_zero);
    expect_martian(lab, "client", tcp_spec("203.0.113.7", 40000, "198.51.100.9", 0), DropReason::martian_port_zero);
    expect_martian(lab, "server", udp_spec("10.1.0.5", 5000, "203.0.113.7", 0), DropReason::martian_port_zero);
    expect_martian(lab, "client", udp_spec("2001:db8:ff::7", 0, "2001:db8::5", 53), DropReason::martian_port_zero);
}

TEST_CASE("martians: plain forwarding (no firewall, no service) is checked too", "[martian][pipeline]") {
    PipelineLab lab(config(""));
    expect_martian(lab, "client", udp_spec("127.0.0.1", 5000, "198.51.100.9", 53), DropReason::martian_source_loopback);
    expect_martian(lab, "server", tcp_spec("198.51.100.9", 80, "198.51.100.9", 80), DropReason::martian_land);
    CHECK(pass(lab, "client", udp_spec("203.0.113.7", 5000, "198.51.100.9", 53), "server").size() == 1);
    // sluice routes no multicast: a group's packets stay on their link, whatever the forward entry says.
    expect_martian(lab, "client", udp_spec("203.0.113.7", 5000, "239.1.1.1", 5000), DropReason::multicast_not_routed);
    expect_martian(lab, "client", udp_spec("10.0.0.7", 5353, "224.0.0.251", 5353), DropReason::multicast_not_routed);
    expect_martian(lab, "client", udp_spec("fe80::7", 5353, "ff02::fb", 5353), DropReason::multicast_not_routed);
    expect_martian(lab, "server", udp_spec("2001:db8:ff::7", 5000, "ff0e::1", 5000), DropReason::multicast_not_routed);
}

TEST_CASE("martians: a dsr VIP may be a source (its backends answer from it); a nat VIP may not",
          "[martian][pipeline]") {
    PipelineLab lab(config());
    const std::vector<Bytes> out = pass(lab, "server", udp_spec("192.0.2.101", 53, "203.0.113.7", 5000), "client");
    REQUIRE(out.size() == 1);
    CHECK(read_frame(out[0]).src == "192.0.2.101");
    expect_martian(lab, "server", tcp_spec("192.0.2.100", 80, "203.0.113.7", 40000, kSyn | kAck),
                   DropReason::martian_source_own);
}

TEST_CASE("martians: a link-local source may ping sluice's own address on its link", "[martian][pipeline]") {
    PipelineLab lab(config());
    FrameSpec ping = udp_spec("169.254.3.3", 9, "10.0.0.254", 9);
    ping.proto = IPPROTO_ICMP;
    const std::vector<Bytes> back = pass(lab, "client", ping, "client");
    REQUIRE(back.size() == 1);
    CHECK(read_frame(back[0]).dst == "169.254.3.3");
    CHECK(lab.totals().echo_replies == 1);
    ping.dst = "10.0.0.9";  // the same source towards another host: never forwarded
    expect_martian(lab, "client", ping, DropReason::martian_source_link_local);
}

TEST_CASE("martians: the switch of each family lets its martians through", "[martian][pipeline]") {
    {
        PipelineLab lab(config(std::string(kFirewallAndServices) + "dataplane: {martians: {ipv4: off}}\n"));
        const std::vector<Bytes> out =
            pass(lab, "client", tcp_spec("255.255.255.255", 40000, "192.0.2.100", 80), "server");
        REQUIRE(out.size() == 1);  // the flaw the check closes: NAT'd, and its reply would go to 255.255.255.255
        CHECK(read_frame(out[0]).dst == "10.1.0.11");
        CHECK(pass(lab, "client", udp_spec("203.0.113.7", 5000, "198.51.100.9", 0), "server").size() == 1);
        expect_martian(lab, "client", udp_spec("::1", 5000, "2001:db8:ff::9", 53), DropReason::martian_source_loopback);
    }
    {
        PipelineLab lab(config(std::string(kFirewallAndServices) + "dataplane: {martians: {ipv6: off}}\n"));
        CHECK(pass(lab, "client", udp_spec("::1", 5000, "2001:db8:ff::9", 53), "server").size() == 1);
        expect_martian(lab, "client", udp_spec("127.0.0.1", 5000, "198.51.100.9", 53),
                       DropReason::martian_source_loopback);
    }
}

TEST_CASE("neighbours: ARP and ND are never judged by the early-drop sets or the martian check",
          "[martian][neighbour][pipeline]") {
    // Bogon sets as operators write them: 224.0.0.0/3 (multicast and class E) and fe80::/10, ::/8.
    PipelineLab lab(config(R"(
firewall:
  prefix_sets:
    - {name: bogons, prefixes: [224.0.0.0/3, "fe80::/10", "::/8"], early_drop: true}
)"));
    // Bytes 12-15 of an ARP header are the sender MAC's last two bytes and the sender IP's first two: read as an IPv4
    // source, e0:01 + 10.0 is 224.1.10.0, inside 224.0.0.0/3.
    const std::array<uint8_t, 6> mac{0x02, 0x00, 0x00, 0x00, 0xe0, 0x01};
    std::vector<Bytes> back = lab.exchange("client", {arp_request(mac, "10.0.0.1", "10.0.0.254")}, "client");
    REQUIRE(back.size() == 1);
    CHECK(get16(&back[0][12]) == 0x0806);
    CHECK(get16(&back[0][14 + 6]) == 2);  // a reply
    CHECK(std::equal(mac.begin(), mac.end(), back[0].begin()));
    CHECK(lab.drops(DropReason::blocklisted) == 0);

    // A solicitation from a link-local address (in the set) is answered; DAD's (from ::, to a multicast group) is
    // taken as a neighbour frame, not dropped as a martian.
    back = lab.exchange("client", {neighbour_solicitation(mac, "fe80::1", "2001:db8::fe")}, "client");
    REQUIRE(back.size() == 1);
    CHECK(get16(&back[0][12]) == 0x86dd);
    CHECK(back[0][14 + 40] == 136);  // a neighbour advertisement
    const uint64_t taken = lab.drops(DropReason::neighbour_frame);
    CHECK(lab.exchange("client", {neighbour_solicitation(mac, "::", "2001:db8::77")}, "client").empty());
    CHECK(lab.drops(DropReason::neighbour_frame) == taken + 1);
    CHECK(lab.drops(DropReason::blocklisted) == 0);
    CHECK(lab.drops(DropReason::martian_source_unspecified) == 0);
    CHECK(lab.mbufs_out() == 0);
}

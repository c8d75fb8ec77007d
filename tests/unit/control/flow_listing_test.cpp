#include <catch2/catch.hpp>

#include <arpa/inet.h>

#include "control/flow_listing.hpp"

using namespace sluice;

namespace {

FlowFilter parsed(const std::string& text) {
    FlowFilter filter;
    std::string error;
    INFO(text);
    REQUIRE(parse_flow_filter(text, filter, error));
    CHECK(error.empty());
    return filter;
}

std::string refused(const std::string& text) {
    FlowFilter filter;
    std::string error;
    INFO(text);
    REQUIRE_FALSE(parse_flow_filter(text, filter, error));
    return error;
}

IpAddress v4(const char* text) {
    IpAddress a{};
    REQUIRE(inet_pton(AF_INET, text, a.bytes) == 1);
    return a;
}

}  // namespace

TEST_CASE("flow filter: empty matches everything", "[flows]") {
    const FlowFilter f = parsed("");
    CHECK_FALSE(f.by_address);
    CHECK(f.port == 0);
    CHECK(f.proto == 0);
}

TEST_CASE("flow filter: address, port and protocol in any order", "[flows]") {
    FlowFilter f = parsed("port 40003 tcp 198.51.100.7");
    CHECK(f.by_address);
    CHECK(f.family == IpFamily::ipv4);
    CHECK(f.address == v4("198.51.100.7"));
    CHECK(f.port == 40003);
    CHECK(f.proto == 6);

    f = parsed("2001:db8::1 udp");
    CHECK(f.family == IpFamily::ipv6);
    CHECK(f.address.bytes[0] == 0x20);
    CHECK(f.address.bytes[15] == 1);
    CHECK(f.proto == 17);
    CHECK(parsed("icmp").proto == 1);
    CHECK(parsed("icmpv6").proto == 58);
    CHECK(parsed("port 65535").port == 65535);
}

TEST_CASE("flow filter: the last address given counts, and an IPv4 one leaves no IPv6 bytes behind", "[flows]") {
    const FlowFilter f = parsed("2001:db8::ffff 10.0.0.1");
    CHECK(f.family == IpFamily::ipv4);
    CHECK(f.address == v4("10.0.0.1"));
}

TEST_CASE("flow filter: bad words are refused with what was expected", "[flows]") {
    CHECK(refused("bogus") == "'bogus' is not an address, 'port N' or a protocol (tcp, udp, icmp, icmpv6)");
    CHECK(refused("10.0.0.0/8") == "'10.0.0.0/8' is not an address, 'port N' or a protocol (tcp, udp, icmp, icmpv6)");
    CHECK(refused("port") == "'port' takes a number from 0 to 65535");
    CHECK(refused("port 65536") == "'port' takes a number from 0 to 65535, not '65536'");
    CHECK(refused("port tcp") == "'port' takes a number from 0 to 65535, not 'tcp'");
    CHECK(refused("tcp port -1") == "'port' takes a number from 0 to 65535, not '-1'");
    CHECK(refused("port 123456") == "'port' takes a number from 0 to 65535, not '123456'");
}

TEST_CASE("flow listing: a header with the counts, then a line per record up to the limit", "[flows]") {
    std::vector<std::unique_ptr<FlowWalk>> walks;
    for (int w = 0; w < 2; ++w) {
        auto walk = std::make_unique<FlowWalk>();
        walk->matched = 3;
        for (int i = 0; i < 3; ++i) {
            FlowRecord r{};
            r.tuple.family = IpFamily::ipv4;
            r.tuple.proto = 6;
            r.tuple.src = v4("203.0.113.1");
            r.tuple.dst = v4("192.0.2.10");
            r.tuple.src_port = htons(static_cast<uint16_t>(40000 + w * 10 + i));
            r.tuple.dst_port = htons(80);
            r.state = ConnState::tcp_established;
            r.packets[0] = 3;
            r.packets[1] = 2;
            r.expires_tsc = 1000 + 59 * 100;  // 59 s at 100 Hz from now
            r.backend = w == 0 ? 8 : 0;       // stable id 7 + 1
            r.nat_port = i == 0 ? 20001 : 0;
            walk->records.push_back(r);
        }
        walks.push_back(std::move(walk));
    }
    const auto name = [](uint32_t id) { return "web/backend-" + std::to_string(id); };
    auto lines = flow_lines(walks, 4, 1000, 100, name);
    REQUIRE(lines.size() == 5);
    CHECK(lines[0] == "6 connection(s) match, 4 listed");
    CHECK(lines[1].starts_with("tcp proto 6 203.0.113.1:40000 -> 192.0.2.10:80 "));
    CHECK(lines[1].find(" tcp_established pkts 3/2 ttl 59s -> web/backend-7 nat:20001") != std::string::npos);
    CHECK(lines[2].find("ttl 59s -> web/backend-7 window strict;") != std::string::npos);
    CHECK(lines[4].find("ttl 59s window strict;") != std::string::npos);  // not balanced: no backend

    walks[0]->records[0].expires_tsc = 10;  // expired: 0 s, never a wrapped count
    lines = flow_lines(walks, 100, 1000, 100, name);
    CHECK(lines[0] == "6 connection(s) match, 6 listed");
    CHECK(lines[1].find(" ttl 0s ") != std::string::npos);
}

TEST_CASE("flow listing: a TCP connection's window tracking, side by side", "[flows][tcp_window]") {
    TcpWindow w{};
    w.side[0] = TcpWindowSide{1001, 66536, 5001};
    w.side[1] = TcpWindowSide{5101, 65281, 1001};
    set_tcp_window_maxwin(w, 0, 64256);
    set_tcp_window_maxwin(w, 1, 65280u << 9);
    w.flags[0] = kWindowSideSeen | kWindowSideSyn | kWindowSideScale | kWindowSideAcked;
    w.flags[1] = kWindowSideSeen | kWindowSideSyn | kWindowSideScale | kWindowSideAcked | kWindowSideChallenged;
    set_tcp_window_check(w, TcpWindowCheck::strict);
    set_tcp_window_scale(w, 0, 7);
    set_tcp_window_scale(w, 1, 9);
    CHECK(tcp_window_text(w) == "window strict; initiator end 1001 maxend 66536 maxwin 64256 maxack 5001 scale 7; "
                                "responder end 5101 maxend 65281 maxwin 33423360 maxack 1001 scale 9 challenged");

    // Picked up mid-stream: the responder not seen yet, the initiator's scale unknown (the largest is assumed).
    TcpWindow picked{};
    picked.side[0] = TcpWindowSide{70500, 70500, 0};
    set_tcp_window_maxwin(picked, 0, 4096);
    picked.flags[0] = kWindowSideSeen;
    set_tcp_window_check(picked, TcpWindowCheck::liberal);
    CHECK(tcp_window_text(picked) ==
          "window liberal; initiator end 70500 maxend 70500 maxwin 4096 scale ?; responder unseen");

    TcpWindow off{};
    set_tcp_window_check(off, TcpWindowCheck::off);
    CHECK(tcp_window_text(off) == "window off");

    // In the listing: after the backend, on TCP lines only.
    std::vector<std::unique_ptr<FlowWalk>> walks;
    walks.push_back(std::make_unique<FlowWalk>());
    walks[0]->matched = 2;
    for (uint8_t proto : {6, 17}) {
        FlowRecord r{};
        r.tuple.family = IpFamily::ipv4;
        r.tuple.proto = proto;
        r.tuple.src = v4("203.0.113.1");
        r.tuple.dst = v4("192.0.2.10");
        r.tuple.src_port = htons(40000);
        r.tuple.dst_port = htons(80);
        r.expires_tsc = 1000;
        r.window = w;
        walks[0]->records.push_back(r);
    }
    const auto lines = flow_lines(walks, 10, 1000, 100, [](uint32_t) { return std::string("b"); });
    REQUIRE(lines.size() == 3);
    CHECK(lines[1].ends_with(" ttl 0s " + tcp_window_text(w)));
    CHECK(lines[2].ends_with(" ttl 0s"));
}

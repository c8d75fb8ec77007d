// The state machines: TCP (as a table, through ConnTable::track and tcp::step directly), UDP, first packets.
#include <catch2/catch.hpp>

#include <netinet/in.h>

#include <string>
#include <vector>

#include "conntrack/conn_table.hpp"
#include "conntrack/tcp_state.hpp"
#include "conntrack_test_util.hpp"

using namespace sluice;
using namespace sluice::test;

namespace {

constexpr uint8_t SYN = tcp::kSyn, ACK = tcp::kAck, FIN = tcp::kFin, RST = tcp::kRst, PSH = tcp::kPsh;

enum class Dir { orig, reply };

struct Segment {
    Dir dir;
    uint8_t flags;
    TrackVerdict verdict;
    ConnState state;  // after the segment
};

// One TCP connection in a fresh table, opened by a pure SYN from the client, then driven segment by segment.
class TcpConn {
public:
    explicit TcpConn(const ConnTimeouts& timeouts = ConnTimeouts{})
        : table_(unique_table_name(), 64, SOCKET_ID_ANY, timeouts, kFakeTscHz),
          client_(v4_tuple(IPPROTO_TCP, 0xc0a80a05, 40000, 0x0a000001, 80)) {
        ConnState initial{};
        REQUIRE(ConnTable::initial_state(client_, SYN, false, initial) == TrackVerdict::ok);
        REQUIRE(initial == ConnState::tcp_syn_sent);
        index_ = table_.insert(client_, symmetric_flow_hash(client_), initial, 0, now_);
        REQUIRE(index_ >= 0);
        REQUIRE(table_.track(index_, client_, SYN, now_) == TrackVerdict::ok);  // the opening SYN itself
        REQUIRE(state() == ConnState::tcp_syn_sent);
    }

    TrackVerdict send(Dir dir, uint8_t flags) {
        now_ += 10;
        return table_.track(index_, dir == Dir::orig ? client_ : client_.reversed(), flags, now_);
    }

    void play(const std::vector<Segment>& segments) {
        int n = 0;
        for (const Segment& s : segments) {
            INFO("segment " << n++ << " flags 0x" << std::hex << int{s.flags} << std::dec << " from "
                            << (s.dir == Dir::orig ? "initiator" : "responder"));
            REQUIRE(send(s.dir, s.flags) == s.verdict);
            REQUIRE(conn_state_name(state()) == std::string(conn_state_name(s.state)));
        }
    }

    // Puts the connection back into established, as a handshake leaves it, without a segment.
    void reset_to_established() {
        ConnEntry& e = table_.entry(index_);
        e.state = ConnState::tcp_established;
        e.flags = static_cast<uint8_t>(e.flags & ~tcp::kSubStateFlags);
    }

    ConnState state() const { return table_.entry(index_).state; }
    const ConnEntry& entry() const { return table_.entry(index_); }
    uint64_t now() const { return now_; }
    uint32_t tick(uint64_t tsc) const { return table_.tick(tsc); }
    ConnTable& table() { return table_; }

private:
    ConnTable table_;
    FiveTuple client_;
    int32_t index_ = -1;
    uint64_t now_ = 1000;
};

constexpr auto ok = TrackVerdict::ok;
constexpr auto invalid = TrackVerdict::invalid;
constexpr auto O = Dir::orig;
constexpr auto R = Dir::reply;

const std::vector<Segment> kHandshake = {
    {R, SYN | ACK, ok, ConnState::tcp_syn_recv},
    {O, ACK, ok, ConnState::tcp_established},
};

}  // namespace

TEST_CASE("TCP: the three-way handshake reaches established and counts both directions", "[conntrack]") {
    TcpConn c;
    c.play(kHandshake);
    c.play({{O, ACK | PSH, ok, ConnState::tcp_established}, {R, ACK | PSH, ok, ConnState::tcp_established}});
    CHECK(c.entry().packets[0] == 3);  // SYN, ACK, data
    CHECK(c.entry().packets[1] == 2);  // SYN+ACK, data
    CHECK(c.entry().expires == c.tick(c.now() + 3600 * kFakeTscHz));
}

TEST_CASE("TCP: the close sequences reach time_wait", "[conntrack]") {
    SECTION("the initiator closes first") {
        TcpConn c;
        c.play(kHandshake);
        c.play({
            {O, FIN | ACK, ok, ConnState::tcp_fin_wait},
            {O, FIN | ACK, ok, ConnState::tcp_fin_wait},    // retransmitted FIN
            {O, ACK, ok, ConnState::tcp_fin_wait},          // the FIN sender's own ACK does not acknowledge its FIN
            {R, ACK, ok, ConnState::tcp_close_wait},        // the responder acknowledges it
            {R, ACK | PSH, ok, ConnState::tcp_close_wait},  // and may still send (half close)
            {O, ACK, ok, ConnState::tcp_close_wait},
            {R, FIN | ACK, ok, ConnState::tcp_last_ack},
            {O, ACK, ok, ConnState::tcp_time_wait},
            {O, ACK, ok, ConnState::tcp_time_wait},
        });
        CHECK(c.entry().expires == c.tick(c.now() + 120 * kFakeTscHz));
    }
    SECTION("the responder closes first") {
        TcpConn c;
        c.play(kHandshake);
        c.play({
            {R, FIN | ACK, ok, ConnState::tcp_fin_wait},
            {R, ACK, ok, ConnState::tcp_fin_wait},
            {O, ACK, ok, ConnState::tcp_close_wait},
            {R, FIN | ACK, ok, ConnState::tcp_close_wait},  // retransmitted, already acknowledged
            {O, FIN | ACK, ok, ConnState::tcp_last_ack},
            {R, ACK, ok, ConnState::tcp_time_wait},
        });
    }
    SECTION("the FIN crosses the other side's FIN (simultaneous close)") {
        TcpConn c;
        c.play(kHandshake);
        c.play({
            {O, FIN | ACK, ok, ConnState::tcp_fin_wait},
            {R, FIN | ACK, ok, ConnState::tcp_last_ack},
            {R, ACK, ok, ConnState::tcp_time_wait},
            {O, ACK, ok, ConnState::tcp_time_wait},
        });
    }
    SECTION("the second FIN acknowledges the first") {
        TcpConn c;
        c.play(kHandshake);
        c.play({
            {O, FIN | ACK, ok, ConnState::tcp_fin_wait},
            {R, ACK, ok, ConnState::tcp_close_wait},
            {R, FIN | ACK, ok, ConnState::tcp_last_ack},
            {R, FIN | ACK, ok, ConnState::tcp_last_ack},  // retransmitted
            {O, ACK, ok, ConnState::tcp_time_wait},
        });
    }
}

TEST_CASE("TCP: RST closes from either side, with the short timeout", "[conntrack]") {
    for (Dir dir : {O, R}) {
        for (uint8_t flags : {uint8_t(RST), uint8_t(RST | ACK)}) {
            TcpConn c;
            c.play(kHandshake);
            REQUIRE(c.send(dir, flags) == ok);
            CHECK(c.state() == ConnState::tcp_close);
            CHECK(c.entry().expires == c.tick(c.now() + 10 * kFakeTscHz));
            c.play({{O, ACK, ok, ConnState::tcp_close}, {R, RST, ok, ConnState::tcp_close}});
        }
    }
    TcpConn refused;  // connection refused: RST+ACK answers the SYN
    refused.play({{R, RST | ACK, ok, ConnState::tcp_close}});
}

TEST_CASE("TCP: invalid segments are refused and change nothing", "[conntrack]") {
    SECTION("a SYN+ACK from the initiator in syn_sent") {
        TcpConn c;
        const ConnEntry before = c.entry();
        CHECK(c.send(O, SYN | ACK) == invalid);
        CHECK(c.state() == ConnState::tcp_syn_sent);
        CHECK(c.entry().packets[0] == before.packets[0]);
        CHECK(c.entry().expires == before.expires);
    }
    SECTION("an ACK or FIN from the initiator before the SYN+ACK") {
        TcpConn c;
        c.play({{O, ACK, invalid, ConnState::tcp_syn_sent}, {O, FIN | ACK, invalid, ConnState::tcp_syn_sent}});
    }
    SECTION("a SYN from the responder on an established connection") {
        TcpConn c;
        c.play(kHandshake);
        c.play({{R, SYN, invalid, ConnState::tcp_established}});
    }
    SECTION("flag combinations no stack sends") {
        TcpConn c;
        c.play(kHandshake);
        for (uint8_t flags : {uint8_t(0), uint8_t(FIN), uint8_t(SYN | FIN), uint8_t(SYN | RST), uint8_t(FIN | RST),
                              uint8_t(PSH), uint8_t(SYN | FIN | RST | ACK | PSH | tcp::kUrg)}) {
            INFO("flags 0x" << std::hex << int{flags});
            CHECK(c.send(O, flags) == invalid);
            CHECK(c.send(R, flags) == invalid);
            CHECK(c.state() == ConnState::tcp_established);
        }
    }
    SECTION("a SYN+ACK from the initiator on an established connection") {
        TcpConn c;
        c.play(kHandshake);
        c.play({{O, SYN | ACK, invalid, ConnState::tcp_established}});
    }
}

TEST_CASE("TCP: retransmissions and ignored segments", "[conntrack]") {
    SECTION("a retransmitted SYN stays in syn_sent and refreshes the entry") {
        TcpConn c;
        c.play({{O, SYN, ok, ConnState::tcp_syn_sent}, {O, SYN, ok, ConnState::tcp_syn_sent}});
        CHECK(c.entry().expires == c.tick(c.now() + 30 * kFakeTscHz));
        c.play(kHandshake);
    }
    SECTION("a retransmitted SYN+ACK in syn_recv") {
        TcpConn c;
        c.play({{R, SYN | ACK, ok, ConnState::tcp_syn_recv}, {R, SYN | ACK, ok, ConnState::tcp_syn_recv}});
        c.play({{O, ACK, ok, ConnState::tcp_established}});
    }
    SECTION("a SYN+ACK retransmitted after the handshake passes without a state change or new expiry") {
        TcpConn c;
        c.play(kHandshake);
        const uint32_t expiry = c.entry().expires;
        c.play({{R, SYN | ACK, ok, ConnState::tcp_established}});
        CHECK(c.entry().expires == expiry);
        CHECK(c.entry().packets[1] == 2);
    }
    SECTION("a new SYN from the initiator on an established connection is ignored, not refused") {
        // The initiator may have reopened after a close we missed; nf_conntrack lets it through too.
        TcpConn c;
        c.play(kHandshake);
        const uint32_t expiry = c.entry().expires;
        c.play({{O, SYN, ok, ConnState::tcp_established}});
        CHECK(c.entry().expires == expiry);
    }
    SECTION("the responder's challenge ACK to a SYN passes") {
        TcpConn c;
        c.play({{R, ACK, ok, ConnState::tcp_syn_sent}, {O, RST, ok, ConnState::tcp_close}});
    }
}

TEST_CASE("TCP: simultaneous open", "[conntrack]") {
    TcpConn c;
    c.play({
        {R, SYN, ok, ConnState::tcp_syn_sent},        // both sides sent a SYN
        {R, SYN, ok, ConnState::tcp_syn_sent},        // retransmitted
        {O, SYN | ACK, ok, ConnState::tcp_syn_recv},  // valid from the initiator only in a simultaneous open
        {R, SYN | ACK, ok, ConnState::tcp_syn_recv},
        {O, ACK, ok, ConnState::tcp_established},
        {O, FIN | ACK, ok, ConnState::tcp_fin_wait},
    });
    CHECK((c.entry().flags & tcp::kSubStateFlags) == 0);  // the sub-state bit went with syn_sent
}

TEST_CASE("TCP: reopening after the close", "[conntrack]") {
    TcpConn c;
    c.play(kHandshake);
    c.play({{O, RST, ok, ConnState::tcp_close}});
    SECTION("the initiator may reuse the tuple") {
        c.play({{O, SYN, ok, ConnState::tcp_syn_sent}});
        c.play(kHandshake);
    }
    SECTION("the responder may not: it must be judged as a new connection once this one expires") {
        c.play({{R, SYN, invalid, ConnState::tcp_close}});
    }
}

TEST_CASE("TCP: the state table stays within TCP states", "[conntrack]") {
    // Every state x sub-state x direction x segment kind: no exit from the TCP states, RST always closes, bad
    // segments never pass, and sub-state bits appear only on the states that own them.
    for (int s = 0; s <= static_cast<int>(ConnState::tcp_close); ++s) {
        for (uint8_t sub : {uint8_t(0), tcp::kFlagSimultaneousOpen, tcp::kFlagResponderFinFirst}) {
            for (bool reply : {false, true}) {
                for (int k = 0; k < static_cast<int>(tcp::Kind::count); ++k) {
                    const auto state = static_cast<ConnState>(s);
                    const auto kind = static_cast<tcp::Kind>(k);
                    INFO(conn_state_name(state) << " sub " << int{sub} << " reply " << reply << " kind " << k);
                    const tcp::Transition t = tcp::step(state, sub, reply, kind);
                    CHECK(t.state <= ConnState::tcp_close);
                    if (kind == tcp::Kind::rst)
                        CHECK((t.step == tcp::Step::advance && t.state == ConnState::tcp_close));
                    if (kind == tcp::Kind::bad) CHECK(t.step == tcp::Step::invalid);
                    if (t.step != tcp::Step::advance) {
                        CHECK(t.state == state);  // refused or ignored: nothing changes
                        CHECK(t.flags == sub);
                        continue;
                    }
                    if (t.flags & tcp::kFlagSimultaneousOpen) CHECK(t.state == ConnState::tcp_syn_sent);
                    if (t.flags & tcp::kFlagResponderFinFirst)
                        CHECK((t.state == ConnState::tcp_fin_wait || t.state == ConnState::tcp_close_wait));
                }
            }
        }
    }
    // A non-TCP state never goes through the table.
    CHECK(tcp::step(ConnState::udp_replied, 0, false, tcp::Kind::ack).step == tcp::Step::invalid);
}

TEST_CASE("TCP: an established connection takes every flag byte as the state table says", "[conntrack]") {
    // track() settles ACK-only segments of established connections without the table (the common case): for every
    // flag byte, in both directions, it must give what tcp::step gives.
    TcpConn c;
    c.play(kHandshake);
    for (int flags = 0; flags <= 0xff; ++flags) {
        for (Dir dir : {O, R}) {
            c.reset_to_established();
            const uint32_t expiry_before = c.entry().expires;
            const uint32_t packets_before = c.entry().packets[dir == R];
            const tcp::Transition t =
                tcp::step(ConnState::tcp_established, 0, dir == R, tcp::classify(static_cast<uint8_t>(flags)));
            INFO("flags 0x" << std::hex << flags << std::dec << " from " << (dir == O ? "initiator" : "responder"));
            const TrackVerdict verdict = c.send(dir, static_cast<uint8_t>(flags));
            REQUIRE((verdict == TrackVerdict::invalid) == (t.step == tcp::Step::invalid));
            REQUIRE(c.state() == t.state);
            REQUIRE((c.entry().flags & tcp::kSubStateFlags) == t.flags);
            REQUIRE((c.entry().expires != expiry_before) == (t.step == tcp::Step::advance));
            REQUIRE(c.entry().packets[dir == R] == packets_before + (t.step == tcp::Step::invalid ? 0 : 1));
        }
    }
}

TEST_CASE("TCP: flag classification", "[conntrack]") {
    CHECK(tcp::classify(SYN) == tcp::Kind::syn);
    CHECK(tcp::classify(SYN | tcp::kEce | tcp::kCwr) == tcp::Kind::syn);  // ECN setup SYN (RFC 3168)
    CHECK(tcp::classify(SYN | ACK | tcp::kEce) == tcp::Kind::synack);
    CHECK(tcp::classify(FIN | ACK | PSH) == tcp::Kind::fin);
    CHECK(tcp::classify(ACK | PSH | tcp::kUrg) == tcp::Kind::ack);
    CHECK(tcp::classify(RST) == tcp::Kind::rst);
    CHECK(tcp::classify(RST | ACK) == tcp::Kind::rst);
    CHECK(tcp::classify(0) == tcp::Kind::bad);
    CHECK(tcp::classify(FIN) == tcp::Kind::bad);
    CHECK(tcp::classify(SYN | FIN) == tcp::Kind::bad);
    CHECK(tcp::classify(0xff) == tcp::Kind::bad);  // "christmas tree"
}

TEST_CASE("initial_state: which first packet opens which connection", "[conntrack]") {
    const FiveTuple tcp = v4_tuple(IPPROTO_TCP, 0x0a000001, 1234, 0x0a000002, 80);
    struct Case {
        const char* what;
        uint8_t flags;
        bool loose;
        TrackVerdict verdict;
        ConnState state;
    };
    const Case cases[] = {
        {"pure SYN", SYN, false, ok, ConnState::tcp_syn_sent},
        {"ECN-setup SYN", SYN | tcp::kEce | tcp::kCwr, false, ok, ConnState::tcp_syn_sent},
        {"SYN with loose pickup", SYN, true, ok, ConnState::tcp_syn_sent},
        {"ACK alone", ACK, false, invalid, {}},
        {"ACK alone with loose pickup", ACK, true, ok, ConnState::tcp_established},
        {"data with loose pickup", ACK | PSH, true, ok, ConnState::tcp_established},
        {"SYN+ACK", SYN | ACK, false, invalid, {}},
        {"SYN+ACK with loose pickup", SYN | ACK, true, invalid, {}},
        {"RST with loose pickup", RST | ACK, true, invalid, {}},
        {"FIN with loose pickup", FIN | ACK, true, invalid, {}},
        {"SYN+FIN", SYN | FIN, true, invalid, {}},
        {"no flags", 0, true, invalid, {}},
    };
    for (const Case& c : cases) {
        INFO(c.what);
        ConnState state = ConnState::count;
        CHECK(ConnTable::initial_state(tcp, c.flags, c.loose, state) == c.verdict);
        if (c.verdict == ok) CHECK(state == c.state);
    }

    ConnState state{};
    FiveTuple t = tcp;
    t.proto = IPPROTO_UDP;
    CHECK(ConnTable::initial_state(t, 0, false, state) == ok);
    CHECK(state == ConnState::udp_unreplied);
    t.proto = IPPROTO_ICMP;
    CHECK(ConnTable::initial_state(t, 0, false, state) == ok);
    CHECK(state == ConnState::icmp);
    t.proto = IPPROTO_ICMPV6;
    t.family = IpFamily::ipv6;
    CHECK(ConnTable::initial_state(t, 0, false, state) == ok);
    CHECK(state == ConnState::icmp);
    t.proto = IPPROTO_GRE;
    CHECK(ConnTable::initial_state(t, 0, false, state) == ok);
    CHECK(state == ConnState::other);
}

TEST_CASE("Loose pickup: the first sender becomes the initiator", "[conntrack]") {
    ConnTable table(unique_table_name(), 64, SOCKET_ID_ANY, ConnTimeouts{}, kFakeTscHz);
    const FiveTuple server_to_client = v4_tuple(IPPROTO_TCP, 0x0a000002, 80, 0x0a000001, 1234);
    ConnState initial{};
    REQUIRE(ConnTable::initial_state(server_to_client, ACK, true, initial) == ok);
    const int32_t i = table.insert(server_to_client, symmetric_flow_hash(server_to_client), initial, 0, 0);
    REQUIRE(i >= 0);
    CHECK(table.track(i, server_to_client, ACK, 1) == ok);
    CHECK_FALSE(table.is_reply(i, server_to_client));
    CHECK(table.is_reply(i, server_to_client.reversed()));
    CHECK(table.track(i, server_to_client.reversed(), ACK, 2) == ok);
    CHECK(table.entry(i).state == ConnState::tcp_established);
    CHECK(table.entry(i).packets[0] == 1);
    CHECK(table.entry(i).packets[1] == 1);
}

TEST_CASE("UDP, ICMP and other protocols", "[conntrack]") {
    ConnTimeouts timeouts;
    ConnTable table(unique_table_name(), 64, SOCKET_ID_ANY, timeouts, kFakeTscHz);
    const FiveTuple dns = v4_tuple(IPPROTO_UDP, 0x0a000001, 5353, 0x08080808, 53);
    const int32_t i = table.insert(dns, symmetric_flow_hash(dns), ConnState::udp_unreplied, 0, 0);
    REQUIRE(i >= 0);
    CHECK(table.track(i, dns, 0, 100) == ok);
    CHECK(table.entry(i).state == ConnState::udp_unreplied);
    CHECK(table.entry(i).expires == table.tick(100 + timeouts.udp_unreplied * kFakeTscHz));
    CHECK(table.track(i, dns.reversed(), 0, 200) == ok);
    CHECK(table.entry(i).state == ConnState::udp_replied);
    CHECK(table.entry(i).expires == table.tick(200 + timeouts.udp_replied * kFakeTscHz));
    CHECK(table.track(i, dns, 0, 300) == ok);
    CHECK(table.entry(i).state == ConnState::udp_replied);  // replied stays replied
    CHECK(table.entry(i).packets[0] == 2);

    FiveTuple ping = v4_tuple(IPPROTO_ICMP, 0x0a000001, 77, 0x08080808, 77);  // the echo id in both port slots
    const int32_t p = table.insert(ping, symmetric_flow_hash(ping), ConnState::icmp, 0, 0);
    REQUIRE(p >= 0);
    CHECK(table.track(p, ping.reversed(), 0, 10) == ok);
    CHECK(table.is_reply(p, ping.reversed()));
    CHECK(table.entry(p).state == ConnState::icmp);
    CHECK(table.entry(p).expires == table.tick(10 + timeouts.icmp * kFakeTscHz));

    for (int s = 0; s < static_cast<int>(ConnState::count); ++s)
        CHECK(std::string(conn_state_name(static_cast<ConnState>(s))) != "unknown");
}

TEST_CASE("one_way_pickup: which mid-stream packet adopts, passes or is not a pickup", "[conntrack]") {
    // An ACK, with or without data or ECN bits, adopts the connection; FIN+ACK and RST (with or without ACK) pass
    // without an entry; SYN opens as usual; SYN+ACK and flags no stack sends are not mid-stream packets.
    CHECK(tcp::one_way_pickup(tcp::classify(ACK)) == tcp::Pickup::adopt);
    CHECK(tcp::one_way_pickup(tcp::classify(ACK | PSH)) == tcp::Pickup::adopt);
    CHECK(tcp::one_way_pickup(tcp::classify(ACK | tcp::kEce | tcp::kCwr | tcp::kUrg)) == tcp::Pickup::adopt);
    CHECK(tcp::one_way_pickup(tcp::classify(FIN | ACK)) == tcp::Pickup::forward);
    CHECK(tcp::one_way_pickup(tcp::classify(FIN | ACK | PSH)) == tcp::Pickup::forward);
    CHECK(tcp::one_way_pickup(tcp::classify(RST)) == tcp::Pickup::forward);
    CHECK(tcp::one_way_pickup(tcp::classify(RST | ACK)) == tcp::Pickup::forward);
    CHECK(tcp::one_way_pickup(tcp::classify(SYN)) == tcp::Pickup::none);
    CHECK(tcp::one_way_pickup(tcp::classify(SYN | ACK)) == tcp::Pickup::none);
    CHECK(tcp::one_way_pickup(tcp::classify(FIN)) == tcp::Pickup::none);
    CHECK(tcp::one_way_pickup(tcp::classify(0)) == tcp::Pickup::none);
    CHECK(tcp::one_way_pickup(tcp::classify(SYN | FIN)) == tcp::Pickup::none);
    CHECK(tcp::one_way_pickup(tcp::classify(SYN | RST)) == tcp::Pickup::none);
}

TEST_CASE("An adopted one-way connection starts established and ends like one that saw its SYN", "[conntrack]") {
    // What the stateful stage does with a mid-stream ACK to a dsr or tunnel VIP: insert established, mark one-way,
    // then track the packet.
    ConnTimeouts timeouts;
    timeouts.tcp_established = 50;
    timeouts.tcp_fin_wait = 7;
    timeouts.tcp_close = 2;
    ConnTable table(unique_table_name(), 64, SOCKET_ID_ANY, timeouts, kFakeTscHz);
    const FiveTuple client = v4_tuple(IPPROTO_TCP, 0xcb007101, 40000, 0xc0000264, 80);
    const int32_t index = table.insert(client, symmetric_flow_hash(client), ConnState::tcp_established, 0, 100);
    REQUIRE(index >= 0);
    ConnEntry& e = table.entry(index);
    e.flags |= kConnFlagOneWay;
    REQUIRE(table.track(index, client, ACK, 100) == TrackVerdict::ok);
    CHECK(e.state == ConnState::tcp_established);
    CHECK(e.expires == table.tick(100 + 50 * kFakeTscHz));  // the established timeout, not syn_sent's
    CHECK(e.packets[0] == 1);
    CHECK_FALSE(table.is_reply(index, client));  // the client is the initiator

    // Data goes on, retransmitted SYNs change nothing; FIN starts the close, RST ends it, a new SYN reopens.
    REQUIRE(table.track(index, client, ACK | PSH, 200) == TrackVerdict::ok);
    CHECK(e.state == ConnState::tcp_established);
    REQUIRE(table.track(index, client, SYN, 300) == TrackVerdict::ok);
    CHECK(e.state == ConnState::tcp_established);
    REQUIRE(table.track(index, client, FIN | ACK, 400) == TrackVerdict::ok);
    CHECK(e.state == ConnState::tcp_fin_wait);
    CHECK(e.expires == table.tick(400 + 7 * kFakeTscHz));
    REQUIRE(table.track(index, client, ACK, 500) == TrackVerdict::ok);
    CHECK(e.state == ConnState::tcp_fin_wait);  // the client's last ACK: still closing
    REQUIRE(table.track(index, client, RST, 600) == TrackVerdict::ok);
    CHECK(e.state == ConnState::tcp_close);
    CHECK(e.expires == table.tick(600 + 2 * kFakeTscHz));
    REQUIRE(table.track(index, client, SYN, 700) == TrackVerdict::ok);
    CHECK(e.state == ConnState::tcp_syn_sent);
    CHECK(e.packets[0] == 7);
}

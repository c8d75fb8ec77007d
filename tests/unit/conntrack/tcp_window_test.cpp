// TCP sequence and window tracking (conntrack/tcp_window.hpp) as a pure function: handshakes with and without window
// scaling, data and ACKs at the window's edges, RFC 5961's RST and SYN handling, mid-stream pickup, the SYN proxy.
#include <cstring>
#include <random>

#include <catch2/catch.hpp>

#include "conntrack/tcp_state.hpp"
#include "conntrack/tcp_window.hpp"

using namespace sluice;

namespace {

constexpr uint8_t SYN = tcp::kSyn, ACK = tcp::kAck, FIN = tcp::kFin, RST = tcp::kRst, PSH = tcp::kPsh;
constexpr bool kClient = false, kServer = true;

TcpSegmentFields seg(uint8_t flags, uint32_t seq, uint32_t ack, uint32_t payload = 0, uint16_t window = 65535,
                     int8_t scale = -1) {
    return TcpSegmentFields{seq, ack, payload, window, flags, scale};
}

// A connection after its handshake: client ISN 1000, server ISN 5000. Both SYNs carry the given scales (-1: none);
// the client then advertises client_window (scaled by its shift when both sides scale).
TcpWindow handshake(TcpWindowCheck check, int8_t client_scale, int8_t server_scale, uint16_t client_window) {
    TcpWindow w{};
    set_tcp_window_check(w, check);
    REQUIRE(tcp_window_check(w, kClient, seg(SYN, 1000, 0, 0, 64240, client_scale), false) == WindowVerdict::pass);
    REQUIRE(tcp_window_check(w, kServer, seg(SYN | ACK, 5000, 1001, 0, 65160, server_scale), false) ==
            WindowVerdict::pass);
    REQUIRE(tcp_window_check(w, kClient, seg(ACK, 1001, 5001, 0, client_window), true) == WindowVerdict::pass);
    return w;
}

}  // namespace

TEST_CASE("tcp window: the window scale applies only when both SYNs carried it", "[conntrack][tcp_window]") {
    SECTION("both scale by 7: 502 << 7 = 64256 bytes of the server's data fit") {
        TcpWindow w = handshake(TcpWindowCheck::strict, 7, 7, 502);
        CHECK(tcp_window_check(w, kServer, seg(ACK | PSH, 5001 + 30000, 1001, 1000), true) == WindowVerdict::pass);
        CHECK(tcp_window_check(w, kServer, seg(ACK | PSH, 5001 + 64256 + 1, 1001, 100), true) ==
              WindowVerdict::out_of_window);
    }
    SECTION("only the client's SYN had the option: the window is 502 bytes") {
        TcpWindow w = handshake(TcpWindowCheck::strict, 7, -1, 502);
        CHECK(tcp_window_check(w, kServer, seg(ACK | PSH, 5001 + 502, 1001, 100), true) == WindowVerdict::pass);
        CHECK(tcp_window_check(w, kServer, seg(ACK | PSH, 5001 + 30000, 1001, 1000), true) ==
              WindowVerdict::out_of_window);
    }
    SECTION("liberal: the same segment passes, and is learned from") {
        TcpWindow w = handshake(TcpWindowCheck::liberal, 7, -1, 502);
        CHECK(tcp_window_check(w, kServer, seg(ACK | PSH, 5001 + 30000, 1001, 1000), true) == WindowVerdict::pass);
        CHECK(w.side[1].end == 5001 + 31000);
    }
}

TEST_CASE("tcp window: data and ACKs outside the window are refused (strict)", "[conntrack][tcp_window]") {
    TcpWindow w = handshake(TcpWindowCheck::strict, -1, -1, 65535);
    // In order, a retransmission, a zero-length ACK: all in the window.
    CHECK(tcp_window_check(w, kClient, seg(ACK | PSH, 1001, 5001, 1400), true) == WindowVerdict::pass);
    CHECK(tcp_window_check(w, kClient, seg(ACK | PSH, 1001, 5001, 1400), true) == WindowVerdict::pass);
    CHECK(tcp_window_check(w, kServer, seg(ACK, 5001, 2401), true) == WindowVerdict::pass);
    // An ACK of data the client never sent.
    CHECK(tcp_window_check(w, kServer, seg(ACK, 5001, 2401 + 100000), true) == WindowVerdict::out_of_window);
    // An ACK from far behind (more than a window's worth).
    CHECK(tcp_window_check(w, kServer, seg(ACK, 5001, 2401 - 200000), true) == WindowVerdict::out_of_window);
    // Data beyond what the server's acknowledgment and window allow, and data from far behind.
    CHECK(tcp_window_check(w, kClient, seg(ACK | PSH, 2401 + 65535 + 1, 5001, 10), true) ==
          WindowVerdict::out_of_window);
    CHECK(tcp_window_check(w, kClient, seg(ACK | PSH, 2401 - 200000, 5001, 10), true) == WindowVerdict::out_of_window);
    // A refused segment changed nothing.
    CHECK(w.side[0].end == 2401);
    // A FIN takes a sequence number.
    CHECK(tcp_window_check(w, kClient, seg(FIN | ACK, 2401, 5001), true) == WindowVerdict::pass);
    CHECK(w.side[0].end == 2402);
}

TEST_CASE("tcp window: an ACK's edges, a byte inside and a byte outside (strict)", "[conntrack][tcp_window]") {
    // After the handshake the client may send up to 1001 + 65160 (the server's SYN+ACK window, unscaled), and the
    // server's acknowledgment may trail the client's 1001 by max(65160, kMinAckWindow) = 66000. The segments below
    // are plain ACKs between two known sides: tcp_window_check's common path.
    const TcpWindow start = handshake(TcpWindowCheck::strict, -1, -1, 65535);
    REQUIRE(start.side[0].maxend == 1001 + 65160);
    SECTION("the client's data: its last byte at maxend passes, one more is refused") {
        TcpWindow w = start;
        CHECK(tcp_window_check(w, kClient, seg(ACK | PSH, 1001 + 65160 + 1, 5001, 0), true) ==
              WindowVerdict::out_of_window);
        CHECK(w.side[0].end == 1001);
        CHECK(tcp_window_check(w, kClient, seg(ACK | PSH, 1001 + 65160 - 100, 5001, 100), true) == WindowVerdict::pass);
        CHECK(w.side[0].end == 1001 + 65160);
        CHECK(w.side[0].maxend == 1001 + 65160);
    }
    SECTION("the client's old data: ending a server window before its next byte passes, one byte earlier not") {
        TcpWindow w = start;
        CHECK(tcp_window_check(w, kClient, seg(ACK, 1001 - 65160 - 11, 5001, 10), true) ==
              WindowVerdict::out_of_window);
        CHECK(tcp_window_check(w, kClient, seg(ACK, 1001 - 65160 - 10, 5001, 10), true) == WindowVerdict::pass);
        CHECK(w.side[0].end == 1001);  // a retransmission moves nothing forward
    }
    SECTION("the server's acknowledgment: at most the client's next byte, at least 66000 behind it") {
        TcpWindow w = start;
        CHECK(tcp_window_check(w, kServer, seg(ACK, 5001, 1002), true) == WindowVerdict::out_of_window);
        CHECK(tcp_window_check(w, kServer, seg(ACK, 5001, 1001 - 66001), true) == WindowVerdict::out_of_window);
        CHECK(w.side[1].maxack == 1001);  // refused segments taught nothing
        CHECK(tcp_window_check(w, kServer, seg(ACK, 5001, 1001 - 66000), true) == WindowVerdict::pass);
        CHECK(tcp_window_check(w, kServer, seg(ACK, 5001, 1001), true) == WindowVerdict::pass);
        CHECK(w.side[1].maxack == 1001);
        // What it acknowledged and its window bound the client: 1001 + 65535.
        CHECK(w.side[0].maxend == 1001 + 65535);
    }
    SECTION("liberal: the byte outside passes and is learned from") {
        TcpWindow w = handshake(TcpWindowCheck::liberal, -1, -1, 65535);
        CHECK(tcp_window_check(w, kClient, seg(ACK | PSH, 1001 + 65160 + 1, 5001, 10), true) == WindowVerdict::pass);
        CHECK(w.side[0].end == 1001 + 65160 + 11);
        CHECK(w.side[0].maxend == 1001 + 65160 + 11);
    }
}

TEST_CASE("tcp window: the common ACK's path and the full check agree", "[conntrack][tcp_window]") {
    // Connections after a handshake (scaled or not, strict or liberal) or picked up mid-stream (one side or both),
    // then segments near every edge: each one given to tcp_window_check and to tcp_window_full_check alone, the
    // verdicts and the windows they leave compared byte for byte.
    std::mt19937 rng(7);
    auto random32 = [&] { return static_cast<uint32_t>(rng()); };
    auto pick = [&](uint32_t n) { return random32() % n; };
    int common = 0;
    for (int round = 0; round < 300; ++round) {
        const TcpWindowCheck check = pick(2) ? TcpWindowCheck::strict : TcpWindowCheck::liberal;
        TcpWindow w{};
        if (const uint32_t start = pick(4); start < 2) {
            // Picked up mid-stream: both sides, or only the client's (a one-way connection's backend is never seen).
            set_tcp_window_check(w, check);
            REQUIRE(tcp_window_check(w, kClient, seg(ACK, 70000, 900000, 500, 300), true) == WindowVerdict::pass);
            if (start == 0)
                REQUIRE(tcp_window_check(w, kServer, seg(ACK, 900000, 70500, 0, 300), true) == WindowVerdict::pass);
        } else {
            const auto scale = [&] { return pick(3) ? static_cast<int8_t>(pick(15)) : int8_t{-1}; };
            w = handshake(check, scale(), scale(), static_cast<uint16_t>(1 + pick(65535)));
        }
        for (int k = 0; k < 40; ++k) {
            const bool reply = pick(2);
            const TcpWindowSide& sender = w.side[reply ? 1 : 0];
            const TcpWindowSide& receiver = w.side[reply ? 0 : 1];
            const uint32_t edges_seq[] = {sender.end, sender.maxend, sender.maxend + 1,
                                          sender.end - tcp_window_maxwin(w, reply ? 0 : 1), random32()};
            const uint32_t edges_ack[] = {receiver.end,
                                          receiver.end + 1,
                                          receiver.end - 66000,
                                          receiver.end - 66001,
                                          receiver.end - tcp_window_maxwin(w, reply ? 1 : 0),
                                          random32()};
            const uint32_t payload = pick(3) ? pick(3000) : 0;
            const uint32_t seq = edges_seq[pick(5)] - (pick(2) ? payload : 0) + pick(3) - 1;
            const uint32_t ack = edges_ack[pick(6)] + pick(3) - 1;
            static constexpr uint8_t kFlags[] = {ACK, ACK, ACK | PSH, ACK | 0xc0, FIN | ACK, RST, RST | ACK, 0};
            const uint8_t flags = kFlags[pick(8)];
            const auto window = static_cast<uint16_t>(pick(4) ? pick(65536) : 65535);
            const TcpSegmentFields segment = seg(flags, seq, ack, payload, window);
            TcpWindow full = w;
            const WindowVerdict expected = tcp_window_full_check(full, reply, segment, true);
            INFO("round " << round << " segment " << k << " flags " << int{flags} << " seq " << seq << " ack " << ack);
            REQUIRE(tcp_window_check(w, reply, segment, true) == expected);
            REQUIRE(std::memcmp(&w, &full, sizeof w) == 0);
            common += (flags & (FIN | SYN | RST | ACK)) == ACK;
        }
    }
    CHECK(common > 3000);
}

TEST_CASE("tcp window: a RST closes only at the receiver's RCV.NXT (RFC 5961 3.2)", "[conntrack][tcp_window]") {
    for (TcpWindowCheck check : {TcpWindowCheck::strict, TcpWindowCheck::liberal}) {
        INFO(tcp_window_check_name(check));
        TcpWindow w = handshake(check, -1, -1, 65535);
        REQUIRE(tcp_window_check(w, kClient, seg(ACK | PSH, 1001, 5001, 100), true) == WindowVerdict::pass);
        // In the window, not exact: challenged, whichever side it claims to come from.
        CHECK(tcp_window_check(w, kServer, seg(RST, 5001 + 10, 0), true) == WindowVerdict::rst_challenge);
        CHECK(tcp_window_check(w, kClient, seg(RST | ACK, 1101 + 1, 5001), true) == WindowVerdict::rst_challenge);
        // Far outside: dropped (strict), challenged (liberal: the window is not trusted).
        const WindowVerdict far = tcp_window_check(w, kServer, seg(RST, 5001 + 0x40000000u, 0), true);
        CHECK(far ==
              (check == TcpWindowCheck::strict ? WindowVerdict::rst_out_of_window : WindowVerdict::rst_challenge));
        // The challenge ACK the server would send the client: its own next sequence, and what it acknowledged (its
        // SYN+ACK's 1001), not the client's 100 bytes it has not.
        const ChallengeAck challenge = tcp_challenge_ack(w, kClient);
        CHECK(challenge.seq == 5001);
        CHECK(challenge.ack == 1001);
        // The client's next sequence is not enough: the server acknowledged 1001, not the 100 bytes after it.
        CHECK(tcp_window_check(w, kClient, seg(RST | ACK, 1101, 5001), true) == WindowVerdict::rst_challenge);
        // Exact: at what the receiver acknowledged.
        CHECK(tcp_window_check(w, kServer, seg(RST, 5001, 0), true) == WindowVerdict::rst_exact);
        CHECK(tcp_window_check(w, kClient, seg(RST | ACK, 1001, 5001), true) == WindowVerdict::rst_exact);
    }
}

TEST_CASE("tcp window: a RST after data lost in flight is challenged, then exact at RCV.NXT",
          "[conntrack][tcp_window]") {
    TcpWindow w = handshake(TcpWindowCheck::strict, 7, 7, 502);
    REQUIRE(tcp_window_check(w, kServer, seg(ACK, 5001, 1001, 1000), true) == WindowVerdict::pass);
    REQUIRE(tcp_window_check(w, kClient, seg(ACK, 1001, 6001), true) == WindowVerdict::pass);
    // 1000 bytes the client never acknowledged (lost on the way, or still in flight), then a RST at the server's
    // next sequence: the client would not take it (not its RCV.NXT), so neither does sluice.
    REQUIRE(tcp_window_check(w, kServer, seg(ACK, 6001, 1001, 1000), true) == WindowVerdict::pass);
    CHECK(tcp_window_check(w, kServer, seg(RST, 7001, 0), true) == WindowVerdict::rst_challenge);
    CHECK(w.side[1].end == 7001);
    // The challenge carries the client's RCV.NXT; a server that really reset answers there, which is exact.
    const ChallengeAck challenge = tcp_challenge_ack(w, kServer);
    CHECK(challenge.seq == 1001);
    CHECK(challenge.ack == 6001);
    CHECK(tcp_window_check(w, kServer, seg(RST, challenge.ack, 0), true) == WindowVerdict::rst_exact);
}

TEST_CASE("tcp window: RCV.NXT is the highest acknowledgment, never moved back by a late one",
          "[conntrack][tcp_window]") {
    TcpWindow w = handshake(TcpWindowCheck::strict, -1, -1, 65535);
    REQUIRE(tcp_window_check(w, kServer, seg(ACK, 5001, 1001, 3000), true) == WindowVerdict::pass);
    REQUIRE(tcp_window_check(w, kClient, seg(ACK, 1001, 8001), true) == WindowVerdict::pass);
    REQUIRE(tcp_window_check(w, kClient, seg(ACK, 1001, 6001), true) == WindowVerdict::pass);  // reordered
    CHECK(w.side[0].maxack == 8001);
    CHECK(tcp_window_check(w, kServer, seg(RST, 6001, 0), true) == WindowVerdict::rst_challenge);
    CHECK(tcp_window_check(w, kServer, seg(RST, 8001, 0), true) == WindowVerdict::rst_exact);
}

TEST_CASE("tcp window: a challenge ACK acknowledges no more than its receiver did", "[conntrack][tcp_window]") {
    // A download: the server has 10 segments in flight, the client acknowledged 4 of them (window 502 << 7).
    TcpWindow w = handshake(TcpWindowCheck::strict, 7, 7, 502);
    for (uint32_t i = 0; i < 10; ++i)
        REQUIRE(tcp_window_check(w, kServer, seg(ACK, 5001 + i * 1000, 1001, 1000), true) == WindowVerdict::pass);
    REQUIRE(tcp_window_check(w, kClient, seg(ACK, 1001, 9001, 0, 502), true) == WindowVerdict::pass);
    // A blind RST "from the server" lands in the window: the challenge goes to the server in the client's name. An
    // ACK of 15001 would make the server forget 6000 bytes in flight; were one segment lost, the download would stall.
    REQUIRE(tcp_window_check(w, kServer, seg(RST, 15001 - 10, 0), true) == WindowVerdict::rst_challenge);
    ChallengeAck challenge = tcp_challenge_ack(w, kServer);
    CHECK(challenge.seq == 1001);
    CHECK(challenge.ack == 9001);
    CHECK(challenge.window == 502);
    // A smaller window later (the client's buffer fills): exactly the client's acknowledgment.
    REQUIRE(tcp_window_check(w, kClient, seg(ACK, 1001, 12001, 0, 10), true) == WindowVerdict::pass);
    CHECK(tcp_challenge_ack(w, kServer).ack == 12001);
    // All acknowledged (the connection idles): the server's next sequence, where the RST that a server which lost
    // the connection would answer with is exact.
    REQUIRE(tcp_window_check(w, kClient, seg(ACK, 1001, 15001, 0, 502), true) == WindowVerdict::pass);
    challenge = tcp_challenge_ack(w, kServer);
    CHECK(challenge.ack == 15001);
    CHECK(tcp_window_check(w, kServer, seg(RST, challenge.ack, 0), true) == WindowVerdict::rst_exact);
}

TEST_CASE("tcp window: a SYN on an established connection is challenged (RFC 5961 4.2)", "[conntrack][tcp_window]") {
    TcpWindow w = handshake(TcpWindowCheck::strict, 7, 7, 502);
    CHECK(tcp_window_check(w, kClient, seg(SYN, 1000, 0), true) == WindowVerdict::syn_challenge);
    CHECK(tcp_window_check(w, kServer, seg(SYN, 77777, 0), true) == WindowVerdict::syn_challenge);
    CHECK(tcp_window_check(w, kClient, seg(SYN, 123456, 0), true) == WindowVerdict::syn_challenge);
    // Not synchronized (time_wait): a new SYN reuses the ports and starts the client's side afresh.
    CHECK(tcp_window_check(w, kClient, seg(SYN, 900000, 0, 0, 64240, 7), false) == WindowVerdict::pass);
    CHECK(w.side[0].end == 900001);
}

TEST_CASE("tcp window: the handshake's own checks", "[conntrack][tcp_window]") {
    TcpWindow w{};
    set_tcp_window_check(w, TcpWindowCheck::strict);
    REQUIRE(tcp_window_check(w, kClient, seg(SYN, 1000, 0), false) == WindowVerdict::pass);
    // A SYN+ACK that acknowledges something else than the SYN is refused.
    CHECK(tcp_window_check(w, kServer, seg(SYN | ACK, 5000, 4242), false) == WindowVerdict::out_of_window);
    // A RST answering the SYN must acknowledge it (the responder has no sequence of its own yet).
    CHECK(tcp_window_check(w, kServer, seg(RST, 31337, 0), false) == WindowVerdict::rst_out_of_window);
    CHECK(tcp_window_check(w, kServer, seg(RST | ACK, 0, 4242), false) == WindowVerdict::rst_out_of_window);
    CHECK(tcp_window_check(w, kServer, seg(RST | ACK, 0, 1001), false) == WindowVerdict::rst_exact);
}

TEST_CASE("tcp window: mid-stream pickup learns both sides before it judges", "[conntrack][tcp_window]") {
    TcpWindow w{};
    set_tcp_window_check(w, TcpWindowCheck::strict);
    // The first packet seen is the client's, deep in the stream; the server is unknown: anything passes.
    CHECK(tcp_window_check(w, kClient, seg(ACK | PSH, 70000, 900000, 500, 300), true) == WindowVerdict::pass);
    CHECK(tcp_window_check(w, kClient, seg(ACK | PSH, 3, 7, 500, 300), true) == WindowVerdict::pass);
    // Until the server is seen, a RST can only be exact at the client's next sequence; any other is challenged.
    CHECK(tcp_window_check(w, kClient, seg(RST, 12345, 0), true) == WindowVerdict::rst_challenge);
    // The server's first packet: learned. From here on both sides are known.
    CHECK(tcp_window_check(w, kServer, seg(ACK, 900000, 70500, 0, 300), true) == WindowVerdict::pass);
    CHECK(tcp_window_check(w, kServer, seg(RST, 900000 + 0x40000000u, 0), true) == WindowVerdict::rst_out_of_window);
    CHECK(tcp_window_check(w, kClient, seg(RST, 70500, 0), true) == WindowVerdict::rst_exact);
}

TEST_CASE("tcp window: a syn_proxy connection opens with both sides known", "[conntrack][tcp_window]") {
    TcpWindow w{};
    set_tcp_window_check(w, TcpWindowCheck::strict);
    // The client's ISN was 1000 and it advertised 29200; sluice's cookie was 0xdead0000 with a window of 65535.
    tcp_window_open_proxied(w, 1001, 29200, 0xdead0001u, 65535);
    // The backend's packets, once moved into the cookie's space: its first data and an exact RST pass.
    CHECK(tcp_window_check(w, kServer, seg(ACK | PSH, 0xdead0001u, 1001, 1000), true) == WindowVerdict::pass);
    CHECK(tcp_window_check(w, kClient, seg(RST, 1001 + 5, 0), true) == WindowVerdict::rst_challenge);
    CHECK(tcp_window_check(w, kClient, seg(RST, 1001 + 0x40000000u, 0), true) == WindowVerdict::rst_out_of_window);
    // The client acknowledged the cookie's SYN, not the backend's 1000 bytes yet: that is its RCV.NXT.
    CHECK(tcp_window_check(w, kServer, seg(RST, 0xdead0001u + 1000, 0), true) == WindowVerdict::rst_challenge);
    CHECK(tcp_challenge_ack(w, kServer).ack == 0xdead0001u);
    REQUIRE(tcp_window_check(w, kClient, seg(ACK, 1001, 0xdead0001u + 1000), true) == WindowVerdict::pass);
    CHECK(tcp_window_check(w, kServer, seg(RST, 0xdead0001u + 1000, 0), true) == WindowVerdict::rst_exact);
}

TEST_CASE("tcp window: 32 bytes that keep every window a header can state exactly", "[conntrack][tcp_window]") {
    TcpWindow w{};
    set_tcp_window_check(w, TcpWindowCheck::liberal);
    for (uint32_t scale = 0; scale <= 14; ++scale) {
        for (uint32_t window : {1u, 502u, 29200u, 64240u, 65535u}) {
            set_tcp_window_maxwin(w, 1, window << scale);
            CHECK(tcp_window_maxwin(w, 1) == window << scale);
        }
    }
    // What no header states (only a peer's sync event could): rounded up, never down.
    set_tcp_window_maxwin(w, 0, UINT32_MAX);
    CHECK(tcp_window_maxwin(w, 0) >= (65535u << 15));
    set_tcp_window_maxwin(w, 0, (65535u << 14) + 1);
    CHECK(tcp_window_maxwin(w, 0) > (65535u << 14));
    CHECK(tcp_window_maxwin(w, 1) == 65535u << 14);  // the other side's untouched
    // The check shares flags[0]'s byte: a handshake rewriting the side's flags keeps it.
    REQUIRE(tcp_window_check(w, kClient, seg(SYN, 1000, 0, 0, 64240, 7), false) == WindowVerdict::pass);
    CHECK(tcp_window_check_of(w) == TcpWindowCheck::liberal);
    CHECK(tcp_window_side_flags(w, 0) == (kWindowSideSeen | kWindowSideSyn | kWindowSideScale));
    CHECK(tcp_window_scale_of(w, 0) == 7);
    CHECK(tcp_window_maxwin(w, 0) == 64240);
}

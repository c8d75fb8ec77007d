#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <cstring>
#include <vector>

#include "sync/sync_wire.hpp"

using namespace sluice;

namespace {

const std::string kKey = "0123456789abcdef0123456789abcdef-test-key";

SyncEvent nat_event(uint16_t client_port) {
    SyncEvent e{};
    e.tuple.family = IpFamily::ipv4;
    e.tuple.proto = 6;
    inet_pton(AF_INET, "198.51.100.7", e.tuple.src.bytes);
    inet_pton(AF_INET, "203.0.113.10", e.tuple.dst.bytes);
    e.tuple.src_port = client_port;
    e.tuple.dst_port = 80;
    e.kind = SyncEventKind::opened;
    e.state = ConnState::tcp_established;
    e.flags = kConnFlagSynProxy;
    e.rule_index = 7;
    e.backend = 3;
    e.seq_shift = 0xdeadbeef;
    e.lifetime_s = 3599;
    e.nat_port = 40001;
    e.nat_address = 1;
    e.in_port = 2;
    e.window.side[0] = TcpWindowSide{1000, 70000, 0};
    e.window.side[1] = TcpWindowSide{5000, 66000, 0};
    set_tcp_window_maxwin(e.window, 0, 65535);
    set_tcp_window_maxwin(e.window, 1, 29200u << 9);
    set_tcp_window_scale(e.window, 0, 7);
    set_tcp_window_scale(e.window, 1, 9);
    e.window.flags[0] = kWindowSideSeen | kWindowSideSyn;
    e.window.flags[1] = kWindowSideSeen | kWindowSideBounded;
    set_tcp_window_check(e.window, TcpWindowCheck::liberal);
    return e;
}

std::vector<uint8_t> sealed(SyncDatagramWriter& w, const std::string& key = kKey) {
    const auto bytes = w.seal(key);
    return {bytes.begin(), bytes.end()};
}

}  // namespace

TEST_CASE("sync wire: events survive an encode/decode round trip field for field", "[sync]") {
    SyncDatagramWriter w(SyncHeader{SyncMessageType::events, 0, 42, 1'700'000'000'123, 9});
    const SyncEvent first = nat_event(50000);
    SyncEvent second = nat_event(50001);
    second.tuple.family = IpFamily::ipv6;
    second.tuple.proto = 17;
    inet_pton(AF_INET6, "2001:db8::7", second.tuple.src.bytes);
    inet_pton(AF_INET6, "2001:db8::10", second.tuple.dst.bytes);
    second.kind = SyncEventKind::closed;
    second.state = ConnState::udp_replied;
    REQUIRE(w.add(first));
    REQUIRE(w.add(second));
    const std::vector<uint8_t> bytes = sealed(w);
    REQUIRE(bytes.size() == kSyncHeaderBytes + 2 * kSyncEventBytes + kSyncMacBytes);

    SyncDatagram d;
    REQUIRE(decode_sync_datagram(bytes, kKey, d) == SyncDecodeError::none);
    CHECK(d.header.type == SyncMessageType::events);
    CHECK(d.header.count == 2);
    CHECK(d.header.instance == 42);
    CHECK(d.header.epoch == 1'700'000'000'123);
    CHECK(d.header.sequence == 9);
    for (int i = 0; i < 2; ++i) {
        const SyncEvent& want = i == 0 ? first : second;
        const SyncEvent& got = d.events[i];
        CHECK(got.tuple == want.tuple);
        CHECK(got.kind == want.kind);
        CHECK(got.state == want.state);
        CHECK(got.flags == want.flags);
        CHECK(got.rule_index == want.rule_index);
        CHECK(got.backend == want.backend);
        CHECK(got.seq_shift == want.seq_shift);
        CHECK(got.lifetime_s == want.lifetime_s);
        CHECK(got.nat_port == want.nat_port);
        CHECK(got.nat_address == want.nat_address);
        CHECK(got.in_port == want.in_port);
        CHECK(std::memcmp(&got.window, &want.window, sizeof got.window) == 0);
    }
}

TEST_CASE("sync wire: a full datagram holds kSyncMaxEvents and stays under kSyncMaxDatagram", "[sync]") {
    SyncDatagramWriter w(SyncHeader{SyncMessageType::events, 0, 1, 1, 1});
    for (std::size_t i = 0; i < kSyncMaxEvents; ++i) REQUIRE(w.add(nat_event(static_cast<uint16_t>(1000 + i))));
    CHECK(w.full());
    CHECK_FALSE(w.add(nat_event(1)));
    const std::vector<uint8_t> bytes = sealed(w);
    CHECK(bytes.size() <= kSyncMaxDatagram);
    SyncDatagram d;
    REQUIRE(decode_sync_datagram(bytes, kKey, d) == SyncDecodeError::none);
    CHECK(d.events[kSyncMaxEvents - 1].tuple.src_port == 1000 + kSyncMaxEvents - 1);
}

TEST_CASE("sync wire: a forged or altered datagram is refused before any field is read", "[sync]") {
    SyncDatagramWriter w(SyncHeader{SyncMessageType::events, 0, 1, 1, 1});
    w.add(nat_event(50000));
    SyncDatagram d;
    SECTION("another key") {
        const std::vector<uint8_t> bytes = sealed(w, "another key of at least thirty-two bytes...");
        CHECK(decode_sync_datagram(bytes, kKey, d) == SyncDecodeError::forged);
    }
    SECTION("one bit flipped in an event, in the header, in the MAC") {
        for (std::size_t at : {kSyncHeaderBytes + 20, std::size_t{9}, kSyncHeaderBytes + kSyncEventBytes + 3}) {
            std::vector<uint8_t> bytes = sealed(w);
            bytes[at] ^= 0x01;
            CHECK(decode_sync_datagram(bytes, kKey, d) == SyncDecodeError::forged);
        }
    }
}

TEST_CASE("sync wire: truncated and malformed datagrams are told apart", "[sync]") {
    SyncDatagram d;
    SECTION("shorter than a header and a MAC") {
        SyncDatagramWriter w(SyncHeader{SyncMessageType::events, 0, 1, 1, 1});
        std::vector<uint8_t> bytes = sealed(w);
        bytes.resize(kSyncHeaderBytes + kSyncMacBytes - 1);
        CHECK(decode_sync_datagram(bytes, kKey, d) == SyncDecodeError::truncated);
    }
    SECTION("a body shorter than its count, re-signed (a sender's bug, not an attacker)") {
        SyncDatagramWriter w(SyncHeader{SyncMessageType::events, 0, 1, 1, 1});
        w.add(nat_event(1));
        w.add(nat_event(2));
        std::vector<uint8_t> bytes = sealed(w);
        bytes.resize(kSyncHeaderBytes + kSyncEventBytes);  // drop the MAC and the second event
        const auto mac = sync_mac(kKey, bytes);
        bytes.insert(bytes.end(), mac.begin(), mac.end());
        CHECK(decode_sync_datagram(bytes, kKey, d) == SyncDecodeError::truncated);
    }
    SECTION("an event with an unknown state, re-signed") {
        SyncDatagramWriter w(SyncHeader{SyncMessageType::events, 0, 1, 1, 1});
        w.add(nat_event(1));
        std::vector<uint8_t> bytes = sealed(w);
        bytes.resize(bytes.size() - kSyncMacBytes);
        bytes[kSyncHeaderBytes + 39] = 200;  // family, proto, 32 address bytes, 4 port bytes, kind: then the state
        const auto mac = sync_mac(kKey, bytes);
        bytes.insert(bytes.end(), mac.begin(), mac.end());
        CHECK(decode_sync_datagram(bytes, kKey, d) == SyncDecodeError::malformed);
    }
    SECTION("sequence 0") {
        SyncDatagramWriter w(SyncHeader{SyncMessageType::events, 0, 1, 1, 0});
        CHECK(decode_sync_datagram(sealed(w), kKey, d) == SyncDecodeError::malformed);
    }
}

TEST_CASE("sync wire: a resend request carries its range", "[sync]") {
    SyncDatagramWriter w(SyncHeader{SyncMessageType::resend_request, 0, 5, 77, 0});
    w.set_resend_range(10, 12);
    SyncDatagram d;
    REQUIRE(decode_sync_datagram(sealed(w), kKey, d) == SyncDecodeError::none);
    CHECK(d.header.type == SyncMessageType::resend_request);
    CHECK(d.resend_first == 10);
    CHECK(d.resend_last == 12);
    SyncDatagramWriter backwards(SyncHeader{SyncMessageType::resend_request, 0, 5, 77, 0});
    backwards.set_resend_range(12, 10);
    CHECK(decode_sync_datagram(sealed(backwards), kKey, d) == SyncDecodeError::malformed);
}

TEST_CASE("sync wire: a resync_done names the dump's last datagram, never none", "[sync]") {
    SyncDatagramWriter done(SyncHeader{SyncMessageType::resync_done, 0, 5, 77, 42});
    SyncDatagram d;
    REQUIRE(decode_sync_datagram(sealed(done), kKey, d) == SyncDecodeError::none);
    CHECK(d.header.type == SyncMessageType::resync_done);
    CHECK(d.header.epoch == 77);
    CHECK(d.header.sequence == 42);
    SyncDatagramWriter nothing(SyncHeader{SyncMessageType::resync_done, 0, 5, 77, 0});
    CHECK(decode_sync_datagram(sealed(nothing), kKey, d) == SyncDecodeError::malformed);
    SyncDatagramWriter with_events(SyncHeader{SyncMessageType::resync_done, 0, 5, 77, 42});
    with_events.add(nat_event(1000));
    CHECK(decode_sync_datagram(sealed(with_events), kKey, d) == SyncDecodeError::malformed);
}

TEST_CASE("sync replay window: replays are refused, gaps reported, late resends taken once", "[sync]") {
    ReplayWindow window;
    uint64_t first, last;
    CHECK(window.accept(100, 1, first, last) == ReplayWindow::Verdict::fresh);
    CHECK(first > last);
    CHECK(window.take_new_epoch());
    CHECK_FALSE(window.take_new_epoch());
    CHECK(window.accept(100, 2, first, last) == ReplayWindow::Verdict::fresh);
    CHECK(window.accept(100, 2, first, last) == ReplayWindow::Verdict::replayed);
    CHECK(window.accept(100, 6, first, last) == ReplayWindow::Verdict::fresh);
    CHECK(first == 3);
    CHECK(last == 5);
    CHECK(window.accept(100, 4, first, last) == ReplayWindow::Verdict::fresh);  // the resend of a gap
    CHECK(first > last);
    CHECK(window.accept(100, 4, first, last) == ReplayWindow::Verdict::replayed);
    CHECK(window.accept(100, 6 + ReplayWindow::kWidth, first, last) == ReplayWindow::Verdict::fresh);
    CHECK(window.accept(100, 5, first, last) == ReplayWindow::Verdict::replayed);       // slid out of the window
    CHECK(window.accept(99, 1000000, first, last) == ReplayWindow::Verdict::replayed);  // an older epoch
    CHECK(window.accept(101, 1, first, last) == ReplayWindow::Verdict::fresh);          // the sender restarted
    CHECK(window.take_new_epoch());
    CHECK(window.accept(100, 7, first, last) == ReplayWindow::Verdict::replayed);
}

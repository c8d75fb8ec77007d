// State sync through the whole data path (PipelineLab) and the real sync channel over loopback UDP: a NAT
// connection a worker opened is emitted, batched and authenticated by one channel, taken in by another after the
// lab's tables were cleared (a restart stands for the second instance: two labs cannot share the process's ring
// names), installed by the owning worker, and its packets then flow there as they did: the backend's reply is
// rewritten back to the client, and strict TCP window checking goes on. Forged and replayed datagrams change
// nothing; a gap asks the sender for what it missed.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/sync_loopback.hpp"
#include "common/unique_fd.hpp"
#include "pipeline/pipeline_lab.hpp"
#include "sync/sync_channel.hpp"

using namespace sluice;
using namespace sluice::test;

namespace {

const std::string kKey = "sync-test-key-of-more-than-thirty-two-bytes";

// A key file only root reads (the config refuses any other), in a directory of the test's own.
std::string write_key_file() {
    const std::string dir = "/tmp/sluice-sync-lab-" + std::to_string(::getpid());
    std::filesystem::create_directories(dir);
    const std::string path = dir + "/sync.key";
    std::ofstream(path) << kKey << "\n";
    std::filesystem::permissions(path, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
    return path;
}

// Two workers (the NAT port names its owner), one nat service, sync on.
std::string nat_config(const std::string& key_file) {
    return R"(
ports:
  - {name: client, device: ring_client}
  - {name: server, device: ring_server}
lcores: [{id: 1, roles: [rx, worker]}, {id: 2, roles: [worker]}]
forward:
  - {from: client, to: server, next_hop_mac: "02:00:00:00:00:0b"}
  - {from: server, to: client, next_hop_mac: "02:00:00:00:00:0a"}
firewall:
  default: allow
  tcp_window_check: strict
load_balancer:
  nat_pool: [10.1.0.100]
services:
  - {name: web, vip: 192.0.2.100, port: 80, protocol: tcp, mode: nat, backends: [{address: 10.1.0.11, port: 8080}]}
sync:
  listen: 127.0.0.1:7900
  peers: [127.0.0.1:7901]
  key_file: )" +
           key_file + "\n";
}

FrameSpec segment(const char* src, uint16_t sport, const char* dst, uint16_t dport, uint8_t flags, uint32_t seq,
                  uint32_t ack, std::size_t payload = 0) {
    FrameSpec f = tcp_spec(src, sport, dst, dport, flags);
    f.seq = seq, f.ack = ack, f.payload = payload;
    return f;
}

// A UDP socket on loopback standing for the peer instance: it receives what a channel sends and sends it on.
struct LoopbackPeer {
    UniqueFd fd{::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0)};
    uint16_t port = 0;
    LoopbackPeer() {
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        REQUIRE(::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
        socklen_t n = sizeof a;
        ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&a), &n);
        port = ntohs(a.sin_port);
    }
    std::vector<std::vector<uint8_t>> receive() {
        std::vector<std::vector<uint8_t>> out;
        uint8_t buffer[2048];
        ssize_t n;
        while ((n = ::recv(fd.get(), buffer, sizeof buffer, 0)) > 0) out.emplace_back(buffer, buffer + n);
        return out;
    }
    void send_to(uint16_t to_port, const std::vector<uint8_t>& bytes) {
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a.sin_port = htons(to_port);
        REQUIRE(::sendto(fd.get(), bytes.data(), bytes.size(), 0, reinterpret_cast<sockaddr*>(&a), sizeof a) ==
                static_cast<ssize_t>(bytes.size()));
    }
};

std::unique_ptr<SyncChannel> channel_for(PipelineLab& lab, uint16_t peer_port) {
    SyncChannelSettings settings{loopback_sync_address(0), {loopback_sync_address(peer_port)}, kKey, 7};
    return std::make_unique<SyncChannel>(settings, lab.dataplane().sync_event_rings(),
                                         lab.dataplane().sync_apply_rings(), nullptr);
}

// Runs the channel until the peer received at least one datagram with events (at most a second). By the clock, not
// by turns: with an event pending, run_once does not wait, and many turns pass before its flush interval has.
std::vector<std::vector<uint8_t>> sent_events(SyncChannel& channel, LoopbackPeer& peer, std::size_t& events) {
    std::vector<std::vector<uint8_t>> datagrams;
    events = 0;
    SyncDatagram d;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    while (events == 0 && std::chrono::steady_clock::now() < deadline) {
        channel.run_once(5);
        for (auto& bytes : peer.receive()) {
            REQUIRE(decode_sync_datagram(bytes, kKey, d) == SyncDecodeError::none);
            if (d.header.type != SyncMessageType::events) continue;
            events += d.header.count;
            datagrams.push_back(std::move(bytes));
        }
    }
    return datagrams;
}

}  // namespace

TEST_CASE("sync: a NAT connection learned from a peer carries its replies and strict TCP there", "[pipeline][sync]") {
    const std::string yaml = nat_config(write_key_file());
    PipelineLab lab(yaml);
    REQUIRE(lab.dataplane().sync_event_rings().size() == 2);
    LoopbackPeer peer;
    const char *client = "203.0.113.7", *vip = "192.0.2.100", *backend = "10.1.0.11", *pool = "10.1.0.100";

    // The handshake on the first instance.
    std::vector<Bytes> out = lab.exchange("client", {frame(segment(client, 41000, vip, 80, kSyn, 1000, 0))}, "server");
    REQUIRE(out.size() == 1);
    const uint16_t port = read_frame(out[0]).src_port;
    REQUIRE(
        lab.exchange("server", {frame(segment(backend, 8080, pool, port, kSyn | kAck, 7000, 1001))}, "client").size() ==
        1);
    REQUIRE(lab.exchange("client", {frame(segment(client, 41000, vip, 80, kAck, 1001, 7001))}, "server").size() == 1);
    CHECK(lab.totals().sync_events_queued >= 2);  // opened, then established
    CHECK(lab.totals().sync_events_dropped == 0);

    std::vector<std::vector<uint8_t>> datagrams;
    {
        auto first = channel_for(lab, peer.port);
        std::size_t events = 0;
        datagrams = sent_events(*first, peer, events);
        CHECK(events == lab.totals().sync_events_queued);
        CHECK(first->counters().events_sent.load() == events);
        SyncDatagram d;
        REQUIRE(decode_sync_datagram(datagrams.back(), kKey, d) == SyncDecodeError::none);
        const SyncEvent& last = d.events[d.header.count - 1];
        CHECK(last.nat_port == port);
        CHECK(last.state == ConnState::tcp_established);
        CHECK(last.backend != 0);
    }

    // The second instance: nothing of the connection until the peer's events arrive.
    lab.restart(yaml);
    CHECK(lab.exchange("server", {frame(segment(backend, 8080, pool, port, kAck, 7001, 1001, 10))}, "client").empty());
    CHECK(lab.drops(DropReason::nat_no_connection) == 1);

    auto second = channel_for(lab, peer.port);
    std::vector<uint8_t> forged = datagrams.front();
    forged[kSyncHeaderBytes + 3] ^= 0x40;  // an event's address altered on the way
    peer.send_to(second->bound_port(), forged);
    for (const auto& bytes : datagrams) peer.send_to(second->bound_port(), bytes);
    peer.send_to(second->bound_port(), datagrams.front());  // replayed
    for (int turn = 0; turn < 20; ++turn) second->run_once(2);
    CHECK(second->counters().forged.load() == 1);
    CHECK(second->counters().replayed.load() == 1);
    CHECK(second->counters().events_received.load() >= 2);
    lab.run();
    CHECK(lab.totals().sync_installed == 1);
    CHECK(lab.totals().sync_refused == 0);

    // The backend's data comes back to the client from the VIP, as on the first instance.
    out = lab.exchange("server", {frame(segment(backend, 8080, pool, port, kAck, 7001, 1001, 10))}, "client");
    REQUIRE(out.size() == 1);
    const SeenFrame reply = read_frame(out[0]);
    CHECK(reply.src == vip);
    CHECK(reply.src_port == 80);
    CHECK(reply.dst == client);
    CHECK(reply.dst_port == 41000);
    CHECK(reply.checksums_ok);
    // The client's data goes on to the backend from the pool port: no loose pickup (a nat service never has it).
    out = lab.exchange("client", {frame(segment(client, 41000, vip, 80, kAck, 1001, 7011, 20))}, "server");
    REQUIRE(out.size() == 1);
    CHECK(read_frame(out[0]).src_port == port);
    CHECK(read_frame(out[0]).src == pool);
    // Strict window checking goes on: data far outside the window is dropped.
    CHECK(lab.exchange("client", {frame(segment(client, 41000, vip, 80, kAck, 1001 + 0x40000000, 7011, 20))}, "server")
              .empty());
    CHECK(lab.drops(DropReason::tcp_out_of_window) == 1);
    CHECK(lab.drops(DropReason::lb_nat_no_state) == 0);
    // The port is held on the worker that owns it: a new connection cannot take it.
    std::size_t held = 0;
    lab.dataplane().for_each_lcore([&](const LcoreContext& ctx) {
        if (ctx.nat_ports) held += ctx.nat_ports->in_use(0, 0);
    });
    CHECK(held == 1);
}

TEST_CASE("sync: a gap in a peer's sequence asks it for the missing datagrams", "[pipeline][sync]") {
    const std::string yaml = nat_config(write_key_file());
    PipelineLab lab(yaml);
    LoopbackPeer peer;
    auto channel = channel_for(lab, peer.port);
    const auto datagram = [](uint64_t sequence) {
        SyncDatagramWriter w(SyncHeader{SyncMessageType::events, 0, 9, 1234, sequence});
        const auto bytes = w.seal(kKey);
        return std::vector<uint8_t>(bytes.begin(), bytes.end());
    };
    peer.send_to(channel->bound_port(), datagram(1));
    peer.send_to(channel->bound_port(), datagram(4));
    for (int turn = 0; turn < 10; ++turn) channel->run_once(2);
    CHECK(channel->counters().gaps.load() == 1);
    bool asked = false;
    SyncDatagram d;
    for (const auto& bytes : peer.receive()) {
        REQUIRE(decode_sync_datagram(bytes, kKey, d) == SyncDecodeError::none);
        if (d.header.type != SyncMessageType::resend_request) continue;
        asked = true;
        CHECK(d.resend_first == 2);
        CHECK(d.resend_last == 3);
    }
    CHECK(asked);
    // The resent datagrams are taken; a second copy is a replay.
    peer.send_to(channel->bound_port(), datagram(2));
    peer.send_to(channel->bound_port(), datagram(3));
    peer.send_to(channel->bound_port(), datagram(3));
    for (int turn = 0; turn < 10; ++turn) channel->run_once(2);
    CHECK(channel->counters().datagrams_received.load() == 4);
    CHECK(channel->counters().replayed.load() == 1);
    const std::vector<SyncPeerStatus> peers = channel->peers();
    REQUIRE(peers.size() == 1);
    CHECK(peers[0].up);
    CHECK(peers[0].instance == 9);
    CHECK(peers[0].highest_sequence == 4);
}

TEST_CASE("sync: a peer's resend request is answered from the history", "[pipeline][sync]") {
    const std::string yaml = nat_config(write_key_file());
    PipelineLab lab(yaml);
    LoopbackPeer peer;
    auto channel = channel_for(lab, peer.port);
    lab.exchange("client", {frame(segment("203.0.113.7", 41000, "192.0.2.100", 80, kSyn, 1000, 0))}, "server");
    std::size_t events = 0;
    const auto sent = sent_events(*channel, peer, events);
    REQUIRE(events == 1);
    SyncDatagram d;
    REQUIRE(decode_sync_datagram(sent.back(), kKey, d) == SyncDecodeError::none);
    const uint64_t sequence = d.header.sequence;
    SyncDatagramWriter request(SyncHeader{SyncMessageType::resend_request, 0, 9, 1234, 0});
    request.set_resend_range(sequence, sequence);
    const auto bytes = request.seal(kKey);
    peer.send_to(channel->bound_port(), {bytes.begin(), bytes.end()});
    std::vector<std::vector<uint8_t>> again;
    for (int turn = 0; turn < 20 && again.empty(); ++turn) {
        channel->run_once(2);
        for (auto& b : peer.receive())
            if (b == sent.back()) again.push_back(b);
    }
    CHECK(again.size() == 1);
    CHECK(channel->counters().resent.load() == 1);
}

namespace {

std::vector<uint8_t> sealed(SyncMessageType type, uint64_t epoch, uint64_t sequence) {
    SyncDatagramWriter w(SyncHeader{type, 0, 9, epoch, sequence});
    const auto bytes = w.seal(kKey);
    return {bytes.begin(), bytes.end()};
}

// The datagrams of one type the peer holds now, decoded.
std::vector<SyncDatagram> received_of(LoopbackPeer& peer, SyncMessageType type) {
    std::vector<SyncDatagram> out;
    SyncDatagram d;
    for (const auto& bytes : peer.receive()) {
        REQUIRE(decode_sync_datagram(bytes, kKey, d) == SyncDecodeError::none);
        if (d.header.type == type) out.push_back(d);
    }
    return out;
}

}  // namespace

TEST_CASE("sync: a start waits for the peer's resync until its last datagram is here", "[pipeline][sync]") {
    const std::string yaml = nat_config(write_key_file());
    PipelineLab lab(yaml);
    LoopbackPeer peer;
    auto channel = channel_for(lab, peer.port);
    CHECK_FALSE(channel->resync_pending());
    channel->ask_peers_for_resync();
    CHECK(channel->resync_pending());
    CHECK(received_of(peer, SyncMessageType::resync_request).size() == 1);
    REQUIRE(channel->peers().at(0).resync_pending);

    // The dump's second datagram is late: resync_done naming it does not end the wait; its arrival does.
    peer.send_to(channel->bound_port(), sealed(SyncMessageType::events, 1234, 1));
    peer.send_to(channel->bound_port(), sealed(SyncMessageType::resync_done, 1234, 2));
    for (int turn = 0; turn < 10; ++turn) channel->run_once(2);
    CHECK(channel->resync_pending());
    CHECK(channel->counters().resyncs_completed.load() == 0);
    peer.send_to(channel->bound_port(), sealed(SyncMessageType::events, 1234, 2));
    for (int turn = 0; turn < 10 && channel->resync_pending(); ++turn) channel->run_once(2);
    CHECK_FALSE(channel->resync_pending());
    CHECK(channel->counters().resyncs_completed.load() == 1);
    CHECK(channel->counters().resyncs_timed_out.load() == 0);
    CHECK_FALSE(channel->peers().at(0).resync_pending);
}

TEST_CASE("sync: a start does not wait for a silent peer past resync_silence_ms", "[pipeline][sync]") {
    const std::string yaml = nat_config(write_key_file());
    PipelineLab lab(yaml);
    LoopbackPeer peer;
    SyncChannelSettings settings{loopback_sync_address(0), {loopback_sync_address(peer.port)}, kKey, 7};
    settings.resync_silence_ms = 100;
    SyncChannel channel(settings, lab.dataplane().sync_event_rings(), lab.dataplane().sync_apply_rings(), nullptr);
    const auto began = std::chrono::steady_clock::now();  // before the request: it starts the silence timer
    channel.ask_peers_for_resync();
    while (channel.resync_pending() && std::chrono::steady_clock::now() - began < std::chrono::seconds(2))
        channel.run_once(5);
    const auto waited = std::chrono::steady_clock::now() - began;
    CHECK_FALSE(channel.resync_pending());
    CHECK(waited >= std::chrono::milliseconds(99));  // the channel's clock counts whole milliseconds
    CHECK(channel.counters().resyncs_timed_out.load() == 1);
    CHECK(channel.counters().resyncs_completed.load() == 0);
}

TEST_CASE("sync: a peer's resync request is answered by the dump and then resync_done", "[pipeline][sync]") {
    const std::string yaml = nat_config(write_key_file());
    PipelineLab lab(yaml);
    LoopbackPeer peer;
    bool asked = false;
    SyncChannelSettings settings{loopback_sync_address(0), {loopback_sync_address(peer.port)}, kKey, 7};
    SyncChannel channel(settings, lab.dataplane().sync_event_rings(), lab.dataplane().sync_apply_rings(),
                        [&asked] { asked = true; });
    peer.send_to(channel.bound_port(), sealed(SyncMessageType::resync_request, 1234, 0));
    for (int turn = 0; turn < 10 && !asked; ++turn) channel.run_once(2);
    REQUIRE(asked);
    // The daemon's dump: every worker queues its connections (here the one a SYN opens), then says it is done.
    channel.dump_starting();
    lab.exchange("client", {frame(segment("203.0.113.7", 41000, "192.0.2.100", 80, kSyn, 1000, 0))}, "server");
    for (int turn = 0; turn < 5; ++turn) channel.run_once(2);
    CHECK(received_of(peer, SyncMessageType::resync_done).empty());  // not finished yet
    channel.dump_finished();
    uint64_t last_events = 0;
    std::vector<SyncDatagram> done;
    for (int turn = 0; turn < 20 && done.empty(); ++turn) {
        channel.run_once(2);
        SyncDatagram d;
        for (const auto& bytes : peer.receive()) {
            REQUIRE(decode_sync_datagram(bytes, kKey, d) == SyncDecodeError::none);
            if (d.header.type == SyncMessageType::events) last_events = d.header.sequence;
            if (d.header.type == SyncMessageType::resync_done) done.push_back(d);
        }
    }
    REQUIRE(done.size() == 1);
    CHECK(last_events != 0);
    CHECK(done[0].header.sequence == last_events);  // the datagram with the dump's last event, or after it
    CHECK(done[0].header.epoch == channel.epoch());
    // Answered once: the next turns send no second resync_done.
    for (int turn = 0; turn < 5; ++turn) channel.run_once(2);
    CHECK(received_of(peer, SyncMessageType::resync_done).empty());
}

TEST_CASE("sync: a connection that times out is announced closed to the peers", "[pipeline][sync]") {
    std::string yaml = nat_config(write_key_file());
    const std::string strict = "  tcp_window_check: strict\n";
    yaml.replace(yaml.find(strict), strict.size(), strict + "  table_size: 1024\n");
    PipelineLab lab(yaml);
    LoopbackPeer peer;
    auto channel = channel_for(lab, peer.port);
    REQUIRE(lab.exchange("client", {frame(segment("203.0.113.7", 41000, "192.0.2.100", 80, kSyn, 1000, 0))}, "server")
                .size() == 1);
    std::size_t events = 0;
    const auto opening = sent_events(*channel, peer, events);
    REQUIRE(events == 1);  // opened
    SyncDatagram first;
    REQUIRE(decode_sync_datagram(opening.back(), kKey, first) == SyncDecodeError::none);
    const SyncEvent opened = first.events[first.header.count - 1];
    REQUIRE(opened.kind == SyncEventKind::opened);

    lab.advance_seconds(24 * 3600);                                                    // far past any state's timeout
    for (int turn = 0; turn < 200; ++turn) lab.dataplane().run_inline(lab.now_tsc());  // the sweep goes round
    CHECK(lab.totals().conn_expired == 1);
    const auto datagrams = sent_events(*channel, peer, events);
    REQUIRE(events == 1);
    SyncDatagram d;
    REQUIRE(decode_sync_datagram(datagrams.back(), kKey, d) == SyncDecodeError::none);
    const SyncEvent& closed = d.events[d.header.count - 1];
    CHECK(closed.kind == SyncEventKind::closed);
    CHECK(closed.tuple.src_port == htons(41000));  // the initiator's tuple, network order
    CHECK(closed.tuple.dst_port == htons(80));
    // The opened event took the SYN's tuple, the closed one read the key back from the table (the client is the
    // higher endpoint, so the key is the other way round): the same initiator's tuple.
    CHECK(opened.tuple == closed.tuple);
}

TEST_CASE("sync: a NAT connection's whole life is one event per state it goes through", "[pipeline][sync]") {
    std::string yaml = nat_config(write_key_file());
    const std::string strict = "  tcp_window_check: strict\n";
    yaml.replace(yaml.find(strict), strict.size(), strict + "  table_size: 1024\n");
    PipelineLab lab(yaml);
    const char *client = "203.0.113.7", *vip = "192.0.2.100", *backend = "10.1.0.11", *pool = "10.1.0.100";
    const auto to_backend = [&](uint8_t flags, uint32_t seq, uint32_t ack, std::size_t payload = 0) {
        return lab.exchange("client", {frame(segment(client, 41000, vip, 80, flags, seq, ack, payload))}, "server");
    };
    const std::vector<Bytes> syn = to_backend(kSyn, 1000, 0);
    REQUIRE(syn.size() == 1);
    const uint16_t port = read_frame(syn[0]).src_port;
    const auto to_client = [&](uint8_t flags, uint32_t seq, uint32_t ack, std::size_t payload = 0) {
        return lab.exchange("server", {frame(segment(backend, 8080, pool, port, flags, seq, ack, payload))}, "client");
    };
    REQUIRE(to_client(kSyn | kAck, 7000, 1001).size() == 1);
    REQUIRE(to_backend(kAck, 1001, 7001).size() == 1);
    for (uint32_t k = 0; k < 10; ++k) {  // data both ways: no state changes, no events
        REQUIRE(to_backend(kAck, 1001 + 100 * k, 7001 + 100 * k, 100).size() == 1);
        REQUIRE(to_client(kAck, 7001 + 100 * k, 1101 + 100 * k, 100).size() == 1);
    }
    REQUIRE(to_backend(kFin | kAck, 2001, 8001).size() == 1);
    REQUIRE(to_client(kFin | kAck, 8001, 2002).size() == 1);
    REQUIRE(to_backend(kAck, 2002, 8002).size() == 1);
    const uint64_t while_open = lab.totals().sync_events_queued;
    lab.advance_seconds(24 * 3600);
    for (int turn = 0; turn < 200; ++turn) lab.dataplane().run_inline(lab.now_tsc());
    CHECK(lab.totals().conn_expired == 1);
    // opened (syn_sent), syn_received, established, fin_wait, close_wait / last_ack, time_wait; then closed at its
    // expiry. Data in between changes no state and sends nothing (docs/benchmarks.md's bytes per connection).
    CHECK(while_open == 6);
    CHECK(lab.totals().sync_events_queued == while_open + 1);
}

#include "sync/sync_channel.hpp"

#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <netinet/in.h>
#include <poll.h>
#include <stdexcept>
#include <sys/socket.h>

#include <spdlog/spdlog.h>

#include "nat/nat_owner.hpp"

namespace sluice {
namespace {

constexpr unsigned kDrainBurst = 64;
// Events taken from each worker ring per turn at most: a dump from one worker does not starve the others.
constexpr unsigned kDrainPerRing = 1024;

uint64_t steady_ms() {
    return static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
            .count());
}

socklen_t to_sockaddr(const SyncAddress& a, sockaddr_storage& out) {
    std::memset(&out, 0, sizeof out);
    if (a.family == IpFamily::ipv4) {
        auto& sin = reinterpret_cast<sockaddr_in&>(out);
        sin.sin_family = AF_INET;
        sin.sin_port = htons(a.port);
        std::memcpy(&sin.sin_addr, a.address.bytes, 4);
        return sizeof sin;
    }
    auto& sin6 = reinterpret_cast<sockaddr_in6&>(out);
    sin6.sin6_family = AF_INET6;
    sin6.sin6_port = htons(a.port);
    std::memcpy(&sin6.sin6_addr, a.address.bytes, 16);
    return sizeof sin6;
}

}  // namespace

SyncChannel::SyncChannel(SyncChannelSettings settings, std::vector<rte_ring*> event_rings,
                         std::vector<rte_ring*> apply_rings, std::function<void()> request_resync)
    : settings_(std::move(settings)), event_rings_(std::move(event_rings)), apply_rings_(std::move(apply_rings)),
      request_resync_(std::move(request_resync)), pending_(SyncHeader{}), history_(kHistory) {
    if (settings_.key.size() < kSyncMinKeyBytes) throw std::runtime_error("sync: the key is too short");
    if (apply_rings_.empty() || apply_rings_.size() != event_rings_.size())
        throw std::runtime_error("sync: one event ring and one apply ring per worker are needed");
    epoch_ = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
            .count());
    const int family = settings_.listen.family == IpFamily::ipv4 ? AF_INET : AF_INET6;
    socket_.reset(::socket(family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!socket_.valid()) throw std::runtime_error(std::string("sync: socket: ") + std::strerror(errno));
    sockaddr_storage local;
    const socklen_t length = to_sockaddr(settings_.listen, local);
    if (::bind(socket_.get(), reinterpret_cast<const sockaddr*>(&local), length) != 0)
        throw std::runtime_error("sync: cannot bind " + settings_.listen.text + ": " + std::strerror(errno));
    sockaddr_storage bound{};
    socklen_t bound_length = sizeof bound;
    ::getsockname(socket_.get(), reinterpret_cast<sockaddr*>(&bound), &bound_length);
    bound_port_ = ntohs(family == AF_INET ? reinterpret_cast<sockaddr_in&>(bound).sin_port
                                          : reinterpret_cast<sockaddr_in6&>(bound).sin6_port);
    for (const SyncAddress& a : settings_.peers) peers_.push_back(Peer{a, {}, 0, 0});
    pending_ = SyncDatagramWriter(SyncHeader{SyncMessageType::events, 0, settings_.instance, epoch_, 0});
}

SyncChannel::~SyncChannel() { stop(); }

void SyncChannel::ask_peers_for_resync() {
    // Whatever peers hold of ours, and we of theirs, is older than this process: ask each for a full dump.
    const uint64_t now = steady_ms();
    std::lock_guard lock(peers_mutex_);
    for (Peer& peer : peers_) {
        send_request(peer, SyncMessageType::resync_request);
        counters_.resyncs_requested.fetch_add(1, std::memory_order_relaxed);
        peer.resync_asked_ms = now;
    }
    resync_pending_.store(!peers_.empty(), std::memory_order_release);
}

void SyncChannel::start() {
    ask_peers_for_resync();
    running_.store(true);
    thread_ = std::thread([this] {
        while (running_.load(std::memory_order_relaxed)) run_once(static_cast<int>(kFlushIntervalMs));
    });
}

void SyncChannel::stop() {
    running_.store(false);
    if (thread_.joinable()) thread_.join();
}

void SyncChannel::run_once(int timeout_ms) {
    pollfd fd{socket_.get(), POLLIN, 0};
    // An event waiting for company is sent within kFlushIntervalMs: wait no longer than that for datagrams.
    ::poll(&fd, 1, pending_.count() ? 0 : timeout_ms);
    const uint64_t now = steady_ms();
    receive(now);
    // Read before the rings are drained: once they are empty, every event the finished dump queued was taken.
    const uint64_t dumps_finished = dumps_finished_.load(std::memory_order_acquire);
    drain_events(now);
    if (dumps_finished) answer_dumps(dumps_finished, now);
    if (resync_pending_.load(std::memory_order_relaxed)) give_up_resyncs(now);
    if (pending_.count() && now - pending_since_ms_ >= kFlushIntervalMs) flush(now);
    if (now - last_sent_ms_ >= kKeepaliveIntervalMs) flush(now);  // an empty datagram: peers see us up
}

void SyncChannel::drain_events(uint64_t now_ms) {
    SyncEvent events[kDrainBurst];
    for (rte_ring* ring : event_rings_) {
        for (unsigned taken = 0; taken < kDrainPerRing;) {
            const unsigned n = rte_ring_sc_dequeue_burst_elem(ring, events, sizeof(SyncEvent), kDrainBurst, nullptr);
            if (n == 0) break;
            taken += n;
            for (unsigned k = 0; k < n; ++k) {
                if (pending_.count() == 0) pending_since_ms_ = now_ms;
                pending_.add(events[k]);
                if (pending_.full()) flush(now_ms);
            }
        }
    }
}

void SyncChannel::flush(uint64_t now_ms) {
    const uint64_t sequence = next_sequence_++;
    const uint16_t count = pending_.count();
    pending_.set_sequence(sequence);
    const std::span<const uint8_t> bytes = pending_.seal(settings_.key);
    Sent& slot = history_[sequence % kHistory];
    slot.sequence = sequence;
    slot.bytes.assign(bytes.begin(), bytes.end());
    send_to_all(slot.bytes);
    pending_ = SyncDatagramWriter(SyncHeader{SyncMessageType::events, 0, settings_.instance, epoch_, 0});
    counters_.events_sent.fetch_add(count, std::memory_order_relaxed);
    last_sent_ms_ = now_ms;
}

void SyncChannel::send_to_all(std::span<const uint8_t> bytes) {
    for (const Peer& peer : peers_) send_to(peer, bytes);
}

void SyncChannel::send_to(const Peer& peer, std::span<const uint8_t> bytes) {
    sockaddr_storage to;
    const socklen_t length = to_sockaddr(peer.address, to);
    // A full socket buffer or an unreachable peer loses the datagram: the receiver's gap detection asks again.
    if (::sendto(socket_.get(), bytes.data(), bytes.size(), 0, reinterpret_cast<const sockaddr*>(&to), length) >= 0)
        counters_.datagrams_sent.fetch_add(1, std::memory_order_relaxed);
}

void SyncChannel::send_request(Peer& peer, SyncMessageType type, uint64_t first, uint64_t last) {
    SyncDatagramWriter writer(SyncHeader{type, 0, settings_.instance, epoch_, 0});
    if (type == SyncMessageType::resend_request) writer.set_resend_range(first, last);
    send_to(peer, writer.seal(settings_.key));
}

// Peers whose resync the finished dump answers are told so once its events are all sent: the event rings are empty
// (the dump's events were queued before it finished) and the datagram being filled goes out first.
void SyncChannel::answer_dumps(uint64_t finished, uint64_t now_ms) {
    const auto answered = [finished](const Peer& p) { return p.dump_wanted != 0 && p.dump_wanted <= finished; };
    if (std::none_of(peers_.begin(), peers_.end(), answered)) return;
    for (rte_ring* ring : event_rings_)
        if (!rte_ring_empty(ring)) return;
    flush(now_ms);  // also when empty: resync_done names a sequence the peer can wait for
    const uint64_t last = next_sequence_ - 1;
    for (Peer& peer : peers_) {
        if (!answered(peer)) continue;
        peer.dump_wanted = 0;
        SyncDatagramWriter writer(SyncHeader{SyncMessageType::resync_done, 0, settings_.instance, epoch_, last});
        send_to(peer, writer.seal(settings_.key));
    }
}

// A peer's dump is complete once its resync_done came and the datagrams up to the one it names are here.
void SyncChannel::settle_resync(Peer& peer, uint64_t now_ms) {
    if (peer.resync_asked_ms == 0 || peer.done_sequence == 0 || peer.done_epoch != peer.window.epoch() ||
        peer.window.highest() < peer.done_sequence)
        return;
    counters_.resyncs_completed.fetch_add(1, std::memory_order_relaxed);
    spdlog::info("sync: resync from {} done in {} ms", peer.address.text, now_ms - peer.resync_asked_ms);
    end_resync(peer);
}

// A peer silent since the request is down (nothing to learn from it); one that never finishes is not waited for.
void SyncChannel::give_up_resyncs(uint64_t now_ms) {
    for (Peer& peer : peers_) {
        if (peer.resync_asked_ms == 0) continue;
        const uint64_t heard = std::max(peer.resync_asked_ms, peer.last_heard_ms);
        const bool silent = now_ms - heard >= settings_.resync_silence_ms;
        if (!silent && now_ms - peer.resync_asked_ms < settings_.resync_timeout_ms) continue;
        counters_.resyncs_timed_out.fetch_add(1, std::memory_order_relaxed);
        if (silent)
            spdlog::warn("sync: no resync from {}: silent for {} ms (down?); going on without its connections",
                         peer.address.text, now_ms - heard);
        else
            spdlog::warn("sync: the resync from {} did not finish within {} ms; going on without the rest of it",
                         peer.address.text, settings_.resync_timeout_ms);
        end_resync(peer);
    }
}

void SyncChannel::end_resync(Peer& peer) {
    {
        std::lock_guard lock(peers_mutex_);
        peer.resync_asked_ms = 0;
    }
    const bool waiting = std::any_of(peers_.begin(), peers_.end(), [](const Peer& p) { return p.resync_asked_ms; });
    if (!waiting) resync_pending_.store(false, std::memory_order_release);
}

SyncChannel::Peer* SyncChannel::peer_at(const void* from) {
    const auto* sa = static_cast<const sockaddr*>(from);
    for (Peer& peer : peers_) {
        const SyncAddress& a = peer.address;
        if (sa->sa_family == AF_INET && a.family == IpFamily::ipv4) {
            const auto* sin = static_cast<const sockaddr_in*>(from);
            if (std::memcmp(&sin->sin_addr, a.address.bytes, 4) == 0 && ntohs(sin->sin_port) == a.port) return &peer;
        } else if (sa->sa_family == AF_INET6 && a.family == IpFamily::ipv6) {
            const auto* sin6 = static_cast<const sockaddr_in6*>(from);
            if (std::memcmp(&sin6->sin6_addr, a.address.bytes, 16) == 0 && ntohs(sin6->sin6_port) == a.port)
                return &peer;
        }
    }
    return nullptr;
}

void SyncChannel::receive(uint64_t now_ms) {
    uint8_t buffer[kSyncMaxDatagram + 1];
    for (;;) {
        sockaddr_storage from{};
        socklen_t from_length = sizeof from;
        const ssize_t n =
            ::recvfrom(socket_.get(), buffer, sizeof buffer, 0, reinterpret_cast<sockaddr*>(&from), &from_length);
        if (n < 0) return;  // EAGAIN: nothing more for now
        Peer* peer = peer_at(&from);
        if (!peer) {
            counters_.unknown_source.fetch_add(1, std::memory_order_relaxed);
            continue;
        }
        switch (decode_sync_datagram({buffer, static_cast<std::size_t>(n)}, settings_.key, scratch_)) {
        case SyncDecodeError::none: break;
        case SyncDecodeError::truncated: counters_.truncated.fetch_add(1, std::memory_order_relaxed); continue;
        case SyncDecodeError::malformed: counters_.malformed.fetch_add(1, std::memory_order_relaxed); continue;
        case SyncDecodeError::forged: counters_.forged.fetch_add(1, std::memory_order_relaxed); continue;
        }
        const SyncHeader& h = scratch_.header;
        if (h.type == SyncMessageType::resend_request) {
            for (uint64_t s = scratch_.resend_first; s <= scratch_.resend_last; ++s) {
                const Sent& sent = history_[s % kHistory];
                if (sent.sequence != s) {
                    counters_.resend_missed.fetch_add(1, std::memory_order_relaxed);
                    continue;
                }
                send_to(*peer, sent.bytes);
                counters_.resent.fetch_add(1, std::memory_order_relaxed);
            }
            continue;
        }
        if (h.type == SyncMessageType::resync_request) {
            counters_.resyncs_served.fetch_add(1, std::memory_order_relaxed);
            peer->dump_wanted = dumps_started_.load(std::memory_order_acquire) + 1;  // the next dump to start
            if (request_resync_) request_resync_();
            continue;
        }
        if (h.type == SyncMessageType::resync_done) {
            peer->done_epoch = h.epoch;
            peer->done_sequence = h.sequence;
            settle_resync(*peer, now_ms);
            continue;
        }
        uint64_t gap_first, gap_last;
        {
            std::lock_guard lock(peers_mutex_);
            if (peer->window.accept(h.epoch, h.sequence, gap_first, gap_last) == ReplayWindow::Verdict::replayed) {
                counters_.replayed.fetch_add(1, std::memory_order_relaxed);
                continue;
            }
            peer->instance = h.instance;
            peer->last_heard_ms = now_ms;
        }
        counters_.datagrams_received.fetch_add(1, std::memory_order_relaxed);
        // A peer we hear from mid-stream (it started before us, or we missed its start): its table in full. Also
        // one that started after our start's request (it never got it) while we still wait for its dump.
        const bool missed_our_request = peer->resync_asked_ms != 0 && h.epoch >= epoch_;
        if (peer->window.take_new_epoch() && (h.sequence != 1 || missed_our_request)) {
            send_request(*peer, SyncMessageType::resync_request);
            counters_.resyncs_requested.fetch_add(1, std::memory_order_relaxed);
        }
        if (gap_first <= gap_last) {
            counters_.gaps.fetch_add(1, std::memory_order_relaxed);
            send_request(*peer, SyncMessageType::resend_request, gap_first, gap_last);
        }
        take(*peer, scratch_);
        settle_resync(*peer, now_ms);
    }
}

uint16_t SyncChannel::owner_of(const SyncEvent& event) const {
    const auto workers = static_cast<uint16_t>(apply_rings_.size());
    if (event.nat_port != 0) return nat_port_owner(event.nat_port, workers);
    return worker_for_hash(symmetric_flow_hash(event.tuple), workers);
}

void SyncChannel::take(Peer& /*peer*/, SyncDatagram& d) {
    for (uint16_t i = 0; i < d.header.count; ++i) {
        SyncEvent& event = d.events[i];  // (the ring's prototype takes no const)
        if (rte_ring_sp_enqueue_elem(apply_rings_[owner_of(event)], &event, sizeof event) != 0) {
            counters_.apply_dropped.fetch_add(1, std::memory_order_relaxed);
            continue;
        }
        counters_.events_received.fetch_add(1, std::memory_order_relaxed);
    }
}

std::vector<SyncPeerStatus> SyncChannel::peers() const {
    const uint64_t now = steady_ms();
    std::vector<SyncPeerStatus> out;
    std::lock_guard lock(peers_mutex_);
    for (const Peer& p : peers_) {
        SyncPeerStatus s;
        s.address = p.address.text;
        s.up = p.last_heard_ms != 0 && now - p.last_heard_ms < kPeerTimeoutMs;
        s.silence_seconds = p.last_heard_ms == 0 ? -1.0 : static_cast<double>(now - p.last_heard_ms) / 1000.0;
        s.instance = p.instance;
        s.epoch = p.window.epoch();
        s.highest_sequence = p.window.highest();
        s.resync_pending = p.resync_asked_ms != 0;
        out.push_back(s);
    }
    return out;
}

}  // namespace sluice

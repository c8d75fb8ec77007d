// The sync thread (docs/operations/ha.md): a plain std::thread on the control side that drains every
// worker's event ring, batches the events into authenticated datagrams (sync_wire.hpp) sent over UDP to each
// peer, and hands what peers send to the owning worker's apply ring (the worker that owns the NAT port, or the
// flow's worker by its symmetric hash, as the RX lcores choose). Reliability in the spirit of conntrackd's FTFW:
// a sequence number per sender, a receiver that asks for the datagrams a gap skipped (the sender keeps the last
// kHistory), and a full resync (every worker's table, paced) asked for when a peer starts or comes back. The dump
// ends with a resync_done naming its last datagram; until every peer's has come (or the peer stayed silent, or the
// dump overran its timeout) resync_pending() holds, and the daemon announces no VIP over BGP.
// Threads: construction, start, stop and the accessors from the control thread; the loop on its own thread. The
// rings are the workers' SP/SC rings: the sync thread is their only consumer (events) and producer (apply).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <rte_ring.h>

#include "common/five_tuple.hpp"
#include "common/unique_fd.hpp"
#include "sync/sync_wire.hpp"

namespace sluice {

struct SyncAddress {
    IpAddress address;
    IpFamily family = IpFamily::none;
    uint16_t port = 0;  // host order
    std::string text;
};

struct SyncChannelSettings {
    SyncAddress listen;
    std::vector<SyncAddress> peers;
    std::string key;
    uint32_t instance = 0;  // this instance's id in the header (for logs and sluicectl)
    // How long a start waits for a peer's resync: a peer that sends nothing for resync_silence_ms is taken as down;
    // one that answers but does not finish its dump within resync_timeout_ms is given up on.
    uint64_t resync_silence_ms = 3000;
    uint64_t resync_timeout_ms = 60000;
};

// Everything the channel counted; any thread reads (relaxed).
#define SLUICE_SYNC_COUNTERS(X)                                                                                        \
    X(datagrams_sent, "sluice_sync_datagrams_sent_total",                                                              \
      "Sync datagrams sent to peers (events, keepalives, "                                                             \
      "requests, resends), one per peer")                                                                              \
    X(events_sent, "sluice_sync_events_sent_total", "Connection events sent to peers, counted once per event")         \
    X(datagrams_received, "sluice_sync_datagrams_received_total", "Authenticated sync datagrams taken from peers")     \
    X(events_received, "sluice_sync_events_received_total",                                                            \
      "Connection events received from peers and handed to "                                                           \
      "their worker")                                                                                                  \
    X(apply_dropped, "sluice_sync_apply_dropped_total",                                                                \
      "Peers' events dropped: the owning worker's apply ring was full")                                                \
    X(resent, "sluice_sync_datagrams_resent_total", "Datagrams sent again because a peer saw a gap")                   \
    X(resend_missed, "sluice_sync_resend_missed_total",                                                                \
      "Datagrams a peer asked for that had left the history "                                                          \
      "(the peer's resync covers them)")                                                                               \
    X(gaps, "sluice_sync_gaps_total", "Sequence gaps seen in a peer's datagrams (a resend was asked for)")             \
    X(forged, "sluice_sync_forged_total", "Sync datagrams whose MAC did not match the key: dropped")                   \
    X(replayed, "sluice_sync_replayed_total", "Authenticated sync datagrams seen before, or of an old epoch: dropped") \
    X(malformed, "sluice_sync_malformed_total", "Authenticated sync datagrams with bad fields: dropped")               \
    X(truncated, "sluice_sync_truncated_total", "Sync datagrams shorter than their header, MAC and body: dropped")     \
    X(unknown_source, "sluice_sync_unknown_source_total", "Sync datagrams from an address that is no peer: dropped")   \
    X(resyncs_requested, "sluice_sync_resyncs_requested_total", "Full resyncs this instance asked peers for")          \
    X(resyncs_served, "sluice_sync_resyncs_served_total", "Full resyncs peers asked this instance for")                \
    X(resyncs_completed, "sluice_sync_resyncs_completed_total",                                                        \
      "Full resyncs a peer sent whole (its resync_done came and every datagram before it)")                            \
    X(resyncs_timed_out, "sluice_sync_resyncs_timed_out_total",                                                        \
      "Resyncs given up at start: the peer stayed silent, or its dump did not end in time (VIPs announced without "    \
      "it)")

struct SyncCounters {
#define SLUICE_SYNC_COUNTER_MEMBER(member, family, help) std::atomic<uint64_t> member = 0;
    SLUICE_SYNC_COUNTERS(SLUICE_SYNC_COUNTER_MEMBER)
#undef SLUICE_SYNC_COUNTER_MEMBER
};

// What sluicectl sync and the metrics show of one peer.
struct SyncPeerStatus {
    std::string address;
    bool up = false;              // a valid datagram came within kPeerTimeout
    double silence_seconds = -1;  // since its last valid datagram (-1: never)
    uint32_t instance = 0;
    uint64_t epoch = 0;
    uint64_t highest_sequence = 0;
    bool resync_pending = false;  // this instance waits for the peer's dump
};

class SyncChannel {
public:
    static constexpr std::size_t kHistory = 4096;    // datagrams kept for resends
    static constexpr uint64_t kFlushIntervalMs = 1;  // events wait at most this long for a full datagram
    static constexpr uint64_t kKeepaliveIntervalMs = 1000;
    static constexpr uint64_t kPeerTimeoutMs = 3000;

    // Binds the listen socket; throws std::runtime_error when it cannot. event_rings[w] / apply_rings[w]: worker
    // w's rings. request_resync: called on the sync thread when a peer asks for a full dump (the daemon starts
    // one on its control thread: the dump fills event_rings, which only this thread drains).
    SyncChannel(SyncChannelSettings settings, std::vector<rte_ring*> event_rings, std::vector<rte_ring*> apply_rings,
                std::function<void()> request_resync);
    ~SyncChannel();
    SyncChannel(const SyncChannel&) = delete;
    SyncChannel& operator=(const SyncChannel&) = delete;

    // Asks every peer for a full resync (resync_pending() until every one is in or given up on), then starts the
    // thread.
    void start();
    void stop();
    // start()'s first step, apart for tests that drive run_once themselves.
    void ask_peers_for_resync();
    // One turn of the loop, waiting at most timeout_ms for a datagram (the thread's body; tests call it directly).
    void run_once(int timeout_ms);

    // True from the start until every peer's resync arrived whole or was given up on (any thread).
    bool resync_pending() const { return resync_pending_.load(std::memory_order_acquire); }
    // The dump a peer's request asked for (the daemon's walk of every table into the event rings), control thread:
    // dump_starting() before the walk, dump_finished() once every worker has queued its connections. Peers whose
    // request came before dump_starting() are told resync_done once the sync thread has sent what was queued.
    void dump_starting() { dumps_started_.fetch_add(1, std::memory_order_acq_rel); }
    void dump_finished() {
        dumps_finished_.store(dumps_started_.load(std::memory_order_relaxed), std::memory_order_release);
    }

    const SyncCounters& counters() const { return counters_; }
    std::vector<SyncPeerStatus> peers() const;
    uint64_t epoch() const { return epoch_; }
    // The port the socket is bound to (the listen port, or the kernel's choice for port 0 in tests).
    uint16_t bound_port() const { return bound_port_; }

private:
    struct Peer {
        SyncAddress address;
        ReplayWindow window;
        uint32_t instance = 0;
        uint64_t last_heard_ms = 0;                  // 0: never
        uint64_t resync_asked_ms = 0;                // waiting for its dump since (0: not waiting)
        uint64_t done_epoch = 0, done_sequence = 0;  // its resync_done: complete once that sequence is here
        uint64_t dump_wanted = 0;                    // the dump (dumps_started_ count) that answers its request
    };
    struct Sent {
        uint64_t sequence = 0;
        std::vector<uint8_t> bytes;
    };

    void drain_events(uint64_t now_ms);
    void flush(uint64_t now_ms);
    void send_to_all(std::span<const uint8_t> bytes);
    void send_to(const Peer& peer, std::span<const uint8_t> bytes);
    void send_request(Peer& peer, SyncMessageType type, uint64_t first = 0, uint64_t last = 0);
    void answer_dumps(uint64_t finished, uint64_t now_ms);
    void settle_resync(Peer& peer, uint64_t now_ms);
    void give_up_resyncs(uint64_t now_ms);
    void end_resync(Peer& peer);
    void receive(uint64_t now_ms);
    void take(Peer& peer, SyncDatagram& d);
    uint16_t owner_of(const SyncEvent& event) const;
    Peer* peer_at(const void* sockaddr);

    SyncChannelSettings settings_;
    std::vector<rte_ring*> event_rings_, apply_rings_;
    std::function<void()> request_resync_;
    UniqueFd socket_;
    uint16_t bound_port_ = 0;
    uint64_t epoch_ = 0;
    uint64_t next_sequence_ = 1;
    SyncDatagramWriter pending_;
    uint64_t pending_since_ms_ = 0;
    uint64_t last_sent_ms_ = 0;
    std::vector<Sent> history_;       // kHistory slots, by sequence % kHistory
    mutable std::mutex peers_mutex_;  // peers_' status fields against peers()
    std::vector<Peer> peers_;
    SyncCounters counters_;
    std::atomic<bool> running_{false};
    std::atomic<bool> resync_pending_{false};
    std::atomic<uint64_t> dumps_started_{0}, dumps_finished_{0};
    std::thread thread_;
    SyncDatagram scratch_;
};

}  // namespace sluice

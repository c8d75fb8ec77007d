// The sync channel's datagrams (docs/operations/ha.md): a header naming the sender (instance id, epoch:
// its start, sequence number), a body, and an HMAC-SHA256 over both with the shared key. Every field in network
// order, so instances need not share a build, only this format's version. Pure: any thread, allocation-free
// except ReplayWindow's construction; control side only (the sync thread), never the fast path.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "sync/sync_event.hpp"

namespace sluice {

enum class SyncMessageType : uint8_t {
    events = 1,          // count events (0: a keepalive that still carries the sender's sequence)
    resend_request = 2,  // the receiver saw a gap: resend sequences [first, last]
    resync_request = 3,  // the receiver (re)started or saw the sender return: dump every connection
    resync_done = 4,     // the dump a resync request asked for is sent whole: its last datagram has this sequence
};

inline constexpr uint32_t kSyncMagic = 0x534c5359;  // "SLSY"
inline constexpr uint8_t kSyncVersion = 1;
inline constexpr std::size_t kSyncHeaderBytes = 28;
inline constexpr std::size_t kSyncMacBytes = 32;  // HMAC-SHA256
inline constexpr std::size_t kSyncEventBytes = 92;
inline constexpr std::size_t kSyncResendBytes = 16;
// One datagram stays under a 1500-byte link's MTU with IPv6 and UDP headers.
inline constexpr std::size_t kSyncMaxDatagram = 1400;
inline constexpr std::size_t kSyncMaxEvents = (kSyncMaxDatagram - kSyncHeaderBytes - kSyncMacBytes) / kSyncEventBytes;
// A key shorter than SHA-256's output would be the weak link of the MAC.
inline constexpr std::size_t kSyncMinKeyBytes = 32;

struct SyncHeader {
    SyncMessageType type = SyncMessageType::events;
    uint16_t count = 0;  // events in the body
    uint32_t instance = 0;
    uint64_t epoch = 0;     // the sender's start (ms since the Unix epoch): a restart starts a new sequence
    uint64_t sequence = 0;  // per sender and epoch, from 1; resend and resync requests carry 0
};

// A datagram being written: the header's fields, then events, then seal() appends the MAC.
class SyncDatagramWriter {
public:
    explicit SyncDatagramWriter(const SyncHeader& header) : header_(header) {}
    bool full() const { return header_.count == kSyncMaxEvents; }
    uint16_t count() const { return header_.count; }
    void set_sequence(uint64_t sequence) { header_.sequence = sequence; }
    // False (nothing written) when the datagram holds kSyncMaxEvents already.
    bool add(const SyncEvent& event);
    // A resend request's range.
    void set_resend_range(uint64_t first, uint64_t last);
    // Writes the header and the MAC; returns the datagram's bytes (valid until the writer changes).
    std::span<const uint8_t> seal(std::string_view key);

private:
    SyncHeader header_;
    std::size_t body_ = 0;  // bytes of body written after the header
    std::array<uint8_t, kSyncMaxDatagram> bytes_{};
};

enum class SyncDecodeError : uint8_t {
    none,
    truncated,  // shorter than its header, MAC and the body its count says
    malformed,  // not sluice's magic or version, an unknown type, a count over the limit, a bad field in an event
    forged,     // the MAC does not match: not from a holder of the key, or altered on the way
};

// A datagram checked and taken apart: header and, for events, the event records.
struct SyncDatagram {
    SyncHeader header;
    std::array<SyncEvent, kSyncMaxEvents> events;
    uint64_t resend_first = 0, resend_last = 0;
};

// Checks bytes' length, MAC (before any field is trusted) and fields, and decodes them into out.
SyncDecodeError decode_sync_datagram(std::span<const uint8_t> bytes, std::string_view key, SyncDatagram& out);

// Which sequence numbers of one sender were seen (IPsec's anti-replay window, RFC 4303 3.4.3, over a wider span so
// that resent datagrams from a gap are taken): a number at or below the highest minus the window's width, or seen
// once, is a replay. A new epoch from the sender (it restarted) starts it afresh; an older epoch is a replay.
class ReplayWindow {
public:
    static constexpr uint64_t kWidth = 4096;

    enum class Verdict : uint8_t { fresh, replayed };
    // Records (epoch, sequence) when it is fresh. gap_first/gap_last: the sequences a fresh one skipped over (none:
    // gap_first > gap_last), at most kWidth of them.
    Verdict accept(uint64_t epoch, uint64_t sequence, uint64_t& gap_first, uint64_t& gap_last);
    uint64_t epoch() const { return epoch_; }
    uint64_t highest() const { return highest_; }
    // The sender is new or restarted since the last accept: true once per epoch.
    bool take_new_epoch() {
        const bool was = new_epoch_;
        new_epoch_ = false;
        return was;
    }

private:
    bool seen(uint64_t sequence) const { return bits_[(sequence % kWidth) / 64] >> (sequence % 64) & 1; }
    void mark(uint64_t sequence) { bits_[(sequence % kWidth) / 64] |= uint64_t{1} << (sequence % 64); }
    void clear(uint64_t sequence) { bits_[(sequence % kWidth) / 64] &= ~(uint64_t{1} << (sequence % 64)); }

    uint64_t epoch_ = 0;
    uint64_t highest_ = 0;  // 0: nothing seen in this epoch
    bool new_epoch_ = false;
    std::array<uint64_t, kWidth / 64> bits_{};
};

// The HMAC-SHA256 of data under key (OpenSSL's libcrypto).
std::array<uint8_t, kSyncMacBytes> sync_mac(std::string_view key, std::span<const uint8_t> data);

}  // namespace sluice

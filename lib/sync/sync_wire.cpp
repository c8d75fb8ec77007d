#include "sync/sync_wire.hpp"

#include <algorithm>
#include <cstring>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

namespace sluice {
namespace {

// Big-endian writes and reads at a cursor; the caller checked the room.
struct Put {
    uint8_t* at;
    void u8(uint8_t v) { *at++ = v; }
    void u16(uint16_t v) {
        u8(static_cast<uint8_t>(v >> 8));
        u8(static_cast<uint8_t>(v));
    }
    void u32(uint32_t v) {
        u16(static_cast<uint16_t>(v >> 16));
        u16(static_cast<uint16_t>(v));
    }
    void u64(uint64_t v) {
        u32(static_cast<uint32_t>(v >> 32));
        u32(static_cast<uint32_t>(v));
    }
    void bytes(const uint8_t* p, std::size_t n) {
        std::memcpy(at, p, n);
        at += n;
    }
};

struct Get {
    const uint8_t* at;
    uint8_t u8() { return *at++; }
    uint16_t u16() {
        const uint16_t hi = u8();
        return static_cast<uint16_t>(hi << 8 | u8());
    }
    uint32_t u32() {
        const uint32_t hi = u16();
        return hi << 16 | u16();
    }
    uint64_t u64() {
        const uint64_t hi = u32();
        return hi << 32 | u32();
    }
    void bytes(uint8_t* p, std::size_t n) {
        std::memcpy(p, at, n);
        at += n;
    }
};

void put_event(Put& p, const SyncEvent& e) {
    p.u8(static_cast<uint8_t>(e.tuple.family));
    p.u8(e.tuple.proto);
    p.bytes(e.tuple.src.bytes, 16);
    p.bytes(e.tuple.dst.bytes, 16);
    p.u16(e.tuple.src_port);
    p.u16(e.tuple.dst_port);
    p.u8(static_cast<uint8_t>(e.kind));
    p.u8(static_cast<uint8_t>(e.state));
    p.u8(e.flags);
    p.u8(e.nat_address);
    p.u32(e.rule_index);
    p.u32(e.backend);
    p.u32(e.seq_shift);
    p.u32(e.lifetime_s);
    p.u16(e.nat_port);
    p.u16(e.in_port);
    for (int side = 0; side < 2; ++side) {
        p.u32(e.window.side[side].end);
        p.u32(e.window.side[side].maxend);
        p.u32(tcp_window_maxwin(e.window, side));
    }
    p.u8(tcp_window_scale_of(e.window, 0));
    p.u8(tcp_window_scale_of(e.window, 1));
    p.u8(tcp_window_side_flags(e.window, 0) & kWindowSideLearned);
    p.u8(tcp_window_side_flags(e.window, 1) & kWindowSideLearned);
    p.u8(static_cast<uint8_t>(tcp_window_check_of(e.window)));
    p.u8(0);
}

// False when a field holds what no sender writes (the MAC was good: a sender of another version, or a bug).
bool get_event(Get& g, SyncEvent& e) {
    e = SyncEvent{};
    const uint8_t family = g.u8();
    e.tuple.family = static_cast<IpFamily>(family);
    e.tuple.proto = g.u8();
    g.bytes(e.tuple.src.bytes, 16);
    g.bytes(e.tuple.dst.bytes, 16);
    e.tuple.src_port = g.u16();
    e.tuple.dst_port = g.u16();
    const uint8_t kind = g.u8();
    const uint8_t state = g.u8();
    e.kind = static_cast<SyncEventKind>(kind);
    e.state = static_cast<ConnState>(state);
    e.flags = g.u8() & kSyncedFlags;
    e.nat_address = g.u8();
    e.rule_index = g.u32();
    e.backend = g.u32();
    e.seq_shift = g.u32();
    e.lifetime_s = g.u32();
    e.nat_port = g.u16();
    e.in_port = g.u16();
    for (int side = 0; side < 2; ++side) {
        e.window.side[side].end = g.u32();
        e.window.side[side].maxend = g.u32();
        set_tcp_window_maxwin(e.window, side, g.u32());
    }
    const uint8_t scales[2] = {g.u8(), g.u8()};
    for (int side = 0; side < 2; ++side) {
        set_tcp_window_scale(e.window, side, scales[side]);
        set_tcp_window_side_flags(e.window, side, g.u8() & kWindowSideLearned);
    }
    const uint8_t check = g.u8();
    set_tcp_window_check(e.window, static_cast<TcpWindowCheck>(check & 3));
    g.u8();
    if (family != static_cast<uint8_t>(IpFamily::ipv4) && family != static_cast<uint8_t>(IpFamily::ipv6)) return false;
    if (family == static_cast<uint8_t>(IpFamily::ipv4)) {
        // An IPv4 address is its first word only (FiveTuple's convention): the rest must be zero.
        const IpAddress& s = e.tuple.src;
        const IpAddress& d = e.tuple.dst;
        if (s.words[1] | s.words[2] | s.words[3] | d.words[1] | d.words[2] | d.words[3]) return false;
    }
    return kind < static_cast<uint8_t>(SyncEventKind::count) && state < static_cast<uint8_t>(ConnState::count) &&
           check <= static_cast<uint8_t>(TcpWindowCheck::off) && scales[0] <= 14 && scales[1] <= 14;
}

}  // namespace

std::array<uint8_t, kSyncMacBytes> sync_mac(std::string_view key, std::span<const uint8_t> data) {
    std::array<uint8_t, kSyncMacBytes> mac{};
    unsigned length = 0;
    HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), data.data(), data.size(), mac.data(), &length);
    return mac;
}

bool SyncDatagramWriter::add(const SyncEvent& event) {
    if (full()) return false;
    Put p{bytes_.data() + kSyncHeaderBytes + body_};
    put_event(p, event);
    body_ += kSyncEventBytes;
    ++header_.count;
    return true;
}

void SyncDatagramWriter::set_resend_range(uint64_t first, uint64_t last) {
    Put p{bytes_.data() + kSyncHeaderBytes};
    p.u64(first);
    p.u64(last);
    body_ = kSyncResendBytes;
}

std::span<const uint8_t> SyncDatagramWriter::seal(std::string_view key) {
    Put p{bytes_.data()};
    p.u32(kSyncMagic);
    p.u8(kSyncVersion);
    p.u8(static_cast<uint8_t>(header_.type));
    p.u16(header_.count);
    p.u32(header_.instance);
    p.u64(header_.epoch);
    p.u64(header_.sequence);
    const std::size_t signed_bytes = kSyncHeaderBytes + body_;
    const auto mac = sync_mac(key, {bytes_.data(), signed_bytes});
    std::copy(mac.begin(), mac.end(), bytes_.begin() + static_cast<std::ptrdiff_t>(signed_bytes));
    return {bytes_.data(), signed_bytes + kSyncMacBytes};
}

SyncDecodeError decode_sync_datagram(std::span<const uint8_t> bytes, std::string_view key, SyncDatagram& out) {
    if (bytes.size() < kSyncHeaderBytes + kSyncMacBytes) return SyncDecodeError::truncated;
    const std::size_t signed_bytes = bytes.size() - kSyncMacBytes;
    const auto mac = sync_mac(key, bytes.first(signed_bytes));
    if (CRYPTO_memcmp(mac.data(), bytes.data() + signed_bytes, kSyncMacBytes) != 0) return SyncDecodeError::forged;
    Get g{bytes.data()};
    if (g.u32() != kSyncMagic || g.u8() != kSyncVersion) return SyncDecodeError::malformed;
    const uint8_t type = g.u8();
    SyncHeader& h = out.header;
    h.count = g.u16();
    h.instance = g.u32();
    h.epoch = g.u64();
    h.sequence = g.u64();
    const std::size_t body = signed_bytes - kSyncHeaderBytes;
    switch (type) {
    case static_cast<uint8_t>(SyncMessageType::events):
        h.type = SyncMessageType::events;
        if (h.count > kSyncMaxEvents || h.sequence == 0) return SyncDecodeError::malformed;
        if (body != h.count * kSyncEventBytes)
            return body < h.count * kSyncEventBytes ? SyncDecodeError::truncated : SyncDecodeError::malformed;
        for (uint16_t i = 0; i < h.count; ++i)
            if (!get_event(g, out.events[i])) return SyncDecodeError::malformed;
        return SyncDecodeError::none;
    case static_cast<uint8_t>(SyncMessageType::resend_request):
        h.type = SyncMessageType::resend_request;
        if (body != kSyncResendBytes)
            return body < kSyncResendBytes ? SyncDecodeError::truncated : SyncDecodeError::malformed;
        out.resend_first = g.u64();
        out.resend_last = g.u64();
        if (h.count != 0 || out.resend_first == 0 || out.resend_first > out.resend_last)
            return SyncDecodeError::malformed;
        return SyncDecodeError::none;
    case static_cast<uint8_t>(SyncMessageType::resync_request):
        h.type = SyncMessageType::resync_request;
        return body == 0 && h.count == 0 ? SyncDecodeError::none : SyncDecodeError::malformed;
    case static_cast<uint8_t>(SyncMessageType::resync_done):
        h.type = SyncMessageType::resync_done;
        return body == 0 && h.count == 0 && h.sequence != 0 ? SyncDecodeError::none : SyncDecodeError::malformed;
    default: return SyncDecodeError::malformed;
    }
}

ReplayWindow::Verdict ReplayWindow::accept(uint64_t epoch, uint64_t sequence, uint64_t& gap_first, uint64_t& gap_last) {
    gap_first = 1;
    gap_last = 0;
    if (sequence == 0 || epoch < epoch_) return Verdict::replayed;
    bool first = false;
    if (epoch > epoch_) {
        epoch_ = epoch;
        highest_ = 0;
        bits_.fill(0);
        new_epoch_ = true;
        first = true;
    }
    if (sequence > highest_) {
        if (!first && sequence > highest_ + 1) {
            gap_first = std::max(highest_ + 1, sequence > kWidth ? sequence - kWidth + 1 : 1);
            gap_last = sequence - 1;
        }
        if (sequence - highest_ >= kWidth) bits_.fill(0);
        else
            for (uint64_t s = highest_ + 1; s <= sequence; ++s) clear(s);
        mark(sequence);
        highest_ = sequence;
        return Verdict::fresh;
    }
    if (highest_ - sequence >= kWidth || seen(sequence)) return Verdict::replayed;
    mark(sequence);
    return Verdict::fresh;
}

}  // namespace sluice

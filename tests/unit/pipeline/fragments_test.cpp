// The RX lcore's fragment tracker (lib/pipeline/fragments.hpp) through the whole data path: duplicates, atomic
// fragments, and the per-source bound and expiry that keep a flood from a few sources from blocking everyone.
#include <catch2/catch.hpp>

#include <string>

#include "pipeline/fragments.hpp"
#include "pipeline/pipeline_lab.hpp"

using namespace sluice;
using namespace sluice::test;

namespace {

// DNS from the outside is allowed, everything else denied: a fragment given the wrong ports is refused.
const char* kDnsOnlyConfig = R"(
ports:
  - {name: lan, device: ring_lan}
  - {name: wan, device: ring_wan}
lcores: [{id: 1, roles: [rx, worker]}]
forward:
  - {from: lan, to: wan, next_hop_mac: "02:00:00:00:00:0b"}
  - {from: wan, to: lan, next_hop_mac: "02:00:00:00:00:0a"}
firewall:
  default: deny
  rules:
    - {name: dns, in_ports: [wan], protocol: udp, destination_ports: 53, action: allow}
)";

constexpr std::size_t kHeadLength = 32;  // a first fragment: the UDP header and 24 bytes of data
constexpr std::size_t kPayload = 56;     // UDP data: the datagram's IP payload is 64 bytes

Bytes dns_datagram(const std::string& src, uint16_t src_port = 5000, uint16_t dst_port = 53) {
    FrameSpec spec = udp_spec(src.c_str(), src_port, "10.0.0.2", dst_port);
    if (is_v6(src)) spec.dst = "2001:db8::2";
    spec.payload = kPayload;
    return frame(spec);
}
Bytes first_fragment(const Bytes& whole, uint32_t id) { return fragment_of(whole, id, 0, kHeadLength, true); }
Bytes last_fragment(const Bytes& whole, uint32_t id) {
    return fragment_of(whole, id, kHeadLength, 8 + kPayload - kHeadLength, false);
}

// Sends frames into wan (in runs the lab's rings hold) and returns how many sluice forwarded to lan.
std::size_t forwarded(PipelineLab& lab, const std::vector<Bytes>& frames) {
    std::size_t out = 0;
    for (std::size_t at = 0; at < frames.size(); at += 512) {
        lab.send("wan", {frames.begin() + static_cast<std::ptrdiff_t>(at),
                         frames.begin() + static_cast<std::ptrdiff_t>(std::min(frames.size(), at + 512))});
        lab.run();
        out += lab.take_sent("lan").size();
    }
    return out;
}

}  // namespace

TEST_CASE("fragments: a duplicate first fragment is dropped and its datagram keeps the first one's ports",
          "[fragments][pipeline]") {
    PipelineLab lab(kDnsOnlyConfig);
    const Bytes dns = dns_datagram("203.0.113.9");
    const Bytes other_ports = dns_datagram("203.0.113.9", 6000, 54);  // same addresses, same id
    CHECK(forwarded(lab, {first_fragment(dns, 7)}) == 1);
    CHECK(forwarded(lab, {first_fragment(other_ports, 7)}) == 0);
    CHECK(lab.drops(DropReason::fragment_duplicate) == 1);
    // Given ports 6000 -> 54 it would find no connection (a later fragment opens none) and be dropped.
    CHECK(forwarded(lab, {last_fragment(dns, 7)}) == 1);
    CHECK(lab.totals().total_drops() == 1);
    CHECK(lab.mbufs_out() == 0);
}

TEST_CASE("fragments: an IPv6 atomic fragment passes whole and leaves no datagram pending", "[fragments][pipeline]") {
    PipelineLab lab(kDnsOnlyConfig);
    const Bytes dns = dns_datagram("2001:db8:1::9");
    CHECK(forwarded(lab, {fragment_of(dns, 77, 0, 8 + kPayload, false)}) == 1);
    // A later fragment with its id finds nothing: the atomic fragment was the whole datagram.
    CHECK(forwarded(lab, {last_fragment(dns, 77)}) == 0);
    CHECK(lab.drops(DropReason::fragment_unmatched) == 1);
    CHECK(lab.mbufs_out() == 0);
}

TEST_CASE("fragments: a flood of first fragments from a few sources leaves room for everyone else",
          "[fragments][pipeline]") {
    PipelineLab lab(kDnsOnlyConfig);
    constexpr uint32_t kFlooders = 4, kPerFlooder = 1200;  // 4,800 datagrams that never end: more than the table
    static_assert(kFlooders * kPerFlooder > FragmentTracker::kCapacity);
    std::vector<Bytes> flood;
    for (uint32_t s = 0; s < kFlooders; ++s) {
        const Bytes datagram = dns_datagram("198.18.0." + std::to_string(s + 1));
        for (uint32_t id = 0; id < kPerFlooder; ++id) flood.push_back(first_fragment(datagram, id));
    }
    CHECK(forwarded(lab, flood) == kFlooders * FragmentTracker::kPerSourceLimit);
    // Each source's count-min counters are refused only when both are full: four sources fill no one else's pair
    // unless both of its counters collide with a flooder's (about (4 / 4096)^2).
    CHECK(lab.drops(DropReason::fragment_source_limit) == kFlooders * (kPerFlooder - FragmentTracker::kPerSourceLimit));
    CHECK(lab.drops(DropReason::fragment_table_full) == 0);

    const Bytes dns = dns_datagram("203.0.113.9");
    CHECK(forwarded(lab, {first_fragment(dns, 1), last_fragment(dns, 1)}) == 2);
    // An IPv6 source is its /64: a flooder cannot get past the bound by changing its interface identifier.
    std::vector<Bytes> v6_flood;
    for (uint32_t id = 0; id < 100; ++id)
        v6_flood.push_back(first_fragment(dns_datagram("2001:db8:6::" + std::to_string(id + 1)), id));
    CHECK(forwarded(lab, v6_flood) == FragmentTracker::kPerSourceLimit);
    // A datagram that ends frees its source's share.
    const Bytes flooder = dns_datagram("198.18.0.1");
    CHECK(forwarded(lab, {last_fragment(flooder, 0), first_fragment(flooder, 5000)}) == 2);
    CHECK(lab.mbufs_out() == 0);
}

TEST_CASE("fragments: arrivals expire datagrams past their lifetime, as many as they need", "[fragments][pipeline]") {
    PipelineLab lab(kDnsOnlyConfig);
    // 256 sources x 14, under each source's bound: 7/8 of the table (cuckoo hashing may refuse a key short of full).
    constexpr uint32_t kSources = 256, kPerSource = 14, kWave = kSources * kPerSource;
    const auto wave = [&](uint32_t first_id) {
        std::vector<Bytes> frames;
        for (uint32_t s = 0; s < kSources; ++s) {
            const Bytes datagram =
                dns_datagram("198.19." + std::to_string(s / 200) + "." + std::to_string(s % 200 + 1));
            for (uint32_t i = 0; i < kPerSource; ++i) frames.push_back(first_fragment(datagram, first_id + i));
        }
        return frames;
    };
    CHECK(forwarded(lab, wave(0)) == kWave);
    // Past the lifetime, as many new datagrams at once find room: each insert expires old ones first (a sweep of a
    // few a millisecond would have left room for an eighth of them).
    lab.advance_seconds(FragmentTracker::kLifetimeMs / 1000.0 + 0.1);
    CHECK(forwarded(lab, wave(100)) == kWave);
    CHECK(lab.drops(DropReason::fragment_table_full) == 0);
    CHECK(lab.mbufs_out() == 0);
}

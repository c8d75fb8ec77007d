// Rules' rate limits through the whole data path: `per: source` with 100k sources (lib/pipeline/source_limiter.hpp).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "pipeline/pipeline_lab.hpp"
#include "pipeline/source_limiter.hpp"

using namespace sluice;
using namespace sluice::test;

namespace {

// Each source may open 2 connections at once, then 10 a second (one worker: the rule's whole rate).
const char* kPerSourceConfig = R"(
ports:
  - {name: lan, device: ring_lan}
  - {name: wan, device: ring_wan}
lcores: [{id: 1, roles: [rx, worker]}]
forward:
  - {from: lan, to: wan, next_hop_mac: "02:00:00:00:00:0b"}
  - {from: wan, to: lan, next_hop_mac: "02:00:00:00:00:0a"}
firewall:
  table_size: 400000
  default: deny
  rules:
    - name: dns
      in_ports: [wan]
      protocol: udp
      destination_ports: 53
      action: allow
      rate_limit: {rate: 10, burst: 2, per: source}
)";

constexpr uint32_t kSources = 100000;
constexpr uint32_t kRuleBurst = 2;

std::string source_address(uint32_t i) {
    return "100." + std::to_string(64 + i / 65536) + "." + std::to_string(i / 256 % 256) + "." +
           std::to_string(i % 256);
}
uint32_t source_index(const Bytes& sent) {  // the inverse, from an IPv4 frame's source address
    return (sent[27] - 64u) * 65536 + sent[28] * 256u + sent[29];
}

// One new connection (source port first_port + round) from each of sources, round after round; returns the
// connections each source opened.
std::vector<uint32_t> open_rounds(PipelineLab& lab, const std::vector<uint32_t>& sources, uint16_t first_port,
                                  int rounds) {
    std::vector<uint32_t> opened(kSources, 0);
    std::vector<Bytes> frames;
    const auto flush = [&] {
        lab.send("wan", frames);
        frames.clear();
        lab.run();
        for (const Bytes& sent : lab.take_sent("lan")) ++opened[source_index(sent)];
    };
    for (int round = 0; round < rounds; ++round)
        for (uint32_t s : sources) {
            const std::string src = source_address(s);
            frames.push_back(frame(udp_spec(src.c_str(), static_cast<uint16_t>(first_port + round), "10.0.0.2", 53)));
            if (frames.size() == 512) flush();
        }
    flush();
    return opened;
}

}  // namespace

TEST_CASE("rate limit per source: 100k sources each stay within their own limit and never reset each other",
          "[rate_limit][pipeline]") {
    PipelineLab lab(kPerSourceConfig);
    std::vector<uint32_t> everyone(kSources);
    for (uint32_t s = 0; s < kSources; ++s) everyone[s] = s;
    // Three connections from each source, taking turns, at one instant: each may open its burst, 2, and no more.
    // A source handed a bucket another had used (slots shared by hash) would start full and open 3.
    const std::vector<uint32_t> opened = open_rounds(lab, everyone, 1000, 3);
    uint32_t tracked = 0, over = 0, total = 0;
    std::vector<uint32_t> untracked;
    for (uint32_t s = 0; s < kSources; ++s) {
        over += opened[s] > kRuleBurst;
        total += opened[s];
        if (opened[s] == kRuleBurst) ++tracked;
        else untracked.push_back(s);
    }
    CHECK(over == 0);
    // The table holds kCapacity sources; the others share the rule's overflow bucket, one source's burst among all
    // of them, and every packet of theirs counts as overflow.
    const uint64_t overflow = lab.totals().rate_limit_overflow;
    CHECK(overflow % 3 == 0);
    const uint64_t in_table = kSources - overflow / 3;
    CHECK(in_table == SourceLimiter::kCapacity);
    CHECK(total == in_table * kRuleBurst + kRuleBurst);
    CHECK(tracked >= in_table);
    CHECK(lab.drops(DropReason::rate_limited) == 3 * kSources - total);

    // Once the tracked sources' buckets are full again (2 tokens at 10/s: 0.2 s), forgetting them changes nothing:
    // each new source expires old ones to make room, and the sources left out before get their own buckets.
    lab.advance_seconds(0.25);
    const uint64_t overflow_before = lab.totals().rate_limit_overflow;
    const std::vector<uint32_t> later = open_rounds(lab, untracked, 2000, 3);
    uint32_t exact = 0, later_over = 0;
    for (uint32_t s : untracked) {
        exact += later[s] == kRuleBurst;
        later_over += later[s] > kRuleBurst;
    }
    CHECK(later_over == 0);
    CHECK(exact == untracked.size());
    CHECK(lab.totals().rate_limit_overflow == overflow_before);
    CHECK(lab.mbufs_out() == 0);
}

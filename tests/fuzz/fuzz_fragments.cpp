// libFuzzer target "fragments": the RX lcore's fragment tracker (lib/pipeline/fragments.hpp) against a reference
// model written from the policy its header states. Each input is a program of 3-byte steps: a fragment (first,
// middle, last or atomic; IPv4 or IPv6; UDP, TCP or ICMP echo; from one of six sources, two of them in one IPv6 /64;
// one of 80 ids; one of four port pairs), a time step, or a sweep. Every frame goes through parse_frame and, when it
// is a fragment, FragmentTracker::annotate, as on the RX lcore. After each step:
//  - the verdict is the model's: a tiny first fragment and a TCP fragment inside the TCP header are invalid, a later
//    fragment without a live first fragment is unmatched, a second first fragment of a pending datagram is a
//    duplicate, a source with 64 datagrams pending is refused; everything else passes;
//  - a fragment that passes carries its datagram's ports, those of the first fragment recorded (never a duplicate's),
//    and a flow hash over the full five-tuple (symmetric_flow_hash);
//  - the tracker holds exactly the model's datagrams (pending()): the last fragment and expiry remove them, oldest
//    first, a bounded number per first fragment and per sweep.
#include <unistd.h>

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_mbuf.h>

#include "common/frames.hpp"
#include "fuzz_common.hpp"
#include "packet/packet_meta.hpp"
#include "packet/parse.hpp"
#include "pipeline/fragments.hpp"

using namespace sluice;
using namespace sluice::test;

namespace {

struct Source {
    const char* address;
    int group;  // the tracker's source: an IPv4 address, an IPv6 /64
};
constexpr Source kSources[] = {{"203.0.113.7", 0},   {"203.0.113.8", 1},   {"198.51.100.9", 2},
                               {"2001:db8:1::7", 3}, {"2001:db8:1::8", 3}, {"2001:db8:2::7", 4}};
constexpr unsigned kSourceCount = sizeof kSources / sizeof kSources[0];
constexpr unsigned kIds = 80;  // more than the per-source limit
constexpr uint8_t kProtos[] = {IPPROTO_UDP, IPPROTO_TCP, IPPROTO_ICMP, IPPROTO_UDP};
constexpr std::size_t kPayload = 96;
constexpr uint32_t kTimeStepsMs[] = {1, 100, 1000, 1999, 2000, 2001, 4000, 30000};

// A datagram as the tracker keys it (addresses, id, protocol).
using DatagramKey = std::tuple<std::string, uint32_t, uint8_t>;

struct Record {
    uint16_t src_port, dst_port;  // network order
    int group;
    uint64_t expires_tsc;
    std::list<DatagramKey>::iterator age;
};

// The tracker as its header describes it.
class Model {
public:
    explicit Model(uint64_t lifetime_tsc) : lifetime_tsc_(lifetime_tsc) {}

    DropReason first(const DatagramKey& key, int group, uint16_t src_port, uint16_t dst_port, uint64_t now) {
        expire(now, FragmentTracker::kExpirePerInsert);
        auto existing = records_.find(key);
        if (existing != records_.end()) {
            if (existing->second.expires_tsc >= now) return DropReason::fragment_duplicate;
            remove(existing);
        }
        if (pending_per_group_[group] >= FragmentTracker::kPerSourceLimit) return DropReason::fragment_source_limit;
        ages_.push_back(key);
        records_[key] = Record{src_port, dst_port, group, now + lifetime_tsc_, std::prev(ages_.end())};
        ++pending_per_group_[group];
        return DropReason::none;
    }

    // A later fragment: its datagram's ports, or unmatched.
    DropReason later(const DatagramKey& key, bool more, uint64_t now, uint16_t& src_port, uint16_t& dst_port) {
        auto it = records_.find(key);
        if (it == records_.end()) return DropReason::fragment_unmatched;
        if (it->second.expires_tsc < now) {
            remove(it);
            return DropReason::fragment_unmatched;
        }
        src_port = it->second.src_port, dst_port = it->second.dst_port;
        if (!more) remove(it);
        return DropReason::none;
    }

    void expire(uint64_t now, uint32_t budget) {
        for (uint32_t i = 0; i < budget && !ages_.empty(); ++i) {
            auto oldest = records_.find(ages_.front());
            if (oldest->second.expires_tsc >= now) return;
            remove(oldest);
        }
    }

    std::size_t pending() const { return records_.size(); }

private:
    void remove(std::map<DatagramKey, Record>::iterator it) {
        --pending_per_group_[it->second.group];
        ages_.erase(it->second.age);
        records_.erase(it);
    }

    uint64_t lifetime_tsc_;
    std::map<DatagramKey, Record> records_;
    std::list<DatagramKey> ages_;  // oldest first
    std::map<int, uint32_t> pending_per_group_;
};

rte_mempool* g_pool = nullptr;
unsigned g_runs = 0;

class Program {
public:
    Program()
        : tracker_("fuzz_frag" + std::to_string(++g_runs), SOCKET_ID_ANY, rte_get_tsc_hz()),
          model_(rte_get_tsc_hz() * FragmentTracker::kLifetimeMs / 1000), now_tsc_(rte_get_tsc_hz()) {}

    void step(uint8_t a, uint8_t b, uint8_t c) {
        switch (a % 8) {
        case 6: now_tsc_ += rte_get_tsc_hz() / 1000 * kTimeStepsMs[b % 8]; break;
        case 7:
            tracker_.sweep(now_tsc_);
            model_.expire(now_tsc_, FragmentTracker::kExpirePerPoll);
            break;
        default: fragment(kSources[(a >> 3) % kSourceCount], b % kIds, c);
        }
        FUZZ_CHECK(tracker_.pending() == model_.pending(), "the tracker holds %u datagrams, the model %zu",
                   tracker_.pending(), model_.pending());
    }

private:
    // c: bits 0-1 the fragment's place (first, middle, last, whole), 2-3 the protocol, 4-5 the ports, 6 a tiny
    // first fragment (TCP: cut inside its header), 7 an early offset (8 bytes: inside a TCP header).
    void fragment(const Source& source, uint32_t id, uint8_t c) {
        const bool v6 = is_v6(source.address);
        FrameSpec spec;
        spec.src = source.address;
        spec.dst = v6 ? "2001:db8:ff::1" : "192.0.2.1";
        spec.proto = kProtos[(c >> 2) % 4];
        spec.src_port = static_cast<uint16_t>(5000 + ((c >> 4) & 3));
        spec.dst_port = static_cast<uint16_t>(53 + ((c >> 4) & 1));
        spec.payload = kPayload;
        const Bytes whole = frame(spec);
        const std::size_t ip_payload = whole.size() - 14 - (v6 ? 40 : 20);
        const unsigned place = c & 3;
        const std::size_t later_offset = (c & 0x80) ? 8 : 32;
        Bytes f;
        switch (place) {
        case 0: f = fragment_of(whole, id, 0, (c & 0x40) && spec.proto == IPPROTO_TCP ? 8 : 32, true); break;
        case 1: f = fragment_of(whole, id, later_offset, 16, true); break;
        case 2: f = fragment_of(whole, id, later_offset, ip_payload - later_offset, false); break;
        default: f = fragment_of(whole, id, 0, ip_payload, false); break;  // IPv6: atomic; IPv4: no fragment
        }
        rte_mbuf* m = rte_pktmbuf_alloc(g_pool);
        FUZZ_CHECK(m != nullptr, "the pool is empty");
        std::memcpy(rte_pktmbuf_append(m, static_cast<uint16_t>(f.size())), f.data(), f.size());
        PacketMeta& meta = *packet_meta(m);
        FiveTuple tuple;
        uint32_t datagram_end;
        const DropReason parsed = parse_frame(f.data(), static_cast<uint32_t>(f.size()), {}, meta, tuple, datagram_end);
        FUZZ_CHECK(parsed == DropReason::none, "parse_frame refused a fragment: %s",
                   std::string(drop_reason_name(parsed)).c_str());
        if (!(meta.flags & kMetaFragment)) {
            FUZZ_CHECK(!v6 && place == 3, "a fragment (place %u) not flagged as one", place);
            rte_pktmbuf_free(m);
            return;
        }
        const uint8_t proto = spec.proto == IPPROTO_ICMP && v6 ? uint8_t{IPPROTO_ICMPV6} : spec.proto;
        const DatagramKey key{spec.src, id, proto};
        uint16_t src_port = htons(spec.src_port), dst_port = htons(spec.dst_port);
        if (spec.proto == IPPROTO_ICMP) dst_port = src_port;  // an echo's identifier, in both slots
        DropReason expected;
        if (place == 0 && (c & 0x40) && spec.proto == IPPROTO_TCP) expected = DropReason::fragment_invalid;
        else if (place == 0) expected = model_.first(key, source.group, src_port, dst_port, now_tsc_);
        else if (place == 3) expected = DropReason::none;  // atomic: the whole datagram, never recorded
        else if (spec.proto == IPPROTO_TCP && later_offset < 20) expected = DropReason::fragment_invalid;
        else expected = model_.later(key, place == 1, now_tsc_, src_port, dst_port);

        const DropReason verdict = tracker_.annotate(m, now_tsc_);
        FUZZ_CHECK(verdict == expected, "%s id %u place %u proto %u: the tracker says %s, the model %s", source.address,
                   id, place, spec.proto, std::string(drop_reason_name(verdict)).c_str(),
                   std::string(drop_reason_name(expected)).c_str());
        if (verdict == DropReason::none) {
            FUZZ_CHECK((meta.flags & kMetaFragmentPorts) && meta.fragment_src_port == src_port &&
                           meta.fragment_dst_port == dst_port,
                       "%s id %u place %u: ports %u -> %u, the datagram's are %u -> %u", source.address, id, place,
                       ntohs(meta.fragment_src_port), ntohs(meta.fragment_dst_port), ntohs(src_port), ntohs(dst_port));
            set_ports(tuple, src_port, dst_port);
            FUZZ_CHECK(meta.flow_hash == symmetric_flow_hash(tuple), "%s id %u: the flow hash is not the tuple's",
                       source.address, id);
        }
        rte_pktmbuf_free(m);
    }

    FragmentTracker tracker_;
    Model model_;
    uint64_t now_tsc_;
};

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    static const std::string prefix = "--file-prefix=fuzz-fragments-" + std::to_string(getpid());
    const char* eal_args[] = {"fuzz_fragments",    "--no-huge",      "-m",           "256",  "--no-pci", "-l", "0",
                              "--log-level=error", "--no-telemetry", prefix.c_str(), nullptr};
    if (rte_eal_init(10, const_cast<char**>(eal_args)) < 0 || !register_packet_meta()) std::abort();
    g_pool = rte_pktmbuf_pool_create("fuzz_frag_pool", 255, 0, 0, RTE_MBUF_DEFAULT_BUF_SIZE, SOCKET_ID_ANY);
    if (!g_pool) std::abort();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size > 3 * 512) return -1;
    Program program;
    for (size_t i = 0; i + 2 < size; i += 3) program.step(data[i], data[i + 1], data[i + 2]);
    FUZZ_CHECK(rte_mempool_in_use_count(g_pool) == 0, "mbufs leaked");
    return 0;
}

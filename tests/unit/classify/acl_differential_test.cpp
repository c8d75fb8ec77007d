// Differential test: 1k random rules per family, 100k random packets, every verdict of the rte_acl classifier
// compared with the linear first-match reference (classify_test_util.hpp). Packets are mostly derived from a rule's
// own fields, at and around the edges of its prefixes, port ranges, ICMP type and code ranges and TCP flag tests, so
// most of them match something and many match several overlapping rules. Then the same harness is shown to catch a
// wrong classifier.
#include <catch2/catch.hpp>

#include <netinet/in.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>

#include <rte_acl.h>
#include <rte_cycles.h>
#include <rte_memory.h>
#include <rte_vect.h>

#include "classify/acl_classifier.hpp"
#include "classify/acl_method.hpp"
#include "classify_test_util.hpp"

using namespace sluice;
using namespace sluice::test;

namespace {

constexpr uint64_t kSeed = 20240611;
constexpr int kRules = 1000;
// Under the sanitizers (about five times slower: the linear reference dominates) a quarter of the packets: the same
// code paths, within the suite's time.
#if defined(__SANITIZE_ADDRESS__)
constexpr int kPackets = 25000;
#else
constexpr int kPackets = 100000;
#endif
constexpr uint16_t kPorts = 4;  // DPDK port ids 0..3

struct Packet {
    FiveTuple tuple;
    uint16_t in_port;
    L4MatchBytes l4;
};

class Generator {
public:
    Generator(IpFamily family, uint64_t seed) : family_(family), rng_(seed) {
        // A few base networks that every prefix is carved from, so rules overlap and nest.
        for (int i = 0; i < 32; ++i) seeds_.push_back(random_address());
    }

    // Like a real rule set, rules that leave both addresses (nearly) open go to the end, so they cannot shadow
    // every rule after them; they still overlap all the rules before them.
    std::vector<Rule> rules(int n) {
        std::vector<Rule> out;
        for (int i = 0; i < n; ++i) out.push_back(rule());
        const auto tail = std::stable_partition(
            out.begin(), out.end(), [this](const Rule& r) { return !wide(r.sources) || !wide(r.destinations); });
        // And none of them is a catch-all, so some packets match nothing.
        for (auto it = tail; it != out.end(); ++it) {
            if (it->protocol == kAnyProtocol) it->protocol = IPPROTO_TCP;
            if (it->protocol == IPPROTO_TCP || it->protocol == IPPROTO_UDP) {
                if (it->destination_ports.empty()) it->destination_ports.push_back(port_range());
            } else if (it->in_ports.empty()) {
                it->in_ports.push_back(static_cast<uint16_t>(below(kPorts)));
            }
        }
        for (int i = 0; i < n; ++i) out[i].name = "r" + std::to_string(i);
        return out;
    }

    std::vector<Packet> packets(const std::vector<Rule>& rules, int n) {
        std::vector<Packet> out;
        out.reserve(n);
        for (int i = 0; i < n; ++i) out.push_back(chance(80) ? derived(rules[below(rules.size())]) : random_packet());
        return out;
    }

private:
    uint32_t below(std::size_t n) { return static_cast<uint32_t>(rng_() % n); }
    bool chance(int percent) { return below(100) < static_cast<uint32_t>(percent); }
    unsigned max_length() const { return family_ == IpFamily::ipv4 ? 32 : 128; }

    IpAddress random_address() {
        IpAddress a{};
        if (family_ == IpFamily::ipv4) a.words[0] = static_cast<uint32_t>(rng_());
        else a.quads[0] = rng_(), a.quads[1] = rng_();
        return a;
    }

    // Keeps the first `from_bit` bits of a and randomises the rest: a near neighbour of a seed.
    IpAddress perturb(IpAddress a, unsigned from_bit) {
        const IpAddress noise = random_address();
        const IpAddress keep = mask_address(all_ones(), from_bit);
        for (int b = 0; b < 16; ++b)
            a.bytes[b] = static_cast<uint8_t>((a.bytes[b] & keep.bytes[b]) | (noise.bytes[b] & ~keep.bytes[b]));
        return a;  // random_address() leaves the unused IPv4 words zero
    }

    static IpAddress all_ones() {
        IpAddress a;
        a.quads[0] = a.quads[1] = ~uint64_t{0};
        return a;
    }

    // Mostly specific prefixes (a /0 or a /3 rule early in the list would shadow most of the rules after it), with
    // the edges and the 32-bit word boundaries of IPv6 well represented.
    uint8_t prefix_length() {
        const unsigned max = max_length();
        const uint32_t pick = below(100);
        if (pick < 3) return 0;
        if (pick < 17) return static_cast<uint8_t>(max);
        if (pick < 35) {  // at or next to an 8-bit (IPv4) or 32-bit (IPv6 word) boundary
            const unsigned step = family_ == IpFamily::ipv4 ? 8 : 32;
            const int len = static_cast<int>(step * (1 + below(max / step))) + static_cast<int>(below(3)) - 1;
            return static_cast<uint8_t>(std::clamp(len, 0, static_cast<int>(max)));
        }
        return static_cast<uint8_t>(max / 4 + below(max - max / 4 + 1));
    }

    Prefix prefix() {
        const uint8_t len = prefix_length();
        const IpAddress base = perturb(seeds_[below(seeds_.size())], below(max_length() + 1));
        return Prefix{mask_address(base, len), len};
    }

    PortRange port_range() {
        static constexpr uint16_t kInteresting[] = {0,   1,    22,   53,   79,    80,    81,
                                                    443, 1023, 1024, 8080, 32768, 65534, 65535};
        const uint16_t first =
            chance(50) ? kInteresting[below(std::size(kInteresting))] : static_cast<uint16_t>(rng_());
        static constexpr uint32_t kWidths[] = {0, 0, 1, 2, 10, 100, 1000, 30000, 65535};
        const uint32_t last = std::min<uint32_t>(65535, first + kWidths[below(std::size(kWidths))]);
        return PortRange{first, static_cast<uint16_t>(last)};
    }

    uint8_t icmp_proto() const { return family_ == IpFamily::ipv4 ? uint8_t{IPPROTO_ICMP} : uint8_t{IPPROTO_ICMPV6}; }

    bool wide(const std::vector<Prefix>& list) const {
        return list.empty() ||
               std::any_of(list.begin(), list.end(), [this](const Prefix& p) { return p.length < max_length() / 4; });
    }

    Rule rule() {
        Rule r;
        r.family = family_;
        if (chance(25))
            for (uint32_t n = 1 + below(2); n > 0; --n) r.in_ports.push_back(static_cast<uint16_t>(below(kPorts)));
        if (chance(85))
            for (uint32_t n = 1 + below(2); n > 0; --n) r.sources.push_back(prefix());
        if (chance(90))
            for (uint32_t n = 1 + below(3); n > 0; --n) r.destinations.push_back(prefix());
        const uint32_t p = below(100);
        r.protocol = p < 40 ? IPPROTO_TCP : p < 75 ? IPPROTO_UDP : p < 90 ? icmp_proto() : kAnyProtocol;
        if (r.protocol == IPPROTO_TCP || r.protocol == IPPROTO_UDP) {
            if (chance(30)) r.source_ports.push_back(port_range());
            if (chance(65))
                for (uint32_t n = 1 + below(2); n > 0; --n) r.destination_ports.push_back(port_range());
        }
        if (r.protocol == IPPROTO_TCP && chance(35)) {
            r.tcp_flags.mask = static_cast<uint8_t>(1 + below(255));
            r.tcp_flags.value = static_cast<uint8_t>(rng_() & r.tcp_flags.mask);
        }
        if (r.protocol == icmp_proto()) {
            if (chance(60))
                for (uint32_t n = 1 + below(2); n > 0; --n) r.icmp_types.push_back(icmp_range());
            if (chance(30)) r.icmp_codes.push_back(icmp_range());
        }
        r.action = static_cast<RuleAction>(below(3));
        return r;
    }

    // Mostly one type or code (echo-request, 0), sometimes a range.
    IcmpRange icmp_range() {
        static constexpr uint8_t kInteresting[] = {0, 1, 3, 8, 11, 128, 129, 135, 255};
        const uint8_t first = chance(60) ? kInteresting[below(std::size(kInteresting))] : static_cast<uint8_t>(rng_());
        const uint32_t last = chance(70) ? first : std::min<uint32_t>(255, first + below(20));
        return IcmpRange{first, static_cast<uint8_t>(last)};
    }

    uint8_t icmp_near(const std::vector<IcmpRange>& list) {
        if (list.empty() || chance(5)) return static_cast<uint8_t>(rng_());
        const IcmpRange& r = list[below(list.size())];
        switch (below(5)) {
        case 0: return static_cast<uint8_t>(r.first - 1);  // wraps at 0: still a valid probe
        case 1: return static_cast<uint8_t>(r.last + 1);
        default: return static_cast<uint8_t>(r.first + below(uint32_t{r.last} - r.first + 1));
        }
    }

    // Flags that pass the rule's test, or fail it by one bit of its mask.
    uint8_t flags_near(const TcpFlagsMatch& m) {
        const uint8_t flags = static_cast<uint8_t>((rng_() & ~m.mask) | m.value);
        if (m.mask == 0 || chance(70)) return flags;
        uint8_t bit = 1;
        while (!(bit & m.mask) || chance(50)) bit = static_cast<uint8_t>(bit == 0x80 ? 1 : bit << 1);
        return static_cast<uint8_t>(flags ^ bit);
    }

    // An address inside p, often at its first or last address.
    IpAddress inside(const Prefix& p) {
        IpAddress a = random_address();
        const uint32_t how = below(4);
        if (how == 0) a = IpAddress{};
        if (how == 1) a = all_ones();
        IpAddress out;
        const IpAddress net_mask = mask_address(all_ones(), p.length);
        for (int b = 0; b < 16; ++b)
            out.bytes[b] = static_cast<uint8_t>(p.address.bytes[b] | (a.bytes[b] & ~net_mask.bytes[b]));
        if (family_ == IpFamily::ipv4) out.words[1] = out.words[2] = out.words[3] = 0;
        return out;
    }

    IpAddress address_near(const std::vector<Prefix>& list) {
        if (list.empty() || chance(10))
            return chance(50) ? random_address() : perturb(seeds_[below(seeds_.size())], below(max_length() + 1));
        const Prefix& p = list[below(list.size())];
        if (chance(10) && p.length > 0) {  // just outside: flip the last network bit
            IpAddress a = inside(p);
            const unsigned bit = p.length - 1u;
            a.bytes[bit / 8] ^= static_cast<uint8_t>(0x80 >> (bit % 8));
            return a;
        }
        return inside(p);
    }

    uint16_t port_near(const std::vector<PortRange>& list) {
        if (list.empty() || chance(5)) return static_cast<uint16_t>(rng_());
        const PortRange& r = list[below(list.size())];
        switch (below(6)) {
        case 0: return static_cast<uint16_t>(r.first - 1);  // wraps at 0: still a valid probe
        case 1: return r.first;
        case 2: return r.last;
        case 3: return static_cast<uint16_t>(r.last + 1);
        default: return static_cast<uint16_t>(r.first + below(uint32_t{r.last} - r.first + 1));
        }
    }

    uint8_t random_proto() {
        static constexpr uint8_t kProtos[] = {IPPROTO_TCP, IPPROTO_UDP, IPPROTO_ICMP, IPPROTO_ICMPV6, IPPROTO_SCTP,
                                              IPPROTO_GRE, 0,           255};
        return kProtos[below(std::size(kProtos))];
    }

    void finish(Packet& p) {
        FiveTuple& t = p.tuple;
        if (t.proto == IPPROTO_ICMP || t.proto == IPPROTO_ICMPV6) t.dst_port = t.src_port;  // echo identifier
        if (chance(3)) t.src_port = t.dst_port = 0;                                         // non-first fragment
    }

    Packet derived(const Rule& r) {
        Packet p;
        p.tuple.family = family_;
        p.in_port = r.in_ports.empty() || chance(10) ? static_cast<uint16_t>(below(kPorts + 1))
                                                     : r.in_ports[below(r.in_ports.size())];
        p.tuple.proto = r.protocol == kAnyProtocol || chance(10) ? random_proto() : static_cast<uint8_t>(r.protocol);
        p.tuple.src = address_near(r.sources);
        p.tuple.dst = address_near(r.destinations);
        p.tuple.src_port = htons(port_near(r.source_ports));
        p.tuple.dst_port = htons(port_near(r.destination_ports));
        p.l4.tcp_flags = flags_near(r.tcp_flags);
        p.l4.icmp_type = icmp_near(r.icmp_types);
        p.l4.icmp_code = icmp_near(r.icmp_codes);
        finish(p);
        return p;
    }

    Packet random_packet() {
        Packet p;
        p.tuple.family = family_;
        p.in_port = static_cast<uint16_t>(below(kPorts + 1));
        p.tuple.proto = random_proto();
        p.tuple.src = chance(50) ? random_address() : perturb(seeds_[below(seeds_.size())], below(max_length() + 1));
        p.tuple.dst = chance(50) ? random_address() : perturb(seeds_[below(seeds_.size())], below(max_length() + 1));
        p.tuple.src_port = static_cast<uint16_t>(rng_());
        p.tuple.dst_port = static_cast<uint16_t>(rng_());
        p.l4 = {static_cast<uint8_t>(rng_()), static_cast<uint8_t>(rng_()), static_cast<uint8_t>(rng_())};
        finish(p);
        return p;
    }

    IpFamily family_;
    std::mt19937_64 rng_;
    std::vector<IpAddress> seeds_;
};

std::vector<uint32_t> reference_verdicts(const std::vector<Rule>& rules, const std::vector<Packet>& packets) {
    std::vector<uint32_t> out;
    out.reserve(packets.size());
    for (const Packet& p : packets) out.push_back(reference_first_match(rules, p.tuple, p.in_port, p.l4));
    return out;
}

// Classifies in bursts of varying size (1..kMaxBurst: the SIMD paths handle partial bursts separately).
std::vector<uint32_t> classifier_verdicts(const AclClassifier& c, const std::vector<Packet>& packets, uint64_t seed) {
    std::mt19937 rng(static_cast<uint32_t>(seed));
    std::vector<uint32_t> out(packets.size());
    const FiveTuple* tuples[AclClassifier::kMaxBurst];
    uint16_t ports[AclClassifier::kMaxBurst];
    L4MatchBytes l4[AclClassifier::kMaxBurst];
    for (std::size_t done = 0; done < packets.size();) {
        const uint32_t n =
            std::min<uint32_t>(1 + rng() % AclClassifier::kMaxBurst, static_cast<uint32_t>(packets.size() - done));
        for (uint32_t i = 0; i < n; ++i) {
            tuples[i] = &packets[done + i].tuple;
            ports[i] = packets[done + i].in_port;
            l4[i] = packets[done + i].l4;
        }
        c.classify(tuples, ports, l4, out.data() + done, n);
        done += n;
    }
    return out;
}

std::string name_of(const std::vector<Rule>& rules, uint32_t index) {
    return index == AclClassifier::kNoMatch ? "none" : rules.at(index).name;
}

struct Comparison {
    std::size_t mismatches = 0;
    std::string first;  // description of the first mismatch
};

// Verdicts are compared by rule name, so a classifier built from a reordered list is judged by what it chose.
Comparison compare(const std::vector<Rule>& classifier_rules, const std::vector<uint32_t>& got,
                   const std::vector<Rule>& reference_rules, const std::vector<uint32_t>& want,
                   const std::vector<Packet>& packets) {
    Comparison c;
    for (std::size_t i = 0; i < packets.size(); ++i) {
        const std::string g = name_of(classifier_rules, got[i]);
        const std::string w = name_of(reference_rules, want[i]);
        if (g == w) continue;
        if (c.mismatches++ == 0) {
            std::ostringstream s;
            s << "packet " << i << " " << to_string(packets[i].tuple) << " in_port " << packets[i].in_port
              << " tcp_flags " << int{packets[i].l4.tcp_flags} << " icmp " << int{packets[i].l4.icmp_type} << "/"
              << int{packets[i].l4.icmp_code} << ": classifier " << g << ", reference " << w;
            c.first = s.str();
        }
    }
    return c;
}

bool has_l4_test(const Rule& r) {
    return (r.protocol == IPPROTO_TCP && r.tcp_flags.mask != 0) ||
           (rule_tests_icmp(r) && (!r.icmp_types.empty() || !r.icmp_codes.empty()));
}

Rule without_l4_test(Rule r) {
    r.tcp_flags = {};
    r.icmp_types.clear();
    r.icmp_codes.clear();
    return r;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct Fixture {
    IpFamily family;
    std::vector<Rule> rules;
    std::vector<Packet> packets;
    std::vector<uint32_t> want;
};

Fixture make_fixture(IpFamily family) {
    Generator gen(family, kSeed + static_cast<uint64_t>(family));
    Fixture f{family, {}, {}, {}};
    f.rules = gen.rules(kRules);
    f.packets = gen.packets(f.rules, kPackets);
    f.want = reference_verdicts(f.rules, f.packets);
    return f;
}

// Catch2 runs a test case once per section; the fixture (about a second of reference matching) is made once.
const Fixture& fixture(IpFamily family) {
    if (family == IpFamily::ipv4) {
        static const Fixture v4 = make_fixture(IpFamily::ipv4);
        return v4;
    }
    static const Fixture v6 = make_fixture(IpFamily::ipv6);
    return v6;
}

}  // namespace

TEST_CASE("acl differential: 1k random rules x 100k packets (ASan: 25k) agree with a linear first-match",
          "[classify][differential]") {
    for (IpFamily family : {IpFamily::ipv4, IpFamily::ipv6}) {
        const std::string fam = family == IpFamily::ipv4 ? "ipv4" : "ipv6";
        DYNAMIC_SECTION(fam) {
            auto t0 = std::chrono::steady_clock::now();
            const Fixture& f = fixture(family);
            const double gen_s = seconds_since(t0);

            const std::string ctx_name = "diff_" + fam;
            t0 = std::chrono::steady_clock::now();
            // One context (no parts), so that its classify method can be switched below by its name.
            AclClassifier c(family, f.rules, SOCKET_ID_ANY, ctx_name, 0, 0, nullptr, SIZE_MAX / 4);
            const double build_s = seconds_since(t0);

            // The packets must exercise the rules: most match something, and many different rules win.
            std::size_t matched = 0;
            std::vector<bool> hit(f.rules.size());
            for (uint32_t v : f.want)
                if (v != AclClassifier::kNoMatch) ++matched, hit[v] = true;
            const auto rules_hit = std::count(hit.begin(), hit.end(), true);
            CHECK(matched > f.packets.size() / 2);
            CHECK(matched < f.packets.size());
            // ... and many matched packets match more than one rule, so the order of rules is under test.
            std::size_t sampled = 0, overlapping = 0;
            for (std::size_t k = 0; k < 10000; ++k) {
                if (f.want[k] == AclClassifier::kNoMatch) continue;
                ++sampled;
                for (std::size_t later = f.want[k] + 1; later < f.rules.size(); ++later)
                    if (rule_matches(f.rules[later], f.packets[k].tuple, f.packets[k].in_port, f.packets[k].l4)) {
                        ++overlapping;
                        break;
                    }
            }
            CHECK(overlapping * 10 > sampled);
            CHECK(rules_hit > kRules / 2);
            // ... and the L4 tests decide: rules with them win, and some packets pass an earlier such rule only
            // because its TCP flags or ICMP type or code differ.
            std::size_t l4_winners = 0, l4_refused = 0;
            for (std::size_t k = 0; k < 10000; ++k) {
                const Packet& p = f.packets[k];
                if (f.want[k] != AclClassifier::kNoMatch && has_l4_test(f.rules[f.want[k]])) ++l4_winners;
                const std::size_t end = std::min<std::size_t>(f.want[k], f.rules.size());
                for (std::size_t before = 0; before < end; ++before) {
                    const Rule& r = f.rules[before];
                    if (has_l4_test(r) && rule_matches(without_l4_test(r), p.tuple, p.in_port, p.l4)) {
                        ++l4_refused;
                        break;
                    }
                }
            }
            CHECK(l4_winners > 300);
            CHECK(l4_refused > 100);

            t0 = std::chrono::steady_clock::now();
            const Comparison cmp =
                compare(f.rules, classifier_verdicts(c, f.packets, kSeed), f.rules, f.want, f.packets);
            const double classify_s = seconds_since(t0);
            WARN(fam << ": " << f.rules.size() << " rules -> " << c.expanded_rule_count() << " rte_acl rules, build "
                     << build_s << " s; " << f.packets.size() << " packets, " << matched << " matched, " << rules_hit
                     << " distinct rules won, " << overlapping << " of " << sampled
                     << " sampled matches also match a later rule; generate+reference " << gen_s
                     << " s, classify+compare " << classify_s << " s");
            INFO(cmp.first);
            REQUIRE(cmp.mismatches == 0);

            // Every classify method this CPU and DPDK build offer must agree too. The context is the classifier's
            // own; only its method is switched. AVX512 needs the EAL's SIMD bitwidth raised, then put back.
            rte_acl_ctx* ctx = rte_acl_find_existing(ctx_name.c_str());
            REQUIRE(ctx != nullptr);
            const uint16_t old_bitwidth = rte_vect_get_max_simd_bitwidth();
            rte_vect_set_max_simd_bitwidth(RTE_VECT_SIMD_512);
            for (const AclMethod& method : kAclMethods) {
                const enum rte_acl_classify_alg alg = method.alg;
                if (rte_acl_set_ctx_classify(ctx, alg) != 0) {
                    WARN(fam << ": classify method " << acl_method_name(alg) << " not available here");
                    continue;
                }
                const Comparison by_alg =
                    compare(f.rules, classifier_verdicts(c, f.packets, kSeed + alg), f.rules, f.want, f.packets);
                INFO(fam << " with " << acl_method_name(alg) << ": " << by_alg.first);
                CHECK(by_alg.mismatches == 0);
            }
            rte_vect_set_max_simd_bitwidth(old_bitwidth);
        }
    }
}

TEST_CASE("acl differential: rules cut into parts classify as one context; an edit rebuilds only its pieces",
          "[classify][differential]") {
    for (IpFamily family : {IpFamily::ipv4, IpFamily::ipv6}) {
        const std::string fam = family == IpFamily::ipv4 ? "ipv4" : "ipv6";
        DYNAMIC_SECTION(fam) {
            const Fixture& f = fixture(family);
            const AclClassifier parts(family, f.rules, SOCKET_ID_ANY, "parts_" + fam, 0, 0, nullptr, 64);
            REQUIRE(parts.part_count() > 4);
            CHECK(parts.parts_reused() == 0);
            const Comparison cmp =
                compare(f.rules, classifier_verdicts(parts, f.packets, kSeed), f.rules, f.want, f.packets);
            INFO(cmp.first);
            REQUIRE(cmp.mismatches == 0);

            // One rule changed, one inserted near the start and one removed near the end: the parts around each
            // are built again, every other one is shared with the running classifier.
            std::vector<Rule> edited = f.rules;
            edited[edited.size() / 2].destination_ports = {{4242, 4242}};
            edited.insert(edited.begin() + 10, edited[500]);
            edited.erase(edited.end() - 20);
            const AclClassifier next(family, edited, SOCKET_ID_ANY, "parts_next_" + fam, 0, 0, &parts, 64);
            CHECK(next.parts_reused() > 0);
            const std::vector<uint32_t> want = reference_verdicts(edited, f.packets);
            const Comparison after =
                compare(edited, classifier_verdicts(next, f.packets, kSeed + 1), edited, want, f.packets);
            INFO(after.first);
            REQUIRE(after.mismatches == 0);

            // One rule edited (an edit: one part of several changed): its part comes back as pieces.
            std::vector<Rule> one = edited;
            one[one.size() / 2].destination_ports = {{4343, 4343}};
            const AclClassifier pieces(family, one, SOCKET_ID_ANY, "parts_pieces_" + fam, 0, 0, &next, 64);
            CHECK(pieces.part_count() > next.part_count());
            CHECK(pieces.part_count() - pieces.parts_reused() >= 2);
            const Comparison one_cmp = compare(one, classifier_verdicts(pieces, f.packets, kSeed + 2), one,
                                               reference_verdicts(one, f.packets), f.packets);
            INFO(one_cmp.first);
            REQUIRE(one_cmp.mismatches == 0);

            // The same rule edited again: only its piece is built (two when the edit moved the cut after it).
            std::vector<Rule> again = one;
            again[again.size() / 2].destination_ports = {{4444, 4444}};
            const AclClassifier third(family, again, SOCKET_ID_ANY, "parts_third_" + fam, 0, 0, &pieces, 64);
            CHECK(third.part_count() - third.parts_reused() >= 1);
            CHECK(third.part_count() - third.parts_reused() <= 2);
            const Comparison again_cmp = compare(again, classifier_verdicts(third, f.packets, kSeed + 3), again,
                                                 reference_verdicts(again, f.packets), f.packets);
            INFO(again_cmp.first);
            REQUIRE(again_cmp.mismatches == 0);

            // Every part changed (the rules in reverse order): they are built whole, as at start, whatever pieces ran
            // before.
            std::vector<Rule> moved = f.rules;
            std::reverse(moved.begin(), moved.end());
            const AclClassifier fresh(family, moved, SOCKET_ID_ANY, "parts_fresh_" + fam, 0, 0, nullptr, 64);
            const AclClassifier bulk(family, moved, SOCKET_ID_ANY, "parts_bulk_" + fam, 0, 0, &third, 64);
            CHECK(bulk.part_count() == fresh.part_count());
            const Comparison bulk_cmp = compare(moved, classifier_verdicts(bulk, f.packets, kSeed + 4), moved,
                                                reference_verdicts(moved, f.packets), f.packets);
            INFO(bulk_cmp.first);
            REQUIRE(bulk_cmp.mismatches == 0);
        }
    }
}

TEST_CASE("acl differential: the harness catches a wrong classifier", "[classify][differential]") {
    const Fixture& f = fixture(IpFamily::ipv4);

    SECTION("two overlapping rules swapped") {
        // Find a packet whose first match i also matches a later rule j; a classifier built with i and j swapped
        // must then disagree with the reference on it.
        std::size_t i = 0, j = 0;
        for (std::size_t k = 0; k < f.packets.size() && j == 0; ++k) {
            if (f.want[k] == AclClassifier::kNoMatch) continue;
            for (std::size_t later = f.want[k] + 1; later < f.rules.size(); ++later)
                if (rule_matches(f.rules[later], f.packets[k].tuple, f.packets[k].in_port, f.packets[k].l4)) {
                    i = f.want[k], j = later;
                    break;
                }
        }
        REQUIRE(j != 0);
        std::vector<Rule> swapped = f.rules;
        std::swap(swapped[i], swapped[j]);
        AclClassifier c(IpFamily::ipv4, swapped, SOCKET_ID_ANY, "diff_swapped");
        const Comparison cmp = compare(swapped, classifier_verdicts(c, f.packets, kSeed), f.rules, f.want, f.packets);
        INFO("swapping " << f.rules[i].name << " and " << f.rules[j].name << ": " << cmp.mismatches
                         << " mismatches, first: " << cmp.first);
        CHECK(cmp.mismatches > 0);
    }

    SECTION("a port range one short at its last port") {
        // Find a packet decided by a rule's destination range at exactly its last port; shrink that range by one.
        std::vector<Rule> shrunk = f.rules;
        bool found = false;
        for (std::size_t k = 0; k < f.packets.size() && !found; ++k) {
            const uint32_t w = f.want[k];
            if (w == AclClassifier::kNoMatch) continue;
            Rule& r = shrunk[w];
            const uint16_t port = ntohs(f.packets[k].tuple.dst_port);
            if (r.destination_ports.size() != 1 || !rule_uses_ports(r)) continue;
            PortRange& range = r.destination_ports[0];
            if (range.last != port || range.first == range.last) continue;
            --range.last;
            found = true;
        }
        REQUIRE(found);
        AclClassifier c(IpFamily::ipv4, shrunk, SOCKET_ID_ANY, "diff_shrunk");
        const Comparison cmp = compare(shrunk, classifier_verdicts(c, f.packets, kSeed), f.rules, f.want, f.packets);
        INFO("off-by-one range: " << cmp.mismatches << " mismatches, first: " << cmp.first);
        CHECK(cmp.mismatches > 0);
    }

    SECTION("ICMP type and code handed over swapped") {
        std::vector<Packet> swapped = f.packets;
        for (Packet& p : swapped) std::swap(p.l4.icmp_type, p.l4.icmp_code);
        AclClassifier c(IpFamily::ipv4, f.rules, SOCKET_ID_ANY, "diff_icmp_swapped");
        const Comparison cmp = compare(f.rules, classifier_verdicts(c, swapped, kSeed), f.rules, f.want, f.packets);
        INFO("swapped ICMP type and code: " << cmp.mismatches << " mismatches, first: " << cmp.first);
        CHECK(cmp.mismatches > 0);
    }

    SECTION("TCP flags tests that ignore one bit of their mask") {
        std::vector<Rule> loose = f.rules;
        for (Rule& r : loose) {
            if (r.protocol != IPPROTO_TCP) continue;
            r.tcp_flags.mask &= static_cast<uint8_t>(r.tcp_flags.mask - 1);  // the lowest bit goes
            r.tcp_flags.value &= r.tcp_flags.mask;
        }
        AclClassifier c(IpFamily::ipv4, loose, SOCKET_ID_ANY, "diff_loose_flags");
        const Comparison cmp = compare(loose, classifier_verdicts(c, f.packets, kSeed), f.rules, f.want, f.packets);
        INFO("a flag left out of each mask: " << cmp.mismatches << " mismatches, first: " << cmp.first);
        CHECK(cmp.mismatches > 0);
    }

    SECTION("ports handed over in host byte order") {
        // What a classifier that forgot the byte order of the ports would see.
        std::vector<Packet> host_order = f.packets;
        for (Packet& p : host_order) {
            p.tuple.src_port = ntohs(p.tuple.src_port);
            p.tuple.dst_port = ntohs(p.tuple.dst_port);
        }
        AclClassifier c(IpFamily::ipv4, f.rules, SOCKET_ID_ANY, "diff_byteorder");
        const Comparison cmp = compare(f.rules, classifier_verdicts(c, host_order, kSeed), f.rules, f.want, f.packets);
        INFO("byte-swapped ports: " << cmp.mismatches << " mismatches, first: " << cmp.first);
        CHECK(cmp.mismatches > 0);
    }
}

// Not run by default (hidden tag): build time and classify cost of 1k and 10k random rules, for every classify
// method available. The random rules are the differential test's, built for coverage (odd prefix lengths, wide port
// ranges), so they are harder on rte_acl than a typical rule set. Busy neighbours on the CPU show up as a mean much
// above the median.  dpdk_unit_tests "[.classify-bench]"
namespace {

constexpr uint32_t kBench = 32;

// TSC cycles of each classify() call over the packets in bursts of kBench, three passes.
std::vector<uint64_t> burst_cycles(const AclClassifier& c, const std::vector<Packet>& packets) {
    const FiveTuple* tuples[kBench];
    uint16_t ports[kBench];
    L4MatchBytes l4[kBench];
    uint32_t out[kBench];
    std::vector<uint64_t> per_burst;
    for (int round = 0; round < 3; ++round)
        for (std::size_t done = 0; done + kBench <= packets.size(); done += kBench) {
            for (uint32_t i = 0; i < kBench; ++i)
                tuples[i] = &packets[done + i].tuple, ports[i] = packets[done + i].in_port,
                l4[i] = packets[done + i].l4;
            const uint64_t start = rte_rdtsc();
            c.classify(tuples, ports, l4, out, kBench);
            per_burst.push_back(rte_rdtsc() - start);
        }
    return per_burst;
}

}  // namespace

TEST_CASE("acl build and classify cost", "[.classify-bench]") {
    for (IpFamily family : {IpFamily::ipv4, IpFamily::ipv6}) {
        for (int n : {1000, 10000}) {
            Generator gen(family, kSeed + static_cast<uint64_t>(n));
            const std::vector<Rule> rules = gen.rules(n);
            const std::vector<Packet> packets = gen.packets(rules, kPackets);
            const auto t0 = std::chrono::steady_clock::now();
            std::unique_ptr<AclClassifier> built;
            try {
                // One context, whatever the rule count, so the methods can be switched on it below.
                built =
                    std::make_unique<AclClassifier>(family, rules, SOCKET_ID_ANY, "bench", 0, 0, nullptr, SIZE_MAX / 4);
            } catch (const std::exception& e) {
                WARN(n << " rules: " << e.what() << " after " << seconds_since(t0) << " s");
                continue;
            }
            const AclClassifier& c = *built;
            const double build_s = seconds_since(t0);
            // The same rules without their TCP flag and ICMP type/code tests: what those tests cost to build.
            std::vector<Rule> plain;
            for (const Rule& r : rules) plain.push_back(without_l4_test(r));
            const auto t1 = std::chrono::steady_clock::now();
            const AclClassifier without(family, plain, SOCKET_ID_ANY, "bench_plain");
            const double plain_s = seconds_since(t1);
            std::ostringstream report;
            report << (family == IpFamily::ipv4 ? "ipv4 " : "ipv6 ") << n << " rules -> " << c.expanded_rule_count()
                   << " rte_acl rules: build " << build_s << " s (" << plain_s << " s without the L4 tests, "
                   << without.expanded_rule_count() << " rte_acl rules); cycles/packet in bursts of " << kBench
                   << " (median, mean):";
            rte_acl_ctx* ctx = rte_acl_find_existing("bench");
            for (enum rte_acl_classify_alg alg :
                 {RTE_ACL_CLASSIFY_DEFAULT, RTE_ACL_CLASSIFY_SCALAR, RTE_ACL_CLASSIFY_SSE, RTE_ACL_CLASSIFY_AVX2,
                  RTE_ACL_CLASSIFY_AVX512X16}) {
                if (alg != RTE_ACL_CLASSIFY_DEFAULT && rte_acl_set_ctx_classify(ctx, alg) != 0) continue;
                std::vector<uint64_t> per_burst = burst_cycles(c, packets);
                const uint64_t total = std::accumulate(per_burst.begin(), per_burst.end(), uint64_t{0});
                std::nth_element(per_burst.begin(), per_burst.begin() + per_burst.size() / 2, per_burst.end());
                // The first pass runs AclClassifier's own method (the later ones change the context's).
                const int ran = alg == RTE_ACL_CLASSIFY_DEFAULT ? c.classify_method() : alg;
                report << " " << (alg == RTE_ACL_CLASSIFY_DEFAULT ? "AclClassifier's " : "") << acl_method_name(ran)
                       << " " << per_burst[per_burst.size() / 2] / kBench << ", " << total / (per_burst.size() * kBench)
                       << ";";
            }
            // The same rules in parts of kPartRules (what sluice builds) and of smaller ones: the build and what
            // classifying the new connections of a burst costs with several contexts.
            for (std::size_t part_rules : {AclClassifier::kPartRules, AclClassifier::kPartRules / 4}) {
                const auto t2 = std::chrono::steady_clock::now();
                const AclClassifier parted(family, rules, SOCKET_ID_ANY, "bench_parts", 0, 0, nullptr, part_rules);
                const double parted_s = seconds_since(t2);
                std::vector<uint64_t> per_burst = burst_cycles(parted, packets);
                std::nth_element(per_burst.begin(), per_burst.begin() + per_burst.size() / 2, per_burst.end());
                report << " | parts of " << part_rules << ": " << parted.part_count() << " contexts, build " << parted_s
                       << " s, " << acl_method_name(parted.classify_method()) << " "
                       << per_burst[per_burst.size() / 2] / kBench << " cycles/packet;";
            }
            WARN(report.str());
        }
    }
}

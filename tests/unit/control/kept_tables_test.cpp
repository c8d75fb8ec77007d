// The tables a reload may keep from the running snapshot (build_snapshot with its LiveState): the early-drop
// tables against a linear match, for nested prefixes given in any order, and their reuse by a reload that lists the
// same set in another order; the rte_acl contexts, kept while the rules match as they did.
#include <algorithm>
#include <random>
#include <sstream>

#include <catch2/catch.hpp>
#include <rte_acl.h>
#include <rte_byteorder.h>

#include "common/five_tuple.hpp"
#include "control/snapshot_builder.hpp"

using namespace sluice;

namespace {

struct V4Prefix {
    uint32_t address;  // host byte order, host bits zero
    uint8_t length;
};

uint32_t mask_of(uint8_t length) { return length == 0 ? 0 : ~uint32_t{0} << (32 - length); }

std::string dotted(uint32_t a) {
    return std::to_string(a >> 24) + "." + std::to_string((a >> 16) & 0xff) + "." + std::to_string((a >> 8) & 0xff) +
           "." + std::to_string(a & 0xff);
}

// Prefixes in three /8s that nest: 300 of /16-/24, each with five more-specifics inside it (down to /32), and 1000
// lone ones of /25-/32. No prefix is shorter than /16, so none decides a whole probe block by itself.
std::vector<V4Prefix> nested_prefixes(std::mt19937& rng) {
    const auto in_blocks = [&rng] {
        return (uint32_t{10u + static_cast<uint32_t>(rng() % 3)} << 24) | static_cast<uint32_t>(rng() & 0x00ffffffu);
    };
    const auto length_in = [&rng](int lo, int hi) {
        return static_cast<uint8_t>(std::uniform_int_distribution<int>(lo, hi)(rng));
    };
    std::vector<V4Prefix> out;
    for (int i = 0; i < 300; ++i) {
        const uint8_t length = length_in(16, 24);
        const uint32_t base = in_blocks() & mask_of(length);
        out.push_back({base, length});
        for (int k = 0; k < 5; ++k) {
            const uint8_t inner = length_in(length + 1, 32);
            out.push_back({(base | (static_cast<uint32_t>(rng()) & ~mask_of(length))) & mask_of(inner), inner});
        }
    }
    for (int i = 0; i < 1000; ++i) {
        const uint8_t length = length_in(25, 32);
        out.push_back({in_blocks() & mask_of(length), length});
    }
    std::shuffle(out.begin(), out.end(), rng);
    return out;
}

std::string config_with(const std::vector<std::string>& prefixes) {
    std::ostringstream y;
    y << "ports:\n  - {name: lan, device: net_null0}\n  - {name: wan, device: net_null1}\n"
      << "lcores:\n  - {id: 1, roles: [rx, worker]}\n"
      << "forward:\n  - {from: lan, to: wan, next_hop_mac: \"02:00:00:00:00:02\"}\n"
      << "firewall:\n  default: allow\n  prefix_sets:\n    - name: bad\n      early_drop: true\n      prefixes: [";
    for (std::size_t i = 0; i < prefixes.size(); ++i) y << (i ? ", " : "") << prefixes[i];
    y << "]\n";
    return y.str();
}

std::unique_ptr<Snapshot> build(const std::vector<std::string>& prefixes, const LiveState& live = {}) {
    const ConfigResult r = load_config_text(config_with(prefixes), "t.yaml");
    REQUIRE(r.config);
    return build_snapshot(*r.config, {PortIdentity{"lan", 0, {}}, PortIdentity{"wan", 1, {}}}, 1, 0, 1, live);
}

}  // namespace

TEST_CASE("early-drop set: nested IPv4 prefixes in any order match as a linear search does", "[kept-tables]") {
    std::mt19937 rng(7);
    const std::vector<V4Prefix> prefixes = nested_prefixes(rng);
    std::vector<std::string> text;
    for (const V4Prefix& p : prefixes) text.push_back(dotted(p.address) + "/" + std::to_string(p.length));
    const auto snapshot = build(text);
    const PrefixSetTable* table = snapshot->firewall->blocklist_v4;
    REQUIRE(table != nullptr);

    // Random addresses in the same /8s, each prefix's first and last address, and the ones just outside it.
    std::vector<uint32_t> probes;
    for (int i = 0; i < 20000; ++i)
        probes.push_back((uint32_t{10u + static_cast<uint32_t>(rng() % 4)} << 24) | (rng() & 0x00ffffffu));
    for (int i = 0; i < 20000; ++i) {  // inside a prefix with more-specifics, so that nesting decides
        const V4Prefix& p = prefixes[rng() % prefixes.size()];
        probes.push_back(p.address | (static_cast<uint32_t>(rng()) & ~mask_of(p.length)));
    }
    for (const V4Prefix& p : prefixes) {
        const uint32_t last = p.address | ~mask_of(p.length);
        probes.insert(probes.end(), {p.address, last, p.address - 1, last + 1});
    }
    std::size_t listed = 0, wrong = 0, only_long = 0;
    for (std::size_t i = 0; i < probes.size(); ++i) {
        uint8_t shortest = 33;  // of the prefixes that hold the probe
        for (const V4Prefix& p : prefixes)
            if ((probes[i] & mask_of(p.length)) == p.address) shortest = std::min(shortest, p.length);
        const bool expected = shortest <= 32;
        listed += expected;
        only_long += expected && shortest > 24;  // listed by prefixes that end in the trie's last level
        const uint32_t be = rte_cpu_to_be_32(probes[i]);
        wrong += table->contains(reinterpret_cast<const uint8_t*>(&be)) != expected;
    }
    CHECK(wrong == 0);
    // The probes reach both sides of the set, and some are listed by long prefixes only.
    CHECK(listed > probes.size() / 4);
    CHECK(listed < probes.size() * 3 / 4);
    CHECK(only_long > 1000);
}

TEST_CASE("early-drop set: nested IPv6 prefixes in any order match as a linear search does", "[kept-tables]") {
    std::mt19937 rng(11);
    struct V6Prefix {
        uint8_t bytes[16];
        uint8_t length;
    };
    const auto covers = [](const V6Prefix& p, const uint8_t* a) {
        for (unsigned bit = 0; bit < p.length; ++bit)
            if (((p.bytes[bit / 8] ^ a[bit / 8]) >> (7 - bit % 8)) & 1) return false;
        return true;
    };
    std::vector<V6Prefix> prefixes;
    std::vector<std::string> text;
    for (int i = 0; i < 1000; ++i) {
        V6Prefix p{{0x20, 0x01, 0x0d, 0xb8}, static_cast<uint8_t>(std::uniform_int_distribution<int>(64, 128)(rng))};
        for (int b = 4; b < 16; ++b) p.bytes[b] = static_cast<uint8_t>(rng() % 4);  // few values: many nest
        for (unsigned bit = p.length; bit < 128; ++bit) p.bytes[bit / 8] &= static_cast<uint8_t>(~(0x80u >> (bit % 8)));
        char buf[64];
        std::snprintf(buf, sizeof buf, "%x:%x:%x:%x:%x:%x:%x:%x", p.bytes[0] << 8 | p.bytes[1],
                      p.bytes[2] << 8 | p.bytes[3], p.bytes[4] << 8 | p.bytes[5], p.bytes[6] << 8 | p.bytes[7],
                      p.bytes[8] << 8 | p.bytes[9], p.bytes[10] << 8 | p.bytes[11], p.bytes[12] << 8 | p.bytes[13],
                      p.bytes[14] << 8 | p.bytes[15]);
        text.push_back(std::string(buf) + "/" + std::to_string(p.length));
        prefixes.push_back(p);
    }
    const auto snapshot = build(text);
    const PrefixSetTable* table = snapshot->firewall->blocklist_v6;
    REQUIRE(table != nullptr);
    std::vector<std::array<uint8_t, 16>> probes(20000);
    for (auto& a : probes) {
        a = {0x20, 0x01, 0x0d, 0xb8};
        for (int b = 4; b < 16; ++b) a[b] = static_cast<uint8_t>(rng() % 4);
    }
    std::size_t listed = 0, wrong = 0;
    for (std::size_t i = 0; i < probes.size(); ++i) {
        const bool expected = std::any_of(prefixes.begin(), prefixes.end(),
                                          [&](const V6Prefix& p) { return covers(p, probes[i].data()); });
        listed += expected;
        wrong += table->contains(probes[i].data()) != expected;
    }
    CHECK(wrong == 0);
    CHECK(listed > 0);
    CHECK(listed < probes.size());
}

TEST_CASE("early-drop set: a reload that lists the same prefixes in another order keeps the tables", "[kept-tables]") {
    std::vector<std::string> text = {"198.51.100.0/24", "203.0.113.0/28", "10.0.0.0/8", "10.1.2.3/32", "2001:db8::/32"};
    const auto first = build(text);
    REQUIRE(first->firewall->blocklist);
    std::reverse(text.begin(), text.end());
    LiveState live;
    live.blocklist = first->firewall->blocklist;
    CHECK(build(text, live)->firewall->blocklist == first->firewall->blocklist);
    text.pop_back();  // one prefix less: built anew
    CHECK(build(text, live)->firewall->blocklist != first->firewall->blocklist);
}

namespace {

std::string rules_config(const std::string& rules, const std::string& method = "auto") {
    return "ports:\n  - {name: lan, device: net_null0}\n  - {name: wan, device: net_null1}\n"
           "lcores:\n  - {id: 1, roles: [rx, worker]}\n"
           "forward:\n  - {from: lan, to: wan, next_hop_mac: \"02:00:00:00:00:02\"}\n"
           "firewall:\n  default: deny\n  acl_method: " +
           method + "\n  rules:\n" + rules;
}

const std::string kRules =
    "    - {name: web, protocol: tcp, destination_ports: 80, action: allow}\n"
    "    - {name: dns, protocol: udp, destination: 192.0.2.0/24, destination_ports: 53, action: allow}\n"
    "    - {name: v6, source: 2001:db8::/32, action: deny}\n";

std::unique_ptr<Snapshot> build_rules(const std::string& text, const LiveState& live = {}) {
    const ConfigResult r = load_config_text(text, "t.yaml");
    REQUIRE(r.config);
    return build_snapshot(*r.config, {PortIdentity{"lan", 0, {}}, PortIdentity{"wan", 1, {}}}, 1, 0, 1, live);
}

LiveState live_of(const Snapshot& running) {
    LiveState live;
    live.acl_v4 = running.firewall->acl_v4;
    live.acl_v6 = running.firewall->acl_v6;
    return live;
}

// The rule index the IPv4 context gives a TCP or UDP packet to dst:port from lan.
uint32_t rule_for(const Snapshot& s, uint8_t proto, uint32_t dst, uint16_t port) {
    FiveTuple t{};
    t.family = IpFamily::ipv4;
    t.proto = proto;
    t.src = IpAddress::from_v4(rte_cpu_to_be_32(0x0a000001));
    t.dst = IpAddress::from_v4(rte_cpu_to_be_32(dst));
    t.src_port = rte_cpu_to_be_16(40000);
    t.dst_port = rte_cpu_to_be_16(port);
    const FiveTuple* tuples[] = {&t};
    const uint16_t in_ports[] = {0};
    const L4MatchBytes l4[1] = {};
    uint32_t index = 0;
    s.firewall->acl_v4->classify(tuples, in_ports, l4, &index, 1);
    return index;
}

}  // namespace

TEST_CASE("rte_acl contexts: a reload whose rules match as before keeps them; any match change builds anew",
          "[kept-tables]") {
    const auto first = build_rules(rules_config(kRules));
    REQUIRE(first->firewall->acl_v4);
    REQUIRE(first->firewall->acl_v6);
    CHECK(rule_for(*first, IPPROTO_TCP, 0xc6336401, 80) == 0);

    SECTION("the same rules") {
        const auto next = build_rules(rules_config(kRules), live_of(*first));
        CHECK(next->firewall->acl_v4 == first->firewall->acl_v4);
        CHECK(next->firewall->acl_v6 == first->firewall->acl_v6);
    }
    SECTION("renamed, with another action: the contexts stay, the tables by rule id follow the config") {
        std::string renamed = kRules;
        renamed.replace(renamed.find("name: web"), 9, "name: www");
        renamed.replace(renamed.find("80, action: allow"), 17, "80, action: deny");
        const auto next = build_rules(rules_config(renamed), live_of(*first));
        CHECK(next->firewall->acl_v4 == first->firewall->acl_v4);
        CHECK(next->firewall->rule_names[0] == "www");
        CHECK(next->firewall->actions[0] == RuleAction::deny);
    }
    SECTION("a port changed: IPv4 is built anew and matches the new port; IPv6's rules are the same") {
        std::string moved = kRules;  // dns is an IPv4 rule only (its destination is)
        moved.replace(moved.find("destination_ports: 53"), 21, "destination_ports: 5353");
        const auto next = build_rules(rules_config(moved), live_of(*first));
        CHECK(next->firewall->acl_v4 != first->firewall->acl_v4);
        CHECK(next->firewall->acl_v6 == first->firewall->acl_v6);
        CHECK(rule_for(*first, IPPROTO_UDP, 0xc0000201, 53) == 1);
        CHECK(rule_for(*next, IPPROTO_UDP, 0xc0000201, 5353) == 1);
        CHECK(rule_for(*next, IPPROTO_UDP, 0xc0000201, 53) == AclClassifier::kNoMatch);
    }
    SECTION("a rule added") {
        const auto next = build_rules(
            rules_config(kRules + "    - {name: ssh, protocol: tcp, destination_ports: 22, action: allow}\n"),
            live_of(*first));
        CHECK(next->firewall->acl_v4 != first->firewall->acl_v4);
        CHECK(rule_for(*next, IPPROTO_TCP, 0xc6336401, 22) == 2);  // the third of the IPv4 context's rules
    }
    SECTION("another classify method") {
        const auto next = build_rules(rules_config(kRules, "scalar"), live_of(*first));
        CHECK(next->firewall->acl_v4 != first->firewall->acl_v4);
        CHECK(next->firewall->acl_v4->classify_method() == RTE_ACL_CLASSIFY_SCALAR);
    }
}

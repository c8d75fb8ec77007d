// Hand-written cases for AclClassifier: golden tables of (description, tuple, in_port, expected rule), each also
// checked against the reference matcher so the table and the reference cannot drift apart.
#include <algorithm>
#include <cstdio>
#include <map>
#include <random>
#include <sstream>

#include <catch2/catch.hpp>

#include <netinet/in.h>
#include <unistd.h>

#include <rte_acl.h>
#include <rte_memory.h>

#include "classify/acl_classifier.hpp"
#include "classify/acl_method.hpp"
#include "classify_test_util.hpp"

using namespace sluice;
using namespace sluice::test;

namespace {

constexpr uint32_t kNone = AclClassifier::kNoMatch;

struct Case {
    const char* description;
    FiveTuple tuple;
    uint16_t in_port;
    uint32_t expected;
};

Rule make_rule(std::string name, IpFamily family, uint16_t protocol) {
    Rule r;
    r.name = std::move(name);
    r.family = family;
    r.protocol = protocol;
    return r;
}

void check_cases(const AclClassifier& c, const std::vector<Rule>& rules, const std::vector<Case>& cases) {
    for (const Case& k : cases) {
        INFO(k.description << ": " << to_string(k.tuple) << " in_port " << k.in_port);
        CHECK(reference_first_match(rules, k.tuple, k.in_port, {}) == k.expected);
        CHECK(classify_one(c, k.tuple, k.in_port) == k.expected);
    }
}

std::vector<Rule> ipv4_rules() {
    std::vector<Rule> rules;
    Rule r = make_rule("exact", IpFamily::ipv4, IPPROTO_TCP);  // 0
    r.sources = {prefix4("192.0.2.1", 32)};
    r.destinations = {prefix4("198.51.100.0", 24)};
    r.destination_ports = {{80, 80}};
    rules.push_back(r);

    r = make_rule("udp-range", IpFamily::ipv4, IPPROTO_UDP);  // 1
    r.destinations = {prefix4("203.0.113.0", 24)};
    r.destination_ports = {{1000, 2000}};
    r.source_ports = {{53, 53}, {5353, 5353}};
    rules.push_back(r);

    r = make_rule("port-3-any-proto", IpFamily::ipv4, kAnyProtocol);  // 2
    r.in_ports = {3};
    r.destinations = {prefix4("10.0.0.0", 8)};
    rules.push_back(r);

    r = make_rule("icmp", IpFamily::ipv4, IPPROTO_ICMP);  // 3
    r.destinations = {prefix4("10.1.0.0", 16)};
    rules.push_back(r);

    r = make_rule("broad", IpFamily::ipv4, IPPROTO_TCP);  // 4
    r.destinations = {prefix4("172.16.0.0", 12)};
    rules.push_back(r);

    r = make_rule("narrow-shadowed", IpFamily::ipv4, IPPROTO_TCP);  // 5: every packet it matches, 4 matches first
    r.destinations = {prefix4("172.16.1.0", 24)};
    rules.push_back(r);

    r = make_rule("port-256", IpFamily::ipv4, IPPROTO_TCP);  // 6: a port id with a non-zero high byte
    r.in_ports = {256};
    rules.push_back(r);

    r = make_rule("any-udp", IpFamily::ipv4, IPPROTO_UDP);  // 7: /0 both ways
    r.sources = {prefix4("0.0.0.0", 0)};
    rules.push_back(r);
    return rules;
}

}  // namespace

TEST_CASE("acl ipv4: exact, prefix, port-range edges, in_port, protocol", "[classify]") {
    const std::vector<Rule> rules = ipv4_rules();
    AclClassifier c(IpFamily::ipv4, rules, SOCKET_ID_ANY, "t4_basic");
    CHECK(c.family() == IpFamily::ipv4);
    CHECK(c.rule_count() == 8);
    CHECK(c.expanded_rule_count() == 9);  // udp-range has two source ranges

    const std::vector<Case> cases = {
        {"/32 source, /24 destination, port 80", tuple4(IPPROTO_TCP, "192.0.2.1", "198.51.100.7", 40000, 80), 0, 0},
        {"/24 edge: .0", tuple4(IPPROTO_TCP, "192.0.2.1", "198.51.100.0", 1, 80), 0, 0},
        {"/24 edge: .255", tuple4(IPPROTO_TCP, "192.0.2.1", "198.51.100.255", 1, 80), 0, 0},
        {"/24 outside: next network", tuple4(IPPROTO_TCP, "192.0.2.1", "198.51.101.0", 1, 80), 0, kNone},
        {"/32 source: neighbour address", tuple4(IPPROTO_TCP, "192.0.2.2", "198.51.100.7", 40000, 80), 0, kNone},
        {"port 79", tuple4(IPPROTO_TCP, "192.0.2.1", "198.51.100.7", 40000, 79), 0, kNone},
        {"port 81", tuple4(IPPROTO_TCP, "192.0.2.1", "198.51.100.7", 40000, 81), 0, kNone},
        {"udp does not match a tcp rule", tuple4(IPPROTO_UDP, "192.0.2.1", "198.51.100.7", 40000, 80), 0, 7},
        {"port swapped bytes (80 = 0x0050 vs 0x5000)", tuple4(IPPROTO_TCP, "192.0.2.1", "198.51.100.7", 1, 0x5000), 0,
         kNone},
        {"range first-1", tuple4(IPPROTO_UDP, "1.2.3.4", "203.0.113.9", 53, 999), 0, 7},
        {"range first", tuple4(IPPROTO_UDP, "1.2.3.4", "203.0.113.9", 53, 1000), 0, 1},
        {"range last", tuple4(IPPROTO_UDP, "1.2.3.4", "203.0.113.9", 53, 2000), 0, 1},
        {"range last+1", tuple4(IPPROTO_UDP, "1.2.3.4", "203.0.113.9", 53, 2001), 0, 7},
        {"second source range", tuple4(IPPROTO_UDP, "1.2.3.4", "203.0.113.9", 5353, 1500), 0, 1},
        {"source port between the ranges", tuple4(IPPROTO_UDP, "1.2.3.4", "203.0.113.9", 54, 1500), 0, 7},
        {"in_port 3, any protocol", tuple4(IPPROTO_GRE, "1.2.3.4", "10.200.0.1", 0, 0), 3, 2},
        {"in_port 3 precedes the icmp rule", tuple4(IPPROTO_ICMP, "1.2.3.4", "10.1.0.1", 0x1234, 0x1234), 3, 2},
        {"in_port 2: icmp echo (identifier in both ports)", tuple4(IPPROTO_ICMP, "1.2.3.4", "10.1.0.1", 0x1234, 0x1234),
         2, 3},
        {"in_port 2: gre misses", tuple4(IPPROTO_GRE, "1.2.3.4", "10.200.0.1", 0, 0), 2, kNone},
        {"first match wins: narrow rule shadowed", tuple4(IPPROTO_TCP, "1.2.3.4", "172.16.1.5", 1, 2), 0, 4},
        {"/12 edge: 172.31.255.255", tuple4(IPPROTO_TCP, "1.2.3.4", "172.31.255.255", 1, 2), 0, 4},
        {"/12 outside: 172.32.0.0", tuple4(IPPROTO_TCP, "1.2.3.4", "172.32.0.0", 1, 2), 0, kNone},
        {"port id 256", tuple4(IPPROTO_TCP, "1.2.3.4", "8.8.8.8", 1, 2), 256, 6},
        {"port id 1 (256 byte-swapped)", tuple4(IPPROTO_TCP, "1.2.3.4", "8.8.8.8", 1, 2), 1, kNone},
        {"/0 matches everything udp", tuple4(IPPROTO_UDP, "255.255.255.255", "0.0.0.0", 0, 65535), 65535, 7},
    };
    check_cases(c, rules, cases);
}

TEST_CASE("acl: the order of overlapping rules decides", "[classify]") {
    Rule broad = make_rule("broad", IpFamily::ipv4, IPPROTO_TCP);
    broad.destinations = {prefix4("10.0.0.0", 8)};
    Rule narrow = make_rule("narrow", IpFamily::ipv4, IPPROTO_TCP);
    narrow.destinations = {prefix4("10.1.0.0", 16)};
    narrow.destination_ports = {{443, 443}};
    const FiveTuple both = tuple4(IPPROTO_TCP, "1.1.1.1", "10.1.2.3", 5000, 443);
    const FiveTuple broad_only = tuple4(IPPROTO_TCP, "1.1.1.1", "10.2.2.3", 5000, 443);

    AclClassifier broad_first(IpFamily::ipv4, {broad, narrow}, SOCKET_ID_ANY, "t4_order_a");
    AclClassifier narrow_first(IpFamily::ipv4, {narrow, broad}, SOCKET_ID_ANY, "t4_order_b");
    CHECK(classify_one(broad_first, both) == 0);   // broad
    CHECK(classify_one(narrow_first, both) == 0);  // narrow
    CHECK(classify_one(broad_first, broad_only) == 0);
    CHECK(classify_one(narrow_first, broad_only) == 1);
}

TEST_CASE("acl: lists expand to their cross product", "[classify]") {
    Rule r = make_rule("lists", IpFamily::ipv4, IPPROTO_TCP);
    r.in_ports = {1, 2};
    r.sources = {prefix4("192.0.2.0", 24), prefix4("198.51.100.0", 24)};
    r.destinations = {prefix4("203.0.113.10", 32)};
    r.destination_ports = {{80, 80}, {443, 445}};
    Rule icmp = make_rule("icmp-with-ports", IpFamily::ipv4, IPPROTO_ICMP);
    icmp.destination_ports = {{80, 80}, {443, 445}};  // ignored: ports mean nothing to ICMP
    icmp.source_ports = {{1, 1}};
    const std::vector<Rule> rules = {r, icmp};
    AclClassifier c(IpFamily::ipv4, rules, SOCKET_ID_ANY, "t4_lists");
    CHECK(c.expanded_rule_count() == 2 * 2 * 1 * 2 + 1);

    const std::vector<Case> cases = {
        {"port 1, first source, 80", tuple4(IPPROTO_TCP, "192.0.2.5", "203.0.113.10", 9, 80), 1, 0},
        {"port 2, second source, 444", tuple4(IPPROTO_TCP, "198.51.100.5", "203.0.113.10", 9, 444), 2, 0},
        {"port 2, second source, 445", tuple4(IPPROTO_TCP, "198.51.100.5", "203.0.113.10", 9, 445), 2, 0},
        {"port 2, 446", tuple4(IPPROTO_TCP, "198.51.100.5", "203.0.113.10", 9, 446), 2, kNone},
        {"port 3 not listed", tuple4(IPPROTO_TCP, "192.0.2.5", "203.0.113.10", 9, 80), 3, kNone},
        {"third source not listed", tuple4(IPPROTO_TCP, "192.0.3.5", "203.0.113.10", 9, 80), 1, kNone},
        {"icmp ignores port lists", tuple4(IPPROTO_ICMP, "192.0.3.5", "203.0.113.10", 0x0101, 0x0101), 7, 1},
    };
    check_cases(c, rules, cases);
}

// The method an rte_acl context runs, as rte_acl_dump prints it ("  alg=N"): rte_acl has no getter.
int context_method(const char* name) {
    const rte_acl_ctx* ctx = rte_acl_find_existing(name);
    REQUIRE(ctx != nullptr);
    std::fflush(stdout);
    std::FILE* capture = std::tmpfile();
    REQUIRE(capture != nullptr);
    const int saved = dup(STDOUT_FILENO);
    dup2(fileno(capture), STDOUT_FILENO);
    rte_acl_dump(ctx);
    std::fflush(stdout);
    dup2(saved, STDOUT_FILENO);
    close(saved);
    std::rewind(capture);
    char line[256];
    int method = -1;
    while (std::fgets(line, sizeof line, capture))
        if (std::sscanf(line, " alg=%d", &method) == 1) break;
    std::fclose(capture);
    return method;
}

TEST_CASE("acl: the classify method is the fastest one timed, and the one the context runs", "[classify]") {
    // sluice_bench reports the method classify_method() names: it must be the one the context runs, and the
    // report must name it first, with the lowest figure of the methods timed; the sample mostly matches rules.
    Rule small = make_rule("small", IpFamily::ipv4, IPPROTO_UDP);
    small.destinations = {prefix4("203.0.113.10", 32)};
    const AclClassifier few(IpFamily::ipv4, {small}, SOCKET_ID_ANY, "t4_method_few");

    Rule large = make_rule("large", IpFamily::ipv4, IPPROTO_UDP);
    for (int a = 0; a < 65; ++a) large.sources.push_back(prefix4(("10.0." + std::to_string(a) + ".0").c_str(), 24));
    for (int b = 0; b < 64; ++b) large.destinations.push_back(prefix4(("192.0.2." + std::to_string(b)).c_str(), 32));
    const AclClassifier many(IpFamily::ipv4, {large}, SOCKET_ID_ANY, "t4_method_many");
    REQUIRE(many.expanded_rule_count() == 65 * 64);
    CHECK(classify_one(many, tuple4(IPPROTO_UDP, "10.0.64.1", "192.0.2.63", 9, 53), 0) == 0);
    CHECK(classify_one(many, tuple4(IPPROTO_UDP, "10.0.65.1", "192.0.2.63", 9, 53), 0) == kNone);

    Rule web6 = make_rule("web6", IpFamily::ipv6, IPPROTO_TCP);
    web6.destinations = {prefix6("2001:db8::", 48)};
    web6.destination_ports = {{80, 80}, {443, 443}};
    const AclClassifier six(IpFamily::ipv6, {web6}, SOCKET_ID_ANY, "t6_method");

    for (const auto& [c, name] :
         {std::pair{&few, "t4_method_few"}, std::pair{&many, "t4_method_many"}, std::pair{&six, "t6_method"}}) {
        INFO(name << ": " << c->method_report());
        CHECK(context_method(name) == c->classify_method());
        const std::string chosen = acl_method_name(c->classify_method());
        REQUIRE(chosen != "scalar");  // x86-64 builds of DPDK always have sse, and scalar is not timed
        const std::string prefix = chosen + " (TSC cycles per key: ";
        REQUIRE(c->method_report().starts_with(prefix));
        // "sse 52, avx2 47, avx512x16 43; 90% of the keys matched a rule)"
        std::map<std::string, double> figures;
        std::istringstream in(c->method_report().substr(prefix.size()));
        std::string method;
        double cycles;
        char separator = ',';
        while (separator == ',' && in >> method >> cycles >> separator) figures[method] = cycles;
        REQUIRE(figures.count("sse"));
        REQUIRE(figures.count(chosen));
        for (const auto& [other, figure] : figures) CHECK(figures[chosen] <= figure);
        int matched = -1;
        in >> matched;
        CHECK(matched >= 85);  // nine in ten sample keys lie inside a rule; one in ten is random
        CHECK(matched <= 100);
    }
}

TEST_CASE("acl: the running method stays unless another is more than 5 % faster", "[classify]") {
    using T = std::pair<int, uint64_t>;
    const auto check = [](std::span<const T> timings, int keep, int method, bool kept) {
        const ClassifyChoice c = choose_classify_method(timings, keep);
        CHECK(c.method == method);
        CHECK(c.kept == kept);
    };
    const T close[] = {{RTE_ACL_CLASSIFY_SSE, 100}, {RTE_ACL_CLASSIFY_AVX2, 103}, {RTE_ACL_CLASSIFY_AVX512X16, 99}};
    check(close, 0, RTE_ACL_CLASSIFY_AVX512X16, false);
    check(close, RTE_ACL_CLASSIFY_AVX2, RTE_ACL_CLASSIFY_AVX2, true);             // 103 <= 99 x 1.05
    check(close, RTE_ACL_CLASSIFY_AVX512X16, RTE_ACL_CLASSIFY_AVX512X16, false);  // it is the fastest
    check(close, RTE_ACL_CLASSIFY_SCALAR, RTE_ACL_CLASSIFY_AVX512X16, false);     // not timed
    const T apart[] = {{RTE_ACL_CLASSIFY_SSE, 110}, {RTE_ACL_CLASSIFY_AVX512X16, 100}};
    check(apart, RTE_ACL_CLASSIFY_SSE, RTE_ACL_CLASSIFY_AVX512X16, false);  // 110 > 105
    const T edge[] = {{RTE_ACL_CLASSIFY_SSE, 105}, {RTE_ACL_CLASSIFY_AVX512X16, 100}};
    check(edge, RTE_ACL_CLASSIFY_SSE, RTE_ACL_CLASSIFY_SSE, true);
    const T tie[] = {{RTE_ACL_CLASSIFY_SSE, 100}, {RTE_ACL_CLASSIFY_AVX2, 100}};
    check(tie, RTE_ACL_CLASSIFY_AVX2, RTE_ACL_CLASSIFY_AVX2, false);  // tied: not slower
    check({}, RTE_ACL_CLASSIFY_SSE, 0, false);

    // Through the constructor: the context runs what classify_method() names, and only the method given to keep
    // can be reported as kept.
    Rule web = make_rule("web", IpFamily::ipv4, IPPROTO_TCP);
    web.destination_ports = {{80, 80}};
    const AclClassifier c(IpFamily::ipv4, {web}, SOCKET_ID_ANY, "t4_keep", 0, RTE_ACL_CLASSIFY_SSE);
    INFO(c.method_report());
    CHECK(context_method("t4_keep") == c.classify_method());
    if (c.method_report().find("(kept: within 5% of the fastest; TSC cycles per key: ") != std::string::npos)
        CHECK(c.classify_method() == RTE_ACL_CLASSIFY_SSE);
}

TEST_CASE("acl: a method given is the one the context runs; one that does not exist is refused", "[classify]") {
    Rule web = make_rule("web", IpFamily::ipv4, IPPROTO_TCP);
    web.destination_ports = {{80, 80}};
    const AclClassifier scalar(IpFamily::ipv4, {web}, SOCKET_ID_ANY, "t4_method_scalar", RTE_ACL_CLASSIFY_SCALAR);
    CHECK(scalar.classify_method() == RTE_ACL_CLASSIFY_SCALAR);
    CHECK(scalar.method_report() == "scalar (pinned)");
    CHECK(context_method("t4_method_scalar") == RTE_ACL_CLASSIFY_SCALAR);
    CHECK(classify_one(scalar, tuple4(IPPROTO_TCP, "192.0.2.1", "203.0.113.10", 9, 80), 0) == 0);
    CHECK(classify_one(scalar, tuple4(IPPROTO_TCP, "192.0.2.1", "203.0.113.10", 9, 81), 0) == kNone);
    CHECK_THROWS_WITH(AclClassifier(IpFamily::ipv4, {web}, SOCKET_ID_ANY, "t4_method_bogus", 99),
                      Catch::Contains("unknown classify method 99"));
    CHECK(acl_method_by_name("avx512x16") == RTE_ACL_CLASSIFY_AVX512X16);
    CHECK(acl_method_by_name("auto") == RTE_ACL_CLASSIFY_DEFAULT);
    CHECK(acl_method_by_name("neon") == -1);
    CHECK(std::string(acl_method_name(RTE_ACL_CLASSIFY_SSE)) == "sse");
}

TEST_CASE("acl: fragments carry ports 0 and match only rules whose ranges include 0", "[classify]") {
    Rule web = make_rule("web", IpFamily::ipv4, IPPROTO_UDP);
    web.destination_ports = {{80, 80}};
    Rule low = make_rule("low-ports", IpFamily::ipv4, IPPROTO_UDP);
    low.destination_ports = {{0, 1023}};
    const std::vector<Rule> rules = {web, low};
    AclClassifier c(IpFamily::ipv4, rules, SOCKET_ID_ANY, "t4_frag");
    check_cases(c, rules,
                {{"first fragment / whole datagram", tuple4(IPPROTO_UDP, "1.1.1.1", "2.2.2.2", 4000, 80), 0, 0},
                 {"non-first fragment", tuple4(IPPROTO_UDP, "1.1.1.1", "2.2.2.2", 0, 0), 0, 1}});
}

TEST_CASE("acl ipv6: /128, /0, prefixes across 32-bit word boundaries", "[classify]") {
    std::vector<Rule> rules;
    Rule r = make_rule("host", IpFamily::ipv6, IPPROTO_TCP);  // 0
    r.sources = {prefix6("2001:db8::1", 128)};
    r.destinations = {prefix6("2001:db8:1::", 48)};
    r.destination_ports = {{443, 443}};
    rules.push_back(r);
    r = make_rule("slash33", IpFamily::ipv6, kAnyProtocol);  // 1
    r.destinations = {prefix6("2001:db8::", 33)};
    rules.push_back(r);
    r = make_rule("slash65", IpFamily::ipv6, IPPROTO_UDP);  // 2
    r.sources = {prefix6("2001:db9:0:0:8000::", 65)};
    rules.push_back(r);
    r = make_rule("slash127", IpFamily::ipv6, IPPROTO_ICMPV6);  // 3
    r.destinations = {prefix6("fe80::2", 127)};
    rules.push_back(r);
    r = make_rule("slash96-port5", IpFamily::ipv6, kAnyProtocol);  // 4
    r.in_ports = {5};
    r.destinations = {prefix6("64:ff9b::", 96)};
    rules.push_back(r);
    r = make_rule("sctp-any", IpFamily::ipv6, IPPROTO_SCTP);  // 5
    r.destinations = {prefix6("::", 0)};
    r.source_ports = {{0, 0}, {65535, 65535}};
    rules.push_back(r);

    AclClassifier c(IpFamily::ipv6, rules, SOCKET_ID_ANY, "t6_basic");
    CHECK(c.family() == IpFamily::ipv6);
    CHECK(c.expanded_rule_count() == 7);
    const std::vector<Case> cases = {
        {"/128 source", tuple6(IPPROTO_TCP, "2001:db8::1", "2001:db8:1:ffff::1", 1, 443), 0, 0},
        {"/128 neighbour falls to /33", tuple6(IPPROTO_TCP, "2001:db8::2", "2001:db8:1::1", 1, 443), 0, 1},
        {"/48 outside, /33 inside", tuple6(IPPROTO_TCP, "2001:db8::1", "2001:db8:2::1", 1, 443), 0, 1},
        {"/33 last address", tuple6(IPPROTO_UDP, "::1", "2001:db8:7fff:ffff:ffff:ffff:ffff:ffff", 1, 2), 0, 1},
        {"/33 outside: bit 33 set", tuple6(IPPROTO_UDP, "::1", "2001:db8:8000::", 1, 2), 0, kNone},
        {"/65 inside", tuple6(IPPROTO_UDP, "2001:db9::ffff:ffff:ffff:ffff", "::1", 1, 2), 0, 2},
        {"/65 lower bound", tuple6(IPPROTO_UDP, "2001:db9::8000:0:0:0", "::1", 1, 2), 0, 2},
        {"/65 outside: bit 65 clear", tuple6(IPPROTO_UDP, "2001:db9::7fff:ffff:ffff:ffff", "::1", 1, 2), 0, kNone},
        {"/127 both addresses", tuple6(IPPROTO_ICMPV6, "::1", "fe80::3", 7, 7), 0, 3},
        {"/127 outside", tuple6(IPPROTO_ICMPV6, "::1", "fe80::4", 7, 7), 0, kNone},
        {"/96 on port 5", tuple6(IPPROTO_TCP, "::1", "64:ff9b::c000:201", 1, 2), 5, 4},
        {"/96 on port 4", tuple6(IPPROTO_TCP, "::1", "64:ff9b::c000:201", 1, 2), 4, kNone},
        {"/96 outside", tuple6(IPPROTO_TCP, "::1", "64:ff9b:0:0:0:1::", 1, 2), 5, kNone},
        {"sctp source port 0", tuple6(IPPROTO_SCTP, "::1", "::2", 0, 9), 0, 5},
        {"sctp source port 65535", tuple6(IPPROTO_SCTP, "::1", "::2", 65535, 9), 0, 5},
        {"sctp source port 1", tuple6(IPPROTO_SCTP, "::1", "::2", 1, 9), 0, kNone},
        {"sctp source port 65534", tuple6(IPPROTO_SCTP, "::1", "::2", 65534, 9), 0, kNone},
    };
    check_cases(c, rules, cases);
}

TEST_CASE("acl: an empty rule list matches nothing", "[classify]") {
    for (IpFamily family : {IpFamily::ipv4, IpFamily::ipv6}) {
        AclClassifier c(family, {}, SOCKET_ID_ANY, family == IpFamily::ipv4 ? "t4_empty" : "t6_empty");
        CHECK(c.rule_count() == 0);
        CHECK(c.expanded_rule_count() == 0);
        FiveTuple t = tuple4(IPPROTO_TCP, "1.2.3.4", "5.6.7.8", 1, 2);
        t.family = family;
        CHECK(classify_one(c, t) == kNone);
    }
}

TEST_CASE("acl: a rule that matches everything", "[classify]") {
    AclClassifier c(IpFamily::ipv4, {make_rule("all", IpFamily::ipv4, kAnyProtocol)}, SOCKET_ID_ANY, "t4_all");
    CHECK(classify_one(c, tuple4(0, "0.0.0.0", "0.0.0.0", 0, 0)) == 0);
    CHECK(classify_one(c, tuple4(255, "255.255.255.255", "255.255.255.255", 65535, 65535), 65535) == 0);
}

TEST_CASE("acl: bursts longer than kMaxBurst are classified in pieces", "[classify]") {
    Rule even = make_rule("even-port", IpFamily::ipv4, IPPROTO_UDP);
    for (uint16_t p = 0; p < 200; p += 2) even.destination_ports.push_back({p, p});
    AclClassifier c(IpFamily::ipv4, {even}, SOCKET_ID_ANY, "t4_burst");
    std::vector<FiveTuple> tuples;
    for (uint16_t p = 0; p < 200; ++p) tuples.push_back(tuple4(IPPROTO_UDP, "1.1.1.1", "2.2.2.2", 7, p));
    std::vector<const FiveTuple*> ptrs;
    for (const FiveTuple& t : tuples) ptrs.push_back(&t);
    std::vector<uint16_t> ports(tuples.size(), 0);
    std::vector<uint32_t> results(tuples.size(), 12345);
    const std::vector<L4MatchBytes> l4(tuples.size());
    c.classify(ptrs.data(), ports.data(), l4.data(), results.data(), static_cast<uint32_t>(tuples.size()));
    for (uint16_t p = 0; p < 200; ++p) {
        INFO("port " << p);
        CHECK(results[p] == (p % 2 == 0 ? 0u : kNone));
    }
}

TEST_CASE("acl: construction errors name their cause", "[classify]") {
    using Catch::Matchers::Contains;
    Rule big = make_rule("cross-product", IpFamily::ipv4, kAnyProtocol);
    for (int i = 0; i < 1500; ++i) {
        const IpAddress a = IpAddress::from_v4(htonl(0x0a000000u + static_cast<uint32_t>(i)));
        big.sources.push_back({a, 32});
        big.destinations.push_back({a, 32});
    }
    REQUIRE_THROWS_WITH(
        AclClassifier(IpFamily::ipv4, {make_rule("ok", IpFamily::ipv4, 6), big}, SOCKET_ID_ANY, "t4_err"),
        Contains("rule #1 'cross-product'") && Contains("2250000"));

    Rule wrong_family = make_rule("v6-in-v4", IpFamily::ipv6, IPPROTO_TCP);
    REQUIRE_THROWS_WITH(AclClassifier(IpFamily::ipv4, {wrong_family}, SOCKET_ID_ANY, "t4_err"),
                        Contains("'v6-in-v4' is IPv6"));

    Rule long_prefix = make_rule("slash33", IpFamily::ipv4, IPPROTO_TCP);
    long_prefix.sources = {{addr4("10.0.0.0"), 33}};
    REQUIRE_THROWS_WITH(AclClassifier(IpFamily::ipv4, {long_prefix}, SOCKET_ID_ANY, "t4_err"),
                        Contains("'slash33': prefix length 33"));

    Rule empty_range = make_rule("backwards", IpFamily::ipv4, IPPROTO_TCP);
    empty_range.destination_ports = {{90, 80}};
    REQUIRE_THROWS_WITH(AclClassifier(IpFamily::ipv4, {empty_range}, SOCKET_ID_ANY, "t4_err"),
                        Contains("port range 90-80"));

    const std::vector<Rule> one = {make_rule("one", IpFamily::ipv4, IPPROTO_TCP)};
    AclClassifier first(IpFamily::ipv4, one, SOCKET_ID_ANY, "t4_dup");
    REQUIRE_THROWS_WITH(AclClassifier(IpFamily::ipv4, one, SOCKET_ID_ANY, "t4_dup"), Contains("already exists"));
    REQUIRE_THROWS_WITH(AclClassifier(IpFamily::ipv4, one, SOCKET_ID_ANY, std::string(40, 'x')),
                        Contains("1 to 31 characters"));
    // The failed constructions leaked no context: the name is free again once `first` is gone.
    CHECK(classify_one(first, tuple4(IPPROTO_TCP, "1.1.1.1", "2.2.2.2", 1, 2)) == 0);
}

TEST_CASE("acl: a first build of rules that fit one part is one context, whatever pieces they cut into", "[classify]") {
    // Pieces are for edits: with no running classifier to keep pieces of, a region is built whole. 64 rules of one
    // rte_acl rule each in parts of 256: one region, whose pieces the rules' hashes cut at 32 to 128 rules, each order
    // of the rules elsewhere.
    std::vector<Rule> rules;
    for (uint16_t i = 0; i < 64; ++i) {
        Rule r = make_rule("port-" + std::to_string(1000 + i), IpFamily::ipv4, IPPROTO_TCP);
        r.destination_ports = {{static_cast<uint16_t>(1000 + i), static_cast<uint16_t>(1000 + i)}};
        rules.push_back(std::move(r));
    }
    std::mt19937 rng(7);
    for (int order = 0; order < 16; ++order) {
        std::shuffle(rules.begin(), rules.end(), rng);
        const std::string name = "acl_whole_" + std::to_string(order);
        const AclClassifier whole(IpFamily::ipv4, rules, SOCKET_ID_ANY, name, 0, 0, nullptr, 256);
        INFO(name);
        CHECK(whole.expanded_rule_count() == 64);
        CHECK(whole.part_count() == 1);
        CHECK(rte_acl_find_existing(name.c_str()) != nullptr);  // one context, under the name given
    }
}

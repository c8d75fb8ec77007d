// The rule language's tests of the L4 header besides ports: icmp_type and icmp_code (numbers, ranges, nftables'
// names per protocol) and tcp_flags (SET/MASK); the errors name FILE:LINE:COL.
#include <catch2/catch.hpp>

#include <string>

#include "classify/l4_match.hpp"
#include "config/config.hpp"
#include "config/config_errors.hpp"

using namespace sluice;

namespace {

std::string config_with_rules(const std::string& rules) {
    return R"(ports:
  - {name: lan, device: net_null0}
  - {name: wan, device: net_null1}
lcores:
  - {id: 1, roles: [rx, worker]}
firewall:
  rules:
)" + rules;
}

}  // namespace

TEST_CASE("config: rules match ICMP types and codes by number, range and name", "[config]") {
    const ConfigResult r = load_config_text(config_with_rules(R"(
    - {name: ping, protocol: icmp, icmp_type: echo-request, action: allow}
    - {name: ping6, protocol: icmpv6, icmp_type: [echo-request, echo-reply], icmp_code: 0, action: allow}
    - {name: numbered, protocol: icmp, icmp_type: [13, "15-18"], icmp_code: "0-3", action: deny}
    - {name: nd, protocol: icmpv6, icmp_type: [nd-neighbor-solicit, nd-router-advert], action: allow}
    - {name: wide, protocol: icmp, icmp_type: "0-255", action: deny}
)"),
                                            "icmp.yaml");
    INFO(errors_of(r));
    REQUIRE(r.config);
    const auto& rules = r.config->firewall.rules;
    REQUIRE(rules.size() == 5);
    CHECK(rules[0].icmp_types == std::vector<IcmpRange>{{8, 8}});
    CHECK(rules[0].icmp_codes.empty());
    CHECK(rules[1].icmp_types == std::vector<IcmpRange>{{128, 128}, {129, 129}});
    CHECK(rules[1].icmp_codes == std::vector<IcmpRange>{{0, 0}});
    CHECK(rules[2].icmp_types == std::vector<IcmpRange>{{13, 13}, {15, 18}});
    CHECK(rules[2].icmp_codes == std::vector<IcmpRange>{{0, 3}});
    CHECK(rules[3].icmp_types == std::vector<IcmpRange>{{135, 135}, {134, 134}});
    CHECK(rules[4].icmp_types == std::vector<IcmpRange>{{0, 255}});  // errors in it never meet the rules, the rest do
}

TEST_CASE("config: tcp_flags is SET/MASK with flag names", "[config]") {
    const ConfigResult r = load_config_text(config_with_rules(R"(
    - {name: syn-only, protocol: tcp, tcp_flags: "syn/syn,ack", action: allow}
    - name: christmas
      protocol: tcp
      tcp_flags: fin,psh,urg/fin,psh,urg
      action: deny
    - {name: no-rst, protocol: tcp, tcp_flags: /rst, action: allow}
    - {name: exactly-syn, protocol: tcp, tcp_flags: syn/all, action: allow}
    - {name: ecn, protocol: tcp, tcp_flags: "syn,ece,cwr/syn,ack,ece,cwr", action: allow}
)"),
                                            "flags.yaml");
    INFO(errors_of(r));
    REQUIRE(r.config);
    const auto& rules = r.config->firewall.rules;
    REQUIRE(rules.size() == 5);
    CHECK(rules[0].tcp_flags == TcpFlagsMatch{0x02, 0x12});
    CHECK(rules[1].tcp_flags == TcpFlagsMatch{0x29, 0x29});
    CHECK(rules[2].tcp_flags == TcpFlagsMatch{0x00, 0x04});
    CHECK(rules[3].tcp_flags == TcpFlagsMatch{0x02, 0xff});
    CHECK(rules[4].tcp_flags == TcpFlagsMatch{0xc2, 0xd2});
}

TEST_CASE("config: bad ICMP types and TCP flags are errors at their place", "[config]") {
    struct Case {
        const char* rule;
        const char* error;
    };
    // Each rule is the config's line 8, indented by four.
    const Case cases[] = {
        {"{name: a, protocol: icmp, icmp_type: echo-requets, action: allow}",
         "bad.yaml:8:44: rule 'a' icmp_type: 'echo-requets' is not a number 0-255 or a range like 3-5, nor an ICMP "
         "type name: echo-reply, destination-unreachable, source-quench"},
        {"{name: a, protocol: icmpv6, icmp_type: echo-request, icmp_code: ping, action: allow}",
         "bad.yaml:8:71: rule 'a' icmp_code: 'ping' is not a number 0-255 or a range like 3-5\n"},
        {"{name: a, protocol: icmpv6, icmp_type: router-advertisement, action: allow}",
         "bad.yaml:8:46: rule 'a' icmp_type: 'router-advertisement' is not a number 0-255 or a range like 3-5, nor an "
         "ICMPv6 type name: destination-unreachable"},
        {"{name: a, protocol: icmp, icmp_type: 256, action: allow}",
         "bad.yaml:8:44: rule 'a' icmp_type: '256' is not a number"},
        {"{name: a, protocol: icmp, icmp_type: \"9-3\", action: allow}",
         "bad.yaml:8:44: rule 'a' icmp_type: range '9-3' is written backwards\n"},
        {"{name: a, protocol: icmp, icmp_type: destination-unreachable, action: allow}",
         "bad.yaml:8:44: rule 'a' icmp_type: 'destination-unreachable' is an error message type, which rules never "
         "see"},
        {"{name: a, protocol: icmpv6, icmp_type: \"1-4\", action: allow}",
         "bad.yaml:8:46: rule 'a' icmp_type: '1-4' is an error message type"},
        {"{name: a, protocol: tcp, icmp_type: echo-request, action: allow}",
         "bad.yaml:8:43: rule 'a': icmp_type needs protocol icmp or icmpv6\n"},
        {"{name: a, icmp_code: 0, action: allow}",
         "bad.yaml:8:28: rule 'a': icmp_code needs protocol icmp or icmpv6\n"},
        {"{name: a, protocol: udp, tcp_flags: syn/syn, action: allow}",
         "bad.yaml:8:43: rule 'a': tcp_flags needs protocol tcp\n"},
        {"{name: a, protocol: tcp, tcp_flags: syn, action: allow}",
         "bad.yaml:8:43: rule 'a' tcp_flags: 'syn' needs a mask: SET/MASK, as syn/syn,ack (SYN set, ACK clear)\n"},
        {"{name: a, protocol: tcp, tcp_flags: \"syn/syn,akc\", action: allow}",
         "bad.yaml:8:43: rule 'a' tcp_flags: 'akc' is not a TCP flag (fin,syn,rst,psh,ack,urg,ece,cwr)\n"},
        {"{name: a, protocol: tcp, tcp_flags: \"syn,ack/ack\", action: allow}",
         "bad.yaml:8:43: rule 'a' tcp_flags: 'syn,ack/ack' sets syn outside its mask: it could never match\n"},
        {"{name: a, protocol: tcp, tcp_flags: /, action: allow}",
         "bad.yaml:8:43: rule 'a' tcp_flags: '/' has an empty mask: it would match every packet\n"},
    };
    for (const Case& c : cases) {
        const ConfigResult r = load_config_text(config_with_rules(std::string("    - ") + c.rule + "\n"), "bad.yaml");
        const std::string all = errors_of(r);
        INFO(c.rule << " gave:\n" << all);
        CHECK_FALSE(r.config);
        CHECK(all.find(c.error) != std::string::npos);
    }
}

TEST_CASE("rule text: the L4 tests read as the config spells them", "[config]") {
    Rule ping;
    ping.protocol = 1;
    ping.icmp_types = {{8, 8}, {13, 14}};
    ping.icmp_codes = {{0, 0}};
    CHECK(l4_match_text(ping) == "icmp_type echo-request,13-14 icmp_code 0");
    Rule syn;
    syn.protocol = 6;
    syn.tcp_flags = {0x02, 0x12};
    CHECK(l4_match_text(syn) == "tcp_flags syn/syn,ack");
    syn.tcp_flags = {0x00, 0x04};
    CHECK(l4_match_text(syn) == "tcp_flags /rst");
    Rule web;
    web.protocol = 6;
    web.destination_ports = {{80, 80}};
    CHECK(l4_match_text(web).empty());
    Rule pong6;
    pong6.family = IpFamily::ipv6;
    pong6.protocol = 58;
    pong6.icmp_types = {{129, 129}, {200, 200}};
    CHECK(l4_match_text(pong6) == "icmp_type echo-reply,200");
}

// ClassBench-like rules and traces (after Taylor & Turner, "ClassBench: a packet classification benchmark",
// INFOCOM 2005: prefixes of varied lengths, port ranges of the classes WC/HI/LO/EM/AR, a protocol mix, and a trace
// whose headers mostly fall inside some rule), in dpdk-test-acl's file formats. Host byte order throughout.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "classify/rule.hpp"
#include "common/five_tuple.hpp"
#include "config/config.hpp"

namespace sluice::bench {

struct RuleSpec {
    uint32_t src = 0, dst = 0;
    uint8_t src_len = 0, dst_len = 0;
    uint16_t sport_lo = 0, sport_hi = 65535, dport_lo = 0, dport_hi = 65535;
    uint8_t proto = 0, proto_mask = 0;  // mask 0: any protocol
};

struct TraceTuple {
    uint32_t src = 0, dst = 0;
    uint16_t sport = 0, dport = 0;
    uint8_t proto = 0;
};

// Rules and trace read from files (--rules/--trace), before the EAL starts so that a bad file fails fast.
struct AclFiles {
    std::vector<RuleSpec> rules;
    std::vector<TraceTuple> trace;
};

using Rng = std::mt19937_64;

inline uint32_t uniform(Rng& rng, uint32_t lo, uint32_t hi) {
    return std::uniform_int_distribution<uint32_t>(lo, hi)(rng);
}

inline uint32_t prefix_mask(unsigned len) { return len == 0 ? 0 : ~uint32_t{0} << (32 - len); }

bool has_ports(uint8_t proto);

std::vector<RuleSpec> generate_rules(std::size_t count, uint64_t seed);
// 90% of the headers fall inside a random rule (a random point of its box), 10% are random TCP/UDP.
std::vector<TraceTuple> generate_trace(const std::vector<RuleSpec>& rules, std::size_t count, uint64_t seed);

std::string dotted(uint32_t a);
void write_rules(const std::string& path, const std::vector<RuleSpec>& rules);
void write_trace(const std::string& path, const std::vector<TraceTuple>& trace);
std::vector<RuleSpec> read_rules(const std::string& path);
std::vector<TraceTuple> read_trace(const std::string& path);

// The rule as sluice compiles it: ingress port wild, /0 is "any", ports only for TCP/UDP/SCTP.
Rule to_rule(const RuleSpec& s, std::size_t index);
// The same rule as a config entry, for build_snapshot.
FirewallRuleConfig to_rule_config(const RuleSpec& s, std::size_t index);
FiveTuple to_tuple(const TraceTuple& t);
// First-match over the rule list, the meaning both sluice and dpdk-test-acl give the file.
uint32_t linear_match(const std::vector<RuleSpec>& rules, const TraceTuple& t);

}  // namespace sluice::bench

// ClassBench-like rule sets and traces: generated, written and read in dpdk-test-acl's formats, and turned into
// sluice's rules and tuples.
#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <sstream>
#include <stdexcept>

#include "classbench.hpp"
#include "classify/acl_classifier.hpp"
#include "options.hpp"

namespace sluice::bench {

bool has_ports(uint8_t proto) { return proto == IPPROTO_TCP || proto == IPPROTO_UDP || proto == IPPROTO_SCTP; }

namespace {

// ClassBench's port classes: wildcard, >= 1024, < 1024, exact, arbitrary range.
void random_ports(Rng& rng, bool destination, uint16_t& lo, uint16_t& hi) {
    static constexpr uint16_t kWellKnown[] = {22, 25, 53, 80, 123, 161, 389, 443, 993, 3306, 5432, 8080, 8443};
    const uint32_t pick = uniform(rng, 0, 99);
    // source ports: WC 70 HI 10 EM 10 AR 10; destination ports: WC 30 HI 10 LO 10 EM 35 AR 15
    const uint32_t wc = destination ? 30 : 70, high = wc + 10, low = destination ? high + 10 : high,
                   exact = low + (destination ? 35 : 10);
    if (pick < wc) {
        lo = 0, hi = 65535;
    } else if (pick < high) {
        lo = 1024, hi = 65535;
    } else if (pick < low) {
        lo = 0, hi = 1023;
    } else if (pick < exact) {
        lo = hi = destination && uniform(rng, 0, 1) ? kWellKnown[uniform(rng, 0, std::size(kWellKnown) - 1)]
                                                    : static_cast<uint16_t>(uniform(rng, 1, 65535));
    } else {
        lo = static_cast<uint16_t>(uniform(rng, 0, 65000));
        hi = static_cast<uint16_t>(std::min<uint32_t>(65535, lo + uniform(rng, 1, 8192)));
    }
}

}  // namespace

std::vector<RuleSpec> generate_rules(std::size_t count, uint64_t seed) {
    Rng rng(seed * 1'000'003 + count);
    std::vector<RuleSpec> rules(count);
    for (RuleSpec& r : rules) {
        r.src_len = static_cast<uint8_t>(uniform(rng, 8, 32));
        r.dst_len = static_cast<uint8_t>(uniform(rng, 8, 32));
        r.src = static_cast<uint32_t>(rng()) & prefix_mask(r.src_len);
        r.dst = static_cast<uint32_t>(rng()) & prefix_mask(r.dst_len);
        const uint32_t p = uniform(rng, 0, 99);  // TCP 45, UDP 25, ICMP 5, any 25
        if (p < 45) r.proto = IPPROTO_TCP, r.proto_mask = 0xff;
        else if (p < 70) r.proto = IPPROTO_UDP, r.proto_mask = 0xff;
        else if (p < 75) r.proto = IPPROTO_ICMP, r.proto_mask = 0xff;
        if (r.proto_mask && has_ports(r.proto)) {
            random_ports(rng, false, r.sport_lo, r.sport_hi);
            random_ports(rng, true, r.dport_lo, r.dport_hi);
        }
    }
    return rules;
}

std::vector<TraceTuple> generate_trace(const std::vector<RuleSpec>& rules, std::size_t count, uint64_t seed) {
    Rng rng(seed * 7'000'003 + rules.size());
    std::vector<TraceTuple> trace(count);
    for (TraceTuple& t : trace) {
        if (!rules.empty() && uniform(rng, 0, 9) != 0) {
            const RuleSpec& r = rules[uniform(rng, 0, static_cast<uint32_t>(rules.size() - 1))];
            t.src = r.src | (static_cast<uint32_t>(rng()) & ~prefix_mask(r.src_len));
            t.dst = r.dst | (static_cast<uint32_t>(rng()) & ~prefix_mask(r.dst_len));
            t.sport = static_cast<uint16_t>(uniform(rng, r.sport_lo, r.sport_hi));
            t.dport = static_cast<uint16_t>(uniform(rng, r.dport_lo, r.dport_hi));
            t.proto = r.proto_mask ? r.proto : static_cast<uint8_t>(uniform(rng, 0, 1) ? IPPROTO_TCP : IPPROTO_UDP);
        } else {
            t.src = static_cast<uint32_t>(rng());
            t.dst = static_cast<uint32_t>(rng());
            t.sport = static_cast<uint16_t>(rng());
            t.dport = static_cast<uint16_t>(rng());
            t.proto = uniform(rng, 0, 1) ? IPPROTO_TCP : IPPROTO_UDP;
        }
    }
    return trace;
}

std::string dotted(uint32_t a) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%u.%u.%u.%u", a >> 24, (a >> 16) & 0xff, (a >> 8) & 0xff, a & 0xff);
    return buf;
}

void write_rules(const std::string& path, const std::vector<RuleSpec>& rules) {
    std::FILE* f = std::fopen(path.c_str(), "w");
    if (!f) fail("cannot write " + path + ": " + std::strerror(errno));
    std::fprintf(f, "# %zu ClassBench-style IPv4 rules written by sluice_bench (dpdk-test-acl --rulesf format)\n",
                 rules.size());
    for (const RuleSpec& r : rules)
        std::fprintf(f, "@%s/%u\t%s/%u\t%u : %u\t%u : %u\t0x%02x/0x%02x\n", dotted(r.src).c_str(), r.src_len,
                     dotted(r.dst).c_str(), r.dst_len, r.sport_lo, r.sport_hi, r.dport_lo, r.dport_hi, r.proto,
                     r.proto_mask);
    if (std::fclose(f) != 0) fail("cannot write " + path);
}

void write_trace(const std::string& path, const std::vector<TraceTuple>& trace) {
    std::FILE* f = std::fopen(path.c_str(), "w");
    if (!f) fail("cannot write " + path + ": " + std::strerror(errno));
    std::fprintf(f, "# %zu IPv4 headers written by sluice_bench (dpdk-test-acl --tracef format)\n", trace.size());
    for (const TraceTuple& t : trace)
        std::fprintf(f, "0x%08x\t0x%08x\t%u\t%u\t%u\n", t.src, t.dst, t.sport, t.dport, t.proto);
    if (std::fclose(f) != 0) fail("cannot write " + path);
}

namespace {

bool skip_line(const std::string& line) {
    const auto p = line.find_first_not_of(" \t\r\n");
    return p == std::string::npos || line[p] == '#';
}

unsigned long field_number(const std::string& token, unsigned long limit, const std::string& where) {
    errno = 0;
    char* end = nullptr;
    const unsigned long v = std::strtoul(token.c_str(), &end, 0);
    if (errno != 0 || end == token.c_str() || *end != '\0' || v > limit)
        throw std::runtime_error(where + ": '" + token + "' is not a number up to " + std::to_string(limit));
    return v;
}

void parse_net(const std::string& token, uint32_t& addr, uint8_t& len, const std::string& where) {
    const auto slash = token.find('/');
    in_addr a{};
    if (slash == std::string::npos || inet_pton(AF_INET, token.substr(0, slash).c_str(), &a) != 1)
        throw std::runtime_error(where + ": '" + token + "' is not an IPv4 prefix a.b.c.d/len");
    len = static_cast<uint8_t>(field_number(token.substr(slash + 1), 32, where));
    addr = ntohl(a.s_addr) & prefix_mask(len);
}

// A ClassBench rule line (after the '@'): '<src/len> <dst/len> <lo> : <hi> <lo> : <hi> <proto/mask>'.
RuleSpec parse_rule(const std::vector<std::string>& t, const std::string& where) {
    if (t.size() != 9 || t[3] != ":" || t[6] != ":")
        throw std::runtime_error(where + ": expected '@src/len dst/len lo : hi lo : hi proto/mask'");
    RuleSpec r;
    parse_net(t[0], r.src, r.src_len, where);
    parse_net(t[1], r.dst, r.dst_len, where);
    r.sport_lo = static_cast<uint16_t>(field_number(t[2], 65535, where));
    r.sport_hi = static_cast<uint16_t>(field_number(t[4], 65535, where));
    r.dport_lo = static_cast<uint16_t>(field_number(t[5], 65535, where));
    r.dport_hi = static_cast<uint16_t>(field_number(t[7], 65535, where));
    const auto slash = t[8].find('/');
    if (slash == std::string::npos) throw std::runtime_error(where + ": protocol must be value/mask");
    r.proto = static_cast<uint8_t>(field_number(t[8].substr(0, slash), 255, where));
    r.proto_mask = static_cast<uint8_t>(field_number(t[8].substr(slash + 1), 255, where));
    if (r.proto_mask != 0 && r.proto_mask != 0xff)
        throw std::runtime_error(where + ": protocol mask must be 0x00 or 0xff for sluice");
    if (r.sport_lo > r.sport_hi || r.dport_lo > r.dport_hi) throw std::runtime_error(where + ": empty port range");
    const bool wild_ports = r.sport_lo == 0 && r.sport_hi == 65535 && r.dport_lo == 0 && r.dport_hi == 65535;
    if (!wild_ports && !(r.proto_mask && has_ports(r.proto)))
        throw std::runtime_error(where + ": port ranges on a rule that is not TCP/UDP/SCTP: sluice would "
                                         "ignore them, dpdk-test-acl would not");
    return r;
}

std::vector<std::string> tokens(const std::string& text) {
    std::istringstream in(text);
    std::vector<std::string> t;
    for (std::string x; in >> x;) t.push_back(x);
    return t;
}

// Calls parse(line, where) on each line of path that is neither blank nor a comment; where is "path:line". The
// first std::runtime_error it throws fails the run with its message.
void for_each_record(const std::string& path,
                     const std::function<void(const std::string& line, const std::string& where)>& parse) {
    std::ifstream f(path);
    if (!f) fail("cannot read " + path);
    int line_no = 0;
    try {
        for (std::string line; std::getline(f, line);) {
            ++line_no;
            if (!skip_line(line)) parse(line, path + ":" + std::to_string(line_no));
        }
    } catch (const std::runtime_error& e) {
        fail(e.what());
    }
}

}  // namespace

std::vector<RuleSpec> read_rules(const std::string& path) {
    std::vector<RuleSpec> rules;
    for_each_record(path, [&](const std::string& line, const std::string& where) {
        const auto at = line.find_first_not_of(" \t");
        if (line[at] != '@') throw std::runtime_error(where + ": a rule starts with '@'");
        rules.push_back(parse_rule(tokens(line.substr(at + 1)), where));
    });
    return rules;
}

std::vector<TraceTuple> read_trace(const std::string& path) {
    std::vector<TraceTuple> trace;
    for_each_record(path, [&](const std::string& line, const std::string& where) {
        const std::vector<std::string> t = tokens(line);
        if (t.size() < 5) throw std::runtime_error(where + ": expected 'src dst sport dport proto'");
        TraceTuple tt;
        tt.src = static_cast<uint32_t>(field_number(t[0], UINT32_MAX, where));
        tt.dst = static_cast<uint32_t>(field_number(t[1], UINT32_MAX, where));
        tt.sport = static_cast<uint16_t>(field_number(t[2], 65535, where));
        tt.dport = static_cast<uint16_t>(field_number(t[3], 65535, where));
        tt.proto = static_cast<uint8_t>(field_number(t[4], 255, where));
        trace.push_back(tt);
    });
    if (trace.empty()) fail(path + ": no trace records");
    return trace;
}

Rule to_rule(const RuleSpec& s, std::size_t index) {
    Rule r;
    r.name = "r" + std::to_string(index);
    r.family = IpFamily::ipv4;
    if (s.src_len) r.sources = {Prefix{IpAddress::from_v4(htonl(s.src)), s.src_len}};
    if (s.dst_len) r.destinations = {Prefix{IpAddress::from_v4(htonl(s.dst)), s.dst_len}};
    r.protocol = s.proto_mask ? s.proto : kAnyProtocol;
    if (s.sport_lo != 0 || s.sport_hi != 65535) r.source_ports = {PortRange{s.sport_lo, s.sport_hi}};
    if (s.dport_lo != 0 || s.dport_hi != 65535) r.destination_ports = {PortRange{s.dport_lo, s.dport_hi}};
    r.action = RuleAction::allow;
    return r;
}

FirewallRuleConfig to_rule_config(const RuleSpec& s, std::size_t index) {
    FirewallRuleConfig r;
    r.name = "r" + std::to_string(index);
    if (s.src_len) r.source = AddressMatch{false, {Prefix{IpAddress::from_v4(htonl(s.src)), s.src_len}}, {}};
    if (s.dst_len) r.destination = AddressMatch{false, {Prefix{IpAddress::from_v4(htonl(s.dst)), s.dst_len}}, {}};
    r.protocol = s.proto_mask ? s.proto : kAnyProtocol;
    if (s.sport_lo != 0 || s.sport_hi != 65535) r.source_ports = {PortRange{s.sport_lo, s.sport_hi}};
    if (s.dport_lo != 0 || s.dport_hi != 65535) r.destination_ports = {PortRange{s.dport_lo, s.dport_hi}};
    r.action = RuleAction::allow;
    return r;
}

FiveTuple to_tuple(const TraceTuple& t) {
    FiveTuple f;
    f.src = IpAddress::from_v4(htonl(t.src));
    f.dst = IpAddress::from_v4(htonl(t.dst));
    f.src_port = htons(t.sport);
    f.dst_port = htons(t.dport);
    f.proto = t.proto;
    f.family = IpFamily::ipv4;
    return f;
}

uint32_t linear_match(const std::vector<RuleSpec>& rules, const TraceTuple& t) {
    for (uint32_t i = 0; i < rules.size(); ++i) {
        const RuleSpec& r = rules[i];
        if (r.proto_mask && r.proto != t.proto) continue;
        if ((t.src & prefix_mask(r.src_len)) != r.src || (t.dst & prefix_mask(r.dst_len)) != r.dst) continue;
        if (t.sport < r.sport_lo || t.sport > r.sport_hi || t.dport < r.dport_lo || t.dport > r.dport_hi) continue;
        return i;
    }
    return AclClassifier::kNoMatch;
}

}  // namespace sluice::bench

// Decoding of the firewall section (prefix sets and their files, rules, addresses, port ranges) and of the address
// and port values other sections share.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/stat.h>

#include "classify/acl_method.hpp"
#include "classify/l4_match.hpp"
#include "config/config_decoder.hpp"
#include "packet/parse.hpp"

namespace sluice::config_detail {

bool parse_prefix(const std::string& text, Prefix& prefix, IpFamily& family, bool* host_bits_set) {
    const auto slash = text.find('/');
    const std::string address = text.substr(0, slash);
    prefix = Prefix{};
    if (inet_pton(AF_INET, address.c_str(), prefix.address.bytes) == 1) {
        family = IpFamily::ipv4;
    } else if (inet_pton(AF_INET6, address.c_str(), prefix.address.bytes) == 1) {
        family = IpFamily::ipv6;
    } else {
        return false;
    }
    const unsigned max = family == IpFamily::ipv4 ? 32 : 128;
    unsigned length = max;
    if (slash != std::string::npos) {
        const std::string digits = text.substr(slash + 1);
        if (digits.empty() || digits.size() > 3 || digits.find_first_not_of("0123456789") != std::string::npos)
            return false;
        length = static_cast<unsigned>(std::stoul(digits));
        if (length > max) return false;
    }
    prefix.length = static_cast<uint8_t>(length);
    bool cleared = false;
    for (unsigned bit = length; bit < max; ++bit) {
        const uint8_t mask = static_cast<uint8_t>(0x80u >> (bit % 8));
        cleared |= (prefix.address.bytes[bit / 8] & mask) != 0;
        prefix.address.bytes[bit / 8] &= static_cast<uint8_t>(~mask);
    }
    if (host_bits_set) *host_bits_set = cleared;
    return true;
}

NetworkText parse_network(const std::string& text, Prefix& prefix, IpFamily& family) {
    bool host_bits_set = false;
    if (!parse_prefix(text, prefix, family, &host_bits_set)) return NetworkText::not_a_prefix;
    return host_bits_set ? NetworkText::host_bits_set : NetworkText::ok;
}

std::string host_bits_message(const std::string& text, const Prefix& network, IpFamily family) {
    return text + " has host bits set; did you mean " + to_string(network.address, family) + "/" +
           std::to_string(network.length) + "?";
}

bool decode_host(Decoder& d, const YAML::Node& v, const std::string& what, IpAddress& address, IpFamily& family) {
    const std::string text = v.IsScalar() ? v.Scalar() : "";
    Prefix p;
    if (text.find('/') != std::string::npos || !parse_prefix(text, p, family)) {
        d.error(v, what + ": '" + text + "' is not an IPv4 or IPv6 address");
        return false;
    }
    address = p.address;
    return true;
}

std::vector<YAML::Node> one_or_list(Decoder& d, const YAML::Node& node, const std::string& what) {
    std::vector<YAML::Node> items;
    if (!node.IsSequence()) return {node};
    for (const YAML::Node& n : node) items.push_back(n);
    if (items.empty()) d.error(node, what + " is an empty list");
    return items;
}

std::vector<PortRange> decode_port_ranges(Decoder& d, const YAML::Node& node, const std::string& what) {
    std::vector<PortRange> ranges;
    const std::vector<YAML::Node> items = one_or_list(d, node, what);
    for (const YAML::Node& item : items) {
        const std::string text = item.IsScalar() ? item.Scalar() : "";
        const auto dash = text.find('-');
        const auto number = [](const std::string& t, unsigned long& out) {
            if (t.empty() || t.size() > 5 || t.find_first_not_of("0123456789") != std::string::npos) return false;
            out = std::stoul(t);
            return out <= 65535;
        };
        unsigned long first = 0, last = 0;
        if (!number(text.substr(0, dash), first) ||
            (dash != std::string::npos && !number(text.substr(dash + 1), last))) {
            d.error(item, what + ": '" + text + "' is not a port (0-65535) or range like 1000-2000");
            continue;
        }
        if (dash == std::string::npos) last = first;
        if (first > last) {
            d.error(item, what + ": range '" + text + "' is written backwards (did you mean " + std::to_string(last) +
                              "-" + std::to_string(first) + "?)");
            continue;
        }
        ranges.push_back({static_cast<uint16_t>(first), static_cast<uint16_t>(last)});
    }
    return ranges;
}

void decode_window_check(Decoder& d, const YAML::Node& node, const std::string& what, TcpWindowCheck& check) {
    const std::string text = node.IsScalar() ? node.Scalar() : "";
    if (text == "strict") check = TcpWindowCheck::strict;
    else if (text == "liberal") check = TcpWindowCheck::liberal;
    else if (text == "off") check = TcpWindowCheck::off;
    else d.error(node, what + ": tcp_window_check '" + text + "' is not strict, liberal or off");
}

namespace {

void add_prefix(std::vector<Prefix>& v4, std::vector<Prefix>& v6, const Prefix& p, IpFamily family) {
    (family == IpFamily::ipv4 ? v4 : v6).push_back(p);
}

// One prefix per line, '#' starts a comment. Errors name the file and line.
void load_prefix_file(Decoder& d, const YAML::Node& at, Config& config, PrefixSetConfig& set) {
    std::filesystem::path path = set.file;
    if (path.is_relative()) path = std::filesystem::path(config.path).parent_path() / path;
    struct stat st {};
    if (stat(path.c_str(), &st) != 0)
        return d.error(at, "prefix set '" + set.name + "': cannot read " + path.string() + ": " + std::strerror(errno));
    // The size limit means nothing for a device or a FIFO (/dev/zero never ends, a FIFO may never answer).
    if (!S_ISREG(st.st_mode))
        return d.error(at, "prefix set '" + set.name + "': " + path.string() + " is not a regular file");
    if (static_cast<std::size_t>(st.st_size) > kMaxPrefixFileBytes)
        return d.error(at, "prefix set '" + set.name + "': " + path.string() + " is " + std::to_string(st.st_size) +
                               " bytes, over the limit of " + std::to_string(kMaxPrefixFileBytes));
    std::string bytes;
    if (!read_config_text(path, bytes))
        return d.error(at, "prefix set '" + set.name + "': cannot read " + path.string() + ": " + std::strerror(errno));
    config.inputs.push_back({path.string(), content_hash(bytes)});
    std::istringstream in(std::move(bytes));
    std::string line;
    int number = 0, reported = 0;
    while (std::getline(in, line)) {
        ++number;
        const auto hash = line.find('#');
        if (hash != std::string::npos) line.resize(hash);
        const auto first = line.find_first_not_of(" \t\r");
        if (first == std::string::npos) continue;
        const auto last = line.find_last_not_of(" \t\r");
        const std::string text = line.substr(first, last - first + 1);
        Prefix prefix;
        IpFamily family;
        const NetworkText parsed = parse_network(text, prefix, family);
        if (parsed == NetworkText::ok) {
            add_prefix(set.v4, set.v6, prefix, family);
        } else if (++reported <= 10) {  // a broken file should not print a million lines
            d.errors().push_back({path.string(), number, static_cast<int>(first) + 1,
                                  parsed == NetworkText::host_bits_set
                                      ? host_bits_message(text, prefix, family)
                                      : "'" + text + "' is not an IPv4 or IPv6 prefix"});
        }
    }
    if (reported > 10)
        d.errors().push_back(
            {path.string(), 0, 0, std::to_string(reported) + " lines are not networks (first 10 shown)"});
}

void decode_prefix_sets(Decoder& d, const YAML::Node& node, Config& config) {
    if (!d.sequence(node, "firewall prefix_sets")) return;
    for (const YAML::Node& s : node) {
        if (!d.map(s, "a prefix set", {"name", "prefixes", "file", "early_drop"})) continue;
        PrefixSetConfig set;
        const std::size_t errors_before = d.errors().size();
        d.field(s, "name", "a prefix set", true, [&](const YAML::Node& v) { d.name(v, "prefix set name", set.name); });
        const std::string what = "prefix set '" + set.name + "'";
        for (const PrefixSetConfig& other : config.firewall.prefix_sets)
            if (other.name == set.name && !set.name.empty()) d.error(s["name"], what + " is defined twice");
        if (s["prefixes"] && s["file"]) d.error(s, what + ": give either prefixes or file, not both");
        if (!s["prefixes"] && !s["file"]) d.error(s, what + " needs 'prefixes' (a list) or 'file'");
        d.field(s, "prefixes", what, false, [&](const YAML::Node& v) {
            if (!d.sequence(v, what + " prefixes")) return;
            for (const YAML::Node& p : v) {
                Prefix prefix;
                IpFamily family;
                const std::string text = p.IsScalar() ? p.Scalar() : "";
                const NetworkText parsed = parse_network(text, prefix, family);
                if (parsed == NetworkText::ok) add_prefix(set.v4, set.v6, prefix, family);
                else if (parsed == NetworkText::host_bits_set)
                    d.error(p, what + ": " + host_bits_message(text, prefix, family));
                else d.error(p, what + ": '" + text + "' is not an IPv4 or IPv6 prefix");
            }
        });
        d.field(s, "file", what, false, [&](const YAML::Node& v) {
            if (d.string(v, what + " file", set.file)) load_prefix_file(d, v, config, set);
        });
        d.field(s, "early_drop", what, false,
                [&](const YAML::Node& v) { d.boolean(v, what + " early_drop", set.early_drop); });
        if (set.v4.empty() && set.v6.empty() && (s["prefixes"] || s["file"]) && d.errors().size() == errors_before)
            d.error(s, what + " is empty");
        config.firewall.prefix_sets.push_back(std::move(set));
    }
}

// A rule's source or destination: a prefix, "@set", or a list of them.
AddressMatch decode_address(Decoder& d, const YAML::Node& node, const std::string& what, const Config& config) {
    AddressMatch match;
    match.any = false;
    const std::vector<YAML::Node> items = one_or_list(d, node, what);
    for (const YAML::Node& item : items) {
        const std::string text = item.IsScalar() ? item.Scalar() : "";
        if (text.starts_with("@")) {
            const std::string set_name = text.substr(1);
            const auto set = std::find_if(config.firewall.prefix_sets.begin(), config.firewall.prefix_sets.end(),
                                          [&](const PrefixSetConfig& s) { return s.name == set_name; });
            if (set == config.firewall.prefix_sets.end()) {
                d.error(item, what + ": unknown prefix set '" + set_name + "'");
                continue;
            }
            match.v4.insert(match.v4.end(), set->v4.begin(), set->v4.end());
            match.v6.insert(match.v6.end(), set->v6.begin(), set->v6.end());
            continue;
        }
        Prefix prefix;
        IpFamily family;
        const NetworkText parsed = parse_network(text, prefix, family);
        if (parsed == NetworkText::ok) add_prefix(match.v4, match.v6, prefix, family);
        else if (parsed == NetworkText::host_bits_set)
            d.error(item, what + ": " + host_bits_message(text, prefix, family));
        else d.error(item, what + ": '" + text + "' is not a prefix or @set");
    }
    return match;
}

// A rule's icmp_type or icmp_code: one item or a list of numbers 0-255, ranges like 3-5 and, for types, the names
// of the rule's protocol (icmp or icmpv6, as nftables spells them).
std::vector<IcmpRange> decode_icmp_ranges(Decoder& d, const YAML::Node& node, const std::string& what,
                                          uint16_t protocol, bool types) {
    std::vector<IcmpRange> ranges;
    const auto proto = static_cast<uint8_t>(protocol);
    for (const YAML::Node& item : one_or_list(d, node, what)) {
        const std::string text = item.IsScalar() ? item.Scalar() : "";
        const int named = types ? icmp_type_by_name(proto, text) : -1;
        const auto dash = text.find('-');
        const int first = named >= 0 ? named : parse_decimal_byte(text.substr(0, dash));
        const int last = named >= 0 || dash == std::string::npos ? first : parse_decimal_byte(text.substr(dash + 1));
        const IcmpRange range{static_cast<uint8_t>(first), static_cast<uint8_t>(last)};
        if (first < 0 || last < 0) {
            d.error(item, what + ": '" + text + "' is not a number 0-255 or a range like 3-5" +
                              (types ? ", nor an " + std::string(proto == kIpProtoIcmp ? "ICMP" : "ICMPv6") +
                                           " type name: " + icmp_type_names(proto)
                                     : std::string()));
            continue;
        }
        if (range.first > range.last) {
            d.error(item, what + ": range '" + text + "' is written backwards");
            continue;
        }
        // An error quotes a packet: it passes with the connection it quotes or is dropped, never meets the rules.
        bool only_errors = types;
        for (unsigned type = range.first; only_errors && type <= range.last; ++type)
            only_errors = is_icmp_error(proto, static_cast<uint8_t>(type));
        if (only_errors) {
            d.error(item, what + ": '" + text +
                              "' is an error message type, which rules never see: an error passes "
                              "with the connection whose packet it quotes (related) or is dropped (icmp_unrelated)");
            continue;
        }
        ranges.push_back(range);
    }
    return ranges;
}

// A rule's tcp_flags: "SET/MASK" with comma-separated flag names, matching (flags & MASK) == SET as pf's
// `flags S/SA` and nftables' `tcp flags syn / syn,ack` do; MASK may be "all", SET may be empty ("/rst").
void decode_tcp_flags(Decoder& d, const YAML::Node& v, const std::string& what, TcpFlagsMatch& match) {
    const std::string text = v.IsScalar() ? v.Scalar() : "";
    const auto slash = text.find('/');
    if (slash == std::string::npos)
        return d.error(v, what + ": '" + text + "' needs a mask: SET/MASK, as syn/syn,ack (SYN set, ACK clear)");
    const auto flags = [&](const std::string& names, uint8_t& out) {
        std::string bad;
        const int value = tcp_flags_by_names(names, bad);
        if (value < 0) d.error(v, what + ": '" + bad + "' is not a TCP flag (" + tcp_flags_text(0xff) + ")");
        out = static_cast<uint8_t>(value);
        return value >= 0;
    };
    uint8_t set = 0, mask = 0;
    if (!flags(text.substr(0, slash), set) || !flags(text.substr(slash + 1), mask)) return;
    if (mask == 0) return d.error(v, what + ": '" + text + "' has an empty mask: it would match every packet");
    if (set & ~mask)
        return d.error(v, what + ": '" + text + "' sets " + tcp_flags_text(set & ~mask) +
                              " outside its mask: it could never match");
    match = {set, mask};
}

// names: the rules' names so far (firewall.rules and the files included before); marks, when given, gets each
// decoded rule's name position (line and column, 1-based).
// A rule's action and what goes with it: rate_limit, log, tcp_window_check.
void decode_rule_action(Decoder& d, const YAML::Node& r, const std::string& what, FirewallRuleConfig& rule) {
    d.field(r, "action", what, true, [&](const YAML::Node& v) {
        const std::string text = v.IsScalar() ? v.Scalar() : "";
        if (text == "allow") rule.action = RuleAction::allow;
        else if (text == "deny") rule.action = RuleAction::deny;
        else if (text == "reject") rule.action = RuleAction::reject;
        else d.error(v, what + ": action '" + text + "' is not allow, deny or reject");
    });
    d.field(r, "rate_limit", what, false, [&](const YAML::Node& v) {
        if (!d.map(v, what + " rate_limit", {"rate", "burst", "per"})) return;
        RateLimitConfig& limit = rule.rate_limit;
        d.field(v, "rate", what + " rate_limit", true, [&](const YAML::Node& n) {
            d.integer(n, what + " rate_limit rate (new connections per second)", limit.rate, 1, 100000000);
        });
        limit.burst = limit.rate;
        d.field(v, "burst", what + " rate_limit", false,
                [&](const YAML::Node& n) { d.integer(n, what + " rate_limit burst", limit.burst, 1, 100000000); });
        d.field(v, "per", what + " rate_limit", false, [&](const YAML::Node& n) {
            const std::string per = n.IsScalar() ? n.Scalar() : "";
            if (per == "source") limit.per_source = true;
            else if (per != "rule") d.error(n, what + ": rate_limit per '" + per + "' is not rule or source");
        });
        if (r["action"] && r["action"].IsScalar() && r["action"].Scalar() != "allow")
            d.error(v, what + ": rate_limit goes with action allow only");
    });
    d.field(r, "log", what, false, [&](const YAML::Node& v) { d.boolean(v, what + " log", rule.log); });
    d.field(r, "tcp_window_check", what, false, [&](const YAML::Node& v) {
        decode_window_check(d, v, what, rule.tcp_window_check.emplace());
        if (r["action"] && r["action"].IsScalar() && r["action"].Scalar() != "allow")
            d.error(v, what + ": tcp_window_check goes with action allow only");
    });
}

// What a rule's fields say together: ports need a protocol that has them, and some family must be able to match.
// Only when its fields decoded without errors (errors_before: the count before them) is a mix of families reported.
void check_rule_matches(Decoder& d, const YAML::Node& r, const std::string& what, const FirewallRuleConfig& rule,
                        std::size_t errors_before) {
    const bool ported = rule.protocol == IPPROTO_TCP || rule.protocol == IPPROTO_UDP || rule.protocol == IPPROTO_SCTP;
    if ((!rule.source_ports.empty() || !rule.destination_ports.empty()) && !ported)
        d.error(r, what + ": ports need protocol tcp, udp or sctp");
    // The families this rule can match: each side either gives no address or has one of that family.
    const auto allows = [](const AddressMatch& m, IpFamily f) {
        return m.any || !(f == IpFamily::ipv4 ? m.v4 : m.v6).empty();
    };
    bool v4 = allows(rule.source, IpFamily::ipv4) && allows(rule.destination, IpFamily::ipv4);
    bool v6 = allows(rule.source, IpFamily::ipv6) && allows(rule.destination, IpFamily::ipv6);
    if (rule.protocol == IPPROTO_ICMP) v6 = false;
    if (rule.protocol == IPPROTO_ICMPV6) v4 = false;
    if (!v4 && !v6 && d.errors().size() == errors_before)
        d.error(r, what + " mixes address families: no IPv4 or IPv6 packet could match both its source and "
                          "destination (and protocol)");
}

void decode_rules(Decoder& d, const YAML::Node& node, Config& config, std::set<std::string>& names,
                  std::vector<std::pair<int, int>>* marks = nullptr) {
    if (!d.sequence(node, "firewall rules")) return;
    for (const YAML::Node& r : node) {
        if (!d.map(r, "a firewall rule",
                   {"name", "in_ports", "source", "destination", "protocol", "source_ports", "destination_ports",
                    "icmp_type", "icmp_code", "tcp_flags", "action", "rate_limit", "log", "tcp_window_check"}))
            continue;
        FirewallRuleConfig rule;
        const std::size_t errors_before = d.errors().size();
        d.field(r, "name", "a firewall rule", true, [&](const YAML::Node& v) { d.name(v, "rule name", rule.name); });
        const std::string what = "rule '" + rule.name + "'";
        if (!rule.name.empty() && !names.insert(rule.name).second) d.error(r["name"], what + " is defined twice");
        d.field(r, "in_ports", what, false, [&](const YAML::Node& v) {
            for (const YAML::Node& p : one_or_list(d, v, what + " in_ports")) {
                const std::string port = p.IsScalar() ? p.Scalar() : "";
                const std::string interface = config.canonical_interface(port);
                if (interface.empty()) d.error(p, what + ": unknown port or VLAN '" + port + "'");
                else rule.in_ports.push_back(interface);
            }
        });
        d.field(r, "source", what, false,
                [&](const YAML::Node& v) { rule.source = decode_address(d, v, what + " source", config); });
        d.field(r, "destination", what, false,
                [&](const YAML::Node& v) { rule.destination = decode_address(d, v, what + " destination", config); });
        d.field(r, "protocol", what, false, [&](const YAML::Node& v) {
            static const std::map<std::string, uint16_t> kNames = {{"tcp", IPPROTO_TCP},   {"udp", IPPROTO_UDP},
                                                                   {"icmp", IPPROTO_ICMP}, {"icmpv6", IPPROTO_ICMPV6},
                                                                   {"sctp", IPPROTO_SCTP}, {"any", kAnyProtocol}};
            const std::string text = v.IsScalar() ? v.Scalar() : "";
            const bool numeric =
                !text.empty() && text.size() <= 3 && text.find_first_not_of("0123456789") == std::string::npos;
            if (const auto it = kNames.find(text); it != kNames.end()) rule.protocol = it->second;
            else if (numeric && std::stoul(text) <= 255) rule.protocol = static_cast<uint16_t>(std::stoul(text));
            else
                d.error(v,
                        what + ": protocol '" + text + "' is not tcp, udp, icmp, icmpv6, sctp, any or a number 0-255");
        });
        d.field(r, "source_ports", what, false,
                [&](const YAML::Node& v) { rule.source_ports = decode_port_ranges(d, v, what + " source_ports"); });
        d.field(r, "destination_ports", what, false, [&](const YAML::Node& v) {
            rule.destination_ports = decode_port_ranges(d, v, what + " destination_ports");
        });
        const bool icmp = rule.protocol == IPPROTO_ICMP || rule.protocol == IPPROTO_ICMPV6;
        for (const bool types : {true, false})
            d.field(r, types ? "icmp_type" : "icmp_code", what, false, [&](const YAML::Node& v) {
                const std::string key = types ? "icmp_type" : "icmp_code";
                if (!icmp) return d.error(v, what + ": " + key + " needs protocol icmp or icmpv6");
                (types ? rule.icmp_types : rule.icmp_codes) =
                    decode_icmp_ranges(d, v, what + " " + key, rule.protocol, types);
            });
        d.field(r, "tcp_flags", what, false, [&](const YAML::Node& v) {
            if (rule.protocol != IPPROTO_TCP) return d.error(v, what + ": tcp_flags needs protocol tcp");
            decode_tcp_flags(d, v, what + " tcp_flags", rule.tcp_flags);
        });
        decode_rule_action(d, r, what, rule);
        check_rule_matches(d, r, what, rule, errors_before);
        if (marks) {
            const YAML::Mark at = r["name"] ? r["name"].Mark() : r.Mark();
            marks->emplace_back(at.line + 1, at.column + 1);
        }
        config.firewall.rules.push_back(std::move(rule));
    }
}

// What decoding a rule reads besides its own node: the interfaces' names (in_ports) and the prefix sets (@set).
std::string include_context(const Config& config) {
    std::string text;
    for (const std::string& interface : config.interfaces()) text += interface + "\n";
    for (const PrefixSetConfig& set : config.firewall.prefix_sets) {
        text += "@" + set.name + "\n";
        for (const auto* list : {&set.v4, &set.v6})
            text.append(reinterpret_cast<const char*>(list->data()), list->size() * sizeof(Prefix));
    }
    return content_hash(text);
}

// firewall.include: files of rules, each a YAML list written as firewall.rules; errors name the file's own lines.
// A file whose bytes and context are those of the running config's is not parsed again: its rules are copied from
// the running config's (IncludeIndex).
void decode_included_rules(Decoder& d, const YAML::Node& node, Config& config, std::set<std::string>& names) {
    if (!d.sequence(node, "firewall include")) return;
    const std::string context = include_context(config);
    for (const YAML::Node& item : node) {
        std::string file;
        if (!d.string(item, "a firewall include entry", file)) continue;
        config.firewall.include.push_back(file);
        std::filesystem::path path = file;
        if (path.is_relative()) path = std::filesystem::path(config.path).parent_path() / path;
        struct stat st {};
        if (stat(path.c_str(), &st) != 0) {
            d.error(item, "firewall include: cannot read " + path.string() + ": " + std::strerror(errno));
            continue;
        }
        std::string bytes;
        if (!S_ISREG(st.st_mode)) {
            d.error(item, "firewall include: " + path.string() + " is not a regular file");
            continue;
        }
        if (!read_config_text(path, bytes)) {
            d.error(item, "firewall include: cannot read " + path.string() + ": " + std::strerror(errno));
            continue;
        }
        const std::string hash = content_hash(bytes);
        config.inputs.push_back({path.string(), hash});
        if (!d.included.insert(path.string()).second) {
            d.error(item, "firewall include: " + path.string() + " is included twice");
            continue;
        }
        const std::size_t first = config.firewall.rules.size();
        const IncludeIndex::File* running = nullptr;
        if (d.previous) {
            const auto found = d.previous->include_index.files.find(path.string());
            if (found != d.previous->include_index.files.end() && found->second.hash == hash &&
                found->second.context == context &&
                found->second.first + found->second.count <= d.previous->firewall.rules.size())
                running = &found->second;
        }
        if (running) {
            const auto from = d.previous->firewall.rules.begin() + static_cast<std::ptrdiff_t>(running->first);
            const auto to = from + static_cast<std::ptrdiff_t>(running->count);
            for (auto rule = from; rule != to; ++rule)
                if (!names.insert(rule->name).second) {
                    const auto& [line, column] = running->name_marks[static_cast<std::size_t>(rule - from)];
                    d.errors().push_back({path.string(), line, column, "rule '" + rule->name + "' is defined twice"});
                }
            config.firewall.rules.insert(config.firewall.rules.end(), from, to);
            d.include_index.files[path.string()] = {hash, context, first, running->count, running->name_marks};
            continue;
        }
        Decoder own(path.string());
        YAML::Node rules;
        const auto parsing = std::chrono::steady_clock::now();
        try {
            rules = YAML::Load(bytes);
        } catch (const YAML::ParserException& e) {
            own.error(e.mark, "YAML syntax: " + e.msg);
        }
        d.included_yaml_ms +=
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - parsing).count();
        std::vector<std::pair<int, int>> marks;
        if (own.errors().empty()) {
            if (!rules.IsSequence()) own.error(rules, "a firewall include file must be a list of rules");
            else decode_rules(own, rules, config, names, &marks);
        }
        if (own.errors().empty())
            d.include_index.files[path.string()] = {hash, context, first, config.firewall.rules.size() - first,
                                                    std::move(marks)};
        for (ConfigError& e : own.errors()) d.errors().push_back(std::move(e));
        for (ConfigError& w : own.warnings()) d.warnings().push_back(std::move(w));
    }
}

}  // namespace

void decode_firewall(Decoder& d, const YAML::Node& node, Config& config) {
    if (!d.map(node, "firewall",
               {"default", "loose_pickup", "table_size", "ipv6_table_size", "timeouts", "prefix_sets", "rules",
                "include", "log_default", "log_rate", "acl_method", "tcp_window_check"}))
        return;
    FirewallConfig& fw = config.firewall;
    fw.enabled = true;
    d.field(node, "default", "firewall", false, [&](const YAML::Node& v) {
        const std::string text = v.IsScalar() ? v.Scalar() : "";
        if (text == "allow") fw.default_action = RuleAction::allow;
        else if (text == "deny") fw.default_action = RuleAction::deny;
        else d.error(v, "firewall default '" + text + "' is not allow or deny");
    });
    d.field(node, "loose_pickup", "firewall", false,
            [&](const YAML::Node& v) { d.boolean(v, "loose_pickup", fw.loose_pickup); });
    d.field(node, "tcp_window_check", "firewall", false,
            [&](const YAML::Node& v) { decode_window_check(d, v, "firewall", fw.tcp_window_check); });
    d.field(node, "log_default", "firewall", false,
            [&](const YAML::Node& v) { d.boolean(v, "log_default", fw.log_default); });
    d.field(node, "log_rate", "firewall", false, [&](const YAML::Node& v) {
        d.integer(v, "log_rate (lines per second and worker)", fw.log_rate, 1, 10000);
    });
    d.field(node, "table_size", "firewall", false,
            [&](const YAML::Node& v) { d.integer(v, "table_size", fw.table_size, 1024, 1 << 24); });
    d.field(node, "ipv6_table_size", "firewall", false, [&](const YAML::Node& v) {
        if (d.integer(v, "ipv6_table_size", fw.ipv6_table_size, 1024, 1 << 24) && fw.ipv6_table_size > fw.table_size)
            d.error(v, "ipv6_table_size " + std::to_string(fw.ipv6_table_size) + " is above table_size " +
                           std::to_string(fw.table_size) +
                           " (it is the share of table_size IPv6 connections may take)");
    });
    d.field(node, "acl_method", "firewall", false, [&](const YAML::Node& v) {
        const std::string text = v.IsScalar() ? v.Scalar() : "";
        const int method = acl_method_by_name(text);
        if (method < 0) d.error(v, "firewall acl_method '" + text + "' is none of " + acl_method_names());
        else fw.acl_method = method;
    });
    d.field(node, "timeouts", "firewall", false, [&](const YAML::Node& v) {
        struct Entry {
            const char* key;
            uint32_t ConnTimeouts::*field;
        };
        static const Entry kEntries[] = {{"tcp_syn_sent", &ConnTimeouts::tcp_syn_sent},
                                         {"tcp_syn_recv", &ConnTimeouts::tcp_syn_recv},
                                         {"tcp_established", &ConnTimeouts::tcp_established},
                                         {"tcp_fin_wait", &ConnTimeouts::tcp_fin_wait},
                                         {"tcp_close_wait", &ConnTimeouts::tcp_close_wait},
                                         {"tcp_last_ack", &ConnTimeouts::tcp_last_ack},
                                         {"tcp_time_wait", &ConnTimeouts::tcp_time_wait},
                                         {"tcp_close", &ConnTimeouts::tcp_close},
                                         {"udp_unreplied", &ConnTimeouts::udp_unreplied},
                                         {"udp_replied", &ConnTimeouts::udp_replied},
                                         {"icmp", &ConnTimeouts::icmp},
                                         {"other", &ConnTimeouts::other}};
        if (!v.IsMap()) return d.error(v, "firewall timeouts must be a mapping");
        d.unique_keys(v, "firewall timeouts");
        for (const auto& kv : v) {
            const std::string key = kv.first.Scalar();
            const auto entry =
                std::find_if(std::begin(kEntries), std::end(kEntries), [&](const Entry& e) { return key == e.key; });
            if (entry == std::end(kEntries)) {
                d.error(kv.first, "unknown key '" + key + "' in firewall timeouts");
                continue;
            }
            d.integer(kv.second, "timeout " + key + " (seconds)", fw.timeouts.*(entry->field), 1, 30LL * 86400);
        }
    });
    d.field(node, "prefix_sets", "firewall", false, [&](const YAML::Node& v) { decode_prefix_sets(d, v, config); });
    std::set<std::string> names;
    d.field(node, "rules", "firewall", false, [&](const YAML::Node& v) { decode_rules(d, v, config, names); });
    d.field(node, "include", "firewall", false,
            [&](const YAML::Node& v) { decode_included_rules(d, v, config, names); });
    fw.rules.shrink_to_fit();  // held until the next reload, beside the candidate's: no room left to grow into
}

}  // namespace sluice::config_detail

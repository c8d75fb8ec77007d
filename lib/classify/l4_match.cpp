#include "classify/l4_match.hpp"

#include <algorithm>

#include "common/ip_proto.hpp"

namespace sluice {
namespace {

struct NamedValue {
    const char* name;
    uint8_t value;
};

// nftables' names (nft describe icmp_type, icmpv6_type).
constexpr NamedValue kIcmpTypes[] = {
    {"echo-reply", 0},         {"destination-unreachable", 3}, {"source-quench", 4},        {"redirect", 5},
    {"echo-request", 8},       {"router-advertisement", 9},    {"router-solicitation", 10}, {"time-exceeded", 11},
    {"parameter-problem", 12}, {"timestamp-request", 13},      {"timestamp-reply", 14},     {"info-request", 15},
    {"info-reply", 16},        {"address-mask-request", 17},   {"address-mask-reply", 18},
};
constexpr NamedValue kIcmpv6Types[] = {
    {"destination-unreachable", 1}, {"packet-too-big", 2},        {"time-exceeded", 3},
    {"parameter-problem", 4},       {"echo-request", 128},        {"echo-reply", 129},
    {"mld-listener-query", 130},    {"mld-listener-report", 131}, {"mld-listener-done", 132},
    {"nd-router-solicit", 133},     {"nd-router-advert", 134},    {"nd-neighbor-solicit", 135},
    {"nd-neighbor-advert", 136},    {"nd-redirect", 137},         {"router-renumbering", 138},
    {"ind-neighbor-solicit", 141},  {"ind-neighbor-advert", 142}, {"mld2-listener-report", 143},
};
// RFC 9293 3.1 and RFC 3168 6.1: bit 0 is FIN.
constexpr NamedValue kTcpFlags[] = {{"fin", 0x01}, {"syn", 0x02}, {"rst", 0x04}, {"psh", 0x08},
                                    {"ack", 0x10}, {"urg", 0x20}, {"ece", 0x40}, {"cwr", 0x80}};

template <std::size_t N>
int find_value(const NamedValue (&table)[N], std::string_view name) {
    for (const NamedValue& entry : table)
        if (name == entry.name) return entry.value;
    return -1;
}

template <typename Visit>
void for_each_icmp_type(uint8_t protocol, Visit visit) {
    if (protocol == kIpProtoIcmp)
        for (const NamedValue& entry : kIcmpTypes) visit(entry);
    else if (protocol == kIpProtoIcmpv6)
        for (const NamedValue& entry : kIcmpv6Types) visit(entry);
}

std::string range_text(const IcmpRange& range, const auto& single) {
    return range.first == range.last ? single(range.first)
                                     : std::to_string(range.first) + "-" + std::to_string(range.last);
}

}  // namespace

int icmp_type_by_name(uint8_t protocol, std::string_view name) {
    if (protocol == kIpProtoIcmp) return find_value(kIcmpTypes, name);
    if (protocol == kIpProtoIcmpv6) return find_value(kIcmpv6Types, name);
    return -1;
}

std::string icmp_type_text(uint8_t protocol, uint8_t type) {
    std::string text = std::to_string(type);
    for_each_icmp_type(protocol, [&](const NamedValue& entry) {
        if (entry.value == type) text = entry.name;
    });
    return text;
}

std::string icmp_type_names(uint8_t protocol) {
    std::string names;
    for_each_icmp_type(
        protocol, [&](const NamedValue& entry) { names += (names.empty() ? "" : ", ") + std::string(entry.name); });
    return names;
}

int parse_decimal_byte(std::string_view text) {
    if (text.empty() || text.size() > 3 || text.find_first_not_of("0123456789") != std::string_view::npos) return -1;
    int value = 0;
    for (const char c : text) value = value * 10 + (c - '0');
    return value <= 255 ? value : -1;
}

int tcp_flag_by_name(std::string_view name) { return find_value(kTcpFlags, name); }

int tcp_flags_by_names(std::string_view names, std::string& bad_name) {
    if (names == "all") return 0xff;
    int flags = 0;
    for (std::size_t at = 0; at < names.size();) {
        const std::size_t comma = std::min(names.find(',', at), names.size());
        const std::string_view name = names.substr(at, comma - at);
        const int bit = tcp_flag_by_name(name);
        if (bit < 0) {
            bad_name = name;
            return -1;
        }
        flags |= bit;
        at = comma + 1;
    }
    return flags;
}

std::string tcp_flags_text(uint8_t flags) {
    std::string text;
    for (const NamedValue& entry : kTcpFlags)
        if (flags & entry.value) text += (text.empty() ? "" : ",") + std::string(entry.name);
    return text;
}

std::string l4_match_text(const Rule& rule) {
    std::string text;
    const auto add_list = [&text](const char* key, const std::vector<IcmpRange>& list, const auto& single) {
        if (list.empty()) return;
        text += std::string(text.empty() ? "" : " ") + key + " ";
        for (std::size_t k = 0; k < list.size(); ++k) text += (k ? "," : "") + range_text(list[k], single);
    };
    if (rule.protocol == kIpProtoIcmp || rule.protocol == kIpProtoIcmpv6) {
        const auto protocol = static_cast<uint8_t>(rule.protocol);
        add_list("icmp_type", rule.icmp_types, [protocol](uint8_t type) { return icmp_type_text(protocol, type); });
        add_list("icmp_code", rule.icmp_codes, [](uint8_t code) { return std::to_string(code); });
    }
    if (rule.protocol == kIpProtoTcp && rule.tcp_flags.mask != 0)
        text += std::string(text.empty() ? "" : " ") + "tcp_flags " + tcp_flags_text(rule.tcp_flags.value) + "/" +
                tcp_flags_text(rule.tcp_flags.mask);
    return text;
}

}  // namespace sluice

// The words of the rule language for what rules match in the L4 header besides ports: ICMP and ICMPv6 type names
// (as nftables spells them) and TCP flag names, read by the config and written back wherever a rule is shown.
// Pure; any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "classify/rule.hpp"

namespace sluice {

// The type named `name` for protocol (kIpProtoIcmp or kIpProtoIcmpv6), or -1.
int icmp_type_by_name(uint8_t protocol, std::string_view name);
// The name of an ICMP/ICMPv6 type, or its number when it has none.
std::string icmp_type_text(uint8_t protocol, uint8_t type);
// Every name of protocol's types, ", "-separated: for error messages.
std::string icmp_type_names(uint8_t protocol);

// A decimal number 0-255 (an ICMP type or code), or -1.
int parse_decimal_byte(std::string_view text);

// The bit of the TCP flag named `name` (fin, syn, rst, psh, ack, urg, ece, cwr), or -1.
int tcp_flag_by_name(std::string_view name);
// The flags of a comma-separated list of names, or of "all"; 0 for empty text; -1 with bad_name set when a name is
// no flag.
int tcp_flags_by_names(std::string_view names, std::string& bad_name);
// "syn,ack"; empty for no flag.
std::string tcp_flags_text(uint8_t flags);

// A rule's tests beyond addresses, protocol and ports, as the config spells them ("icmp_type echo-request",
// "tcp_flags syn/syn,ack", "icmp_type 3-5 icmp_code 0"); empty when it has none.
std::string l4_match_text(const Rule& rule);

}  // namespace sluice

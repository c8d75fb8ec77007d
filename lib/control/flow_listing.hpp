// sluicectl flows [ADDRESS] [port N] [PROTO]: the words turned into the filter the workers walk their tables with,
// and the walks' records turned into the reply's lines. Pure functions; any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "pipeline/flow_walk.hpp"

namespace sluice {

// Words in any order: an IPv4 or IPv6 address (either endpoint; the last one given counts), "port N" (either
// endpoint's port, 0-65535; 0: any) and a protocol (tcp, udp, icmp, icmpv6). Empty text matches every connection.
// Returns false with a message in error for anything else.
bool parse_flow_filter(const std::string& text, FlowFilter& filter, std::string& error);

// The reply: "N connection(s) match, M listed", then one line per record, at most max_listed, e.g.
// "tcp 203.0.113.1:40000 -> 192.0.2.10:80 tcp_established pkts 3/2 ttl 59s -> web/10.1.0.1:8080 nat:20001".
// backend_name names a stable backend id; now_tsc and tsc_hz turn the records' expiry into seconds.
std::vector<std::string> flow_lines(const std::vector<std::unique_ptr<FlowWalk>>& walks, std::size_t max_listed,
                                    uint64_t now_tsc, uint64_t tsc_hz,
                                    const std::function<std::string(uint32_t)>& backend_name);

}  // namespace sluice

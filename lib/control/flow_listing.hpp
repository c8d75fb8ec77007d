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
// "tcp 203.0.113.1:40000 -> 192.0.2.10:80 tcp_established pkts 3/2 ttl 59s -> web/10.1.0.1:8080 nat:20001", a TCP
// connection's followed by its window tracking (tcp_window_text).
// backend_name names a stable backend id; now_tsc and tsc_hz turn the records' expiry into seconds.
// A TCP connection's sequence and window tracking, one clause per side (initiator, then responder), e.g.
// "window strict; initiator end 1001 maxend 66536 maxwin 64256 maxack 5001 scale 7 challenged; responder
// ...": the check, each side's highest sequence sent plus one, the highest its peer lets it send, its largest
// window (scaled), the highest acknowledgment it sent (RFC 5961's RCV.NXT: where an exact RST from its peer must
// be), the scale of its window field ("scale ?" until both SYNs were seen: the largest is assumed) and whether sluice
// has sent it a challenge ACK. "unseen" for a side not seen yet. Sequences in the tracked space (a syn_proxy
// connection's responder in the client's).
std::string tcp_window_text(const TcpWindow& window);

std::vector<std::string> flow_lines(const std::vector<std::unique_ptr<FlowWalk>>& walks, std::size_t max_listed,
                                    uint64_t now_tsc, uint64_t tsc_hz,
                                    const std::function<std::string(uint32_t)>& backend_name);

}  // namespace sluice

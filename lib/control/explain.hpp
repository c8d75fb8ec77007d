// "Where would this packet go?": runs the live snapshot's own lookups (worker choice, early-drop sets, the rte_acl
// rule set, the forwarding table) on a tuple and says what each decided. Control thread (it holds the snapshot).
#pragma once

#include <string>
#include <vector>

#include "control/snapshot_builder.hpp"
#include "pipeline/snapshot.hpp"

namespace sluice {

struct ExplainQuery {
    FiveTuple tuple;
    std::string in_port;  // port name; empty: every port's forward entry is shown
};

// "tcp 10.0.0.1:1234 203.0.113.5:80 [PORT]", IPv6 as [2001:db8::1]:80; protocols tcp, udp, icmp, icmpv6 or a number.
// Returns false with a message in error when the text is not such a query.
bool parse_explain_query(const std::string& text, ExplainQuery& query, std::string& error);

// One line per decision, in the order a packet meets them.
std::vector<std::string> explain(const Snapshot& snapshot, const std::vector<PortIdentity>& ports, uint16_t worker_count,
                                 const ExplainQuery& query);

}  // namespace sluice

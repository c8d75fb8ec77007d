// "Where would this packet go?": runs the data path's own decision functions (the RX lcore's early drop, the
// stateful stage's triage, the rules' verdict, the load balancer's pick) on the live snapshot for a tuple, and says
// what each decided. Control thread (it holds the snapshot).
#pragma once

#include <string>
#include <vector>

#include "common/drop_reason.hpp"
#include "control/snapshot_builder.hpp"
#include "lb/lb_decision.hpp"
#include "pipeline/snapshot.hpp"
#include "pipeline/stateful_stage.hpp"

namespace sluice {

struct ExplainQuery {
    FiveTuple tuple;
    std::string in_port;  // port name; empty: every port's forward entry is shown
    L4MatchBytes l4;      // the TCP flags or ICMP type and code the rules see
};

// "tcp 10.0.0.1:1234 203.0.113.5:80 [PORT] [flags syn,ack]", IPv6 as [2001:db8::1]:80; protocols tcp, udp, icmp,
// icmpv6 or a number; ICMP takes "type NAME|N" and "code N". Without flags or type: the packet that opens such a
// connection (opening_match_bytes: a SYN, an echo request). Returns false with a message in error when the text is
// not such a query.
bool parse_explain_query(const std::string& text, ExplainQuery& query, std::string& error);

// What the data path does with the first packet of a new flow (a TCP SYN; any UDP or ICMP packet) with those L4
// bytes that came in on in_port (UINT16_MAX: no port), with no rate limit or cap spent and room in every table.
enum class NewPacketFate : uint8_t { forwarded, dropped, rejected, answered_with_cookie };
struct NewPacketDecision {
    NewPacketFate fate = NewPacketFate::forwarded;
    DropReason reason = DropReason::none;  // dropped: why; rejected: rule_reject
    NewPacketDestination destination{NewPacketTarget::untracked, LbTables::kNoVip};
    bool ruled = false;  // the rules decided (verdict holds what they said)
    RuleVerdict verdict;
    uint32_t maglev_slot = 0;       // destination.target == service
    uint32_t backend = kNoBackend;  // stable backend id the service picks
};
NewPacketDecision decide_new_packet(const Snapshot& snapshot, const FiveTuple& tuple, uint16_t in_port,
                                    const L4MatchBytes& l4);

// One line per decision, in the order a packet meets them.
std::vector<std::string> explain(const Snapshot& snapshot, const std::vector<PortIdentity>& ports,
                                 uint16_t worker_count, const ExplainQuery& query);

}  // namespace sluice

#include "control/explain.hpp"

#include <algorithm>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <sstream>

#include <spdlog/fmt/fmt.h>

#include "classify/l4_match.hpp"
#include "common/ip_proto.hpp"
#include "conntrack/tcp_window.hpp"
#include "pipeline/early_drop.hpp"

namespace sluice {
namespace {

bool parse_endpoint(const std::string& text, IpFamily& family, IpAddress& address, uint16_t& port) {
    std::string host, port_text;
    if (text.starts_with("[")) {
        const auto close = text.find("]:");
        if (close == std::string::npos) return false;
        host = text.substr(1, close - 1);
        port_text = text.substr(close + 2);
    } else {
        const auto colon = text.rfind(':');
        if (colon == std::string::npos) return false;
        host = text.substr(0, colon);
        port_text = text.substr(colon + 1);
    }
    if (port_text.empty() || port_text.size() > 5 || port_text.find_first_not_of("0123456789") != std::string::npos)
        return false;
    const unsigned long value = std::stoul(port_text);
    if (value > 65535) return false;
    port = htons(static_cast<uint16_t>(value));
    address = IpAddress{};
    if (inet_pton(AF_INET, host.c_str(), address.bytes) == 1) family = IpFamily::ipv4;
    else if (inet_pton(AF_INET6, host.c_str(), address.bytes) == 1) family = IpFamily::ipv6;
    else return false;
    return true;
}

const char* action_name(RuleAction action) {
    return action == RuleAction::allow ? "allow" : action == RuleAction::deny ? "deny" : "reject";
}

// The words after the destination: the ingress port, and the L4 bytes the rules may test ("flags syn,ack",
// "type echo-reply", "code 0"; else those of the packet that opens such a connection: a SYN, an echo request).
bool parse_explain_options(std::istringstream& in, ExplainQuery& query, std::string& error) {
    const FiveTuple& t = query.tuple;
    const bool icmp = (t.proto == kIpProtoIcmp && t.family == IpFamily::ipv4) ||
                      (t.proto == kIpProtoIcmpv6 && t.family == IpFamily::ipv6);
    query.l4 = opening_match_bytes(t);
    std::string word, value;
    while (in >> word) {
        if (word != "flags" && word != "type" && word != "code") {
            if (!query.in_port.empty()) return error = "'" + word + "' is not flags, type or code", false;
            query.in_port = word;
            continue;
        }
        if (!(in >> value)) return error = word + " needs a value", false;
        if (word == "flags") {
            if (t.proto != kIpProtoTcp) return error = "flags go with tcp only", false;
            std::string bad;
            const int flags = tcp_flags_by_names(value, bad);
            if (flags < 0) return error = "'" + bad + "' is not a TCP flag (" + tcp_flags_text(0xff) + ")", false;
            query.l4.tcp_flags = static_cast<uint8_t>(flags);
        } else if (!icmp) {
            return error = word + " goes with icmp (IPv4) or icmpv6 (IPv6) only", false;
        } else if (word == "type") {
            const int named = icmp_type_by_name(t.proto, value);
            const int type = named >= 0 ? named : parse_decimal_byte(value);
            if (type < 0)
                return error = "type '" + value + "' is not a number 0-255 or one of " + icmp_type_names(t.proto),
                       false;
            query.l4.icmp_type = static_cast<uint8_t>(type);
        } else {
            const int code = parse_decimal_byte(value);
            if (code < 0) return error = "code '" + value + "' is not a number 0-255", false;
            query.l4.icmp_code = static_cast<uint8_t>(code);
        }
    }
    return true;
}

// How the packet's L4 bytes read, for its line: " flags syn", " type echo-request code 0"; empty for none.
std::string l4_text(const FiveTuple& t, const L4MatchBytes& l4) {
    if (t.proto == kIpProtoTcp) return " flags " + (l4.tcp_flags ? tcp_flags_text(l4.tcp_flags) : "none");
    if ((t.proto == kIpProtoIcmp && t.family == IpFamily::ipv4) ||
        (t.proto == kIpProtoIcmpv6 && t.family == IpFamily::ipv6))
        return " type " + icmp_type_text(t.proto, l4.icmp_type) + " code " + std::to_string(l4.icmp_code);
    return "";
}

}  // namespace

bool parse_explain_query(const std::string& text, ExplainQuery& query, std::string& error) {
    std::istringstream in(text);
    std::string proto, src, dst;
    in >> proto >> src >> dst;
    query.in_port.clear();
    query.tuple = FiveTuple{};
    if (proto == "tcp") query.tuple.proto = kIpProtoTcp;
    else if (proto == "udp") query.tuple.proto = kIpProtoUdp;
    else if (proto == "icmp") query.tuple.proto = kIpProtoIcmp;
    else if (proto == "icmpv6") query.tuple.proto = kIpProtoIcmpv6;
    else if (!proto.empty() && proto.size() <= 3 && proto.find_first_not_of("0123456789") == std::string::npos &&
             std::stoul(proto) < 256)
        query.tuple.proto = static_cast<uint8_t>(std::stoul(proto));
    else return error = "protocol '" + proto + "' is not tcp, udp, icmp, icmpv6 or a number", false;
    IpFamily src_family, dst_family;
    if (!parse_endpoint(src, src_family, query.tuple.src, query.tuple.src_port))
        return error = "source '" + src + "' is not ADDRESS:PORT ([v6]:PORT)", false;
    if (!parse_endpoint(dst, dst_family, query.tuple.dst, query.tuple.dst_port))
        return error = "destination '" + dst + "' is not ADDRESS:PORT ([v6]:PORT)", false;
    if (src_family != dst_family) return error = "source and destination are of different families", false;
    query.tuple.family = src_family;
    return parse_explain_options(in, query, error);
}

NewPacketDecision decide_new_packet(const Snapshot& snapshot, const FiveTuple& t, uint16_t in_port,
                                    const L4MatchBytes& l4) {
    NewPacketDecision d;
    const FirewallTables& fw = *snapshot.firewall;
    const LbTables& lb = *snapshot.lb;
    const auto drop = [&d](DropReason reason) {
        d.fate = NewPacketFate::dropped;
        d.reason = reason;
        return d;
    };
    if (const DropReason martian = snapshot.martians.check(t); martian != DropReason::none) return drop(martian);
    if (early_dropped(fw, t.family, t.src)) return drop(DropReason::blocklisted);
    if (!fw.enabled && !lb.enabled()) return d;  // no stateful stage at all
    d.destination = new_packet_destination(snapshot, t, false);
    switch (d.destination.target) {
    case NewPacketTarget::nat_pool: return drop(DropReason::nat_no_connection);
    case NewPacketTarget::own_address: return drop(DropReason::to_own_address);
    case NewPacketTarget::untracked: return d;
    case NewPacketTarget::service:
    case NewPacketTarget::rules: break;
    }
    if (fw.enabled) {
        d.ruled = true;
        d.verdict = fw.classify_one(t, in_port, l4);
    }
    const LbService* service = d.destination.target == NewPacketTarget::service
                                   ? &lb.services[static_cast<std::size_t>(d.destination.service)]
                                   : nullptr;
    if (service) {
        const uint32_t hash = stable_flow_hash(t);
        d.maglev_slot = maglev_slot(hash, service->table_size);
        d.backend = pick_backend(*service, hash);
    }
    if (d.verdict.action == RuleAction::reject) {
        d.fate = NewPacketFate::rejected;
        d.reason = DropReason::rule_reject;
        return d;
    }
    if (d.verdict.action == RuleAction::deny) return drop(DropReason::rule_deny);
    if (service && d.backend == kNoBackend) return drop(DropReason::lb_no_backend);
    if (service && service->syn_proxy && t.proto == kIpProtoTcp) d.fate = NewPacketFate::answered_with_cookie;
    return d;
}

namespace {

// The L4 tests of rule `id` (icmp_type, tcp_flags), as its family's classifier holds it.
std::string rule_l4_text(const FirewallTables& fw, IpFamily family, uint32_t id) {
    const AclClassifier* acl = fw.acl(family);
    const std::vector<uint32_t>& ids = fw.rule_ids(family);
    const auto at = std::find(ids.begin(), ids.end(), id);
    if (!acl || at == ids.end()) return "";
    return l4_match_text(acl->l4_tests(static_cast<std::size_t>(at - ids.begin())));
}

void explain_rules(const FirewallTables& fw, const FiveTuple& t, const NewPacketDecision& d,
                   std::vector<std::string>& lines) {
    lines.push_back(
        "firewall: a packet of a tracked connection passes (replies too); a new one is decided by the rules:");
    if (d.verdict.rule == kDefaultRule) {
        lines.push_back(std::string("  no rule matches: the default, ") + action_name(d.verdict.action));
    } else {
        const uint32_t id = d.verdict.rule;
        const std::string tests = rule_l4_text(fw, t.family, id);
        std::string line = fmt::format("  rule #{} '{}'{} matches: {}", id + 1, fw.rule_names[id],
                                       tests.empty() ? "" : " (" + tests + ")", action_name(d.verdict.action));
        if (id < fw.limits.size() && fw.limits[id].tokens_per_tsc > 0) line += " (rate limited)";
        lines.push_back(line);
        if (d.verdict.action == RuleAction::reject)
            lines.push_back(t.proto == kIpProtoTcp ? "  a TCP RST goes back out of the ingress port"
                                                   : "  an ICMP unreachable goes back out of the ingress port");
    }
    if (t.proto == kIpProtoTcp) lines.push_back("  (TCP opens only with a SYN, unless loose_pickup is on)");
}

void explain_service(const LbTables& lb, const FiveTuple& t, const NewPacketDecision& d,
                     std::vector<std::string>& lines) {
    const LbService& service = lb.services[static_cast<std::size_t>(d.destination.service)];
    lines.push_back(fmt::format("load balancer: service '{}' ({}), Maglev slot {} of {}", service.name,
                                lb_mode_name(service.mode), d.maglev_slot, service.table_size));
    if (d.backend == kNoBackend) {
        lines.push_back("  no usable backend (all down or weight 0): a new connection is dropped (lb_no_backend)");
        return;
    }
    const LbBackend& b = lb.backends[d.backend];
    const std::string address = to_string(b.address, b.family);
    const uint16_t port = b.port_be ? rte_be_to_cpu_16(b.port_be) : rte_be_to_cpu_16(t.dst_port);
    lines.push_back("  a new connection goes to backend " + address +
                    (b.mode == LbMode::nat ? ":" + std::to_string(port) : "") +
                    " (a tracked one keeps the backend it has)");
    if (d.fate == NewPacketFate::answered_with_cookie)
        lines.push_back("  syn_proxy: the SYN is answered with a cookie; the backend sees the connection once the "
                        "client's ACK brings it back");
    switch (b.mode) {
    case LbMode::nat:
        lines.push_back(
            "  rewrite: source -> a nat_pool address and a port of the owning worker, destination -> the backend");
        break;
    case LbMode::dsr:
        lines.push_back("  rewrite: destination MAC only (the backend answers the client directly)");
        break;
    case LbMode::tunnel:
        lines.push_back("  rewrite: encapsulated (" +
                        std::string(t.family == IpFamily::ipv4 ? "IPIP" : "IPv6-in-IPv6") + ") to " + address);
        break;
    }
}

// How the packet leaves: by its ingress port's forward entry, else by the route of its destination (a service's
// packets: of their backend's address, which this line does not follow).
std::string forward_line(const Snapshot& snapshot, const std::vector<PortIdentity>& ports, const PortIdentity& from,
                         const FiveTuple& t, uint32_t hash) {
    const auto hop_text = [&](const ForwardEntry& e) {
        const auto& m = e.dst_mac.addr_bytes;
        return fmt::format("out on {} to {:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}, TTL/hop limit - 1",
                           interface_name(ports, interface_id(e.out_port, e.vlan)), m[0], m[1], m[2], m[3], m[4], m[5]);
    };
    const ForwardEntry& e = snapshot.forward_by_in_port[from.id];
    if (e.valid) return "forward: from " + from.name + " " + hop_text(e);
    const RouteTables& routes = snapshot.routes;
    Prefix matched;
    const RouteEntry* found = routes.find(t.family, t.dst, &matched);
    if (!found)
        return "route: from " + from.name + ": no route to " + to_string(t.dst, t.family) +
               ": dropped (no_route), ICMP unreachable sent";
    const RouteEntry& entry = *found;
    const std::string head = "route: from " + from.name + " by " + to_string(matched.address, t.family) + "/" +
                             std::to_string(matched.length) + ": ";
    switch (entry.action) {
    case RouteAction::blackhole: return head + "blackhole: dropped (route_blackhole)";
    case RouteAction::reject: return head + "reject: dropped (route_reject), ICMP unreachable sent";
    case RouteAction::connected:
        return head + "connected on " + interface_name(ports, entry.port) + ", destination not resolved: dropped " +
               "(neighbour_unresolved)";
    case RouteAction::via: break;
    }
    const ForwardEntry* hop = routes.next_hop(entry, hash);
    return hop ? head + hop_text(*hop) : head + "no next hop resolved: dropped (neighbour_unresolved)";
}

}  // namespace

std::vector<std::string> explain(const Snapshot& snapshot, const std::vector<PortIdentity>& ports,
                                 uint16_t worker_count, const ExplainQuery& query) {
    std::vector<std::string> lines;
    const FiveTuple& t = query.tuple;
    const PortIdentity* in = nullptr;  // the port, when the ingress is one of its VLANs too
    for (const PortIdentity& p : ports)
        if (p.name == interface_port_name(query.in_port)) in = &p;
    if (!query.in_port.empty() && !in) return {"no port named '" + interface_port_name(query.in_port) + "'"};
    uint16_t in_interface = UINT16_MAX;
    if (in) {
        try {
            in_interface = interface_named(ports, query.in_port);
        } catch (const std::exception& e) {
            return {std::string("error: ") + e.what()};  // a VLAN id that is no number, or a port above kMaxVlanPort
        }
    }
    lines.push_back("packet: " + to_string(t) + l4_text(t, query.l4) +
                    (in ? " in on " + query.in_port : " (no ingress port given)"));
    const uint32_t hash = symmetric_flow_hash(t);
    lines.push_back(fmt::format("worker: {} of {} (symmetric hash {:08x}; replies go to the same worker)",
                                (uint64_t{hash} * worker_count) >> 32, worker_count, hash));

    const FirewallTables& fw = *snapshot.firewall;
    const LbTables& lb = *snapshot.lb;
    const NewPacketDecision d = decide_new_packet(snapshot, t, in_interface, query.l4);
    if (is_martian(d.reason)) {
        lines.push_back(fmt::format("martian: dropped on the RX lcore ({}: {})", drop_reason_name(d.reason),
                                    kDropReasonInfo[static_cast<std::size_t>(d.reason)].help));
        return lines;
    }
    if (d.reason == DropReason::blocklisted) {
        lines.push_back("early drop: the source is in an early-drop prefix set: dropped on the RX lcore (blocklisted)");
        return lines;
    }
    if (fw.blocklist_v4 || fw.blocklist_v6) lines.push_back("early drop: the source is in no early-drop set");
    if (d.destination.target == NewPacketTarget::own_address) {
        lines.push_back(
            fmt::format("own address: {} is sluice's, and nothing of sluice's serves this port and protocol:",
                        to_string(t.dst, t.family)));
        lines.push_back(
            "  a new packet is dropped before the rules (to_own_address); an echo request is answered if allowed");
        return lines;
    }
    if (d.destination.target == NewPacketTarget::nat_pool) {
        const uint16_t port = rte_be_to_cpu_16(t.dst_port);
        lines.push_back(
            fmt::format("load balancer: {} is a NAT pool address: a reply of the NAT connection holding port {} "
                        "(worker {}), rewritten to VIP -> client; with no such connection: dropped (nat_no_connection)",
                        to_string(t.dst, t.family), port, port % std::max<uint16_t>(worker_count, 1)));
        return lines;
    }
    if (!fw.enabled) {
        lines.push_back(lb.enabled() ? "firewall: off (only connections to services are tracked)"
                                     : "firewall: off (no connection tracking, no rules)");
    } else {
        explain_rules(fw, t, d, lines);
    }
    if (d.destination.target == NewPacketTarget::service) explain_service(lb, t, d, lines);
    const bool tracked = fw.enabled || d.destination.target == NewPacketTarget::service;
    if (t.proto == kIpProtoTcp && tracked &&
        (d.fate == NewPacketFate::forwarded || d.fate == NewPacketFate::answered_with_cookie)) {
        const LbService* service = d.destination.target == NewPacketTarget::service
                                       ? &lb.services[static_cast<std::size_t>(d.destination.service)]
                                       : nullptr;
        const TcpWindowCheck check = tcp_window_check_for(fw, d.ruled ? d.verdict.rule : kDefaultRule, service);
        lines.push_back(fmt::format("tcp window: the connection's sequence numbers are checked {} (the rule's "
                                    "tcp_window_check, else the service's, else the firewall's); `sluicectl flows` "
                                    "shows each side's window",
                                    tcp_window_check_name(check)));
    }

    if (in) lines.push_back(forward_line(snapshot, ports, *in, t, hash));
    else
        for (const PortIdentity& p : ports) lines.push_back(forward_line(snapshot, ports, p, t, hash));
    return lines;
}

}  // namespace sluice

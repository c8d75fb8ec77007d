#include "control/flow_listing.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <map>
#include <sstream>

#include <spdlog/fmt/fmt.h>

#include "common/ip_proto.hpp"

namespace sluice {
namespace {

bool parse_port(const std::string& word, uint16_t& port) {
    if (word.empty() || word.size() > 5 || word.find_first_not_of("0123456789") != std::string::npos) return false;
    const unsigned long value = std::stoul(word);
    if (value > 65535) return false;
    port = static_cast<uint16_t>(value);
    return true;
}

const char* protocol_name(uint8_t proto) {
    switch (proto) {
    case kIpProtoTcp: return "tcp";
    case kIpProtoUdp: return "udp";
    case kIpProtoIcmp: return "icmp";
    default: return "ip";
    }
}

void append_side(std::string& text, const TcpWindow& w, int side) {
    text += side == 0 ? "; initiator" : "; responder";
    if (!(w.flags[side] & kWindowSideSeen)) {
        text += " unseen";
        return;
    }
    const TcpWindowSide& s = w.side[side];
    text += fmt::format(" end {} maxend {} maxwin {}", s.end, s.maxend, tcp_window_maxwin(w, side));
    if (w.flags[side] & kWindowSideAcked) text += fmt::format(" maxack {}", s.maxack);
    if (w.flags[0] & w.flags[1] & kWindowSideSyn)
        text += fmt::format(" scale {}", tcp_window_detail::window_scale(w, side));
    else text += " scale ?";
    if (w.flags[side] & kWindowSideChallenged) text += " challenged";
}

}  // namespace

std::string tcp_window_text(const TcpWindow& window) {
    const TcpWindowCheck check = tcp_window_check_of(window);
    std::string text = std::string("window ") + tcp_window_check_name(check);
    if (check == TcpWindowCheck::off) return text;
    append_side(text, window, 0);
    append_side(text, window, 1);
    return text;
}

bool parse_flow_filter(const std::string& text, FlowFilter& filter, std::string& error) {
    static const std::map<std::string, uint8_t> kProtocols = {
        {"tcp", kIpProtoTcp}, {"udp", kIpProtoUdp}, {"icmp", kIpProtoIcmp}, {"icmpv6", kIpProtoIcmpv6}};
    filter = FlowFilter{};
    std::istringstream words(text);
    for (std::string word; words >> word;) {
        IpAddress address{};
        if (word == "port") {
            std::string number;
            if (!(words >> number) || !parse_port(number, filter.port)) {
                error = "'port' takes a number from 0 to 65535";
                if (!number.empty()) error += ", not '" + number + "'";
                return false;
            }
        } else if (const auto proto = kProtocols.find(word); proto != kProtocols.end()) {
            filter.proto = proto->second;
        } else if (word.find('/') == std::string::npos && inet_pton(AF_INET, word.c_str(), address.bytes) == 1) {
            filter.by_address = true;
            filter.address = address;
            filter.family = IpFamily::ipv4;
        } else if (word.find('/') == std::string::npos && inet_pton(AF_INET6, word.c_str(), address.bytes) == 1) {
            filter.by_address = true;
            filter.address = address;
            filter.family = IpFamily::ipv6;
        } else {
            return error = "'" + word + "' is not an address, 'port N' or a protocol (tcp, udp, icmp, icmpv6)", false;
        }
    }
    return true;
}

std::vector<std::string> flow_lines(const std::vector<std::unique_ptr<FlowWalk>>& walks, std::size_t max_listed,
                                    uint64_t now_tsc, uint64_t tsc_hz,
                                    const std::function<std::string(uint32_t)>& backend_name) {
    uint64_t matched = 0;
    std::vector<std::string> lines{""};
    for (const auto& walk : walks) {
        matched += walk->matched;
        for (const FlowRecord& r : walk->records) {
            if (lines.size() > max_listed) break;
            std::string line = fmt::format("{} {} {} pkts {}/{} ttl {}s", protocol_name(r.tuple.proto),
                                           to_string(r.tuple), conn_state_name(r.state), r.packets[0], r.packets[1],
                                           r.expires_tsc > now_tsc ? (r.expires_tsc - now_tsc) / tsc_hz : 0);
            if (r.backend) {
                line += " -> " + backend_name(r.backend - 1);
                if (r.nat_port) line += fmt::format(" nat:{}", r.nat_port);
            }
            if (r.tuple.proto == kIpProtoTcp) line += " " + tcp_window_text(r.window);
            lines.push_back(std::move(line));
        }
    }
    lines[0] = fmt::format("{} connection(s) match, {} listed", matched, lines.size() - 1);
    return lines;
}

}  // namespace sluice

#include "routing/kernel_routes.hpp"

#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include <spdlog/spdlog.h>

#include "routing/route_table_writer.hpp"

namespace sluice {
namespace {

bool address_of(const rtattr* a, IpFamily family, IpAddress& out) {
    const std::size_t size = family == IpFamily::ipv4 ? 4 : 16;
    if (RTA_PAYLOAD(a) != size) return false;
    out = IpAddress{};
    std::memcpy(out.bytes, RTA_DATA(a), size);
    return true;
}

}  // namespace

bool parse_kernel_route(const nlmsghdr* msg, uint32_t table, KernelRouteMessage& out) {
    if ((msg->nlmsg_type != RTM_NEWROUTE && msg->nlmsg_type != RTM_DELROUTE) ||
        msg->nlmsg_len < NLMSG_LENGTH(sizeof(rtmsg)))
        return false;
    const auto* rtm = static_cast<const rtmsg*>(NLMSG_DATA(msg));
    if (rtm->rtm_family != AF_INET && rtm->rtm_family != AF_INET6) return false;
    if (rtm->rtm_flags & RTM_F_CLONED) return false;
    out = KernelRouteMessage{};
    out.add = msg->nlmsg_type == RTM_NEWROUTE;
    out.family = rtm->rtm_family == AF_INET ? IpFamily::ipv4 : IpFamily::ipv6;
    out.replace = out.family == IpFamily::ipv4 || (msg->nlmsg_flags & NLM_F_REPLACE);
    if (rtm->rtm_dst_len > (out.family == IpFamily::ipv4 ? 32 : 128)) return false;
    out.prefix.length = rtm->rtm_dst_len;
    switch (rtm->rtm_type) {
    case RTN_UNICAST: out.action = RouteAction::via; break;
    case RTN_BLACKHOLE: out.action = RouteAction::blackhole; break;
    case RTN_UNREACHABLE:
    case RTN_PROHIBIT: out.action = RouteAction::reject; break;
    default: return false;  // local, broadcast, multicast, throw, nat: not forwarding routes
    }
    uint32_t route_table = rtm->rtm_table;
    IpAddress gateway{};
    bool has_gateway = false;
    int length = static_cast<int>(RTM_PAYLOAD(msg));
    for (const rtattr* a = RTM_RTA(rtm); RTA_OK(a, length); a = RTA_NEXT(a, length)) {
        switch (a->rta_type) {
        case RTA_TABLE:
            if (RTA_PAYLOAD(a) == 4) std::memcpy(&route_table, RTA_DATA(a), 4);
            break;
        case RTA_DST:
            if (!address_of(a, out.family, out.prefix.address)) return false;
            break;
        case RTA_PRIORITY:
            if (RTA_PAYLOAD(a) == 4) std::memcpy(&out.metric, RTA_DATA(a), 4);
            break;
        case RTA_GATEWAY: has_gateway = address_of(a, out.family, gateway); break;
        case RTA_MULTIPATH: {
            int left = static_cast<int>(RTA_PAYLOAD(a));
            for (const auto* nh = static_cast<const rtnexthop*>(RTA_DATA(a)); RTNH_OK(nh, left);
                 left -= NLMSG_ALIGN(nh->rtnh_len), nh = RTNH_NEXT(nh)) {
                int nh_length = nh->rtnh_len - static_cast<int>(sizeof(rtnexthop));
                for (const rtattr* na = RTNH_DATA(nh); RTA_OK(na, nh_length); na = RTA_NEXT(na, nh_length)) {
                    KernelRouteMessage::Hop hop{.weight = nh->rtnh_hops + 1u};
                    if (na->rta_type == RTA_GATEWAY && address_of(na, out.family, hop.gateway)) out.hops.push_back(hop);
                }
            }
            break;
        }
        default: break;
        }
    }
    if (route_table != table) return false;
    if (has_gateway) out.hops.push_back({gateway, 1});
    if (out.action != RouteAction::via) out.hops.clear();
    return true;
}

KernelRouteMirror::KernelRouteMirror(uint32_t table, int receive_buffer)
    : table_(table), receive_buffer_(receive_buffer) {
    socket_ = open_socket();
    request_dump(AF_INET);
}

UniqueFd KernelRouteMirror::open_socket() const {
    UniqueFd fd(::socket(AF_NETLINK, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, NETLINK_ROUTE));
    if (!fd.valid()) throw std::runtime_error(std::string("netlink socket: ") + std::strerror(errno));
    // SO_RCVBUFFORCE goes past rmem_max with CAP_NET_ADMIN (which sluice has); else the plain one, capped.
    if (setsockopt(fd.get(), SOL_SOCKET, SO_RCVBUFFORCE, &receive_buffer_, sizeof receive_buffer_) != 0)
        setsockopt(fd.get(), SOL_SOCKET, SO_RCVBUF, &receive_buffer_, sizeof receive_buffer_);
    sockaddr_nl local{};
    local.nl_family = AF_NETLINK;
    local.nl_groups = RTMGRP_IPV4_ROUTE | RTMGRP_IPV6_ROUTE;
    if (bind(fd.get(), reinterpret_cast<const sockaddr*>(&local), sizeof local) != 0)
        throw std::runtime_error(std::string("netlink bind: ") + std::strerror(errno));
    return fd;
}

void KernelRouteMirror::request_dump(int family) {
    struct {
        nlmsghdr header;
        rtmsg body;
    } request{};
    request.header.nlmsg_len = sizeof request;
    request.header.nlmsg_type = RTM_GETROUTE;
    request.header.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
    request.header.nlmsg_seq = ++sequence_;
    request.body.rtm_family = static_cast<unsigned char>(family);
    sockaddr_nl kernel{};
    kernel.nl_family = AF_NETLINK;
    if (sendto(socket_.get(), &request, sizeof request, 0, reinterpret_cast<const sockaddr*>(&kernel), sizeof kernel) <
        0)
        spdlog::error("routing: cannot ask the kernel for table {} ({}); retrying", table_, std::strerror(errno));
    dump_family_ = family;
    dump_heard_ = Clock::now();
}

void KernelRouteMirror::resync(const char* why) {
    spdlog::warn("routing: {}; reading kernel table {} again", why, table_);
    ++resyncs_;
    resync_ = true;
    if (dump_family_) {
        redump_ = true;  // the dump running may have lost messages too: another follows it
    } else {
        dumped_.clear();
        request_dump(AF_INET);
    }
}

void KernelRouteMirror::resync_on_new_socket(const std::string& why) {
    // What the old socket still holds is older than the new dump: taken after it, a notification of a route deleted
    // since would bring the route back. And the kernel refuses a dump (EBUSY) while one still runs on the old socket.
    try {
        socket_ = open_socket();
    } catch (const std::exception& e) {
        spdlog::error("routing: {}; table {} is read again on the old socket", e.what(), table_);
    }
    dump_family_ = 0;
    redump_ = false;
    resync(why.c_str());
}

void KernelRouteMirror::check_dump(Clock::time_point now) {
    if (!dump_family_ || now - dump_heard_ < kDumpSilence) return;
    resync_on_new_socket("a dump of the kernel's routes stopped before its end");
}

void KernelRouteMirror::take(const KernelRouteMessage& m, std::map<Key, ByMetric>& into) {
    const Key key{m.family, {m.prefix.address.quads[0], m.prefix.address.quads[1]}, m.prefix.length};
    ByMetric& by_metric = into[key];
    auto existing = by_metric.find(m.metric);
    if (m.add) {
        if (existing == by_metric.end() || m.replace || m.action != RouteAction::via ||
            existing->second.action != RouteAction::via) {
            by_metric[m.metric] = Route{m.action, m.hops};
        } else {  // an IPv6 next hop appended to a multipath route
            for (const KernelRouteMessage::Hop& hop : m.hops) {
                auto& hops = existing->second.hops;
                auto same = std::find_if(hops.begin(), hops.end(), [&](auto& h) { return h.gateway == hop.gateway; });
                if (same != hops.end()) *same = hop;
                else hops.push_back(hop);
            }
        }
    } else if (existing != by_metric.end()) {
        auto& hops = existing->second.hops;
        if (!m.replace && !m.hops.empty() && existing->second.action == RouteAction::via) {
            // IPv6 deletes one next hop of a multipath route at a time.
            std::erase_if(hops, [&](const KernelRouteMessage::Hop& h) {
                return std::any_of(m.hops.begin(), m.hops.end(), [&](auto& gone) { return gone.gateway == h.gateway; });
            });
            if (hops.empty()) by_metric.erase(existing);
        } else {
            by_metric.erase(existing);
        }
    }
    if (by_metric.empty()) into.erase(key);
}

bool KernelRouteMirror::compile(const Key& key, const ByMetric& routes, const Config& config,
                                const std::vector<PortIdentity>& ports, CompiledRoute& out) const {
    if (routes.empty()) return false;
    const Route& best = routes.begin()->second;
    out = CompiledRoute{.family = std::get<0>(key), .action = best.action, .source = RouteSource::kernel};
    std::memcpy(out.prefix.address.quads, std::get<1>(key).data(), 16);
    out.prefix.length = std::get<2>(key);
    if (best.action != RouteAction::via) return true;
    for (const KernelRouteMessage::Hop& hop : best.hops) {
        if (out.hops.size() == kMaxRouteNextHops) break;
        if (const std::string link = interface_on_link(config, out.family, hop.gateway); !link.empty())
            out.hops.push_back({hop.gateway, interface_named(ports, link), hop.weight});
    }
    return !out.hops.empty();  // a device route, or no next hop on a link of sluice's
}

void KernelRouteMirror::write(const Key& key, RouteTableWriter& writer, const Config& config,
                              const std::vector<PortIdentity>& ports) {
    Prefix prefix;
    std::memcpy(prefix.address.quads, std::get<1>(key).data(), 16);
    prefix.length = std::get<2>(key);
    const auto found = routes_.find(key);
    CompiledRoute route;
    if (found != routes_.end() && compile(key, found->second, config, ports, route)) {
        writer.set_kernel_route(route);
        if (left_out_keys_.erase(key)) --left_out_;
        return;
    }
    writer.remove_kernel_route(std::get<0>(key), prefix);
    if (found != routes_.end()) {
        if (left_out_keys_.emplace(key, true).second) {
            ++left_out_;
            spdlog::debug("routing: kernel route {}/{} left out: no next hop on a link of sluice's",
                          to_string(prefix.address, std::get<0>(key)), prefix.length);
        }
    } else if (left_out_keys_.erase(key)) {
        --left_out_;
    }
}

std::size_t KernelRouteMirror::read(RouteTableWriter& writer, const Config& config,
                                    const std::vector<PortIdentity>& ports) {
    alignas(nlmsghdr) char buffer[64 * 1024];
    std::size_t taken = 0;
    for (;;) {
        const ssize_t n = recv(socket_.get(), buffer, sizeof buffer, 0);
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == ENOBUFS) {  // the table is read again whole and replaces what sluice has
                resync_on_new_socket("kernel route notifications lost: the socket's " +
                                     std::to_string(receive_buffer_ >> 10) +
                                     " KiB buffer was full (routing.kernel_socket_buffer_kib)");
                continue;
            }
            break;  // EAGAIN: all read
        }
        int left = static_cast<int>(n);
        // NLMSG_OK, with its length comparison signed on both sides (the macro's mixes __u32 and int).
        const auto whole = [](const nlmsghdr* m, int bytes) {
            return bytes >= static_cast<int>(sizeof(nlmsghdr)) && m->nlmsg_len >= sizeof(nlmsghdr) &&
                   static_cast<int64_t>(m->nlmsg_len) <= bytes;
        };
        for (const auto* msg = reinterpret_cast<const nlmsghdr*>(buffer); whole(msg, left);
             msg = NLMSG_NEXT(msg, left)) {
            const bool of_dump = dump_family_ && msg->nlmsg_seq == sequence_;
            if (of_dump && msg->nlmsg_type == NLMSG_ERROR) {
                // The kernel refused the dump: check_dump asks again once kDumpSilence has passed.
                const auto* error = static_cast<const nlmsgerr*>(NLMSG_DATA(msg));
                if (msg->nlmsg_len >= NLMSG_LENGTH(sizeof(nlmsgerr)) && error->error != 0) {
                    spdlog::error("routing: the kernel refused a dump of table {}: {}", table_,
                                  std::strerror(-error->error));
                    continue;
                }
            }
            if (of_dump) dump_heard_ = Clock::now();
            // The table changed while the kernel walked it: the dump may miss routes or hold removed ones.
            if (of_dump && (msg->nlmsg_flags & NLM_F_DUMP_INTR) && !redump_)
                resync("the kernel interrupted a dump of its routes");
            if (msg->nlmsg_type == NLMSG_DONE || msg->nlmsg_type == NLMSG_ERROR) {
                if (of_dump) {
                    if (dump_family_ == AF_INET) {
                        request_dump(AF_INET6);
                    } else {
                        dump_family_ = 0;
                        if (redump_) {
                            redump_ = false;
                            dumped_.clear();
                            request_dump(AF_INET);
                            continue;
                        }
                        if (resync_) {
                            resync_ = false;
                            std::map<Key, ByMetric> before = std::move(routes_);
                            routes_ = std::move(dumped_);
                            dumped_.clear();
                            for (const auto& [key, unused] : before) write(key, writer, config, ports);
                            for (const auto& [key, unused] : routes_) write(key, writer, config, ports);
                        }
                        spdlog::info("routing: kernel table {}: {} prefixes mirrored, {} left out (next hops on no "
                                     "link of sluice's)",
                                     table_, routes_.size(), left_out_);
                    }
                }
                continue;
            }
            KernelRouteMessage m;
            if (!parse_kernel_route(msg, table_, m)) continue;
            ++taken;
            if (resync_) take(m, dumped_);  // a change told during the resync's dump may be newer than the dump
            if (!resync_ || !of_dump) {
                take(m, routes_);
                write({m.family, {m.prefix.address.quads[0], m.prefix.address.quads[1]}, m.prefix.length}, writer,
                      config, ports);
            }
        }
    }
    return taken;
}

void KernelRouteMirror::rewrite(RouteTableWriter& writer, const Config& config,
                                const std::vector<PortIdentity>& ports) {
    for (const auto& [key, unused] : routes_) write(key, writer, config, ports);
}

std::vector<std::tuple<std::string, IpFamily, IpAddress>> KernelRouteMirror::next_hops(const Config& config) const {
    std::set<std::tuple<std::string, IpFamily, std::array<uint64_t, 2>>> seen;
    std::vector<std::tuple<std::string, IpFamily, IpAddress>> out;
    for (const auto& [key, routes] : routes_) {
        if (routes.empty()) continue;
        for (const KernelRouteMessage::Hop& hop : routes.begin()->second.hops)
            if (const std::string link = interface_on_link(config, std::get<0>(key), hop.gateway);
                !link.empty() &&
                seen.insert({link, std::get<0>(key), {hop.gateway.quads[0], hop.gateway.quads[1]}}).second)
                out.emplace_back(link, std::get<0>(key), hop.gateway);
    }
    return out;
}

}  // namespace sluice

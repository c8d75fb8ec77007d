// A kernel routing table mirrored into sluice's route table (routing.kernel_table): the routes BIRD or FRR install.
// Plain rtnetlink (RFC 3549, rtnetlink(7)): a dump of both families at start, then RTM_NEWROUTE / RTM_DELROUTE as
// they come. Lost notifications (ENOBUFS), a dump the kernel marks interrupted (NLM_F_DUMP_INTR) and a dump whose
// end never comes start a new dump that replaces the kernel routes whole, as BIRD and FRR do (the first and the last
// on a new socket: what is still queued on the old one is older than that dump). The socket lives in
// the network namespace sluice runs in. Kernel devices are not sluice's ports: a next hop's address decides its port
// through the ports' addresses (connected routes), and a route with no next hop on a link of sluice's is left out.
// Control thread only.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "common/unique_fd.hpp"
#include "config/config.hpp"
#include "pipeline/route_table.hpp"
#include "routing/route_builder.hpp"

struct nlmsghdr;

namespace sluice {

// One route message of the mirrored table, as the kernel sent it.
struct KernelRouteMessage {
    bool add = true;      // RTM_NEWROUTE; else RTM_DELROUTE
    bool replace = true;  // NLM_F_REPLACE, or an IPv4 route (IPv4 notifies whole routes; IPv6 one next hop at times)
    IpFamily family = IpFamily::none;
    Prefix prefix;
    uint32_t metric = 0;                    // RTA_PRIORITY: the lowest wins at one prefix, as in the kernel
    RouteAction action = RouteAction::via;  // unicast: via; blackhole; unreachable and prohibit: reject
    struct Hop {
        IpAddress gateway{};
        uint32_t weight = 1;  // rtnh_hops + 1
        friend bool operator==(const Hop&, const Hop&) = default;
    };
    std::vector<Hop> hops;  // via: the gateways (none: a device route)
};

// The route message of table `table` in msg, if it is one sluice mirrors (unicast, blackhole, unreachable, prohibit;
// not cloned); false otherwise.
bool parse_kernel_route(const nlmsghdr* msg, uint32_t table, KernelRouteMessage& out);

class KernelRouteMirror {
public:
    // Opens the socket (its receive buffer receive_buffer bytes), subscribes to both families' route changes and asks
    // for the first dump. Throws std::runtime_error when netlink cannot be opened.
    explicit KernelRouteMirror(uint32_t table, int receive_buffer = kDefaultReceiveBuffer);

    static constexpr int kDefaultReceiveBuffer = 8 << 20;  // RoutingConfig's default

    using Clock = std::chrono::steady_clock;
    // A dump that sends nothing for this long lost its end (or its request): it is asked for again.
    static constexpr auto kDumpSilence = std::chrono::seconds(5);

    int fd() const { return socket_.get(); }
    // Reads what the kernel sent and writes the changes into writer (its pending changes; the caller commits them).
    // Next hops find their ports by config's addresses. Returns the route messages taken.
    std::size_t read(RouteTableWriter& writer, const Config& config, const std::vector<PortIdentity>& ports);
    // Writes every kernel route again (a reload changed the ports' addresses: next hops may find other ports).
    void rewrite(RouteTableWriter& writer, const Config& config, const std::vector<PortIdentity>& ports);
    // The next hops of the kernel routes in the table, to resolve with ARP/ND: (port name, family, address).
    std::vector<std::tuple<std::string, IpFamily, IpAddress>> next_hops(const Config& config) const;
    // Prefixes of the mirrored table (those left out included).
    std::size_t prefixes() const { return routes_.size(); }
    // Kernel routes left out of the table: no next hop on a link of sluice's.
    std::size_t left_out() const { return left_out_; }
    bool dumping() const { return dump_family_ != 0; }
    // Control loop, every turn: a dump silent for kDumpSilence is started again, on a new socket (fd() changes), and
    // replaces the table when done.
    void check_dump(Clock::time_point now);
    // Fresh dumps started because the mirrored table could no longer be trusted (lost notifications, an interrupted
    // dump, a dump that never ended).
    uint64_t resyncs() const { return resyncs_; }

private:
    using Key = std::tuple<IpFamily, std::array<uint64_t, 2>, uint8_t>;
    struct Route {
        RouteAction action = RouteAction::via;
        std::vector<KernelRouteMessage::Hop> hops;
    };
    using ByMetric = std::map<uint32_t, Route>;

    // A netlink socket subscribed to both families' route changes. Throws std::runtime_error.
    UniqueFd open_socket() const;
    void request_dump(int family);
    // Reads the table whole again; it replaces the mirrored one when both families are in.
    void resync(const char* why);
    // The same, on a new socket: what the old one still holds is dropped unread.
    void resync_on_new_socket(const std::string& why);
    void take(const KernelRouteMessage& m, std::map<Key, ByMetric>& into);
    // The route sluice installs for the prefix (its lowest metric), if any of its next hops is on a link.
    bool compile(const Key& key, const ByMetric& routes, const Config& config, const std::vector<PortIdentity>& ports,
                 CompiledRoute& out) const;
    void write(const Key& key, RouteTableWriter& writer, const Config& config, const std::vector<PortIdentity>& ports);

    uint32_t table_;
    int receive_buffer_;
    UniqueFd socket_;
    uint32_t sequence_ = 0;
    int dump_family_ = 0;             // AF_INET or AF_INET6 while a dump runs
    std::map<Key, ByMetric> routes_;  // the mirrored table
    std::map<Key, ByMetric> dumped_;  // a resync's dump, which replaces routes_ when both families are in
    bool resync_ = false;             // the next dump replaces routes_ (notifications were lost)
    bool redump_ = false;             // notifications were lost during a dump: dump again once it ends
    Clock::time_point dump_heard_{};  // the running dump's request or last message
    uint64_t resyncs_ = 0;
    std::map<Key, bool> left_out_keys_;
    std::size_t left_out_ = 0;
};

}  // namespace sluice

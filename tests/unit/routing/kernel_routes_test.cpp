// Route messages of the mirrored kernel table, as rtnetlink sends them: a multipath route's next hops and weights,
// blackhole / unreachable / prohibit kinds, other tables and kinds left alone; and, on a real netlink socket in a
// namespace of the test's own, the resyncs that follow lost notifications or a dump that never ends.
#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/rtnetlink.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "routing/kernel_routes.hpp"
#include "routing/route_table_writer.hpp"

using namespace sluice;

namespace {

// One RTM_NEWROUTE / RTM_DELROUTE message, built attribute by attribute.
class RouteMessage {
public:
    RouteMessage(uint16_t type, unsigned char family, unsigned char length, unsigned char kind, uint32_t table) {
        buffer_.resize(NLMSG_SPACE(sizeof(rtmsg)));
        header()->nlmsg_type = type;
        auto* rtm = static_cast<rtmsg*>(NLMSG_DATA(header()));
        rtm->rtm_family = family;
        rtm->rtm_dst_len = length;
        rtm->rtm_type = kind;
        rtm->rtm_table = static_cast<unsigned char>(table < 256 ? table : RT_TABLE_UNSPEC);
        attribute(RTA_TABLE, &table, 4);
    }
    void attribute(uint16_t type, const void* data, std::size_t size) {
        const std::size_t at = buffer_.size();
        buffer_.resize(at + RTA_SPACE(size));
        auto* a = reinterpret_cast<rtattr*>(buffer_.data() + at);
        a->rta_type = type;
        a->rta_len = static_cast<unsigned short>(RTA_LENGTH(size));
        std::memcpy(RTA_DATA(a), data, size);
    }
    void address(uint16_t type, int family, const char* text) {
        unsigned char bytes[16];
        REQUIRE(inet_pton(family, text, bytes) == 1);
        attribute(type, bytes, family == AF_INET ? 4 : 16);
    }
    // RTA_MULTIPATH of (gateway, weight) pairs.
    void multipath(int family, const std::vector<std::pair<const char*, int>>& hops) {
        std::vector<unsigned char> nested;
        for (const auto& [gateway, weight] : hops) {
            const std::size_t size = family == AF_INET ? 4 : 16;
            const std::size_t at = nested.size();
            nested.resize(at + RTNH_SPACE(RTA_SPACE(size)));
            auto* nh = reinterpret_cast<rtnexthop*>(nested.data() + at);
            nh->rtnh_len = static_cast<unsigned short>(RTNH_LENGTH(RTA_LENGTH(size)));
            nh->rtnh_hops = static_cast<unsigned char>(weight - 1);
            nh->rtnh_ifindex = 7;
            auto* a = RTNH_DATA(nh);
            a->rta_type = RTA_GATEWAY;
            a->rta_len = static_cast<unsigned short>(RTA_LENGTH(size));
            REQUIRE(inet_pton(family, gateway, RTA_DATA(a)) == 1);
        }
        attribute(RTA_MULTIPATH, nested.data(), nested.size());
    }
    const nlmsghdr* done() {
        header()->nlmsg_len = static_cast<uint32_t>(buffer_.size());
        return header();
    }

private:
    nlmsghdr* header() { return reinterpret_cast<nlmsghdr*>(buffer_.data()); }
    std::vector<unsigned char> buffer_;
};

}  // namespace

TEST_CASE("kernel routes: a multipath route gives its next hops and weights", "[routes][kernel]") {
    RouteMessage m(RTM_NEWROUTE, AF_INET, 24, RTN_UNICAST, 100);
    m.address(RTA_DST, AF_INET, "198.51.100.0");
    const uint32_t metric = 20;
    m.attribute(RTA_PRIORITY, &metric, 4);
    m.multipath(AF_INET, {{"192.0.2.11", 1}, {"192.0.2.12", 3}});
    KernelRouteMessage out;
    REQUIRE(parse_kernel_route(m.done(), 100, out));
    CHECK(out.add);
    CHECK(out.replace);
    CHECK(out.family == IpFamily::ipv4);
    CHECK(to_string(out.prefix.address, out.family) == "198.51.100.0");
    CHECK(out.prefix.length == 24);
    CHECK(out.metric == 20);
    CHECK(out.action == RouteAction::via);
    REQUIRE(out.hops.size() == 2);
    CHECK(to_string(out.hops[0].gateway, out.family) == "192.0.2.11");
    CHECK(out.hops[0].weight == 1);
    CHECK(to_string(out.hops[1].gateway, out.family) == "192.0.2.12");
    CHECK(out.hops[1].weight == 3);
}

TEST_CASE("kernel routes: an IPv6 route with one gateway in a table above 255", "[routes][kernel]") {
    RouteMessage m(RTM_DELROUTE, AF_INET6, 48, RTN_UNICAST, 1000);
    m.address(RTA_DST, AF_INET6, "2001:db8:5::");
    m.address(RTA_GATEWAY, AF_INET6, "2001:db8:1::11");
    KernelRouteMessage out;
    REQUIRE(parse_kernel_route(m.done(), 1000, out));
    CHECK_FALSE(out.add);
    CHECK_FALSE(out.replace);  // IPv6 deletes one next hop of a multipath route at a time
    REQUIRE(out.hops.size() == 1);
    CHECK(to_string(out.hops[0].gateway, out.family) == "2001:db8:1::11");
    CHECK_FALSE(parse_kernel_route(m.done(), 100, out));
}

TEST_CASE("kernel routes: blackhole, unreachable and prohibit; local routes and other tables left alone",
          "[routes][kernel]") {
    const std::pair<unsigned char, RouteAction> kinds[] = {{RTN_BLACKHOLE, RouteAction::blackhole},
                                                           {RTN_UNREACHABLE, RouteAction::reject},
                                                           {RTN_PROHIBIT, RouteAction::reject}};
    for (const auto& [kind, action] : kinds) {
        RouteMessage m(RTM_NEWROUTE, AF_INET, 16, kind, 100);
        m.address(RTA_DST, AF_INET, "100.64.0.0");
        KernelRouteMessage out;
        REQUIRE(parse_kernel_route(m.done(), 100, out));
        CHECK(out.action == action);
        CHECK(out.hops.empty());
    }
    RouteMessage local(RTM_NEWROUTE, AF_INET, 32, RTN_LOCAL, 100);
    local.address(RTA_DST, AF_INET, "192.0.2.1");
    KernelRouteMessage out;
    CHECK_FALSE(parse_kernel_route(local.done(), 100, out));
    RouteMessage other(RTM_NEWROUTE, AF_INET, 0, RTN_UNICAST, 254);
    other.address(RTA_GATEWAY, AF_INET, "192.0.2.254");
    CHECK_FALSE(parse_kernel_route(other.done(), 100, out));
    CHECK(parse_kernel_route(other.done(), 254, out));  // the default route of the main table
    CHECK(out.prefix.length == 0);
}

namespace {

// The calling thread in a network namespace of its own while it lives (root only), so that the test's routes touch
// no real table; back in the one it came from at the end. Commands run with system() fork from this thread: theirs.
class FreshNetworkNamespace {
public:
    FreshNetworkNamespace() : home_(::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC)) {
        entered_ = home_.valid() && ::unshare(CLONE_NEWNET) == 0;
    }
    ~FreshNetworkNamespace() {
        if (entered_) ::setns(home_.get(), CLONE_NEWNET);
    }
    bool entered() const { return entered_; }

private:
    UniqueFd home_;
    bool entered_ = false;
};

// Reads until the mirror has no dump running (or the deadline passed).
void read_until_dumped(KernelRouteMirror& mirror, RouteTableWriter& writer, const Config& config,
                       const std::vector<PortIdentity>& ports) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    do {
        pollfd fd{mirror.fd(), POLLIN, 0};
        ::poll(&fd, 1, 50);
        mirror.read(writer, config, ports);
    } while (mirror.dumping() && std::chrono::steady_clock::now() < deadline);
}

constexpr const char* kGatewayConfig = R"(
ports:
  - {name: server, device: net_null0, addresses: 192.0.2.1/24}
lcores:
  - {id: 1, roles: [rx, worker]}
routing: {kernel_table: 100}
)";

}  // namespace

TEST_CASE("kernel routes: notifications lost to a full socket buffer, or a dump that never ends, start a resync",
          "[routes][kernel]") {
    FreshNetworkNamespace netns;
    if (!netns.entered()) {
        WARN("skipped: a network namespace of its own needs root");
        return;
    }
    const ConfigResult loaded = load_config_text(kGatewayConfig, "gateway.yaml");
    REQUIRE(loaded.config);
    const Config& config = *loaded.config;
    const std::vector<PortIdentity> ports{{"server", 0, {}}};
    // The kernel's leg on sluice's link, which the routes' gateways are on (veth: this kernel has no dummy links).
    REQUIRE(std::system("ip link add gw0 type veth peer name gw0p && ip link set gw0 up && ip link set gw0p up && "
                        "ip addr add 192.0.2.254/24 dev gw0") == 0);
    RouteTableWriter writer;
    KernelRouteMirror mirror(100);
    read_until_dumped(mirror, writer, config, ports);
    REQUIRE_FALSE(mirror.dumping());
    CHECK(mirror.prefixes() == 0);

    // A burst far beyond the smallest buffer the kernel allows: most notifications are lost, and recv says so.
    // Routes that come and go in it must not come back from the notifications still queued when the loss is heard.
    const int tiny = 1024;
    REQUIRE(setsockopt(mirror.fd(), SOL_SOCKET, SO_RCVBUF, &tiny, sizeof tiny) == 0);
    constexpr int kRoutes = 500;
    const std::string batch = "/tmp/sluice-kernel-routes-" + std::to_string(::getpid()) + ".batch";
    {
        std::ofstream out(batch);
        // First the routes that go again: the notifications queued before the loss are theirs.
        for (int i = kRoutes; i < 2 * kRoutes; ++i)
            out << "route add 198.18." << i / 256 << "." << i % 256 << "/32 via 192.0.2.11 table 100\n";
        for (int i = kRoutes; i < 2 * kRoutes; ++i)
            out << "route del 198.18." << i / 256 << "." << i % 256 << "/32 table 100\n";
        for (int i = 0; i < kRoutes; ++i)
            out << "route add 198.18." << i / 256 << "." << i % 256 << "/32 via 192.0.2.11 table 100\n";
    }
    const int added = std::system(("ip -batch " + batch).c_str());
    std::remove(batch.c_str());
    REQUIRE(added == 0);
    // The resync reads the table on a new socket, with the buffer the mirror was made with (8 MiB).
    const int lossy = mirror.fd();
    read_until_dumped(mirror, writer, config, ports);
    CHECK(mirror.resyncs() == 1);
    CHECK_FALSE(mirror.dumping());
    CHECK(mirror.fd() != lossy);
    CHECK(mirror.prefixes() == kRoutes);  // every route, from the resync's dump, and none of those deleted

    // A dump whose end does not come within kDumpSilence is asked for again, and the second one replaces the table.
    RouteTableWriter other_writer;
    KernelRouteMirror other(100);  // its first dump is requested, but nothing of it is read yet
    REQUIRE(std::system("ip route del 198.18.0.0/32 table 100") == 0);
    other.check_dump(KernelRouteMirror::Clock::now() + KernelRouteMirror::kDumpSilence);
    CHECK(other.resyncs() == 1);
    read_until_dumped(other, other_writer, config, ports);
    CHECK_FALSE(other.dumping());
    CHECK(other.prefixes() == kRoutes - 1);
    other.check_dump(KernelRouteMirror::Clock::now() + KernelRouteMirror::kDumpSilence);  // no dump runs: nothing
    CHECK(other.resyncs() == 1);
}

TEST_CASE("kernel routes: the socket buffer is routing.kernel_socket_buffer_kib, 8 MiB by default",
          "[routes][kernel]") {
    const ConfigResult defaults = load_config_text(kGatewayConfig, "gateway.yaml");
    REQUIRE(defaults.config);
    CHECK(static_cast<int>(defaults.config->routing.kernel_socket_buffer_kib) << 10 ==
          KernelRouteMirror::kDefaultReceiveBuffer);
    std::string text = kGatewayConfig;
    text.replace(text.find("kernel_table: 100"), 17, "kernel_table: 100, kernel_socket_buffer_kib: 64");
    const ConfigResult loaded = load_config_text(text, "gateway.yaml");
    REQUIRE(loaded.config);
    CHECK(loaded.config->routing.kernel_socket_buffer_kib == 64);
    CHECK(loaded.config->routing != defaults.config->routing);  // a restart-only change

    FreshNetworkNamespace netns;
    if (!netns.entered()) {
        WARN("skipped: a network namespace of its own needs root");
        return;
    }
    // The kernel keeps twice what was asked (socket(7), SO_RCVBUF).
    KernelRouteMirror mirror(100, 64 << 10);
    int size = 0;
    socklen_t length = sizeof size;
    REQUIRE(getsockopt(mirror.fd(), SOL_SOCKET, SO_RCVBUF, &size, &length) == 0);
    CHECK(size == 2 * (64 << 10));
}

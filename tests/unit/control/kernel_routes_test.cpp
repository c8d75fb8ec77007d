// Route messages of the mirrored kernel table, as rtnetlink sends them: a multipath route's next hops and weights,
// blackhole / unreachable / prohibit kinds, other tables and kinds left alone.
#include <arpa/inet.h>
#include <linux/rtnetlink.h>

#include <cstring>
#include <vector>

#include <catch2/catch.hpp>

#include "control/kernel_routes.hpp"

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

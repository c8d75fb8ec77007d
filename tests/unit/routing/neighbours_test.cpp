// The ARP/ND resolver's table: hosts gleaned for connected routes are solicited, kept while they answer, and
// forgotten when they stop; targets of the config are never forgotten, only unresolved.
#include <catch2/catch.hpp>

#include "packet/vlan.hpp"
#include "routing/neighbours.hpp"

using namespace sluice;

namespace {

NeighbourTarget target(uint8_t last) {
    NeighbourTarget t{.family = IpFamily::ipv4, .port_id = 1};
    t.address = IpAddress::from_v4(rte_cpu_to_be_32(0xc0000200u | last));  // 192.0.2.last
    t.sender = IpAddress::from_v4(rte_cpu_to_be_32(0xc0000201u));
    return t;
}

constexpr rte_ether_addr kMac{{0x02, 0, 0, 0, 0, 0x63}};

}  // namespace

TEST_CASE("neighbours: a gleaned host is solicited, kept while it answers, forgotten when it stops", "[neighbours]") {
    NeighbourTable table;
    table.set_targets({target(11)});
    auto now = NeighbourTable::Clock::now();
    CHECK(table.want(target(99)));
    CHECK_FALSE(table.want(target(99)));  // asked once
    CHECK_FALSE(table.want(target(11)));  // a target already
    CHECK(table.due(now).size() == 2);
    CHECK(table.gleaned().empty());
    CHECK(table.learn(1, IpFamily::ipv4, target(99).address, kMac, now));
    REQUIRE(table.gleaned().size() == 1);
    CHECK(table.gleaned()[0].first.address == target(99).address);
    table.set_targets({target(11)});  // a reload keeps it
    CHECK(table.gleaned().size() == 1);
    // Silent from now on: probed after the reachable time, forgotten after `probes` unanswered probes.
    bool forgotten = false;
    for (int second = 1; second < 60 && !forgotten; ++second) {
        now += std::chrono::seconds(1);
        table.due(now);
        forgotten = table.expire(now) && table.gleaned().empty();
    }
    CHECK(forgotten);
    CHECK(table.size() == 1);  // the target stays
}

TEST_CASE("neighbours: a silent next hop is forgotten after the reachable time and its unanswered probes",
          "[neighbours]") {
    using std::chrono::milliseconds;
    NeighbourTable table;
    table.set_timing({.reachable = milliseconds(1500), .retransmit = milliseconds(200), .probes = 2});
    table.set_targets({target(11)});
    auto now = NeighbourTable::Clock::now();
    CHECK(table.due(now).size() == 1);  // unresolved: solicited
    table.learn(1, IpFamily::ipv4, target(11).address, kMac, now);
    const auto confirmed = now;
    std::vector<milliseconds> probes;
    std::optional<milliseconds> forgotten;
    for (int tick = 1; tick <= 100 && !forgotten; ++tick) {  // a control loop turning every 50 ms
        now += milliseconds(50);
        if (!table.due(now).empty()) probes.push_back(duration_cast<milliseconds>(now - confirmed));
        if (table.expire(now)) forgotten = duration_cast<milliseconds>(now - confirmed);
    }
    CHECK(probes == std::vector<milliseconds>{milliseconds(1500), milliseconds(1700)});
    REQUIRE(forgotten);
    CHECK(*forgotten == milliseconds(1900));  // reachable + probes x retransmit
    CHECK_FALSE(table.lookup(1, IpFamily::ipv4, target(11).address));
    CHECK(table.unresolved_targets() == 1);  // a target stays, unresolved: solicited again
    CHECK(table.due(now).size() == 1);
    // It answers again: back in use.
    CHECK(table.learn(1, IpFamily::ipv4, target(11).address, kMac, now + milliseconds(300)));
}

TEST_CASE("neighbours: a gleaned host that never answers goes after a few solicitations", "[neighbours]") {
    NeighbourTable table;
    auto now = NeighbourTable::Clock::now();
    REQUIRE(table.want(target(77)));
    for (int second = 0; second < 10; ++second) {
        now += std::chrono::seconds(1);
        table.due(now);
        table.expire(now);
    }
    CHECK(table.size() == 0);
    CHECK(table.want(target(77)));  // asked for again: tried again
}

TEST_CASE("neighbours: the listing shows each entry's port, MAC, state, age and kind", "[neighbours]") {
    NeighbourTable table;
    table.set_targets({target(11), target(12)});
    auto now = NeighbourTable::Clock::now();
    CHECK(table.want(target(99)));
    table.due(now);  // solicits all three
    table.learn(1, IpFamily::ipv4, target(11).address, kMac, now);
    table.learn(1, IpFamily::ipv4, target(99).address, kMac, now);
    CHECK(table.unresolved_targets() == 1);
    now += std::chrono::seconds(5);
    const auto port_name = [](uint16_t id) { return id == 1 ? std::string("wan") : std::string("?"); };
    CHECK(describe_neighbours(table.listing(now), port_name, 10) ==
          std::vector<std::string>{"192.0.2.11 on wan at 02:00:00:00:00:63 resolved, reachable, confirmed 5 s ago "
                                   "(next hop)",
                                   "192.0.2.12 on wan unresolved (next hop)",
                                   "192.0.2.99 on wan at 02:00:00:00:00:63 resolved, reachable, confirmed 5 s ago "
                                   "(host)"});
    // Past the reachable time and probed without an answer: still used, but probing.
    now += table.timing().reachable;
    table.due(now);
    const auto lines = describe_neighbours(table.listing(now), port_name, 2);
    REQUIRE(lines.size() == 3);
    CHECK(lines[0] == "192.0.2.11 on wan at 02:00:00:00:00:63 resolved, probing, confirmed 35 s ago, 1 unanswered "
                      "(next hop)");
    CHECK(lines[1].starts_with("192.0.2.12 on wan unresolved"));
    CHECK(lines[2] == "1 more not shown");
    CHECK(describe_neighbours({}, port_name, 10) == std::vector<std::string>{"no neighbours"});
}

TEST_CASE("neighbours: keyed by interface: an address heard on another VLAN teaches nothing", "[neighbours]") {
    NeighbourTable table;
    NeighbourTarget on_vlan = target(11);
    on_vlan.port_id = interface_id(1, 100);
    table.set_targets({target(11), on_vlan});  // one address on port 1's own link and on its VLAN 100
    CHECK(table.size() == 2);
    const auto now = NeighbourTable::Clock::now();
    CHECK_FALSE(table.learn(interface_id(1, 200), IpFamily::ipv4, on_vlan.address, kMac, now));
    CHECK_FALSE(table.lookup(interface_id(1, 100), IpFamily::ipv4, on_vlan.address));
    CHECK(table.learn(interface_id(1, 100), IpFamily::ipv4, on_vlan.address, kMac, now));
    CHECK(table.lookup(interface_id(1, 100), IpFamily::ipv4, on_vlan.address));
    CHECK_FALSE(table.lookup(1, IpFamily::ipv4, on_vlan.address));  // port 1's own link is another
    CHECK(table.resolved() == 1);
}

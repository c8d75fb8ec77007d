#include <catch2/catch.hpp>

#include <arpa/inet.h>

#include "lb/lb_tables.hpp"

using namespace sluice;

TEST_CASE("lb tables: the nat backends still configured are the translation's destinations", "[lb][nat]") {
    LbTables lb;
    lb.backends.resize(4);
    for (uint32_t id = 0; id < 4; ++id) {
        lb.backends[id].address = IpAddress::from_v4(htonl(0x0a010000u | (11 + id)));
        lb.backends[id].family = IpFamily::ipv4;
    }
    lb.backends[1].mode = LbMode::dsr;
    lb.backends[2].removed = true;  // its connections keep their space, which prepare() never takes back
    const std::vector<NatDestination> destinations = lb.nat_destinations();
    REQUIRE(destinations.size() == 2);
    CHECK(destinations[0].id == 0);
    CHECK(destinations[0].address == lb.backends[0].address);
    CHECK(destinations[1].id == 3);
    CHECK(destinations[1].family == IpFamily::ipv4);
}

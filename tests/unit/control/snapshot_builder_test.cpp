#include <catch2/catch.hpp>

#include "config/two_port_config.hpp"
#include "control/snapshot_builder.hpp"

using namespace sluice;

namespace {

const char* kConfig = kTwoPortConfig;

std::vector<PortIdentity> ports() {
    PortIdentity lan{"lan", 3, {}}, wan{"wan", 7, {}};
    lan.mac.addr_bytes[5] = 0x11;
    wan.mac.addr_bytes[5] = 0x22;
    return {lan, wan};
}

}  // namespace

TEST_CASE("snapshot: forward entries indexed by ingress port id", "[snapshot]") {
    const ConfigResult r = load_config_text(kConfig, "t.yaml");
    REQUIRE(r.config);
    const auto snapshot = build_snapshot(*r.config, ports());
    const ForwardEntry& lan = snapshot->forward_by_in_port[3];
    REQUIRE(lan.valid);
    CHECK(lan.out_port == 7);
    CHECK(lan.src_mac.addr_bytes[5] == 0x22);  // the egress port's own MAC
    CHECK(lan.dst_mac.addr_bytes[5] == 0x02);
    CHECK_FALSE(snapshot->forward_by_in_port[7].valid);  // wan has no entry: no_route
}

TEST_CASE("snapshot: a port the data plane does not run is refused", "[snapshot]") {
    const ConfigResult r = load_config_text(kConfig, "t.yaml");
    REQUIRE(r.config);
    auto only_lan = ports();
    only_lan.pop_back();
    CHECK_THROWS_AS(build_snapshot(*r.config, only_lan), std::invalid_argument);
}

TEST_CASE("reload: restart-only settings are named, the rest can go live", "[config]") {
    const Config running = *load_config_text(kConfig, "t.yaml").config;
    std::string text = kConfig;
    text.replace(text.find("02:00:00:00:00:02"), 17, "02:00:00:00:00:09");
    CHECK(restart_required_changes(running, *load_config_text(text, "t.yaml").config).empty());

    text.replace(text.find("net_null1"), 9, "net_null2");
    const auto changes = restart_required_changes(running, *load_config_text(text, "t.yaml").config);
    REQUIRE(changes.size() == 1);
    CHECK(changes[0] == "ports changed: wan");

    std::string lcores = kConfig;
    lcores.replace(lcores.find("[rx, worker]"), 12, "[rx, worker], rx_queues: [lan:0, wan:0]");
    CHECK(restart_required_changes(running, *load_config_text(lcores, "t.yaml").config) ==
          std::vector<std::string>{"lcores changed"});
}

TEST_CASE("config hash: identifies the bytes of the file", "[config]") {
    const Config a = *load_config_text(kConfig, "t.yaml").config;
    const Config b = *load_config_text(std::string(kConfig) + "# comment\n", "t.yaml").config;
    CHECK(a.hash.size() == 16);
    CHECK(a.hash == load_config_text(kConfig, "other.yaml").config->hash);
    CHECK(a.hash != b.hash);
}

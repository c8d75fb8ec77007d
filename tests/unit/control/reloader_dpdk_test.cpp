// The Reloader with a firewall and a service (rte_acl, rte_hash: EAL memory): what a reload carries over, and its
// one publication when a down backend's changed check brings it back.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <thread>

#include "config/two_port_config.hpp"
#include "control/reloader.hpp"
#include "fake_dataplane.hpp"

using namespace sluice;
using namespace std::chrono_literals;

namespace {

const std::string kConfig = std::string(kTwoPortConfig) + R"(firewall:
  default: deny
  rules:
    - {name: ssh, protocol: tcp, destination_ports: 22, action: allow}
    - {name: web, protocol: tcp, destination_ports: 80, action: allow}
services:
  - name: web
    vip: 192.0.2.10
    port: 80
    protocol: tcp
    mode: dsr
    backends:
      - {address: 127.0.0.1, mac: "02:00:00:00:01:01", health_check: {type: tcp, port: 1, interval_ms: 50, timeout_ms: 50, rise: 1, fall: 1}}
      - {address: 10.1.0.2, mac: "02:00:00:00:01:02"}
)";

std::string replaced(std::string text, const std::string& from, const std::string& to) {
    const auto at = text.find(from);
    REQUIRE(at != std::string::npos);
    return text.replace(at, from.size(), to);
}

struct Fixture {
    explicit Fixture(bool checked) {
        dir = std::filesystem::temp_directory_path() / ("sluice_reloader_dpdk_" + std::to_string(getpid()));
        std::filesystem::create_directories(dir);
        path = (dir / "sluice.yaml").string();
        write(kConfig);
        if (checked)
            health = std::make_unique<HealthChecker>([this](uint32_t id, bool up, const std::string& reason) {
                transitions.push({id, up, reason});
            });
        ConfigResult loaded = load_config_file(path);
        REQUIRE(loaded.config);
        ReloaderSetup setup{
            .ports = {{"lan", 0, {}}, {"wan", 1, {}}}, .health = health.get(), .transitions = &transitions};
        reloader = std::make_unique<Reloader>(*loaded.config, std::move(setup));
        dataplane = std::make_unique<FakeDataplane>(reloader->build_first(1));
        reloader->attach(*dataplane);
        reloader->apply_health_targets();
    }
    ~Fixture() {
        reloader.reset();
        health.reset();
        std::filesystem::remove_all(dir);
    }
    void write(const std::string& text) const { std::ofstream(path) << text; }
    const LbService& service() const { return dataplane->snapshot().lb->services.at(0); }

    std::filesystem::path dir;
    std::string path;
    HealthTransitionQueue transitions;
    std::unique_ptr<HealthChecker> health;
    std::unique_ptr<Reloader> reloader;
    std::unique_ptr<FakeDataplane> dataplane;
};

}  // namespace

TEST_CASE("reloader: rules keep their stable ids and their hits across a reload that reorders them", "[reloader]") {
    Fixture f(false);
    const FirewallTables& first = *f.dataplane->snapshot().firewall;
    REQUIRE(first.rule_names == std::vector<std::string>{"ssh", "web"});
    const std::vector<uint32_t> first_ids = first.stable_ids;
    std::vector<uint64_t>& hits = first.hits->hits;  // lcore slot 0: ssh, web, the default
    REQUIRE(hits.size() == 3);
    hits[0] = 5;
    hits[1] = 7;
    hits[2] = 11;

    std::string text = replaced(kConfig, "    - {name: ssh",
                                "    - {name: dns, protocol: udp, destination_ports: 53, "
                                "action: allow}\n    - {name: ssh");
    text = replaced(text, "    - {name: web, protocol: tcp, destination_ports: 80, action: allow}\n", "");
    text = replaced(text, "  rules:\n",
                    "  rules:\n    - {name: web, protocol: tcp, destination_ports: 80, action: allow}\n");
    f.write(text);
    REQUIRE(f.reloader->apply("test"));
    CHECK(f.dataplane->publications == 1);
    const FirewallTables& now = *f.dataplane->snapshot().firewall;
    REQUIRE(now.rule_names == std::vector<std::string>{"web", "dns", "ssh"});
    CHECK(now.stable_ids[0] == first_ids[1]);
    CHECK(now.stable_ids[2] == first_ids[0]);
    CHECK(now.stable_ids[1] != first_ids[0]);
    CHECK(now.stable_ids[1] != first_ids[1]);

    now.hits->hits[0] = 1;  // web, counted by the new snapshot
    RuleHitsRecord record;
    f.reloader->rule_hits().totals(f.dataplane->snapshot(), record);
    using Row = std::pair<std::string, uint64_t>;
    CHECK(record.rules == std::vector<Row>{{"web", 8}, {"dns", 0}, {"ssh", 5}});
    CHECK(record.default_hits == 11);
}

TEST_CASE("reloader: backends keep their stable ids; a refused reload changes no id", "[reloader]") {
    Fixture f(false);
    const auto kept = f.reloader->backend_id("web", f.reloader->config().services[0].backends[1]);
    REQUIRE(kept);
    f.write(replaced(kConfig, "      - {address: 127.0.0.1",
                     "      - {address: 10.1.0.3, mac: \"02:00:00:00:01:03\"}\n"
                     "      - {address: 127.0.0.1"));
    REQUIRE(f.reloader->apply("test"));
    const auto& backends = f.reloader->config().services[0].backends;
    REQUIRE(backends.size() == 3);
    CHECK(f.reloader->backend_id("web", backends[2]) == kept);
    CHECK(f.reloader->backend_name(*kept) == "web/10.1.0.2");
    const auto added = f.reloader->backend_id("web", backends[0]);
    REQUIRE(added);
    CHECK(*added != *kept);

    f.write("ports: [");
    CHECK_FALSE(f.reloader->apply("test"));
    CHECK(f.reloader->backend_id("web", backends[0]) == added);
    CHECK(f.dataplane->publications == 1);
}

TEST_CASE("reloader: a down backend whose check the reload changes is up again in the reload's one publication",
          "[reloader]") {
    Fixture f(true);
    const uint32_t id = *f.reloader->backend_id("web", f.reloader->config().services[0].backends[0]);
    for (int i = 0; i < 300 && f.health->is_up(id); ++i) std::this_thread::sleep_for(10ms);
    REQUIRE_FALSE(f.health->is_up(id));  // nothing listens on 127.0.0.1:1
    // The control loop has not taken the transition yet: the reload finds it waiting, and the check it changes
    // (a port that is also closed, but checked only once a minute and after three failures) starts up.
    f.write(replaced(kConfig, "port: 1, interval_ms: 50, timeout_ms: 50, rise: 1, fall: 1",
                     "port: 2, interval_ms: 60000, timeout_ms: 50, rise: 1, fall: 3"));
    REQUIRE(f.reloader->apply("test"));
    CHECK(f.dataplane->publications == 1);
    CHECK(f.health->is_up(id));
    const LbService& service = f.service();
    REQUIRE(service.backend_ids.size() == 2);
    CHECK(service.backend_ids[0] == id);
    CHECK(service.backend_up[0] == 1);
    CHECK(std::count(service.maglev.begin(), service.maglev.end(), 0) > 0);  // it has Maglev slots again
    f.reloader->apply_health_transitions();  // the down transition went with the reload: nothing more to publish
    CHECK(f.dataplane->publications == 1);
}

TEST_CASE("reloader: a dry run numbers no rule: the next applied reload numbers its new rules next", "[reloader]") {
    Fixture f(false);
    REQUIRE(f.dataplane->snapshot().firewall->stable_ids == std::vector<uint32_t>{0, 1});
    const std::string with_dns = replaced(kConfig, "    - {name: ssh",
                                          "    - {name: dns, protocol: udp, destination_ports: 53, action: allow}\n"
                                          "    - {name: ssh");
    const std::string candidate = (f.dir / "candidate.yaml").string();
    std::ofstream(candidate) << with_dns;
    const std::vector<std::string> lines = f.reloader->dry_run(candidate);
    CHECK(std::find(lines.begin(), lines.end(), "rule added: dns") != lines.end());
    f.write(replaced(kConfig, "    - {name: ssh",
                     "    - {name: ntp, protocol: udp, destination_ports: 123, action: allow}\n    - {name: ssh"));
    REQUIRE(f.reloader->apply("test"));
    const FirewallTables& now = *f.dataplane->snapshot().firewall;
    REQUIRE(now.rule_names == std::vector<std::string>{"ntp", "ssh", "web"});
    CHECK(now.stable_ids == std::vector<uint32_t>{2, 0, 1});
}

#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "config/two_port_config.hpp"
#include "control/reloader.hpp"
#include "fake_dataplane.hpp"

using namespace sluice;

namespace {

const char* kConfig = kTwoPortConfig;

std::vector<PortIdentity> ports() { return {{"lan", 0, {}}, {"wan", 1, {}}}; }

// A config file in its own directory, a reloader running it and a fake data plane attached.
struct Fixture {
    Fixture() {
        dir = std::filesystem::temp_directory_path() / ("sluice_reloader_" + std::to_string(getpid()));
        std::filesystem::create_directories(dir);
        path = (dir / "sluice.yaml").string();
        write(kConfig);
        ConfigResult loaded = load_config_file(path);
        REQUIRE(loaded.config);
        ReloaderSetup setup{.ports = ports(), .transitions = &transitions, .applied = [this] { ++applied; }};
        reloader = std::make_unique<Reloader>(*loaded.config, std::move(setup));
        dataplane = std::make_unique<FakeDataplane>(reloader->build_first(1));
        reloader->attach(*dataplane);
    }
    ~Fixture() { std::filesystem::remove_all(dir); }
    void write(const std::string& text) const { std::ofstream(path) << text; }
    std::string with(const char* from, const char* to) const {
        std::string text = kConfig;
        text.replace(text.find(from), std::strlen(from), to);
        return text;
    }

    std::filesystem::path dir;
    std::string path;
    HealthTransitionQueue transitions;
    std::unique_ptr<Reloader> reloader;
    std::unique_ptr<FakeDataplane> dataplane;
    int applied = 0;
};

}  // namespace

TEST_CASE("reloader: an applied reload publishes once and runs the new config", "[reloader]") {
    Fixture f;
    const std::string first_hash = f.reloader->config().hash;
    CHECK(f.reloader->status().read().running_hash == first_hash);
    f.write(f.with("02:00:00:00:00:02", "02:00:00:00:00:09"));
    REQUIRE(f.reloader->apply("test"));
    CHECK(f.dataplane->publications == 1);
    CHECK(f.applied == 1);
    CHECK(f.dataplane->snapshot().forward_by_in_port[0].dst_mac.addr_bytes[5] == 0x09);
    CHECK(f.reloader->config().hash != first_hash);
    const ReloadRecord status = f.reloader->status().read();
    CHECK(status.successes == 1);
    CHECK(status.failures == 0);
    CHECK(status.last_ok);
    CHECK(status.running_hash == f.reloader->config().hash);
}

TEST_CASE("reloader: an invalid file is refused whole and the running config stays", "[reloader]") {
    Fixture f;
    const std::string hash = f.reloader->config().hash;
    f.write(f.with("next_hop_mac", "next_hop_mack"));
    CHECK_FALSE(f.reloader->apply("test"));
    CHECK(f.dataplane->publications == 0);
    CHECK(f.applied == 0);
    CHECK(f.reloader->config().hash == hash);
    const ReloadRecord status = f.reloader->status().read();
    CHECK(status.failures == 1);
    CHECK_FALSE(status.last_ok);
    REQUIRE_FALSE(status.last_errors.empty());
    CHECK(status.last_errors[0].find("next_hop_mack") != std::string::npos);
    CHECK(status.running_hash == hash);
}

TEST_CASE("reloader: a restart-only change is refused and named", "[reloader]") {
    Fixture f;
    f.write(f.with("net_null1", "net_null2"));
    CHECK_FALSE(f.reloader->apply("test"));
    CHECK(f.dataplane->publications == 0);
    const ReloadRecord status = f.reloader->status().read();
    REQUIRE(status.last_errors.size() == 1);
    CHECK(status.last_errors[0] == f.path + ": ports changed: wan: a restart is needed to apply it");
}

TEST_CASE("reloader: a health transition waiting when a reload starts is folded into its one publication",
          "[reloader]") {
    Fixture f;
    f.transitions.push({0, false, "connection refused"});
    f.write(f.with("02:00:00:00:00:02", "02:00:00:00:00:09"));
    REQUIRE(f.reloader->apply("test"));
    CHECK(f.dataplane->publications == 1);
    f.reloader->apply_health_transitions();  // the control loop's turn after the reload: nothing left to publish
    CHECK(f.dataplane->publications == 1);
    f.transitions.push({0, true, "connected"});
    f.reloader->apply_health_transitions();
    CHECK(f.dataplane->publications == 2);
}

TEST_CASE("reloader: a dry run reports and applies nothing", "[reloader]") {
    Fixture f;
    const std::string candidate = (f.dir / "candidate.yaml").string();
    std::ofstream(candidate) << f.with("net_null1", "net_null2");
    auto lines = f.reloader->dry_run(candidate);
    REQUIRE(!lines.empty());
    CHECK(lines.front() == "restart needed: ports changed: wan");
    CHECK(lines.back() == "nothing was applied");
    CHECK(std::find(lines.begin(), lines.end(), "tracked connections: 0") != lines.end());
    CHECK(f.dataplane->rejudged == 1);
    CHECK(f.dataplane->publications == 0);

    std::ofstream(candidate) << "ports: [";
    lines = f.reloader->dry_run(candidate);
    REQUIRE(!lines.empty());
    CHECK(lines.front().starts_with("error: " + candidate));
    CHECK(f.dataplane->rejudged == 1);
    CHECK(f.reloader->status().read().successes + f.reloader->status().read().failures == 0);
}

TEST_CASE("reloader: health targets for checked backends, by stable id, the port the check names first", "[reloader]") {
    const ConfigResult r = load_config_text(R"(ports:
  - {name: lan, device: net_null0}
lcores:
  - {id: 1, roles: [rx, worker]}
services:
  - name: web
    vip: 192.0.2.10
    port: 80
    protocol: tcp
    mode: dsr
    backends:
      - {address: 10.1.0.1, mac: "02:00:00:00:01:01", health_check: {type: http, path: /up, port: 9000}}
      - {address: 10.1.0.2, mac: "02:00:00:00:01:02", health_check: {type: tcp}}
      - {address: 10.1.0.3, mac: "02:00:00:00:01:03"}
)",
                                            "t.yaml");
    REQUIRE(r.config);
    BackendRegistry backends;
    backends.ids = {{"web/10.1.0.1", 4}, {"web/10.1.0.2", 7}};
    const auto targets = health_targets(*r.config, backends);
    REQUIRE(targets.size() == 2);
    CHECK(targets[0].id == 4);
    CHECK(targets[0].spec.kind == HealthCheckKind::http);
    CHECK(targets[0].spec.http_path == "/up");
    CHECK(targets[0].spec.port == 9000);
    CHECK(targets[1].id == 7);
    CHECK(targets[1].spec.kind == HealthCheckKind::tcp);
    CHECK(targets[1].spec.address == "10.1.0.2");
    CHECK(targets[1].spec.port == 80);  // the service's port: the backend names none
}

TEST_CASE("reloader: a reload of the file the running config came from builds and publishes nothing", "[reloader]") {
    Fixture f;
    REQUIRE(f.reloader->apply("file changed"));
    CHECK(f.dataplane->publications == 0);
    CHECK(f.applied == 0);
    CHECK(f.reloader->status().read().successes == 1);

    // A refused edit, then the file restored: the running config is the file's again, and the reload says so.
    f.write(f.with("next_hop_mac", "next_hop_mack"));
    CHECK_FALSE(f.reloader->apply("SIGHUP"));
    f.write(kConfig);
    REQUIRE(f.reloader->apply("SIGHUP"));
    CHECK(f.dataplane->publications == 0);
    const ReloadRecord status = f.reloader->status().read();
    CHECK(status.last_ok);
    CHECK(status.last_errors.empty());

    // An edit applies once; the second trigger for the same edit finds it running.
    f.write(f.with("02:00:00:00:00:02", "02:00:00:00:00:09"));
    REQUIRE(f.reloader->apply("file changed"));
    REQUIRE(f.reloader->apply("SIGHUP"));
    CHECK(f.dataplane->publications == 1);
    CHECK(f.applied == 1);
}

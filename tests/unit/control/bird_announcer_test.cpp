#include <catch2/catch.hpp>

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "control/bird_announcer.hpp"

using namespace sluice;
using namespace std::chrono_literals;

namespace {

ServiceHealth service(const char* name, const char* vip, uint32_t usable, uint32_t min_healthy = 1) {
    return {name, vip, std::string(vip).find(':') != std::string::npos ? IpFamily::ipv6 : IpFamily::ipv4, usable,
            min_healthy};
}

std::string read_file(const std::filesystem::path& path) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

std::filesystem::path temp_dir(const char* tag) {
    auto dir =
        std::filesystem::temp_directory_path() / ("sluice-bird-" + std::string(tag) + "-" + std::to_string(getpid()));
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    return dir;
}

// A fake BIRD control socket: greets, reads one command, answers with `answer` (or nothing, to test the timeout).
struct FakeBird {
    std::string path;
    int listener = -1;
    std::thread thread;
    std::string received;

    FakeBird(const std::string& p, std::string answer, bool greet = true) : path(p) {
        listener = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_un a{};
        a.sun_family = AF_UNIX;
        std::strcpy(a.sun_path, path.c_str());
        unlink(path.c_str());
        REQUIRE(bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
        REQUIRE(listen(listener, 4) == 0);
        thread = std::thread([this, answer, greet] {
            const int c = accept(listener, nullptr, nullptr);
            if (c < 0) return;
            if (greet) {
                const std::string hello = "0001 BIRD 2.0.12 ready.\n";
                (void)!write(c, hello.data(), hello.size());
                char buf[256];
                const ssize_t n = read(c, buf, sizeof buf);
                if (n > 0) received.assign(buf, static_cast<std::size_t>(n));
                (void)!write(c, answer.data(), answer.size());
            }
            usleep(300000);  // hold the connection: the client must stop at the end of the reply, not at EOF
            close(c);
        });
    }
    void wait() {
        if (thread.joinable()) thread.join();
    }
    ~FakeBird() {
        shutdown(listener, SHUT_RDWR);
        wait();
        close(listener);
        unlink(path.c_str());
    }
};

}  // namespace

TEST_CASE("bgp: a VIP is wanted while one of its services has min_healthy usable backends", "[bgp]") {
    CHECK(wanted_vips({service("web", "10.0.0.1", 1)}, true, false) == std::vector<std::string>{"10.0.0.1"});
    CHECK(wanted_vips({service("web", "10.0.0.1", 0)}, true, false).empty());
    CHECK(wanted_vips({service("web", "10.0.0.1", 2, 3)}, true, false).empty());
    CHECK(wanted_vips({service("web", "10.0.0.1", 3, 3)}, true, false) == std::vector<std::string>{"10.0.0.1"});
    // min_healthy 0: announced whatever the backends do.
    CHECK(wanted_vips({service("web", "10.0.0.1", 0, 0)}, true, false) == std::vector<std::string>{"10.0.0.1"});
    // Two services on one VIP (80 and 443): one healthy is enough, and the VIP appears once.
    CHECK(wanted_vips({service("web", "10.0.0.1", 0), service("tls", "10.0.0.1", 2), service("dns", "2001:db8::53", 1)},
                      true, false) == std::vector<std::string>{"10.0.0.1", "2001:db8::53"});
}

TEST_CASE("bgp: nothing is wanted while a link is down or sluice drains", "[bgp]") {
    const std::vector<ServiceHealth> healthy{service("web", "10.0.0.1", 3), service("dns", "10.0.0.2", 1)};
    CHECK(wanted_vips(healthy, true, false).size() == 2);
    CHECK(wanted_vips(healthy, false, false).empty());
    CHECK(wanted_vips(healthy, true, true).empty());
}

TEST_CASE("bgp: the include file holds both static protocols and one host route per VIP", "[bgp]") {
    const std::string text = render_bird_include({"10.0.0.1", "2001:db8::1"});
    CHECK(text.find("protocol static sluice_vips4 {\n    ipv4;\n    route 10.0.0.1/32 blackhole;\n}") !=
          std::string::npos);
    CHECK(text.find("protocol static sluice_vips6 {\n    ipv6;\n    route 2001:db8::1/128 blackhole;\n}") !=
          std::string::npos);
    const std::string empty = render_bird_include({});
    CHECK(empty.find("protocol static sluice_vips4 {\n    ipv4;\n}") != std::string::npos);
    CHECK(empty.find("protocol static sluice_vips6 {\n    ipv6;\n}") != std::string::npos);
    CHECK(empty.find("route") == std::string::npos);
}

TEST_CASE("bgp: the include file is replaced whole, never left half written", "[bgp]") {
    const auto dir = temp_dir("write");
    const std::string path = (dir / "vips.conf").string();
    std::string error;
    REQUIRE(write_file_atomically(path, "first\n", error));
    REQUIRE(write_file_atomically(path, "second\n", error));
    CHECK(read_file(path) == "second\n");
    CHECK_FALSE(std::filesystem::exists(path + ".tmp"));
    CHECK_FALSE(write_file_atomically((dir / "missing" / "vips.conf").string(), "x", error));
    CHECK(error.find("cannot create") != std::string::npos);
    std::filesystem::remove_all(dir);
}

TEST_CASE("bgp: BIRD is asked only when the set changes, and counts follow", "[bgp]") {
    std::vector<std::string> applied;
    int calls = 0;
    BgpConfig config;
    config.enabled = true;
    BirdAnnouncer a(config, [&](const std::string& text, std::string&) {
        ++calls;
        applied.push_back(text);
        return true;
    });
    auto now = BirdAnnouncer::Clock::now();
    CHECK(a.update({}, now));  // the first call always writes: a crashed sluice may have left VIPs behind
    CHECK(calls == 1);
    CHECK_FALSE(a.update({}, now));
    CHECK(calls == 1);
    CHECK(a.update({"10.0.0.1", "10.0.0.2"}, now));
    CHECK(a.update({"10.0.0.2"}, now));
    CHECK_FALSE(a.update({"10.0.0.2"}, now));
    CHECK(calls == 3);
    CHECK(applied.back().find("10.0.0.1") == std::string::npos);
    const BgpRecord r = a.record();
    REQUIRE(r.vips.size() == 2);
    CHECK(r.vips[0].vip == "10.0.0.1");
    CHECK(r.vips[0].announcements == 1);
    CHECK(r.vips[0].withdrawals == 1);
    CHECK_FALSE(r.vips[0].announced);
    CHECK(r.vips[1].announced);
    CHECK(r.vips[1].withdrawals == 0);
    CHECK(r.reconfigures == 3);
    CHECK(r.in_sync);
    // force: applied again although nothing changed (the stop after a drain makes sure).
    CHECK(a.update({"10.0.0.2"}, now, true));
    CHECK(calls == 4);
}

TEST_CASE("bgp: an unreachable BIRD is retried with a backoff and counted", "[bgp]") {
    bool up = false;
    int calls = 0;
    BirdAnnouncer a(BgpConfig{}, [&](const std::string&, std::string& error) {
        ++calls;
        error = "cannot connect";
        return up;
    });
    auto now = BirdAnnouncer::Clock::now();
    CHECK_FALSE(a.update({"10.0.0.1"}, now));
    CHECK_FALSE(a.update({"10.0.0.1"}, now + 100ms));  // within the first backoff (0.5 s): not asked
    CHECK(calls == 1);
    CHECK_FALSE(a.update({"10.0.0.1"}, now + 600ms));
    CHECK(calls == 2);
    CHECK_FALSE(a.update({"10.0.0.1"}, now + 1200ms));  // backoff is 1 s now
    CHECK(calls == 2);
    CHECK_FALSE(a.update({}, now + 1300ms));  // a new set goes out at once
    CHECK(calls == 3);
    CHECK(a.announced().empty());
    CHECK_FALSE(a.in_sync());
    CHECK(a.record().reconfigure_failures == 3);
    CHECK(a.record().last_error == "cannot connect");
    up = true;
    CHECK(a.update({"10.0.0.1"}, now + 1400ms));
    CHECK(a.in_sync());
    CHECK(a.announced() == std::vector<std::string>{"10.0.0.1"});
    CHECK(a.record().vips[0].announcements == 1);
}

TEST_CASE("bgp: the announcer writes the file and runs configure on BIRD's socket", "[bgp]") {
    const auto dir = temp_dir("socket");
    BgpConfig config;
    config.enabled = true;
    config.bird_socket = (dir / "bird.ctl").string();
    config.include_file = (dir / "vips.conf").string();
    config.timeout_ms = 1000;
    {
        FakeBird bird(config.bird_socket, "0002-Reading configuration from /etc/bird/bird.conf\n0003 Reconfigured\n");
        BirdAnnouncer a(config);
        CHECK(a.update({"10.0.0.1"}, BirdAnnouncer::Clock::now()));
        CHECK(read_file(config.include_file) == render_bird_include({"10.0.0.1"}));
        bird.wait();
        CHECK(bird.received == "configure\n");
    }
    {
        FakeBird bird(
            config.bird_socket,
            "0002-Reading configuration from /etc/bird/bird.conf\n8002 /run/bird/sluice-vips.conf:2:5 syntax error\n");
        const BirdReply reply = bird_request(config.bird_socket, "configure", 1000ms);
        CHECK_FALSE(reply.ok);
        CHECK(reply.code == 8002);
        CHECK(reply.error.find("syntax error") != std::string::npos);
    }
    {
        FakeBird bird(config.bird_socket, "", false);  // accepts, never greets
        const auto started = std::chrono::steady_clock::now();
        const BirdReply reply = bird_request(config.bird_socket, "configure", 100ms);
        CHECK_FALSE(reply.ok);
        CHECK(reply.error.find("did not answer") != std::string::npos);
        CHECK(std::chrono::steady_clock::now() - started < 250ms);
    }
    const BirdReply none = bird_request((dir / "absent.ctl").string(), "configure", 100ms);
    CHECK_FALSE(none.ok);
    CHECK(none.error.find("cannot connect") != std::string::npos);
    std::filesystem::remove_all(dir);
}

namespace {

const char* kBgpBase = R"(ports:
  - {name: lan, device: net_null0}
lcores:
  - {id: 1, roles: [rx, worker]}
load_balancer:
  nat_pool: 10.0.9.1
services:
  - name: web
    vip: 10.0.0.1
    port: 80
    protocol: tcp
    mode: nat
    min_healthy: 2
    backends: [{address: 10.0.1.1}, {address: 10.0.1.2}]
)";

}  // namespace

TEST_CASE("config: bgp is off without its section and takes its defaults with an empty one", "[bgp][config]") {
    const ConfigResult off = load_config_text(kBgpBase, "bgp.yaml");
    REQUIRE(off.config);
    CHECK_FALSE(off.config->bgp.enabled);
    CHECK(off.config->services[0].min_healthy == 2);
    const ConfigResult on = load_config_text(std::string(kBgpBase) + "bgp: {}\n", "bgp.yaml");
    REQUIRE(on.config);
    CHECK(on.config->bgp.enabled);
    CHECK(on.config->bgp.bird_socket == "/run/bird/bird.ctl");
    CHECK(on.config->bgp.include_file == "/run/bird/sluice-vips.conf");
    CHECK(on.config->bgp.drain_seconds == 10);
    CHECK(on.config->bgp.drain_on_sigterm);
    const ConfigResult set = load_config_text(
        std::string(kBgpBase) + "bgp: {bird_socket: /run/b.ctl, include_file: /run/v.conf, drain_seconds: 0,"
                                " drain_on_sigterm: false, timeout_ms: 500}\n",
        "bgp.yaml");
    REQUIRE(set.config);
    CHECK(set.config->bgp.drain_seconds == 0);
    CHECK_FALSE(set.config->bgp.drain_on_sigterm);
    CHECK(set.config->bgp.timeout_ms == 500);
    // Where BIRD is needs a restart; how long to drain does not.
    Config moved = *set.config;
    moved.bgp.include_file = "/run/other.conf";
    CHECK(restart_required_changes(*set.config, moved) ==
          std::vector<std::string>{"bgp bird_socket or include_file changed"});
    Config longer = *set.config;
    longer.bgp.drain_seconds = 30;
    CHECK(restart_required_changes(*set.config, longer).empty());
    CHECK(restart_required_changes(*off.config, *on.config) ==
          std::vector<std::string>{"bgp section added or removed"});
}

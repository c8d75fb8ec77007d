#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include <sys/stat.h>
#include <unistd.h>

#include "config/config.hpp"
#include "config/config_errors.hpp"
#include "config/two_port_config.hpp"

using namespace sluice;

namespace {

// A key file in a directory of its own, with the given bytes and mode.
std::string key_file(const std::string& bytes, mode_t mode) {
    const std::string dir = "/tmp/sluice-sync-test-" + std::to_string(::getpid());
    std::filesystem::create_directories(dir);
    const std::string path = dir + "/sync.key";
    std::filesystem::remove(path);
    std::ofstream(path) << bytes;
    ::chmod(path.c_str(), mode);
    return path;
}

ConfigResult with_sync(const std::string& sync) {
    return load_config_text(std::string(kTwoPortConfig) + "firewall: {default: allow}\nsync:\n" + sync, "s.yaml");
}

}  // namespace

TEST_CASE("config sync: a key file only its owner reads gives the key, without its newline", "[config][sync]") {
    const std::string key = "k2V0aGlzIGlzIGEgdGVzdCBrZXkgb2YgZW5vdWdoIGJ5dGVz";
    const std::string path = key_file(key + "\n", 0600);
    const ConfigResult r = with_sync("  listen: 10.9.0.1:7900\n  peers: [10.9.0.2:7900, 10.9.0.3:7901]\n"
                                     "  key_file: " +
                                     path + "\n  refresh_fraction: 0.25\n");
    INFO(errors_of(r));
    REQUIRE(r.config);
    const SyncConfig& s = r.config->sync;
    CHECK(s.enabled);
    CHECK(s.key == key);
    CHECK(s.listen.port == 7900);
    CHECK(s.listen.family == IpFamily::ipv4);
    REQUIRE(s.peers.size() == 2);
    CHECK(s.peers[1].port == 7901);
    CHECK(s.refresh_fraction == 0.25);
    CHECK(s.ring_size == 16384);
    // The sync channel is set up at start: a change needs a restart.
    const ConfigResult other =
        with_sync("  listen: 10.9.0.1:7900\n  peers: [10.9.0.2:7900]\n  key_file: " + path + "\n");
    REQUIRE(other.config);
    CHECK(restart_required_changes(*r.config, *other.config) == std::vector<std::string>{"sync section changed"});
}

TEST_CASE("config sync: a key file others may read, or a short key, is refused", "[config][sync]") {
    const std::string key = "k2V0aGlzIGlzIGEgdGVzdCBrZXkgb2YgZW5vdWdoIGJ5dGVz";
    SECTION("group-readable") {
        const std::string path = key_file(key, 0640);
        const ConfigResult r =
            with_sync("  listen: 10.9.0.1:7900\n  peers: [10.9.0.2:7900]\n  key_file: " + path + "\n");
        CHECK(errors_of(r) == "s.yaml:12:13: sync key_file '" + path +
                                  "' may be read or written by others than its owner: chmod 600 it\n");
    }
    SECTION("too short") {
        const std::string path = key_file("short\n", 0600);
        const ConfigResult r =
            with_sync("  listen: 10.9.0.1:7900\n  peers: [10.9.0.2:7900]\n  key_file: " + path + "\n");
        CHECK(errors_of(r) == "s.yaml:12:13: sync key_file '" + path +
                                  "' holds 5 bytes: the key must have 32 to 4096 (e.g. head -c 32 /dev/urandom | "
                                  "base64)\n");
    }
}

TEST_CASE("config sync: peers are other endpoints of the listen address's family, each once", "[config][sync]") {
    const ConfigResult r =
        with_sync("  enabled: false\n  listen: \"[2001:db8::1]:7900\"\n"
                  "  peers: [\"[2001:db8::1]:7900\", \"[2001:db8::2]:7900\", \"[2001:db8::2]:7900\"]\n"
                  "  key_file: /etc/sluice/sync.key\n");
    CHECK(errors_of(r) == "s.yaml:12:11: sync peer '[2001:db8::1]:7900' is this instance's own listen address\n"
                          "s.yaml:12:55: sync peer '[2001:db8::2]:7900' is listed twice\n");
}

TEST_CASE("config sync: absent or disabled, nothing is read", "[config][sync]") {
    const ConfigResult absent = load_config_text(kTwoPortConfig, "s.yaml");
    REQUIRE(absent.config);
    CHECK_FALSE(absent.config->sync.enabled);
    const ConfigResult off = with_sync("  enabled: false\n  listen: 10.9.0.1:7900\n  peers: 10.9.0.2:7900\n"
                                       "  key_file: /nonexistent/key\n");
    INFO(errors_of(off));
    REQUIRE(off.config);
    CHECK_FALSE(off.config->sync.enabled);
}

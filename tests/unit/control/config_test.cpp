#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include <rte_acl.h>

#include "control/config.hpp"

using namespace sluice;

namespace {

const char* kValid = R"(eal: [-l, "0-2", --in-memory]
log:
  level: debug
dataplane:
  ring_size: 1024
  idle_sleep_us: 10
ports:
  - name: lan
    device: net_null0
    rx_queues: 2
  - name: wan
    device: net_null1
    mtu: 9000
    promiscuous: false
lcores:
  - id: 1
    roles: [rx, worker]
  - id: 2
    roles: [worker]
forward:
  - from: lan
    to: wan
    next_hop_mac: "02:00:00:00:00:02"
  - from: wan
    to: lan
    next_hop_mac: 02:00:00:00:00:01
)";

std::string errors_of(const ConfigResult& r) {
    std::string all;
    for (const ConfigError& e : r.errors) all += e.to_string() + "\n";
    return all;
}

}  // namespace

TEST_CASE("config: a full valid config decodes", "[config]") {
    const ConfigResult r = load_config_text(kValid, "valid.yaml");
    INFO(errors_of(r));
    REQUIRE(r.config);
    const Config& c = *r.config;
    CHECK(c.eal == std::vector<std::string>{"-l", "0-2", "--in-memory"});
    CHECK(c.log.level == "debug");
    CHECK(c.dataplane.ring_size == 1024);
    CHECK(c.dataplane.idle_sleep_us == 10);
    REQUIRE(c.ports.size() == 2);
    CHECK(c.ports[0].rx_queues == 2);
    CHECK(c.ports[0].promiscuous);
    CHECK(c.ports[1].mtu == 9000);
    CHECK_FALSE(c.ports[1].promiscuous);
    REQUIRE(c.lcores.size() == 2);
    CHECK(c.lcores[0].rx);
    CHECK(c.lcores[0].worker);
    CHECK_FALSE(c.lcores[1].rx);
    REQUIRE(c.forward.size() == 2);
    CHECK(c.forward[0].next_hop_mac.addr_bytes[5] == 2);
}

TEST_CASE("config: queues spread round-robin over rx lcores", "[config]") {
    std::string text = kValid;
    text.replace(text.find("    roles: [worker]"), 19, "    roles: [rx, worker]");
    const ConfigResult r = load_config_text(text, "t.yaml");
    REQUIRE(r.config);
    const auto plan = assign_rx_queues(*r.config);
    REQUIRE(plan.size() == 2);
    CHECK(plan[0] == std::vector<std::pair<std::size_t, uint16_t>>{{0, 0}, {1, 0}});
    CHECK(plan[1] == std::vector<std::pair<std::size_t, uint16_t>>{{0, 1}});
}

TEST_CASE("config: errors carry line and column, and all are reported", "[config]") {
    const ConfigResult r = load_config_text(R"(ports:
  - name: lan
    device: net_null0
    mtux: 1500
lcores:
  - id: 1
    roles: [rx, wrker]
)",
                                            "bad.yaml");
    REQUIRE_FALSE(r.config);
    const std::string all = errors_of(r);
    INFO(all);
    CHECK(all.find("bad.yaml:4:5: unknown key 'mtux' in a port") != std::string::npos);
    CHECK(all.find("bad.yaml:7:17: lcore 1: unknown role 'wrker'") != std::string::npos);
    CHECK(all.find("at least one lcore needs the worker role") != std::string::npos);
}

TEST_CASE("config: YAML syntax errors name the line", "[config]") {
    const ConfigResult r = load_config_text("ports:\n  - name: [lan\n", "syntax.yaml");
    REQUIRE(r.errors.size() == 1);
    CHECK(r.errors[0].to_string().rfind("syntax.yaml:", 0) == 0);
    CHECK(r.errors[0].line >= 2);
    CHECK(r.errors[0].message.find("YAML syntax") != std::string::npos);
}

TEST_CASE("config: a missing file is a clear error", "[config]") {
    const ConfigResult r = load_config_file("/nonexistent/sluice.yaml");
    REQUIRE(r.errors.size() == 1);
    CHECK(r.errors[0].to_string() == "/nonexistent/sluice.yaml: cannot read the file: No such file or directory");
}

// Every file in config/invalid/ breaks one rule; its first line says which error it must produce:
//   # expect: LINE:COL: message
TEST_CASE("config: every invalid example fails with its expected message", "[config]") {
    int checked = 0;
    for (const auto& entry : std::filesystem::directory_iterator(SLUICE_SOURCE_DIR "/config/invalid")) {
        if (entry.path().extension() != ".yaml") continue;  // prefix files used by the examples sit beside them
        std::ifstream in(entry.path());
        std::string first;
        std::getline(in, first);
        const std::string tag = "# expect: ";
        REQUIRE(first.rfind(tag, 0) == 0);
        // The error names the config file, or (for a prefix file) a file beside it.
        const std::string in_config = entry.path().string() + ":" + first.substr(tag.size());
        const std::string beside = entry.path().parent_path().string() + "/" + first.substr(tag.size());
        const ConfigResult r = load_config_file(entry.path().string());
        const std::string all = errors_of(r);
        INFO(entry.path().filename().string() << " gave:\n" << all);
        CHECK_FALSE(r.config);
        CHECK((all.find(in_config + "\n") != std::string::npos || all.find(beside + "\n") != std::string::npos));
        ++checked;
    }
    CHECK(checked >= 40);
}

TEST_CASE("config: the shipped configs are valid", "[config]") {
    for (const char* name : {"/config/sluice.yaml", "/config/lab.yaml"}) {
        const ConfigResult r = load_config_file(std::string(SLUICE_SOURCE_DIR) + name);
        INFO(name << ": " << errors_of(r));
        CHECK(r.config);
    }
}

TEST_CASE("config: error replies are capped at 1000 a second by default; 0 lifts the cap, which a burst then needs",
          "[config]") {
    const ConfigResult plain = load_config_text(kValid, "valid.yaml");
    REQUIRE(plain.config);
    CHECK(plain.config->dataplane.max_error_replies_per_second == 1000);
    CHECK(plain.config->dataplane.error_reply_burst == 0);  // one second's worth, filled in by the snapshot builder

    const std::string at = "  idle_sleep_us: 10\n";
    std::string text = kValid;
    text.replace(text.find(at), at.size(), at + "  max_error_replies_per_second: 50\n  error_reply_burst: 5\n");
    const ConfigResult set = load_config_text(text, "set.yaml");
    INFO(errors_of(set));
    REQUIRE(set.config);
    CHECK(set.config->dataplane.max_error_replies_per_second == 50);
    CHECK(set.config->dataplane.error_reply_burst == 5);
    CHECK(restart_required_changes(*plain.config, *set.config).empty());  // reloadable

    text = kValid;
    text.replace(text.find(at), at.size(), at + "  max_error_replies_per_second: 0\n  error_reply_burst: 5\n");
    const ConfigResult burst_alone = load_config_text(text, "burst.yaml");
    REQUIRE_FALSE(burst_alone.config);
    const std::string all = errors_of(burst_alone);
    INFO(all);
    CHECK(all.find("burst.yaml:") != std::string::npos);
    CHECK(all.find("error_reply_burst needs max_error_replies_per_second above 0") != std::string::npos);
}

TEST_CASE("config: martians are dropped in both families by default; each family's check turns off alone and reloads",
          "[config]") {
    const ConfigResult plain = load_config_text(kValid, "valid.yaml");
    REQUIRE(plain.config);
    CHECK(plain.config->dataplane.drop_martians_v4);
    CHECK(plain.config->dataplane.drop_martians_v6);

    std::string text = kValid;
    const std::string at = "  idle_sleep_us: 10\n";
    text.replace(text.find(at), at.size(), at + "  martians: {ipv4: drop, ipv6: off}\n");
    const ConfigResult v6_off = load_config_text(text, "v6_off.yaml");
    INFO(errors_of(v6_off));
    REQUIRE(v6_off.config);
    CHECK(v6_off.config->dataplane.drop_martians_v4);
    CHECK_FALSE(v6_off.config->dataplane.drop_martians_v6);
    CHECK(restart_required_changes(*plain.config, *v6_off.config).empty());

    text = kValid;
    text.replace(text.find(at), at.size(), at + "  martians: {ipv4: off, ipv5: off}\n");
    const ConfigResult unknown = load_config_text(text, "unknown.yaml");
    REQUIRE_FALSE(unknown.config);
    CHECK(errors_of(unknown).find("unknown key 'ipv5' in dataplane martians") != std::string::npos);
}

TEST_CASE("config: the new-connection cap defaults off, its burst to one second's worth, and reloads", "[config]") {
    const ConfigResult plain = load_config_text(kValid, "valid.yaml");
    REQUIRE(plain.config);
    CHECK(plain.config->dataplane.max_new_connections_per_second == 0);

    std::string text = kValid;
    const std::string at = "  idle_sleep_us: 10\n";
    text.replace(text.find(at), at.size(), at + "  max_new_connections_per_second: 5000\n");
    const ConfigResult capped = load_config_text(text, "capped.yaml");
    INFO(errors_of(capped));
    REQUIRE(capped.config);
    CHECK(capped.config->dataplane.max_new_connections_per_second == 5000);
    CHECK(capped.config->dataplane.new_connection_burst == 0);  // one second's worth, as above
    CHECK(restart_required_changes(*plain.config, *capped.config).empty());

    text.replace(text.find(at), at.size(), at + "  new_connection_burst: 200\n");
    const ConfigResult bursty = load_config_text(text, "bursty.yaml");
    INFO(errors_of(bursty));
    REQUIRE(bursty.config);
    CHECK(bursty.config->dataplane.new_connection_burst == 200);

    std::string ring = kValid;
    ring.replace(ring.find("ring_size: 1024"), 15, "ring_size: 2048");
    const ConfigResult bigger = load_config_text(ring, "ring.yaml");
    REQUIRE(bigger.config);
    CHECK(restart_required_changes(*plain.config, *bigger.config) ==
          std::vector<std::string>{"dataplane settings changed"});
}

TEST_CASE("config: acl_method names an rte_acl method, defaults to auto, and reloads live", "[config]") {
    const ConfigResult plain = load_config_text(std::string(kValid) + "firewall:\n  default: deny\n", "plain.yaml");
    INFO(errors_of(plain));
    REQUIRE(plain.config);
    CHECK(plain.config->firewall.acl_method == RTE_ACL_CLASSIFY_DEFAULT);
    for (const auto& [name, method] :
         {std::pair{"auto", RTE_ACL_CLASSIFY_DEFAULT}, std::pair{"scalar", RTE_ACL_CLASSIFY_SCALAR},
          std::pair{"sse", RTE_ACL_CLASSIFY_SSE}, std::pair{"avx2", RTE_ACL_CLASSIFY_AVX2},
          std::pair{"avx512x16", RTE_ACL_CLASSIFY_AVX512X16}, std::pair{"avx512x32", RTE_ACL_CLASSIFY_AVX512X32}}) {
        const ConfigResult set =
            load_config_text(std::string(kValid) + "firewall:\n  acl_method: " + name + "\n", "set.yaml");
        INFO(name << ": " << errors_of(set));
        REQUIRE(set.config);
        CHECK(set.config->firewall.acl_method == method);
        CHECK(restart_required_changes(*plain.config, *set.config).empty());
    }
    const ConfigResult bad = load_config_text(std::string(kValid) + "firewall:\n  acl_method: [sse]\n", "bad.yaml");
    REQUIRE_FALSE(bad.config);
    INFO(errors_of(bad));
    CHECK(errors_of(bad).find("bad.yaml:28:15: firewall acl_method '' is none of auto, scalar, sse, avx2, avx512x16, "
                              "avx512x32") != std::string::npos);
}

TEST_CASE("config: ipv6_table_size is a share of table_size, defaults to ConnTable's, and needs a restart",
          "[config]") {
    const std::string firewall = "firewall:\n  table_size: 100000\n";
    const ConfigResult plain = load_config_text(std::string(kValid) + firewall, "plain.yaml");
    INFO(errors_of(plain));
    REQUIRE(plain.config);
    CHECK(plain.config->firewall.ipv6_table_size == 0);  // ConnTable::default_ipv6_capacity(100000) = 12500

    const ConfigResult set =
        load_config_text(std::string(kValid) + firewall + "  ipv6_table_size: 50000\n", "set.yaml");
    INFO(errors_of(set));
    REQUIRE(set.config);
    CHECK(set.config->firewall.ipv6_table_size == 50000);
    CHECK(restart_required_changes(*plain.config, *set.config) ==
          std::vector<std::string>{"firewall ipv6_table_size changed"});

    const ConfigResult above =
        load_config_text(std::string(kValid) + firewall + "  ipv6_table_size: 100001\n", "above.yaml");
    INFO(errors_of(above));
    REQUIRE_FALSE(above.config);
    CHECK(errors_of(above).find("above.yaml:29:20: ipv6_table_size 100001 is above table_size 100000") !=
          std::string::npos);
    const ConfigResult small =
        load_config_text(std::string(kValid) + firewall + "  ipv6_table_size: 1000\n", "small.yaml");
    REQUIRE_FALSE(small.config);
    CHECK(errors_of(small).find("small.yaml:29:20: ipv6_table_size") != std::string::npos);
}

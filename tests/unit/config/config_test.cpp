#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include <rte_acl.h>

#include "config/config.hpp"
#include "config/config_errors.hpp"

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
    CHECK(plain.config->firewall.ipv6_table_size == 0);  // ConnTable::default_ipv6_capacity(100000) = 6250

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

TEST_CASE("config: a key given twice in any map is an error at the second, whatever yaml-cpp would keep", "[config]") {
    // A second firewall section appended at the end: yaml-cpp's lookups find the first and ignore this one.
    const ConfigResult top =
        load_config_text(std::string(kValid) + "firewall:\n  default: deny\nfirewall: {default: allow}\n", "top.yaml");
    INFO(errors_of(top));
    REQUIRE_FALSE(top.config);
    CHECK(errors_of(top) ==
          "top.yaml:29:1: duplicate key 'firewall' in the top level (first at line 27; only one may be given)\n");

    const ConfigResult nested = load_config_text(std::string(kValid) + R"(firewall:
  timeouts: {tcp_established: 10, tcp_established: 20}
  rules:
    - name: web
      action: allow
      rate_limit: {rate: 10, per: source, rate: 20}
)",
                                                 "nested.yaml");
    INFO(errors_of(nested));
    REQUIRE_FALSE(nested.config);
    CHECK(errors_of(nested) ==
          "nested.yaml:28:35: duplicate key 'tcp_established' in firewall timeouts (first at line 28; only one may be "
          "given)\n"
          "nested.yaml:32:43: duplicate key 'rate' in rule 'web' rate_limit (first at line 32; only one may be "
          "given)\n");

    std::string port = kValid;
    port.replace(port.find("    mtu: 9000\n"), 14, "    mtu: 9000\n    mtu: 1500\n");
    const ConfigResult block = load_config_text(port, "port.yaml");
    INFO(errors_of(block));
    REQUIRE_FALSE(block.config);
    CHECK(errors_of(block).find("port.yaml:14:5: duplicate key 'mtu' in a port (first at line 13") !=
          std::string::npos);
}

TEST_CASE("config: a network with host bits set is refused with the network meant, in rules, sets and files",
          "[config]") {
    const ConfigResult bad = load_config_text(std::string(kValid) + R"(firewall:
  prefix_sets:
    - {name: partners, prefixes: [198.51.100.0/24, 2001:db8:0:7::1/64]}
  rules:
    - {name: v4, source: 203.0.113.77/24, action: allow}
    - {name: v6, destination: [2001:db8::/32, "2001:db8:1:2:3::/48"], action: deny}
)",
                                              "bits.yaml");
    INFO(errors_of(bad));
    REQUIRE_FALSE(bad.config);
    CHECK(errors_of(bad) ==
          "bits.yaml:29:52: prefix set 'partners': 2001:db8:0:7::1/64 has host bits set; did you mean "
          "2001:db8:0:7::/64?\n"
          "bits.yaml:31:26: rule 'v4' source: 203.0.113.77/24 has host bits set; did you mean 203.0.113.0/24?\n"
          "bits.yaml:32:47: rule 'v6' destination: 2001:db8:1:2:3::/48 has host bits set; did you mean "
          "2001:db8:1::/48?\n");

    const auto dir = std::filesystem::temp_directory_path() / ("sluice-host-bits-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir);
    std::ofstream(dir / "blocked.txt") << "10.0.0.0/8\n192.0.2.1\n  10.9.8.7/16  # a host, not the /16\n";
    const ConfigResult file = load_config_text(
        std::string(kValid) + "firewall:\n  prefix_sets:\n    - {name: blocked, file: blocked.txt, early_drop: true}\n",
        (dir / "sluice.yaml").string());
    std::filesystem::remove_all(dir);
    INFO(errors_of(file));
    REQUIRE_FALSE(file.config);
    CHECK(errors_of(file) ==
          (dir / "blocked.txt").string() + ":3:3: 10.9.8.7/16 has host bits set; did you mean 10.9.0.0/16?\n");

    // Networks written as networks, hosts as /32 or /128 or bare, and port addresses (a host on its link) pass.
    std::string good = kValid;
    good.replace(good.find("    rx_queues: 2\n"), 17,
                 "    rx_queues: 2\n    addresses: [10.77.2.1/24, fd77:2::1/64]\n");
    const ConfigResult ok = load_config_text(good + R"(firewall:
  prefix_sets:
    - {name: partners, prefixes: [198.51.100.0/24, 2001:db8:0:7::/64, 192.0.2.7, 192.0.2.8/32, "::/0"]}
  rules:
    - {name: v4, source: [203.0.113.0/24, 0.0.0.0/0, "@partners"], action: allow}
    - {name: v6, destination: [2001:db8::1/128, 2001:db8::/32], action: deny}
)",
                                             "ok.yaml");
    INFO(errors_of(ok));
    REQUIRE(ok.config);
    CHECK(ok.config->port_addresses.size() == 2);
    CHECK(ok.config->firewall.prefix_sets[0].v4.size() == 3);
}

TEST_CASE("config: a service whose backends all have weight 0 loads with a warning; one with a weight, without",
          "[config]") {
    const auto service = [](const char* second_weight) {
        return std::string(kValid) + R"(load_balancer:
  nat_pool: 10.1.0.100
services:
  - name: web
    vip: 192.0.2.100
    port: 80
    protocol: tcp
    mode: nat
    backends:
      - {address: 10.1.0.11, port: 8080, weight: 0}
      - {address: 10.1.0.12, port: 8080, weight: )" +
               second_weight + "}\n";
    };
    // Draining a whole service while its connections end is legal; by mistake it drops every new connection.
    const ConfigResult drained = load_config_text(service("0"), "drained.yaml");
    INFO(errors_of(drained));
    REQUIRE(drained.config);
    REQUIRE(drained.warnings.size() == 1);
    CHECK(drained.warnings[0].to_string() == "drained.yaml:36:7: warning: service 'web': every backend has weight 0, "
                                             "so the service takes no new connection (established ones go on)");
    const ConfigResult one = load_config_text(service("1"), "one.yaml");
    INFO(errors_of(one));
    CHECK(one.config);
    CHECK(one.warnings.empty());
}

TEST_CASE("config: rule, service and set names must be printable ASCII; the error shows the bytes", "[config]") {
    const ConfigResult bad = load_config_text(std::string(kValid) + R"(firewall:
  prefix_sets:
    - {name: "nets\u00a0v4", prefixes: [10.0.0.0/8]}
  rules:
    - {name: café, action: allow}
    - {name: "tab\there", action: deny}
load_balancer:
  nat_pool: 10.1.0.100
services:
  - {name: "web\u0001", vip: 192.0.2.100, port: 80, protocol: tcp, mode: nat, backends: [{address: 10.1.0.11}]}
)",
                                              "names.yaml");
    INFO(errors_of(bad));
    REQUIRE_FALSE(bad.config);
    const std::string all = errors_of(bad);
    const char* const kTail = "' must be printable ASCII (letters, digits, punctuation, spaces)\n";
    CHECK(all.find(std::string("names.yaml:29:14: prefix set name 'nets\\xc2\\xa0v4") + kTail) != std::string::npos);
    CHECK(all.find(std::string("names.yaml:31:14: rule name 'caf\\xc3\\xa9") + kTail) != std::string::npos);
    CHECK(all.find(std::string("names.yaml:32:14: rule name 'tab\\x09here") + kTail) != std::string::npos);
    CHECK(all.find(std::string("names.yaml:36:12: service name 'web\\x01") + kTail) != std::string::npos);

    const ConfigResult ok = load_config_text(
        std::string(kValid) + "firewall:\n  rules:\n    - {name: \"allow web (v2) #1\", action: allow}\n", "ok.yaml");
    INFO(errors_of(ok));
    REQUIRE(ok.config);
    CHECK(ok.config->firewall.rules[0].name == "allow web (v2) #1");
}

TEST_CASE("config: routes with next hops (port found by link, weights), blackhole and reject", "[config][routes]") {
    const ConfigResult r = load_config_text(R"(ports:
  - {name: lan, device: net_null0, addresses: 10.0.0.1/24}
  - {name: wan, device: net_null1, addresses: ["192.0.2.1/24", "2001:db8:1::1/64"]}
lcores:
  - {id: 1, roles: [rx, worker]}
routes:
  - prefix: 0.0.0.0/0
    next_hops: [192.0.2.11, {address: 192.0.2.12, weight: 3}, {address: 10.0.0.254, port: lan}]
  - {prefix: "2001:db8:5::/48", next_hops: "2001:db8:1::11"}
  - {prefix: 100.64.0.0/10, type: blackhole}
  - {prefix: 100.65.0.0/16, type: reject}
)",
                                            "routes.yaml");
    INFO(errors_of(r));
    REQUIRE(r.config);
    const std::vector<RouteConfig>& routes = r.config->routes;
    REQUIRE(routes.size() == 4);
    CHECK(routes[0].family == IpFamily::ipv4);
    CHECK(routes[0].prefix.length == 0);
    CHECK(routes[0].type == RouteType::via);
    REQUIRE(routes[0].next_hops.size() == 3);
    CHECK(routes[0].next_hops[0].port == "wan");
    CHECK(routes[0].next_hops[0].weight == 1);
    CHECK(routes[0].next_hops[1].weight == 3);
    CHECK(routes[0].next_hops[2].port == "lan");
    CHECK(routes[1].family == IpFamily::ipv6);
    CHECK(routes[1].prefix.length == 48);
    REQUIRE(routes[1].next_hops.size() == 1);
    CHECK(routes[1].next_hops[0].port == "wan");
    CHECK(routes[2].type == RouteType::blackhole);
    CHECK(routes[2].next_hops.empty());
    CHECK(routes[3].type == RouteType::reject);
    // Reloadable: routes travel in the snapshot.
    Config other = *r.config;
    other.routes.pop_back();
    CHECK(restart_required_changes(*r.config, other).empty());
}

TEST_CASE("config: same_sources holds while the file and every prefix file it read keep their bytes", "[config]") {
    const auto dir = std::filesystem::temp_directory_path() / ("sluice-same-sources-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir);
    const std::string path = (dir / "sluice.yaml").string();
    const std::string text =
        std::string(kValid) + "firewall:\n  prefix_sets:\n    - {name: blocked, file: blocked.txt, early_drop: true}\n";
    std::ofstream(path) << text;
    std::ofstream(dir / "blocked.txt") << "10.0.0.0/8\n";
    const ConfigResult loaded = load_config_file(path);
    INFO(errors_of(loaded));
    REQUIRE(loaded.config);
    REQUIRE(loaded.config->inputs.size() == 1);
    CHECK(loaded.config->inputs[0].path == (dir / "blocked.txt").string());
    CHECK(loaded.config->hash == content_hash(text));
    CHECK(same_sources(*loaded.config, text));
    CHECK_FALSE(same_sources(*loaded.config, text + "\n"));  // the file's own bytes changed
    std::ofstream(dir / "blocked.txt") << "10.0.0.0/8\n192.0.2.0/24\n";
    CHECK_FALSE(same_sources(*loaded.config, text));  // the prefix file changed, the config file did not
    std::filesystem::remove(dir / "blocked.txt");
    CHECK_FALSE(same_sources(*loaded.config, text));  // gone: the reload must say so
    std::filesystem::remove_all(dir);
}

TEST_CASE("config: firewall.include files add their rules in order; their errors name their own lines", "[config]") {
    const auto dir = std::filesystem::temp_directory_path() / ("sluice-include-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir / "rules");
    const std::string path = (dir / "sluice.yaml").string();
    const std::string main = std::string(kValid) + R"(firewall:
  prefix_sets:
    - {name: partners, prefixes: [198.51.100.0/24]}
  rules:
    - {name: first, protocol: tcp, destination_ports: 22, action: allow}
  include: [rules/web.yaml, rules/partners.yaml]
)";
    std::ofstream(path) << main;
    std::ofstream(dir / "rules/web.yaml")
        << "- {name: web, protocol: tcp, destination_ports: [80, 443], action: allow}\n"
           "- {name: dns, protocol: udp, destination_ports: 53, action: allow}\n";
    std::ofstream(dir / "rules/partners.yaml") << "- {name: partners, source: \"@partners\", action: allow}\n";
    const auto names = [](const Config& c) {
        std::string all;
        for (const FirewallRuleConfig& r : c.firewall.rules) all += r.name + " ";
        return all;
    };
    const ConfigResult first = load_config_file(path);
    INFO(errors_of(first));
    REQUIRE(first.config);
    CHECK(names(*first.config) == "first web dns partners ");
    CHECK(first.config->inputs.size() == 2);
    CHECK(same_sources(*first.config, main));
    CHECK(first.config->include_index.files.size() == 2);

    // Loaded again with the first load's files: the same rules. The prefix set a cached file's rule names changed:
    // that file is decoded again, with the set's new prefixes.
    std::string moved = main;
    moved.replace(moved.find("198.51.100.0/24"), 15, "203.0.113.0/24");
    std::ofstream(path) << moved;
    const ConfigResult second = load_config_file(path, &*first.config);
    INFO(errors_of(second));
    REQUIRE(second.config);
    CHECK(names(*second.config) == "first web dns partners ");
    REQUIRE(second.config->firewall.rules[3].source.v4.size() == 1);
    CHECK(to_string(second.config->firewall.rules[3].source.v4[0].address, IpFamily::ipv4) == "203.0.113.0");
    CHECK_FALSE(same_sources(*first.config, moved));

    // An edited file: its error names it, its line and column. A rule name used in two files: the second place.
    std::ofstream(dir / "rules/web.yaml")
        << "- {name: web, protocol: tcp, destination_ports: [80, 443], action: allow}\n"
           "- {name: dns, protocol: udp, destination_ports: 99999, action: allow}\n";
    std::ofstream(dir / "rules/partners.yaml") << "\n- {name: first, source: \"@partners\", action: allow}\n";
    const ConfigResult broken = load_config_file(path, &*second.config);
    REQUIRE_FALSE(broken.config);
    const std::string rules = (dir / "rules").string();
    CHECK(errors_of(broken) == rules +
                                   "/web.yaml:2:49: rule 'dns' destination_ports: '99999' is not a port (0-65535) "
                                   "or range like 1000-2000\n" +
                                   rules + "/partners.yaml:2:10: rule 'first' is defined twice\n");
    // The same names, found in the cache: reported at the same place.
    std::ofstream(dir / "rules/web.yaml")
        << "- {name: web, protocol: tcp, destination_ports: [80, 443], action: allow}\n";
    std::ofstream(dir / "rules/partners.yaml") << "\n- {name: web2, source: \"@partners\", action: allow}\n";
    const ConfigResult third = load_config_file(path, &*second.config);
    REQUIRE(third.config);
    std::string again = moved;
    again.replace(again.find("  include:"), 0, "    - {name: web2, action: deny}\n");
    std::ofstream(path) << again;
    const ConfigResult twice = load_config_file(path, &*third.config);
    CHECK(errors_of(twice) == rules + "/partners.yaml:2:10: rule 'web2' is defined twice\n");

    std::ofstream(dir / "rules/partners.yaml") << "- {name: partners, source: \"@partners\", action: allow}\n";
    std::ofstream(dir / "rules/web.yaml") << "- {name: web, protocol: tcp\n";
    const ConfigResult syntax = load_config_file(path);
    REQUIRE(syntax.errors.size() == 1);
    CHECK(syntax.errors[0].to_string().rfind(rules + "/web.yaml:", 0) == 0);
    std::filesystem::remove(dir / "rules/web.yaml");
    CHECK(errors_of(load_config_file(path)).find("firewall include: cannot read " + rules + "/web.yaml") !=
          std::string::npos);
    std::filesystem::remove_all(dir);
}

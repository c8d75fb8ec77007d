#include "config/config.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <yaml-cpp/yaml.h>

#include "config/config_decoder.hpp"
#include "dpdk/mempool.hpp"
#include "packet/vlan.hpp"
#include "pipeline/lcore_context.hpp"

namespace sluice {

std::string ConfigError::to_string() const {
    if (line == 0) return file + ": " + message;
    return file + ":" + std::to_string(line) + ":" + std::to_string(column) + ": " + message;
}

std::string BackendConfig::name() const {
    std::string a = to_string(address, family);
    if (port == 0) return a;
    return (family == IpFamily::ipv6 ? "[" + a + "]" : a) + ":" + std::to_string(port);
}

const PortSpec* Config::find_port(const std::string& name) const {
    for (const PortSpec& p : ports)
        if (p.name == name) return &p;
    return nullptr;
}

std::string Config::canonical_interface(const std::string& name) const {
    if (find_port(name)) return name;
    for (const VlanConfig& v : vlans)
        if (v.interface() == name || (!v.name.empty() && v.name == name)) return v.interface();
    return {};
}

std::vector<std::string> Config::interfaces() const {
    std::vector<std::string> names;
    for (const PortSpec& p : ports) names.push_back(p.name);
    for (const VlanConfig& v : vlans) names.push_back(v.interface());
    return names;
}

std::string interface_port_name(const std::string& interface) { return interface.substr(0, interface.find('.')); }

namespace config_detail {

bool parse_mac(const std::string& text, rte_ether_addr& mac) {
    unsigned b[6];
    char tail;
    if (std::sscanf(text.c_str(), "%2x:%2x:%2x:%2x:%2x:%2x%c", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5], &tail) != 6)
        return false;
    for (int i = 0; i < 6; ++i) mac.addr_bytes[i] = static_cast<uint8_t>(b[i]);
    return true;
}

bool address_on_link(const Config& config, const std::string& port, IpFamily family, const IpAddress& address) {
    for (const PortAddress& a : config.port_addresses) {
        if (a.port != port || a.family != family) continue;
        unsigned bits = a.length, i = 0;
        for (; bits >= 8; bits -= 8, ++i)
            if (a.address.bytes[i] != address.bytes[i]) break;
        if (bits >= 8) continue;
        const uint8_t mask = static_cast<uint8_t>(0xff00u >> bits);
        if (bits == 0 || ((a.address.bytes[i] ^ address.bytes[i]) & mask) == 0) return true;
    }
    return false;
}

namespace {

const std::set<std::string> kLogLevels = {"trace", "debug", "info", "warn", "error", "critical", "off"};

void decode_dataplane(Decoder& d, const YAML::Node& v, Config& config) {
    if (!d.map(v, "dataplane",
               {"ring_size", "idle_sleep_us", "max_new_connections_per_second", "new_connection_burst",
                "max_error_replies_per_second", "error_reply_burst", "martians"}))
        return;
    d.field(v, "ring_size", "dataplane", false, [&](const YAML::Node& r) {
        if (d.integer(r, "ring_size", config.dataplane.ring_size, 64, 1 << 20) &&
            !is_power_of_two(config.dataplane.ring_size))
            d.error(r, "ring_size must be a power of two");
    });
    d.field(v, "idle_sleep_us", "dataplane", false,
            [&](const YAML::Node& s) { d.integer(s, "idle_sleep_us", config.dataplane.idle_sleep_us, 0, 100000); });
    // A per-worker rate (0: no cap) and its bucket's size, which means nothing without a rate (0: one
    // second's worth, filled in by the snapshot builder).
    const auto rate_and_burst = [&](const char* rate_key, uint32_t& rate, const char* burst_key, uint32_t& burst) {
        d.field(v, rate_key, "dataplane", false,
                [&](const YAML::Node& n) { d.integer(n, rate_key, rate, 0, 100000000); });
        d.field(v, burst_key, "dataplane", false, [&](const YAML::Node& n) {
            if (d.integer(n, burst_key, burst, 0, 100000000) && burst && rate == 0)
                d.error(n, std::string(burst_key) + " needs " + rate_key + " above 0");
        });
    };
    DataplaneConfig& dp = config.dataplane;
    rate_and_burst("max_new_connections_per_second", dp.max_new_connections_per_second, "new_connection_burst",
                   dp.new_connection_burst);
    rate_and_burst("max_error_replies_per_second", dp.max_error_replies_per_second, "error_reply_burst",
                   dp.error_reply_burst);
    d.field(v, "martians", "dataplane", false, [&](const YAML::Node& m) {
        if (!d.map(m, "dataplane martians", {"ipv4", "ipv6"})) return;
        const auto action = [&](const char* family, bool& drop) {
            d.field(m, family, "dataplane martians", false, [&](const YAML::Node& a) {
                std::string text;
                if (!d.string(a, std::string("martians ") + family, text)) return;
                if (text == "drop" || text == "off") drop = text == "drop";
                else d.error(a, std::string("martians ") + family + " '" + text + "' is not drop or off");
            });
        };
        action("ipv4", dp.drop_martians_v4);
        action("ipv6", dp.drop_martians_v6);
    });
}

void decode_metrics(Decoder& d, const YAML::Node& v, Config& config) {
    if (!d.map(v, "metrics", {"listen"})) return;
    d.field(v, "listen", "metrics", false, [&](const YAML::Node& l) {
        if (!l.IsScalar()) return d.error(l, "metrics listen must be HOST:PORT, or empty to turn metrics off");
        config.metrics.listen = l.Scalar();
        const auto colon = config.metrics.listen.rfind(':');
        if (!config.metrics.listen.empty() &&
            (colon == std::string::npos || colon == 0 || colon + 1 == config.metrics.listen.size() ||
             config.metrics.listen.find_first_not_of("0123456789", colon + 1) != std::string::npos))
            d.error(l, "metrics listen '" + config.metrics.listen + "' must be HOST:PORT, e.g. 127.0.0.1:9469");
    });
}

ConfigResult decode(const YAML::Node& root, Decoder& d, const std::string& name) {
    ConfigResult result;
    Config config;
    config.path = name;
    if (!root || root.IsNull()) {
        d.errors().push_back({name, 0, 0, "the file is empty"});
    } else if (d.map(root, "the top level",
                     {"eal", "log", "dataplane", "metrics", "ports", "lcores", "forward", "firewall", "load_balancer",
                      "services", "bgp", "routes", "routing", "neighbours", "sync"})) {
        d.field(root, "eal", "the config", false, [&](const YAML::Node& v) {
            if (!d.sequence(v, "eal")) return;
            for (const YAML::Node& a : v) {
                std::string arg;
                if (d.string(a, "an eal argument", arg)) config.eal.push_back(arg);
            }
        });
        d.field(root, "log", "the config", false, [&](const YAML::Node& v) {
            if (!d.map(v, "log", {"level", "file"})) return;
            d.field(v, "level", "log", false, [&](const YAML::Node& l) {
                if (d.string(l, "log level", config.log.level) && !kLogLevels.count(config.log.level))
                    d.error(l, "log level '" + config.log.level +
                                   "' is not one of trace, debug, info, warn, error, critical, off");
            });
            d.field(v, "file", "log", false, [&](const YAML::Node& f) { d.string(f, "log file", config.log.file); });
        });
        d.field(root, "dataplane", "the config", false, [&](const YAML::Node& v) { decode_dataplane(d, v, config); });
        d.field(root, "metrics", "the config", false, [&](const YAML::Node& v) { decode_metrics(d, v, config); });
        std::map<std::string, YAML::Mark> port_marks;
        d.field(root, "ports", "the config", true,
                [&](const YAML::Node& v) { decode_ports(d, v, config, port_marks); });
        d.field(root, "lcores", "the config", true, [&](const YAML::Node& v) { decode_lcores(d, v, config); });
        d.field(root, "forward", "the config", false, [&](const YAML::Node& v) { decode_forward(d, v, config); });
        d.field(root, "firewall", "the config", false, [&](const YAML::Node& v) { decode_firewall(d, v, config); });
        // load_balancer first: services check their mode against its pools.
        d.field(root, "load_balancer", "the config", false,
                [&](const YAML::Node& v) { decode_load_balancer(d, v, config); });
        d.field(root, "services", "the config", false, [&](const YAML::Node& v) { decode_services(d, v, config); });
        d.field(root, "bgp", "the config", false, [&](const YAML::Node& v) { decode_bgp(d, v, config); });
        decode_port_addresses(d, root["ports"], config);
        decode_forward_next_hops(d, root["forward"], config);
        d.field(root, "routes", "the config", false, [&](const YAML::Node& v) { decode_routes(d, v, config); });
        d.field(root, "routing", "the config", false, [&](const YAML::Node& v) { decode_routing(d, v, config); });
        d.field(root, "neighbours", "the config", false, [&](const YAML::Node& v) { decode_neighbours(d, v, config); });
        d.field(root, "sync", "the config", false, [&](const YAML::Node& v) { decode_sync(d, v, config); });
        check_dsr_backends(d, root["services"], config);
    }
    result.errors = std::move(d.errors());
    result.warnings = std::move(d.warnings());
    if (result.errors.empty()) result.config = std::move(config);
    return result;
}

}  // namespace

}  // namespace config_detail

ConfigResult load_config_text(const std::string& text, const std::string& name, const Config* previous) {
    using Clock = std::chrono::steady_clock;
    const auto ms = [](Clock::time_point from, Clock::time_point to) {
        return std::chrono::duration<double, std::milli>(to - from).count();
    };
    config_detail::Decoder d(name);
    d.previous = previous;
    YAML::Node root;
    const auto started = Clock::now();
    try {
        root = YAML::Load(text);
    } catch (const YAML::ParserException& e) {
        d.error(e.mark, "YAML syntax: " + e.msg);
        return {std::nullopt, std::move(d.errors())};
    }
    const auto parsed = Clock::now();
    ConfigResult result = config_detail::decode(root, d, name);
    if (result.config) {
        result.config->hash = content_hash(text);
        result.config->include_index = std::move(d.include_index);
    }
    result.times = {ms(started, parsed) + d.included_yaml_ms, ms(parsed, Clock::now()) - d.included_yaml_ms};
    return result;
}

bool read_config_text(const std::string& path, std::string& text) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return false;
    std::stringstream bytes;
    bytes << in.rdbuf();
    text = std::move(bytes).str();
    return true;
}

ConfigResult load_config_file(const std::string& path, const Config* previous) {
    std::string text;
    if (!read_config_text(path, text))
        return {std::nullopt, {{path, 0, 0, std::string("cannot read the file: ") + std::strerror(errno)}}};
    return load_config_text(text, path, previous);
}

std::string content_hash(std::string_view bytes) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (unsigned char c : bytes) h = (h ^ c) * 0x100000001b3ull;
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
    return buf;
}

bool same_sources(const Config& config, const std::string& text) {
    if (content_hash(text) != config.hash) return false;
    std::string bytes;
    return std::all_of(config.inputs.begin(), config.inputs.end(), [&](const ConfigInput& input) {
        return read_config_text(input.path, bytes) && content_hash(bytes) == input.hash;
    });
}

bool on_link(const Config& config, const std::string& port, IpFamily family, const IpAddress& address) {
    return config_detail::address_on_link(config, port, family, address);
}

std::string interface_on_link(const Config& config, IpFamily family, const IpAddress& address) {
    for (const std::string& interface : config.interfaces())
        if (on_link(config, interface, family, address)) return interface;
    return {};
}

std::vector<std::string> restart_required_changes(const Config& running, const Config& candidate) {
    std::vector<std::string> changes;
    if (running.eal != candidate.eal) changes.push_back("eal arguments changed");
    // The new-connection cap travels in the snapshot; the rings and the idle policy are set at start.
    if (running.dataplane.ring_size != candidate.dataplane.ring_size ||
        running.dataplane.idle_sleep_us != candidate.dataplane.idle_sleep_us)
        changes.push_back("dataplane settings changed");
    if (running.metrics.listen != candidate.metrics.listen) changes.push_back("metrics listen address changed");
    if (running.ports != candidate.ports) {
        std::string names;
        for (const PortSpec& p : candidate.ports) {
            const PortSpec* old = running.find_port(p.name);
            if (!old || !(*old == p)) names += (names.empty() ? "" : ", ") + p.name;
        }
        for (const PortSpec& p : running.ports)
            if (!candidate.find_port(p.name)) names += (names.empty() ? "" : ", ") + p.name + " (removed)";
        changes.push_back("ports changed: " + names);
    }
    if (running.lcores != candidate.lcores) changes.push_back("lcores changed");
    if (running.routing != candidate.routing)
        changes.push_back("routing changed (kernel_table, kernel_socket_buffer_kib)");
    // Connection tables and NAT port pools are sized and timed per worker at start.
    if (running.tracks_connections() != candidate.tracks_connections())
        changes.push_back("connection tracking turned on or off (a firewall section or services added or removed)");
    const LoadBalancerConfig& a = running.load_balancer;
    const LoadBalancerConfig& b = candidate.load_balancer;
    if (a.nat_pool.size() != b.nat_pool.size() ||
        !std::equal(a.nat_pool.begin(), a.nat_pool.end(), b.nat_pool.begin(),
                    [](const Prefix& x, const Prefix& y) { return x.address == y.address; }) ||
        a.nat_port_first != b.nat_port_first || a.nat_port_last != b.nat_port_last)
        changes.push_back("load_balancer nat_pool or nat_ports changed");
    if (running.firewall.table_size != candidate.firewall.table_size) changes.push_back("firewall table_size changed");
    if (running.firewall.ipv6_table_size != candidate.firewall.ipv6_table_size)
        changes.push_back("firewall ipv6_table_size changed");
    if (running.firewall.timeouts != candidate.firewall.timeouts) changes.push_back("firewall timeouts changed");
    // drain_seconds, drain_on_sigterm and timeout_ms apply on reload; where BIRD and the file are does not.
    if (running.bgp.enabled != candidate.bgp.enabled) changes.push_back("bgp section added or removed");
    else if (running.bgp.bird_socket != candidate.bgp.bird_socket ||
             running.bgp.include_file != candidate.bgp.include_file)
        changes.push_back("bgp bird_socket or include_file changed");
    if (running.sync != candidate.sync) changes.push_back("sync section changed");
    return changes;
}

std::vector<std::vector<std::pair<std::size_t, uint16_t>>> assign_rx_queues(const Config& config) {
    std::vector<std::vector<std::pair<std::size_t, uint16_t>>> plan(config.lcores.size());
    const auto port_index = [&](const std::string& name) {
        for (std::size_t i = 0; i < config.ports.size(); ++i)
            if (config.ports[i].name == name) return i;
        return config.ports.size();
    };
    bool explicit_lists = false;
    for (std::size_t l = 0; l < config.lcores.size(); ++l)
        for (const RxQueueName& q : config.lcores[l].rx_queues) {
            plan[l].push_back({port_index(q.port), q.queue});
            explicit_lists = true;
        }
    if (explicit_lists) return plan;
    std::vector<std::size_t> rx_lcores;
    for (std::size_t l = 0; l < config.lcores.size(); ++l)
        if (config.lcores[l].rx) rx_lcores.push_back(l);
    if (rx_lcores.empty()) return plan;
    std::size_t next = 0;
    for (std::size_t p = 0; p < config.ports.size(); ++p)
        for (uint16_t q = 0; q < config.ports[p].rx_queues; ++q)
            plan[rx_lcores[next++ % rx_lcores.size()]].push_back({p, q});
    return plan;
}

}  // namespace sluice

#include "control/config.hpp"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include "dpdk/mempool.hpp"
#include "pipeline/lcore_context.hpp"

namespace sluice {

std::string ConfigError::to_string() const {
    if (line == 0) return file + ": " + message;
    return file + ":" + std::to_string(line) + ":" + std::to_string(column) + ": " + message;
}

const PortSpec* Config::find_port(const std::string& name) const {
    for (const PortSpec& p : ports)
        if (p.name == name) return &p;
    return nullptr;
}

namespace {

constexpr uint16_t kMaxRxQueuesPerPort = 64;
const std::set<std::string> kLogLevels = {"trace", "debug", "info", "warn", "error", "critical", "off"};

// Decodes YAML nodes into config values and collects every error with its position, so one run of --check-config
// reports all that is wrong.
class Decoder {
public:
    explicit Decoder(std::string file) : file_(std::move(file)) {}

    std::vector<ConfigError>& errors() { return errors_; }

    void error(const YAML::Mark& mark, std::string message) {
        errors_.push_back({file_, mark.line + 1, mark.column + 1, std::move(message)});
    }
    void error(const YAML::Node& at, std::string message) { error(at.Mark(), std::move(message)); }

    // `node` must be a map whose keys are all in `allowed`.
    bool map(const YAML::Node& node, const std::string& what, std::initializer_list<std::string_view> allowed) {
        if (!node.IsMap()) {
            error(node, what + " must be a mapping");
            return false;
        }
        for (const auto& kv : node) {
            const std::string key = kv.first.Scalar();
            if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
                std::string known;
                for (std::string_view k : allowed) known += (known.empty() ? "" : ", ") + std::string(k);
                error(kv.first, "unknown key '" + key + "' in " + what + " (known keys: " + known + ")");
            }
        }
        return true;
    }

    bool sequence(const YAML::Node& node, const std::string& what) {
        if (node.IsSequence()) return true;
        error(node, what + " must be a list");
        return false;
    }

    bool string(const YAML::Node& node, const std::string& what, std::string& out) {
        if (!node.IsScalar() || node.Scalar().empty()) {
            error(node, what + " must be a non-empty string");
            return false;
        }
        out = node.Scalar();
        return true;
    }

    template <typename T>
    bool integer(const YAML::Node& node, const std::string& what, T& out, long long min, long long max) {
        long long value = 0;
        try {
            if (!node.IsScalar()) throw YAML::BadConversion(node.Mark());
            value = node.as<long long>();
        } catch (const YAML::Exception&) {
            error(node, what + " must be an integer, not '" + (node.IsScalar() ? node.Scalar() : "a structure") + "'");
            return false;
        }
        if (value < min || value > max) {
            error(node, what + " must be between " + std::to_string(min) + " and " + std::to_string(max) + ", not " +
                            std::to_string(value));
            return false;
        }
        out = static_cast<T>(value);
        return true;
    }

    bool boolean(const YAML::Node& node, const std::string& what, bool& out) {
        try {
            if (!node.IsScalar()) throw YAML::BadConversion(node.Mark());
            out = node.as<bool>();
            return true;
        } catch (const YAML::Exception&) {
            error(node, what + " must be true or false");
            return false;
        }
    }

    // Reads key into out with `read` when present; reports it missing when required.
    template <typename Read>
    void field(const YAML::Node& map, const char* key, const std::string& what, bool required, Read read) {
        const YAML::Node value = map[key];
        if (value) {
            read(value);
        } else if (required) {
            error(map, what + " needs '" + key + "'");
        }
    }

private:
    std::string file_;
    std::vector<ConfigError> errors_;
};

bool parse_mac(const std::string& text, rte_ether_addr& mac) {
    unsigned b[6];
    char tail;
    if (std::sscanf(text.c_str(), "%2x:%2x:%2x:%2x:%2x:%2x%c", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5], &tail) != 6)
        return false;
    for (int i = 0; i < 6; ++i) mac.addr_bytes[i] = static_cast<uint8_t>(b[i]);
    return true;
}

bool is_power_of_two(uint32_t v) { return v && !(v & (v - 1)); }

void decode_ports(Decoder& d, const YAML::Node& node, Config& config, std::map<std::string, YAML::Mark>& port_marks) {
    if (!d.sequence(node, "ports")) return;
    for (const YAML::Node& p : node) {
        if (!d.map(p, "a port", {"name", "device", "rx_queues", "rx_descriptors", "tx_descriptors", "mtu", "promiscuous"}))
            continue;
        PortSpec spec;
        d.field(p, "name", "a port", true, [&](const YAML::Node& v) { d.string(v, "port name", spec.name); });
        const std::string what = "port '" + spec.name + "'";
        if (!spec.name.empty() && (spec.name.size() > 32 || !std::all_of(spec.name.begin(), spec.name.end(), [](char c) {
                                       return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
                                   }))) {
            // Names become metric labels and telemetry keys.
            d.error(p["name"], "port name '" + spec.name + "' must be 1-32 letters, digits or underscores");
            spec.name.clear();
        }
        d.field(p, "device", what, true, [&](const YAML::Node& v) { d.string(v, what + " device", spec.device); });
        d.field(p, "rx_queues", what, false,
                [&](const YAML::Node& v) { d.integer(v, what + " rx_queues", spec.rx_queues, 1, kMaxRxQueuesPerPort); });
        for (auto [key, out] : {std::pair{"rx_descriptors", &spec.rx_descriptors}, {"tx_descriptors", &spec.tx_descriptors}}) {
            d.field(p, key, what, false, [&, key = key, out = out](const YAML::Node& v) {
                if (d.integer(v, what + " " + key, *out, 64, 16384) && !is_power_of_two(*out))
                    d.error(v, what + " " + key + " must be a power of two");
            });
        }
        d.field(p, "mtu", what, false, [&](const YAML::Node& v) { d.integer(v, what + " mtu", spec.mtu, 68, 9600); });
        d.field(p, "promiscuous", what, false, [&](const YAML::Node& v) { d.boolean(v, what + " promiscuous", spec.promiscuous); });
        if (spec.name.empty()) continue;
        if (port_marks.count(spec.name)) {
            d.error(p, "port name '" + spec.name + "' is used twice (first at line " +
                           std::to_string(port_marks[spec.name].line + 1) + ")");
            continue;
        }
        port_marks[spec.name] = p.Mark();
        config.ports.push_back(spec);
    }
    if (node.size() == 0) d.error(node, "ports must list at least one port");
    std::set<std::string> devices;
    for (const PortSpec& spec : config.ports)
        if (!spec.device.empty() && !devices.insert(device_name(spec.device)).second)
            d.error(port_marks[spec.name], "port '" + spec.name + "' uses device '" + device_name(spec.device) +
                                               "', which another port already uses");
}

void decode_lcores(Decoder& d, const YAML::Node& node, Config& config) {
    if (!d.sequence(node, "lcores")) return;
    std::set<unsigned> ids;
    std::set<std::pair<std::string, uint16_t>> polled;
    for (const YAML::Node& l : node) {
        if (!d.map(l, "an lcore", {"id", "roles", "rx_queues"})) continue;
        LcoreConfig lcore;
        bool has_id = false;
        d.field(l, "id", "an lcore", true, [&](const YAML::Node& v) { has_id = d.integer(v, "lcore id", lcore.id, 0, RTE_MAX_LCORE - 1); });
        const std::string what = "lcore " + std::to_string(lcore.id);
        if (has_id && !ids.insert(lcore.id).second) d.error(l["id"], what + " is listed twice");
        d.field(l, "roles", what, true, [&](const YAML::Node& v) {
            if (!d.sequence(v, what + " roles")) return;
            for (const YAML::Node& r : v) {
                const std::string role = r.IsScalar() ? r.Scalar() : "";
                if (role == "rx") lcore.rx = true;
                else if (role == "worker") lcore.worker = true;
                else d.error(r, what + ": unknown role '" + role + "' (roles are rx and worker)");
            }
            if (!lcore.rx && !lcore.worker) d.error(v, what + " needs at least one role: rx, worker or both");
        });
        d.field(l, "rx_queues", what, false, [&](const YAML::Node& v) {
            if (!d.sequence(v, what + " rx_queues")) return;
            if (!lcore.rx) d.error(v, what + " lists rx_queues but does not have the rx role");
            for (const YAML::Node& q : v) {
                const std::string text = q.IsScalar() ? q.Scalar() : "";
                const auto colon = text.rfind(':');
                RxQueueName name{text.substr(0, colon), 0};
                const PortSpec* port = config.find_port(name.port);
                char* end = nullptr;
                const unsigned long queue = colon == std::string::npos ? 0 : std::strtoul(text.c_str() + colon + 1, &end, 10);
                if (colon == std::string::npos || !end || *end || colon + 1 == text.size()) {
                    d.error(q, what + ": rx queue '" + text + "' must be PORT:QUEUE, e.g. lan:0");
                } else if (!port) {
                    d.error(q, what + ": rx queue '" + text + "' names unknown port '" + name.port + "'");
                } else if (queue >= port->rx_queues) {
                    d.error(q, what + ": port '" + name.port + "' has " + std::to_string(port->rx_queues) +
                                   " RX queue(s), so queue " + std::to_string(queue) + " does not exist");
                } else {
                    name.queue = static_cast<uint16_t>(queue);
                    if (!polled.insert({name.port, name.queue}).second)
                        d.error(q, what + ": rx queue '" + text + "' is already polled by another lcore");
                    lcore.rx_queues.push_back(name);
                }
            }
        });
        config.lcores.push_back(lcore);
    }
    const auto count = [&](auto pred) { return std::count_if(config.lcores.begin(), config.lcores.end(), pred); };
    if (count([](auto& l) { return l.rx; }) == 0) d.error(node, "lcores: at least one lcore needs the rx role");
    const auto workers = count([](auto& l) { return l.worker; });
    if (workers == 0) d.error(node, "lcores: at least one lcore needs the worker role");
    if (workers > static_cast<long>(kMaxWorkers))
        d.error(node, "lcores: at most " + std::to_string(kMaxWorkers) + " workers");
    const auto listing = count([](auto& l) { return l.rx && !l.rx_queues.empty(); });
    if (listing > 0) {
        if (listing != count([](auto& l) { return l.rx; }))
            d.error(node, "lcores: either every rx lcore lists its rx_queues or none does (then they are spread evenly)");
        for (const PortSpec& port : config.ports)
            for (uint16_t q = 0; q < port.rx_queues; ++q)
                if (!polled.count({port.name, q}))
                    d.error(node, "lcores: RX queue " + port.name + ":" + std::to_string(q) + " is polled by no lcore");
    }
}

void decode_forward(Decoder& d, const YAML::Node& node, Config& config) {
    if (!d.sequence(node, "forward")) return;
    std::set<std::string> from_ports;
    for (const YAML::Node& f : node) {
        if (!d.map(f, "a forward entry", {"from", "to", "next_hop_mac"})) continue;
        ForwardConfig entry;
        for (auto [key, out] : {std::pair{"from", &entry.from}, {"to", &entry.to}}) {
            d.field(f, key, "a forward entry", true, [&, key = key, out = out](const YAML::Node& v) {
                if (d.string(v, std::string("forward ") + key, *out) && !config.find_port(*out))
                    d.error(v, std::string("forward ") + key + ": unknown port '" + *out + "'");
            });
        }
        if (!entry.from.empty() && !from_ports.insert(entry.from).second)
            d.error(f["from"], "forward: port '" + entry.from + "' already has a forward entry");
        d.field(f, "next_hop_mac", "a forward entry", true, [&](const YAML::Node& v) {
            std::string text;
            if (d.string(v, "next_hop_mac", text) && !parse_mac(text, entry.next_hop_mac))
                d.error(v, "next_hop_mac '" + text + "' is not a MAC address like 02:00:00:00:00:01");
        });
        config.forward.push_back(entry);
    }
}

ConfigResult decode(const YAML::Node& root, Decoder& d, const std::string& name) {
    ConfigResult result;
    Config config;
    config.path = name;
    if (!root || root.IsNull()) {
        d.errors().push_back({name, 0, 0, "the file is empty"});
    } else if (d.map(root, "the top level", {"eal", "log", "dataplane", "metrics", "ports", "lcores", "forward"})) {
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
                    d.error(l, "log level '" + config.log.level + "' is not one of trace, debug, info, warn, error, critical, off");
            });
            d.field(v, "file", "log", false, [&](const YAML::Node& f) { d.string(f, "log file", config.log.file); });
        });
        d.field(root, "dataplane", "the config", false, [&](const YAML::Node& v) {
            if (!d.map(v, "dataplane", {"ring_size", "idle_sleep_us"})) return;
            d.field(v, "ring_size", "dataplane", false, [&](const YAML::Node& r) {
                if (d.integer(r, "ring_size", config.dataplane.ring_size, 64, 1 << 20) && !is_power_of_two(config.dataplane.ring_size))
                    d.error(r, "ring_size must be a power of two");
            });
            d.field(v, "idle_sleep_us", "dataplane", false,
                    [&](const YAML::Node& s) { d.integer(s, "idle_sleep_us", config.dataplane.idle_sleep_us, 0, 100000); });
        });
        d.field(root, "metrics", "the config", false, [&](const YAML::Node& v) {
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
        });
        std::map<std::string, YAML::Mark> port_marks;
        d.field(root, "ports", "the config", true, [&](const YAML::Node& v) { decode_ports(d, v, config, port_marks); });
        d.field(root, "lcores", "the config", true, [&](const YAML::Node& v) { decode_lcores(d, v, config); });
        d.field(root, "forward", "the config", false, [&](const YAML::Node& v) { decode_forward(d, v, config); });
    }
    result.errors = std::move(d.errors());
    if (result.errors.empty()) result.config = std::move(config);
    return result;
}

std::string fnv1a_hex(const std::string& text) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (unsigned char c : text) h = (h ^ c) * 0x100000001b3ull;
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
    return buf;
}

}  // namespace

ConfigResult load_config_text(const std::string& text, const std::string& name) {
    Decoder d(name);
    YAML::Node root;
    try {
        root = YAML::Load(text);
    } catch (const YAML::ParserException& e) {
        d.error(e.mark, "YAML syntax: " + e.msg);
        return {std::nullopt, std::move(d.errors())};
    }
    ConfigResult result = decode(root, d, name);
    if (result.config) result.config->hash = fnv1a_hex(text);
    return result;
}

ConfigResult load_config_file(const std::string& path) {
    std::ifstream in(path);
    if (!in) return {std::nullopt, {{path, 0, 0, std::string("cannot read the file: ") + std::strerror(errno)}}};
    std::stringstream text;
    text << in.rdbuf();
    return load_config_text(text.str(), path);
}

std::vector<std::string> restart_required_changes(const Config& running, const Config& candidate) {
    std::vector<std::string> changes;
    if (running.eal != candidate.eal) changes.push_back("eal arguments changed");
    if (running.dataplane != candidate.dataplane) changes.push_back("dataplane settings changed");
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
        for (uint16_t q = 0; q < config.ports[p].rx_queues; ++q) plan[rx_lcores[next++ % rx_lcores.size()]].push_back({p, q});
    return plan;
}

}  // namespace sluice

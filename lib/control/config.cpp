#include "control/config.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/stat.h>

#include <yaml-cpp/yaml.h>

#include "classify/acl_method.hpp"
#include "dpdk/mempool.hpp"
#include "lb/maglev.hpp"
#include "lb/nat_ports.hpp"
#include "pipeline/lcore_context.hpp"

namespace sluice {

std::string ConfigError::to_string() const {
    if (line == 0) return file + ": " + message;
    return file + ":" + std::to_string(line) + ":" + std::to_string(column) + ": " + message;
}

std::string BackendConfig::name() const {
    const std::string a = to_string(address, family);
    if (port == 0) return a;
    return (family == IpFamily::ipv6 ? "[" + a + "]" : a) + ":" + std::to_string(port);
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
        for (const Field& f : fields(node)) {
            if (std::find(allowed.begin(), allowed.end(), f.key) == allowed.end()) {
                std::string known;
                for (std::string_view k : allowed) known += (known.empty() ? "" : ", ") + std::string(k);
                error(f.key_mark, "unknown key '" + f.key + "' in " + what + " (known keys: " + known + ")");
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
        if (const YAML::Node* found = find(map, key)) {
            const YAML::Node value = *found;  // read's own fields() walk other maps, over what found points into
            read(value);
        } else if (required) {
            error(map, what + " needs '" + key + "'");
        }
    }

private:
    struct Field {
        std::string key;  // empty for a key that is not a scalar: no lookup names it
        YAML::Mark key_mark;
        YAML::Node value;
    };

    // The entries of a map, walked once for map()'s check and all of field()'s lookups. yaml-cpp's const
    // operator[] compares a key with each of the map's keys by decoding that key into a new string (about 2,000
    // instructions a lookup, 27,000 for a firewall rule's ten optional fields, 8 % of loading 10k rules).
    const std::vector<Field>& fields(const YAML::Node& map) {
        if (!fields_of_ || !fields_of_.is(map)) {
            fields_of_.reset(map);  // not operator=, which would write map's contents into the previous one
            fields_.clear();
            for (const auto& kv : map)
                fields_.push_back({kv.first.IsScalar() ? kv.first.Scalar() : std::string(), kv.first.Mark(), kv.second});
        }
        return fields_;
    }

    // map's value for key (the first, as yaml-cpp's operator[] finds), or null.
    const YAML::Node* find(const YAML::Node& map, std::string_view key) {
        if (!map.IsMap()) return nullptr;
        for (const Field& f : fields(map))
            if (!f.key.empty() && f.key == key) return &f.value;
        return nullptr;
    }

    std::string file_;
    std::vector<ConfigError> errors_;
    YAML::Node fields_of_{YAML::NodeType::Undefined};  // the map fields_ holds
    std::vector<Field> fields_;
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
        if (!d.map(p, "a port", {"name", "device", "rx_queues", "rx_descriptors", "tx_descriptors", "mtu", "promiscuous",
                                   "addresses", "xdp_steering"}))
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
        d.field(p, "device", what, true, [&](const YAML::Node& v) {
            if (!d.string(v, what + " device", spec.device)) return;
            // A zero-copy memif port holds pool mbufs the pool's size cannot count, and stops receiving for good
            // once a stalled peer has them all (docs/security.md, "Exhaustion").
            if (spec.device.starts_with("net_memif") && spec.device.find("zero-copy=yes") != std::string::npos)
                d.error(v, what + ": net_memif zero-copy=yes is not supported (its rings hold mbufs the pool is not sized for); use the default copy mode");
        });
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
        d.field(p, "xdp_steering", what, false, [&](const YAML::Node& v) {
            std::string mode;
            if (!d.string(v, what + " xdp_steering", mode)) return;
            if (mode == "all") spec.xdp_steering = XdpSteeringMode::all;
            else if (mode == "services") spec.xdp_steering = XdpSteeringMode::services;
            else if (mode == "off") spec.xdp_steering = XdpSteeringMode::off;
            else return d.error(v, what + " xdp_steering must be all, services or off, not '" + mode + "'");
            if (!spec.device.starts_with("net_af_xdp"))
                d.error(v, what + " xdp_steering applies to net_af_xdp devices only");
            else if (spec.device.find(",xdp_prog=") != std::string::npos && spec.xdp_steering != XdpSteeringMode::off)
                d.error(v, what + ": the device names its own xdp_prog, so sluice's steering cannot apply (xdp_steering: off)");
        });
        // A device with its own program keeps it: sluice steers nothing there.
        if (spec.device.find(",xdp_prog=") != std::string::npos) spec.xdp_steering = XdpSteeringMode::off;
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
        if (!d.map(f, "a forward entry", {"from", "to", "next_hop_mac", "next_hop"})) continue;
        ForwardConfig entry;
        for (auto [key, out] : {std::pair{"from", &entry.from}, {"to", &entry.to}}) {
            d.field(f, key, "a forward entry", true, [&, key = key, out = out](const YAML::Node& v) {
                if (d.string(v, std::string("forward ") + key, *out) && !config.find_port(*out))
                    d.error(v, std::string("forward ") + key + ": unknown port '" + *out + "'");
            });
        }
        if (!entry.from.empty() && !from_ports.insert(entry.from).second)
            d.error(f["from"], "forward: port '" + entry.from + "' already has a forward entry");
        if (!f["next_hop_mac"] && !f["next_hop"]) d.error(f, "a forward entry needs 'next_hop_mac' or 'next_hop'");
        if (f["next_hop_mac"] && f["next_hop"]) d.error(f["next_hop"], "a forward entry takes 'next_hop_mac' or 'next_hop', not both");
        d.field(f, "next_hop_mac", "a forward entry", false, [&](const YAML::Node& v) {
            std::string text;
            if (d.string(v, "next_hop_mac", text) && !parse_mac(text, entry.next_hop_mac))
                d.error(v, "next_hop_mac '" + text + "' is not a MAC address like 02:00:00:00:00:01");
        });
        config.forward.push_back(entry);
    }
}

// "10.0.0.0/8", "10.1.2.3" (a /32), "2001:db8::/32". Host bits are cleared.
bool parse_prefix(const std::string& text, Prefix& prefix, IpFamily& family) {
    const auto slash = text.find('/');
    const std::string address = text.substr(0, slash);
    prefix = Prefix{};
    if (inet_pton(AF_INET, address.c_str(), prefix.address.bytes) == 1) {
        family = IpFamily::ipv4;
    } else if (inet_pton(AF_INET6, address.c_str(), prefix.address.bytes) == 1) {
        family = IpFamily::ipv6;
    } else {
        return false;
    }
    const unsigned max = family == IpFamily::ipv4 ? 32 : 128;
    unsigned length = max;
    if (slash != std::string::npos) {
        const std::string digits = text.substr(slash + 1);
        if (digits.empty() || digits.size() > 3 || digits.find_first_not_of("0123456789") != std::string::npos) return false;
        length = static_cast<unsigned>(std::stoul(digits));
        if (length > max) return false;
    }
    prefix.length = static_cast<uint8_t>(length);
    for (unsigned bit = length; bit < max; ++bit) prefix.address.bytes[bit / 8] &= static_cast<uint8_t>(~(0x80u >> (bit % 8)));
    return true;
}

void add_prefix(std::vector<Prefix>& v4, std::vector<Prefix>& v6, const Prefix& p, IpFamily family) {
    (family == IpFamily::ipv4 ? v4 : v6).push_back(p);
}

// One prefix per line, '#' starts a comment. Errors name the file and line.
void load_prefix_file(Decoder& d, const YAML::Node& at, const std::string& config_path, PrefixSetConfig& set) {
    std::filesystem::path path = set.file;
    if (path.is_relative()) path = std::filesystem::path(config_path).parent_path() / path;
    struct stat st {};
    if (stat(path.c_str(), &st) != 0) return d.error(at, "prefix set '" + set.name + "': cannot read " + path.string() + ": " + std::strerror(errno));
    // The size limit means nothing for a device or a FIFO (/dev/zero never ends, a FIFO may never answer).
    if (!S_ISREG(st.st_mode)) return d.error(at, "prefix set '" + set.name + "': " + path.string() + " is not a regular file");
    if (static_cast<std::size_t>(st.st_size) > kMaxPrefixFileBytes)
        return d.error(at, "prefix set '" + set.name + "': " + path.string() + " is " + std::to_string(st.st_size) +
                               " bytes, over the limit of " + std::to_string(kMaxPrefixFileBytes));
    std::ifstream in(path);
    if (!in) return d.error(at, "prefix set '" + set.name + "': cannot read " + path.string() + ": " + std::strerror(errno));
    std::string line;
    int number = 0, reported = 0;
    while (std::getline(in, line)) {
        ++number;
        const auto hash = line.find('#');
        if (hash != std::string::npos) line.resize(hash);
        const auto first = line.find_first_not_of(" \t\r");
        if (first == std::string::npos) continue;
        const auto last = line.find_last_not_of(" \t\r");
        const std::string text = line.substr(first, last - first + 1);
        Prefix prefix;
        IpFamily family;
        if (parse_prefix(text, prefix, family)) {
            add_prefix(set.v4, set.v6, prefix, family);
        } else if (++reported <= 10) {  // a broken file should not print a million lines
            d.errors().push_back({path.string(), number, static_cast<int>(first) + 1, "'" + text + "' is not an IPv4 or IPv6 prefix"});
        }
    }
    if (reported > 10)
        d.errors().push_back({path.string(), 0, 0, std::to_string(reported) + " lines are not prefixes (first 10 shown)"});
}

void decode_prefix_sets(Decoder& d, const YAML::Node& node, Config& config) {
    if (!d.sequence(node, "firewall prefix_sets")) return;
    for (const YAML::Node& s : node) {
        if (!d.map(s, "a prefix set", {"name", "prefixes", "file", "early_drop"})) continue;
        PrefixSetConfig set;
        const std::size_t errors_before = d.errors().size();
        d.field(s, "name", "a prefix set", true, [&](const YAML::Node& v) { d.string(v, "prefix set name", set.name); });
        const std::string what = "prefix set '" + set.name + "'";
        for (const PrefixSetConfig& other : config.firewall.prefix_sets)
            if (other.name == set.name && !set.name.empty()) d.error(s["name"], what + " is defined twice");
        if (s["prefixes"] && s["file"]) d.error(s, what + ": give either prefixes or file, not both");
        if (!s["prefixes"] && !s["file"]) d.error(s, what + " needs 'prefixes' (a list) or 'file'");
        d.field(s, "prefixes", what, false, [&](const YAML::Node& v) {
            if (!d.sequence(v, what + " prefixes")) return;
            for (const YAML::Node& p : v) {
                Prefix prefix;
                IpFamily family;
                if (p.IsScalar() && parse_prefix(p.Scalar(), prefix, family)) add_prefix(set.v4, set.v6, prefix, family);
                else d.error(p, what + ": '" + (p.IsScalar() ? p.Scalar() : "") + "' is not an IPv4 or IPv6 prefix");
            }
        });
        d.field(s, "file", what, false, [&](const YAML::Node& v) {
            if (d.string(v, what + " file", set.file)) load_prefix_file(d, v, config.path, set);
        });
        d.field(s, "early_drop", what, false, [&](const YAML::Node& v) { d.boolean(v, what + " early_drop", set.early_drop); });
        if (set.v4.empty() && set.v6.empty() && (s["prefixes"] || s["file"]) && d.errors().size() == errors_before)
            d.error(s, what + " is empty");
        config.firewall.prefix_sets.push_back(std::move(set));
    }
}

// A value that may be written once or as a list (`80` or `[80, 443]`); an empty list is an error.
std::vector<YAML::Node> one_or_list(Decoder& d, const YAML::Node& node, const std::string& what) {
    std::vector<YAML::Node> items;
    if (!node.IsSequence()) return {node};
    for (const YAML::Node& n : node) items.push_back(n);
    if (items.empty()) d.error(node, what + " is an empty list");
    return items;
}

// A rule's source or destination: a prefix, "@set", or a list of them.
AddressMatch decode_address(Decoder& d, const YAML::Node& node, const std::string& what, const Config& config) {
    AddressMatch match;
    match.any = false;
    const std::vector<YAML::Node> items = one_or_list(d, node, what);
    for (const YAML::Node& item : items) {
        const std::string text = item.IsScalar() ? item.Scalar() : "";
        if (text.starts_with("@")) {
            const std::string set_name = text.substr(1);
            const auto set = std::find_if(config.firewall.prefix_sets.begin(), config.firewall.prefix_sets.end(),
                                          [&](const PrefixSetConfig& s) { return s.name == set_name; });
            if (set == config.firewall.prefix_sets.end()) {
                d.error(item, what + ": unknown prefix set '" + set_name + "'");
                continue;
            }
            match.v4.insert(match.v4.end(), set->v4.begin(), set->v4.end());
            match.v6.insert(match.v6.end(), set->v6.begin(), set->v6.end());
            continue;
        }
        Prefix prefix;
        IpFamily family;
        if (parse_prefix(text, prefix, family)) add_prefix(match.v4, match.v6, prefix, family);
        else d.error(item, what + ": '" + text + "' is not a prefix or @set");
    }
    return match;
}

// 80, "1000-2000", or a list of those.
std::vector<PortRange> decode_ports(Decoder& d, const YAML::Node& node, const std::string& what) {
    std::vector<PortRange> ranges;
    const std::vector<YAML::Node> items = one_or_list(d, node, what);
    for (const YAML::Node& item : items) {
        const std::string text = item.IsScalar() ? item.Scalar() : "";
        const auto dash = text.find('-');
        const auto number = [](const std::string& t, unsigned long& out) {
            if (t.empty() || t.size() > 5 || t.find_first_not_of("0123456789") != std::string::npos) return false;
            out = std::stoul(t);
            return out <= 65535;
        };
        unsigned long first = 0, last = 0;
        if (!number(text.substr(0, dash), first) || (dash != std::string::npos && !number(text.substr(dash + 1), last))) {
            d.error(item, what + ": '" + text + "' is not a port (0-65535) or range like 1000-2000");
            continue;
        }
        if (dash == std::string::npos) last = first;
        if (first > last) {
            d.error(item, what + ": range '" + text + "' is written backwards (did you mean " + std::to_string(last) + "-" +
                              std::to_string(first) + "?)");
            continue;
        }
        ranges.push_back({static_cast<uint16_t>(first), static_cast<uint16_t>(last)});
    }
    return ranges;
}

void decode_rules(Decoder& d, const YAML::Node& node, Config& config) {
    if (!d.sequence(node, "firewall rules")) return;
    std::set<std::string> names;
    for (const YAML::Node& r : node) {
        if (!d.map(r, "a firewall rule", {"name", "in_ports", "source", "destination", "protocol", "source_ports",
                                          "destination_ports", "action", "rate_limit", "log"}))
            continue;
        FirewallRuleConfig rule;
        const std::size_t errors_before = d.errors().size();
        d.field(r, "name", "a firewall rule", true, [&](const YAML::Node& v) { d.string(v, "rule name", rule.name); });
        const std::string what = "rule '" + rule.name + "'";
        if (!rule.name.empty() && !names.insert(rule.name).second) d.error(r["name"], what + " is defined twice");
        d.field(r, "in_ports", what, false, [&](const YAML::Node& v) {
            for (const YAML::Node& p : one_or_list(d, v, what + " in_ports")) {
                const std::string port = p.IsScalar() ? p.Scalar() : "";
                if (!config.find_port(port)) d.error(p, what + ": unknown port '" + port + "'");
                else rule.in_ports.push_back(port);
            }
        });
        d.field(r, "source", what, false, [&](const YAML::Node& v) { rule.source = decode_address(d, v, what + " source", config); });
        d.field(r, "destination", what, false,
                [&](const YAML::Node& v) { rule.destination = decode_address(d, v, what + " destination", config); });
        d.field(r, "protocol", what, false, [&](const YAML::Node& v) {
            static const std::map<std::string, uint16_t> kNames = {{"tcp", IPPROTO_TCP}, {"udp", IPPROTO_UDP},
                {"icmp", IPPROTO_ICMP}, {"icmpv6", IPPROTO_ICMPV6}, {"sctp", IPPROTO_SCTP}, {"any", kAnyProtocol}};
            const std::string text = v.IsScalar() ? v.Scalar() : "";
            const bool numeric = !text.empty() && text.size() <= 3 && text.find_first_not_of("0123456789") == std::string::npos;
            if (const auto it = kNames.find(text); it != kNames.end()) rule.protocol = it->second;
            else if (numeric && std::stoul(text) <= 255) rule.protocol = static_cast<uint16_t>(std::stoul(text));
            else d.error(v, what + ": protocol '" + text + "' is not tcp, udp, icmp, icmpv6, sctp, any or a number 0-255");
        });
        d.field(r, "source_ports", what, false, [&](const YAML::Node& v) { rule.source_ports = decode_ports(d, v, what + " source_ports"); });
        d.field(r, "destination_ports", what, false,
                [&](const YAML::Node& v) { rule.destination_ports = decode_ports(d, v, what + " destination_ports"); });
        d.field(r, "action", what, true, [&](const YAML::Node& v) {
            const std::string text = v.IsScalar() ? v.Scalar() : "";
            if (text == "allow") rule.action = RuleAction::allow;
            else if (text == "deny") rule.action = RuleAction::deny;
            else if (text == "reject") rule.action = RuleAction::reject;
            else d.error(v, what + ": action '" + text + "' is not allow, deny or reject");
        });
        d.field(r, "rate_limit", what, false, [&](const YAML::Node& v) {
            if (!d.map(v, what + " rate_limit", {"rate", "burst", "per"})) return;
            RateLimitConfig& limit = rule.rate_limit;
            d.field(v, "rate", what + " rate_limit", true,
                    [&](const YAML::Node& n) { d.integer(n, what + " rate_limit rate (new connections per second)", limit.rate, 1, 100000000); });
            limit.burst = limit.rate;
            d.field(v, "burst", what + " rate_limit", false,
                    [&](const YAML::Node& n) { d.integer(n, what + " rate_limit burst", limit.burst, 1, 100000000); });
            d.field(v, "per", what + " rate_limit", false, [&](const YAML::Node& n) {
                const std::string per = n.IsScalar() ? n.Scalar() : "";
                if (per == "source") limit.per_source = true;
                else if (per != "rule") d.error(n, what + ": rate_limit per '" + per + "' is not rule or source");
            });
            if (r["action"] && r["action"].IsScalar() && r["action"].Scalar() != "allow")
                d.error(v, what + ": rate_limit goes with action allow only");
        });
        d.field(r, "log", what, false, [&](const YAML::Node& v) { d.boolean(v, what + " log", rule.log); });
        const bool ported = rule.protocol == IPPROTO_TCP || rule.protocol == IPPROTO_UDP || rule.protocol == IPPROTO_SCTP;
        if ((!rule.source_ports.empty() || !rule.destination_ports.empty()) && !ported)
            d.error(r, what + ": ports need protocol tcp, udp or sctp");
        // The families this rule can match: each side either gives no address or has one of that family.
        const auto allows = [](const AddressMatch& m, IpFamily f) { return m.any || !(f == IpFamily::ipv4 ? m.v4 : m.v6).empty(); };
        bool v4 = allows(rule.source, IpFamily::ipv4) && allows(rule.destination, IpFamily::ipv4);
        bool v6 = allows(rule.source, IpFamily::ipv6) && allows(rule.destination, IpFamily::ipv6);
        if (rule.protocol == IPPROTO_ICMP) v6 = false;
        if (rule.protocol == IPPROTO_ICMPV6) v4 = false;
        if (!v4 && !v6 && d.errors().size() == errors_before) d.error(r, what + " mixes address families: no IPv4 or IPv6 packet could match both its source and destination (and protocol)");
        config.firewall.rules.push_back(std::move(rule));
    }
}

void decode_firewall(Decoder& d, const YAML::Node& node, Config& config) {
    if (!d.map(node, "firewall", {"default", "loose_pickup", "table_size", "ipv6_table_size", "timeouts", "prefix_sets",
                                  "rules", "log_default", "log_rate", "acl_method"}))
        return;
    FirewallConfig& fw = config.firewall;
    fw.enabled = true;
    d.field(node, "default", "firewall", false, [&](const YAML::Node& v) {
        const std::string text = v.IsScalar() ? v.Scalar() : "";
        if (text == "allow") fw.default_action = RuleAction::allow;
        else if (text == "deny") fw.default_action = RuleAction::deny;
        else d.error(v, "firewall default '" + text + "' is not allow or deny");
    });
    d.field(node, "loose_pickup", "firewall", false, [&](const YAML::Node& v) { d.boolean(v, "loose_pickup", fw.loose_pickup); });
    d.field(node, "log_default", "firewall", false, [&](const YAML::Node& v) { d.boolean(v, "log_default", fw.log_default); });
    d.field(node, "log_rate", "firewall", false, [&](const YAML::Node& v) { d.integer(v, "log_rate (lines per second and worker)", fw.log_rate, 1, 10000); });
    d.field(node, "table_size", "firewall", false, [&](const YAML::Node& v) { d.integer(v, "table_size", fw.table_size, 1024, 1 << 24); });
    d.field(node, "ipv6_table_size", "firewall", false, [&](const YAML::Node& v) {
        if (d.integer(v, "ipv6_table_size", fw.ipv6_table_size, 1024, 1 << 24) && fw.ipv6_table_size > fw.table_size)
            d.error(v, "ipv6_table_size " + std::to_string(fw.ipv6_table_size) + " is above table_size " +
                           std::to_string(fw.table_size) + " (it is the share of table_size IPv6 connections may take)");
    });
    d.field(node, "acl_method", "firewall", false, [&](const YAML::Node& v) {
        const std::string text = v.IsScalar() ? v.Scalar() : "";
        const int method = acl_method_by_name(text);
        if (method < 0) d.error(v, "firewall acl_method '" + text + "' is none of " + acl_method_names());
        else fw.acl_method = method;
    });
    d.field(node, "timeouts", "firewall", false, [&](const YAML::Node& v) {
        struct Entry { const char* key; uint32_t ConnTimeouts::*field; };
        static const Entry kEntries[] = {{"tcp_syn_sent", &ConnTimeouts::tcp_syn_sent}, {"tcp_syn_recv", &ConnTimeouts::tcp_syn_recv},
            {"tcp_established", &ConnTimeouts::tcp_established}, {"tcp_fin_wait", &ConnTimeouts::tcp_fin_wait},
            {"tcp_close_wait", &ConnTimeouts::tcp_close_wait}, {"tcp_last_ack", &ConnTimeouts::tcp_last_ack},
            {"tcp_time_wait", &ConnTimeouts::tcp_time_wait}, {"tcp_close", &ConnTimeouts::tcp_close},
            {"udp_unreplied", &ConnTimeouts::udp_unreplied}, {"udp_replied", &ConnTimeouts::udp_replied},
            {"icmp", &ConnTimeouts::icmp}, {"other", &ConnTimeouts::other}};
        if (!v.IsMap()) return d.error(v, "firewall timeouts must be a mapping");
        for (const auto& kv : v) {
            const std::string key = kv.first.Scalar();
            const auto entry = std::find_if(std::begin(kEntries), std::end(kEntries), [&](const Entry& e) { return key == e.key; });
            if (entry == std::end(kEntries)) {
                d.error(kv.first, "unknown key '" + key + "' in firewall timeouts");
                continue;
            }
            d.integer(kv.second, "timeout " + key + " (seconds)", fw.timeouts.*(entry->field), 1, 30 * 86400);
        }
    });
    d.field(node, "prefix_sets", "firewall", false, [&](const YAML::Node& v) { decode_prefix_sets(d, v, config); });
    d.field(node, "rules", "firewall", false, [&](const YAML::Node& v) { decode_rules(d, v, config); });
}


// One host address (no prefix length).
bool decode_host(Decoder& d, const YAML::Node& v, const std::string& what, IpAddress& address, IpFamily& family) {
    const std::string text = v.IsScalar() ? v.Scalar() : "";
    Prefix p;
    if (text.find('/') != std::string::npos || !parse_prefix(text, p, family)) {
        d.error(v, what + ": '" + text + "' is not an IPv4 or IPv6 address");
        return false;
    }
    address = p.address;
    return true;
}

void decode_load_balancer(Decoder& d, const YAML::Node& node, Config& config) {
    if (!d.map(node, "load_balancer", {"nat_pool", "nat_ports", "tunnel_source"})) return;
    LoadBalancerConfig& lb = config.load_balancer;
    d.field(node, "nat_pool", "load_balancer", false, [&](const YAML::Node& v) {
        for (const YAML::Node& a : one_or_list(d, v, "nat_pool")) {
            Prefix p;
            IpFamily family;
            if (!decode_host(d, a, "nat_pool", p.address, family)) continue;
            p.length = family == IpFamily::ipv4 ? 32 : 128;
            for (std::size_t i = 0; i < lb.nat_pool.size(); ++i)
                if (lb.nat_pool[i].address == p.address && lb.nat_pool_families[i] == family)
                    d.error(a, "nat_pool: address '" + a.Scalar() + "' is listed twice");
            lb.nat_pool.push_back(p);
            lb.nat_pool_families.push_back(family);
        }
        if (lb.nat_pool.size() > kMaxNatPoolAddresses) d.error(v, "nat_pool: at most " + std::to_string(kMaxNatPoolAddresses) + " addresses");
    });
    d.field(node, "nat_ports", "load_balancer", false, [&](const YAML::Node& v) {
        const std::vector<PortRange> ranges = decode_ports(d, v, "nat_ports");
        if (ranges.size() != 1) return d.error(v, "nat_ports must be one range like 1024-65535");
        if (ranges[0].first == 0) return d.error(v, "nat_ports cannot include port 0");
        lb.nat_port_first = ranges[0].first;
        lb.nat_port_last = ranges[0].last;
    });
    d.field(node, "tunnel_source", "load_balancer", false, [&](const YAML::Node& v) {
        for (const YAML::Node& a : one_or_list(d, v, "tunnel_source")) {
            IpAddress address;
            IpFamily family;
            if (!decode_host(d, a, "tunnel_source", address, family)) continue;
            std::optional<IpAddress>& slot = family == IpFamily::ipv4 ? lb.tunnel_source_v4 : lb.tunnel_source_v6;
            if (slot) d.error(a, "tunnel_source: one address per family");
            slot = address;
        }
    });
}

// ports[].addresses: "10.77.2.1/24" (the host address and its link's prefix), one or a list.
void decode_port_addresses(Decoder& d, const YAML::Node& ports, Config& config) {
    if (!ports || !ports.IsSequence()) return;
    for (const YAML::Node& p : ports) {
        if (!p.IsMap() || !p["addresses"] || !p["name"] || !p["name"].IsScalar()) continue;
        const std::string name = p["name"].Scalar();
        for (const YAML::Node& a : one_or_list(d, p["addresses"], "port '" + name + "' addresses")) {
            const std::string text = a.IsScalar() ? a.Scalar() : "";
            const auto slash = text.find('/');
            PortAddress address{.port = name};
            Prefix prefix;
            IpFamily family;
            if (slash == std::string::npos || !parse_prefix(text, prefix, family) ||
                inet_pton(family == IpFamily::ipv4 ? AF_INET : AF_INET6, text.substr(0, slash).c_str(), address.address.bytes) != 1) {
                d.error(a, "port '" + name + "': address '" + text + "' is not ADDRESS/PREFIX-LENGTH, e.g. 10.77.2.1/24");
                continue;
            }
            address.family = family;
            address.length = prefix.length;
            config.port_addresses.push_back(address);
        }
    }
}

// Whether address is inside one of port's addresses' prefixes (on its link).
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

// A dsr backend is reached at L2: it needs a mac, or an address on one of sluice's links (resolved with ARP/ND).
void check_dsr_backends(Decoder& d, const YAML::Node& services, const Config& config) {
    if (!services || !services.IsSequence()) return;
    for (const YAML::Node& s : services) {
        if (!s.IsMap() || !s["mode"] || !s["mode"].IsScalar() || s["mode"].Scalar() != "dsr") continue;
        if (!s["backends"] || !s["backends"].IsSequence()) continue;
        const std::string name = s["name"] && s["name"].IsScalar() ? s["name"].Scalar() : "";
        for (const YAML::Node& b : s["backends"]) {
            if (!b.IsMap() || b["mac"] || !b["address"] || !b["address"].IsScalar()) continue;
            Prefix p;
            IpFamily family;
            if (!parse_prefix(b["address"].Scalar(), p, family)) continue;  // reported already
            const bool local = std::any_of(config.ports.begin(), config.ports.end(),
                                           [&](const PortSpec& port) { return address_on_link(config, port.name, family, p.address); });
            if (!local)
                d.error(b, "service '" + name + "': dsr backend " + b["address"].Scalar() +
                               " needs a mac, or an address on one of sluice's links (ports[].addresses) to resolve it");
        }
    }
}

// forward[].next_hop: an address on the `to` port's link, resolved with ARP/ND.
void decode_forward_next_hops(Decoder& d, const YAML::Node& forward, Config& config) {
    if (!forward || !forward.IsSequence()) return;
    std::size_t k = 0;
    for (const YAML::Node& f : forward) {
        if (!f.IsMap()) continue;
        ForwardConfig* entry = k < config.forward.size() ? &config.forward[k] : nullptr;
        ++k;
        if (!entry || !f["next_hop"]) continue;
        if (!decode_host(d, f["next_hop"], "forward next_hop", entry->next_hop, entry->next_hop_family)) continue;
        entry->resolve_next_hop = true;
        if (!address_on_link(config, entry->to, entry->next_hop_family, entry->next_hop))
            d.error(f["next_hop"], "forward next_hop " + f["next_hop"].Scalar() + " is inside no address of port '" +
                                       entry->to + "' (give the port an address on that link, or use next_hop_mac)");
    }
}

void decode_health_check(Decoder& d, const YAML::Node& v, const std::string& what, HealthCheckConfig& hc) {
    if (!d.map(v, what, {"type", "port", "path", "expect", "interval_ms", "timeout_ms", "rise", "fall"})) return;
    d.field(v, "type", what, true, [&](const YAML::Node& t) {
        const std::string text = t.IsScalar() ? t.Scalar() : "";
        if (text == "tcp") hc.type = HealthCheckType::tcp;
        else if (text == "http") hc.type = HealthCheckType::http;
        else d.error(t, what + ": type '" + text + "' is not tcp or http");
    });
    d.field(v, "port", what, false, [&](const YAML::Node& n) { d.integer(n, what + " port", hc.port, 1, 65535); });
    d.field(v, "path", what, false, [&](const YAML::Node& n) {
        if (d.string(n, what + " path", hc.path) && hc.path[0] != '/') d.error(n, what + ": path must start with /");
    });
    d.field(v, "expect", what, false, [&](const YAML::Node& n) { d.integer(n, what + " expect (HTTP status)", hc.expect_status, 100, 599); });
    d.field(v, "interval_ms", what, false, [&](const YAML::Node& n) { d.integer(n, what + " interval_ms", hc.interval_ms, 10, 3600000); });
    d.field(v, "timeout_ms", what, false, [&](const YAML::Node& n) { d.integer(n, what + " timeout_ms", hc.timeout_ms, 1, 600000); });
    d.field(v, "rise", what, false, [&](const YAML::Node& n) { d.integer(n, what + " rise", hc.rise, 1, 100); });
    d.field(v, "fall", what, false, [&](const YAML::Node& n) { d.integer(n, what + " fall", hc.fall, 1, 100); });
    if ((v["path"] || v["expect"]) && hc.type == HealthCheckType::tcp) d.error(v, what + ": path and expect go with type http");
    if (hc.timeout_ms > hc.interval_ms) d.error(v, what + ": timeout_ms must not exceed interval_ms");
}

void decode_services(Decoder& d, const YAML::Node& node, Config& config) {
    if (!d.sequence(node, "services")) return;
    std::set<std::string> names;
    std::map<std::tuple<std::string, uint16_t, uint8_t>, std::string> listeners;
    const LoadBalancerConfig& lb = config.load_balancer;
    for (const YAML::Node& s : node) {
        if (!d.map(s, "a service", {"name", "vip", "port", "protocol", "mode", "table_size", "removed_backends",
                                    "health_check", "min_healthy", "syn_proxy", "backends"}))
            continue;
        ServiceConfig service;
        const std::size_t errors_before = d.errors().size();
        d.field(s, "name", "a service", true, [&](const YAML::Node& v) { d.string(v, "service name", service.name); });
        const std::string what = "service '" + service.name + "'";
        if (!service.name.empty() && !names.insert(service.name).second) d.error(s["name"], what + " is defined twice");
        d.field(s, "vip", what, true, [&](const YAML::Node& v) { decode_host(d, v, what + " vip", service.vip, service.family); });
        d.field(s, "port", what, true, [&](const YAML::Node& v) {
            if (v.IsScalar() && v.Scalar() == "any") service.port = 0;
            else d.integer(v, what + " port (or any)", service.port, 1, 65535);
        });
        d.field(s, "protocol", what, true, [&](const YAML::Node& v) {
            const std::string text = v.IsScalar() ? v.Scalar() : "";
            if (text == "tcp") service.protocol = IPPROTO_TCP;
            else if (text == "udp") service.protocol = IPPROTO_UDP;
            else d.error(v, what + ": protocol '" + text + "' is not tcp or udp");
        });
        d.field(s, "mode", what, true, [&](const YAML::Node& v) {
            const std::string text = v.IsScalar() ? v.Scalar() : "";
            if (text == "nat") service.mode = LbMode::nat;
            else if (text == "dsr") service.mode = LbMode::dsr;
            else if (text == "tunnel") service.mode = LbMode::tunnel;
            else d.error(v, what + ": mode '" + text + "' is not nat, dsr or tunnel");
        });
        d.field(s, "table_size", what, false, [&](const YAML::Node& v) {
            if (d.integer(v, what + " table_size", service.table_size, 3, kMaxMaglevTableSize) && !is_prime(service.table_size))
                d.error(v, what + ": table_size " + std::to_string(service.table_size) + " is not a prime (Maglev needs one; the default is 65537)");
        });
        d.field(s, "removed_backends", what, false, [&](const YAML::Node& v) {
            const std::string text = v.IsScalar() ? v.Scalar() : "";
            if (text == "drop") service.drop_removed = true;
            else if (text != "keep") d.error(v, what + ": removed_backends '" + text + "' is not keep or drop");
        });
        d.field(s, "min_healthy", what, false,
                [&](const YAML::Node& v) { d.integer(v, what + " min_healthy", service.min_healthy, 0, 65535); });
        d.field(s, "syn_proxy", what, false, [&](const YAML::Node& v) { d.boolean(v, what + " syn_proxy", service.syn_proxy); });
        HealthCheckConfig service_health;
        d.field(s, "health_check", what, false, [&](const YAML::Node& v) { decode_health_check(d, v, what + " health_check", service_health); });
        d.field(s, "backends", what, true, [&](const YAML::Node& v) {
            if (!d.sequence(v, what + " backends")) return;
            if (v.size() == 0) return d.error(v, what + ": backends must list at least one backend (weight 0 drains one)");
            std::set<std::string> seen;
            for (const YAML::Node& b : v) {
                if (!d.map(b, what + " backend", {"address", "port", "weight", "mac", "health_check"})) continue;
                BackendConfig backend;
                backend.health = service_health;
                d.field(b, "address", what + " backend", true, [&](const YAML::Node& a) {
                    if (decode_host(d, a, what + " backend address", backend.address, backend.family) &&
                        service.family != IpFamily::none && backend.family != service.family)
                        d.error(a, what + ": backend " + a.Scalar() + " is not of the vip's address family");
                });
                d.field(b, "port", what + " backend", false, [&](const YAML::Node& n) {
                    if (d.integer(n, what + " backend port", backend.port, 1, 65535) && s["port"] && s["port"].IsScalar() &&
                        s["port"].Scalar() == "any")
                        d.error(n, what + ": a backend port needs a service port (with port any the packet's port is kept)");
                    if (service.mode == LbMode::dsr || service.mode == LbMode::tunnel)
                        if (s["mode"] && backend.port != 0)
                            d.error(n, what + ": dsr and tunnel backends keep the vip's port (the packet is not rewritten)");
                });
                d.field(b, "weight", what + " backend", false, [&](const YAML::Node& n) { d.integer(n, what + " backend weight", backend.weight, 0, 65535); });
                d.field(b, "mac", what + " backend", false, [&](const YAML::Node& n) {
                    std::string text;
                    if (d.string(n, what + " backend mac", text) && !(backend.has_mac = parse_mac(text, backend.mac)))
                        d.error(n, what + ": backend mac '" + text + "' is not a MAC address like 02:00:00:00:00:01");
                });
                d.field(b, "health_check", what + " backend", false,
                        [&](const YAML::Node& n) { decode_health_check(d, n, what + " backend health_check", backend.health); });
                if (backend.family != IpFamily::none && !seen.insert(backend.name()).second)
                    d.error(b, what + ": backend " + backend.name() + " is listed twice");
                service.backends.push_back(backend);
            }
            if (service.table_size <= service.backends.size())
                d.error(v, what + ": table_size must be larger than the number of backends");
            if (s["min_healthy"] && service.min_healthy > service.backends.size())
                d.error(s["min_healthy"], what + ": min_healthy " + std::to_string(service.min_healthy) + " is more than its " +
                                              std::to_string(service.backends.size()) + " backend(s): its VIP would never be announced");
        });
        if (d.errors().size() == errors_before) {
            const auto key = std::make_tuple(to_string(service.vip, service.family), service.port, service.protocol);
            if (const auto [it, fresh] = listeners.emplace(key, service.name); !fresh)
                d.error(s, what + ": the same vip, port and protocol as service '" + it->second + "'");
            const auto has_pool = [&](IpFamily f) { return std::find(lb.nat_pool_families.begin(), lb.nat_pool_families.end(), f) != lb.nat_pool_families.end(); };
            const char* family = service.family == IpFamily::ipv4 ? "IPv4" : "IPv6";
            if (service.mode == LbMode::nat && !has_pool(service.family))
                d.error(s["mode"], what + ": mode nat needs an " + std::string(family) + " address in load_balancer nat_pool");
            if (service.syn_proxy && (service.mode != LbMode::nat || service.protocol != IPPROTO_TCP))
                d.error(s["syn_proxy"], what + ": syn_proxy needs mode nat and protocol tcp (sluice must see both directions "
                                                "to translate sequence numbers)");
            if (service.mode == LbMode::tunnel &&
                !(service.family == IpFamily::ipv4 ? lb.tunnel_source_v4 : lb.tunnel_source_v6))
                d.error(s["mode"], what + ": mode tunnel needs an " + std::string(family) + " load_balancer tunnel_source");
        }
        config.services.push_back(std::move(service));
    }
}

// An absolute file path that fits a unix socket address (108 bytes with its NUL) when it names a socket.
void decode_path(Decoder& d, const YAML::Node& v, const std::string& what, std::string& out, bool socket) {
    if (!d.string(v, what, out)) return;
    if (out[0] != '/') d.error(v, what + " '" + out + "' must be an absolute path");
    else if (out.back() == '/') d.error(v, what + " '" + out + "' names a directory, not a file");
    else if (socket && out.size() > 107) d.error(v, what + " is longer than a unix socket path may be (107 bytes)");
}

void decode_bgp(Decoder& d, const YAML::Node& node, Config& config) {
    if (!d.map(node, "bgp", {"bird_socket", "include_file", "drain_seconds", "drain_on_sigterm", "timeout_ms"})) return;
    BgpConfig& bgp = config.bgp;
    bgp.enabled = true;
    d.field(node, "bird_socket", "bgp", false, [&](const YAML::Node& v) { decode_path(d, v, "bgp bird_socket", bgp.bird_socket, true); });
    d.field(node, "include_file", "bgp", false, [&](const YAML::Node& v) {
        decode_path(d, v, "bgp include_file", bgp.include_file, false);
        if (!bgp.include_file.empty() && bgp.include_file == bgp.bird_socket)
            d.error(v, "bgp include_file must not be the bird_socket");
    });
    d.field(node, "drain_seconds", "bgp", false, [&](const YAML::Node& v) { d.integer(v, "bgp drain_seconds", bgp.drain_seconds, 0, 3600); });
    d.field(node, "drain_on_sigterm", "bgp", false, [&](const YAML::Node& v) { d.boolean(v, "bgp drain_on_sigterm", bgp.drain_on_sigterm); });
    d.field(node, "timeout_ms", "bgp", false, [&](const YAML::Node& v) { d.integer(v, "bgp timeout_ms", bgp.timeout_ms, 10, 30000); });
}

ConfigResult decode(const YAML::Node& root, Decoder& d, const std::string& name) {
    ConfigResult result;
    Config config;
    config.path = name;
    if (!root || root.IsNull()) {
        d.errors().push_back({name, 0, 0, "the file is empty"});
    } else if (d.map(root, "the top level", {"eal", "log", "dataplane", "metrics", "ports", "lcores", "forward", "firewall",
                                                    "load_balancer", "services", "bgp"})) {
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
            if (!d.map(v, "dataplane", {"ring_size", "idle_sleep_us", "max_new_connections_per_second", "new_connection_burst",
                                             "max_error_replies_per_second", "error_reply_burst"}))
                return;
            d.field(v, "ring_size", "dataplane", false, [&](const YAML::Node& r) {
                if (d.integer(r, "ring_size", config.dataplane.ring_size, 64, 1 << 20) && !is_power_of_two(config.dataplane.ring_size))
                    d.error(r, "ring_size must be a power of two");
            });
            d.field(v, "idle_sleep_us", "dataplane", false,
                    [&](const YAML::Node& s) { d.integer(s, "idle_sleep_us", config.dataplane.idle_sleep_us, 0, 100000); });
            // A per-worker rate (0: no cap) and its bucket's size, which means nothing without a rate (0: one
            // second's worth, filled in by the snapshot builder).
            const auto rate_and_burst = [&](const char* rate_key, uint32_t& rate, const char* burst_key, uint32_t& burst) {
                d.field(v, rate_key, "dataplane", false, [&](const YAML::Node& n) { d.integer(n, rate_key, rate, 0, 100000000); });
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
        d.field(root, "firewall", "the config", false, [&](const YAML::Node& v) { decode_firewall(d, v, config); });
        // load_balancer first: services check their mode against its pools.
        d.field(root, "load_balancer", "the config", false, [&](const YAML::Node& v) { decode_load_balancer(d, v, config); });
        d.field(root, "services", "the config", false, [&](const YAML::Node& v) { decode_services(d, v, config); });
        d.field(root, "bgp", "the config", false, [&](const YAML::Node& v) { decode_bgp(d, v, config); });
        decode_port_addresses(d, root["ports"], config);
        decode_forward_next_hops(d, root["forward"], config);
        check_dsr_backends(d, root["services"], config);
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

bool on_link(const Config& config, const std::string& port, IpFamily family, const IpAddress& address) {
    return address_on_link(config, port, family, address);
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
    else if (running.bgp.bird_socket != candidate.bgp.bird_socket || running.bgp.include_file != candidate.bgp.include_file)
        changes.push_back("bgp bird_socket or include_file changed");
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

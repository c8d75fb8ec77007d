// The YAML decoding that config.cpp, config_firewall.cpp and config_services.cpp share: the Decoder that collects
// errors, the value parsers more than one section uses, and each file's entry points. Internal to lib/config.
#pragma once

#include <algorithm>
#include <initializer_list>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "config/config.hpp"

namespace sluice::config_detail {

// Decodes YAML nodes into config values and collects every error with its position, so one run of --check-config
// reports all that is wrong.
class Decoder {
public:
    explicit Decoder(std::string file) : file_(std::move(file)) {}

    std::vector<ConfigError>& errors() { return errors_; }
    std::vector<ConfigError>& warnings() { return warnings_; }
    const std::string& file() const { return file_; }

    // The running config, whose unchanged rule files (firewall.include) are taken as they are (null: none); where
    // this load's own rule files' rules are; the paths this load read of them.
    const Config* previous = nullptr;
    IncludeIndex include_index;
    std::set<std::string> included;
    double included_yaml_ms = 0;  // of the decoding's time, what yaml-cpp took on the included files

    void error(const YAML::Mark& mark, std::string message) {
        errors_.push_back({file_, mark.line + 1, mark.column + 1, std::move(message)});
    }
    void error(const YAML::Node& at, std::string message) { error(at.Mark(), std::move(message)); }
    // What is legal but likely a mistake: --check-config and the reload log print it, and the config still loads.
    void warning(const YAML::Node& at, const std::string& message) {
        warnings_.push_back({file_, at.Mark().line + 1, at.Mark().column + 1, "warning: " + message});
    }

    // `node` must be a map whose keys are all in `allowed`, each once.
    bool map(const YAML::Node& node, const std::string& what, std::initializer_list<std::string_view> allowed) {
        if (!node.IsMap()) {
            error(node, what + " must be a mapping");
            return false;
        }
        unique_keys(node, what);
        for (const Field& f : fields(node)) {
            if (std::find(allowed.begin(), allowed.end(), f.key) == allowed.end()) {
                std::string known;
                for (std::string_view k : allowed) known += (known.empty() ? "" : ", ") + std::string(k);
                error(f.key_mark, "unknown key '" + f.key + "' in " + what + " (known keys: " + known + ")");
            }
        }
        return true;
    }

    // Reports each key of map that an earlier key of it repeats: yaml-cpp keeps both, and every lookup finds the
    // first, so a section appended to the end of a file would be ignored without a word.
    void unique_keys(const YAML::Node& map, const std::string& what) {
        const std::vector<Field>& all = fields(map);
        for (std::size_t i = 1; i < all.size(); ++i) {
            if (all[i].key.empty()) continue;
            for (std::size_t j = 0; j < i; ++j) {
                if (all[j].key != all[i].key) continue;
                error(all[i].key_mark, "duplicate key '" + all[i].key + "' in " + what + " (first at line " +
                                           std::to_string(all[j].key_mark.line + 1) + "; only one may be given)");
                break;
            }
        }
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

    // A name the operator reads back in logs, telemetry and metric labels: printable ASCII only, since telemetry
    // mangles other bytes and a rule's hit counters would be lost under the mangled name.
    bool name(const YAML::Node& node, const std::string& what, std::string& out) {
        if (!string(node, what, out)) return false;
        if (std::all_of(out.begin(), out.end(), [](char c) { return c >= 0x20 && c < 0x7f; })) return true;
        std::string shown;
        for (const unsigned char c : out) {
            if (c >= 0x20 && c < 0x7f) {
                shown += static_cast<char>(c);
                continue;
            }
            static constexpr char kHex[] = "0123456789abcdef";
            shown += std::string("\\x") + kHex[c >> 4] + kHex[c & 15];
        }
        error(node, what + " '" + shown + "' must be printable ASCII (letters, digits, punctuation, spaces)");
        out.clear();
        return false;
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
                fields_.push_back(
                    {kv.first.IsScalar() ? kv.first.Scalar() : std::string(), kv.first.Mark(), kv.second});
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
    std::vector<ConfigError> warnings_;
    YAML::Node fields_of_{YAML::NodeType::Undefined};  // the map fields_ holds
    std::vector<Field> fields_;
};

// config.cpp

bool parse_mac(const std::string& text, rte_ether_addr& mac);
// Whether address is inside one of port's addresses' prefixes (on its link).
bool address_on_link(const Config& config, const std::string& port, IpFamily family, const IpAddress& address);

inline bool is_power_of_two(uint32_t v) { return v && !(v & (v - 1)); }

// config_firewall.cpp

// "10.0.0.0/8", "10.1.2.3" (a /32), "2001:db8::/32". Host bits are cleared; host_bits_set says whether any were.
bool parse_prefix(const std::string& text, Prefix& prefix, IpFamily& family, bool* host_bits_set = nullptr);
// A network where rules, sets and prefix files take one. Host bits set past the length are refused, as `ip route`
// refuses them: 203.0.113.77/24 may mean the /24 or the host, and matching the /24 would guess silently.
enum class NetworkText { ok, not_a_prefix, host_bits_set };
NetworkText parse_network(const std::string& text, Prefix& prefix, IpFamily& family);
// "203.0.113.77/24 has host bits set; did you mean 203.0.113.0/24?" (network: as parse_network left it).
std::string host_bits_message(const std::string& text, const Prefix& network, IpFamily family);
// One host address (no prefix length).
bool decode_host(Decoder& d, const YAML::Node& v, const std::string& what, IpAddress& address, IpFamily& family);
// A value that may be written once or as a list (`80` or `[80, 443]`); an empty list is an error.
std::vector<YAML::Node> one_or_list(Decoder& d, const YAML::Node& node, const std::string& what);
// 80, "1000-2000", or a list of those.
std::vector<PortRange> decode_port_ranges(Decoder& d, const YAML::Node& node, const std::string& what);
// strict, liberal or off (tcp_window_check).
void decode_window_check(Decoder& d, const YAML::Node& node, const std::string& what, TcpWindowCheck& check);
void decode_firewall(Decoder& d, const YAML::Node& node, Config& config);

// config_ports.cpp

void decode_ports(Decoder& d, const YAML::Node& node, Config& config, std::map<std::string, YAML::Mark>& port_marks);
void decode_lcores(Decoder& d, const YAML::Node& node, Config& config);
void decode_forward(Decoder& d, const YAML::Node& node, Config& config);
// ports[].addresses and ports[].vlans[].addresses: after every port is known.
void decode_port_addresses(Decoder& d, const YAML::Node& ports, Config& config);
// forward[].next_hop: after the ports' addresses.
void decode_forward_next_hops(Decoder& d, const YAML::Node& forward, Config& config);

// config_services.cpp

void decode_load_balancer(Decoder& d, const YAML::Node& node, Config& config);
void decode_services(Decoder& d, const YAML::Node& node, Config& config);
// A dsr backend is reached at L2: it needs a mac, or an address on one of sluice's links (resolved with ARP/ND).
void check_dsr_backends(Decoder& d, const YAML::Node& services, const Config& config);
void decode_bgp(Decoder& d, const YAML::Node& node, Config& config);

// config_routes.cpp

// routes: after the ports' addresses (a next hop must be on one of their links).
void decode_routes(Decoder& d, const YAML::Node& node, Config& config);
void decode_routing(Decoder& d, const YAML::Node& node, Config& config);
void decode_neighbours(Decoder& d, const YAML::Node& node, Config& config);

// config_sync.cpp

// sync: the state-sync channel; reads and checks the key file.
void decode_sync(Decoder& d, const YAML::Node& node, Config& config);

}  // namespace sluice::config_detail

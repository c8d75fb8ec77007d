// Decoding of the load balancer, the services and their backends and health checks, and bgp.
#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include <netinet/in.h>

#include "config/config_decoder.hpp"
#include "lb/maglev.hpp"
#include "nat/nat_pool.hpp"

namespace sluice::config_detail {

namespace {

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
    d.field(v, "expect", what, false,
            [&](const YAML::Node& n) { d.integer(n, what + " expect (HTTP status)", hc.expect_status, 100, 599); });
    d.field(v, "interval_ms", what, false,
            [&](const YAML::Node& n) { d.integer(n, what + " interval_ms", hc.interval_ms, 10, 3600000); });
    d.field(v, "timeout_ms", what, false,
            [&](const YAML::Node& n) { d.integer(n, what + " timeout_ms", hc.timeout_ms, 1, 600000); });
    d.field(v, "rise", what, false, [&](const YAML::Node& n) { d.integer(n, what + " rise", hc.rise, 1, 100); });
    d.field(v, "fall", what, false, [&](const YAML::Node& n) { d.integer(n, what + " fall", hc.fall, 1, 100); });
    if ((v["path"] || v["expect"]) && hc.type == HealthCheckType::tcp)
        d.error(v, what + ": path and expect go with type http");
    if (hc.timeout_ms > hc.interval_ms) d.error(v, what + ": timeout_ms must not exceed interval_ms");
}

// A service's backends; each starts from the service's health check and may give its own.
void decode_backends(Decoder& d, const YAML::Node& node, const YAML::Node& service_node, const std::string& what,
                     ServiceConfig& service, const HealthCheckConfig& service_health) {
    if (!d.sequence(node, what + " backends")) return;
    if (node.size() == 0)
        return d.error(node, what + ": backends must list at least one backend (weight 0 drains one)");
    std::set<std::string> seen;
    for (const YAML::Node& b : node) {
        if (!d.map(b, what + " backend", {"address", "port", "weight", "mac", "health_check"})) continue;
        BackendConfig backend;
        backend.health = service_health;
        d.field(b, "address", what + " backend", true, [&](const YAML::Node& a) {
            if (decode_host(d, a, what + " backend address", backend.address, backend.family) &&
                service.family != IpFamily::none && backend.family != service.family)
                d.error(a, what + ": backend " + a.Scalar() + " is not of the vip's address family");
        });
        d.field(b, "port", what + " backend", false, [&](const YAML::Node& n) {
            if (d.integer(n, what + " backend port", backend.port, 1, 65535) && service_node["port"] &&
                service_node["port"].IsScalar() && service_node["port"].Scalar() == "any")
                d.error(n, what + ": a backend port needs a service port (with port any the packet's port is kept)");
            if (service.mode == LbMode::dsr || service.mode == LbMode::tunnel)
                if (service_node["mode"] && backend.port != 0)
                    d.error(n, what + ": dsr and tunnel backends keep the vip's port (the packet is not rewritten)");
        });
        d.field(b, "weight", what + " backend", false,
                [&](const YAML::Node& n) { d.integer(n, what + " backend weight", backend.weight, 0, 65535); });
        d.field(b, "mac", what + " backend", false, [&](const YAML::Node& n) {
            std::string text;
            if (d.string(n, what + " backend mac", text) && !(backend.has_mac = parse_mac(text, backend.mac)))
                d.error(n, what + ": backend mac '" + text + "' is not a MAC address like 02:00:00:00:00:01");
        });
        d.field(b, "health_check", what + " backend", false, [&](const YAML::Node& n) {
            decode_health_check(d, n, what + " backend health_check", backend.health);
        });
        if (backend.family != IpFamily::none && !seen.insert(backend.name()).second)
            d.error(b, what + ": backend " + backend.name() + " is listed twice");
        service.backends.push_back(backend);
    }
    // Weight 0 drains a backend. Draining them all drops every new connection to the VIP: a mistake, or a whole
    // service drained on purpose while its connections end, so a warning rather than an error.
    if (!service.backends.empty() &&
        std::all_of(service.backends.begin(), service.backends.end(), [](const BackendConfig& b) { return !b.weight; }))
        d.warning(node, what + ": every backend has weight 0, so the service takes no new connection (established "
                               "ones go on)");
    if (service.table_size <= service.backends.size())
        d.error(node, what + ": table_size must be larger than the number of backends");
    if (service_node["min_healthy"] && service.min_healthy > service.backends.size())
        d.error(service_node["min_healthy"], what + ": min_healthy " + std::to_string(service.min_healthy) +
                                                 " is more than its " + std::to_string(service.backends.size()) +
                                                 " backend(s): its VIP would never be announced");
}

// An absolute file path that fits a unix socket address (108 bytes with its NUL) when it names a socket.
void decode_path(Decoder& d, const YAML::Node& v, const std::string& what, std::string& out, bool socket) {
    if (!d.string(v, what, out)) return;
    if (out[0] != '/') d.error(v, what + " '" + out + "' must be an absolute path");
    else if (out.back() == '/') d.error(v, what + " '" + out + "' names a directory, not a file");
    else if (socket && out.size() > 107) d.error(v, what + " is longer than a unix socket path may be (107 bytes)");
}

}  // namespace

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
        if (lb.nat_pool.size() > kMaxNatPoolAddresses)
            d.error(v, "nat_pool: at most " + std::to_string(kMaxNatPoolAddresses) + " addresses");
    });
    d.field(node, "nat_ports", "load_balancer", false, [&](const YAML::Node& v) {
        const std::vector<PortRange> ranges = decode_port_ranges(d, v, "nat_ports");
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

void decode_services(Decoder& d, const YAML::Node& node, Config& config) {
    if (!d.sequence(node, "services")) return;
    std::set<std::string> names;
    std::map<std::tuple<std::string, uint16_t, uint8_t>, std::string> listeners;
    const LoadBalancerConfig& lb = config.load_balancer;
    for (const YAML::Node& s : node) {
        if (!d.map(s, "a service",
                   {"name", "vip", "port", "protocol", "mode", "table_size", "removed_backends", "health_check",
                    "min_healthy", "syn_proxy", "tcp_window_check", "backends"}))
            continue;
        ServiceConfig service;
        const std::size_t errors_before = d.errors().size();
        d.field(s, "name", "a service", true, [&](const YAML::Node& v) { d.name(v, "service name", service.name); });
        const std::string what = "service '" + service.name + "'";
        if (!service.name.empty() && !names.insert(service.name).second) d.error(s["name"], what + " is defined twice");
        d.field(s, "vip", what, true,
                [&](const YAML::Node& v) { decode_host(d, v, what + " vip", service.vip, service.family); });
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
            if (d.integer(v, what + " table_size", service.table_size, 3, kMaxMaglevTableSize) &&
                !is_prime(service.table_size))
                d.error(v, what + ": table_size " + std::to_string(service.table_size) +
                               " is not a prime (Maglev needs one; the default is 65537)");
        });
        d.field(s, "removed_backends", what, false, [&](const YAML::Node& v) {
            const std::string text = v.IsScalar() ? v.Scalar() : "";
            if (text == "drop") service.drop_removed = true;
            else if (text != "keep") d.error(v, what + ": removed_backends '" + text + "' is not keep or drop");
        });
        d.field(s, "min_healthy", what, false,
                [&](const YAML::Node& v) { d.integer(v, what + " min_healthy", service.min_healthy, 0, 65535); });
        d.field(s, "syn_proxy", what, false,
                [&](const YAML::Node& v) { d.boolean(v, what + " syn_proxy", service.syn_proxy); });
        d.field(s, "tcp_window_check", what, false, [&](const YAML::Node& v) {
            decode_window_check(d, v, what, service.tcp_window_check.emplace());
            if (s["protocol"] && s["protocol"].IsScalar() && s["protocol"].Scalar() != "tcp")
                d.error(v, what + ": tcp_window_check goes with protocol tcp only");
        });
        HealthCheckConfig service_health;
        d.field(s, "health_check", what, false,
                [&](const YAML::Node& v) { decode_health_check(d, v, what + " health_check", service_health); });
        d.field(s, "backends", what, true,
                [&](const YAML::Node& v) { decode_backends(d, v, s, what, service, service_health); });
        if (d.errors().size() == errors_before) {
            const auto key = std::make_tuple(to_string(service.vip, service.family), service.port, service.protocol);
            if (const auto [it, fresh] = listeners.emplace(key, service.name); !fresh)
                d.error(s, what + ": the same vip, port and protocol as service '" + it->second + "'");
            const auto has_pool = [&](IpFamily f) {
                return std::find(lb.nat_pool_families.begin(), lb.nat_pool_families.end(), f) !=
                       lb.nat_pool_families.end();
            };
            const char* family = service.family == IpFamily::ipv4 ? "IPv4" : "IPv6";
            if (service.mode == LbMode::nat && !has_pool(service.family))
                d.error(s["mode"],
                        what + ": mode nat needs an " + std::string(family) + " address in load_balancer nat_pool");
            if (service.syn_proxy && (service.mode != LbMode::nat || service.protocol != IPPROTO_TCP))
                d.error(s["syn_proxy"],
                        what + ": syn_proxy needs mode nat and protocol tcp (sluice must see both directions "
                               "to translate sequence numbers)");
            if (service.mode == LbMode::tunnel &&
                !(service.family == IpFamily::ipv4 ? lb.tunnel_source_v4 : lb.tunnel_source_v6))
                d.error(s["mode"],
                        what + ": mode tunnel needs an " + std::string(family) + " load_balancer tunnel_source");
        }
        config.services.push_back(std::move(service));
    }
}

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
            if (interface_on_link(config, family, p.address).empty())
                d.error(b,
                        "service '" + name + "': dsr backend " + b["address"].Scalar() +
                            " needs a mac, or an address on one of sluice's links (ports[].addresses) to resolve it");
        }
    }
}

void decode_bgp(Decoder& d, const YAML::Node& node, Config& config) {
    if (!d.map(node, "bgp", {"bird_socket", "include_file", "drain_seconds", "drain_on_sigterm", "timeout_ms"})) return;
    BgpConfig& bgp = config.bgp;
    bgp.enabled = true;
    d.field(node, "bird_socket", "bgp", false,
            [&](const YAML::Node& v) { decode_path(d, v, "bgp bird_socket", bgp.bird_socket, true); });
    d.field(node, "include_file", "bgp", false, [&](const YAML::Node& v) {
        decode_path(d, v, "bgp include_file", bgp.include_file, false);
        if (!bgp.include_file.empty() && bgp.include_file == bgp.bird_socket)
            d.error(v, "bgp include_file must not be the bird_socket");
    });
    d.field(node, "drain_seconds", "bgp", false,
            [&](const YAML::Node& v) { d.integer(v, "bgp drain_seconds", bgp.drain_seconds, 0, 3600); });
    d.field(node, "drain_on_sigterm", "bgp", false,
            [&](const YAML::Node& v) { d.boolean(v, "bgp drain_on_sigterm", bgp.drain_on_sigterm); });
    d.field(node, "timeout_ms", "bgp", false,
            [&](const YAML::Node& v) { d.integer(v, "bgp timeout_ms", bgp.timeout_ms, 10, 30000); });
}

}  // namespace sluice::config_detail

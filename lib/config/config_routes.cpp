// routes: static routes; routing: a kernel table mirrored (docs/config.md, "routes" and "routing").
#include <algorithm>
#include <set>

#include <yaml-cpp/yaml.h>

#include "config/config_decoder.hpp"

namespace sluice::config_detail {
namespace {

// The interfaces (ports and VLANs) whose links (addresses) hold address.
std::vector<std::string> ports_on_link(const Config& config, IpFamily family, const IpAddress& address) {
    std::vector<std::string> found;
    for (const std::string& interface : config.interfaces())
        if (address_on_link(config, interface, family, address)) found.push_back(interface);
    return found;
}

// One next hop: an address, or {address, port, weight}.
bool decode_next_hop(Decoder& d, const YAML::Node& node, const std::string& what, IpFamily route_family,
                     const Config& config, RouteNextHop& hop) {
    if (node.IsMap()) {
        if (!d.map(node, what, {"address", "port", "weight"})) return false;
        if (!node["address"]) {
            d.error(node, what + " needs 'address'");
            return false;
        }
        d.field(node, "port", what, false, [&](const YAML::Node& v) {
            if (!d.string(v, what + " port", hop.port)) return;
            hop.port = config.canonical_interface(hop.port);
            if (hop.port.empty()) d.error(v, what + ": unknown port or VLAN '" + v.Scalar() + "'");
        });
        d.field(node, "weight", what, false,
                [&](const YAML::Node& v) { d.integer(v, what + " weight", hop.weight, 1, 1000); });
    }
    const YAML::Node address = node.IsMap() ? node["address"] : node;  // not operator=: it writes into the node
    IpFamily family = IpFamily::none;
    if (!decode_host(d, address, what, hop.address, family)) return false;
    const std::string& text = address.Scalar();
    if (family != route_family) {
        d.error(address, what + " " + text + " is not of the route's address family");
        return false;
    }
    if (!hop.port.empty()) {
        if (!address_on_link(config, hop.port, family, hop.address))
            d.error(address, what + " " + text + " is inside no address of port '" + hop.port +
                                 "' (give the port an address on that link)");
        return true;
    }
    const std::vector<std::string> ports = ports_on_link(config, family, hop.address);
    if (ports.empty()) {
        d.error(address,
                what + " " + text + " is inside no port's addresses (a next hop must be on one of sluice's links)");
        return false;
    }
    if (ports.size() > 1) {
        d.error(address, what + " " + text + " is on the links of ports '" + ports[0] + "' and '" + ports[1] +
                             "': say which with 'port'");
        return false;
    }
    hop.port = ports[0];
    return true;
}

}  // namespace

void decode_routes(Decoder& d, const YAML::Node& node, Config& config) {
    if (!d.sequence(node, "routes")) return;
    std::set<std::pair<IpFamily, std::pair<std::string, unsigned>>> seen;
    for (const YAML::Node& r : node) {
        if (!d.map(r, "a route", {"prefix", "next_hops", "type"})) continue;
        RouteConfig route;
        std::string prefix_text = "a route";
        bool prefix_ok = false;
        d.field(r, "prefix", "a route", true, [&](const YAML::Node& v) {
            if (!d.string(v, "route prefix", prefix_text)) return;
            const NetworkText parsed = parse_network(prefix_text, route.prefix, route.family);
            if (parsed == NetworkText::host_bits_set)
                d.error(v, "route " + host_bits_message(prefix_text, route.prefix, route.family));
            else if (parsed != NetworkText::ok) d.error(v, "route prefix '" + prefix_text + "' is not a prefix");
            else if (!seen.insert({route.family, {to_string(route.prefix.address, route.family), route.prefix.length}})
                          .second)
                d.error(v, "route " + prefix_text + " is given twice (list all its next hops in one route)");
            else prefix_ok = true;
        });
        const std::string what = "route " + prefix_text;
        d.field(r, "type", what, false, [&](const YAML::Node& v) {
            std::string type;
            if (!d.string(v, what + " type", type)) return;
            if (type == "via") route.type = RouteType::via;
            else if (type == "blackhole") route.type = RouteType::blackhole;
            else if (type == "reject") route.type = RouteType::reject;
            else d.error(v, what + " type must be via, blackhole or reject, not '" + type + "'");
        });
        if (route.type != RouteType::via) {
            if (r["next_hops"]) d.error(r["next_hops"], what + ": a blackhole or reject route takes no next_hops");
        } else if (!r["next_hops"]) {
            d.error(r, what + " needs 'next_hops' (or type: blackhole or reject)");
        } else if (prefix_ok) {
            const std::vector<YAML::Node> hops = one_or_list(d, r["next_hops"], what + " next_hops");
            if (hops.size() > kMaxRouteNextHops)
                d.error(r["next_hops"], what + " has " + std::to_string(hops.size()) + " next hops; at most " +
                                            std::to_string(kMaxRouteNextHops));
            for (const YAML::Node& h : hops) {
                RouteNextHop hop;
                if (!decode_next_hop(d, h, what + " next hop", route.family, config, hop)) continue;
                if (std::any_of(route.next_hops.begin(), route.next_hops.end(),
                                [&](const RouteNextHop& o) { return o.address == hop.address; }))
                    d.error(h, what + ": next hop " + to_string(hop.address, route.family) + " is given twice");
                else route.next_hops.push_back(hop);
            }
        }
        config.routes.push_back(std::move(route));
    }
    // A forward entry takes its ingress port's packets whatever their destination.
    if (!config.routes.empty() && std::all_of(config.ports.begin(), config.ports.end(), [&](const PortSpec& p) {
            return std::any_of(config.forward.begin(), config.forward.end(),
                               [&](const ForwardConfig& f) { return f.from == p.name; });
        }))
        d.warning(node, "routes are used by no port: every port has a forward entry (remove a port's forward "
                        "entry to route its packets by destination)");
}

void decode_routing(Decoder& d, const YAML::Node& node, Config& config) {
    if (!d.map(node, "routing", {"kernel_table", "kernel_socket_buffer_kib"})) return;
    // 0 is RT_TABLE_UNSPEC. 254 (main) works too: routes whose next hops are on no link of sluice's are left out.
    d.field(node, "kernel_table", "routing", false, [&](const YAML::Node& v) {
        d.integer(v, "routing kernel_table", config.routing.kernel_table, 1, 0xffffffffLL);
    });
    // The kernel counts about 830 bytes of a buffer twice the size asked per route notification: 64 KiB holds about
    // 150, the default 8 MiB about 20k, 1 GiB 2.5 million.
    d.field(node, "kernel_socket_buffer_kib", "routing", false, [&](const YAML::Node& v) {
        d.integer(v, "routing kernel_socket_buffer_kib", config.routing.kernel_socket_buffer_kib, 64, 1 << 20);
    });
}

}  // namespace sluice::config_detail

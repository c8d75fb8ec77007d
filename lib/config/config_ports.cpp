// ports (with their VLANs and addresses), lcores and forward: the data plane's shape (docs/config.md).
#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <set>
#include <string>

#include <yaml-cpp/yaml.h>

#include "config/config_decoder.hpp"
#include "dpdk/mempool.hpp"
#include "packet/vlan.hpp"
#include "pipeline/lcore_context.hpp"

namespace sluice::config_detail {
namespace {

constexpr uint16_t kMaxRxQueuesPerPort = 64;
// Port and VLAN names become metric labels and telemetry keys.
bool is_interface_name(const std::string& name) {
    return !name.empty() && name.size() <= 32 && std::all_of(name.begin(), name.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
    });
}

// ports[].vlans: {id, name, addresses} each (the addresses: decode_port_addresses). names: each VLAN's own name
// and where it was given, checked against the ports' names once all are known.
void decode_vlans(Decoder& d, const YAML::Node& node, const std::string& port, Config& config,
                  std::map<std::string, YAML::Mark>& names) {
    const std::string what = "port '" + port + "' vlans";
    if (!d.sequence(node, what)) return;
    std::map<uint16_t, YAML::Mark> ids;
    for (const YAML::Node& v : node) {
        if (!d.map(v, "a VLAN of port '" + port + "'", {"id", "name", "addresses"})) continue;
        VlanConfig vlan{.port = port};
        bool has_id = false;
        d.field(v, "id", "a VLAN of port '" + port + "'", true, [&](const YAML::Node& id) {
            has_id = d.integer(id, "port '" + port + "' VLAN id", vlan.id, 1, kMaxVlanId);
            if (has_id && ids.count(vlan.id)) {
                d.error(id, "port '" + port + "': VLAN " + std::to_string(vlan.id) +
                                " is listed twice (first at line " + std::to_string(ids[vlan.id].line + 1) + ")");
                has_id = false;
            }
            if (has_id) ids[vlan.id] = id.Mark();
        });
        d.field(v, "name", "VLAN " + vlan.interface(), false, [&](const YAML::Node& n) {
            if (!d.string(n, "VLAN " + vlan.interface() + " name", vlan.name)) return;
            if (!is_interface_name(vlan.name)) {
                d.error(n, "VLAN name '" + vlan.name + "' must be 1-32 letters, digits or underscores");
                vlan.name.clear();
            } else if (names.count(vlan.name)) {
                d.error(n, "VLAN name '" + vlan.name + "' is used twice (first at line " +
                               std::to_string(names[vlan.name].line + 1) + ")");
                vlan.name.clear();
            } else {
                names[vlan.name] = n.Mark();
            }
        });
        if (has_id) config.vlans.push_back(vlan);
    }
}

// A net_af_packet device's queue pairs (its qpairs= argument, 1 when absent); nothing for other devices or a value
// that is not a number (the PMD refuses those).
std::optional<unsigned long> af_packet_qpairs(const std::string& device) {
    if (!device.starts_with("net_af_packet")) return std::nullopt;
    const auto at = device.find(",qpairs=");
    if (at == std::string::npos) return 1;
    const char* digits = device.c_str() + at + 8;
    char* end = nullptr;
    const unsigned long qpairs = std::strtoul(digits, &end, 10);
    if (end == digits || (*end != '\0' && *end != ',')) return std::nullopt;
    return qpairs;
}

}  // namespace

void decode_ports(Decoder& d, const YAML::Node& node, Config& config, std::map<std::string, YAML::Mark>& port_marks) {
    if (!d.sequence(node, "ports")) return;
    std::map<std::string, YAML::Mark> vlan_names;
    for (const YAML::Node& p : node) {
        if (!d.map(p, "a port",
                   {"name", "device", "rx_queues", "rx_descriptors", "tx_descriptors", "mtu", "promiscuous",
                    "addresses", "xdp_steering", "vlans"}))
            continue;
        PortSpec spec;
        d.field(p, "name", "a port", true, [&](const YAML::Node& v) { d.string(v, "port name", spec.name); });
        const std::string what = "port '" + spec.name + "'";
        if (!spec.name.empty() && !is_interface_name(spec.name)) {
            d.error(p["name"], "port name '" + spec.name + "' must be 1-32 letters, digits or underscores");
            spec.name.clear();
        }
        d.field(p, "device", what, true, [&](const YAML::Node& v) {
            if (!d.string(v, what + " device", spec.device)) return;
            // A zero-copy memif port holds pool mbufs the pool's size cannot count, and stops receiving for good
            // once a stalled peer has them all (docs/security.md, "Exhaustion").
            if (spec.device.starts_with("net_memif") && spec.device.find("zero-copy=yes") != std::string::npos)
                d.error(v, what + ": net_memif zero-copy=yes is not supported (its rings hold mbufs the pool is not "
                                  "sized for); use the default copy mode");
        });
        d.field(p, "rx_queues", what, false, [&](const YAML::Node& v) {
            d.integer(v, what + " rx_queues", spec.rx_queues, 1, kMaxRxQueuesPerPort);
        });
        // net_af_packet hashes what it receives over all of its qpairs packet sockets (PACKET_FANOUT): a socket
        // sluice does not poll keeps its share of the frames.
        if (const auto qpairs = af_packet_qpairs(spec.device); qpairs && *qpairs != spec.rx_queues)
            d.error(p["rx_queues"] ? p["rx_queues"] : p["device"],
                    what + ": net_af_packet spreads what it receives over its qpairs=" + std::to_string(*qpairs) +
                        " packet sockets, so rx_queues must be " + std::to_string(*qpairs) + " too (it is " +
                        std::to_string(spec.rx_queues) + ")");
        for (auto [key, out] :
             {std::pair{"rx_descriptors", &spec.rx_descriptors}, {"tx_descriptors", &spec.tx_descriptors}}) {
            d.field(p, key, what, false, [&, key = key, out = out](const YAML::Node& v) {
                if (d.integer(v, what + " " + key, *out, 64, 16384) && !is_power_of_two(*out))
                    d.error(v, what + " " + key + " must be a power of two");
            });
        }
        d.field(p, "mtu", what, false, [&](const YAML::Node& v) { d.integer(v, what + " mtu", spec.mtu, 68, 9600); });
        d.field(p, "promiscuous", what, false,
                [&](const YAML::Node& v) { d.boolean(v, what + " promiscuous", spec.promiscuous); });
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
                d.error(
                    v,
                    what +
                        ": the device names its own xdp_prog, so sluice's steering cannot apply (xdp_steering: off)");
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
        d.field(p, "vlans", what, false,
                [&](const YAML::Node& v) { decode_vlans(d, v, spec.name, config, vlan_names); });
    }
    if (node.size() == 0) d.error(node, "ports must list at least one port");
    for (const auto& [name, mark] : vlan_names)
        if (port_marks.count(name)) d.error(mark, "VLAN name '" + name + "' is a port's name");
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
        d.field(l, "id", "an lcore", true,
                [&](const YAML::Node& v) { has_id = d.integer(v, "lcore id", lcore.id, 0, RTE_MAX_LCORE - 1); });
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
                const unsigned long queue =
                    colon == std::string::npos ? 0 : std::strtoul(text.c_str() + colon + 1, &end, 10);
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
            d.error(node,
                    "lcores: either every rx lcore lists its rx_queues or none does (then they are spread evenly)");
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
        d.field(f, "from", "a forward entry", true, [&](const YAML::Node& v) {
            if (!d.string(v, "forward from", entry.from) || config.find_port(entry.from)) return;
            d.error(v, config.canonical_interface(entry.from).empty()
                           ? "forward from: unknown port '" + entry.from + "'"
                           : "forward from: '" + entry.from +
                                 "' is a VLAN; a forward entry takes a port's frames on "
                                 "all its VLANs (route a VLAN's with routes)");
        });
        d.field(f, "to", "a forward entry", true, [&](const YAML::Node& v) {
            if (!d.string(v, "forward to", entry.to)) return;
            entry.to = config.canonical_interface(entry.to);
            if (entry.to.empty()) d.error(v, "forward to: unknown port or VLAN '" + v.Scalar() + "'");
        });
        if (!entry.from.empty() && !from_ports.insert(entry.from).second)
            d.error(f["from"], "forward: port '" + entry.from + "' already has a forward entry");
        if (!f["next_hop_mac"] && !f["next_hop"]) d.error(f, "a forward entry needs 'next_hop_mac' or 'next_hop'");
        if (f["next_hop_mac"] && f["next_hop"])
            d.error(f["next_hop"], "a forward entry takes 'next_hop_mac' or 'next_hop', not both");
        d.field(f, "next_hop_mac", "a forward entry", false, [&](const YAML::Node& v) {
            std::string text;
            if (d.string(v, "next_hop_mac", text) && !parse_mac(text, entry.next_hop_mac))
                d.error(v, "next_hop_mac '" + text + "' is not a MAC address like 02:00:00:00:00:01");
        });
        config.forward.push_back(entry);
    }
}

// ports[].addresses and ports[].vlans[].addresses: "10.77.2.1/24" (the host address and its link's prefix), one or
// a list. An address is one interface's: given twice, ARP/ND would answer for it on two links.
void decode_port_addresses(Decoder& d, const YAML::Node& ports, Config& config) {
    if (!ports || !ports.IsSequence()) return;
    std::map<std::pair<IpFamily, std::string>, std::pair<std::string, YAML::Mark>> seen;
    const auto decode = [&](const YAML::Node& list, const std::string& interface, const std::string& what) {
        for (const YAML::Node& a : one_or_list(d, list, what + " addresses")) {
            const std::string text = a.IsScalar() ? a.Scalar() : "";
            const auto slash = text.find('/');
            PortAddress address{.port = interface};
            Prefix prefix;
            IpFamily family;
            if (slash == std::string::npos || !parse_prefix(text, prefix, family) ||
                inet_pton(family == IpFamily::ipv4 ? AF_INET : AF_INET6, text.substr(0, slash).c_str(),
                          address.address.bytes) != 1) {
                d.error(a, what + ": address '" + text + "' is not ADDRESS/PREFIX-LENGTH, e.g. 10.77.2.1/24");
                continue;
            }
            address.family = family;
            address.length = prefix.length;
            const auto [it, added] =
                seen.try_emplace({family, to_string(address.address, family)}, interface, a.Mark());
            if (!added) {
                d.error(a,
                        what + ": address " + to_string(address.address, family) +
                            (it->second.first == interface ? " is given twice"
                                                           : " is already an address of '" + it->second.first + "'") +
                            " (first at line " + std::to_string(it->second.second.line + 1) + ")");
                continue;
            }
            config.port_addresses.push_back(address);
        }
    };
    for (const YAML::Node& p : ports) {
        if (!p.IsMap() || !p["name"] || !p["name"].IsScalar()) continue;
        const std::string name = p["name"].Scalar();
        if (p["addresses"]) decode(p["addresses"], name, "port '" + name + "'");
        if (!p["vlans"] || !p["vlans"].IsSequence()) continue;
        for (const YAML::Node& v : p["vlans"]) {
            if (!v.IsMap() || !v["addresses"] || !v["id"] || !v["id"].IsScalar()) continue;
            int id = 0;
            try {
                id = v["id"].as<int>();
            } catch (const YAML::Exception&) {
                continue;  // reported by decode_vlans
            }
            const std::string interface = name + "." + std::to_string(id);
            if (config.canonical_interface(interface) != interface) continue;  // its id was refused
            decode(v["addresses"], interface, "VLAN " + interface);
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

}  // namespace sluice::config_detail

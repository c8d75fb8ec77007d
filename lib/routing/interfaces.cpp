#include "routing/interfaces.hpp"

#include <stdexcept>

#include "packet/vlan.hpp"

namespace sluice {

const PortIdentity& port_named(const std::vector<PortIdentity>& ports, const std::string& name) {
    for (const PortIdentity& p : ports)
        if (p.name == name) return p;
    throw std::invalid_argument("no running port named '" + name + "'");
}

uint16_t interface_named(const std::vector<PortIdentity>& ports, const std::string& name) {
    const auto dot = name.find('.');
    const PortIdentity& port = port_named(ports, name.substr(0, dot));
    if (dot == std::string::npos) return port.id;
    if (port.id > kMaxVlanPort)
        throw std::invalid_argument("port '" + port.name + "' has VLANs but DPDK port id " + std::to_string(port.id) +
                                    ": only ports 0-" + std::to_string(kMaxVlanPort) + " may carry VLANs");
    return interface_id(port.id, static_cast<uint16_t>(std::stoul(name.substr(dot + 1))));
}

std::string interface_name(const std::vector<PortIdentity>& ports, uint16_t interface) {
    const uint16_t port = interface_port(interface), vlan = interface_vlan(interface);
    for (const PortIdentity& p : ports)
        if (p.id == port) return vlan ? p.name + "." + std::to_string(vlan) : p.name;
    return "?";
}

}  // namespace sluice

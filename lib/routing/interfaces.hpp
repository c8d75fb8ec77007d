// The running interfaces as the control plane names them: a started port, or PORT.ID for a VLAN of one
// (packet/vlan.hpp ids). Control thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <rte_ether.h>

namespace sluice {

// What the snapshot and route builders need to know of a started port.
struct PortIdentity {
    std::string name;
    uint16_t id = 0;
    rte_ether_addr mac{};
};

// The running port of that name; throws std::invalid_argument when none (a config that names a port the daemon did
// not start is refused before a snapshot is built).
const PortIdentity& port_named(const std::vector<PortIdentity>& ports, const std::string& name);
// The id (packet/vlan.hpp) of the running interface of that canonical name (Config::canonical_interface): a port's,
// or PORT.ID's of a VLAN of one; throws std::invalid_argument when its port is not running, or has an id above
// kMaxVlanPort and VLANs.
uint16_t interface_named(const std::vector<PortIdentity>& ports, const std::string& name);
// An interface's canonical name, from its id: the port's name, or PORT.ID; "?" when its port is not running.
std::string interface_name(const std::vector<PortIdentity>& ports, uint16_t interface);

}  // namespace sluice

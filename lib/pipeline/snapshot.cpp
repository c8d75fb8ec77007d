#include "pipeline/snapshot.hpp"

namespace sluice {

namespace {

bool listed(const std::vector<OwnedAddress>& addresses, IpFamily family, const IpAddress& address, uint16_t port) {
    for (const OwnedAddress& a : addresses)
        if (a.family == family && a.address == address &&
            (a.port == OwnedAddress::kAnyPort || port == OwnedAddress::kAnyPort || a.port == port))
            return true;
    return false;
}

}  // namespace

bool owns(const Snapshot& snapshot, IpFamily family, const IpAddress& address, uint16_t port) {
    return listed(snapshot.port_addresses, family, address, port) ||
           listed(snapshot.service_addresses, family, address, port);
}

bool is_port_address(const Snapshot& snapshot, IpFamily family, const IpAddress& address) {
    return listed(snapshot.port_addresses, family, address, OwnedAddress::kAnyPort);
}

const IpAddress* port_address(const Snapshot& snapshot, IpFamily family, uint16_t port) {
    for (const OwnedAddress& a : snapshot.port_addresses)
        if (a.family == family && a.port == port) return &a.address;
    return nullptr;
}

}  // namespace sluice

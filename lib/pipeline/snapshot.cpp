#include "pipeline/snapshot.hpp"

#include <rte_fib.h>
#include <rte_fib6.h>

#include <cstring>

namespace sluice {

RouteFib::~RouteFib() {
    rte_fib_free(v4);
    rte_fib6_free(v6);
}

long RouteTables::find(IpFamily family, const IpAddress& address) const {
    if (!fib) return -1;
    uint64_t found = 0;
    if (family == IpFamily::ipv4 && fib->v4) {
        uint32_t ip = rte_be_to_cpu_32(address.words[0]);
        rte_fib_lookup_bulk(fib->v4, &ip, &found, 1);
    } else if (family == IpFamily::ipv6 && fib->v6) {
        uint8_t ip[1][RTE_FIB6_IPV6_ADDR_SIZE];
        std::memcpy(ip[0], address.bytes, sizeof ip[0]);
        rte_fib6_lookup_bulk(fib->v6, ip, &found, 1);
    }
    return static_cast<long>(found) - 1;
}

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

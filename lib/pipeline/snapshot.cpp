#include "pipeline/snapshot.hpp"

#include <rte_fib.h>
#include <rte_fib6.h>
#include <rte_rib.h>
#include <rte_rib6.h>

#include <cstring>

namespace sluice {

RouteFib::~RouteFib() {
    rte_fib_free(v4);
    rte_fib6_free(v6);
}

const char* route_source_name(RouteSource source) {
    switch (source) {
    case RouteSource::connected: return "connected";
    case RouteSource::neighbour: return "host";
    case RouteSource::config: return "static";
    case RouteSource::kernel: return "kernel";
    }
    return "?";
}

const RouteEntry* RouteTables::find(IpFamily family, const IpAddress& address, Prefix* matched) const {
    if (!fib) return nullptr;
    uint64_t found = 0;
    Prefix prefix;
    if (family == IpFamily::ipv4 && fib->v4) {
        const uint32_t ip = rte_be_to_cpu_32(address.words[0]);
        const rte_rib_node* node = rte_rib_lookup(rte_fib_get_rib(fib->v4), ip);
        uint32_t network = 0;
        if (node && rte_rib_get_nh(node, &found) == 0 && rte_rib_get_ip(node, &network) == 0 &&
            rte_rib_get_depth(node, &prefix.length) == 0)
            prefix.address.words[0] = rte_cpu_to_be_32(network);
    } else if (family == IpFamily::ipv6 && fib->v6) {
        const rte_rib6_node* node = rte_rib6_lookup(rte_fib6_get_rib(fib->v6), address.bytes);
        if (node && rte_rib6_get_nh(node, &found) == 0 && rte_rib6_get_ip(node, prefix.address.bytes) == 0)
            rte_rib6_get_depth(node, &prefix.length);
    }
    if (found == 0) return nullptr;
    if (matched) *matched = prefix;
    return &entry_of(found);
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

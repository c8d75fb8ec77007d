// A NAT pool: the addresses translated connections take their source from, by pool index, and which of them a flow
// takes. Today the load balancer's `nat` services use one (LbTables::nat_pool). Built by the control thread,
// immutable once published; lookups are fast-path safe.
#pragma once

#include <cstdint>
#include <vector>

#include <rte_byteorder.h>

#include "common/five_tuple.hpp"

namespace sluice {

inline constexpr std::size_t kMaxNatPoolAddresses = 16;

struct NatPool {
    std::vector<IpAddress> addresses;  // by pool index (as in the config)
    std::vector<IpFamily> families;
    std::vector<uint8_t> v4;  // pool indexes of each family
    std::vector<uint8_t> v6;

    void add(const IpAddress& address, IpFamily family) {
        (family == IpFamily::ipv4 ? v4 : v6).push_back(static_cast<uint8_t>(addresses.size()));
        addresses.push_back(address);
        families.push_back(family);
    }
    bool empty() const { return addresses.empty(); }
    std::size_t size() const { return addresses.size(); }

    // Whether a destination is one of the pool's addresses (then its port names the owning worker).
    bool contains(IpFamily family, const IpAddress& address) const {
        for (std::size_t i = 0; i < addresses.size(); ++i)
            if (families[i] == family && addresses[i] == address) return true;
        return false;
    }

    // The pool address (its index) a translated connection of this flow hash takes its source from. The family
    // must have an address (the config checks every family that translates has one).
    uint8_t address_for(IpFamily family, uint32_t flow_hash) const {
        const std::vector<uint8_t>& of_family = family == IpFamily::ipv4 ? v4 : v6;
        return of_family[flow_hash % of_family.size()];
    }
};

// The reply side of a connection translated to `to` (to_port_be 0: the original destination port) from
// pool_address:pool_port (host order): the tuple its replies come with, the connection's second key.
inline FiveTuple nat_reply_tuple(const FiveTuple& original, const IpAddress& to, uint16_t to_port_be,
                                 const IpAddress& pool_address, uint16_t pool_port) {
    FiveTuple reply;
    reply.src = to;
    reply.dst = pool_address;
    set_ports(reply, to_port_be ? to_port_be : original.dst_port, rte_cpu_to_be_16(pool_port));
    reply.proto = original.proto;
    reply.family = original.family;
    return reply;
}

}  // namespace sluice

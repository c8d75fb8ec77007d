// The load balancer's decision for a new connection to a service: which backend Maglev gives the flow, which pool
// address a NAT connection takes its source from, and the tuple its replies come back with. One telling of it,
// called by the stateful stage, by explain and by the dry-run's flow walk, so what they say cannot drift from what
// the data path does. Pure lookups: fast-path safe, any thread that holds the tables.
#pragma once

#include <cstdint>

#include <rte_byteorder.h>

#include "common/five_tuple.hpp"
#include "lb/lb_tables.hpp"
#include "lb/maglev.hpp"

namespace sluice {

inline constexpr uint32_t kNoBackend = UINT32_MAX;

// The stable id of the backend Maglev gives a flow whose stable_flow_hash is stable_hash, or kNoBackend when no
// backend of the service is usable (all down, draining or weight 0).
inline uint32_t pick_backend(const LbService& service, uint32_t stable_hash) {
    const uint16_t local = service.maglev[maglev_slot(stable_hash, service.table_size)];
    return local == kMaglevNoBackend ? kNoBackend : service.backend_ids[local];
}

// The pool address (its index in lb.pool) a NAT connection of this flow hash takes its source from. The family
// must have a pool address (the config checks every nat service's family has one).
inline uint8_t nat_pool_address(const LbTables& lb, IpFamily family, uint32_t flow_hash) {
    const std::vector<uint8_t>& pool = family == IpFamily::ipv4 ? lb.pool_v4 : lb.pool_v6;
    return pool[flow_hash % pool.size()];
}

// The backend -> pool address side of a NAT connection from `client` to `target` (pool address index, port in host
// order): the tuple its replies come with, the connection's second key.
inline FiveTuple nat_reply_tuple(const LbTables& lb, const LbBackend& target, uint8_t address, uint16_t port,
                                 const FiveTuple& client) {
    FiveTuple reply;
    reply.src = target.address;
    reply.dst = lb.pool[address];
    set_ports(reply, target.port_be ? target.port_be : client.dst_port, rte_cpu_to_be_16(port));
    reply.proto = client.proto;
    reply.family = client.family;
    return reply;
}

}  // namespace sluice

// The load balancer's decision for a new connection to a service: which backend Maglev gives the flow, and (through
// the translation core, lib/nat) the tuple a NAT connection's replies come back with. One telling of it,
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

// The backend -> pool address side of a nat service's connection from `client` to `target` (pool address index,
// port in host order): the tuple its replies come with (nat/nat_pool.hpp), the connection's second key.
inline FiveTuple backend_reply_tuple(const LbTables& lb, const LbBackend& target, uint8_t address, uint16_t port,
                                     const FiveTuple& client) {
    return nat_reply_tuple(client, target.address, target.port_be, lb.nat_pool.addresses[address], port);
}

}  // namespace sluice

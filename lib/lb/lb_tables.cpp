#include "lb/lb_tables.hpp"

#include <rte_hash.h>

namespace sluice {

const char* lb_mode_name(LbMode mode) {
    switch (mode) {
    case LbMode::nat: return "nat";
    case LbMode::dsr: return "dsr";
    case LbMode::tunnel: return "tunnel";
    }
    return "unknown";
}

LbTables::~LbTables() { rte_hash_free(vips); }

int32_t LbTables::find_service(const FiveTuple& tuple) const {
    if (vips == nullptr) return kNoVip;
    // Lookups: a service's own port 1, no VIP 2 (as many as before the address-alone keys), the rest 3.
    VipKey key;
    key.address = tuple.dst;
    key.port_be = tuple.dst_port;
    key.proto = tuple.proto;
    key.family = tuple.family;
    void* data = nullptr;
    if (rte_hash_lookup_data(vips, &key, &data) >= 0) return static_cast<int32_t>(reinterpret_cast<uintptr_t>(data));
    const VipKey address_alone{.address = tuple.dst, .family = tuple.family};
    if (rte_hash_lookup_data(vips, &address_alone, &data) < 0) return kNoVip;
    key.port_be = 0;
    if (rte_hash_lookup_data(vips, &key, &data) >= 0) return static_cast<int32_t>(reinterpret_cast<uintptr_t>(data));
    return kVipUnserved;
}

}  // namespace sluice

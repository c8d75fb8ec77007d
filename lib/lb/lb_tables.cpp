#include "lb/lb_tables.hpp"

#include <cstddef>

#include <rte_hash.h>

#include "common/compiler.hpp"

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

std::vector<NatDestination> LbTables::nat_destinations() const {
    std::vector<NatDestination> destinations;
    for (std::size_t id = 0; id < backends.size(); ++id) {
        const LbBackend& backend = backends[id];
        if (backend.mode == LbMode::nat && !backend.removed)
            destinations.push_back({static_cast<uint32_t>(id), backend.address, backend.family});
    }
    return destinations;
}

namespace {

// Writes a VipKey's last 8 bytes (port, protocol, family, reserved) with one store: rte_hash's CRC reads the key
// 8 bytes at a time right after it is written, and a word made of four narrower stores waits for them to retire
// (the TTL rewrite's pattern, forward_stage.cpp).
void set_vip_key_tail(VipKey& key, uint16_t port_be, uint8_t proto, IpFamily family) {
    struct Tail {
        uint16_t port_be;
        uint8_t proto;
        IpFamily family;
        uint32_t reserved;
    };
    static_assert(sizeof(Tail) == 8 && offsetof(VipKey, proto) == offsetof(VipKey, port_be) + 2 &&
                  offsetof(VipKey, family) == offsetof(VipKey, proto) + 1 &&
                  offsetof(VipKey, reserved) == offsetof(VipKey, family) + 1 &&
                  sizeof(VipKey) == offsetof(VipKey, port_be) + 8);
    store_as_one_word(reinterpret_cast<uint8_t*>(&key) + offsetof(VipKey, port_be), Tail{port_be, proto, family, 0});
}

}  // namespace

int32_t LbTables::find_service(const FiveTuple& tuple) const {
    if (vips == nullptr) return kNoVip;
    // Lookups: a service's own port 1, no VIP 2 (as many as before the address-alone keys), the rest 3.
    VipKey key;
    key.address = tuple.dst;
    set_vip_key_tail(key, tuple.dst_port, tuple.proto, tuple.family);
    void* data = nullptr;
    if (rte_hash_lookup_data(vips, &key, &data) >= 0) return static_cast<int32_t>(reinterpret_cast<uintptr_t>(data));
    set_vip_key_tail(key, 0, 0, tuple.family);  // the address alone
    if (rte_hash_lookup_data(vips, &key, &data) < 0) return kNoVip;
    set_vip_key_tail(key, 0, tuple.proto, tuple.family);
    if (rte_hash_lookup_data(vips, &key, &data) >= 0) return static_cast<int32_t>(reinterpret_cast<uintptr_t>(data));
    return kVipUnserved;
}

}  // namespace sluice

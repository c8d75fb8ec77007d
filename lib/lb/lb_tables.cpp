#include "lb/lb_tables.hpp"

#include <bit>
#include <cstddef>
#include <cstring>

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

namespace {

// Writes a VipKey's last 8 bytes (port, protocol, family, reserved) with one store. rte_hash's CRC reads the key
// 8 bytes at a time right after it is written, and a load that several narrower stores must make up cannot take
// their data: it waits for them to retire (about a third of a new connection's cost when services are configured).
void set_vip_key_tail(VipKey& key, uint16_t port_be, uint8_t proto, IpFamily family) {
    static_assert(offsetof(VipKey, proto) == offsetof(VipKey, port_be) + 2 && offsetof(VipKey, family) == offsetof(VipKey, proto) + 1 &&
                  offsetof(VipKey, reserved) == offsetof(VipKey, family) + 1 && sizeof(VipKey) == offsetof(VipKey, port_be) + 8);
    const uint64_t port = port_be, protocol = proto, fam = static_cast<uint8_t>(family);
    const uint64_t tail = std::endian::native == std::endian::little ? port | protocol << 16 | fam << 24
                                                                     : port << 48 | protocol << 40 | fam << 32;
    std::memcpy(reinterpret_cast<uint8_t*>(&key) + offsetof(VipKey, port_be), &tail, sizeof tail);
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

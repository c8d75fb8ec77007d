// The load balancer's part of a snapshot: services by VIP, their Maglev tables, every backend the daemon has known
// (by stable id, so connections keep their backend across reloads), the NAT pool and the tunnel sources. Built by
// the control thread, immutable once published, read by the workers (lookups only; rte_hash is safe for
// concurrent readers when nobody writes).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <rte_ether.h>

#include "common/five_tuple.hpp"
#include "common/tcp_window_check.hpp"
#include "nat/nat_pool.hpp"
#include "nat/nat_ports.hpp"

struct rte_hash;

namespace sluice {

enum class LbMode : uint8_t { nat, dsr, tunnel };

const char* lb_mode_name(LbMode mode);

// What a service listens on; port 0 (any) is looked up after the exact port. Hashed as bytes: no implicit padding.
// The table also holds each VIP address alone (port 0, proto 0: no service has protocol 0), which tells traffic to
// no VIP at all from traffic to a VIP on a port or protocol that no service serves.
struct VipKey {
    IpAddress address{};
    uint16_t port_be = 0;
    uint8_t proto = 0;
    IpFamily family = IpFamily::none;
    uint32_t reserved = 0;
};
static_assert(sizeof(VipKey) == 24);

// Backends by stable id: a backend keeps its id (service name + address:port) for the daemon's life, and its
// entry stays after it leaves the config, so `removed_backends: keep` connections can still reach it.
inline constexpr uint32_t kMaxBackends = 65536;
static_assert(kMaxBackends <= kMaxNatDestinations, "a backend's stable id is its NAT destination id");

struct LbBackend {
    IpAddress address{};
    IpFamily family = IpFamily::none;
    bool has_mac = false;
    bool removed = false;             // no longer in the config
    bool drop_when_removed = false;   // its service says removed_backends: drop
    bool awaiting_neighbour = false;  // on a link of sluice's but not resolved yet: neighbour_unresolved
    LbMode mode = LbMode::nat;        // its service's
    uint16_t port_be = 0;             // 0: keep the packet's destination port
    rte_ether_addr mac{};
    uint32_t service = UINT32_MAX;  // index in LbTables::services, UINT32_MAX when removed
};

struct LbService {
    std::string name;
    VipKey vip;
    LbMode mode = LbMode::nat;
    bool syn_proxy = false;                          // nat + tcp: new connections are answered with SYN cookies first
    std::optional<TcpWindowCheck> tcp_window_check;  // unset: the firewall's default (strict without a firewall)
    uint32_t table_size = 0;
    std::vector<uint16_t> maglev;       // slot -> index into backend_ids, kMaglevNoBackend when none is usable
    std::vector<uint32_t> backend_ids;  // in config order: stable ids
    std::vector<uint8_t> backend_up;    // health, in config order (1: up)
};

struct LbTables {
    std::vector<LbService> services;
    std::vector<LbBackend> backends;  // by stable id
    rte_hash* vips = nullptr;         // VipKey -> index in services, or kVipUnserved for a VIP address alone
    NatPool nat_pool;                 // of the nat services
    IpAddress tunnel_source_v4{};
    IpAddress tunnel_source_v6{};

    LbTables() = default;
    LbTables(const LbTables&) = delete;
    LbTables& operator=(const LbTables&) = delete;
    ~LbTables();

    bool enabled() const { return !services.empty(); }

    // The nat backends (not removed), as the translation core's destinations: each gets its port space.
    std::vector<NatDestination> nat_destinations() const;

    // Index of the service the tuple's destination belongs to; kNoVip when the destination is no VIP,
    // kVipUnserved when it is a VIP but no service listens on its port and protocol. Fast-path safe.
    static constexpr int32_t kNoVip = -1;
    static constexpr int32_t kVipUnserved = -2;
    int32_t find_service(const FiveTuple& tuple) const;
};

}  // namespace sluice

// What the daemon shows to the outside (telemetry commands, Prometheus): the running data plane, its ports and
// pools, and the history of config reloads. Owned by the daemon. The data-plane pointers are set before any reader
// is attached and cleared only after readers are detached; ReloadStatus is written by the control thread and read
// by the telemetry and exporter threads under its mutex.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include <rte_mempool.h>

#include "pipeline/dataplane.hpp"

namespace sluice {

struct StatusPort {
    std::string name;
    uint16_t port_id = 0;
};

struct ReloadRecord {
    uint64_t successes = 0;
    uint64_t failures = 0;
    double last_attempt_unix = 0;  // seconds; 0 before the first reload
    bool last_ok = true;
    std::string running_hash;      // Config::hash of what runs now
    std::string running_path;
    std::vector<std::string> last_errors;
};

class ReloadStatus {
public:
    ReloadRecord read() const {
        std::lock_guard lock(mutex_);
        return record_;
    }
    template <typename Update>
    void update(Update update) {
        std::lock_guard lock(mutex_);
        update(record_);
    }

private:
    mutable std::mutex mutex_;
    ReloadRecord record_;
};

// New connections decided by each rule (and the default), summed over lcores and over the snapshots a rule has
// lived in, by name. Refreshed by the control thread; read by telemetry and the exporter.
struct RuleHitsRecord {
    std::vector<std::pair<std::string, uint64_t>> rules;  // in rule order: new connections decided
    std::vector<std::pair<uint64_t, uint64_t>> traffic;   // in rule order: packets and bytes of allowed connections
    uint64_t default_hits = 0;
};

// One load-balancer backend as operators see it: configuration, health and the traffic of its connections summed
// over the workers.
struct BackendRecord {
    std::string service;
    std::string backend;       // address:port
    std::string mode;          // nat, dsr, tunnel
    uint32_t weight = 0;
    bool up = true;            // health (true without a health check)
    bool checked = false;      // has a health check
    uint64_t new_connections = 0;
    uint64_t active_connections = 0;
    uint64_t packets = 0;
    uint64_t bytes = 0;
    std::string last_error;    // the health check's most recent failure
};

struct BackendsRecord {
    std::vector<BackendRecord> backends;  // in config order
};

// sluice's XDP program on one net_af_xdp port: where it sent frames (lib/xdp/steer.bpf.c).
struct XdpPortRecord {
    std::string port;
    std::string iface;
    std::string mode;  // all, services
    uint64_t to_sluice = 0;
    uint64_t to_kernel = 0;
    uint64_t other = 0;  // neither IP nor ARP: the kernel's
    std::size_t prefixes = 0;
};

struct XdpRecord {
    std::vector<XdpPortRecord> ports;
};

// A record written by the control thread and read by telemetry and the exporter, under a mutex.
template <typename Record>
class Published {
public:
    Record read() const {
        std::lock_guard lock(mutex_);
        return record_;
    }
    void write(Record record) {
        std::lock_guard lock(mutex_);
        record_ = std::move(record);
    }

private:
    mutable std::mutex mutex_;
    Record record_;
};

// Announcing VIPs over BGP through BIRD (lib/control/bird_announcer.hpp): what sluice wants announced, what BIRD
// accepted last, and the counts.
struct BgpVipRecord {
    std::string vip;
    bool wanted = false;     // sluice can serve it now
    bool announced = false;  // in the file BIRD last accepted
    uint64_t announcements = 0;
    uint64_t withdrawals = 0;
};

struct BgpRecord {
    bool enabled = false;          // a bgp section is configured
    bool draining = false;         // sluicectl drain or SIGTERM: every VIP withdrawn, stopping at drain_ends_unix
    double drain_ends_unix = 0;
    bool in_sync = false;          // BIRD runs with what sluice wants
    uint64_t reconfigures = 0;     // BIRD accepted a new file
    uint64_t reconfigure_failures = 0;
    std::string last_error;        // the most recent failure talking to BIRD (empty: none yet)
    std::vector<BgpVipRecord> vips;  // every VIP seen since start, sorted
};

using RuleStats = Published<RuleHitsRecord>;
using BackendStats = Published<BackendsRecord>;
using XdpStats = Published<XdpRecord>;
using BgpStats = Published<BgpRecord>;

struct StatusView {
    const Dataplane* dataplane = nullptr;
    std::vector<StatusPort> ports;
    std::vector<std::pair<int, const rte_mempool*>> pools;  // (socket, pool)
    const ReloadStatus* reload = nullptr;
    const RuleStats* rules = nullptr;
    const BackendStats* backends = nullptr;
    const XdpStats* xdp = nullptr;
    const BgpStats* bgp = nullptr;
};

}  // namespace sluice

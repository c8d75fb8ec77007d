// The Prometheus families sluice exports, rendered from one scrape's readings. Rendering touches no DPDK state, so
// a unit test can render a scrape it made up and check every family against its declaration and docs/metrics.md.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <prometheus/metric_family.h>

#include "control/status.hpp"
#include "sync/sync_channel.hpp"

namespace sluice {

// Everything one scrape shows, read from the live data plane and the published records (read_scrape).
// The sync channel's counters (SLUICE_SYNC_COUNTERS' order) and peers, read at a scrape.
struct SyncRecord {
    std::vector<uint64_t> counters;
    std::vector<SyncPeerStatus> peers;
};

struct Scrape {
    std::string version;
    double tsc_hz = 1;
    std::vector<PortReading> ports;
    std::array<uint64_t, kDropReasonCount> drops{};
    std::vector<LcoreReading> lcores;
    std::vector<PoolReading> pools;
    RuleHitsRecord rules;
    std::optional<BackendsRecord> backends;
    std::optional<XdpRecord> xdp;
    XskRecord xsk;  // empty without net_af_xdp ports
    std::optional<BgpRecord> bgp;
    NeighboursRecord neighbours;
    std::optional<RoutesRecord> routes;
    std::optional<SyncRecord> sync;
    ReloadRecord reload;
};

// Reads the live counters and records; the exporter's thread, at each scrape.
Scrape read_scrape(const StatusView& view, const std::string& version);

std::vector<prometheus::MetricFamily> render_families(const Scrape& scrape);

}  // namespace sluice

// sluice's whole data path in the test process: a config (YAML, as an operator writes it) loaded and built as the
// daemon builds it (ports, snapshot, Dataplane), on ring-backed ethdevs (rte_eth_from_rings) in place of NICs.
// Frames go into a port's RX ring, the lcores' loops run on the test thread (Dataplane::run_inline) at a TSC the
// test sets, and what sluice sent is read back from the ports' TX rings. Needs the EAL (dpdk_unit_tests).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <rte_mempool.h>
#include <rte_ring.h>

#include "common/frames.hpp"
#include "config/config.hpp"
#include "control/snapshot_builder.hpp"
#include "dpdk/port.hpp"
#include "pipeline/dataplane.hpp"

namespace sluice::test {

class PipelineLab {
public:
    // yaml: a whole config; each port's device is ignored (a ring port stands in) and eal is not used. Throws with
    // the config's errors when it does not load.
    explicit PipelineLab(const std::string& yaml);
    ~PipelineLab();
    PipelineLab(const PipelineLab&) = delete;
    PipelineLab& operator=(const PipelineLab&) = delete;

    // Builds a snapshot of another config (same ports and lcores) and publishes it, as the daemon's reload does:
    // rules and backends keep their stable ids. Throws with the config's errors when it does not load.
    void reload(const std::string& yaml);
    // Ends the data path (connections, NAT ports, counters, learned neighbours) and starts a new one on the same
    // ports with another config, as a restart of the daemon would; the clock starts again. For a fuzzer that runs
    // many programs on one lab: creating ports, rings and a pool each time would cost more than the programs.
    void restart(const std::string& yaml);

    // Into RX queue `queue` of port (ports[].rx_queues in the config gives a port several).
    void send(const std::string& port, const std::vector<Bytes>& frames, uint16_t queue = 0);
    // Runs every lcore's loop until nothing moves; returns the packets moved.
    uint32_t run();
    // What sluice transmitted on port since the last call.
    std::vector<Bytes> take_sent(const std::string& port);
    // send, run, take_sent on out_port.
    std::vector<Bytes> exchange(const std::string& in_port, const std::vector<Bytes>& frames,
                                const std::string& out_port);

    // As ARP/ND answering (or a neighbour that stops answering: nullopt): the address's MAC, republished as the
    // daemon republishes on a change of neighbours (rebuild_live).
    void set_neighbour(const std::string& address, std::optional<std::array<uint8_t, 6>> mac);
    // As the daemon's glean: a host on the connected link of port (or of a VLAN: "trunk.100") resolved at mac,
    // republished likewise.
    void add_connected_host(const std::string& address, const std::string& port, const std::array<uint8_t, 6>& mac);

    void advance_seconds(double seconds) { now_tsc_ += static_cast<uint64_t>(seconds * static_cast<double>(tsc_hz_)); }
    uint64_t now_tsc() const { return now_tsc_; }

    CounterTotals totals() const { return dataplane_->totals(); }
    uint64_t drops(DropReason reason) const { return totals().drops[static_cast<std::size_t>(reason)]; }
    const Snapshot& snapshot() const { return dataplane_->snapshot(); }
    const std::vector<PortIdentity>& ports() const { return identities_; }
    uint16_t port_id(const std::string& name) const;
    Dataplane& dataplane() { return *dataplane_; }
    // mbufs not in the pool now (held by the data path, the rings, or the test).
    unsigned mbufs_out() const { return rte_mempool_in_use_count(pool_); }

private:
    // A snapshot of config (its text: yaml) with the lab's stable ids, reusing the rte_acl contexts of a config seen
    // before or of the running snapshot when the rules are the same (as the daemon's reload does).
    std::unique_ptr<Snapshot> build(const Config& config, const std::string& yaml);
    void start(const std::string& yaml);  // the data path of config_ (its text: yaml)
    // The config of yaml; each text is decoded once (YAML decoding under the sanitizers costs a fuzzer's program).
    const Config& parsed(const std::string& yaml);

    struct RingPort {
        std::vector<rte_ring*> rx;  // one per RX queue
        std::vector<rte_ring*> tx;  // one per worker: each owns a TX queue
    };

    Config config_;
    StableRuleIds rule_ids_;
    BackendRegistry backends_;
    rte_mempool* pool_ = nullptr;
    std::map<std::string, RingPort> rings_;
    std::vector<std::unique_ptr<Port>> ports_;
    std::vector<PortIdentity> identities_;
    std::unique_ptr<Dataplane> dataplane_;
    std::map<std::string, Config> configs_;
    // rte_acl builds dominate a lab's start under the sanitizers: each config's contexts are kept for its next use.
    std::map<std::string, std::pair<std::shared_ptr<const AclClassifier>, std::shared_ptr<const AclClassifier>>>
        acl_by_config_;
    std::map<std::string, rte_ether_addr> neighbours_;  // address bytes -> MAC
    std::vector<ConnectedHost> hosts_;
    LiveState live_state();
    uint64_t tsc_hz_ = 0;
    uint64_t now_tsc_ = 0;
};

// The MAC the route tests give their neighbours: 02:00:00:00:0b:LAST.
inline std::array<uint8_t, 6> mac(uint8_t last) { return {0x02, 0, 0, 0, 0x0b, last}; }

}  // namespace sluice::test

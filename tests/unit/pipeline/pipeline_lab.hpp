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
#include <vector>

#include <rte_mempool.h>
#include <rte_ring.h>

#include "common/frames.hpp"
#include "control/config.hpp"
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

    void send(const std::string& port, const std::vector<Bytes>& frames);
    // Runs every lcore's loop until nothing moves; returns the packets moved.
    uint32_t run();
    // What sluice transmitted on port since the last call.
    std::vector<Bytes> take_sent(const std::string& port);
    // send, run, take_sent on out_port.
    std::vector<Bytes> exchange(const std::string& in_port, const std::vector<Bytes>& frames,
                                const std::string& out_port);

    // A reload: yaml (the same ports and lcores) built as the daemon builds it, with the neighbours resolved so far,
    // and published. Throws with the config's errors when it does not load.
    void reload(const std::string& yaml);
    // As ARP/ND answering (or a neighbour that stops answering: nullopt): the address's MAC, republished as the
    // daemon republishes on a change of neighbours (rebuild_live).
    void set_neighbour(const std::string& address, std::optional<std::array<uint8_t, 6>> mac);
    // As the daemon's glean: a host on port's connected link resolved at mac, republished likewise.
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
    struct RingPort {
        rte_ring* rx = nullptr;
        std::vector<rte_ring*> tx;  // one per worker: each owns a TX queue
    };

    Config config_;
    rte_mempool* pool_ = nullptr;
    std::map<std::string, RingPort> rings_;
    std::vector<std::unique_ptr<Port>> ports_;
    std::vector<PortIdentity> identities_;
    std::unique_ptr<Dataplane> dataplane_;
    std::map<std::string, rte_ether_addr> neighbours_;  // address bytes -> MAC
    std::vector<ConnectedHost> hosts_;
    LiveState live_state();
    uint64_t tsc_hz_ = 0;
    uint64_t now_tsc_ = 0;
};

}  // namespace sluice::test

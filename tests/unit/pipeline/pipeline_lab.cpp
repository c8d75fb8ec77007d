#include "pipeline/pipeline_lab.hpp"

#include <algorithm>
#include <stdexcept>

#include <rte_cycles.h>
#include <rte_eth_ring.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>

#include <spdlog/spdlog.h>

#include "control/dataplane_plan.hpp"
#include "dpdk/mempool.hpp"
#include "packet/packet_meta.hpp"

namespace sluice::test {
namespace {

unsigned g_labs = 0;  // names of rings, ports and pools are process-wide: each lab gets its own

constexpr unsigned kPoolSize = 4095;
constexpr unsigned kRingSize = 1024;

rte_ring* make_ring(const std::string& name) {
    rte_ring* r =
        rte_ring_create(name.c_str(), kRingSize, static_cast<int>(rte_socket_id()), RING_F_SP_ENQ | RING_F_SC_DEQ);
    if (!r) throw std::runtime_error("rte_ring_create " + name + ": " + rte_strerror(rte_errno));
    return r;
}

// yaml loaded, or an exception with its errors.
Config load_lab_config(const std::string& yaml) {
    ConfigResult loaded = load_config_text(yaml, "lab.yaml");
    if (!loaded.config) {
        std::string errors;
        for (const ConfigError& e : loaded.errors) errors += "\n" + e.to_string();
        throw std::runtime_error("the lab's config does not load:" + errors);
    }
    return std::move(*loaded.config);
}

std::size_t worker_count(const Config& config) {
    std::size_t workers = 0;
    for (const LcoreConfig& l : config.lcores) workers += l.worker ? 1 : 0;
    return workers;
}

}  // namespace

PipelineLab::PipelineLab(const std::string& yaml) {
    config_ = load_lab_config(yaml);
    spdlog::set_level(spdlog::level::warn);  // the daemon's start-up lines, once per lab, say nothing a test reads
    if (!register_packet_meta()) throw std::runtime_error("cannot register the PacketMeta dynfield");
    const std::string lab = "lab" + std::to_string(++g_labs);
    MempoolDemand demand;  // only the data room is taken: the daemon's, for the largest MTU
    for (const PortSpec& spec : config_.ports) demand.max_frame = std::max(demand.max_frame, max_frame_size(spec.mtu));
    pool_ = rte_pktmbuf_pool_create((lab + "_pool").c_str(), kPoolSize, 0, 0, plan_mempool(demand).data_room,
                                    static_cast<int>(rte_socket_id()));
    if (!pool_) throw std::runtime_error(std::string("rte_pktmbuf_pool_create: ") + rte_strerror(rte_errno));

    const std::size_t workers = worker_count(config_);
    for (PortSpec& spec : config_.ports) {
        const std::string name = lab + "_" + spec.name;
        RingPort& ring = rings_[spec.name];
        for (uint16_t q = 0; q < spec.rx_queues; ++q) ring.rx.push_back(make_ring(name + "_rx" + std::to_string(q)));
        for (std::size_t w = 0; w < workers; ++w) ring.tx.push_back(make_ring(name + "_tx" + std::to_string(w)));
        const int id =
            rte_eth_from_rings(name.c_str(), ring.rx.data(), static_cast<unsigned>(ring.rx.size()), ring.tx.data(),
                               static_cast<unsigned>(ring.tx.size()), static_cast<unsigned>(rte_socket_id()));
        char ethdev[RTE_ETH_NAME_MAX_LEN];
        if (id < 0 || rte_eth_dev_get_name_by_port(static_cast<uint16_t>(id), ethdev) != 0)
            throw std::runtime_error("rte_eth_from_rings " + name + ": " + rte_strerror(rte_errno));
        spec.device = ethdev;  // the ethdev the daemon's Port finds by its device name
        ports_.push_back(std::make_unique<Port>(spec));
        ports_.back()->start(static_cast<uint16_t>(workers), pool_, /*tx_fast_free=*/true);  // one pool for all
        identities_.push_back({spec.name, ports_.back()->id(), ports_.back()->mac()});
    }
    start(yaml);
}

void PipelineLab::start(const std::string& yaml) {
    auto first = build(config_, yaml);
    // Every lcore of the plan runs on this thread, in plan order.
    DataplaneSpec spec = dataplane_spec(config_, identities_);
    for (LcorePlan& plan : spec.lcores) plan.lcore_id = rte_lcore_id();
    dataplane_ = std::make_unique<Dataplane>(spec, std::move(first));
    tsc_hz_ = rte_get_tsc_hz();
    now_tsc_ = rte_rdtsc();
}

std::unique_ptr<Snapshot> PipelineLab::build(const Config& config, const std::string& yaml) {
    LiveState live = live_state();
    live.rule_ids = &rule_ids_, live.backends = &backends_;
    if (auto seen = acl_by_config_.find(yaml); seen != acl_by_config_.end()) {
        live.acl_v4 = seen->second.first, live.acl_v6 = seen->second.second;
    } else if (dataplane_) {
        live.acl_v4 = dataplane_->snapshot().firewall->acl_v4, live.acl_v6 = dataplane_->snapshot().firewall->acl_v6;
    }
    auto snapshot = build_snapshot(config, identities_, config.lcores.size(), static_cast<int>(rte_socket_id()),
                                   worker_count(config), live);
    acl_by_config_[yaml] = {snapshot->firewall->acl_v4, snapshot->firewall->acl_v6};
    return snapshot;
}

PipelineLab::~PipelineLab() {
    dataplane_.reset();
    for (auto& port : ports_) port->stop();
    ports_.clear();
    for (auto& [name, ring] : rings_) {
        for (rte_ring* r : ring.rx) rte_ring_free(r);
        for (rte_ring* r : ring.tx) rte_ring_free(r);
    }
    rte_mempool_free(pool_);
}

const Config& PipelineLab::parsed(const std::string& yaml) {
    auto seen = configs_.find(yaml);
    if (seen == configs_.end()) seen = configs_.emplace(yaml, load_lab_config(yaml)).first;
    return seen->second;
}

void PipelineLab::reload(const std::string& yaml) {
    Config next = parsed(yaml);
    dataplane_->publish(build(next, yaml));
    config_ = std::move(next);
}

void PipelineLab::restart(const std::string& yaml) {
    Config next = parsed(yaml);
    dataplane_.reset();
    rule_ids_ = {};
    backends_ = {};
    neighbours_.clear();
    hosts_.clear();
    config_ = std::move(next);
    start(yaml);
}

uint16_t PipelineLab::port_id(const std::string& name) const {
    for (const PortIdentity& p : identities_)
        if (p.name == name) return p.id;
    throw std::runtime_error("the lab has no port " + name);
}

void PipelineLab::send(const std::string& port, const std::vector<Bytes>& frames, uint16_t queue) {
    for (const Bytes& f : frames) {
        rte_mbuf* m = rte_pktmbuf_alloc(pool_);
        if (!m) throw std::runtime_error("the lab's pool is empty");
        char* data = rte_pktmbuf_append(m, static_cast<uint16_t>(f.size()));
        std::memcpy(data, f.data(), f.size());
        m->port = port_id(port);
        if (rte_ring_enqueue(rings_.at(port).rx.at(queue), m) != 0) {
            rte_pktmbuf_free(m);
            throw std::runtime_error("the RX ring of " + port + " is full");
        }
    }
}

uint32_t PipelineLab::run() {
    uint32_t moved = 0;
    for (;;) {
        const uint32_t n = dataplane_->run_inline(now_tsc_);
        if (n == 0) return moved;
        moved += n;
    }
}

std::vector<Bytes> PipelineLab::take_sent(const std::string& port) {
    std::vector<Bytes> out;
    for (rte_ring* ring : rings_.at(port).tx) {
        void* obj;
        while (rte_ring_dequeue(ring, &obj) == 0) {
            auto* m = static_cast<rte_mbuf*>(obj);
            const auto* data = rte_pktmbuf_mtod(m, const uint8_t*);
            out.emplace_back(data, data + rte_pktmbuf_data_len(m));
            rte_pktmbuf_free(m);
        }
    }
    return out;
}

LiveState PipelineLab::live_state() {
    LiveState live;
    live.neighbours = [this](uint16_t, IpFamily family, const IpAddress& address) -> std::optional<rte_ether_addr> {
        const std::string key(reinterpret_cast<const char*>(address.bytes), family == IpFamily::ipv4 ? 4 : 16);
        const auto it = neighbours_.find(key);
        return it == neighbours_.end() ? std::nullopt : std::optional(it->second);
    };
    live.hosts = [this] { return hosts_; };
    return live;
}

void PipelineLab::set_neighbour(const std::string& address, std::optional<std::array<uint8_t, 6>> mac) {
    const Bytes bytes = address_bytes(address);
    const std::string key(bytes.begin(), bytes.end());
    if (mac) std::memcpy(neighbours_[key].addr_bytes, mac->data(), 6);
    else neighbours_.erase(key);
    dataplane_->publish(
        rebuild_live(snapshot(), config_, identities_, static_cast<int>(rte_socket_id()), live_state()));
}

void PipelineLab::add_connected_host(const std::string& address, const std::string& port,
                                     const std::array<uint8_t, 6>& mac) {
    ConnectedHost host{.family = is_v6(address) ? IpFamily::ipv6 : IpFamily::ipv4,
                       .port = interface_named(identities_, config_.canonical_interface(port))};
    const Bytes bytes = address_bytes(address);
    std::memcpy(host.address.bytes, bytes.data(), bytes.size());
    std::memcpy(host.mac.addr_bytes, mac.data(), 6);
    hosts_.push_back(host);
    dataplane_->publish(
        rebuild_live(snapshot(), config_, identities_, static_cast<int>(rte_socket_id()), live_state()));
}

std::vector<Bytes> PipelineLab::exchange(const std::string& in_port, const std::vector<Bytes>& frames,
                                         const std::string& out_port) {
    send(in_port, frames);
    run();
    return take_sent(out_port);
}

}  // namespace sluice::test

#include "pipeline/dataplane.hpp"

#include <algorithm>
#include <new>
#include <string>
#include <thread>

#include <sys/random.h>

#include <rte_cycles.h>
#include <rte_lcore.h>
#include <rte_malloc.h>

#include <spdlog/spdlog.h>

#include "dpdk/startup_error.hpp"
#include "packet/syn_proxy.hpp"
#include "pipeline/forward_stage.hpp"
#include "pipeline/sync_steps.hpp"
#include "sync/sync_event.hpp"

namespace sluice {

constexpr auto kStopReportEvery = std::chrono::seconds(1);

// A balanced connection ended (expired or removed) on its worker: its NAT port goes back to the pool and its
// backend has one connection less.
void release_connection(void* arg, const ConnEntry& entry) {
    auto& ctx = *static_cast<LcoreContext*>(arg);
    if (entry.nat_port != 0) ctx.nat_ports->release(entry.nat_address, entry.backend - 1, entry.nat_port);
    if (entry.backend != 0 && entry.backend <= kMaxBackends)
        counter_add(ctx.backend_traffic[entry.backend - 1].closed_connections);
}

Dataplane::Dataplane(const DataplaneSpec& spec, std::unique_ptr<Snapshot> initial) {
    try {
        build(spec, initial);
    } catch (...) {
        release();  // unwind what was built: a failed start leaks nothing
        throw;
    }
}

void Dataplane::build(const DataplaneSpec& spec, std::unique_ptr<Snapshot>& initial) {
    const auto worker_count = std::count_if(spec.lcores.begin(), spec.lcores.end(), [](auto& l) { return l.worker; });
    const auto rx_count = std::count_if(spec.lcores.begin(), spec.lcores.end(), [](auto& l) { return l.rx; });
    if (worker_count == 0 || static_cast<std::size_t>(worker_count) > kMaxWorkers)
        throw StartupError("between 1 and " + std::to_string(kMaxWorkers) + " worker lcores are needed");

    shared_ = static_cast<SharedState*>(rte_zmalloc("sluice_shared", sizeof(SharedState), kCacheLine));
    if (!shared_) throw StartupError("out of memory for the shared state");
    new (shared_) SharedState{};
    shared_->snapshot.store(initial.release(), std::memory_order_release);
    const auto lcore_count = static_cast<uint32_t>(spec.lcores.size());
    const std::size_t qsbr_size = rte_rcu_qsbr_get_memsize(lcore_count);
    shared_->qsbr = static_cast<rte_rcu_qsbr*>(rte_zmalloc("sluice_qsbr", qsbr_size, RTE_CACHE_LINE_SIZE));
    if (!shared_->qsbr || rte_rcu_qsbr_init(shared_->qsbr, lcore_count) != 0)
        throw StartupError("cannot set up RCU (QSBR) for the snapshot");

    // ARP/ND: every worker reports senders to the control thread; the control thread asks worker 0 to solicit.
    neighbour_events_ =
        rte_ring_create_elem("sluice_nd_events", sizeof(NeighbourEvent), 1024, SOCKET_ID_ANY, RING_F_SC_DEQ);
    neighbour_requests_ = rte_ring_create_elem("sluice_nd_requests", sizeof(NeighbourRequest), 256, SOCKET_ID_ANY,
                                               RING_F_SP_ENQ | RING_F_SC_DEQ);
    if (!neighbour_events_ || !neighbour_requests_) throw StartupError("cannot create the neighbour rings");
    decision_log_ =
        rte_ring_create_elem("sluice_decision_log", sizeof(DecisionLogRecord), 1024, SOCKET_ID_ANY, RING_F_SC_DEQ);
    if (!decision_log_) throw StartupError("cannot create the decision log ring");

    // Several RX lcores may feed one ring; only its worker takes from it.
    const unsigned ring_flags = RING_F_SC_DEQ | (rx_count <= 1 ? RING_F_SP_ENQ : 0);
    for (const LcorePlan& plan : spec.lcores) {
        if (!plan.worker) continue;
        const std::string name = "sluice_w" + std::to_string(rings_.size());
        rte_ring* ring = rte_ring_create(name.c_str(), spec.ring_size,
                                         static_cast<int>(rte_lcore_to_socket_id(plan.lcore_id)), ring_flags);
        if (!ring) throw StartupError("cannot create ring " + name + ": " + rte_strerror(rte_errno));
        rings_.push_back(ring);
    }

    // One SYN cookie key for the process: a reload keeps it (cookies in flight stay valid), a restart makes a new
    // one (the handshakes in flight are retried by their clients).
    SipHashKey syn_cookie_key;
    if (getrandom(&syn_cookie_key, sizeof syn_cookie_key, 0) != sizeof syn_cookie_key)
        throw StartupError("cannot read random bytes for the SYN cookie key");

    uint16_t next_worker = 0;
    for (const LcorePlan& plan : spec.lcores) {
        const int socket = static_cast<int>(rte_lcore_to_socket_id(plan.lcore_id));
        auto* ctx =
            static_cast<LcoreContext*>(rte_zmalloc_socket("sluice_lcore", sizeof(LcoreContext), kCacheLine, socket));
        if (!ctx) throw StartupError("out of memory for lcore " + std::to_string(plan.lcore_id) + "'s context");
        new (ctx) LcoreContext{};
        contexts_.push_back(ctx);
        ctx->lcore_id = plan.lcore_id;
        ctx->rx = plan.rx;
        ctx->worker = plan.worker;
        ctx->worker_count = static_cast<uint16_t>(rings_.size());
        ctx->hash_flows = rings_.size() > 1 || spec.conntrack;
        ctx->idle_sleep_us = spec.idle_sleep_us;
        ctx->shared = shared_;
        ctx->qsbr_thread_id = static_cast<unsigned>(contexts_.size() - 1);
        rte_rcu_qsbr_thread_register(shared_->qsbr, ctx->qsbr_thread_id);
        std::copy(rings_.begin(), rings_.end(), ctx->worker_rings.begin());
        if (plan.rx_queues.size() > kMaxRxQueuesPerLcore)
            throw StartupError("lcore " + std::to_string(plan.lcore_id) + " polls more than " +
                               std::to_string(kMaxRxQueuesPerLcore) + " RX queues");
        ctx->rx_queue_count = static_cast<uint16_t>(plan.rx_queues.size());
        std::copy(plan.rx_queues.begin(), plan.rx_queues.end(), ctx->rx_queues.begin());
        if (plan.rx && spec.conntrack) {
            try {
                // Named by the lcore's place in the plan: in-process tests run every lcore on one lcore id.
                ctx->fragments =
                    new FragmentTracker("sluice_frag" + std::to_string(ctx->qsbr_thread_id), socket, rte_get_tsc_hz());
            } catch (const std::exception& e) {
                throw StartupError(std::string("lcore ") + std::to_string(plan.lcore_id) + ": " + e.what());
            }
        }
        if (!plan.worker) continue;
        set_up_worker(*ctx, spec, next_worker++, syn_cookie_key, socket);
    }
}

// What a worker lcore has besides an RX lcore's: its index and TX queue, the SYN cookie key and walk pacing, the
// rings to the control thread, its connection table, and a TX buffer per port.
void Dataplane::set_up_worker(LcoreContext& ctx, const DataplaneSpec& spec, uint16_t worker,
                              const SipHashKey& syn_cookie_key, int socket) {
    ctx.worker_index = worker;
    ctx.syn_cookie_key = syn_cookie_key;
    ctx.syn_cookie_period_tsc = rte_get_tsc_hz() * kSynCookiePeriodSeconds;
    ctx.walk_slice_tsc = rte_get_tsc_hz() / 1'000'000 * kWalkSliceUs;
    ctx.walk_busy_interval_tsc = rte_get_tsc_hz() / 1'000'000 * kWalkBusyIntervalUs;
    ctx.tx_queue = worker;  // one TX queue per worker on every port: no TX locks
    ctx.neighbour_events = neighbour_events_;
    ctx.decision_log = decision_log_;
    if (worker == 0) {
        ctx.neighbour_requests = neighbour_requests_;
        ctx.pool = spec.solicitation_pool;
    }
    if (spec.conntrack) set_up_conntrack(ctx, spec, worker, socket);
    for (uint16_t port : spec.tx_port_ids) {
        auto* buffer = static_cast<rte_eth_dev_tx_buffer*>(
            rte_zmalloc_socket("sluice_txbuf", RTE_ETH_TX_BUFFER_SIZE(kBurst), kCacheLine, socket));
        if (!buffer) throw StartupError("out of memory for TX buffers");
        rte_eth_tx_buffer_init(buffer, kBurst);
        ctx.tx_drop_sinks[port] = TxDropSink{&ctx.counters, port};
        rte_eth_tx_buffer_set_err_callback(buffer, count_tx_drops, &ctx.tx_drop_sinks[port]);
        ctx.tx_buffers[port] = buffer;
        ctx.tx_ports[ctx.tx_port_count++] = port;
    }
}

// A worker's connection table, its rule and backend counters, its NAT ports and, with sync, its event rings.
void Dataplane::set_up_conntrack(LcoreContext& ctx, const DataplaneSpec& spec, uint16_t worker, int socket) {
    try {
        ctx.conn_table = new ConnTable("sluice_ct" + std::to_string(worker), spec.conn_table_size, socket,
                                       spec.conn_timeouts, rte_get_tsc_hz(), spec.conn_table_ipv6_size);
        ctx.rule_traffic = static_cast<RuleTraffic*>(
            rte_zmalloc_socket("sluice_rule_traffic", sizeof(RuleTraffic) * kMaxCountedRules, kCacheLine, socket));
        if (!ctx.rule_traffic) throw std::runtime_error("out of memory for rule counters");
        ctx.backend_traffic = static_cast<BackendTraffic*>(
            rte_zmalloc_socket("sluice_backend_traffic", sizeof(BackendTraffic) * kMaxBackends, kCacheLine, socket));
        if (!ctx.backend_traffic) throw std::runtime_error("out of memory for backend counters");
        ctx.nat_ports =
            new NatPortPool(spec.nat_port_first, spec.nat_port_last, worker, static_cast<uint16_t>(rings_.size()),
                            spec.nat_pool_addresses, spec.nat_share_index, spec.nat_shares);
        ctx.nat_ports->prepare(shared_->snapshot.load(std::memory_order_relaxed)->lb->nat_destinations());
        ctx.conn_table->set_release_hook(release_connection, &ctx);
        if (spec.sync_ring_size) set_up_sync(ctx, spec, socket);
    } catch (const std::exception& e) {
        throw StartupError(std::string("connection table of worker ") + std::to_string(worker) + ": " + e.what());
    }
}

void Dataplane::set_up_sync(LcoreContext& ctx, const DataplaneSpec& spec, int socket) {
    const std::string index = std::to_string(ctx.worker_index);
    rte_ring* out = rte_ring_create_elem(("sluice_sync_out" + index).c_str(), sizeof(SyncEvent), spec.sync_ring_size,
                                         socket, RING_F_SP_ENQ | RING_F_SC_DEQ);
    if (out) sync_out_rings_.push_back(out);
    rte_ring* in = rte_ring_create_elem(("sluice_sync_in" + index).c_str(), sizeof(SyncEvent), spec.sync_ring_size,
                                        socket, RING_F_SP_ENQ | RING_F_SC_DEQ);
    if (in) sync_in_rings_.push_back(in);
    if (!out || !in) throw std::runtime_error(std::string("cannot create its sync rings: ") + rte_strerror(rte_errno));
    ctx.sync_out = out;
    ctx.sync_in = in;
    ctx.conn_table->set_expiry_hook(emit_expired, &ctx);
    ctx.tsc_hz = rte_get_tsc_hz();
    for (std::size_t s = 0; s < ctx.sync_refresh_s.size(); ++s) {
        const double seconds =
            timeout_seconds(spec.conn_timeouts, static_cast<ConnState>(s)) * spec.sync_refresh_fraction;
        ctx.sync_refresh_s[s] = static_cast<uint16_t>(std::clamp(seconds, 1.0, 32767.0));
    }
}

Dataplane::~Dataplane() {
    stop();
    release();
}

void Dataplane::release() {
    for (LcoreContext* ctx : contexts_) {
        for (uint16_t i = 0; i < ctx->tx_port_count; ++i) rte_free(ctx->tx_buffers[ctx->tx_ports[i]]);
        delete ctx->conn_table;
        delete ctx->nat_ports;
        delete ctx->fragments;
        rte_free(ctx->rule_traffic);
        rte_free(ctx->backend_traffic);
        ctx->~LcoreContext();
        rte_free(ctx);
    }
    contexts_.clear();
    for (rte_ring* ring : sync_out_rings_) rte_ring_free(ring);
    for (rte_ring* ring : sync_in_rings_) rte_ring_free(ring);
    sync_out_rings_.clear();
    sync_in_rings_.clear();
    for (rte_ring* ring : rings_) rte_ring_free(ring);
    rings_.clear();
    rte_ring_free(neighbour_events_);
    rte_ring_free(neighbour_requests_);
    rte_ring_free(decision_log_);
    neighbour_events_ = neighbour_requests_ = decision_log_ = nullptr;
    if (shared_) {
        delete shared_->snapshot.load();
        rte_free(shared_->qsbr);
        shared_->~SharedState();
        rte_free(shared_);
        shared_ = nullptr;
    }
}

void Dataplane::launch() {
    for (LcoreContext* ctx : contexts_) {
        const int ret = rte_eal_remote_launch(lcore_main, ctx, ctx->lcore_id);
        if (ret != 0) {
            stop();
            throw StartupError("cannot launch lcore " + std::to_string(ctx->lcore_id) + ": " + rte_strerror(-ret));
        }
        launched_ = true;
    }
}

uint32_t Dataplane::run_inline(uint64_t now_tsc) {
    if (launched_) throw std::logic_error("Dataplane::run_inline on a launched data plane");
    uint32_t moved = 0;
    for (LcoreContext* ctx : contexts_) moved += run_lcore_once(*ctx, snapshot(), now_tsc);
    return moved;
}

void Dataplane::stop() {
    if (stopped_ || !launched_) return;
    stopped_ = true;
    const auto started = std::chrono::steady_clock::now();
    auto next_report = started + kStopReportEvery;
    // A stop that takes long says whom it waits for, and whether that lcore still loops (its poll counter moves).
    const auto waiting_for = [&](const LcoreContext& ctx, const char* stage) {
        const auto now = std::chrono::steady_clock::now();
        if (now < next_report) {
            std::this_thread::yield();
            return;
        }
        next_report = now + kStopReportEvery;
        spdlog::warn("stopping for {:.1f} s: waiting for lcore {} to {} (its poll counter is at {})",
                     std::chrono::duration<double>(now - started).count(), ctx.lcore_id, stage,
                     counter_read(ctx.counters.polls));
    };
    shared_->phase.store(Phase::rx_stopping, std::memory_order_release);
    for (LcoreContext* ctx : contexts_) {
        if (!ctx->rx || rte_eal_get_lcore_state(ctx->lcore_id) != RUNNING) continue;
        while (!ctx->rx_quiesced.load(std::memory_order_acquire)) waiting_for(*ctx, "stop receiving");
    }
    shared_->phase.store(Phase::draining, std::memory_order_release);
    for (LcoreContext* ctx : contexts_) {
        while (rte_eal_get_lcore_state(ctx->lcore_id) == RUNNING)
            waiting_for(*ctx, ctx->worker ? "empty its ring and flush TX" : "return");
    }
    rte_eal_mp_wait_lcore();
    // Anything still in a ring (a worker that never ran) is freed and counted, so no mbuf is lost.
    for (rte_ring* ring : rings_) {
        void* m;
        while (rte_ring_dequeue(ring, &m) == 0) {
            rte_pktmbuf_free(static_cast<rte_mbuf*>(m));
            contexts_.front()->counters.drop(DropReason::shutdown);
        }
    }
    spdlog::info("data plane stopped in {:.3f} s (receiving stopped, rings emptied, TX flushed)",
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
}

std::unique_ptr<Snapshot> Dataplane::publish(std::unique_ptr<Snapshot> next) {
    // New nat backends get their port spaces before any worker can pick them (nat_ports.hpp).
    const std::vector<NatDestination> destinations = next->lb->nat_destinations();
    for (LcoreContext* ctx : contexts_)
        if (ctx->nat_ports) ctx->nat_ports->prepare(destinations);
    const Snapshot* previous = shared_->snapshot.exchange(next.release(), std::memory_order_acq_rel);
    // Offline lcores (not launched yet, or returned) do not hold the token back.
    const uint64_t token = rte_rcu_qsbr_start(shared_->qsbr);
    rte_rcu_qsbr_check(shared_->qsbr, token, true);
    return std::unique_ptr<Snapshot>(const_cast<Snapshot*>(previous));
}

CounterTotals Dataplane::totals() const {
    CounterTotals totals;
    for (const LcoreContext* ctx : contexts_) totals.add(ctx->counters);
    return totals;
}

uint64_t Dataplane::ring_slots() const {
    uint64_t slots = 0;
    for (const rte_ring* ring : rings_) slots += rte_ring_get_capacity(ring);
    return slots;
}

namespace {

// Up to max elements of type T from an rte_ring of elements (the workers -> control thread rings).
template <typename T>
std::vector<T> drain_ring(rte_ring* ring, std::size_t max) {
    std::vector<T> out(max);
    out.resize(rte_ring_dequeue_burst_elem(ring, out.data(), sizeof(T), static_cast<unsigned>(max), nullptr));
    return out;
}

}  // namespace

std::vector<NeighbourEvent> Dataplane::take_neighbour_events(std::size_t max) {
    return drain_ring<NeighbourEvent>(neighbour_events_, max);
}

std::vector<std::unique_ptr<FlowWalk>> Dataplane::walk_flows(const FlowFilter& filter, std::size_t max_records,
                                                             const Snapshot* candidate,
                                                             std::chrono::milliseconds timeout, bool sync_dump) {
    std::vector<std::unique_ptr<FlowWalk>> walks;
    std::vector<LcoreContext*> workers;
    for (LcoreContext* ctx : contexts_) {
        if (!ctx->worker || !ctx->conn_table) continue;
        auto walk = std::make_unique<FlowWalk>();
        walk->filter = filter;
        walk->max_records = max_records;
        walk->records.reserve(max_records);
        walk->candidate = candidate;
        walk->sync_dump = sync_dump;
        ctx->walk.store(walk.get(), std::memory_order_release);
        walks.push_back(std::move(walk));
        workers.push_back(ctx);
    }
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    bool finished = true;
    for (std::size_t i = 0; i < walks.size(); ++i) {
        while (!walks[i]->done.load(std::memory_order_acquire)) {
            if (std::chrono::steady_clock::now() > deadline || stopped_) {
                finished = false;
                break;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        if (!finished) break;
    }
    for (LcoreContext* ctx : workers) ctx->walk.store(nullptr, std::memory_order_release);
    // A worker may still hold the pointer it loaded (inside its slice, or reading `done` after the walk ended):
    // the walks are freed, here or by the caller, only after a grace period (QSBR).
    const uint64_t token = rte_rcu_qsbr_start(shared_->qsbr);
    rte_rcu_qsbr_check(shared_->qsbr, token, true);
    if (!finished) return {};
    return walks;
}

std::vector<DecisionLogRecord> Dataplane::take_decision_log(std::size_t max) {
    return drain_ring<DecisionLogRecord>(decision_log_, max);
}

bool Dataplane::request_solicitation(const NeighbourRequest& request) {
    NeighbourRequest copy = request;  // the prototype takes a non-const pointer
    return rte_ring_enqueue_elem(neighbour_requests_, &copy, sizeof copy) == 0;
}

uint64_t Dataplane::ring_backlog() const {
    uint64_t backlog = 0;
    for (const rte_ring* ring : rings_) backlog += rte_ring_count(ring);
    return backlog;
}

}  // namespace sluice

// Section lb: the load balancer. The worker's whole stateful path, stateful_burst then forward_burst with the
// routes the first hands the second, for the services of add_services (nat, dsr, tunnel), each beside the same path
// for connections of no service: new connections (and their removal, expiry's share), and packets of established
// connections.
#include <cinttypes>
#include <cstdio>
#include <map>
#include <memory>

#include <rte_cycles.h>
#include <rte_lcore.h>
#include <rte_ring.h>

#include "nat/nat_ports.hpp"
#include "sections.hpp"
#include "services.hpp"
#include "sync/sync_event.hpp"
#include "traffic.hpp"

namespace sluice::bench {
namespace {

// Removes the stream's connections (with their NAT aliases, ports and backend counts, through the release hook),
// the work expiry does for each connection that ends: ConnTable::remove is timed per group of 32 connections
// (finding them is not), preempted groups left out as in timed_pass. Cycles per connection.
double timed_removal(Dpdk& d, ConnTable& table, const std::vector<PacketSpec>& stream) {
    const std::vector<int32_t> positions = positions_of(table, stream);
    std::vector<std::pair<uint64_t, uint32_t>> groups;  // cycles, connections
    groups.reserve(positions.size() / kBurst + 1);
    for (std::size_t off = 0; off < positions.size(); off += kBurst) {
        const std::size_t end = std::min(positions.size(), off + kBurst);
        uint32_t removed = 0;
        const uint64_t t0 = rte_rdtsc_precise();
        for (std::size_t i = off; i < end; ++i)
            if (positions[i] >= 0) table.remove(positions[i]), ++removed;
        const uint64_t t1 = rte_rdtsc_precise();
        groups.emplace_back(timed_cycles(d, t0, t1), removed);
    }
    return cycles_per_item(d, groups);
}

std::string port_pool_state(const NatPortPool& ports, const LbTables& lb) {
    std::size_t lowest = ports.capacity();
    for (std::size_t a = 0; a < lb.nat_pool.size(); ++a)
        for (uint32_t id = 0; id < lb.backends.size(); ++id) lowest = std::min(lowest, ports.free_ports(a, id));
    return lowest == ports.capacity() ? std::string()
                                      : "a backend's port space has " + std::to_string(lowest) + " of " +
                                            std::to_string(ports.capacity()) + " ports free";
}

// The rows of lb_new: r holds the passes' cycles per connection (no service, nat, nat with the firewall off, no
// service with services configured, nat with state sync's event emitted), removal the removals' cycles per
// connection of the same passes.
void add_lb_new_rows(const Dpdk& d, Table& table, const std::vector<std::vector<double>>& r,
                     const std::vector<std::vector<double>>& removal) {
    const Stat target = constant_stat(kTargetNewConnsPerSecond / 1e6);
    const Stat ref = stat_of(r[0]), nat = stat_of(r[1]), nat_open = stat_of(r[2]), other = stat_of(r[3]);
    // Opening and, later, removing (expiry) each connection: what a worker pays per connection at a steady rate.
    std::vector<double> ref_cycle, nat_cycle;
    for (std::size_t k = 0; k < r[0].size(); ++k) {
        ref_cycle.push_back(r[0][k] + removal[0][k]);
        nat_cycle.push_back(r[1][k] + removal[1][k]);
    }
    const Stat nat_sustained = stat_of(nat_cycle);
    table.add(Row{.id = "lb-new-nat",
                  .measurement = "new conns, nat service, 1k rules: firewall + forward",
                  .unit = "cycles/conn",
                  .reference = "the same, no service (firewall only)",
                  .ref = ref,
                  .sluice = nat});
    table.add(
        Row{.id = "lb-new-nat-rate",
            .measurement = "new conns, nat service, 1k rules: firewall + forward; " + fmt(nat.median) + " cycles/conn",
            .unit = "M conn/s",
            .reference = "the target per worker",
            .ref = target,
            .sluice = millions_per_second(d, nat)});
    table.add(Row{.id = "lb-new-nat-nofw-rate",
                  .measurement = "new conns, nat service, firewall off: firewall + forward; " + fmt(nat_open.median) +
                                 " cycles/conn",
                  .unit = "M conn/s",
                  .reference = "the target per worker",
                  .ref = target,
                  .sluice = millions_per_second(d, nat_open)});
    table.add(Row{.id = "lb-remove-nat",
                  .measurement = "removing a nat conn (expiry's ConnTable::remove)",
                  .unit = "cycles/conn",
                  .reference = "the same, conn of no service",
                  .ref = stat_of(removal[0]),
                  .sluice = stat_of(removal[1])});
    table.add(Row{.id = "lb-new-nat-sustained",
                  .measurement = "new + removed conns, nat service, 1k rules",
                  .unit = "cycles/conn",
                  .reference = "the same, no service (firewall only)",
                  .ref = stat_of(ref_cycle),
                  .sluice = nat_sustained});
    table.add(
        Row{.id = "lb-new-nat-sustained-rate",
            .measurement = "new + removed conns, nat service, 1k rules; " + fmt(nat_sustained.median) + " cycles/conn",
            .unit = "M conn/s",
            .reference = "the target per worker",
            .ref = target,
            .sluice = millions_per_second(d, nat_sustained)});
    table.add(Row{.id = "lb-new-nat-sync",
                  .measurement = "new conns, nat service, 1k rules, with sync (an opened event per conn into the ring)",
                  .unit = "cycles/conn",
                  .reference = "the same without sync (target: under +10%)",
                  .ref = nat,
                  .sluice = stat_of(r[4])});
    table.add(Row{.id = "lb-new-other",
                  .measurement = "new conns to no service, services configured, 1k rules",
                  .unit = "cycles/conn",
                  .reference = "the same, no services configured",
                  .ref = ref,
                  .sluice = other});
}

// New connections: SYNs from distinct clients through the worker's path. nat service: miss, pool-address check,
// VIP lookup, classify (1k rules, all allow), Maglev pick, insert, NAT port, alias insert, then the NAT rewrite.
// Reference: the same SYNs to a destination that is no service, on a snapshot with the same rules and no
// services (the firewall-only path). Every pass opens its connections into the same 1M table (every slot touched
// once beforehand), then removes them again, timed apart (expiry's share of a connection's cost), which returns
// the NAT ports. The table ends a nat pass half full (two entries per connection), a plain one a quarter full.
void lb_new(Dpdk& d, const Options& o, Table& table, const Snapshot& plain, const Snapshot& balanced,
            const Snapshot& balanced_open, NatPortPool& ports) {
    constexpr uint32_t kCapacity = 1'000'000;
    // A nat connection takes two entries (its alias), and a port: keep below the table and the pool.
    const uint32_t n = std::min<uint32_t>(o.new_conns, 450'000);
    if (n != o.new_conns) std::printf("lb: new connections: %u per pass (a nat connection takes two entries)\n", n);
    Rng rng(o.seed + 10);
    const std::vector<FiveTuple> clients = lb_clients(n, rng);
    const std::vector<PacketSpec> to_vip = packets_to(clients, kVipNat, kTcpSyn);
    const std::vector<PacketSpec> to_other = packets_to(clients, kNotAVip, kTcpSyn);
    ConnTable conn_table(table_name(), kCapacity, static_cast<int>(rte_socket_id()), ConnTimeouts{}, d.tsc_hz);
    touch_all_slots(conn_table);
    attach_conn_table(d, conn_table);
    LcoreContext& ctx = *d.ctx;

    uint32_t short_passes = 0;
    std::string leftovers;
    std::vector<std::vector<double>> removal(5);  // per variant, cycles per removed connection (warm-up first)
    // State sync's event ring (sync_steps.hpp), emptied after every burst as the sync thread keeps it drained: its
    // lines stay in the cache, as a drained ring's do.
    constexpr unsigned kSyncRing = 1024;
    rte_ring* sync_events = rte_ring_create_elem(unique_name("bench_sync").c_str(), sizeof(SyncEvent), kSyncRing,
                                                 static_cast<int>(rte_socket_id()), RING_F_SP_ENQ | RING_F_SC_DEQ);
    if (!sync_events) fail("cannot create the sync event ring");
    ctx.tsc_hz = d.tsc_hz;
    const auto pass = [&](std::size_t variant, const std::vector<PacketSpec>& stream, const Snapshot& snapshot,
                          uint32_t entries_per_conn, rte_ring* drained = nullptr) {
        Stage stage = worker_path(ctx, snapshot);
        if (drained)
            stage = [inner = std::move(stage), drained](rte_mbuf** pkts, uint16_t count) {
                const uint16_t kept = inner(pkts, count);
                rte_ring_reset(drained);
                return kept;
            };
        const double cycles = timed_pass(d, stream, stage);  // per SYN: each opens one
        if (conn_table.size() != stream.size() * entries_per_conn) ++short_passes;
        removal[variant].push_back(timed_removal(d, conn_table, stream));
        if (conn_table.size() != 0 && leftovers.empty())
            leftovers = std::to_string(conn_table.size()) + " entries left after removing a pass's connections";
        if (const std::string p = port_pool_state(ports, *balanced.lb); !p.empty() && leftovers.empty()) leftovers = p;
        return cycles;
    };
    const auto drops_before = drops_of(d);
    auto r = interleaved(
        o.reps, {[&] { return pass(0, to_other, plain, 1); }, [&] { return pass(1, to_vip, balanced, 2); },
                 [&] { return pass(2, to_vip, balanced_open, 2); }, [&] { return pass(3, to_other, balanced, 1); },
                 [&] {
                     const uint64_t queued = ctx.counters.sync_events_queued;
                     ctx.sync_out = sync_events;
                     const double cycles = pass(4, to_vip, balanced, 2, sync_events);
                     ctx.sync_out = nullptr;
                     if (ctx.counters.sync_events_queued - queued != to_vip.size()) ++short_passes;
                     return cycles;
                 }});
    for (auto& v : removal) v.erase(v.begin());  // interleaved's warm-up pass
    const std::string drops = drops_since(d, drops_before);
    uint64_t opened = 0, closed = 0;
    for (uint32_t b = 0; b < kMaxBackends; ++b) {
        opened += ctx.backend_traffic[b].new_connections;
        closed += ctx.backend_traffic[b].closed_connections;
    }
    if (short_passes || !drops.empty() || !leftovers.empty() || opened != closed)
        std::printf("WARNING: lb new connections: %u passes opened fewer connections than SYNs sent; drops {%s}; %s; "
                    "backends counted %" PRIu64 " opened, %" PRIu64 " closed\n",
                    short_passes, drops.c_str(), leftovers.empty() ? "table and pool emptied" : leftovers.c_str(),
                    opened, closed);
    ctx.conn_table = nullptr;
    rte_ring_free(sync_events);
    check_pool(d, "lb new connections");

    add_lb_new_rows(d, table, r, removal);
}

// Packets of established connections, uniformly random over live connections per table: nat (client -> VIP,
// rewritten to the backend; and backend -> pool address, rewritten back to the client), dsr and tunnel (client
// -> VIP; their replies do not come back through sluice). Reference: established connections of no service on the
// firewall-only snapshot, half of the packets replies, as in section established. Every connection is opened
// through the worker's path itself (SYN, SYN+ACK where the reply passes sluice, ACK), untimed.
void lb_established(Dpdk& d, const Options& o, Table& table, const Snapshot& plain, const Snapshot& balanced) {
    const uint32_t live = o.lb_conns;
    const int socket = static_cast<int>(rte_socket_id());
    LcoreContext& ctx = *d.ctx;
    Rng rng(o.seed + 11);
    const std::vector<FiveTuple> clients = lb_clients(live, rng);

    struct Kind {
        const char* name;
        uint32_t dst;  // host order
        const Snapshot* snapshot;
        bool replies;  // the SYN+ACK comes back through sluice
        uint32_t entries_per_conn;
        std::unique_ptr<ConnTable> conns;
        std::vector<PacketSpec> forward, reply;  // one packet (ACK) per connection, each direction
    };
    Kind kinds[] = {{"plain", kNotAVip, &plain, true, 1, nullptr, {}, {}},
                    {"nat", kVipNat, &balanced, true, 2, nullptr, {}, {}},
                    {"dsr", kVipDsr, &balanced, false, 1, nullptr, {}, {}},
                    {"tunnel", kVipTunnel, &balanced, false, 1, nullptr, {}, {}}};
    const uint64_t t0 = rte_rdtsc();
    for (Kind& k : kinds) {
        k.conns =
            std::make_unique<ConnTable>(table_name(), live * k.entries_per_conn, socket, ConnTimeouts{}, d.tsc_hz);
        attach_conn_table(d, *k.conns);
        OpenedConns opened = open_connections(d, ctx, *k.snapshot, clients, k.dst, k.replies);
        k.forward = std::move(opened.forward);
        k.reply = std::move(opened.reply);
        uint32_t established = 0;
        std::map<uint32_t, uint32_t> per_backend;
        for (const int32_t position : positions_of(*k.conns, k.forward)) {
            if (position < 0) continue;
            const ConnEntry& e = k.conns->entry(position);
            established += e.state == ConnState::tcp_established;
            if (e.backend) ++per_backend[e.backend - 1];
        }
        std::string shares;
        if (!per_backend.empty()) {
            uint32_t lo = UINT32_MAX, hi = 0;
            for (const auto& [b, c] : per_backend) lo = std::min(lo, c), hi = std::max(hi, c);
            shares = ", " + std::to_string(per_backend.size()) + " backends with " + std::to_string(lo) + ".." +
                     std::to_string(hi) + " connections each";
        }
        std::printf("lb: %s: %u of %u connections established, %u table entries%s\n", k.name, established, live,
                    k.conns->size(), shares.c_str());
        if (established != live || k.conns->size() != live * k.entries_per_conn)
            std::printf("WARNING: lb %s: connections failed to open (drops so far {%s})\n", k.name,
                        drops_since(d, DropCounts{}).c_str());
    }
    std::printf("lb: %u connections per kind opened through the worker path in %.1f s\n", live, seconds_since(d, t0));

    // The measured streams: random connections, one packet each.
    const auto stream_of = [&](const Kind& k, uint32_t reply_percent) {
        std::vector<PacketSpec> s(o.packets);
        for (PacketSpec& p : s) {
            const uint32_t i = uniform(rng, 0, live - 1);
            p = uniform(rng, 0, 99) < reply_percent ? k.reply[i] : k.forward[i];
        }
        return s;
    };
    const std::vector<PacketSpec> plain_mixed = stream_of(kinds[0], 50), nat_forward = stream_of(kinds[1], 0),
                                  nat_reply = stream_of(kinds[1], 100), dsr = stream_of(kinds[2], 0),
                                  tunnel = stream_of(kinds[3], 0);
    const auto variant = [&](Kind& k, const std::vector<PacketSpec>& stream) {
        return [&] {
            ctx.conn_table = k.conns.get();
            return timed_pass(d, stream, worker_path(ctx, *k.snapshot));
        };
    };
    const auto drops_before = drops_of(d);
    const uint64_t inserts_before = ctx.counters.conn_inserts;
    auto r = interleaved(o.reps, {variant(kinds[0], plain_mixed), variant(kinds[1], nat_forward),
                                  variant(kinds[1], nat_reply), variant(kinds[2], dsr), variant(kinds[3], tunnel)});
    const std::string drops = drops_since(d, drops_before);
    bool sizes_changed = false;
    for (const Kind& k : kinds) sizes_changed |= k.conns->size() != live * k.entries_per_conn;
    if (!drops.empty() || ctx.counters.conn_inserts != inserts_before || sizes_changed)
        std::printf("WARNING: lb established: packets of tracked connections were dropped or opened new ones: "
                    "drops {%s}, inserts %" PRIu64 "%s\n",
                    drops.c_str(), ctx.counters.conn_inserts - inserts_before,
                    sizes_changed ? ", table sizes changed" : "");
    const std::string count = ordinal_count(live);
    const std::string reference = "the same, " + count + " conns of no service, half replies";
    const std::pair<const char*, const char*> rows[] = {{"nat", "nat conns, client -> VIP, NAT to backend"},
                                                        {"nat-reply", "nat conns, backend -> pool, NAT to client"},
                                                        {"dsr", "dsr conns, client -> VIP, MAC rewrite"},
                                                        {"tunnel", "tunnel conns, client -> VIP, IPIP encap"}};
    for (std::size_t k = 0; k < std::size(rows); ++k)
        table.add(Row{.id = "lb-established-" + std::string(rows[k].first) + "-" + count,
                      .measurement = "established, " + count + " " + rows[k].second + ": firewall + forward",
                      .unit = "cycles/pkt",
                      .reference = reference,
                      .ref = stat_of(r[0]),
                      .sluice = stat_of(r[k + 1])});
    ctx.conn_table = nullptr;
    check_pool(d, "lb established");
}

}  // namespace

void section_lb(Dpdk& d, const Options& o, Table& table) {
    const auto rules = generate_rules(1000, o.seed);
    const uint64_t t0 = rte_rdtsc();
    const auto plain = make_snapshot(d, rules);                    // the firewall alone: the reference
    const auto balanced = make_snapshot(d, rules, true);           // the same rules and three services
    const auto balanced_open = make_snapshot(d, {}, true, false);  // the services, firewall off
    std::printf("lb: snapshots (1k rules; %zu services of %u backends, Maglev %u) built in %.2f s\n",
                balanced->lb->services.size(), kLbBackends, kLbMaglevSize, seconds_since(d, t0));
    // The worker's NAT ports, as the Dataplane gives worker 0 of 1 (config/sluice.yaml's nat_ports: 1024-65535).
    NatPortPool ports(1024, 65535, 0, 1, balanced->lb->nat_pool.size());
    ports.prepare(balanced->lb->nat_destinations());
    ports.prepare(balanced_open->lb->nat_destinations());
    d.ctx->nat_ports = &ports;
    lb_new(d, o, table, *plain, *balanced, *balanced_open, ports);
    lb_established(d, o, table, *plain, *balanced);
    d.ctx->nat_ports = nullptr;
}

}  // namespace sluice::bench

// Flows, packet streams and connections for the sections, and the worker's stateful path.
#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <unordered_set>

#include <rte_cycles.h>

#include "dpdk/mempool.hpp"
#include "pipeline/forward_stage.hpp"
#include "pipeline/stateful_stage.hpp"
#include "services.hpp"
#include "traffic.hpp"

namespace sluice::bench {

FiveTuple connection_key(const FiveTuple& f) {
    FiveTuple key;
    bool low;
    canonical_key(f, key, low);
    return key;
}

std::vector<FiveTuple> distinct_flows(std::size_t count, Rng& rng, uint32_t tcp_percent) {
    std::vector<FiveTuple> flows;
    flows.reserve(count);
    std::unordered_set<FiveTuple, TupleHash> seen;
    seen.reserve(count * 2);
    while (flows.size() < count) {
        TraceTuple t;
        t.src = static_cast<uint32_t>(rng());
        t.dst = static_cast<uint32_t>(rng());
        t.sport = static_cast<uint16_t>(uniform(rng, 1024, 65535));
        t.dport = static_cast<uint16_t>(uniform(rng, 1, 65535));
        t.proto = uniform(rng, 0, 99) < tcp_percent ? IPPROTO_TCP : IPPROTO_UDP;
        FiveTuple f = to_tuple(t);
        if (seen.insert(connection_key(f)).second) flows.push_back(f);
    }
    return flows;
}

uint32_t insert_established(ConnTable& table, const std::vector<FiveTuple>& flows) {
    const uint64_t now = rte_rdtsc();
    uint32_t refused = 0;
    for (const FiveTuple& f : flows) {
        const ConnState state = f.proto == IPPROTO_TCP ? ConnState::tcp_established : ConnState::udp_replied;
        refused += table.insert(f, symmetric_flow_hash(f), state, 0, now) < 0;
    }
    return refused;
}

uint32_t open_windows_by_handshake(ConnTable& table, const std::vector<FiveTuple>& flows) {
    uint32_t refused = 0;
    for (const FiveTuple& f : flows) {
        if (f.proto != IPPROTO_TCP) continue;
        const FiveTuple* tuple = &f;
        const uint32_t hash = symmetric_flow_hash(f);
        int32_t position = -1;
        table.lookup_bulk(&tuple, &hash, 1, &position);
        if (position < 0) {
            ++refused;
            continue;
        }
        TcpWindow& window = table.window(position);
        window = TcpWindow{};
        set_tcp_window_check(window, TcpWindowCheck::strict);
        const TcpSegmentFields syn{0, 0, 0, 65535, tcp::kSyn, -1};
        const TcpSegmentFields syn_ack{0, 1, 0, 65535, tcp::kSyn | tcp::kAck, -1};
        const TcpSegmentFields ack{1, 1, 0, 65535, tcp::kAck, -1};
        refused += tcp_window_check(window, false, syn, false) != WindowVerdict::pass ||
                   tcp_window_check(window, true, syn_ack, false) != WindowVerdict::pass ||
                   tcp_window_check(window, false, ack, true) != WindowVerdict::pass;
    }
    return refused;
}

std::vector<PacketSpec> random_packets(const std::vector<FiveTuple>& flows, uint32_t count, Rng& rng) {
    std::vector<PacketSpec> stream(count);
    for (PacketSpec& p : stream) {
        const FiveTuple& f = flows[uniform(rng, 0, static_cast<uint32_t>(flows.size() - 1))];
        p.tuple = uniform(rng, 0, 1) ? f.reversed() : f;
        p.tcp_flags = kTcpAck;
    }
    return stream;
}

void touch_all_slots(ConnTable& table) {
    std::vector<int32_t> positions;
    positions.reserve(table.capacity());
    FiveTuple t;
    t.dst = v4(0x7f000001);
    t.src_port = htons(1);
    t.dst_port = htons(2);
    t.proto = IPPROTO_UDP;
    t.family = IpFamily::ipv4;
    for (uint32_t i = 0; i < table.capacity(); ++i) {
        t.src = v4(0x7f000002 + i);  // 127/8 holds up to 16M of them
        const int32_t position = table.insert(t, symmetric_flow_hash(t), ConnState::udp_unreplied, UINT32_MAX, 0);
        if (position < 0) break;
        positions.push_back(position);
    }
    for (const int32_t position : positions) table.remove(position);
}

std::vector<FiveTuple> lb_clients(std::size_t count, Rng& rng) {
    std::vector<FiveTuple> clients;
    clients.reserve(count);
    std::unordered_set<uint64_t> seen;
    seen.reserve(count * 2);
    while (clients.size() < count) {
        const auto src = static_cast<uint32_t>(rng());
        if ((src >> 24) == 10 || (src >> 8) == 0xc00002) continue;
        const auto sport = static_cast<uint16_t>(uniform(rng, 1024, 65535));
        if (!seen.insert(uint64_t{src} << 16 | sport).second) continue;
        FiveTuple f;
        f.src = v4(src);
        f.src_port = htons(sport);
        f.dst_port = htons(kVipPort);
        f.proto = IPPROTO_TCP;
        f.family = IpFamily::ipv4;
        clients.push_back(f);
    }
    return clients;
}

std::vector<PacketSpec> packets_to(const std::vector<FiveTuple>& clients, uint32_t dst_host, uint8_t tcp_flags) {
    std::vector<PacketSpec> out(clients.size());
    for (std::size_t i = 0; i < clients.size(); ++i) {
        out[i].tuple = clients[i];
        out[i].tuple.dst = v4(dst_host);
        out[i].tcp_flags = tcp_flags;
    }
    return out;
}

std::vector<int32_t> positions_of(const ConnTable& table, const std::vector<PacketSpec>& stream) {
    std::vector<int32_t> out(stream.size());
    for (std::size_t off = 0; off < stream.size(); off += kBurst) {
        const auto n = static_cast<uint32_t>(std::min<std::size_t>(kBurst, stream.size() - off));
        const FiveTuple* tuples[kBurst];
        uint32_t hashes[kBurst];
        for (uint32_t i = 0; i < n; ++i) {
            tuples[i] = &stream[off + i].tuple;
            hashes[i] = symmetric_flow_hash(*tuples[i]);
        }
        table.lookup_bulk(tuples, hashes, n, &out[off]);
    }
    return out;
}

uint32_t remove_connections(ConnTable& table, const std::vector<PacketSpec>& stream) {
    uint32_t removed = 0;
    for (const int32_t position : positions_of(table, stream))
        if (position >= 0) table.remove(position), ++removed;
    return removed;
}

Stage worker_path(LcoreContext& ctx, const Snapshot& snapshot) {
    return [&ctx, &snapshot](rte_mbuf** pkts, uint16_t n) -> uint16_t {
        PacketRoute routes[kBurst];
        const uint16_t kept = stateful_burst(ctx, snapshot, pkts, n, rte_rdtsc(), routes);
        if (kept) forward_burst(ctx, snapshot, pkts, kept, routes);
        return 0;
    };
}

OpenedConns open_connections(Dpdk& d, LcoreContext& ctx, const Snapshot& snapshot,
                             const std::vector<FiveTuple>& clients, uint32_t dst, bool replies) {
    OpenedConns out;
    const Stage path = worker_path(ctx, snapshot);
    const std::vector<PacketSpec> syns = packets_to(clients, dst, kTcpSyn);
    untimed_pass(d, syns, path);
    out.forward = packets_to(clients, dst, kTcpAck);
    if (replies) {
        const std::vector<int32_t> positions = positions_of(*ctx.conn_table, syns);
        out.reply.resize(clients.size());
        for (std::size_t i = 0; i < clients.size(); ++i) {
            out.reply[i] = PacketSpec{syns[i].tuple.reversed(), kTcpSynAck};
            if (positions[i] < 0) continue;
            const ConnEntry& e = ctx.conn_table->entry(positions[i]);
            if (e.backend == 0 || e.nat_port == 0) continue;
            const LbBackend& backend = snapshot.lb->backends[e.backend - 1];
            FiveTuple& t = out.reply[i].tuple;
            t.src = backend.address;
            t.src_port = backend.port_be;
            t.dst = snapshot.lb->nat_pool.addresses[e.nat_address];
            t.dst_port = htons(e.nat_port);
        }
        untimed_pass(d, out.reply, path);
        for (PacketSpec& p : out.reply) p.tcp_flags = kTcpAck;
    }
    untimed_pass(d, out.forward, path);
    return out;
}

}  // namespace sluice::bench

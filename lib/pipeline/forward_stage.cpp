#include "pipeline/forward_stage.hpp"

#include <cassert>

#include <rte_cycles.h>
#include <rte_fib.h>
#include <rte_fib6.h>
#include <rte_hash.h>
#include <rte_ip.h>

#include "nat/nat_rewrite.hpp"
#include "packet/checksum.hpp"
#include "packet/encapsulate.hpp"
#include "packet/packet_meta.hpp"
#include "packet/reject.hpp"
#include "packet/syn_proxy.hpp"

namespace sluice {

namespace {

// Requests to resolve a host on a connected link (glean): at most one per worker this often.
constexpr uint64_t kGleanGapUs = 100;

// Whether the IP packet at l3 dies here: its TTL or hop limit would reach 0.
bool ttl_expires(const uint8_t* l3) {
    return (l3[0] >> 4) == 4 ? reinterpret_cast<const rte_ipv4_hdr*>(l3)->time_to_live <= 1
                             : reinterpret_cast<const rte_ipv6_hdr*>(l3)->hop_limits <= 1;
}

// A fresh Ethernet header right before the IP header, tags left behind (the mbuf's data moves forward over them);
// the IP packet is untouched. All that dsr does.
void rewrite_l2(rte_mbuf* m, const PacketMeta& meta, const rte_ether_addr& dst, const rte_ether_addr& src) {
    uint8_t* l3 = rte_pktmbuf_mtod_offset(m, uint8_t*, meta.l3_offset);
    auto* eth = reinterpret_cast<rte_ether_hdr*>(l3 - sizeof(rte_ether_hdr));
    eth->dst_addr = dst;
    eth->src_addr = src;
    eth->ether_type = meta.family == IpFamily::ipv4 ? RTE_BE16(RTE_ETHER_TYPE_IPV4) : RTE_BE16(RTE_ETHER_TYPE_IPV6);
    const uint16_t strip = static_cast<uint16_t>(meta.l3_offset - sizeof(rte_ether_hdr));
    if (strip) rte_pktmbuf_adj(m, strip);
}

// A routed hop's rewrite of one parsed packet whose TTL or hop limit stays above 0 (forward_burst checks it before
// any rewrite, so that an error quotes the packet as it came): decremented, and rewrite_l2 for entry.
void rewrite_hop(rte_mbuf* m, const PacketMeta& meta, const ForwardEntry& entry) {
    uint8_t* l3 = rte_pktmbuf_mtod_offset(m, uint8_t*, meta.l3_offset);
    assert(!ttl_expires(l3));  // the decrement below would borrow into the protocol byte
    if (meta.family == IpFamily::ipv4) {
        auto* ip = reinterpret_cast<rte_ipv4_hdr*>(l3);
        // TTL shares a 16-bit word with the protocol; update the checksum for that word only. The new word is made
        // in a register and stored whole: reading it back after a byte store stalls the load until the store
        // retires (no store-to-load forwarding from a narrower store).
        uint16_t old_word;
        std::memcpy(&old_word, &ip->time_to_live, 2);
        const uint16_t new_word = static_cast<uint16_t>(old_word - RTE_BE16(0x0100));  // TTL > 1: no borrow
        std::memcpy(&ip->time_to_live, &new_word, 2);
        ip->hdr_checksum = checksum_update16(ip->hdr_checksum, old_word, new_word);
    } else {
        auto* ip = reinterpret_cast<rte_ipv6_hdr*>(l3);
        --ip->hop_limits;  // IPv6 has no header checksum
    }
    rewrite_l2(m, meta, entry.dst_mac, entry.src_mac);
}

}  // namespace

void count_tx_drops(rte_mbuf** unsent, uint16_t count, void* sink_arg) {
    auto* sink = static_cast<TxDropSink*>(sink_arg);
    uint64_t bytes = 0;
    for (uint16_t i = 0; i < count; ++i) bytes += rte_pktmbuf_pkt_len(unsent[i]);
    PortCounters& port = sink->counters->ports[sink->port_id];
    counter_add(port.tx_packets, -uint64_t{count});
    counter_add(port.tx_bytes, -bytes);
    sink->counters->drop(DropReason::tx_full, count);
    rte_pktmbuf_free_bulk(unsent, count);
}

namespace {

// A packet of a balanced connection, to its backend or (nat) back to its client: rewritten per the service's mode.
DropReason rewrite_balanced(LcoreContext& ctx, const Snapshot& snapshot, rte_mbuf* m, const PacketRoute& route,
                            ForwardEntry& out) {
    const LbTables& lb = *snapshot.lb;
    const LbBackend& backend = lb.backends[route.backend];
    const PacketMeta& meta = *packet_meta(m);
    if (route.kind == RouteKind::nat_reply) {
        // route.conn is the alias entry, which holds the client and the VIP the reply goes back as.
        IpAddress client, vip;
        uint16_t client_port, vip_port;
        ctx.conn_table->origin(route.conn, client, client_port, vip, vip_port);
        if (SLUICE_UNLIKELY(ctx.conn_table->entry(route.conn).flags & kConnFlagSynProxy) && meta.l4_offset)
            tcp_shift_seq(rte_pktmbuf_mtod_offset(m, uint8_t*, meta.l4_offset), -ctx.conn_table->seq_shift(route.conn));
        nat_rewrite(m, meta, vip, vip_port, client, client_port);
        rewrite_hop(m, meta, out);
        return DropReason::none;
    }
    if (SLUICE_UNLIKELY(route.kind == RouteKind::nat_icmp_to_client)) {
        // About sluice's packet pool:port -> backend: to the client, about its own packet to the VIP.
        IpAddress client, vip;
        uint16_t client_port, vip_port;
        ctx.conn_table->origin(route.conn, client, client_port, vip, vip_port);
        if (!nat_rewrite_icmp_error(m, meta, client, client, client_port, vip, vip_port))
            return DropReason::icmp_bad_quote;
        rewrite_hop(m, meta, out);
        return DropReason::none;
    }
    if (SLUICE_UNLIKELY(backend.awaiting_neighbour)) return DropReason::neighbour_unresolved;
    if (backend.has_mac) out.dst_mac = backend.mac;
    if (SLUICE_UNLIKELY(route.kind == RouteKind::nat_icmp_to_backend)) {
        // About sluice's reply VIP -> client: to the backend, about its own reply to pool:port.
        const ConnEntry& entry = ctx.conn_table->entry(route.conn);
        if (!nat_rewrite_icmp_error(m, meta, backend.address, backend.address, backend.port_be,
                                    lb.nat_pool.addresses[entry.nat_address], rte_cpu_to_be_16(entry.nat_port)))
            return DropReason::icmp_bad_quote;
        rewrite_hop(m, meta, out);
        return DropReason::none;
    }
    switch (backend.mode) {
    case LbMode::nat: {
        const ConnEntry& entry = ctx.conn_table->entry(route.conn);  // dsr and tunnel may have none (route.conn -1)
        if (SLUICE_UNLIKELY((entry.flags & (kConnFlagSynProxy | kConnFlagSynProxyPending)) == kConnFlagSynProxy) &&
            meta.l4_offset) {
            uint8_t* tcp = rte_pktmbuf_mtod_offset(m, uint8_t*, meta.l4_offset);
            if (tcp[13] & RTE_TCP_ACK_FLAG)
                tcp_shift_ack(tcp, ctx.conn_table->seq_shift(static_cast<int32_t>(entry.peer)));
        }
        uint16_t dst_port = meta.fragment_dst_port;  // a later fragment has no L4 header
        if (meta.l4_offset) std::memcpy(&dst_port, rte_pktmbuf_mtod_offset(m, const uint8_t*, meta.l4_offset + 2), 2);
        nat_rewrite(m, meta, lb.nat_pool.addresses[entry.nat_address], rte_cpu_to_be_16(entry.nat_port),
                    backend.address, backend.port_be ? backend.port_be : dst_port);
        rewrite_hop(m, meta, out);
        return DropReason::none;
    }
    case LbMode::dsr: rewrite_l2(m, meta, out.dst_mac, out.src_mac); return DropReason::none;
    case LbMode::tunnel: {
        const IpAddress& source = meta.family == IpFamily::ipv4 ? lb.tunnel_source_v4 : lb.tunnel_source_v6;
        if (!encapsulate(m, meta, source, backend.address, snapshot.port_mtu[out.out_port]))
            return DropReason::tunnel_too_big;
        auto* eth = rte_pktmbuf_mtod(m, rte_ether_hdr*);
        eth->dst_addr = out.dst_mac;
        eth->src_addr = out.src_mac;
        return DropReason::none;
    }
    }
    return DropReason::none;
}

// Whether the IP packet at l3 fits mtu (packet_mtu). Checked before any rewrite, so that an error about the packet
// quotes it as its sender sent it: nat and dsr keep the length, tunnel's outer header is in packet_mtu.
bool fits_mtu(const uint8_t* l3, uint16_t mtu) {
    uint16_t length_be;
    if ((l3[0] >> 4) == 4) {
        std::memcpy(&length_be, l3 + 2, 2);
        return rte_be_to_cpu_16(length_be) <= mtu;
    }
    std::memcpy(&length_be, l3 + 4, 2);  // IPv6 payload length
    return rte_be_to_cpu_16(length_be) + sizeof(rte_ipv6_hdr) <= mtu;
}

// Whether the IP packet at l3 is IPv4 without DF: its sender allowed routers to fragment it.
bool fragmentable(const uint8_t* l3) {
    return (l3[0] >> 4) == 4 &&
           !(rte_be_to_cpu_16(reinterpret_cast<const rte_ipv4_hdr*>(l3)->fragment_offset) & RTE_IPV4_HDR_DF_FLAG);
}

// The largest IP packet that leaves whole by out_port: a tunnel backend's outer header takes its share (Katran
// answers the same way).
uint16_t packet_mtu(const Snapshot& snapshot, const PacketMeta& meta, const PacketRoute* route, uint16_t out_port) {
    const uint16_t mtu = snapshot.port_mtu[out_port];
    if (!route || route->kind != RouteKind::to_backend || snapshot.lb->backends[route->backend].mode != LbMode::tunnel)
        return mtu;
    return static_cast<uint16_t>(mtu - (meta.family == IpFamily::ipv4 ? sizeof(rte_ipv4_hdr) : sizeof(rte_ipv6_hdr)));
}

// Whether sluice acts as a router hop for the packet (TTL or hop limit decremented): all but dsr and tunnel
// backends' packets, which leave as they came (inside an outer header for tunnel).
bool routed_hop(const Snapshot& snapshot, const PacketRoute* route) {
    return !route || route->kind != RouteKind::to_backend || snapshot.lb->backends[route->backend].mode == LbMode::nat;
}

bool is_answer(const PacketRoute& route) {
    return route.kind == RouteKind::answer_to_initiator || route.kind == RouteKind::answer_to_responder;
}

// The backend an answer goes to (a nat connection's responder), or null.
const LbBackend* answered_backend(const Snapshot& snapshot, const PacketRoute& route) {
    if (route.kind != RouteKind::answer_to_responder || route.backend >= snapshot.lb->backends.size()) return nullptr;
    return &snapshot.lb->backends[route.backend];
}

// An answer's way out on forward ports: the entry the connection's packets to the answered end take (the
// initiator's came in on its in_port; the responder's came in where the initiator's leave). Null when those ports
// have no forward entry: the route table decides, by the answer's destination.
const ForwardEntry* forward_entry_of_answer(LcoreContext& ctx, const Snapshot& snapshot, const PacketRoute& route) {
    const ForwardEntry& to_responder = snapshot.forward_by_in_port[ctx.conn_table->entry(route.conn).in_port];
    if (!to_responder.valid) return nullptr;
    if (route.kind == RouteKind::answer_to_responder) return &to_responder;
    const ForwardEntry& to_initiator = snapshot.forward_by_in_port[to_responder.out_port];
    return to_initiator.valid ? &to_initiator : nullptr;
}

// The address packet i leaves for, as the route table sees it: a balanced connection's packet once rewritten (to
// its backend, or back to its client), else the packet's own destination.
IpAddress routed_destination(LcoreContext& ctx, const Snapshot& snapshot, rte_mbuf* m, const PacketMeta& meta,
                             const PacketRoute* route) {
    IpAddress destination{};
    if (route && route->kind != RouteKind::plain && !is_answer(*route)) {
        if (route->kind == RouteKind::to_backend || route->kind == RouteKind::nat_icmp_to_backend)
            return snapshot.lb->backends[route->backend].address;
        uint16_t client_port, vip_port;
        IpAddress vip;
        ctx.conn_table->origin(route->conn, destination, client_port, vip, vip_port);
        return destination;
    }
    const uint8_t* l3 = rte_pktmbuf_mtod_offset(m, const uint8_t*, meta.l3_offset);
    if (meta.family == IpFamily::ipv4) std::memcpy(destination.bytes, l3 + 16, 4);
    else std::memcpy(destination.bytes, l3 + 24, 16);
    return destination;
}

// Where each packet leaves: by its ingress port's forward entry when it has one, else by the route of the address
// it leaves for (rte_fib bulk lookups per family), a via route's next hop chosen by the flow's symmetric hash. Fills
// out[i], or reason[i] when the packet cannot leave.
void route_burst(LcoreContext& ctx, const Snapshot& snapshot, rte_mbuf** pkts, uint16_t count,
                 const PacketRoute* routes, ForwardEntry* out, DropReason* reason) {
    const RouteTables& table = snapshot.routes;
    const RouteFib* fib = table.fib.get();
    uint32_t v4_addresses[kBurst];
    uint8_t v6_addresses[kBurst][RTE_FIB6_IPV6_ADDR_SIZE];
    uint16_t v4_index[kBurst], v6_index[kBurst];
    uint16_t v4_count = 0, v6_count = 0;
    for (uint16_t i = 0; i < count; ++i) {
        rte_mbuf* m = pkts[i];
        reason[i] = DropReason::none;
        const bool answer = routes && is_answer(routes[i]);
        const ForwardEntry* forward =
            answer ? forward_entry_of_answer(ctx, snapshot, routes[i]) : &snapshot.forward_by_in_port[m->port];
        if (forward && forward->valid) {
            out[i] = *forward;
            continue;
        }
        const PacketMeta& meta = *packet_meta(m);
        if (!fib || (meta.family == IpFamily::ipv4 ? !fib->v4 : !fib->v6)) {
            reason[i] = DropReason::no_route;
            continue;
        }
        const IpAddress destination = routed_destination(ctx, snapshot, m, meta, routes ? &routes[i] : nullptr);
        if (meta.family == IpFamily::ipv4) {
            v4_addresses[v4_count] = rte_be_to_cpu_32(destination.words[0]);
            v4_index[v4_count++] = i;
        } else {
            std::memcpy(v6_addresses[v6_count], destination.bytes, RTE_FIB6_IPV6_ADDR_SIZE);
            v6_index[v6_count++] = i;
        }
    }
    if (v4_count + v6_count == 0) return;
    uint64_t v4_found[kBurst], v6_found[kBurst];
    if (v4_count) rte_fib_lookup_bulk(fib->v4, v4_addresses, v4_found, v4_count);
    if (v6_count) rte_fib6_lookup_bulk(fib->v6, v6_addresses, v6_found, v6_count);
    // The next hop of a destination on a connected link: the host's own MAC once sluice resolved it; otherwise the
    // control thread is asked to resolve it (at most one request every kGleanGapUs per worker: a scan of a /16
    // cannot flood the ring) and the packet is dropped.
    const auto connected_host = [&](uint16_t i, const RouteEntry& entry, IpFamily family, const uint8_t* address) {
        HostKey key{};
        std::memcpy(key.address.bytes, address, family == IpFamily::ipv4 ? 4 : 16);
        key.family = static_cast<uint64_t>(family);
        void* index;
        if (table.hosts && rte_hash_lookup_data(table.hosts.get(), &key, &index) >= 0) {
            out[i] = table.hops[reinterpret_cast<uintptr_t>(index)];
            return;
        }
        reason[i] = DropReason::neighbour_unresolved;
        const uint64_t now = rte_rdtsc();
        if (!ctx.neighbour_events || now < ctx.next_glean_tsc) return;
        NeighbourEvent wanted{key.address, {}, entry.port, family, {}};  // no MAC: a host to resolve
        if (rte_ring_mp_enqueue_elem(ctx.neighbour_events, &wanted, sizeof wanted) == 0)
            ctx.next_glean_tsc = now + rte_get_tsc_hz() / 1000000 * kGleanGapUs;
    };
    const auto settle = [&](uint16_t i, uint64_t found, IpFamily family, const uint8_t* address) {
        if (found == 0) {
            reason[i] = DropReason::no_route;
            return;
        }
        const RouteEntry& entry = table.entry_of(found);
        switch (entry.action) {
        case RouteAction::via:
            if (const ForwardEntry* hop = table.next_hop(entry, packet_meta(pkts[i])->flow_hash)) out[i] = *hop;
            else reason[i] = DropReason::neighbour_unresolved;
            return;
        case RouteAction::connected: {
            // On the link: the destination's own MAC. Backends and next hops have host routes (via); a backend
            // configured with its mac is reached here.
            const PacketRoute* route = routes ? &routes[i] : nullptr;
            const LbBackend* backend = !route                                 ? nullptr
                                       : route->kind == RouteKind::to_backend ? &snapshot.lb->backends[route->backend]
                                                                              : answered_backend(snapshot, *route);
            if (backend && backend->has_mac) {
                out[i] = forward_entry(entry.port, backend->mac, snapshot.port_mac);
            } else {
                connected_host(i, entry, family, address);
            }
            return;
        }
        case RouteAction::blackhole: reason[i] = DropReason::route_blackhole; return;
        case RouteAction::reject: reason[i] = DropReason::route_reject; return;
        }
    };
    for (uint16_t k = 0; k < v4_count; ++k) {
        const uint32_t address_be = rte_cpu_to_be_32(v4_addresses[k]);
        settle(v4_index[k], v4_found[k], IpFamily::ipv4, reinterpret_cast<const uint8_t*>(&address_be));
    }
    for (uint16_t k = 0; k < v6_count; ++k) settle(v6_index[k], v6_found[k], IpFamily::ipv6, v6_addresses[k]);
}

// sluice's own segment (written with a hop limit of its own: no hop counted) to the MACs of its way out, or of the
// nat backend it is for, as that backend's packets are sent.
DropReason send_answer(const Snapshot& snapshot, rte_mbuf* m, const PacketRoute& route, const ForwardEntry& entry) {
    rte_ether_addr dst_mac = entry.dst_mac;
    if (const LbBackend* backend = answered_backend(snapshot, route)) {
        if (SLUICE_UNLIKELY(backend->awaiting_neighbour)) return DropReason::neighbour_unresolved;
        if (backend->has_mac) dst_mac = backend->mac;
    }
    rewrite_l2(m, *packet_meta(m), dst_mac, entry.src_mac);
    return DropReason::none;
}

// A packet with no route or a reject route: answered with ICMP unreachable (rate-limited) from the ingress port's
// own address when it has one, as a router does. True when the answer took the mbuf.
bool answer_unreachable(LcoreContext& ctx, const Snapshot& snapshot, rte_mbuf* m, DropReason why) {
    const PacketMeta& meta = *packet_meta(m);
    const uint16_t in_port = m->port;
    const IpAddress* own = port_address(snapshot, meta.family, ingress_interface(m));
    if (!own || !write_error_reply(ctx, snapshot, rte_rdtsc(), [&] {
            return make_unreachable(m, meta, why == DropReason::route_reject, *own, snapshot.port_mac[in_port]);
        }))
        return false;
    ctx.counters.drop(why);
    counter_add(ctx.counters.unreachables_sent);
    send_out(ctx, in_port, m);
    return true;
}

}  // namespace

void forward_burst(LcoreContext& ctx, const Snapshot& snapshot, rte_mbuf** pkts, uint16_t count,
                   const PacketRoute* routes) {
    rte_mbuf* dropped[kBurst];
    uint16_t dropped_count = 0;
    ForwardEntry way_out[kBurst];
    DropReason route_verdict[kBurst];
    route_burst(ctx, snapshot, pkts, count, routes, way_out, route_verdict);
    for (uint16_t i = 0; i < count; ++i) {
        rte_mbuf* m = pkts[i];
        const ForwardEntry& entry = way_out[i];
        DropReason verdict;
        const PacketMeta& meta = *packet_meta(m);
        const uint8_t* l3 = rte_pktmbuf_mtod_offset(m, const uint8_t*, meta.l3_offset);
        const uint16_t in_port = m->port;
        const bool answer = routes && SLUICE_UNLIKELY(is_answer(routes[i]));
        if (SLUICE_UNLIKELY(route_verdict[i] != DropReason::none)) {
            verdict = route_verdict[i];
            if ((verdict == DropReason::no_route || verdict == DropReason::route_reject) && !answer &&
                answer_unreachable(ctx, snapshot, m, verdict))
                continue;
        } else if (SLUICE_UNLIKELY(entry.awaiting_neighbour)) {
            verdict = DropReason::neighbour_unresolved;
        } else if (answer) {
            verdict = send_answer(snapshot, m, routes[i], entry);
        } else if (SLUICE_UNLIKELY(ttl_expires(l3)) && routed_hop(snapshot, routes ? &routes[i] : nullptr)) {
            // Checked before any rewrite, so the error quotes the packet as it came. Sent, as a router sends it,
            // from the ingress port's own address: sluice has none on a port without `addresses`, and answering
            // from the packet's destination would show traceroute a hop that is not there.
            verdict = DropReason::ttl_expired;
            const IpAddress* own = port_address(snapshot, meta.family, ingress_interface(m));
            if (own && write_error_reply(ctx, snapshot, rte_rdtsc(), [&] {
                    return make_time_exceeded(m, meta, *own, snapshot.port_mac[in_port]);
                })) {
                ctx.counters.drop(verdict);
                counter_add(ctx.counters.time_exceeded_sent);
                send_out(ctx, in_port, m);
                continue;
            }
        } else if (const uint16_t mtu = packet_mtu(snapshot, meta, routes ? &routes[i] : nullptr, entry.out_port);
                   SLUICE_UNLIKELY(!fits_mtu(l3, mtu))) {
            // sluice does not fragment (docs/operations/mtu.md). The sender learns the path MTU, as from any
            // router on the path (RFC 1191, RFC 8201), unless it allowed fragmentation (IPv4 without DF): that
            // packet is only dropped, under a reason of its own.
            verdict = mtu != snapshot.port_mtu[entry.out_port] ? DropReason::tunnel_too_big
                      : fragmentable(l3)                       ? DropReason::frame_too_big_no_df
                                                               : DropReason::frame_too_big;
            if (write_error_reply(ctx, snapshot, rte_rdtsc(),
                                  [&] { return make_too_big(m, meta, mtu, snapshot.port_mac[in_port]); })) {
                ctx.counters.drop(verdict);  // the packet is, its error goes back out of the port it came in on
                counter_add(ctx.counters.too_big_sent);
                send_out(ctx, in_port, m);
                continue;
            }
        } else if (routes && routes[i].kind != RouteKind::plain) {
            ForwardEntry out = entry;
            verdict = rewrite_balanced(ctx, snapshot, m, routes[i], out);
        } else {
            rewrite_hop(m, meta, entry);
            verdict = DropReason::none;
        }
        if (SLUICE_UNLIKELY(verdict != DropReason::none)) {
            ctx.counters.drop(verdict);
            dropped[dropped_count++] = m;
            continue;
        }
        set_egress_vlan(m, entry.vlan);
        send_out(ctx, entry.out_port, m);
    }
    if (dropped_count) rte_pktmbuf_free_bulk(dropped, dropped_count);
}

}  // namespace sluice

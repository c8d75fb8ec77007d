// The streams the sections send and the connections they set up: distinct flows, packets of them, the worker's
// stateful path (stateful_burst then forward_burst) and connections opened through it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "classbench.hpp"
#include "conntrack/conn_table.hpp"
#include "harness.hpp"
#include "pipeline/lcore_context.hpp"
#include "pipeline/snapshot.hpp"

namespace sluice::bench {

// Canonical tuples in a hash set, to make streams of distinct connections.
struct TupleHash {
    std::size_t operator()(const FiveTuple& t) const { return symmetric_flow_hash(t); }
};

// The connection table's key of a flow: two tuples with the same key are one connection.
FiveTuple connection_key(const FiveTuple& f);

// Random TCP/UDP tuples, distinct as connections (both directions count as one).
std::vector<FiveTuple> distinct_flows(std::size_t count, Rng& rng, uint32_t tcp_percent);

// Puts the flows in the table as established (TCP) or replied (UDP) connections of rule 0, straight into the
// table; returns how many did not fit.
uint32_t insert_established(ConnTable& table, const std::vector<FiveTuple>& flows);

// Gives each TCP flow's connection the window a three-way handshake leaves (SYN, SYN+ACK, ACK, each side's ISN 0,
// window 65535, no scale), fed to tcp_window_check as the stateful stage feeds it: the harness's segments (seq 1,
// no data) are then judged in the window, strictly, from both sides. Returns how many were refused (none should be).
uint32_t open_windows_by_handshake(ConnTable& table, const std::vector<FiveTuple>& flows);

// Packets of the flows picked at random, half of them in the reply direction: the worst case for the caches.
std::vector<PacketSpec> random_packets(const std::vector<FiveTuple>& flows, uint32_t count, Rng& rng);

// Fills the table to capacity with throwaway connections and removes them again (untimed), so that every slot of
// its slot array and key store, and every bucket, has been written once. rte_hash hands out free slots first in,
// first out, so passes of new connections walk through the whole table over time; without hugepages (--no-huge)
// the EAL's memory is faulted in on first touch, and a pass that reaches fresh pages would pay the page faults.
void touch_all_slots(ConnTable& table);

// Distinct clients (source address and port) outside 10/8 and 192.0.2/24, to port 80 over TCP (packets_to sets
// the destination address).
std::vector<FiveTuple> lb_clients(std::size_t count, Rng& rng);

std::vector<PacketSpec> packets_to(const std::vector<FiveTuple>& clients, uint32_t dst_host, uint8_t tcp_flags);

// Connection positions of the streams' tuples (-1 when not tracked).
std::vector<int32_t> positions_of(const ConnTable& table, const std::vector<PacketSpec>& stream);

// Removes the stream's connections that the table holds (untimed); returns how many it removed.
uint32_t remove_connections(ConnTable& table, const std::vector<PacketSpec>& stream);

// The stateful path of a worker: stateful_burst, then forward_burst on what it kept, with its routes.
Stage worker_path(LcoreContext& ctx, const Snapshot& snapshot);

// One connection from each client to dst (host order), opened through the worker's own path, untimed: the SYN, the
// SYN+ACK when replies come back through sluice, the client's ACK. Returns one ACK per connection in each direction
// (reply empty without replies); a nat connection's reply goes from its backend:port to its pool address:NAT port,
// the others' is the reversed tuple. ctx.conn_table is the table they open in.
struct OpenedConns {
    std::vector<PacketSpec> forward, reply;
};

OpenedConns open_connections(Dpdk& d, LcoreContext& ctx, const Snapshot& snapshot,
                             const std::vector<FiveTuple>& clients, uint32_t dst, bool replies);

}  // namespace sluice::bench

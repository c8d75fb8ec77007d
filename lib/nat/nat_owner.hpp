// The owner-worker encoding of translated connections: a worker allocates only the ports p with
// p % worker_count == its index (nat_ports.hpp), so a reply to pool_address:p names its owning worker, and the RX
// lcores send it there with no shared state and no NIC flow rule. Fast-path safe.
#pragma once

#include <cstdint>
#include <cstring>

#include <rte_byteorder.h>
#include <rte_mbuf.h>

#include "common/five_tuple.hpp"
#include "common/ip_proto.hpp"
#include "nat/nat_pool.hpp"
#include "packet/packet_meta.hpp"

namespace sluice {

// The worker that owns NAT port `port` (host order): the rule the RX lcores apply to replies.
inline uint16_t nat_port_owner(uint16_t port, uint16_t worker_count) {
    return static_cast<uint16_t>(port % worker_count);
}

// An ICMP error that quotes a packet from a NAT pool address (sluice's, to a backend) goes to the worker that owns
// the quoted source port, as the replies do; every other error goes by its quote's flow.
inline uint16_t icmp_error_worker(const rte_mbuf* m, const PacketMeta& meta, const NatPool& pool, uint16_t workers) {
    const uint8_t* q = rte_pktmbuf_mtod_offset(m, const uint8_t*, meta.l4_offset + 8);
    const uint32_t avail = rte_pktmbuf_data_len(m) - meta.l4_offset - 8;  // parse checked the quote's IP header
    const bool v4 = meta.family == IpFamily::ipv4;
    const uint32_t header = v4 ? (q[0] & 0x0fu) * 4u : 40u;
    const uint8_t proto = v4 ? q[9] : q[6];
    uint16_t fragment_be = 0, port_be;
    if (v4) std::memcpy(&fragment_be, q + 6, 2);
    if ((proto != kIpProtoTcp && proto != kIpProtoUdp) || avail < header + 4 ||
        (rte_be_to_cpu_16(fragment_be) & 0x1fff))
        return worker_for_hash(meta.flow_hash, workers);  // no ports quoted: not a NAT connection's
    IpAddress src{};
    std::memcpy(src.bytes, q + (v4 ? 12 : 8), v4 ? 4 : 16);
    if (!pool.contains(meta.family, src)) return worker_for_hash(meta.flow_hash, workers);
    std::memcpy(&port_be, q + header, 2);
    return nat_port_owner(rte_be_to_cpu_16(port_be), workers);
}

// The worker a packet goes to: its flow's (symmetric hash), except replies to a NAT pool address, which go to the
// worker that allocated the destination port (nat_ports.hpp): their tuple is not the one the client's side hashed.
inline uint16_t owning_worker(const rte_mbuf* m, const PacketMeta& meta, const NatPool& pool, uint16_t workers) {
    if (SLUICE_UNLIKELY(meta.flags & kMetaIcmpError) && !pool.empty()) return icmp_error_worker(m, meta, pool, workers);
    // ICMP errors go on their quote; fragments on addresses alone, unless the RX lcore gave them their datagram's
    // ports (fragments.hpp): then as the datagram would.
    const bool fragment_ports = meta.flags & kMetaFragmentPorts;
    if (pool.empty() || (meta.l4_proto != kIpProtoTcp && meta.l4_proto != kIpProtoUdp) ||
        (meta.flags & kMetaIcmpError) || (meta.l4_offset == 0 && !fragment_ports) ||
        ((meta.flags & kMetaFragment) && !fragment_ports))
        return worker_for_hash(meta.flow_hash, workers);
    const uint8_t* l3 = rte_pktmbuf_mtod_offset(m, const uint8_t*, meta.l3_offset);
    IpAddress dst{};
    if (meta.family == IpFamily::ipv4) std::memcpy(dst.bytes, l3 + 16, 4);
    else std::memcpy(dst.bytes, l3 + 24, 16);
    if (!pool.contains(meta.family, dst)) return worker_for_hash(meta.flow_hash, workers);
    uint16_t port = meta.fragment_dst_port;
    if (!fragment_ports) std::memcpy(&port, rte_pktmbuf_mtod_offset(m, const uint8_t*, meta.l4_offset + 2), 2);
    return nat_port_owner(rte_be_to_cpu_16(port), workers);
}

}  // namespace sluice

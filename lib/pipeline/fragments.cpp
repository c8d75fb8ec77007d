#include "pipeline/fragments.hpp"

#include <stdexcept>

#include <netinet/in.h>

#include <rte_malloc.h>
#include <rte_tcp.h>

#include "common/compiler.hpp"
#include "common/ip_proto.hpp"
#include "packet/packet_meta.hpp"

namespace sluice {

FragmentTracker::FragmentTracker(const std::string& name, int socket, uint64_t tsc_hz)
    : lifetime_tsc_(tsc_hz * kLifetimeMs / 1000) {
    rte_hash_parameters params{};
    params.name = name.c_str();
    params.entries = kCapacity;
    params.key_len = sizeof(Key);
    params.hash_func = key_hash;
    params.socket_id = socket;
    table_ = rte_hash_create(&params);
    if (!table_) throw std::runtime_error("cannot create fragment table " + name);
    records_ = static_cast<Record*>(rte_zmalloc_socket("sluice_fragments", sizeof(Record) * kCapacity, 64, socket));
    if (!records_) {
        rte_hash_free(table_);
        throw std::runtime_error("out of memory for fragment table " + name);
    }
}

// Keyed (five_tuple.hpp): every byte of a key is the sender's, and with rte_hash_crc first fragments crafted to
// share one hash filled their two buckets after 16 datagrams, each further one costing a failed cuckoo search.
uint32_t FragmentTracker::key_hash(const void* data, uint32_t, uint32_t) {
    const Key& key = *static_cast<const Key*>(data);
    return keyed_datagram_hash(key.src, key.dst, key.id, key.proto, key.family);
}

FragmentTracker::~FragmentTracker() {
    rte_hash_free(table_);
    rte_free(records_);
}

DropReason FragmentTracker::annotate(rte_mbuf* m, uint64_t now_tsc) {
    PacketMeta& meta = *packet_meta(m);
    const uint8_t* frame = rte_pktmbuf_mtod(m, const uint8_t*);
    const FragmentInfo info = fragment_info(frame, meta);
    FiveTuple tuple;
    uint8_t tcp_flags;
    tuple_from_meta(frame, rte_pktmbuf_data_len(m), meta, tuple, tcp_flags);  // addresses and protocol, ports 0
    const Key key{tuple.src, tuple.dst, info.id, tuple.proto, tuple.family, 0};
    if (info.offset == 0) {
        if (meta.flags & kMetaFragmentTiny) return DropReason::fragment_invalid;
        uint16_t src_port, dst_port;
        first_fragment_ports(frame, meta, src_port, dst_port);
        const int32_t position = rte_hash_add_key(table_, &key);
        if (SLUICE_UNLIKELY(position < 0)) return DropReason::fragment_table_full;
        records_[position] = Record{src_port, dst_port, now_tsc + lifetime_tsc_};
        meta.fragment_src_port = src_port;
        meta.fragment_dst_port = dst_port;
    } else {
        if (tuple.proto == kIpProtoTcp && info.offset < sizeof(rte_tcp_hdr))
            return DropReason::fragment_invalid;  // rewrites the TCP header
        const int32_t position = rte_hash_lookup(table_, &key);
        if (position < 0) return DropReason::fragment_unmatched;
        const Record& record = records_[position];
        if (SLUICE_UNLIKELY(record.expires_tsc < now_tsc)) {
            rte_hash_del_key(table_, &key);
            return DropReason::fragment_unmatched;
        }
        meta.fragment_src_port = record.src_port;
        meta.fragment_dst_port = record.dst_port;
        if (!info.more) rte_hash_del_key(table_, &key);  // the last fragment: a middle one arriving later is lost
    }
    meta.flags |= kMetaFragmentPorts;
    set_ports(tuple, meta.fragment_src_port, meta.fragment_dst_port);
    meta.flow_hash = symmetric_flow_hash(tuple);
    return DropReason::none;
}

void FragmentTracker::sweep(uint64_t now_tsc) {
    // At most once a millisecond, and only with datagrams pending: rte_hash_iterate walks empty slots too.
    if (now_tsc < next_sweep_tsc_) return;
    next_sweep_tsc_ = now_tsc + lifetime_tsc_ / kLifetimeMs;
    if (rte_hash_count(table_) == 0) return;
    constexpr int kPerCall = 4;
    for (int i = 0; i < kPerCall; ++i) {
        const void* key;
        void* data;
        const int32_t position = rte_hash_iterate(table_, &key, &data, &sweep_cursor_);
        if (position < 0) {
            sweep_cursor_ = 0;
            return;
        }
        if (records_[position].expires_tsc < now_tsc) rte_hash_del_key(table_, key);
    }
}

}  // namespace sluice

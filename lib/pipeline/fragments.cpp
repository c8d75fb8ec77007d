#include "pipeline/fragments.hpp"

#include <algorithm>
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
    source_counts_ = static_cast<uint16_t(*)[kSourceSlots]>(
        rte_zmalloc_socket("sluice_fragment_sources", sizeof(uint16_t) * 2 * kSourceSlots, 64, socket));
    if (!records_ || !source_counts_) {
        rte_hash_free(table_);
        rte_free(records_);
        rte_free(source_counts_);
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
    rte_free(source_counts_);
}

uint32_t FragmentTracker::pending() const { return static_cast<uint32_t>(rte_hash_count(table_)); }

void FragmentTracker::source_slots(const Key& key, uint16_t (&slots)[2]) const {
    const uint32_t hash = keyed_source_hash(sender_of(key.src, key.family), key.family);
    slots[0] = static_cast<uint16_t>(hash % kSourceSlots);
    slots[1] = static_cast<uint16_t>((hash >> 16) % kSourceSlots);
}

void FragmentTracker::remove(int32_t position, const void* key) {
    const Record& record = records_[position];
    --source_counts_[0][record.source_slot[0]];
    --source_counts_[1][record.source_slot[1]];
    ages_.remove(static_cast<uint32_t>(position));
    rte_hash_del_key(table_, key);
}

void FragmentTracker::expire(uint64_t now_tsc, uint32_t budget) {
    for (uint32_t i = 0; i < budget && !ages_.empty(); ++i) {
        const uint32_t oldest = ages_.front();
        if (records_[oldest].expires_tsc >= now_tsc) return;  // every later one expires later still
        void* key;
        rte_hash_get_key_with_position(table_, static_cast<int32_t>(oldest), &key);
        remove(static_cast<int32_t>(oldest), key);
    }
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
        if (info.more) {
            const DropReason verdict = record(key, src_port, dst_port, now_tsc);
            if (verdict != DropReason::none) return verdict;
        }  // else an atomic fragment: the whole datagram, nothing to wait for
        meta.fragment_src_port = src_port;
        meta.fragment_dst_port = dst_port;
    } else {
        if (tuple.proto == kIpProtoTcp && info.offset < sizeof(rte_tcp_hdr))
            return DropReason::fragment_invalid;  // rewrites the TCP header
        const int32_t position = rte_hash_lookup(table_, &key);
        if (position < 0) return DropReason::fragment_unmatched;
        const Record& record = records_[position];
        if (SLUICE_UNLIKELY(record.expires_tsc < now_tsc)) {
            remove(position, &key);
            return DropReason::fragment_unmatched;
        }
        meta.fragment_src_port = record.src_port;
        meta.fragment_dst_port = record.dst_port;
        if (!info.more) remove(position, &key);  // the last fragment: a middle one arriving later is lost
    }
    meta.flags |= kMetaFragmentPorts;
    set_ports(tuple, meta.fragment_src_port, meta.fragment_dst_port);
    meta.flow_hash = symmetric_flow_hash(tuple);
    return DropReason::none;
}

DropReason FragmentTracker::record(const Key& key, uint16_t src_port, uint16_t dst_port, uint64_t now_tsc) {
    expire(now_tsc, kExpirePerInsert);
    const hash_sig_t hash = rte_hash_hash(table_, &key);
    const int32_t existing = rte_hash_lookup_with_hash(table_, &key, hash);
    if (existing >= 0) {
        // A second first fragment must not re-steer the fragments of the first: the first one stays.
        if (records_[existing].expires_tsc >= now_tsc) return DropReason::fragment_duplicate;
        remove(existing, &key);
    }
    uint16_t slots[2];
    source_slots(key, slots);
    if (std::min(source_counts_[0][slots[0]], source_counts_[1][slots[1]]) >= kPerSourceLimit)
        return DropReason::fragment_source_limit;
    const int32_t position = rte_hash_add_key_with_hash(table_, &key, hash);
    if (SLUICE_UNLIKELY(position < 0)) return DropReason::fragment_table_full;
    records_[position] = Record{src_port, dst_port, {slots[0], slots[1]}, now_tsc + lifetime_tsc_};
    ++source_counts_[0][slots[0]];
    ++source_counts_[1][slots[1]];
    ages_.push_back(static_cast<uint32_t>(position));
    return DropReason::none;
}

}  // namespace sluice

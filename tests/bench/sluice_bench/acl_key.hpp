// sluice's rte_acl search key for IPv4 (lib/classify/acl_layout.hpp, internal to lib/classify), for the in-process
// references of sections classify and reload: rte_acl_classify on keys built beforehand. If the layout drifts, the
// results disagree with AclClassifier's and the reference is dropped with a warning.
#pragma once

#include <cstdint>

#include <rte_byteorder.h>

#include "common/five_tuple.hpp"

namespace sluice::bench {

struct Ipv4AclKey {
    uint8_t proto;
    uint8_t pad[3];
    uint32_t in_port;
    uint32_t src;
    uint32_t dst;
    uint16_t src_port;
    uint16_t dst_port;
};
static_assert(sizeof(Ipv4AclKey) == 20);

inline Ipv4AclKey ipv4_acl_key(const FiveTuple& t) {
    return Ipv4AclKey{t.proto, {0, 0, 0}, rte_cpu_to_be_32(0), t.src.words[0], t.dst.words[0], t.src_port, t.dst_port};
}

}  // namespace sluice::bench

#include "packet/packet_meta.hpp"

namespace sluice {

int g_packet_meta_offset = -1;

bool register_packet_meta() {
    static const rte_mbuf_dynfield kField = {
        .name = "sluice_packet_meta",
        .size = sizeof(PacketMeta),
        .align = alignof(PacketMeta),
        .flags = 0,
    };
    g_packet_meta_offset = rte_mbuf_dynfield_register(&kField);
    return g_packet_meta_offset >= 0;
}

}  // namespace sluice

// An mbuf around a copy of a fuzzer's frame, in a buffer exactly headroom + frame + tailroom long, so ASan sees any
// access past the room the code was given.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include <rte_mbuf.h>

namespace sluice::fuzz {

struct FakeMbuf {
    std::vector<uint8_t> buffer;
    rte_mbuf m;
    FakeMbuf(const uint8_t* f, uint32_t n, uint16_t headroom, uint16_t tailroom = 0) : buffer(headroom + n + tailroom) {
        std::memset(&m, 0, sizeof m);
        std::memcpy(buffer.data() + headroom, f, n);
        m.buf_addr = buffer.data();
        m.buf_len = static_cast<uint16_t>(buffer.size());
        m.data_off = headroom;
        m.data_len = static_cast<uint16_t>(n);
        m.pkt_len = n;
        m.nb_segs = 1;
        m.refcnt = 1;
    }
    uint8_t* data() { return rte_pktmbuf_mtod(&m, uint8_t*); }
};

}  // namespace sluice::fuzz

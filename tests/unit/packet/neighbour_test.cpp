// ARP and ND messages read by the worker (lib/packet/neighbour.hpp): a sender that names a group (multicast or
// broadcast) MAC as its own is neither learned nor answered.
#include <catch2/catch.hpp>

#include <cstring>

#include <rte_mbuf.h>

#include "common/frames.hpp"
#include "packet/neighbour.hpp"
#include "packet/parse.hpp"

using namespace sluice;
using namespace sluice::test;

namespace {

// The message the worker reads from frame, which must be a neighbour frame.
NeighbourMessage read_neighbour(const Bytes& frame, PacketMeta& meta) {
    FiveTuple tuple;
    uint32_t datagram_end;
    const auto length = static_cast<uint32_t>(frame.size());
    DropReason verdict = parse_frame(frame.data(), length, {}, meta, tuple, datagram_end);
    verdict = classify_neighbour(frame.data(), length, verdict, meta);
    REQUIRE(verdict == DropReason::none);
    REQUIRE((meta.flags & kMetaNeighbour));
    NeighbourMessage message;
    REQUIRE(parse_neighbour(frame.data(), length, meta, message));
    return message;
}

// Whether make_neighbour_reply answers frame, on an mbuf around a copy of it with room to grow.
bool answered(Bytes frame, const PacketMeta& meta, const NeighbourMessage& message) {
    frame.resize(frame.size() + 128);
    rte_mbuf m;
    std::memset(&m, 0, sizeof m);
    m.buf_addr = frame.data();
    m.buf_len = static_cast<uint16_t>(frame.size());
    m.data_len = static_cast<uint16_t>(frame.size() - 128);
    m.pkt_len = m.data_len;
    m.nb_segs = 1;
    m.refcnt = 1;
    return make_neighbour_reply(&m, meta, message, rte_ether_addr{{0x02, 0, 0, 0, 0, 0x99}});
}

constexpr std::array<uint8_t, 6> kUnicast = {0x02, 0x00, 0x00, 0x00, 0x00, 0x07};
constexpr std::array<uint8_t, 6> kBroadcast = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
constexpr std::array<uint8_t, 6> kIpv4Multicast = {0x01, 0x00, 0x5e, 0x00, 0x00, 0x01};
constexpr std::array<uint8_t, 6> kIpv6Multicast = {0x33, 0x33, 0x00, 0x00, 0x00, 0x01};

}  // namespace

TEST_CASE("neighbour: an ARP request from a group MAC teaches nothing and gets no reply", "[neighbour]") {
    PacketMeta meta;
    const Bytes unicast = arp_request(kUnicast, "10.9.0.7", "10.9.0.1");
    const NeighbourMessage learned = read_neighbour(unicast, meta);
    CHECK(learned.has_sender_mac);
    CHECK(answered(unicast, meta, learned));
    for (const auto& group : {kBroadcast, kIpv4Multicast, kIpv6Multicast}) {
        const Bytes frame = arp_request(group, "10.9.0.7", "10.9.0.1");
        const NeighbourMessage message = read_neighbour(frame, meta);
        CHECK(message.solicitation);
        CHECK_FALSE(message.has_sender_mac);
        CHECK_FALSE(answered(frame, meta, message));
    }
}

TEST_CASE("neighbour: an NS whose source link-layer option is a group MAC teaches nothing and gets no reply",
          "[neighbour]") {
    PacketMeta meta;
    const Bytes unicast = neighbour_solicitation(kUnicast, "2001:db8:b::7", "2001:db8:b::1");
    const NeighbourMessage learned = read_neighbour(unicast, meta);
    CHECK(learned.has_sender_mac);
    CHECK(answered(unicast, meta, learned));
    for (const auto& group : {kBroadcast, kIpv6Multicast}) {
        const Bytes frame = neighbour_solicitation(group, "2001:db8:b::7", "2001:db8:b::1");
        const NeighbourMessage message = read_neighbour(frame, meta);
        CHECK(message.solicitation);
        CHECK_FALSE(message.has_sender_mac);
        CHECK_FALSE(answered(frame, meta, message));
    }
}

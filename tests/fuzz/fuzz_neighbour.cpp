// libFuzzer target "neighbour": ARP and IPv6 neighbour discovery as the worker sees them (lib/packet/neighbour.hpp):
// parse_frame, classify_neighbour, parse_neighbour, and for a solicitation make_neighbour_reply, on arbitrary frames.
//  - every untagged ARP frame long enough is flagged as a neighbour frame; an NS or NA is flagged only with hop
//    limit 255 and no fragment header;
//  - what parse_neighbour reads is the frame's: ARP sender and target addresses and the sender's MAC (learned unless
//    the sender is 0.0.0.0, a probe); an NS's source and target and its source link-layer option (none for DAD's
//    unspecified source); an NA's target; a group (multicast, broadcast) MAC is never taken as a sender's;
//  - a reply is made only for a solicitation with a sender MAC, never to a group (multicast or broadcast) MAC, stays
//    inside the mbuf, and parses back as the advertisement of the asked address: from sluice's MAC to the sender's,
//    an ARP reply naming the asker, or an NA from the target to the NS's source with hop limit 255, sluice's MAC in
//    its target link-layer option and a valid checksum.
#include <rte_arp.h>
#include <rte_ip.h>
#include <rte_mbuf.h>

#include <vector>

#include "fake_mbuf.hpp"
#include "fuzz_common.hpp"
#include "packet/neighbour.hpp"
#include "packet/parse.hpp"

using namespace sluice;
using namespace sluice::fuzz;

namespace {

constexpr uint32_t kMaxFrame = 2048;
constexpr uint16_t kHeadroom = 128;
constexpr uint16_t kTailroom = 128;  // an NA may be longer than the NS it answers
const rte_ether_addr kOwnMac = {{0x02, 0x00, 0x00, 0x00, 0x00, 0x99}};

bool flagged(const uint8_t* f, uint32_t n, PacketMeta& meta) {
    FiveTuple tuple;
    uint32_t datagram_end;
    DropReason verdict = parse_frame(f, n, {}, meta, tuple, datagram_end);
    verdict = classify_neighbour(f, n, verdict, meta);
    return verdict == DropReason::none && (meta.flags & kMetaNeighbour);
}

void check_message(const uint8_t* f, uint32_t n, const PacketMeta& meta, const NeighbourMessage& msg) {
    FUZZ_CHECK(!(msg.has_sender_mac && rte_is_multicast_ether_addr(&msg.sender_mac)), "a group MAC would be learned");
    if (meta.family == IpFamily::ipv4) {
        const uint8_t* arp = f + meta.l3_offset;
        FUZZ_CHECK(msg.family == IpFamily::ipv4 && msg.solicitation == (be16(arp + 6) == RTE_ARP_OP_REQUEST),
                   "ARP opcode %u read as solicitation %d", be16(arp + 6), msg.solicitation);
        FUZZ_CHECK(std::memcmp(msg.sender.bytes, arp + 14, 4) == 0 && std::memcmp(msg.target.bytes, arp + 24, 4) == 0,
                   "ARP addresses misread");
        FUZZ_CHECK(std::memcmp(msg.sender_mac.addr_bytes, arp + 8, 6) == 0, "ARP sender MAC misread");
        FUZZ_CHECK(msg.has_sender_mac == (msg.sender.words[0] != 0 && !rte_is_multicast_ether_addr(&msg.sender_mac)),
                   "an ARP probe taught a MAC, or a sender none");
        return;
    }
    const uint8_t* ip = f + meta.l3_offset;
    const uint8_t* icmp = f + meta.l4_offset;
    FUZZ_CHECK(msg.family == IpFamily::ipv6 && ip[7] == 255, "ND read with hop limit %u", ip[7]);
    FUZZ_CHECK(msg.solicitation == (icmp[0] == 135), "ND type %u read as solicitation %d", icmp[0], msg.solicitation);
    FUZZ_CHECK(std::memcmp(msg.target.bytes, icmp + 8, 16) == 0, "ND target misread");
    if (msg.solicitation) {
        FUZZ_CHECK(std::memcmp(msg.sender.bytes, ip + 8, 16) == 0, "NS source misread");
        const bool unspecified = msg.sender.quads[0] == 0 && msg.sender.quads[1] == 0;
        FUZZ_CHECK(!(unspecified && msg.has_sender_mac), "a DAD NS (source ::) taught a MAC");
    } else {
        FUZZ_CHECK(msg.sender == msg.target && msg.has_sender_mac == !rte_is_multicast_ether_addr(&msg.sender_mac),
                   "an NA does not speak for its target");
    }
    (void)n;
}

void check_reply(const NeighbourMessage& asked, const uint8_t* f, uint32_t n) {
    FUZZ_CHECK(!rte_is_multicast_ether_addr(&asked.sender_mac), "a reply to a group MAC");
    const auto* eth = reinterpret_cast<const rte_ether_hdr*>(f);
    FUZZ_CHECK(rte_is_same_ether_addr(&eth->dst_addr, &asked.sender_mac) &&
                   rte_is_same_ether_addr(&eth->src_addr, &kOwnMac),
               "the reply's Ethernet addresses are not sluice's to the asker's");
    PacketMeta meta;
    FUZZ_CHECK(flagged(f, n, meta), "the reply is not a neighbour frame");
    NeighbourMessage reply;
    FUZZ_CHECK(parse_neighbour(f, n, meta, reply), "the reply does not parse");
    FUZZ_CHECK(!reply.solicitation && reply.family == asked.family, "the reply is no advertisement");
    FUZZ_CHECK(reply.sender == asked.target && rte_is_same_ether_addr(&reply.sender_mac, &kOwnMac),
               "the reply does not give sluice's MAC for the asked address");
    if (asked.family == IpFamily::ipv4) {
        const uint8_t* arp = f + meta.l3_offset;
        FUZZ_CHECK(std::memcmp(arp + 18, asked.sender_mac.addr_bytes, 6) == 0 &&
                       std::memcmp(arp + 24, asked.sender.bytes, 4) == 0,
                   "the ARP reply does not name the asker");
        return;
    }
    const auto* ip = reinterpret_cast<const rte_ipv6_hdr*>(f + meta.l3_offset);
    FUZZ_CHECK(std::memcmp(ip->dst_addr, asked.sender.bytes, 16) == 0 &&
                   std::memcmp(ip->src_addr, asked.target.bytes, 16) == 0,
               "the NA is not from the target to the NS's source");
    FUZZ_CHECK(meta.l3_offset + sizeof(rte_ipv6_hdr) + be16(f + meta.l3_offset + 4) == n,
               "the NA frame has bytes past its datagram");
    FUZZ_CHECK(rte_ipv6_udptcp_cksum_verify(ip, f + meta.l4_offset) == 0, "the NA's checksum is wrong");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size > kMaxFrame) return -1;
    const auto n = static_cast<uint32_t>(size);
    PacketMeta meta;
    const bool neighbour = flagged(data, n, meta);
    const bool arp = n >= 14 + sizeof(rte_arp_hdr) && be16(data + 12) == RTE_ETHER_TYPE_ARP;
    FUZZ_CHECK(!arp || neighbour, "an ARP frame of %u bytes is not flagged", n);
    if (!neighbour) return 0;
    NeighbourMessage msg;
    if (!parse_neighbour(data, n, meta, msg)) return 0;
    check_message(data, n, meta, msg);
    FakeMbuf m(data, n, kHeadroom, kTailroom);
    if (!make_neighbour_reply(&m.m, meta, msg, kOwnMac)) {
        FUZZ_CHECK(!msg.solicitation || !msg.has_sender_mac, "a solicitation with a sender MAC got no reply");
        return 0;
    }
    FUZZ_CHECK(msg.solicitation && msg.has_sender_mac, "a reply to a frame that asked nothing");
    FUZZ_CHECK(m.m.data_off + m.m.data_len <= m.m.buf_len && m.m.pkt_len == m.m.data_len, "the reply left the mbuf");
    check_reply(msg, m.data(), m.m.data_len);
    return 0;
}

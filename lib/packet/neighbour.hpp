// ARP (RFC 826) and IPv6 neighbour discovery (RFC 4861 sections 4.3, 4.4, 7.2) on the data plane: recognising
// solicitations and advertisements, answering a solicitation for one of sluice's addresses in place, and building a
// solicitation of our own. Pure apart from the mbufs given; fast-path safe.
#pragma once

#include <cstdint>

#include <rte_ether.h>
#include <rte_mbuf.h>

#include "common/five_tuple.hpp"
#include "packet/packet_meta.hpp"

struct rte_mempool;

namespace sluice {

struct NeighbourMessage {
    bool solicitation = false;    // ARP request / NS (else ARP reply / NA)
    bool has_sender_mac = false;  // the sender said its MAC (ARP; ND with a link-layer address option), a unicast one
    IpFamily family = IpFamily::none;
    IpAddress sender{};  // ARP sender / NS source (unspecified during DAD) / NA target
    IpAddress target{};  // the address asked about (solicitations)
    rte_ether_addr sender_mac{};
};

// Marks neighbour frames after parse_frame: an untagged ARP frame (which parse_frame refuses as not_ip) becomes
// valid with kMetaNeighbour; an ICMPv6 NS or NA gets the flag too. Any ND message (ICMPv6 133-137) in a fragmented
// packet (RFC 6980) or with a hop limit other than 255 (RFC 4861) becomes nd_invalid. Returns the new verdict.
DropReason classify_neighbour(const uint8_t* frame, uint32_t length, DropReason verdict, PacketMeta& meta);

// Reads a frame classify_neighbour flagged; false when it is malformed or not a solicitation/advertisement.
bool parse_neighbour(const uint8_t* frame, uint32_t length, const PacketMeta& meta, NeighbourMessage& message);

// Turns a solicitation for message.target (one of ours) into the answer in place: an ARP reply, or a solicited NA
// with our link-layer address, back to the sender. False when it cannot (the caller drops the frame).
bool make_neighbour_reply(rte_mbuf* m, const PacketMeta& meta, const NeighbourMessage& message,
                          const rte_ether_addr& own_mac);

// A solicitation for target from sender (one of our addresses on that port): an ARP request to the broadcast
// address, or an NS to target's solicited-node multicast group. Null when the pool is empty.
rte_mbuf* make_neighbour_solicitation(rte_mempool* pool, IpFamily family, const IpAddress& sender,
                                      const IpAddress& target, const rte_ether_addr& own_mac);

}  // namespace sluice

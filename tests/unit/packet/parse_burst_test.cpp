// parse_burst on real mbufs, as the RX lcore runs it: frames trimmed to their IP datagram (one segment or chained),
// and neighbour discovery messages that must never be learned from refused as nd_invalid (RFC 6980, RFC 4861).
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstring>
#include <vector>

#include <rte_mbuf.h>
#include <rte_mempool.h>

#include "packet/neighbour.hpp"
#include "packet/packet_meta.hpp"
#include "packet/parse_burst.hpp"

using namespace sluice;

namespace {

using Bytes = std::vector<uint8_t>;

void put16(Bytes& b, std::size_t at, uint16_t v) {
    b[at] = static_cast<uint8_t>(v >> 8);
    b[at + 1] = static_cast<uint8_t>(v);
}

Bytes ethernet(uint16_t ether_type) {
    Bytes b(14, 0);
    for (int i = 0; i < 6; ++i) b[i] = 0x02, b[6 + i] = 0x04;
    put16(b, 12, ether_type);
    return b;
}

// 10.0.0.1:5000 -> 10.0.0.2:53 with `payload` bytes of UDP data. The IPv4 checksum is left 0: the tests say the NIC
// verified it.
Bytes ipv4_udp(std::size_t payload) {
    Bytes f = ethernet(0x0800);
    Bytes ip(20 + 8 + payload, 0x61);
    ip[0] = 0x45;
    ip[1] = 0;
    put16(ip, 2, static_cast<uint16_t>(ip.size()));
    put16(ip, 4, 0);
    put16(ip, 6, 0);
    ip[8] = 64;
    ip[9] = IPPROTO_UDP;
    put16(ip, 10, 0);
    inet_pton(AF_INET, "10.0.0.1", &ip[12]);
    inet_pton(AF_INET, "10.0.0.2", &ip[16]);
    put16(ip, 20, 5000);
    put16(ip, 22, 53);
    put16(ip, 24, static_cast<uint16_t>(8 + payload));
    put16(ip, 26, 0);
    f.insert(f.end(), ip.begin(), ip.end());
    return f;
}

// An ICMPv6 neighbour solicitation for 2001:db8::2 from 2001:db8::1 with a source link-layer address option, or
// another ND type; with a fragment header (first fragment, or atomic) when asked.
enum class Fragmented { no, first, atomic };
Bytes nd_message(uint8_t type, uint8_t hop_limit, Fragmented fragmented = Fragmented::no) {
    Bytes icmp(24 + 8, 0);
    icmp[0] = type;
    inet_pton(AF_INET6, "2001:db8::2", &icmp[8]);
    icmp[24] = 1;  // source link-layer address
    icmp[25] = 1;
    for (int i = 0; i < 6; ++i) icmp[26 + i] = static_cast<uint8_t>(0x10 + i);
    Bytes fragment;
    if (fragmented != Fragmented::no) {
        fragment.assign(8, 0);
        fragment[0] = IPPROTO_ICMPV6;
        fragment[3] = fragmented == Fragmented::first ? 0x01 : 0x00;  // M flag; offset 0
        fragment[7] = 9;                                              // identification
    }
    Bytes f = ethernet(0x86dd);
    Bytes ip(40, 0);
    ip[0] = 0x60;
    put16(ip, 4, static_cast<uint16_t>(fragment.size() + icmp.size()));
    ip[6] = fragment.empty() ? IPPROTO_ICMPV6 : IPPROTO_FRAGMENT;
    ip[7] = hop_limit;
    inet_pton(AF_INET6, "2001:db8::1", &ip[8]);
    inet_pton(AF_INET6, "ff02::1:ff00:2", &ip[24]);
    f.insert(f.end(), ip.begin(), ip.end());
    f.insert(f.end(), fragment.begin(), fragment.end());
    f.insert(f.end(), icmp.begin(), icmp.end());
    return f;
}

constexpr uint8_t kRouterSolicitation = 133, kRouterAdvertisement = 134, kNeighbourSolicitation = 135,
                  kNeighbourAdvertisement = 136, kRedirect = 137, kEchoRequest = 128;

struct Pool {
    rte_mempool* pool;
    Pool() {
        if (g_packet_meta_offset < 0) REQUIRE(register_packet_meta());
        pool = rte_pktmbuf_pool_create("packet_meta_test", 63, 0, 0, RTE_MBUF_DEFAULT_BUF_SIZE, SOCKET_ID_ANY);
        REQUIRE(pool != nullptr);
    }
    ~Pool() { rte_mempool_free(pool); }

    // One mbuf holding `frame`, or a chain whose first segment holds the first `first_segment` bytes.
    rte_mbuf* mbuf(const Bytes& frame, std::size_t first_segment = 0) {
        if (first_segment == 0) first_segment = frame.size();
        rte_mbuf* head = rte_pktmbuf_alloc(pool);
        REQUIRE(head != nullptr);
        std::memcpy(rte_pktmbuf_append(head, static_cast<uint16_t>(first_segment)), frame.data(), first_segment);
        head->ol_flags |= RTE_MBUF_F_RX_IP_CKSUM_GOOD;
        for (std::size_t at = first_segment; at < frame.size();) {
            const std::size_t chunk = std::min<std::size_t>(frame.size() - at, 1000);
            rte_mbuf* segment = rte_pktmbuf_alloc(pool);
            REQUIRE(segment != nullptr);
            std::memcpy(rte_pktmbuf_append(segment, static_cast<uint16_t>(chunk)), frame.data() + at, chunk);
            REQUIRE(rte_pktmbuf_chain(head, segment) == 0);
            at += chunk;
        }
        return head;
    }

    DropReason parse(rte_mbuf* m, bool hash_flows = true) {
        DropReason verdict;
        parse_burst(&m, 1, &verdict, hash_flows);
        return verdict;
    }
};

}  // namespace

TEST_CASE("parse_burst: a frame longer than its IP datagram is trimmed to it", "[parse_burst][trailer]") {
    Pool p;
    const Bytes datagram = ipv4_udp(5);
    Bytes with_trailer = datagram;
    with_trailer.insert(with_trailer.end(), 20, 0xee);  // 20 bytes of garbage
    rte_mbuf* m = p.mbuf(with_trailer);
    REQUIRE(p.parse(m) == DropReason::none);
    CHECK(rte_pktmbuf_pkt_len(m) == datagram.size());
    CHECK(rte_pktmbuf_data_len(m) == datagram.size());
    CHECK(std::memcmp(rte_pktmbuf_mtod(m, const uint8_t*), datagram.data(), datagram.size()) == 0);
    rte_pktmbuf_free(m);

    Bytes padded = ipv4_udp(0);  // 42 bytes, padded to Ethernet's 60
    const std::size_t unpadded = padded.size();
    padded.resize(60, 0);
    m = p.mbuf(padded);
    REQUIRE(p.parse(m) == DropReason::none);
    CHECK(rte_pktmbuf_pkt_len(m) == unpadded);
    rte_pktmbuf_free(m);

    m = p.mbuf(datagram);  // nothing to trim
    REQUIRE(p.parse(m) == DropReason::none);
    CHECK(rte_pktmbuf_pkt_len(m) == datagram.size());
    rte_pktmbuf_free(m);

    Bytes arp(60, 0);  // no IP datagram: ARP keeps its padding
    put16(arp, 12, 0x0806);
    m = p.mbuf(arp);
    p.parse(m);
    CHECK(rte_pktmbuf_pkt_len(m) == 60);
    rte_pktmbuf_free(m);
    CHECK(rte_mempool_in_use_count(p.pool) == 0);
}

TEST_CASE("parse_burst: the flow hash is filled in only when the RX lcore asks for it", "[parse_burst]") {
    Pool p;
    FiveTuple flow;
    flow.family = IpFamily::ipv4;
    flow.proto = IPPROTO_UDP;
    inet_pton(AF_INET, "10.0.0.1", flow.src.bytes);
    inet_pton(AF_INET, "10.0.0.2", flow.dst.bytes);
    set_ports(flow, htons(5000), htons(53));
    rte_mbuf* m = p.mbuf(ipv4_udp(5));
    REQUIRE(p.parse(m, true) == DropReason::none);
    CHECK(packet_meta(m)->flow_hash == symmetric_flow_hash(flow));
    CHECK(packet_meta(m)->flow_hash != 0);
    REQUIRE(p.parse(m, false) == DropReason::none);  // one worker and no connection table: nothing reads it
    CHECK(packet_meta(m)->flow_hash == 0);
    CHECK(packet_meta(m)->l4_offset == 34);  // the rest of the meta is as before
    rte_pktmbuf_free(m);
}

TEST_CASE("parse_burst: a chained frame keeps its first segment, cut to the datagram, and frees the rest",
          "[parse_burst][trailer]") {
    Pool p;
    const Bytes datagram = ipv4_udp(100);
    Bytes frame = datagram;
    frame.insert(frame.end(), 2500, 0xee);  // a small datagram in a frame of three segments
    rte_mbuf* m = p.mbuf(frame, datagram.size() + 30);
    REQUIRE(m->nb_segs == 4);
    REQUIRE(p.parse(m) == DropReason::none);
    CHECK(m->nb_segs == 1);
    CHECK(m->next == nullptr);
    CHECK(rte_pktmbuf_pkt_len(m) == datagram.size());
    CHECK(rte_pktmbuf_data_len(m) == datagram.size());
    CHECK(rte_mempool_in_use_count(p.pool) == 1);  // the later segments went back to the pool
    rte_pktmbuf_free(m);

    m = p.mbuf(frame, datagram.size());  // the datagram fills the first segment exactly
    REQUIRE(p.parse(m) == DropReason::none);
    CHECK(m->nb_segs == 1);
    CHECK(rte_pktmbuf_pkt_len(m) == datagram.size());
    rte_pktmbuf_free(m);
    CHECK(rte_mempool_in_use_count(p.pool) == 0);
}

TEST_CASE("parse_burst: ND messages fragmented or with a hop limit below 255 are nd_invalid", "[parse_burst][nd]") {
    Pool p;
    const auto verdict_and_flags = [&](const Bytes& frame) {
        rte_mbuf* m = p.mbuf(frame);
        const DropReason verdict = p.parse(m);
        const uint8_t flags = packet_meta(m)->flags;
        rte_pktmbuf_free(m);
        return std::pair{verdict, flags};
    };

    // A valid solicitation and advertisement go to neighbour handling.
    for (uint8_t type : {kNeighbourSolicitation, kNeighbourAdvertisement}) {
        const auto [verdict, flags] = verdict_and_flags(nd_message(type, 255));
        CHECK(verdict == DropReason::none);
        CHECK((flags & kMetaNeighbour));
    }
    // RFC 4861 6.1, 7.1.1, 7.1.2, 8.1: a hop limit below 255 means the message crossed a router.
    for (uint8_t type :
         {kRouterSolicitation, kRouterAdvertisement, kNeighbourSolicitation, kNeighbourAdvertisement, kRedirect}) {
        INFO("type " << int(type));
        for (uint8_t hop_limit : {0, 1, 64, 254})
            CHECK(verdict_and_flags(nd_message(type, hop_limit)).first == DropReason::nd_invalid);
        // RFC 6980 5: any fragment header, an atomic fragment's too.
        CHECK(verdict_and_flags(nd_message(type, 255, Fragmented::first)).first == DropReason::nd_invalid);
        CHECK(verdict_and_flags(nd_message(type, 255, Fragmented::atomic)).first == DropReason::nd_invalid);
    }
    // Router messages with a hop limit of 255 are not sluice's to take: forwarded as before, not flagged.
    const auto [ra_verdict, ra_flags] = verdict_and_flags(nd_message(kRouterAdvertisement, 255));
    CHECK(ra_verdict == DropReason::none);
    CHECK_FALSE((ra_flags & kMetaNeighbour));
    // Other ICMPv6 is not ND: an echo request with hop limit 64, fragmented or not, passes.
    CHECK(verdict_and_flags(nd_message(kEchoRequest, 64)).first == DropReason::none);
    CHECK(verdict_and_flags(nd_message(kEchoRequest, 64, Fragmented::first)).first == DropReason::none);
    CHECK(rte_mempool_in_use_count(p.pool) == 0);
}

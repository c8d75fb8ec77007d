// The SYN proxy's pieces on their own: SipHash against its published vectors, cookies (what they accept and what
// they refuse), the MSS option reader, and the segments sluice writes, parsed back as the RX lcore would.
#include <catch2/catch.hpp>

#include <arpa/inet.h>

#include <cstring>

#include <rte_ip.h>
#include <rte_mbuf.h>
#include <rte_tcp.h>

#include "packet/checksum.hpp"
#include "packet/syn_proxy.hpp"

using namespace sluice;

namespace {

SipHashKey reference_key() {
    uint8_t bytes[16];
    for (int i = 0; i < 16; ++i) bytes[i] = static_cast<uint8_t>(i);
    SipHashKey key;
    std::memcpy(&key.k0, bytes, 8);  // little-endian words, as the reference implementation reads them
    std::memcpy(&key.k1, bytes + 8, 8);
    return key;
}

FiveTuple client_tuple(uint16_t client_port = 40000) {
    FiveTuple t{};
    t.family = IpFamily::ipv4;
    t.proto = IPPROTO_TCP;
    t.src = IpAddress::from_v4(htonl(0xc6336401));  // 198.51.100.1
    t.dst = IpAddress::from_v4(htonl(0x0a000001));  // 10.0.0.1, the VIP
    t.src_port = htons(client_port);
    t.dst_port = htons(80);
    return t;
}

}  // namespace

TEST_CASE("siphash24 gives the reference implementation's vectors") {
    const SipHashKey key = reference_key();
    uint8_t message[64];
    for (int i = 0; i < 64; ++i) message[i] = static_cast<uint8_t>(i);
    CHECK(siphash24(key, message, 0) == 0x726fdb47dd0e0e31ULL);
    CHECK(siphash24(key, message, 15) == 0xa129ca6149be45e5ULL);  // the paper's Appendix A example
    CHECK(siphash24(key, message, 8) == 0x93f5f5799a932462ULL);
    CHECK(siphash24(key, message, 63) == 0x958a324ceb064572ULL);
}

TEST_CASE("a SYN cookie is accepted for its tuple and ISN in its period and the next, and nowhere else") {
    SipHashKey key{0x0123456789abcdefULL, 0xfedcba9876543210ULL};
    const FiveTuple tuple = client_tuple();
    const uint32_t isn = 0x11223344;
    for (uint8_t mss = 0; mss < 4; ++mss) {
        const uint32_t cookie = syn_cookie_make(key, tuple, isn, 1000, mss);
        CHECK(syn_cookie_check(key, tuple, isn, cookie, 1000) == mss);
        CHECK(syn_cookie_check(key, tuple, isn, cookie, 1001) == mss);
        CHECK(syn_cookie_check(key, tuple, isn, cookie, 1002) == -1);  // expired
        CHECK(syn_cookie_check(key, tuple, isn, cookie, 999) == -1);   // not yet made
        CHECK(syn_cookie_check(key, tuple, isn + 1, cookie, 1000) == -1);
        CHECK(syn_cookie_check(key, client_tuple(40001), isn, cookie, 1000) == -1);
        SipHashKey other = key;
        other.k1 ^= 1;
        CHECK(syn_cookie_check(other, tuple, isn, cookie, 1000) == -1);
        for (int bit = 0; bit < 32; ++bit)  // the MSS bits too: the MAC covers them
            CHECK(syn_cookie_check(key, tuple, isn, cookie ^ (1u << bit), 1000) == -1);
    }
    // The period crosses the 3-bit wrap of the cookie's period field.
    const uint32_t cookie = syn_cookie_make(key, tuple, isn, 7, 2);
    CHECK(syn_cookie_check(key, tuple, isn, cookie, 8) == 2);
    CHECK(syn_cookie_check(key, tuple, isn, cookie, 15) == -1);  // same low bits, 8 periods later
}

TEST_CASE("the cookie's MSS is the largest table value the client can take") {
    CHECK(syn_cookie_mss_index(0) == 0);
    CHECK(kSynCookieMss[syn_cookie_mss_index(536)] == 536);
    CHECK(kSynCookieMss[syn_cookie_mss_index(1439)] == 1220);
    CHECK(kSynCookieMss[syn_cookie_mss_index(1440)] == 1440);
    CHECK(kSynCookieMss[syn_cookie_mss_index(1460)] == 1460);
    CHECK(kSynCookieMss[syn_cookie_mss_index(8960)] == 1460);
}

TEST_CASE("tcp_mss_option finds the MSS among other options and gives up on malformed ones") {
    uint8_t header[40] = {};
    // NOP, NOP, SACK-permitted (4, 2), MSS 1400, window scale (3, 3, 7), EOL
    const uint8_t options[] = {1, 1, 4, 2, 2, 4, 0x05, 0x78, 3, 3, 7, 0};
    std::memcpy(header + 20, options, sizeof options);
    CHECK(tcp_mss_option(header, 32) == 1400);
    CHECK(tcp_mss_option(header, 20) == 0);  // no options
    CHECK(tcp_mss_option(header, 26) == 0);  // the MSS option would run past the header
    header[22] = 4;
    header[23] = 0;  // a length below 2: the walk stops
    CHECK(tcp_mss_option(header, 32) == 0);
}

TEST_CASE("write_tcp_segment builds a frame that parses back with valid checksums, and the shifts keep them valid") {
    rte_mempool* pool = rte_pktmbuf_pool_create("syn_proxy_test", 63, 0, 0, RTE_MBUF_DEFAULT_BUF_SIZE, SOCKET_ID_ANY);
    REQUIRE(pool);
    for (const IpFamily family : {IpFamily::ipv4, IpFamily::ipv6}) {
        rte_mbuf* m = rte_pktmbuf_alloc(pool);
        REQUIRE(m);
        REQUIRE(rte_pktmbuf_append(m, 200));  // a longer frame than the segment: it is trimmed
        std::memset(rte_pktmbuf_mtod(m, uint8_t*), 0xee, 200);
        TcpSegment segment;
        segment.family = family;
        if (family == IpFamily::ipv4) {
            segment.src = IpAddress::from_v4(htonl(0x0a000001));
            segment.dst = IpAddress::from_v4(htonl(0xc6336401));
        } else {
            uint8_t a[16] = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
            segment.src = IpAddress::from_v6(a);
            a[15] = 2;
            segment.dst = IpAddress::from_v6(a);
        }
        segment.src_port = htons(80);
        segment.dst_port = htons(40000);
        segment.seq = 0xdeadbeef;
        segment.ack = 0x11223345;
        segment.flags = RTE_TCP_SYN_FLAG | RTE_TCP_ACK_FLAG;
        segment.window = 65535;
        segment.mss = 1460;
        PacketMeta meta{};
        meta.flags = kMetaFragment;  // stale: the segment is not a fragment
        const rte_ether_addr dst{{2, 0, 0, 0, 0, 1}}, src{{2, 0, 0, 0, 0, 2}};
        REQUIRE(write_tcp_segment(m, meta, segment, dst, src));
        const uint32_t ip_length = family == IpFamily::ipv4 ? 20 : 40;
        CHECK(rte_pktmbuf_pkt_len(m) == 14 + ip_length + 24);
        CHECK(meta.l3_offset == 14);
        CHECK(meta.l4_offset == 14 + ip_length);
        CHECK((meta.flags & kMetaFragment) == 0);

        PacketMeta parsed{};
        FiveTuple tuple{};
        uint32_t datagram_end = 0;
        REQUIRE(parse_frame(rte_pktmbuf_mtod(m, const uint8_t*), rte_pktmbuf_pkt_len(m), ParseOptions{}, parsed, tuple,
                            datagram_end) == DropReason::none);
        CHECK(datagram_end == rte_pktmbuf_pkt_len(m));
        CHECK(tuple.src == segment.src);
        CHECK(tuple.dst == segment.dst);
        CHECK(tuple.src_port == htons(80));
        CHECK(tuple.dst_port == htons(40000));
        uint8_t* l3 = rte_pktmbuf_mtod_offset(m, uint8_t*, 14);
        auto* tcp = rte_pktmbuf_mtod_offset(m, rte_tcp_hdr*, meta.l4_offset);
        const auto l4_valid = [&] {
            return family == IpFamily::ipv4
                       ? rte_ipv4_udptcp_cksum_verify(reinterpret_cast<rte_ipv4_hdr*>(l3), tcp) == 0
                       : rte_ipv6_udptcp_cksum_verify(reinterpret_cast<rte_ipv6_hdr*>(l3), tcp) == 0;
        };
        CHECK(l4_valid());
        if (family == IpFamily::ipv4) CHECK(checksum_compute(l3, 20) == 0);
        CHECK(tcp_mss_option(reinterpret_cast<uint8_t*>(tcp), 24) == 1460);
        CHECK(ntohl(tcp->sent_seq) == 0xdeadbeef);
        CHECK(ntohl(tcp->recv_ack) == 0x11223345);

        tcp_shift_seq(reinterpret_cast<uint8_t*>(tcp), 0x30000000);  // wraps
        tcp_shift_ack(reinterpret_cast<uint8_t*>(tcp), uint32_t(-5));
        CHECK(ntohl(tcp->sent_seq) == 0x0eadbeef);
        CHECK(ntohl(tcp->recv_ack) == 0x11223340);
        CHECK(l4_valid());
        rte_pktmbuf_free(m);
    }
    rte_mempool_free(pool);
}

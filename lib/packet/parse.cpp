#include "packet/parse.hpp"

#include <rte_byteorder.h>
#include <rte_ether.h>
#include <rte_icmp.h>
#include <rte_ip.h>
#include <rte_tcp.h>
#include <rte_udp.h>

#include "common/compiler.hpp"
#include "common/ip_proto.hpp"
#include "packet/checksum.hpp"
#include "packet/packet_meta.hpp"

namespace sluice {
namespace {

constexpr uint16_t kEtherIpv4 = RTE_BE16(RTE_ETHER_TYPE_IPV4);
constexpr uint16_t kEtherIpv6 = RTE_BE16(RTE_ETHER_TYPE_IPV6);
constexpr uint16_t kEtherVlan = RTE_BE16(RTE_ETHER_TYPE_VLAN);
constexpr uint16_t kEtherQinq = RTE_BE16(RTE_ETHER_TYPE_QINQ);
constexpr int kMaxVlanTags = 2;
constexpr int kMaxIpv6ExtHeaders = 8;

// IPv4 option types (RFC 791 3.1; IANA "IP Option Numbers"), copied flag and class included.
constexpr uint8_t kIpv4OptionEnd = 0, kIpv4OptionNop = 1;
constexpr uint8_t kIpv4OptionLooseSourceRoute = 131, kIpv4OptionStrictSourceRoute = 137;

constexpr uint8_t kIpv6RoutingType0 = 0;  // RFC 5095 deprecates it

uint16_t load_be16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }
uint16_t load_raw16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | p[1] << 8); }

// The identifier is the flow's "port" only for the echo types of the packet's own ICMP protocol.
bool is_icmp_echo(uint8_t proto, uint8_t type) {
    if (proto == kIpProtoIcmp) return type == kIcmpEchoRequest || type == kIcmpEchoReply;
    return proto == kIpProtoIcmpv6 && (type == kIcmp6EchoRequest || type == kIcmp6EchoReply);
}

// The query a reply type answers (ICMP timestamp, information, address mask; ICMPv6 node information), or 0.
uint8_t icmp_query_answered(uint8_t proto, uint8_t type) {
    if (proto == kIpProtoIcmp) return (type == 14 || type == 16 || type == 18) ? static_cast<uint8_t>(type - 1) : 0;
    return type == 140 ? 139 : 0;
}

// The flow "ports" of an ICMP/ICMPv6 message that is not an error (the header at icmp, 8 bytes), so that only a
// message and its answer share a connection, as Linux conntrack tracks them by type and identifier: an echo's
// identifier in both; a query's type as its destination port, and its reply's as its source port (the reply is
// the query's reverse); any other type its own type, from port 0. One allowed type then lets no other follow it.
// Never an echo's ports: those are equal, these are 0 and a type other than 0 (ICMPv6 type 0 is unassigned).
void icmp_flow_ports(uint8_t proto, const uint8_t* icmp, uint16_t& src_port, uint16_t& dst_port) {
    if (is_icmp_echo(proto, icmp[0])) {
        src_port = dst_port = load_raw16(icmp + 4);
        return;
    }
    const uint8_t answered = icmp_query_answered(proto, icmp[0]);
    const uint8_t type_be[2] = {0, answered ? answered : icmp[0]};
    src_port = answered ? load_raw16(type_be) : 0;
    dst_port = answered ? 0 : load_raw16(type_be);
}

void set_icmp_ports(FiveTuple& tuple, uint8_t proto, const uint8_t* icmp) {
    uint16_t src_port, dst_port;
    icmp_flow_ports(proto, icmp, src_port, dst_port);
    set_ports(tuple, src_port, dst_port);
}

// The flow an ICMP error quotes: the IP header and at least 8 bytes of L4 header (RFC 792, RFC 4443) that the
// endpoint of a tracked connection sent. The quote is often cut short, so only those 8 bytes are read.
bool read_quoted_tuple(const uint8_t* q, uint32_t avail, IpFamily family, FiveTuple& tuple) {
    tuple = FiveTuple{};
    tuple.family = family;
    uint32_t header_length;
    if (family == IpFamily::ipv4) {
        if (avail < sizeof(rte_ipv4_hdr) || (q[0] >> 4) != 4) return false;
        header_length = (q[0] & 0x0f) * 4u;
        if (header_length < sizeof(rte_ipv4_hdr) || header_length > avail) return false;
        tuple.proto = q[9];
        std::memcpy(&tuple.src.words[0], q + 12, 4);
        std::memcpy(&tuple.dst.words[0], q + 16, 4);
        if (load_be16(q + 6) & 0x1fff) return true;  // a later fragment quotes no ports
    } else {
        if (avail < sizeof(rte_ipv6_hdr) || (q[0] >> 4) != 6) return false;
        header_length = sizeof(rte_ipv6_hdr);
        tuple.proto = q[6];  // extension headers in a quote are not walked: such a quote matches no port-based flow
        std::memcpy(tuple.src.bytes, q + 8, 16);
        std::memcpy(tuple.dst.bytes, q + 24, 16);
    }
    const uint8_t* l4 = q + header_length;
    const uint32_t l4_avail = avail - header_length;
    if (tuple.proto == kIpProtoTcp || tuple.proto == kIpProtoUdp || tuple.proto == kIpProtoSctp) {
        if (l4_avail < 8) return false;
        set_ports(tuple, load_raw16(l4), load_raw16(l4 + 2));
    } else if (tuple.proto == kIpProtoIcmp || tuple.proto == kIpProtoIcmpv6) {
        if (l4_avail < 8) return false;
        if (!is_icmp_error(tuple.proto, l4[0])) set_icmp_ports(tuple, tuple.proto, l4);
    }
    return true;
}

// Walks the options of an IPv4 header (at most 40 bytes, RFC 791 3.1): EOL ends the list, NOP is one byte, every
// other option carries a length of at least 2 that stays inside the header. Source routes are refused: they let the
// sender pick the path through (and around) filters, and RFC 7126 4.3 and 4.4 advise routers to drop them by default.
// Other options (record route, timestamp, router alert...) pass.
DropReason check_ipv4_options(const uint8_t* options, uint32_t length) {
    uint32_t at = 0;
    while (at < length) {
        const uint8_t type = options[at];
        if (type == kIpv4OptionEnd) break;
        if (type == kIpv4OptionNop) {
            ++at;
            continue;
        }
        if (length - at < 2) return DropReason::ipv4_bad_option;
        const uint32_t option_length = options[at + 1];
        if (option_length < 2 || option_length > length - at) return DropReason::ipv4_bad_option;
        if (type == kIpv4OptionLooseSourceRoute || type == kIpv4OptionStrictSourceRoute)
            return DropReason::ipv4_source_route;
        at += option_length;
    }
    return DropReason::none;
}

// Whether a first fragment ends before its L4 header does (RFC 1858's tiny fragment: the ports or the TCP flags
// would come in a later fragment, where no filter looks).
bool l4_header_cut(const uint8_t* frame, uint32_t l4, uint32_t end, uint8_t proto) {
    const uint32_t avail = end - l4;
    switch (proto) {
    case kIpProtoTcp:
        return avail < sizeof(rte_tcp_hdr) || (frame[l4 + 12] >> 4) * 4u > avail || (frame[l4 + 12] >> 4) < 5;
    case kIpProtoUdp:
    case kIpProtoIcmp:
    case kIpProtoIcmpv6: return avail < 8;
    case kIpProtoSctp: return avail < 12;
    default: return false;
    }
}

// Fills the ports of the tuple from the L4 header at frame[l4], which ends at frame[end]. An ICMP error replaces the
// tuple with the flow it quotes, so it reaches (and is judged by) that flow's worker.
DropReason parse_l4(const uint8_t* frame, uint32_t l4, uint32_t end, uint8_t proto, PacketMeta& meta,
                    FiveTuple& tuple) {
    const uint32_t avail = end - l4;
    const uint8_t* h = frame + l4;
    switch (proto) {
    case kIpProtoTcp: {
        if (avail < sizeof(rte_tcp_hdr)) return DropReason::l4_truncated;
        const uint32_t data_offset = (h[12] >> 4) * 4u;
        if (data_offset < sizeof(rte_tcp_hdr) || data_offset > avail) return DropReason::tcp_bad_offset;
        set_ports(tuple, load_raw16(h), load_raw16(h + 2));
        return DropReason::none;
    }
    case kIpProtoUdp: {
        if (avail < sizeof(rte_udp_hdr)) return DropReason::l4_truncated;
        const uint32_t udp_length = load_be16(h + 4);
        if (udp_length < sizeof(rte_udp_hdr) || udp_length > avail) return DropReason::udp_bad_length;
        set_ports(tuple, load_raw16(h), load_raw16(h + 2));
        return DropReason::none;
    }
    case kIpProtoSctp: {
        // RFC 9260 3.1: a 12-byte common header whose first two fields are the ports (rules match on them).
        constexpr uint32_t kSctpCommonHeader = 12;
        if (avail < kSctpCommonHeader) return DropReason::l4_truncated;
        set_ports(tuple, load_raw16(h), load_raw16(h + 2));
        return DropReason::none;
    }
    case kIpProtoIcmp:
    case kIpProtoIcmpv6: {
        if (avail < sizeof(rte_icmp_hdr)) return DropReason::l4_truncated;
        const uint8_t type = h[0];
        if (is_icmp_error(proto, type)) {
            if (!read_quoted_tuple(h + 8, avail - 8, tuple.family, tuple)) return DropReason::icmp_bad_quote;
            meta.flags |= kMetaIcmpError;
        } else {
            set_icmp_ports(tuple, proto, h);
        }
        return DropReason::none;
    }
    default: return DropReason::none;  // other protocols flow on addresses alone
    }
}

DropReason parse_ipv4(const uint8_t* frame, uint32_t length, uint32_t l3, ParseOptions options, PacketMeta& meta,
                      FiveTuple& tuple, uint32_t& datagram_end) {
    const uint32_t avail = length - l3;
    if (avail < sizeof(rte_ipv4_hdr)) return DropReason::ipv4_truncated;
    const uint8_t* ip = frame + l3;
    if ((ip[0] >> 4) != 4) return DropReason::ipv4_bad_version;
    const uint32_t header_length = (ip[0] & 0x0f) * 4u;
    if (header_length < sizeof(rte_ipv4_hdr)) return DropReason::ipv4_bad_ihl;
    if (header_length > avail) return DropReason::ipv4_truncated;
    const uint32_t total_length = load_be16(ip + 2);
    // A frame longer than the datagram carries padding (trimmed: datagram_end); a shorter one lost data.
    if (total_length < header_length || total_length > avail) return DropReason::ipv4_bad_length;
    if (!options.ipv4_checksum_verified && checksum_ipv4_header(ip, header_length) != 0)
        return DropReason::ipv4_bad_checksum;
    if (SLUICE_UNLIKELY(header_length > sizeof(rte_ipv4_hdr))) {
        const DropReason verdict = check_ipv4_options(ip + sizeof(rte_ipv4_hdr), header_length - sizeof(rte_ipv4_hdr));
        if (verdict != DropReason::none) return verdict;
    }
    datagram_end = l3 + total_length;

    meta.family = IpFamily::ipv4;
    meta.l4_proto = ip[9];
    tuple.family = IpFamily::ipv4;
    tuple.proto = ip[9];
    std::memcpy(&tuple.src.words[0], ip + 12, 4);
    std::memcpy(&tuple.dst.words[0], ip + 16, 4);

    const uint16_t fragment = load_be16(ip + 6);
    const bool more_fragments = fragment & 0x2000;
    const uint16_t fragment_offset = fragment & 0x1fff;
    if (more_fragments || fragment_offset) {
        // Every fragment of a datagram hashes on addresses and protocol alone so all reach one worker.
        meta.flags |= kMetaFragment;
        meta.l4_offset = fragment_offset ? 0 : static_cast<uint16_t>(l3 + header_length);
        if (!fragment_offset && l4_header_cut(frame, meta.l4_offset, l3 + total_length, meta.l4_proto))
            meta.flags |= kMetaFragmentTiny;
        return DropReason::none;
    }
    meta.l4_offset = static_cast<uint16_t>(l3 + header_length);
    return parse_l4(frame, meta.l4_offset, l3 + total_length, meta.l4_proto, meta, tuple);
}

DropReason parse_ipv6(const uint8_t* frame, uint32_t length, uint32_t l3, PacketMeta& meta, FiveTuple& tuple,
                      uint32_t& datagram_end) {
    const uint32_t avail = length - l3;
    if (avail < sizeof(rte_ipv6_hdr)) return DropReason::ipv6_truncated;
    const uint8_t* ip = frame + l3;
    if ((ip[0] >> 4) != 6) return DropReason::ipv6_bad_version;
    const uint32_t end = l3 + sizeof(rte_ipv6_hdr) + load_be16(ip + 4);
    if (end > length) return DropReason::ipv6_bad_length;
    datagram_end = end;

    meta.family = IpFamily::ipv6;
    tuple.family = IpFamily::ipv6;
    std::memcpy(tuple.src.bytes, ip + 8, 16);
    std::memcpy(tuple.dst.bytes, ip + 24, 16);

    uint8_t next = ip[6];
    uint32_t offset = l3 + sizeof(rte_ipv6_hdr);
    bool non_first_fragment = false;
    for (int i = 0;; ++i) {
        uint32_t ext_length;
        switch (next) {
        case kIpProtoHopByHop:
            // RFC 8200 4.1: hop-by-hop options come right after the IPv6 header or not at all.
            if (i != 0) return DropReason::ipv6_bad_ext_header;
            [[fallthrough]];
        case kIpProtoDestOpts:
            if (end - offset < 8) return DropReason::ipv6_bad_ext_header;
            ext_length = (frame[offset + 1] + 1u) * 8u;
            break;
        case kIpProtoRouting:
            if (end - offset < 8) return DropReason::ipv6_bad_ext_header;
            // RFC 5095: a type 0 header still to be processed (segments left) is an amplification and filter-bypass
            // tool; with none left it is ignored like any unrecognised type.
            if (frame[offset + 2] == kIpv6RoutingType0 && frame[offset + 3] != 0) return DropReason::ipv6_routing_type0;
            ext_length = (frame[offset + 1] + 1u) * 8u;
            break;
        case kIpProtoAh:
            if (end - offset < 8) return DropReason::ipv6_bad_ext_header;
            ext_length = (frame[offset + 1] + 2u) * 4u;
            break;
        case kIpProtoFragment: {
            if (end - offset < 8) return DropReason::ipv6_bad_ext_header;
            ext_length = 8;
            const uint16_t fragment = load_be16(frame + offset + 2);
            meta.flags |= kMetaFragment;
            non_first_fragment = (fragment & 0xfff8) != 0;
            break;
        }
        default: ext_length = 0; break;
        }
        if (ext_length == 0) break;
        if (i == kMaxIpv6ExtHeaders || ext_length > end - offset) return DropReason::ipv6_bad_ext_header;
        next = frame[offset];
        offset += ext_length;
        // RFC 8200 4.5: after a non-first fragment's header comes data, never a header, whatever the next header
        // field names (it is the fragmentable part's first header, in the first fragment).
        if (non_first_fragment) break;
    }
    meta.l4_proto = next;
    tuple.proto = next;
    if (meta.flags & kMetaFragment) {
        meta.l4_offset = non_first_fragment ? 0 : static_cast<uint16_t>(offset);
        if (!non_first_fragment && l4_header_cut(frame, offset, end, next)) meta.flags |= kMetaFragmentTiny;
        return DropReason::none;
    }
    meta.l4_offset = static_cast<uint16_t>(offset);
    return parse_l4(frame, offset, end, next, meta, tuple);
}

}  // namespace

void tuple_from_meta(const uint8_t* frame, uint32_t length, const PacketMeta& meta, FiveTuple& tuple,
                     uint8_t& tcp_flags) {
    tcp_flags = 0;
    const uint8_t* l4 = meta.l4_offset ? frame + meta.l4_offset : nullptr;
    if (meta.flags & kMetaIcmpError) {
        read_quoted_tuple(l4 + 8, length - meta.l4_offset - 8, meta.family, tuple);  // validated by parse_frame
        return;
    }
    const uint8_t* ip = frame + meta.l3_offset;
    tuple = FiveTuple{};
    tuple.family = meta.family;
    tuple.proto = meta.l4_proto;
    if (meta.family == IpFamily::ipv4) {
        std::memcpy(&tuple.src.words[0], ip + 12, 4);
        std::memcpy(&tuple.dst.words[0], ip + 16, 4);
    } else {
        std::memcpy(tuple.src.bytes, ip + 8, 16);
        std::memcpy(tuple.dst.bytes, ip + 24, 16);
    }
    if (meta.flags & kMetaFragment) {
        // A fragment's ports are its datagram's, which the RX lcore learnt from the first fragment
        // (pipeline/fragments.hpp). A first fragment with its whole L4 header has them itself.
        if (meta.flags & kMetaFragmentPorts) {
            set_ports(tuple, meta.fragment_src_port, meta.fragment_dst_port);
            if (l4 && meta.l4_proto == kIpProtoTcp) tcp_flags = l4[13];
        }
        return;  // as parse_frame left it: ports 0 until the RX lcore gave the datagram's
    }
    if (!l4) return;
    switch (meta.l4_proto) {
    case kIpProtoTcp: tcp_flags = l4[13]; [[fallthrough]];
    case kIpProtoUdp:
    case kIpProtoSctp: set_ports(tuple, load_raw16(l4), load_raw16(l4 + 2)); break;
    case kIpProtoIcmp:
    case kIpProtoIcmpv6:
        set_icmp_ports(tuple, meta.l4_proto, l4);  // errors returned above
        break;
    default: break;
    }
}

void icmp_type_code(const uint8_t* frame, const PacketMeta& meta, uint8_t& type, uint8_t& code) {
    type = code = 0;
    if (meta.l4_offset == 0 || (meta.flags & kMetaIcmpError)) return;
    if (meta.l4_proto != (meta.family == IpFamily::ipv4 ? kIpProtoIcmp : kIpProtoIcmpv6)) return;
    type = frame[meta.l4_offset];
    code = frame[meta.l4_offset + 1];
}

void first_fragment_ports(const uint8_t* frame, const PacketMeta& meta, uint16_t& src_port, uint16_t& dst_port) {
    const uint8_t* l4 = frame + meta.l4_offset;
    src_port = dst_port = 0;
    switch (meta.l4_proto) {
    case kIpProtoTcp:
    case kIpProtoUdp:
    case kIpProtoSctp:
        src_port = load_raw16(l4);
        dst_port = load_raw16(l4 + 2);
        break;
    case kIpProtoIcmp:
    case kIpProtoIcmpv6:
        if (!is_icmp_error(meta.l4_proto, l4[0])) icmp_flow_ports(meta.l4_proto, l4, src_port, dst_port);
        break;
    default: break;
    }
}

FragmentInfo fragment_info(const uint8_t* frame, const PacketMeta& meta) {
    const uint8_t* ip = frame + meta.l3_offset;
    if (meta.family == IpFamily::ipv4) {
        const uint16_t fragment = load_be16(ip + 6);
        return {load_be16(ip + 4), (fragment & 0x1fffu) * 8u, (fragment & 0x2000) != 0};
    }
    // parse_frame walked this chain already and found a fragment header in it.
    uint8_t next = ip[6];
    const uint8_t* header = ip + sizeof(rte_ipv6_hdr);
    for (int i = 0; i <= kMaxIpv6ExtHeaders && next != kIpProtoFragment; ++i) {
        const uint32_t length = next == kIpProtoAh ? (header[1] + 2u) * 4u : (header[1] + 1u) * 8u;
        next = header[0];
        header += length;
    }
    const uint16_t fragment = load_be16(header + 2);
    uint32_t id;
    std::memcpy(&id, header + 4, 4);
    return {rte_be_to_cpu_32(id), (fragment & 0xfff8u), (fragment & 1) != 0};
}

DropReason parse_frame(const uint8_t* frame, uint32_t length, ParseOptions options, PacketMeta& meta, FiveTuple& tuple,
                       uint32_t& datagram_end) {
    meta = PacketMeta{};
    tuple = FiveTuple{};
    datagram_end = length;
    if (SLUICE_UNLIKELY(length < sizeof(rte_ether_hdr))) return DropReason::l2_truncated;

    uint32_t l3 = sizeof(rte_ether_hdr);
    uint16_t ether_type = load_raw16(frame + 12);
    for (int tags = 0; ether_type == kEtherVlan || ether_type == kEtherQinq; ++tags) {
        if (tags == kMaxVlanTags) return DropReason::vlan_too_deep;
        if (length < l3 + sizeof(rte_vlan_hdr)) return DropReason::l2_truncated;
        ether_type = load_raw16(frame + l3 + 2);
        l3 += sizeof(rte_vlan_hdr);
    }
    meta.l3_offset = static_cast<uint16_t>(l3);

    DropReason verdict;
    if (SLUICE_LIKELY(ether_type == kEtherIpv4))
        verdict = parse_ipv4(frame, length, l3, options, meta, tuple, datagram_end);
    else if (ether_type == kEtherIpv6) verdict = parse_ipv6(frame, length, l3, meta, tuple, datagram_end);
    else return DropReason::not_ip;
    if (verdict != DropReason::none) return verdict;

    if (options.hash_flow) meta.flow_hash = symmetric_flow_hash(tuple);
    return DropReason::none;
}

}  // namespace sluice

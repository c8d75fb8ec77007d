// Every reason sluice drops a packet, declared once: the enum, the metric label and the help text all come from
// this table (the VPP acl plugin's X-macro habit), so a new reason cannot be counted without being named.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace sluice {

#define SLUICE_DROP_REASONS(X)                                                                                         \
    X(l2_truncated, "frame shorter than its Ethernet and VLAN headers")                                                \
    X(not_ip, "ethertype is neither IPv4 nor IPv6")                                                                    \
    X(vlan_too_deep, "more than two VLAN tags")                                                                        \
    X(vlan_unknown, "tagged for a VLAN its port does not carry (ports[].vlans), 802.1ad, or two tags")                 \
    X(ipv4_truncated, "frame ends inside the IPv4 header")                                                             \
    X(ipv4_bad_version, "IPv4 ethertype but IP version is not 4")                                                      \
    X(ipv4_bad_ihl, "IPv4 header length (IHL) below 5")                                                                \
    X(ipv4_bad_length, "IPv4 total length below the header length or beyond the frame")                                \
    X(ipv4_bad_checksum, "IPv4 header checksum is wrong")                                                              \
    X(ipv4_bad_option, "IPv4 option list malformed: an option length below 2 or past the header (RFC 791)")            \
    X(ipv4_source_route, "IPv4 loose or strict source route option (RFC 7126 4.3, 4.4: routers drop them by default)") \
    X(ipv6_truncated, "frame ends inside the IPv6 header")                                                             \
    X(ipv6_bad_version, "IPv6 ethertype but IP version is not 6")                                                      \
    X(ipv6_bad_length, "IPv6 payload length beyond the frame")                                                         \
    X(ipv6_bad_ext_header, "IPv6 extension header chain truncated or longer than 8 headers, or hop-by-hop options "    \
                           "not first (RFC 8200 4.1)")                                                                 \
    X(ipv6_routing_type0, "IPv6 type 0 routing header with segments left (deprecated by RFC 5095)")                    \
    X(l4_truncated, "packet ends inside its TCP, UDP or ICMP header")                                                  \
    X(tcp_bad_offset, "TCP data offset below 5 or beyond the packet")                                                  \
    X(udp_bad_length, "UDP length below 8 or beyond the packet")                                                       \
    X(icmp_bad_quote, "ICMP error quoting a truncated or malformed header")                                            \
    X(nd_invalid, "an ND message (ICMPv6 133-137) fragmented (RFC 6980) or with a hop limit not 255 (RFC 4861): "      \
                  "never learned from")                                                                                \
    X(blocklisted, "source in an early-drop prefix set, dropped on the RX lcore")                                      \
    X(martian_source_broadcast, "source 255.255.255.255 or the directed broadcast of a port's network")                \
    X(martian_source_multicast, "source multicast: 224.0.0.0/4 or ff00::/8")                                           \
    X(martian_source_unspecified, "source in 0.0.0.0/8 (this network) or ::")                                          \
    X(martian_source_loopback, "source loopback: 127.0.0.0/8 or ::1")                                                  \
    X(martian_source_link_local, "source link-local (169.254.0.0/16, fe80::/10) to an address not sluice's own")       \
    X(martian_source_reserved, "source in 240.0.0.0/4 (class E, reserved)")                                            \
    X(martian_source_v4_mapped, "IPv6 source IPv4-mapped: ::ffff:0:0/96")                                              \
    X(martian_source_own, "source one of sluice's own addresses (a port's, a NAT pool's, a VIP of nat services "       \
                          "only), arriving from the network")                                                          \
    X(martian_destination_broadcast, "destination 255.255.255.255 or the directed broadcast of a port's network")      \
    X(martian_destination_multicast, "a TCP packet to a multicast address (224.0.0.0/4, ff00::/8)")                    \
    X(martian_destination_unspecified, "destination in 0.0.0.0/8 or ::")                                               \
    X(martian_destination_loopback, "destination loopback: 127.0.0.0/8 or ::1")                                        \
    X(martian_destination_link_local, "destination link-local (169.254.0.0/16, fe80::/10), not sluice's own")          \
    X(martian_destination_reserved, "destination in 240.0.0.0/4 (class E, reserved)")                                  \
    X(martian_land, "source address equal to the destination address (a land attack)")                                 \
    X(martian_port_zero, "a TCP or UDP packet with source or destination port 0")                                      \
    X(multicast_not_routed, "a packet to a multicast group (224.0.0.0/4, ff00::/8) other than TCP: sluice routes no "  \
                            "multicast")                                                                               \
    X(rule_deny, "a new connection denied by a rule or the default")                                                   \
    X(rule_reject, "a new connection rejected by a rule (a TCP RST or ICMP unreachable was sent)")                     \
    X(ct_no_connection, "TCP packet that cannot open a connection (no SYN) and has none")                              \
    X(ct_invalid, "packet invalid for its connection's TCP state")                                                     \
    X(tcp_out_of_window, "TCP data or ACK outside its connection's window (tcp_window_check strict)")                  \
    X(tcp_rst_out_of_window, "TCP RST outside its connection's window: dropped, the connection kept (RFC 5961 3.2)")   \
    X(tcp_rst_challenged, "TCP RST in the window but not at the next sequence: the connection kept, a challenge ACK "  \
                          "sent within the error-reply budget (RFC 5961 3.2)")                                         \
    X(tcp_syn_challenged, "TCP SYN on an established connection: the connection kept, a challenge ACK sent within "    \
                          "the error-reply budget (RFC 5961 4.2)")                                                     \
    X(ct_table_full, "connection table (or its IPv6 share) full: new connection refused, old ones kept")               \
    X(rate_limited, "a new connection over its rule's rate limit")                                                     \
    X(new_conn_limited, "a new connection over its worker's cap (dataplane: max_new_connections_per_second)")          \
    X(icmp_unrelated, "ICMP error quoting no tracked connection")                                                      \
    X(lb_no_backend, "a new connection to a service with no usable backend (all down or draining)")                    \
    X(lb_backend_removed, "packet of a connection whose backend was removed (service: removed_backends: drop)")        \
    X(lb_nat_no_state, "a non-SYN TCP packet to a nat service with no connection (no shared state across instances)")  \
    X(syn_proxy_bad_cookie, "an ACK with no connection to a syn_proxy service whose cookie is wrong or expired")       \
    X(syn_proxy_pending,                                                                                               \
      "a client packet of a syn_proxy connection whose backend has not answered yet (it is resent)")                   \
    X(nat_ports_exhausted, "a new NAT connection found no free port toward its backend on the pool address")           \
    X(nat_no_connection, "packet to a NAT pool address that belongs to no connection")                                 \
    X(nat_reply_taken, "a new NAT connection whose replies' tuple belongs to another tracked connection: refused")     \
    X(to_own_address, "a new packet to one of sluice's own addresses that nothing of sluice's serves: a port's "       \
                      "address (other than a ping), or a VIP on a port or protocol no service listens on")             \
    X(echo_unanswered, "an echo request to one of sluice's addresses that gets no reply (a fragment, IPv6 extension "  \
                       "headers, a bad checksum, a source that is no unicast address)")                                \
    X(tunnel_too_big, "packet too big for the egress MTU once encapsulated")                                           \
    X(neighbour_unresolved, "the next hop or backend has no MAC yet (ARP/ND resolution pending)")                      \
    X(neighbour_frame, "an ARP or ND frame sluice took (learned from; not forwarded)")                                 \
    X(fragment_invalid,                                                                                                \
      "a tiny first fragment (L4 header cut) or a TCP fragment overlapping the TCP header (RFC 1858)")                 \
    X(fragment_unmatched, "a later fragment whose first fragment was not seen (connection tracking on)")               \
    X(fragment_duplicate, "a second first fragment of a datagram pending on the RX lcore (the first one is kept)")     \
    X(fragment_source_limit, "a fragmented datagram from a source (IPv4 address, IPv6 /64) with 64 pending already")   \
    X(fragment_table_full, "too many fragmented datagrams in flight on one RX lcore")                                  \
    X(ttl_expired, "IPv4 TTL or IPv6 hop limit would reach 0")                                                         \
    X(frame_too_big, "IPv4 with DF or IPv6 packet larger than the egress port's MTU (an ICMP fragmentation needed "    \
                     "or ICMPv6 packet too big is sent back within the error-reply budget)")                           \
    X(frame_too_big_no_df, "IPv4 packet without DF larger than the egress port's MTU: sluice does not fragment and "   \
                           "sends no error (RFC 1191 answers only DF packets)")                                        \
    X(no_route, "no route to the destination (and no forward entry for the ingress port)")                             \
    X(route_blackhole, "the destination's route is a blackhole")                                                       \
    X(route_reject, "the destination's route is a reject route (an ICMP/ICMPv6 unreachable is sent)")                  \
    X(ring_full, "the owning worker's input ring was full")                                                            \
    X(tx_full, "the TX queue did not accept the packet")                                                               \
    X(vlan_no_room, "no headroom left for the VLAN tag it leaves with (not expected: mbufs have 128 bytes)")           \
    X(shutdown, "still queued when the port stopped")

enum class DropReason : uint8_t {
    none = 0,
#define SLUICE_DROP_ENUM(name, help) name,
    SLUICE_DROP_REASONS(SLUICE_DROP_ENUM)
#undef SLUICE_DROP_ENUM
        count
};

inline constexpr std::size_t kDropReasonCount = static_cast<std::size_t>(DropReason::count);

struct DropReasonInfo {
    std::string_view name;
    std::string_view help;
};

inline constexpr std::array<DropReasonInfo, kDropReasonCount> kDropReasonInfo = {{{"none", "not dropped"},
#define SLUICE_DROP_INFO(name, help) {#name, help},
                                                                                  SLUICE_DROP_REASONS(SLUICE_DROP_INFO)
#undef SLUICE_DROP_INFO
}};

constexpr std::string_view drop_reason_name(DropReason r) { return kDropReasonInfo[static_cast<std::size_t>(r)].name; }

}  // namespace sluice

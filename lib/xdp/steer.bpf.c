// sluice's XDP program for net_af_xdp ports: steers data-plane frames into sluice's AF_XDP socket and passes the
// rest to the kernel, so one link serves both (the exception path: management, health checks, BGP).
//
// A frame's destination decides: the IPv4/IPv6 destination address, the target address of an ARP frame or of an
// IPv6 neighbour solicitation/advertisement. The address is looked up in `steer_prefixes` (longest prefix, filled
// by sluice's control thread, lib/xdp/steering.cpp): STEER_KERNEL entries (the interface's own kernel addresses)
// pass, STEER_SLUICE entries (VIPs, the NAT pool, the port's addresses) go to sluice, and an address in neither
// follows the interface's mode: MODE_ALL (a gateway: everything not addressed to the kernel is sluice's) or
// MODE_SERVICES (a host that also balances: only sluice's own addresses are). Frames of other ethertypes (LLDP,
// ...) always pass: sluice has nothing to do with them.
//
// The PMD (DPDK 22.11 net_af_xdp, `xdp_prog=`) loads this object, attaches its first program and puts its sockets
// into `xsks_map` by RX queue index: both names are its contract.
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>

#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "xdp/steer_maps.h"

struct {
    __uint(type, BPF_MAP_TYPE_XSKMAP);
    __uint(max_entries, STEER_MAX_QUEUES);
    __type(key, __u32);
    __type(value, __u32);
} xsks_map SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_LPM_TRIE);
    __uint(max_entries, STEER_MAX_PREFIXES);
    __uint(map_flags, BPF_F_NO_PREALLOC);  // the kernel requires it of LPM tries
    __type(key, struct steer_key);
    __type(value, __u32);
} steer_prefixes SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, __u32);
} steer_mode SEC(".maps");

// Per-CPU frame counters by verdict (enum steer_counter), read and summed by sluice for its metrics.
struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, STEER_COUNTERS);
    __type(key, __u32);
    __type(value, __u64);
} steer_stats SEC(".maps");

#define ETH_P_8021AD_ 0x88A8
#define ICMPV6_NEIGHBOUR_SOLICITATION 135
#define ICMPV6_NEIGHBOUR_ADVERTISEMENT 136

// An Ethernet/IPv4 ARP frame's body (linux/if_arp.h drags in libc headers that do not build for BPF).
struct arp_ipv4 {
    __be16 hardware_type;
    __be16 protocol_type;
    __u8 hardware_length;
    __u8 protocol_length;
    __be16 operation;
    __u8 sender_mac[ETH_ALEN];
    __u8 sender_ip[4];
    __u8 target_mac[ETH_ALEN];
    __u8 target_ip[4];
} __attribute__((packed));

struct vlan_tag {
    __be16 tci;
    __be16 encapsulated_proto;
};

static __always_inline void count(__u32 counter) {
    __u64* value = bpf_map_lookup_elem(&steer_stats, &counter);
    if (value) *value += 1;
}

// STEER_SLUICE, STEER_KERNEL, or STEER_NONE when no prefix holds the address.
static __always_inline __u32 lookup(__u32 family, const void* address, __u32 length) {
    struct steer_key key = {.prefixlen = STEER_KEY_FAMILY_BITS + length * 8, .family = family};
    __builtin_memcpy(key.address, address, 16);
    const __u32* verdict = bpf_map_lookup_elem(&steer_prefixes, &key);
    return verdict ? *verdict : STEER_NONE;
}

static __always_inline int to_sluice(struct xdp_md* ctx) {
    count(STEER_COUNT_SLUICE);
    // No socket on this queue (sluice not running yet, or gone): the kernel gets the frame rather than a drop.
    return bpf_redirect_map(&xsks_map, ctx->rx_queue_index, XDP_PASS);
}

static __always_inline int to_kernel(__u32 counter) {
    count(counter);
    return XDP_PASS;
}

SEC("xdp")
int sluice_steer(struct xdp_md* ctx) {
    const void* data = (const void*)(long)ctx->data;
    const void* end = (const void*)(long)ctx->data_end;
    const struct ethhdr* eth = data;
    if ((const void*)(eth + 1) > end) return to_sluice(ctx);  // a runt: sluice counts it (l2_truncated)
    __u16 proto = eth->h_proto;
    const void* l3 = eth + 1;
#pragma unroll
    for (int i = 0; i < 2; i++) {  // up to two VLAN tags, as sluice's parser
        if (proto != bpf_htons(ETH_P_8021Q) && proto != bpf_htons(ETH_P_8021AD_)) break;
        const struct vlan_tag* tag = l3;
        if ((const void*)(tag + 1) > end) return to_sluice(ctx);
        proto = tag->encapsulated_proto;
        l3 = tag + 1;
    }

    __u8 address[16] = {};
    __u32 family;
    __u32 length;
    if (proto == bpf_htons(ETH_P_IP)) {
        const struct iphdr* ip = l3;
        if ((const void*)(ip + 1) > end) return to_sluice(ctx);  // malformed: sluice drops and counts it
        __builtin_memcpy(address, &ip->daddr, 4);
        family = STEER_FAMILY_IPV4, length = 4;
    } else if (proto == bpf_htons(ETH_P_IPV6)) {
        const struct ipv6hdr* ip6 = l3;
        if ((const void*)(ip6 + 1) > end) return to_sluice(ctx);
        const __u8* target = (const __u8*)&ip6->daddr;
        // Neighbour discovery goes where its target address goes (a solicitation is sent to a multicast group).
        if (ip6->nexthdr == IPPROTO_ICMPV6) {
            const __u8* icmp = (const __u8*)(ip6 + 1);
            if ((const void*)(icmp + 24) <= end &&
                (icmp[0] == ICMPV6_NEIGHBOUR_SOLICITATION || icmp[0] == ICMPV6_NEIGHBOUR_ADVERTISEMENT))
                target = icmp + 8;
        }
        __builtin_memcpy(address, target, 16);
        family = STEER_FAMILY_IPV6, length = 16;
    } else if (proto == bpf_htons(ETH_P_ARP)) {
        const struct arp_ipv4* arp = l3;
        if ((const void*)(arp + 1) > end || arp->protocol_type != bpf_htons(ETH_P_IP) || arp->protocol_length != 4)
            return to_kernel(STEER_COUNT_OTHER);  // not Ethernet/IPv4 ARP
        __builtin_memcpy(address, arp->target_ip, 4);
        family = STEER_FAMILY_IPV4, length = 4;
    } else {
        return to_kernel(STEER_COUNT_OTHER);
    }

    const __u32 verdict = lookup(family, address, length);
    if (verdict == STEER_SLUICE) return to_sluice(ctx);
    if (verdict == STEER_KERNEL) return to_kernel(STEER_COUNT_KERNEL);
    const __u32 zero = 0;
    const __u32* mode = bpf_map_lookup_elem(&steer_mode, &zero);
    if (mode && *mode == STEER_MODE_SERVICES) return to_kernel(STEER_COUNT_KERNEL);
    return to_sluice(ctx);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* The maps shared by sluice's XDP program (steer.bpf.c) and its control thread (steering.cpp): one layout, one file.
 * Plain C with kernel UAPI types, as the BPF side is C. */
#ifndef SLUICE_XDP_STEER_MAPS_H
#define SLUICE_XDP_STEER_MAPS_H

#include <linux/types.h>

#define STEER_MAX_QUEUES 64
#define STEER_MAX_PREFIXES 4096

enum steer_verdict { STEER_NONE = 0, STEER_SLUICE = 1, STEER_KERNEL = 2 };
enum steer_mode_value { STEER_MODE_ALL = 0, STEER_MODE_SERVICES = 1 };
enum steer_family { STEER_FAMILY_IPV4 = 4, STEER_FAMILY_IPV6 = 6 };

/* Frames steered to sluice, passed to the kernel as addressed to it (or not sluice's, in services mode), and passed
 * as neither IP nor ARP. */
enum steer_counter { STEER_COUNT_SLUICE = 0, STEER_COUNT_KERNEL = 1, STEER_COUNT_OTHER = 2, STEER_COUNTERS = 3 };

/* An LPM trie key: the family is part of the matched prefix, so IPv4 and IPv6 share one trie. */
#define STEER_KEY_FAMILY_BITS 32
struct steer_key {
    __u32 prefixlen; /* STEER_KEY_FAMILY_BITS + the address prefix length */
    __u32 family;    /* enum steer_family; compared as data, in host order */
    __u8 address[16];
};

#endif

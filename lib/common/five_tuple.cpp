#include "common/five_tuple.hpp"

#include <arpa/inet.h>
#include <sys/random.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include <spdlog/fmt/fmt.h>

namespace sluice {

namespace {

// Runs before main(), among the first static initializers (init_priority 101, the earliest a program may ask;
// DPDK's log set-up and libgcc's CPU detection share it), so before any of sluice's own: nothing hashes with a zero
// key. No logger yet, so stderr.
FlowHashKey random_flow_hash_key() {
    __builtin_cpu_init();  // required before __builtin_cpu_supports in a static initializer
    if (!__builtin_cpu_supports("aes")) {
        std::fputs("sluice: this CPU has no AES-NI, which the flow hash needs (docs/operations/host.md)\n", stderr);
        std::abort();
    }
    FlowHashKey key;
    ssize_t got;
    do got = getrandom(&key, sizeof key, 0);  // blocks only until the kernel's pool is ready, early in boot
    while (got < 0 && errno == EINTR);
    if (got != static_cast<ssize_t>(sizeof key)) {
        std::perror("sluice: getrandom for the flow-hash key");
        std::abort();
    }
    return key;
}

}  // namespace

FlowHashKey flow_hash_detail::process_key __attribute__((init_priority(101))) = random_flow_hash_key();

void set_flow_hash_key(const FlowHashKey& key) { flow_hash_detail::process_key = key; }

std::string to_string(const IpAddress& a, IpFamily family) {
    char buf[INET6_ADDRSTRLEN] = "?";
    inet_ntop(family == IpFamily::ipv6 ? AF_INET6 : AF_INET, a.bytes, buf, sizeof buf);
    return buf;
}

std::string to_string(const FiveTuple& t) {
    const bool v6 = t.family == IpFamily::ipv6;
    return fmt::format("proto {} {}{}{}:{} -> {}{}{}:{}", t.proto, v6 ? "[" : "", to_string(t.src, t.family),
                       v6 ? "]" : "", ntohs(t.src_port), v6 ? "[" : "", to_string(t.dst, t.family), v6 ? "]" : "",
                       ntohs(t.dst_port));
}

}  // namespace sluice

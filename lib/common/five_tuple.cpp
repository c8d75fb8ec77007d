#include "common/five_tuple.hpp"

#include <arpa/inet.h>

#include <spdlog/fmt/fmt.h>

namespace sluice {

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

// A state-sync channel's address on 127.0.0.1, for the tests and the sync benchmark that run channels over loopback.
#pragma once

#include <arpa/inet.h>

#include <cstdint>
#include <string>

#include "sync/sync_channel.hpp"

namespace sluice {

inline SyncAddress loopback_sync_address(uint16_t port) {
    SyncAddress a;
    a.family = IpFamily::ipv4;
    inet_pton(AF_INET, "127.0.0.1", a.address.bytes);
    a.port = port;
    a.text = "127.0.0.1:" + std::to_string(port);
    return a;
}

}  // namespace sluice

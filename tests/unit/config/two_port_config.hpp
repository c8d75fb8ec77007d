// The config the control-plane tests start from: two ports, lan forwarding to wan, one rx + worker lcore; a test
// appends its own sections.
#pragma once

inline constexpr const char kTwoPortConfig[] = R"(ports:
  - {name: lan, device: net_null0}
  - {name: wan, device: net_null1}
lcores:
  - {id: 1, roles: [rx, worker]}
forward:
  - {from: lan, to: wan, next_hop_mac: "02:00:00:00:00:02"}
)";

// The daemon: staged start (EAL -> ports probed -> mempools -> ports started -> tables -> lcores -> control), the
// control loop, and the staged stop that checks every mbuf came home. Control thread only.
#pragma once

#include <string>
#include <vector>

#include "config/config.hpp"

namespace sluice {

inline constexpr int kExitOk = 0;
inline constexpr int kExitStartupFailed = 1;
inline constexpr int kExitBadConfig = 2;
inline constexpr int kExitLeakedMbufs = 3;

// Runs until SIGINT or SIGTERM; returns the process exit code. The caller has blocked those signals.
int run_daemon(Config config, const std::string& program, const std::vector<std::string>& extra_eal_args);

}  // namespace sluice

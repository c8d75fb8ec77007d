// Logging set-up (spdlog). Control thread, once at start; lcores never log per packet.
#pragma once

#include <string>

namespace sluice {

// level: trace|debug|info|warn|error|critical|off; file empty logs to stderr (journald under systemd).
// Throws std::runtime_error when the file cannot be opened.
void setup_logging(const std::string& level, const std::string& file);

}  // namespace sluice

// Talks to systemd (sd_notify): READY once the first config runs, RELOADING/READY around a reload, STOPPING, and
// watchdog pings sent only while every lcore's heartbeat (its poll counter) advances, so a stuck lcore makes
// systemd restart sluice. Every call is a no-op when NOTIFY_SOCKET is unset. Control thread only.
// A reload blocks the control loop, and so the pings, for as long as its tables take to build (rte_acl: about 40 s
// for 100k rules, FIELD-NOTES): from RELOADING to READY, systemd is told to wait kReloadWatchdog instead of
// WatchdogSec, which READY puts back with a ping (systemd times the period from the last ping).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace sluice {

class SystemdNotifier {
public:
    static constexpr std::chrono::seconds kReloadWatchdog{300};

    SystemdNotifier();

    void ready(const std::string& status);
    void reloading();
    void reloaded(const std::string& status);
    void stopping();

    bool watchdog_enabled() const { return watchdog_interval_.count() > 0; }
    // Call often (every control loop iteration) with each lcore's heartbeat; pings when half the watchdog period
    // has passed and every heartbeat moved since the last ping. Returns the indexes of stalled lcores, if any.
    std::vector<std::size_t> tick(const std::vector<uint64_t>& heartbeats);

private:
    std::chrono::microseconds watchdog_usec_{0};      // WatchdogSec, as systemd gave it
    std::chrono::microseconds watchdog_interval_{0};  // half of it: how often the heartbeats are checked
    std::chrono::steady_clock::time_point next_check_;
    std::vector<uint64_t> last_heartbeats_;
};

}  // namespace sluice

// Talks to systemd (sd_notify): READY once the first config runs, RELOADING/READY around a reload, STOPPING, and
// watchdog pings sent only while every lcore's heartbeat (its poll counter) advances, so a stuck lcore makes
// systemd restart sluice. Every call is a no-op when NOTIFY_SOCKET is unset. Control thread only.
// A reload or a dry-run blocks the control loop, and so the pings, for as long as its tables take to build (rte_acl:
// about 40 s for 100k rules, FIELD-NOTES): while it runs, systemd is told to wait kReloadWatchdog instead of
// WatchdogSec, which its end puts back with a ping (systemd times the period from the last ping).
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
    // Around reload --dry-run, which builds the candidate's tables as a reload does but applies nothing.
    void checking();
    void checked(const std::string& status);
    void stopping();

    bool watchdog_enabled() const { return watchdog_interval_.count() > 0; }
    // Call often (every control loop iteration) with each lcore's heartbeat; pings when half the watchdog period
    // has passed and every heartbeat moved since the last ping. Returns the indexes of stalled lcores, if any.
    std::vector<std::size_t> tick(const std::vector<uint64_t>& heartbeats);

private:
    // Sends state, with the watchdog extended to kReloadWatchdog (blocking work begins) or restored (it ended).
    void notify_extended(const std::string& state);
    void notify_restored(const std::string& state);

    std::chrono::microseconds watchdog_usec_{0};      // WatchdogSec, as systemd gave it
    std::chrono::microseconds watchdog_interval_{0};  // half of it: how often the heartbeats are checked
    std::chrono::steady_clock::time_point next_check_;
    std::vector<uint64_t> last_heartbeats_;
};

}  // namespace sluice

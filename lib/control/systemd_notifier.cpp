#include "control/systemd_notifier.hpp"

#include <systemd/sd-daemon.h>

namespace sluice {

SystemdNotifier::SystemdNotifier() {
    uint64_t usec = 0;
    if (sd_watchdog_enabled(0, &usec) > 0) {
        watchdog_usec_ = std::chrono::microseconds(usec);
        watchdog_interval_ = watchdog_usec_ / 2;
    }
    next_check_ = std::chrono::steady_clock::now() + watchdog_interval_;
}

void SystemdNotifier::ready(const std::string& status) { sd_notifyf(0, "READY=1\nSTATUS=%s", status.c_str()); }

void SystemdNotifier::reloading() { notify_extended("RELOADING=1\nSTATUS=reloading the config"); }

void SystemdNotifier::reloaded(const std::string& status) { notify_restored("READY=1\nSTATUS=" + status); }

void SystemdNotifier::checking() { notify_extended("STATUS=checking a config (reload --dry-run)"); }

void SystemdNotifier::checked(const std::string& status) { notify_restored("STATUS=" + status); }

void SystemdNotifier::notify_extended(const std::string& state) {
    if (!watchdog_enabled()) {
        sd_notify(0, state.c_str());
        return;
    }
    sd_notifyf(0, "%s\nWATCHDOG_USEC=%lld", state.c_str(),
               static_cast<long long>(std::chrono::microseconds(kReloadWatchdog).count()));
}

void SystemdNotifier::notify_restored(const std::string& state) {
    if (!watchdog_enabled()) {
        sd_notify(0, state.c_str());
        return;
    }
    // systemd times a new WATCHDOG_USEC from the last ping, which came before the blocking work: this one ping
    // restarts the period (the next tick judges the lcores' heartbeats again, against their values from before).
    sd_notifyf(0, "%s\nWATCHDOG=1\nWATCHDOG_USEC=%lld", state.c_str(), static_cast<long long>(watchdog_usec_.count()));
}

void SystemdNotifier::stopping() { sd_notify(0, "STOPPING=1\nSTATUS=stopping: draining rings, flushing TX"); }

std::vector<std::size_t> SystemdNotifier::tick(const std::vector<uint64_t>& heartbeats) {
    std::vector<std::size_t> stalled;
    if (!watchdog_enabled()) return stalled;
    const auto now = std::chrono::steady_clock::now();
    if (now < next_check_) return stalled;
    next_check_ = now + watchdog_interval_;
    if (last_heartbeats_.size() == heartbeats.size())
        for (std::size_t i = 0; i < heartbeats.size(); ++i)
            if (heartbeats[i] == last_heartbeats_[i]) stalled.push_back(i);
    last_heartbeats_ = heartbeats;
    if (stalled.empty()) sd_notify(0, "WATCHDOG=1");
    return stalled;
}

}  // namespace sluice

// Announcing VIPs over BGP through a local BIRD (docs/architecture.md, "Announcing VIPs over BGP").
//
// sluice speaks no BGP. It decides which VIPs it can serve (sluice up, every port's link up, at least min_healthy
// usable backends, not draining), writes them as BIRD static routes into an include file (temp file + rename, so
// BIRD never reads half a file) and asks BIRD to re-read its configuration over BIRD's control socket, only when
// that set changed (or the last attempt failed). BIRD's own BGP sessions announce and withdraw.
//
// The decision (wanted_vips) and the file's text (render_bird_include) are pure; BirdAnnouncer holds what BIRD
// accepted last, retries with a backoff when BIRD is unreachable, and counts. Control thread only; nothing here is
// on the fast path. A BIRD request is bounded by BgpConfig::timeout_ms, so the control loop never waits longer.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "control/status.hpp"

namespace sluice {

// One service's say in whether its VIP is announced.
struct ServiceHealth {
    std::string service;
    std::string vip;  // "10.77.100.2", "2001:db8::1"
    IpFamily family = IpFamily::none;
    uint32_t usable = 0;  // backends up (health) with weight > 0
    uint32_t min_healthy = 1;
};

// The VIPs to announce, sorted, without repeats. Several services may share a VIP (other ports or protocols): it is
// announced while at least one of them has min_healthy usable backends, since a route cannot say "port 80 only".
// Nothing is announced while draining or while a port's link is down.
std::vector<std::string> wanted_vips(const std::vector<ServiceHealth>& services, bool links_up, bool draining);

// The include file for BIRD: two static protocols (sluice_vips4, sluice_vips6), one blackhole route per VIP (a
// host route: /32 or /128). Both protocols are always there, empty when nothing is announced, so the names the
// operator's export filters use always exist once the file does.
std::string render_bird_include(const std::vector<std::string>& vips);

// Writes text to path through path.tmp and rename(2): readers see the old file or the new one, never a mix.
// False with the reason in error.
bool write_file_atomically(const std::string& path, const std::string& text, std::string& error);

// BIRD's answer to one command on its control socket (the birdc protocol: "CODE-text" lines go on, "CODE text"
// ends; codes 0xxx are success, 8xxx/9xxx errors).
struct BirdReply {
    bool ok = false;
    int code = 0;  // of the last line; 0 when no reply was read
    std::vector<std::string> lines;
    std::string error;  // transport or BIRD error, for logs
};

// Connects to BIRD's control socket, reads the greeting, sends one command and reads the reply, within timeout
// in total (non-blocking socket and poll(2)). Any thread.
BirdReply bird_request(const std::string& socket_path, const std::string& command, std::chrono::milliseconds timeout);

class BirdAnnouncer {
public:
    using Clock = std::chrono::steady_clock;
    // Writes the include file and has BIRD re-read it; returns false with a reason. Replaceable for tests.
    using Apply = std::function<bool(const std::string& include_text, std::string& error)>;

    explicit BirdAnnouncer(BgpConfig config, Apply apply = {});

    // The set to announce now. Applies it when it differs from what BIRD accepted last, or when the last attempt
    // failed and its backoff is over (0.5 s doubling to 30 s). The first call always applies: a sluice that crashed
    // may have left VIPs in the file. force: apply now whatever the state and backoff (a drain, the stop).
    // Returns true when BIRD accepted the set on this call.
    bool update(const std::vector<std::string>& wanted, Clock::time_point now, bool force = false);

    // What BIRD runs with, as far as sluice knows: the set it last accepted.
    const std::vector<std::string>& announced() const { return announced_; }
    bool in_sync() const { return synced_ && announced_ == wanted_; }
    const BgpConfig& config() const { return config_; }
    void set_config(BgpConfig config) { config_ = std::move(config); }

    // For telemetry and metrics: every VIP seen since start with its counts.
    BgpRecord record() const;

private:
    bool apply_default(const std::string& text, std::string& error) const;

    BgpConfig config_;
    Apply apply_;
    std::vector<std::string> wanted_;
    std::vector<std::string> announced_;
    bool synced_ = false;  // BIRD accepted a file from this sluice at least once
    bool failing_ = false;
    Clock::time_point next_attempt_{};
    std::chrono::milliseconds backoff_{0};
    uint64_t reconfigures_ = 0;
    uint64_t failures_ = 0;
    uint64_t failures_unlogged_ = 0;
    Clock::time_point last_failure_log_{};
    std::string last_error_;
    struct VipCounts {
        uint64_t announcements = 0;
        uint64_t withdrawals = 0;
    };
    std::map<std::string, VipCounts> vips_;
};

}  // namespace sluice

// Active health checks of load-balancer backends: a TCP connect, or an HTTP/1.0 GET whose status code must match.
// The daemon owns one HealthChecker; it runs its own std::thread (not a DPDK lcore) with one poll() loop over every
// in-flight check, so a slow or black-holed backend never delays the others. set_targets, is_up and status may be
// called from any thread; the transition callback runs on the checker's thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <poll.h>

#include "common/unique_fd.hpp"

namespace sluice {

enum class HealthCheckKind : uint8_t { tcp, http };

struct HealthCheckSpec {
    HealthCheckKind kind = HealthCheckKind::tcp;
    std::string address;  // IPv4 or IPv6 literal
    uint16_t port = 0;
    std::string http_path = "/";  // http: GET this path, HTTP/1.0, Host: address[:port]
    int expect_status = 200;      // http: the status code that means healthy
    uint32_t interval_ms = 2000, timeout_ms = 1000, rise = 2, fall = 3;
    friend bool operator==(const HealthCheckSpec&, const HealthCheckSpec&) = default;
};

struct HealthTarget {
    uint32_t id;
    HealthCheckSpec spec;
};

struct HealthStatus {
    bool up;
    uint64_t checks, failures, transitions;
    std::string last_error;  // the most recent failure's reason; kept after the target recovers
};

// Why a spec cannot be checked (bad address literal, port 0, a zero interval/timeout/rise/fall, a path that is not
// "/..." or holds control characters, a status outside 100..599), or nullopt when it is fine. The config loader can
// call it to reject a file with the same words set_targets would throw.
std::optional<std::string> health_check_spec_error(const HealthCheckSpec& spec);

class HealthChecker {
public:
    // Called on the checker's thread on every up/down transition, never under the checker's lock: it may call
    // status(), is_up() and even set_targets(). Exceptions it throws are swallowed. A callback can still arrive for a
    // target that a concurrent set_targets just removed or replaced; ignore ids you no longer know.
    using TransitionCallback = std::function<void(uint32_t id, bool up, const std::string& reason)>;

    // Starts the thread. Throws std::system_error if the wake-up eventfd or the thread cannot be created.
    explicit HealthChecker(TransitionCallback on_transition);
    ~HealthChecker();  // stops and joins the thread, closes sockets
    HealthChecker(const HealthChecker&) = delete;
    HealthChecker& operator=(const HealthChecker&) = delete;

    // Replaces the target set (any thread). Targets whose id AND spec are unchanged keep their state and counters;
    // new ones (and ids whose spec changed) start UP with zero counters, so traffic flows right after start: `fall`
    // consecutive failures take one down, `rise` consecutive successes bring it back. Removed ones are forgotten.
    // No callback fires for these changes; instead it returns, sorted, the ids whose is_up() answer they flipped
    // (down targets removed, or replaced by a changed spec, are up now), so a caller that built tables from is_up()
    // before the call knows to rebuild. Throws std::invalid_argument (changing nothing) on a duplicate id or a spec
    // health_check_spec_error rejects.
    std::vector<uint32_t> set_targets(std::vector<HealthTarget> targets);

    bool is_up(uint32_t id) const;  // unknown id: true
    std::optional<HealthStatus> status(uint32_t id) const;

private:
    using Clock = std::chrono::steady_clock;

    // What set_targets and the readers share with the thread, under mutex_.
    struct Entry {
        HealthCheckSpec spec;
        HealthStatus status;
        uint64_t consecutive_ok = 0, consecutive_failed = 0;
        uint64_t generation;  // a result from an older generation of this id (a replaced spec) is dropped
    };
    struct Transition {
        uint32_t id;
        bool up;
        std::string reason;
    };
    void run() noexcept;
    // Applies one finished check to its entry; returns the transition it caused, if any.
    std::optional<Transition> record(uint32_t id, uint64_t generation, bool ok, const std::string& error);
    void wake() const;
    // Waits in poll() on fds (fds[0]: wake_fd_) until wake_at (max: until woken) and drains the
    // wake-up; false after a poll error (logged, backed off).
    bool wait(std::vector<pollfd>& fds, Clock::time_point wake_at) const;
    // Calls on_transition_ for each transition, outside the lock; a callback that throws is logged.
    void notify(const std::vector<Transition>& transitions) const;

    TransitionCallback on_transition_;
    UniqueFd wake_fd_;  // eventfd in the thread's poll set: set_targets and the destructor write it

    mutable std::mutex mutex_;
    std::unordered_map<uint32_t, Entry> entries_;
    uint64_t next_generation_ = 1;
    bool targets_changed_ = false;
    bool stopping_ = false;

    std::thread thread_;  // started by the constructor once every member above is built
};

}  // namespace sluice

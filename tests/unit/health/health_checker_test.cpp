#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "health/health_checker.hpp"

using namespace sluice;
using namespace std::chrono_literals;

namespace {

using Clock = std::chrono::steady_clock;

// A real backend on the loopback: a listening socket and a thread that serves it one connection at a time.
//   tcp:      accepts and closes at once (a TCP check only needs the handshake)
//   http_200, http_503: reads the request head, answers with that status and closes
//   silent:   accepts and then never reads, writes or closes until destroyed (the HTTP timeout case)
class Backend {
public:
    enum class Mode { tcp, http_200, http_503, silent };

    // port 0 picks an ephemeral one; a port given again reopens a closed backend on the same address.
    explicit Backend(Mode mode, const std::string& address = "127.0.0.1", uint16_t port = 0) : mode_(mode) {
        sockaddr_storage addr{};
        socklen_t len = 0;
        if (address.find(':') == std::string::npos) {
            auto* v4 = reinterpret_cast<sockaddr_in*>(&addr);
            v4->sin_family = AF_INET;
            v4->sin_port = htons(port);
            inet_pton(AF_INET, address.c_str(), &v4->sin_addr);
            len = sizeof *v4;
        } else {
            auto* v6 = reinterpret_cast<sockaddr_in6*>(&addr);
            v6->sin6_family = AF_INET6;
            v6->sin6_port = htons(port);
            inet_pton(AF_INET6, address.c_str(), &v6->sin6_addr);
            len = sizeof *v6;
        }
        listen_fd_ = ::socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        const int one = 1;
        // The checker's closed connections leave TIME_WAIT entries on this port; reopening must not trip on them.
        ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (listen_fd_ < 0 || ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
            ::listen(listen_fd_, 64) != 0) {
            const int err = errno;
            if (listen_fd_ >= 0) ::close(listen_fd_);
            throw std::runtime_error("test backend on " + address + ": " + std::strerror(err));
        }
        ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
        port_ = ntohs(addr.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&addr)->sin_port
                                                : reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
        stop_fd_ = ::eventfd(0, EFD_CLOEXEC);
        thread_ = std::thread([this] { serve(); });
    }

    // Closes the listener: connections to the port are refused from here on.
    ~Backend() {
        const uint64_t one = 1;
        if (::write(stop_fd_, &one, sizeof one) < 0) {}
        thread_.join();
        ::close(listen_fd_);
        ::close(stop_fd_);
        for (const int fd : held_) ::close(fd);
    }

    uint16_t port() const { return port_; }
    int accepted() const { return accepted_.load(); }
    std::string last_request() const {
        std::lock_guard lock(mutex_);
        return last_request_;
    }

private:
    void serve() {
        for (;;) {
            pollfd fds[2] = {{stop_fd_, POLLIN, 0}, {listen_fd_, POLLIN, 0}};
            if (::poll(fds, 2, -1) < 0) continue;
            if (fds[0].revents != 0) return;
            const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
            if (fd < 0) continue;
            ++accepted_;
            if (mode_ == Mode::silent) {
                held_.push_back(fd);
                continue;
            }
            if (mode_ == Mode::http_200 || mode_ == Mode::http_503) answer_http(fd);
            ::close(fd);
        }
    }

    void answer_http(int fd) {
        const timeval limit{1, 0};
        ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
        std::string request;
        char buf[512];
        while (request.find("\r\n\r\n") == std::string::npos && request.size() < 4096) {
            const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
            if (n <= 0) break;
            request.append(buf, static_cast<std::size_t>(n));
        }
        {
            std::lock_guard lock(mutex_);
            last_request_ = request;
        }
        const std::string response = mode_ == Mode::http_200
                                         ? "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok"
                                         : "HTTP/1.0 503 Service Unavailable\r\nContent-Length: 4\r\n\r\nbusy";
        if (::send(fd, response.data(), response.size(), MSG_NOSIGNAL) < 0) {}
    }

    Mode mode_;
    int listen_fd_ = -1;
    int stop_fd_ = -1;
    uint16_t port_ = 0;
    std::atomic<int> accepted_{0};
    std::vector<int> held_;  // serve() only, then the destructor after the join
    mutable std::mutex mutex_;
    std::string last_request_;
    std::thread thread_;
};

// A loopback port where nothing listens: bound (so nobody else takes it) but not listening, so connects are refused.
class RefusedPort {
public:
    RefusedPort() {
        fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in addr{};
        addr.sin_family = AF_INET;
        inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
        socklen_t len = sizeof addr;
        ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), len);
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
        port_ = ntohs(addr.sin_port);
    }
    ~RefusedPort() { ::close(fd_); }
    uint16_t port() const { return port_; }

private:
    int fd_;
    uint16_t port_;
};

bool ipv6_loopback_available() {
    const int fd = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return false;
    sockaddr_in6 addr{};
    addr.sin6_family = AF_INET6;
    addr.sin6_addr = in6addr_loopback;
    const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    ::close(fd);
    return ok;
}

// Short intervals keep the run quick; the waits below are generous because CI machines stall.
HealthCheckSpec fast_spec(HealthCheckKind kind, uint16_t port, const std::string& address = "127.0.0.1") {
    HealthCheckSpec spec;
    spec.kind = kind;
    spec.address = address;
    spec.port = port;
    spec.interval_ms = 50;
    spec.timeout_ms = 500;
    spec.rise = 2;
    spec.fall = 3;
    return spec;
}

template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds limit = 5000ms) {
    const auto end = Clock::now() + limit;
    while (Clock::now() < end) {
        if (pred()) return true;
        std::this_thread::sleep_for(5ms);
    }
    return pred();
}

// Records every callback, and reads status() from inside it: the checker must not hold its lock while calling us.
struct Recorder {
    struct Event {
        uint32_t id;
        bool up;
        std::string reason;
        HealthStatus status_then;
    };

    HealthChecker::TransitionCallback callback() {
        return [this](uint32_t id, bool up, const std::string& reason) {
            const auto now = checker.load()->status(id);
            std::lock_guard lock(mutex);
            events.push_back({id, up, reason, now.value_or(HealthStatus{})});
        };
    }
    std::vector<Event> of(uint32_t id) {
        std::lock_guard lock(mutex);
        std::vector<Event> out;
        for (const Event& e : events)
            if (e.id == id) out.push_back(e);
        return out;
    }

    std::atomic<HealthChecker*> checker{nullptr};
    std::mutex mutex;
    std::vector<Event> events;
};

std::size_t open_fds() {
    std::size_t n = 0;
    for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
    return n;
}

uint64_t checks_of(const HealthChecker& checker, uint32_t id) {
    const auto s = checker.status(id);
    return s ? s->checks : 0;
}

}  // namespace

TEST_CASE("health: a listening TCP backend stays up, and every check closes its socket", "[health]") {
    Backend backend(Backend::Mode::tcp);
    const std::size_t fds_before = open_fds();
    Recorder recorder;
    auto checker = std::make_unique<HealthChecker>(recorder.callback());
    recorder.checker = checker.get();
    checker->set_targets({{7, fast_spec(HealthCheckKind::tcp, backend.port())}});

    REQUIRE(eventually([&] { return checks_of(*checker, 7) >= 5; }));
    const HealthStatus s = *checker->status(7);
    CHECK(s.up);
    CHECK(s.failures == 0);
    CHECK(s.transitions == 0);
    CHECK(s.last_error.empty());
    CHECK(checker->is_up(7));
    // A check is done once the kernel completes the handshake; the backend's accept() may come a little later.
    CHECK(eventually([&] { return backend.accepted() >= 5; }));
    CHECK(recorder.of(7).empty());

    REQUIRE(eventually([&] { return checks_of(*checker, 7) >= 15; }));
    // The wake-up eventfd, at most one check in flight, and the backend's accepted socket it is about to close.
    CHECK(open_fds() <= fds_before + 3);
    checker.reset();
    CHECK(eventually([&] { return open_fds() == fds_before; }, 1000ms));
}

TEST_CASE("health: closing the listener takes a TCP backend down, reopening brings it back after rise", "[health]") {
    auto backend = std::make_unique<Backend>(Backend::Mode::tcp);
    const uint16_t port = backend->port();
    Recorder recorder;
    HealthChecker checker(recorder.callback());
    recorder.checker = &checker;
    HealthCheckSpec spec = fast_spec(HealthCheckKind::tcp, port);
    spec.rise = 3;
    checker.set_targets({{1, spec}});
    REQUIRE(eventually([&] { return checks_of(checker, 1) >= 2; }));
    REQUIRE(checker.is_up(1));

    backend.reset();
    REQUIRE(eventually([&] { return !checker.is_up(1); }));
    HealthStatus down = *checker.status(1);
    CHECK(down.last_error == "connection refused");
    CHECK(down.failures >= 3);
    CHECK(down.transitions == 1);
    auto events = recorder.of(1);
    REQUIRE(events.size() == 1);
    CHECK_FALSE(events[0].up);
    CHECK(events[0].reason == "connection refused (3 checks in a row failed)");

    backend = std::make_unique<Backend>(Backend::Mode::tcp, "127.0.0.1", port);
    REQUIRE(eventually([&] { return checker.is_up(1); }));
    events = recorder.of(1);
    REQUIRE(events.size() == 2);
    CHECK(events[1].up);
    CHECK(events[1].reason == "3 checks in a row passed");
    // The listener was closed from the down transition until the reopen, so every check in between failed: the
    // successes that brought it back are exactly `rise`.
    const HealthStatus& at_down = events[0].status_then;
    const HealthStatus& at_up = events[1].status_then;
    CHECK((at_up.checks - at_up.failures) - (at_down.checks - at_down.failures) == 3);
    CHECK(at_up.up);
    CHECK(at_up.last_error == "connection refused");  // the last failure stays visible after recovery

    // Stays up, with no further transition, while the backend keeps answering.
    const uint64_t seen = checks_of(checker, 1);
    REQUIRE(eventually([&] { return checks_of(checker, 1) >= seen + 3; }));
    CHECK(checker.status(1)->transitions == 2);
    CHECK(recorder.of(1).size() == 2);
}

TEST_CASE("health: HTTP 200 is up, 503 goes down and says so", "[health]") {
    Backend ok(Backend::Mode::http_200), busy(Backend::Mode::http_503);
    Recorder recorder;
    HealthChecker checker(recorder.callback());
    recorder.checker = &checker;
    HealthCheckSpec ok_spec = fast_spec(HealthCheckKind::http, ok.port());
    ok_spec.http_path = "/healthz?full=1";
    HealthCheckSpec busy_spec = fast_spec(HealthCheckKind::http, busy.port());
    busy_spec.fall = 2;
    checker.set_targets({{1, ok_spec}, {2, busy_spec}});

    REQUIRE(eventually([&] { return !checker.is_up(2); }));
    REQUIRE(eventually([&] { return checks_of(checker, 1) >= 3; }));
    const HealthStatus s2 = *checker.status(2);
    CHECK(s2.last_error == "HTTP status 503, expected 200");
    CHECK(s2.transitions == 1);
    const auto events = recorder.of(2);
    REQUIRE(events.size() == 1);
    CHECK(events[0].reason == "HTTP status 503, expected 200 (2 checks in a row failed)");

    const HealthStatus s1 = *checker.status(1);
    CHECK(s1.up);
    CHECK(s1.failures == 0);
    CHECK(recorder.of(1).empty());
    CHECK(ok.last_request().rfind(
              "GET /healthz?full=1 HTTP/1.0\r\nHost: 127.0.0.1:" + std::to_string(ok.port()) + "\r\n", 0) == 0);

    // A backend whose 503 is what "healthy" means (a drain-aware check, say) is up.
    busy_spec.expect_status = 503;
    checker.set_targets({{2, busy_spec}});
    REQUIRE(eventually([&] { return checks_of(checker, 2) >= 3; }));
    CHECK(checker.status(2)->failures == 0);
    CHECK(checker.is_up(2));
}

TEST_CASE("health: an HTTP backend that accepts but never answers times out without delaying others", "[health]") {
    Backend silent(Backend::Mode::silent), healthy(Backend::Mode::tcp);
    Recorder recorder;
    HealthChecker checker(recorder.callback());
    recorder.checker = &checker;
    HealthCheckSpec slow = fast_spec(HealthCheckKind::http, silent.port());
    slow.timeout_ms = 2000;
    slow.fall = 1;
    checker.set_targets({{1, slow}, {2, fast_spec(HealthCheckKind::tcp, healthy.port())}});

    // The healthy target keeps its own pace while the silent one's first check is still in flight.
    REQUIRE(eventually([&] { return checks_of(checker, 2) >= 5; }));
    CHECK(checks_of(checker, 1) == 0);
    CHECK(silent.accepted() >= 1);

    REQUIRE(eventually([&] { return !checker.is_up(1); }));
    const HealthStatus s = *checker.status(1);
    CHECK(s.last_error == "timeout after 2000 ms (waiting for the HTTP status line)");
    CHECK(s.transitions == 1);
    CHECK(recorder.of(1).size() == 1);
    CHECK(checker.is_up(2));
    CHECK(checker.status(2)->failures == 0);
}

TEST_CASE("health: set_targets keeps unchanged targets, restarts changed ones and forgets removed ones", "[health]") {
    RefusedPort refused;
    Backend backend(Backend::Mode::tcp);
    Recorder recorder;
    HealthChecker checker(recorder.callback());
    recorder.checker = &checker;
    const HealthCheckSpec dead = fast_spec(HealthCheckKind::tcp, refused.port());
    const HealthCheckSpec alive = fast_spec(HealthCheckKind::tcp, backend.port());

    CHECK(checker.is_up(1));  // unknown ids count as up
    CHECK_FALSE(checker.status(1));
    CHECK(checker.set_targets({{1, dead}, {2, alive}}).empty());
    CHECK(checker.is_up(1));  // new targets start up: it takes `fall` failed checks to go down
    CHECK(checker.status(1)->transitions == 0);
    REQUIRE(eventually([&] { return !checker.is_up(1); }));
    REQUIRE(eventually([&] { return checks_of(checker, 2) >= 3; }));
    const HealthStatus before = *checker.status(1);
    const uint64_t alive_checks = checks_of(checker, 2);

    // Same ids and specs, plus a new one: the old keep their state and counters, no callback fires.
    CHECK(checker.set_targets({{2, alive}, {1, dead}, {3, alive}}).empty());  // nothing reads differently
    const HealthStatus kept = *checker.status(1);
    CHECK_FALSE(kept.up);
    CHECK(kept.transitions == 1);
    CHECK(kept.checks >= before.checks);
    CHECK(kept.last_error == "connection refused");
    CHECK(checks_of(checker, 2) >= alive_checks);
    CHECK(checker.status(3)->up);
    REQUIRE(eventually([&] { return checks_of(checker, 3) >= 2; }));
    CHECK(recorder.of(1).size() == 1);

    // A changed spec is a new target: up again, counters from zero, and named in the result since it was down.
    // A removed one is forgotten (2 was up, so is_up(2) still answers the same and it is not named).
    // Its first check may already have run by the time we look, but the next is an interval away, so the
    // counters read at most one check and it cannot be down yet.
    HealthCheckSpec dead_slower = dead;
    dead_slower.interval_ms = 300;
    dead_slower.fall = 2;
    CHECK(checker.set_targets({{1, dead_slower}, {3, alive}}) == std::vector<uint32_t>{1});
    const HealthStatus restarted = *checker.status(1);
    CHECK(restarted.up);
    CHECK(restarted.checks <= 1);
    CHECK(restarted.checks < kept.checks);
    CHECK(restarted.transitions == 0);
    CHECK_FALSE(checker.status(2));
    CHECK(checker.is_up(2));

    // It then goes down again on its own: one more callback, counted from the new start.
    REQUIRE(eventually([&] { return !checker.is_up(1); }));
    CHECK(checker.status(1)->transitions == 1);
    CHECK(recorder.of(1).size() == 2);
    CHECK(recorder.of(2).empty());
    CHECK(recorder.of(3).empty());

    // Removing a down target flips its is_up() answer too: unknown ids read up.
    CHECK(checker.set_targets({{3, alive}}) == std::vector<uint32_t>{1});
    CHECK(checker.is_up(1));
}

TEST_CASE("health: bad targets are refused and change nothing", "[health]") {
    HealthChecker checker(nullptr);
    HealthCheckSpec good = fast_spec(HealthCheckKind::http, 8080);
    good.interval_ms = 60'000;  // no check needed here
    CHECK_FALSE(health_check_spec_error(good));

    auto bad = [&](auto change) {
        HealthCheckSpec spec = good;
        change(spec);
        return health_check_spec_error(spec).value_or("");
    };
    CHECK(bad([](auto& s) { s.address = "backend.example"; }) ==
          "address 'backend.example' is not an IPv4 or IPv6 literal");
    CHECK(bad([](auto& s) { s.port = 0; }) == "port must be 1..65535");
    CHECK(bad([](auto& s) { s.interval_ms = 0; }) == "interval_ms must be above 0");
    CHECK(bad([](auto& s) { s.timeout_ms = 0; }) == "timeout_ms must be above 0");
    CHECK(bad([](auto& s) { s.rise = 0; }) == "rise must be above 0");
    CHECK(bad([](auto& s) { s.fall = 0; }) == "fall must be above 0");
    CHECK(bad([](auto& s) { s.http_path = "health"; }) ==
          "http_path 'health' must start with '/' and hold no spaces or control characters");
    CHECK(bad([](auto& s) { s.http_path = "/x HTTP/1.1\r\nHost: evil"; }) ==
          "http_path '/x HTTP/1.1??Host: evil' must start with '/' and hold no spaces or control characters");
    CHECK(bad([](auto& s) { s.expect_status = 20; }) == "expect_status 20 is not an HTTP status code (100..599)");

    checker.set_targets({{1, good}});
    HealthCheckSpec no_port = good;
    no_port.port = 0;
    CHECK_THROWS_WITH(checker.set_targets({{2, good}, {3, no_port}}),
                      "health check of target 3: port must be 1..65535");
    CHECK_THROWS_WITH(checker.set_targets({{2, good}, {2, good}}), "health check target 2 listed twice");
    CHECK(checker.status(1));
    CHECK_FALSE(checker.status(2));
}

TEST_CASE("health: the thread wakes at once for set_targets and for destruction", "[health]") {
    Backend silent(Backend::Mode::silent), backend(Backend::Mode::tcp);
    auto checker = std::make_unique<HealthChecker>(nullptr);
    std::this_thread::sleep_for(50ms);  // let the thread settle into an unbounded poll() with no targets

    // The first check does not wait for the (long) interval.
    HealthCheckSpec spec = fast_spec(HealthCheckKind::tcp, backend.port());
    spec.interval_ms = 60'000;
    HealthCheckSpec stuck = fast_spec(HealthCheckKind::http, silent.port());
    stuck.timeout_ms = 60'000;
    checker->set_targets({{1, spec}, {2, stuck}});
    REQUIRE(eventually([&] { return checks_of(*checker, 1) == 1; }, 2000ms));
    REQUIRE(eventually([&] { return silent.accepted() == 1; }, 2000ms));

    // A check in flight for a minute does not hold up destruction.
    const auto t0 = Clock::now();
    checker.reset();
    CHECK(Clock::now() - t0 < 1s);
}

TEST_CASE("health: IPv6 loopback backends, TCP and HTTP", "[health]") {
    if (!ipv6_loopback_available()) {
        WARN("no IPv6 loopback here; skipped");
        return;
    }
    Backend tcp(Backend::Mode::tcp, "::1"), http(Backend::Mode::http_503, "::1");
    HealthChecker checker(nullptr);
    HealthCheckSpec http_spec = fast_spec(HealthCheckKind::http, http.port(), "::1");
    http_spec.fall = 2;
    checker.set_targets({{1, fast_spec(HealthCheckKind::tcp, tcp.port(), "::1")}, {2, http_spec}});

    REQUIRE(eventually([&] { return checks_of(checker, 1) >= 3 && !checker.is_up(2); }));
    CHECK(checker.status(1)->failures == 0);
    CHECK(checker.status(2)->last_error == "HTTP status 503, expected 200");
    CHECK(http.last_request().find("\r\nHost: [::1]:" + std::to_string(http.port()) + "\r\n") != std::string::npos);
}

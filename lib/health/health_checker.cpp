#include "health/health_checker.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string_view>
#include <system_error>
#include <unordered_set>

namespace sluice {

namespace {

using Clock = std::chrono::steady_clock;

// New targets' first checks are spread over this window (or their interval, if shorter) so a config with a hundred
// backends does not open a hundred sockets in the same millisecond; later checks keep that spacing because each is
// scheduled one interval after the previous one started.
constexpr std::chrono::milliseconds kFirstCheckSpread{500};
// A status line is "HTTP/1.1 200 OK" plus a reason phrase; a backend sending this much without a line end is not
// answering HTTP, and reading on would only let it make us buffer.
constexpr std::size_t kMaxStatusLine = 1024;
// How long to back off when poll() itself fails (ENOMEM) or the loop hits an unexpected exception, so the thread
// neither spins nor dies.
constexpr std::chrono::milliseconds kErrorBackoff{100};

struct Endpoint {
    sockaddr_storage addr{};
    socklen_t len = 0;
};

std::optional<Endpoint> parse_endpoint(const std::string& address, uint16_t port) {
    Endpoint e;
    auto* v4 = reinterpret_cast<sockaddr_in*>(&e.addr);
    if (inet_pton(AF_INET, address.c_str(), &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons(port);
        e.len = sizeof(sockaddr_in);
        return e;
    }
    auto* v6 = reinterpret_cast<sockaddr_in6*>(&e.addr);
    if (inet_pton(AF_INET6, address.c_str(), &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons(port);
        e.len = sizeof(sockaddr_in6);
        return e;
    }
    return std::nullopt;
}

// Operators read these in `status` output and transition logs, so the common ones get plain lower-case words.
std::string errno_words(int err) {
    switch (err) {
    case ECONNREFUSED: return "connection refused";
    case ECONNRESET: return "connection reset";
    case ECONNABORTED: return "connection aborted";
    case EPIPE: return "connection closed by the backend";
    case EHOSTUNREACH: return "host unreachable";
    case ENETUNREACH: return "network unreachable";
    case ETIMEDOUT: return "connection timed out";
    case EADDRNOTAVAIL: return "no local address or port available";
    default: break;
    }
    std::string text = std::generic_category().message(err);
    if (!text.empty()) text[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(text[0])));
    return text;
}

// RFC 9110 §7.2: Host carries the port unless it is the scheme's default, and an IPv6 literal goes in brackets.
std::string http_request(const HealthCheckSpec& spec) {
    std::string host = spec.address.find(':') == std::string::npos ? spec.address : "[" + spec.address + "]";
    if (spec.port != 80) host += ":" + std::to_string(spec.port);
    return "GET " + spec.http_path + " HTTP/1.0\r\nHost: " + host +
           "\r\nUser-Agent: sluice-health-check\r\nConnection: close\r\n\r\n";
}

// Quotes what a backend sent for an error message: short, and with no control characters to garble a log line.
std::string printable(std::string_view text) {
    constexpr std::size_t kMax = 64;
    std::string out;
    for (const char c : text.substr(0, kMax)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
    if (text.size() > kMax) out += "...";
    return out;
}

// Checks "HTTP/x.y NNN[ reason]" (RFC 9112 §4) against the expected code; the error in words, or nullopt.
std::optional<std::string> check_status_line(std::string_view line, int expect_status) {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const bool well_formed =
        line.size() >= 12 && line.substr(0, 5) == "HTTP/" && line[8] == ' ' &&
        std::isdigit(static_cast<unsigned char>(line[9])) && std::isdigit(static_cast<unsigned char>(line[10])) &&
        std::isdigit(static_cast<unsigned char>(line[11])) && (line.size() == 12 || line[12] == ' ');
    if (!well_formed) return "not an HTTP status line: '" + printable(line) + "'";
    const int status = (line[9] - '0') * 100 + (line[10] - '0') * 10 + (line[11] - '0');
    if (status != expect_status)
        return "HTTP status " + std::to_string(status) + ", expected " + std::to_string(expect_status);
    return std::nullopt;
}

// One target's check as the checker thread sees it: scheduling, and the socket of the check in flight.
struct Probe {
    enum class Phase : uint8_t { idle, connecting, sending, reading };

    Probe(uint64_t generation_in, const HealthCheckSpec& spec_in, Clock::time_point first_due)
        : generation(generation_in), spec(spec_in), endpoint(parse_endpoint(spec.address, spec.port)),
          request(spec.kind == HealthCheckKind::http ? http_request(spec) : std::string()), next_due(first_due) {}
    uint64_t generation;
    HealthCheckSpec spec;
    std::optional<Endpoint> endpoint;  // set_targets validated the address; nullopt only if that ever changes
    std::string request;               // http only
    Clock::time_point next_due, started, deadline;
    UniqueFd socket;
    Phase phase = Phase::idle;
    std::size_t sent = 0;
    std::string response;
};

struct Outcome {
    bool done;
    bool ok;
    std::string error;
};
const Outcome kPending{false, false, {}};
Outcome passed() { return {true, true, {}}; }
Outcome failed(std::string error) { return {true, false, std::move(error)}; }

Outcome try_read(Probe& p) {
    char buf[512];
    for (;;) {
        const std::size_t room = std::min(sizeof buf, kMaxStatusLine - p.response.size());
        const ssize_t n = ::recv(p.socket.get(), buf, room, 0);
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return kPending;
            return failed(errno_words(errno) + " while waiting for the HTTP status line");
        }
        if (n == 0) {
            return failed(p.response.empty()
                              ? std::string("connection closed before any HTTP response")
                              : "connection closed inside the HTTP status line '" + printable(p.response) + "'");
        }
        p.response.append(buf, static_cast<std::size_t>(n));
        if (const auto eol = p.response.find('\n'); eol != std::string::npos) {
            auto error = check_status_line(std::string_view(p.response).substr(0, eol), p.spec.expect_status);
            return error ? failed(std::move(*error)) : passed();
        }
        if (p.response.size() >= kMaxStatusLine)
            return failed("no HTTP status line in the first " + std::to_string(kMaxStatusLine) + " bytes");
    }
}

Outcome try_send(Probe& p) {
    while (p.sent < p.request.size()) {
        // MSG_NOSIGNAL: a backend that closed must fail the check, not SIGPIPE the daemon.
        const ssize_t n = ::send(p.socket.get(), p.request.data() + p.sent, p.request.size() - p.sent, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return kPending;
            return failed(errno_words(errno) + " while sending the HTTP request");
        }
        p.sent += static_cast<std::size_t>(n);
    }
    p.phase = Probe::Phase::reading;
    return try_read(p);  // usually EAGAIN, but costs nothing and catches an instant answer
}

Outcome on_connected(Probe& p) {
    if (p.spec.kind == HealthCheckKind::tcp) return passed();
    p.phase = Probe::Phase::sending;
    return try_send(p);
}

Outcome start(Probe& p, Clock::time_point now) {
    p.started = now;
    p.deadline = now + std::chrono::milliseconds(p.spec.timeout_ms);
    p.sent = 0;
    p.response.clear();
    if (!p.endpoint) return failed("address '" + p.spec.address + "' is not an IPv4 or IPv6 literal");
    p.socket.reset(::socket(p.endpoint->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!p.socket.valid()) return failed("cannot open a socket: " + errno_words(errno));
    p.phase = Probe::Phase::connecting;
    if (::connect(p.socket.get(), reinterpret_cast<const sockaddr*>(&p.endpoint->addr), p.endpoint->len) == 0)
        return on_connected(p);
    if (errno == EINPROGRESS || errno == EINTR) return kPending;  // EINTR: the connect still goes on (connect(2))
    return failed(errno_words(errno));
}

Outcome advance(Probe& p, short revents) {
    switch (p.phase) {
    case Probe::Phase::connecting: {
        int err = 0;
        socklen_t len = sizeof err;
        if (::getsockopt(p.socket.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
        if (err != 0) return failed(errno_words(err));
        if ((revents & (POLLERR | POLLHUP)) != 0) return failed("connection closed while connecting");
        return on_connected(p);
    }
    case Probe::Phase::sending: return try_send(p);
    case Probe::Phase::reading: return try_read(p);
    case Probe::Phase::idle: break;
    }
    return kPending;
}

const char* phase_words(Probe::Phase phase) {
    switch (phase) {
    case Probe::Phase::connecting: return "connecting";
    case Probe::Phase::sending: return "sending the HTTP request";
    case Probe::Phase::reading: return "waiting for the HTTP status line";
    case Probe::Phase::idle: break;
    }
    return "idle";
}

}  // namespace

std::optional<std::string> health_check_spec_error(const HealthCheckSpec& spec) {
    if (!parse_endpoint(spec.address, spec.port))
        return "address '" + spec.address + "' is not an IPv4 or IPv6 literal";
    if (spec.port == 0) return std::string("port must be 1..65535");
    if (spec.interval_ms == 0) return std::string("interval_ms must be above 0");
    if (spec.timeout_ms == 0) return std::string("timeout_ms must be above 0");
    if (spec.rise == 0) return std::string("rise must be above 0");
    if (spec.fall == 0) return std::string("fall must be above 0");
    if (spec.kind == HealthCheckKind::http) {
        // A space or CR/LF in the path would end the request line early or smuggle in headers.
        const bool clean =
            std::all_of(spec.http_path.begin(), spec.http_path.end(), [](char c) { return c > 0x20 && c < 0x7f; });
        if (spec.http_path.empty() || spec.http_path[0] != '/' || !clean)
            return "http_path '" + printable(spec.http_path) +
                   "' must start with '/' and hold no spaces or control characters";
        if (spec.expect_status < 100 || spec.expect_status > 599)
            return "expect_status " + std::to_string(spec.expect_status) + " is not an HTTP status code (100..599)";
    }
    return std::nullopt;
}

HealthChecker::HealthChecker(TransitionCallback on_transition) : on_transition_(std::move(on_transition)) {
    wake_fd_.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    if (!wake_fd_.valid()) throw std::system_error(errno, std::generic_category(), "health checker: eventfd");
    thread_ = std::thread([this] { run(); });
}

HealthChecker::~HealthChecker() {
    {
        std::lock_guard lock(mutex_);
        stopping_ = true;
    }
    wake();
    thread_.join();
}

void HealthChecker::wake() const {
    const uint64_t one = 1;
    // EAGAIN means the counter is saturated, so the thread is due to wake anyway.
    if (::write(wake_fd_.get(), &one, sizeof one) < 0) {}
}

std::vector<uint32_t> HealthChecker::set_targets(std::vector<HealthTarget> targets) {
    std::unordered_set<uint32_t> ids;
    for (const HealthTarget& t : targets) {
        if (auto error = health_check_spec_error(t.spec))
            throw std::invalid_argument("health check of target " + std::to_string(t.id) + ": " + *error);
        if (!ids.insert(t.id).second)
            throw std::invalid_argument("health check target " + std::to_string(t.id) + " listed twice");
    }
    std::vector<uint32_t> flipped;
    {
        std::lock_guard lock(mutex_);
        // A down target that is removed or restarted reads up from now on.
        for (const auto& [id, entry] : entries_)
            if (!entry.status.up && !ids.contains(id)) flipped.push_back(id);
        std::unordered_map<uint32_t, Entry> next;
        for (HealthTarget& t : targets) {
            const auto old = entries_.find(t.id);
            if (old != entries_.end() && old->second.spec == t.spec) {
                next.emplace(t.id, std::move(old->second));
                continue;
            }
            if (old != entries_.end() && !old->second.status.up) flipped.push_back(t.id);
            next.emplace(t.id, Entry{std::move(t.spec), HealthStatus{true, 0, 0, 0, {}}, 0, 0, next_generation_++});
        }
        entries_ = std::move(next);
        targets_changed_ = true;
    }
    wake();
    std::sort(flipped.begin(), flipped.end());
    return flipped;
}

bool HealthChecker::is_up(uint32_t id) const {
    std::lock_guard lock(mutex_);
    const auto it = entries_.find(id);
    return it == entries_.end() || it->second.status.up;
}

std::optional<HealthStatus> HealthChecker::status(uint32_t id) const {
    std::lock_guard lock(mutex_);
    const auto it = entries_.find(id);
    if (it == entries_.end()) return std::nullopt;
    return it->second.status;
}

std::optional<HealthChecker::Transition> HealthChecker::record(uint32_t id, uint64_t generation, bool ok,
                                                               const std::string& error) {
    std::lock_guard lock(mutex_);
    const auto it = entries_.find(id);
    if (it == entries_.end() || it->second.generation != generation) return std::nullopt;  // removed or replaced
    Entry& e = it->second;
    HealthStatus& s = e.status;
    ++s.checks;
    if (ok) {
        e.consecutive_failed = 0;
        ++e.consecutive_ok;
        if (s.up || e.consecutive_ok < e.spec.rise) return std::nullopt;
        s.up = true;
        ++s.transitions;
        return Transition{id, true, std::to_string(e.consecutive_ok) + " checks in a row passed"};
    }
    ++s.failures;
    s.last_error = error;
    e.consecutive_ok = 0;
    ++e.consecutive_failed;
    if (!s.up || e.consecutive_failed < e.spec.fall) return std::nullopt;
    s.up = false;
    ++s.transitions;
    return Transition{id, false, error + " (" + std::to_string(e.consecutive_failed) + " checks in a row failed)"};
}

bool HealthChecker::wait(std::vector<pollfd>& fds, Clock::time_point wake_at) const {
    int timeout_ms = -1;  // nothing scheduled: sleep until set_targets or the destructor wakes us
    if (wake_at != Clock::time_point::max()) {
        // Rounded up: waking a millisecond early would only spin until the deadline really passed.
        const auto wait = std::chrono::ceil<std::chrono::milliseconds>(wake_at - Clock::now()).count();
        timeout_ms = static_cast<int>(std::clamp<int64_t>(wait, 0, 60'000));
    }
    if (::poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) {
        spdlog::error("health checker: poll: {}; retrying", errno_words(errno));
        std::this_thread::sleep_for(kErrorBackoff);
        return false;
    }
    if ((fds[0].revents & POLLIN) != 0) {
        uint64_t count;
        if (::read(wake_fd_.get(), &count, sizeof count) < 0) {}  // EAGAIN: someone else drained it; nothing to do
    }
    return true;
}

void HealthChecker::notify(const std::vector<Transition>& transitions) const {
    for (const Transition& t : transitions) {
        try {
            if (on_transition_) on_transition_(t.id, t.up, t.reason);
        } catch (const std::exception& e) {
            spdlog::error("health checker: transition callback for target {} threw: {}", t.id, e.what());
        } catch (...) {
            spdlog::error("health checker: transition callback for target {} threw", t.id);
        }
    }
}

void HealthChecker::run() noexcept {
    // The thread's own view of the targets; rebuilt from entries_ whenever set_targets changed them.
    std::unordered_map<uint32_t, Probe> probes;
    std::vector<pollfd> fds;
    std::vector<std::pair<uint32_t, Probe*>> polled;  // fds[i + 1] belongs to polled[i]
    struct Result {
        uint32_t id;
        uint64_t generation;
        Outcome outcome;
    };
    std::vector<Result> results;

    const auto finish = [&](uint32_t id, Probe& p, Outcome outcome, Clock::time_point now) {
        p.socket.reset();
        p.phase = Probe::Phase::idle;
        // One interval after the start, not the end, so checks keep their spacing; a check that outlived its
        // interval (timeout_ms > interval_ms) is followed by the next one straight away.
        p.next_due = std::max(p.started + std::chrono::milliseconds(p.spec.interval_ms), now);
        results.push_back({id, p.generation, std::move(outcome)});
    };

    for (;;) {
        try {
            Clock::time_point now = Clock::now();
            {
                std::lock_guard lock(mutex_);
                if (stopping_) break;
                if (targets_changed_) {
                    targets_changed_ = false;
                    std::erase_if(probes, [&](const auto& kv) {
                        const auto it = entries_.find(kv.first);
                        return it == entries_.end() || it->second.generation != kv.second.generation;
                    });
                    std::vector<uint32_t> fresh;
                    for (const auto& [id, entry] : entries_)
                        if (!probes.contains(id)) fresh.push_back(id);
                    std::sort(fresh.begin(), fresh.end());
                    for (std::size_t k = 0; k < fresh.size(); ++k) {
                        const Entry& entry = entries_.at(fresh[k]);
                        const auto window = std::min<Clock::duration>(
                            kFirstCheckSpread, std::chrono::milliseconds(entry.spec.interval_ms));
                        const auto offset = window * static_cast<int64_t>(k) / static_cast<int64_t>(fresh.size());
                        probes.try_emplace(fresh[k], entry.generation, entry.spec, now + offset);
                    }
                }
            }

            // Start what is due, then wait on every check in flight at once.
            fds.assign(1, pollfd{wake_fd_.get(), POLLIN, 0});
            polled.clear();
            auto wake_at = Clock::time_point::max();
            for (auto& [id, p] : probes) {
                if (p.phase == Probe::Phase::idle && now >= p.next_due) {
                    Outcome outcome = start(p, now);
                    if (outcome.done) finish(id, p, std::move(outcome), now);
                }
                if (p.phase == Probe::Phase::idle) {
                    wake_at = std::min(wake_at, p.next_due);
                } else {
                    wake_at = std::min(wake_at, p.deadline);
                    const short events = p.phase == Probe::Phase::reading ? POLLIN : POLLOUT;
                    fds.push_back(pollfd{p.socket.get(), events, 0});
                    polled.emplace_back(id, &p);
                }
            }
            // Checks that failed at once are reported without waiting.
            if (!wait(fds, results.empty() ? wake_at : Clock::now())) continue;

            now = Clock::now();
            for (std::size_t i = 0; i < polled.size(); ++i) {
                auto& [id, p] = polled[i];
                Outcome outcome = fds[i + 1].revents != 0 ? advance(*p, fds[i + 1].revents) : kPending;
                if (!outcome.done && now >= p->deadline)
                    outcome = failed("timeout after " + std::to_string(p->spec.timeout_ms) + " ms (" +
                                     phase_words(p->phase) + ")");
                if (outcome.done) finish(id, *p, std::move(outcome), now);
            }

            // Counters and transitions under the lock; callbacks after it, so they may call back into us.
            std::vector<Transition> transitions;
            for (Result& r : results)
                if (auto t = record(r.id, r.generation, r.outcome.ok, r.outcome.error))
                    transitions.push_back(std::move(*t));
            results.clear();
            notify(transitions);
        } catch (const std::exception& e) {
            // Only allocation can fail in here; drop this round's results rather than let the thread die.
            spdlog::error("health checker: {}; retrying", e.what());
            results.clear();
            std::this_thread::sleep_for(kErrorBackoff);
        }
    }
}

}  // namespace sluice

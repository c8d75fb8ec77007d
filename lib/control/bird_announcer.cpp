#include "control/bird_announcer.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include <spdlog/spdlog.h>

#include "common/unique_fd.hpp"

namespace sluice {
namespace {

constexpr auto kFirstBackoff = std::chrono::milliseconds(500);
constexpr auto kMaxBackoff = std::chrono::milliseconds(30000);
constexpr auto kFailureLogInterval = std::chrono::seconds(30);
constexpr std::size_t kMaxReplyBytes =
    std::size_t{64} * 1024;  // a configure answer is a few lines; a runaway one is cut off

std::string errno_text(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

}  // namespace

std::vector<std::string> wanted_vips(const std::vector<ServiceHealth>& services, bool links_up, bool draining) {
    std::set<std::string> vips;
    if (!links_up || draining) return {};
    for (const ServiceHealth& s : services)
        if (s.usable >= s.min_healthy) vips.insert(s.vip);
    return {vips.begin(), vips.end()};
}

std::string render_bird_include(const std::vector<std::string>& vips) {
    std::string v4, v6;
    for (const std::string& vip : vips) {
        const bool six = vip.find(':') != std::string::npos;
        (six ? v6 : v4) += "    route " + vip + (six ? "/128" : "/32") + " blackhole;\n";
    }
    return "# Written by sluice (bgp.include_file): the VIPs it can serve now. Do not edit; sluice rewrites it.\n"
           "protocol static sluice_vips4 {\n    ipv4;\n" +
           v4 +
           "}\n"
           "protocol static sluice_vips6 {\n    ipv6;\n" +
           v6 + "}\n";
}

bool write_file_atomically(const std::string& path, const std::string& text, std::string& error) {
    const std::string tmp = path + ".tmp";
    UniqueFd file(open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!file.valid()) {
        error = errno_text(("cannot create " + tmp).c_str());
        return false;
    }
    std::size_t done = 0;
    while (done < text.size()) {
        const ssize_t n = write(file.get(), text.data() + done, text.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            error = errno_text(("cannot write " + tmp).c_str());
            file.reset();
            unlink(tmp.c_str());
            return false;
        }
        done += static_cast<std::size_t>(n);
    }
    // No fsync: the file lives in /run (tmpfs) and is rewritten at every start.
    if (!file.close() || rename(tmp.c_str(), path.c_str()) != 0) {
        error = errno_text(("cannot replace " + path).c_str());
        unlink(tmp.c_str());
        return false;
    }
    return true;
}

BirdReply bird_request(const std::string& socket_path, const std::string& command, std::chrono::milliseconds timeout) {
    BirdReply reply;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    if (socket_path.size() >= sizeof address.sun_path) {
        reply.error = "socket path too long: " + socket_path;
        return reply;
    }
    std::memcpy(address.sun_path, socket_path.c_str(), socket_path.size());
    const UniqueFd connection(socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    const int fd = connection.get();
    if (fd < 0) {
        reply.error = errno_text("socket");
        return reply;
    }
    // A unix stream connect completes at once or fails (ENOENT, ECONNREFUSED); EAGAIN: BIRD's backlog is full.
    if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
        reply.error = errno_text(("cannot connect to " + socket_path).c_str());
        return reply;
    }
    const auto wait = [&](short events) {
        for (;;) {
            const auto left =
                std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
            if (left.count() <= 0) return false;
            pollfd p{fd, events, 0};
            const int n = poll(&p, 1, static_cast<int>(left.count()));
            if (n > 0) return true;
            if (n < 0 && errno != EINTR) return false;
        }
    };
    std::string buffer;
    std::size_t consumed = 0;
    // Reads complete lines until one ends a reply ("DDDD " with a space); false on timeout, EOF or error.
    const auto read_reply = [&](std::vector<std::string>& lines, int& code) {
        for (;;) {
            std::size_t eol;
            while ((eol = buffer.find('\n', consumed)) != std::string::npos) {
                std::string line = buffer.substr(consumed, eol - consumed);
                consumed = eol + 1;
                // "DDDD-text" goes on, "DDDD text" ends, " text" continues the previous line's code.
                const bool coded = line.size() >= 5 && std::all_of(line.begin(), line.begin() + 4, ::isdigit);
                if (coded) {
                    code = std::stoi(line.substr(0, 4));
                    lines.push_back(line.substr(5));
                    if (line[4] == ' ') return true;
                } else {
                    lines.push_back(line.empty() ? line : line.substr(1));
                }
            }
            if (buffer.size() > kMaxReplyBytes) {
                reply.error = "BIRD's reply is too long";
                return false;
            }
            if (!wait(POLLIN)) {
                reply.error = "BIRD did not answer within " + std::to_string(timeout.count()) + " ms";
                return false;
            }
            char chunk[4096];
            const ssize_t n = read(fd, chunk, sizeof chunk);
            if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
            if (n <= 0) {
                reply.error = n == 0 ? "BIRD closed the control connection" : errno_text("read from BIRD");
                return false;
            }
            buffer.append(chunk, static_cast<std::size_t>(n));
        }
    };
    std::vector<std::string> greeting;
    int greeting_code = 0;
    if (!read_reply(greeting, greeting_code)) return reply;
    if (greeting_code != 1) {
        reply.error = "unexpected greeting from BIRD: " + (greeting.empty() ? std::string() : greeting.back());
        return reply;
    }
    const std::string line = command + "\n";
    std::size_t sent = 0;
    while (sent < line.size()) {
        if (!wait(POLLOUT)) {
            reply.error = "cannot send to BIRD within " + std::to_string(timeout.count()) + " ms";
            return reply;
        }
        const ssize_t n = send(fd, line.data() + sent, line.size() - sent, MSG_NOSIGNAL);
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        if (n <= 0) {
            reply.error = errno_text("send to BIRD");
            return reply;
        }
        sent += static_cast<std::size_t>(n);
    }
    if (!read_reply(reply.lines, reply.code)) return reply;
    reply.ok = reply.code < 1000;  // 0xxx: success; 8xxx runtime errors, 9xxx parse errors
    if (!reply.ok)
        reply.error =
            "BIRD answered " + std::to_string(reply.code) + ": " + (reply.lines.empty() ? "" : reply.lines.back());
    return reply;
}

BirdAnnouncer::BirdAnnouncer(BgpConfig config, Apply apply) : config_(std::move(config)), apply_(std::move(apply)) {
    if (!apply_) apply_ = [this](const std::string& text, std::string& error) { return apply_default(text, error); };
}

bool BirdAnnouncer::apply_default(const std::string& text, std::string& error) const {
    if (!write_file_atomically(config_.include_file, text, error)) return false;
    // `configure` re-reads BIRD's whole config, which includes our file; protocols whose config did not change
    // keep running (BGP sessions stay up), the static protocols restart with the new routes.
    const BirdReply reply =
        bird_request(config_.bird_socket, "configure", std::chrono::milliseconds(config_.timeout_ms));
    if (!reply.ok) error = "configure: " + reply.error;
    return reply.ok;
}

bool BirdAnnouncer::update(const std::vector<std::string>& wanted, Clock::time_point now, bool force) {
    for (const std::string& vip : wanted) vips_.try_emplace(vip);
    const bool changed = wanted != wanted_;
    wanted_ = wanted;
    if (!force && synced_ && !failing_ && wanted_ == announced_) return false;
    // A new set goes out at once even after failures; the same set again waits for the backoff.
    if (!force && failing_ && !changed && now < next_attempt_) return false;
    std::string error;
    if (!apply_(render_bird_include(wanted_), error)) {
        ++failures_;
        last_error_ = error;
        failing_ = true;
        backoff_ = backoff_.count() == 0 ? kFirstBackoff : std::min(backoff_ * 2, kMaxBackoff);
        next_attempt_ = now + backoff_;
        // Rate-limited: the first failure, then a summary at most every 30 s.
        if (last_failure_log_ == Clock::time_point{} || now - last_failure_log_ >= kFailureLogInterval) {
            spdlog::error("bgp: BIRD not updated ({} VIP(s) wanted): {}{}; retrying", wanted_.size(), error,
                          failures_unlogged_
                              ? fmt::format(" ({} more failure(s) since the last message)", failures_unlogged_)
                              : "");
            failures_unlogged_ = 0;
            last_failure_log_ = now;
        } else {
            ++failures_unlogged_;
        }
        return false;
    }
    if (failing_) spdlog::info("bgp: BIRD reachable again after {} failure(s)", failures_);
    failing_ = false;
    backoff_ = std::chrono::milliseconds(0);
    ++reconfigures_;
    const std::set<std::string> before(announced_.begin(), announced_.end()), after(wanted_.begin(), wanted_.end());
    for (const std::string& vip : after)
        if (!before.count(vip)) {
            ++vips_[vip].announcements;
            spdlog::info("bgp: announcing {}", vip);
        }
    for (const std::string& vip : before)
        if (!after.count(vip)) {
            ++vips_[vip].withdrawals;
            spdlog::info("bgp: withdrawing {}", vip);
        }
    announced_ = wanted_;
    synced_ = true;
    return true;
}

BgpRecord BirdAnnouncer::record() const {
    BgpRecord r;
    r.enabled = true;
    r.in_sync = in_sync();
    r.reconfigures = reconfigures_;
    r.reconfigure_failures = failures_;
    r.last_error = last_error_;
    const std::set<std::string> wanted(wanted_.begin(), wanted_.end()), announced(announced_.begin(), announced_.end());
    for (const auto& [vip, counts] : vips_)
        r.vips.push_back(
            {vip, wanted.count(vip) > 0, announced.count(vip) > 0, counts.announcements, counts.withdrawals});
    return r;
}

}  // namespace sluice

#include "control/control_mailbox.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <system_error>

namespace sluice {

ControlMailbox::ControlMailbox(std::chrono::milliseconds timeout)
    : timeout_(timeout), event_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
    if (event_fd_ < 0) throw std::system_error(errno, std::generic_category(), "eventfd");
}

ControlMailbox::~ControlMailbox() { close(event_fd_); }

bool ControlMailbox::run(std::function<void()> job, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    if (closed_) return false;
    const uint64_t ticket = ++requested_;
    jobs_.push_back(std::move(job));
    const uint64_t one = 1;
    if (write(event_fd_, &one, sizeof one) < 0) {
        // Only fails when the counter would overflow; the control loop still sees the earlier wake-up.
    }
    return done_.wait_for(lock, timeout, [&] { return completed_ >= ticket || closed_; }) && completed_ >= ticket;
}

void ControlMailbox::drain() {
    uint64_t value;
    if (read(event_fd_, &value, sizeof value) != sizeof value) return;
    std::unique_lock lock(mutex_);
    while (!jobs_.empty() && !closed_) {
        auto job = std::move(jobs_.front());
        jobs_.pop_front();
        lock.unlock();
        job();
        lock.lock();
        ++completed_;
    }
    done_.notify_all();
}

void ControlMailbox::close_all() {
    std::lock_guard lock(mutex_);
    closed_ = true;
    jobs_.clear();
    done_.notify_all();
}

}  // namespace sluice

#include "health/health_transitions.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <system_error>

namespace sluice {

HealthTransitionQueue::HealthTransitionQueue() : event_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
    if (event_fd_ < 0) throw std::system_error(errno, std::generic_category(), "eventfd");
}

HealthTransitionQueue::~HealthTransitionQueue() { close(event_fd_); }

void HealthTransitionQueue::push(HealthTransition transition) {
    {
        std::lock_guard lock(mutex_);
        pending_.push_back(std::move(transition));
    }
    const uint64_t one = 1;
    if (write(event_fd_, &one, sizeof one) < 0) {
        // Only fails when the counter would overflow; the control loop still sees the earlier wake-up.
    }
}

std::vector<HealthTransition> HealthTransitionQueue::take() {
    uint64_t value;
    if (read(event_fd_, &value, sizeof value) != sizeof value) return {};
    std::vector<HealthTransition> taken;
    std::lock_guard lock(mutex_);
    taken.swap(pending_);
    return taken;
}

}  // namespace sluice

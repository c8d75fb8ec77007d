// Backends' up/down transitions on their way from the health checker's thread to the control thread: push on the
// checker's thread, take on the control thread (whose loop polls fd()). Owned by the daemon.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace sluice {

struct HealthTransition {
    uint32_t backend_id;  // stable id
    bool up;
    std::string reason;
};

class HealthTransitionQueue {
public:
    HealthTransitionQueue();
    ~HealthTransitionQueue();
    HealthTransitionQueue(const HealthTransitionQueue&) = delete;
    HealthTransitionQueue& operator=(const HealthTransitionQueue&) = delete;

    int fd() const { return event_fd_; }
    // Any thread.
    void push(HealthTransition transition);
    // Control thread: every transition since the last take, oldest first; empty when none came.
    std::vector<HealthTransition> take();

private:
    int event_fd_ = -1;
    std::mutex mutex_;
    std::vector<HealthTransition> pending_;
};

}  // namespace sluice

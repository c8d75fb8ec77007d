// The data plane reduced to its snapshot slot, for the Reloader's tests: counts publications and re-judgings; no
// worker tracks connections.
#pragma once

#include <memory>
#include <utility>

#include "control/live_dataplane.hpp"

namespace sluice {

class FakeDataplane final : public LiveDataplane {
public:
    explicit FakeDataplane(std::unique_ptr<Snapshot> first) : running_(std::move(first)) {}
    const Snapshot& snapshot() const override { return *running_; }
    std::unique_ptr<Snapshot> publish(std::unique_ptr<Snapshot> next) override {
        ++publications;
        std::swap(next, running_);
        return next;
    }
    uint16_t worker_count() const override { return 1; }
    std::vector<std::unique_ptr<FlowWalk>> rejudge(const Snapshot&, std::chrono::milliseconds) override {
        ++rejudged;
        return {};
    }
    uint64_t connections_opened() const override { return 0; }
    int publications = 0;
    int rejudged = 0;

private:
    std::unique_ptr<Snapshot> running_;
};

}  // namespace sluice

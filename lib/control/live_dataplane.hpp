// The data plane as the control plane's units see it: the running snapshot, its publication under RCU, and walks of
// the workers' connection tables. RunningDataplane adapts the daemon's Dataplane; unit tests hold a snapshot in a
// plain fake. Control thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "pipeline/dataplane.hpp"
#include "pipeline/flow_walk.hpp"
#include "pipeline/snapshot.hpp"

namespace sluice {

class LiveDataplane {
public:
    virtual ~LiveDataplane() = default;
    virtual const Snapshot& snapshot() const = 0;
    // Publishes next; returns the previous snapshot once no lcore can read it any more.
    virtual std::unique_ptr<Snapshot> publish(std::unique_ptr<Snapshot> next) = 0;
    virtual uint16_t worker_count() const = 0;
    // Every worker re-judges its connections with candidate (reload --dry-run); empty when one did not finish in
    // time or none tracks connections.
    virtual std::vector<std::unique_ptr<FlowWalk>> rejudge(const Snapshot& candidate,
                                                           std::chrono::milliseconds timeout) = 0;
    // Connections ever opened: with none, an empty re-judging is no failure.
    virtual uint64_t connections_opened() const = 0;
};

class RunningDataplane final : public LiveDataplane {
public:
    explicit RunningDataplane(Dataplane& dataplane) : dataplane_(dataplane) {}
    const Snapshot& snapshot() const override { return dataplane_.snapshot(); }
    std::unique_ptr<Snapshot> publish(std::unique_ptr<Snapshot> next) override {
        return dataplane_.publish(std::move(next));
    }
    uint16_t worker_count() const override { return dataplane_.worker_count(); }
    std::vector<std::unique_ptr<FlowWalk>> rejudge(const Snapshot& candidate,
                                                   std::chrono::milliseconds timeout) override {
        return dataplane_.walk_flows(FlowFilter{}, 0, &candidate, timeout);
    }
    uint64_t connections_opened() const override { return dataplane_.totals().conn_inserts; }

private:
    Dataplane& dataplane_;
};

}  // namespace sluice

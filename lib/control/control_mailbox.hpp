// Jobs from the telemetry thread (reload, explain, flows, dry-run, drain) run on the control thread, which owns the
// config and the snapshot; the requester waits for its job, up to a timeout. Owned by the daemon. run and call: any
// thread but the control thread; drain: the control thread; close_all: the control thread, at stop. Not fast-path
// code.
//
// A requester that times out leaves its job queued: the job may run later, after the requester's frame is gone. So
// a job owns everything it touches except what outlives the mailbox's drains (the daemon), and call() hands its
// result back through a slot the job shares, never through the requester's stack.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>

namespace sluice {

class ControlMailbox {
public:
    static constexpr std::chrono::milliseconds kDefaultTimeout = std::chrono::seconds(60);

    explicit ControlMailbox(std::chrono::milliseconds timeout = kDefaultTimeout);
    ~ControlMailbox();
    ControlMailbox(const ControlMailbox&) = delete;
    ControlMailbox& operator=(const ControlMailbox&) = delete;

    // Readable when jobs wait: the control loop polls it.
    int fd() const { return event_fd_; }

    // Queues job and waits for it. False when the mailbox is closed or the job did not finish within the timeout
    // (it may still run later). Jobs that build tables (reload, dry run) pass a longer one.
    bool run(std::function<void()> job) { return run(std::move(job), timeout_); }
    bool run(std::function<void()> job, std::chrono::milliseconds timeout);

    // Runs job on the control thread and returns its result, or nullopt as run() returns false. The result goes
    // through a slot shared with the job, so a job that runs after its requester gave up writes into live memory.
    template <typename Result>
    std::optional<Result> call(std::function<Result()> job, std::chrono::milliseconds timeout) {
        auto slot = std::make_shared<std::optional<Result>>();
        if (!run([slot, job = std::move(job)] { *slot = job(); }, timeout)) return std::nullopt;
        return std::move(*slot);
    }
    template <typename Result>
    std::optional<Result> call(std::function<Result()> job) {
        return call(std::move(job), timeout_);
    }

    // Control thread: runs every waiting job, in the order they came.
    void drain();
    // Control thread, at stop: waiting and later requesters get false; queued jobs never run.
    void close_all();

private:
    const std::chrono::milliseconds timeout_;
    int event_fd_ = -1;
    std::mutex mutex_;
    std::condition_variable done_;
    std::deque<std::function<void()>> jobs_;
    uint64_t requested_ = 0;
    uint64_t completed_ = 0;
    bool closed_ = false;
};

}  // namespace sluice

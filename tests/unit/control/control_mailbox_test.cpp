#include <catch2/catch.hpp>

#include <poll.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "control/control_mailbox.hpp"

using namespace sluice;
using namespace std::chrono_literals;

namespace {

// The control thread's side: drains whenever the mailbox's fd says jobs wait, until told to stop.
struct ControlThread {
    explicit ControlThread(ControlMailbox& mailbox)
        : thread([this, &mailbox] {
              while (!stop) {
                  pollfd fd{mailbox.fd(), POLLIN, 0};
                  if (poll(&fd, 1, 10) > 0) mailbox.drain();
              }
          }) {}
    ~ControlThread() {
        stop = true;
        thread.join();
    }
    std::atomic<bool> stop{false};
    std::thread thread;
};

// A requester whose frame is gone once it returns: whatever it handed the mailbox must not point into it.
std::optional<std::vector<std::string>> ask_and_give_up(ControlMailbox& mailbox) {
    std::string local = "mine";
    return mailbox.call<std::vector<std::string>>([copy = local] { return std::vector<std::string>(100, copy); });
}

}  // namespace

TEST_CASE("mailbox: a job runs on the draining thread and its result comes back", "[mailbox]") {
    ControlMailbox mailbox;
    std::thread::id ran_on;
    std::optional<std::vector<std::string>> lines;
    {
        ControlThread control(mailbox);
        lines = mailbox.call<std::vector<std::string>>([&] {
            ran_on = std::this_thread::get_id();
            return std::vector<std::string>{"one", "two"};
        });
        CHECK(ran_on == control.thread.get_id());
    }
    REQUIRE(lines);
    CHECK(*lines == std::vector<std::string>{"one", "two"});
}

TEST_CASE("mailbox: jobs run in the order they came, each once", "[mailbox]") {
    ControlMailbox mailbox;
    std::vector<int> order;
    ControlThread control(mailbox);
    std::vector<std::thread> requesters;
    std::atomic<int> ok{0};
    for (int i = 0; i < 8; ++i) {
        requesters.emplace_back([&, i] {
            if (mailbox.run([&, i] { order.push_back(i); })) ++ok;
        });
        requesters.back().join();  // one at a time: the order is the order of arrival
    }
    CHECK(ok == 8);
    CHECK(order == std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7});
}

TEST_CASE("mailbox: a job run after its requester timed out writes into live memory", "[mailbox]") {
    ControlMailbox mailbox(20ms);
    // Nobody drains: the requester times out and returns; its frame is reused by the next calls.
    CHECK_FALSE(ask_and_give_up(mailbox));
    CHECK_FALSE(ask_and_give_up(mailbox));
    std::vector<std::string> scribble(64, "other frames");  // reuses the stack the requesters used
    // The control thread comes back late and runs both jobs: they write into slots they own (ASan would see a
    // write into a dead frame otherwise).
    mailbox.drain();
    CHECK(scribble.size() == 64);
    // A later request is answered normally.
    ControlThread control(mailbox);
    const auto lines = ask_and_give_up(mailbox);
    REQUIRE(lines);
    CHECK(lines->size() == 100);
    CHECK(lines->front() == "mine");
}

TEST_CASE("mailbox: closed, it answers false at once and drops what waits", "[mailbox]") {
    ControlMailbox mailbox(10s);
    bool ran = false;
    std::thread requester([&] { CHECK_FALSE(mailbox.run([&] { ran = true; })); });
    pollfd fd{mailbox.fd(), POLLIN, 0};
    REQUIRE(poll(&fd, 1, 5000) == 1);  // the job is queued
    const auto started = std::chrono::steady_clock::now();
    mailbox.close_all();
    requester.join();
    CHECK(std::chrono::steady_clock::now() - started < 5s);  // not the 10 s timeout
    mailbox.drain();
    CHECK_FALSE(ran);
    CHECK_FALSE(mailbox.run([&] { ran = true; }));
}

TEST_CASE("mailbox: a job given its own timeout is waited for beyond the default", "[mailbox]") {
    ControlMailbox mailbox(20ms);
    ControlThread control(mailbox);
    // A table build longer than the default timeout: the default gives up, the job's own timeout waits for it.
    CHECK_FALSE(mailbox.run([] { std::this_thread::sleep_for(200ms); }));
    const auto lines = mailbox.call<std::vector<std::string>>(
        [] {
            std::this_thread::sleep_for(200ms);
            return std::vector<std::string>{"built"};
        },
        30s);
    REQUIRE(lines);
    CHECK(lines->front() == "built");
}

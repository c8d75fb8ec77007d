#include "metrics/prometheus_exporter.hpp"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <prometheus/collectable.h>
#include <prometheus/exposer.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "metrics/metric_families.hpp"

namespace sluice {

// Families are built fresh at every scrape from the live counters.
class SluiceCollector : public prometheus::Collectable {
public:
    SluiceCollector(const StatusView& view, std::string version) : view_(view), version_(std::move(version)) {}

    std::vector<prometheus::MetricFamily> Collect() const override {
        return render_families(read_scrape(view_, version_));
    }

private:
    const StatusView& view_;
    std::string version_;
};

namespace {

// Opens and drops a TCP connection to the endpoint listening on "HOST:PORT" (a wildcard host: its loopback).
void knock(const std::string& listen) {
    const auto colon = listen.rfind(':');
    std::string host = listen.substr(0, colon);
    if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
    if (host.empty() || host == "0.0.0.0") host = "127.0.0.1";
    if (host == "::") host = "::1";
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (getaddrinfo(host.c_str(), listen.substr(colon + 1).c_str(), &hints, &found) != 0) return;
    const int fd = socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd >= 0) {
        (void)connect(fd, found->ai_addr, found->ai_addrlen);  // in progress or done: either wakes the listener
        close(fd);
    }
    freeaddrinfo(found);
}

}  // namespace

PrometheusExporter::PrometheusExporter(const std::string& listen, const StatusView& view, std::string version)
    : collector_(std::make_shared<SluiceCollector>(view, std::move(version))),
      exposer_(std::make_unique<prometheus::Exposer>(listen, 1)) {
    exposer_->RegisterCollectable(collector_);
    const auto ports = exposer_->GetListeningPorts();  // the port bound, should the config say 0
    listen_ = listen.substr(0, listen.rfind(':') + 1) + (ports.empty() ? "0" : std::to_string(ports.front()));
}

// civetweb's listening thread sees that it must stop only when its poll() returns, every 2 s when nobody connects:
// knocking on its port while the Exposer stops ends the stop at once, not up to 2 s later (a restart's pause).
PrometheusExporter::~PrometheusExporter() {
    std::atomic<bool> stopped{false};
    std::thread knocker([this, &stopped] {
        while (!stopped.load()) {
            knock(listen_);
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
    });
    exposer_.reset();
    stopped = true;
    knocker.join();
}

}  // namespace sluice

// The Prometheus endpoint (prometheus-cpp): GET /metrics on metrics.listen. Nothing is counted here: at each scrape
// the exporter's thread sums the lcores' own counters and reads the ports' stats, so lcores run no exporter code.
#pragma once

#include <memory>
#include <string>

#include "control/status.hpp"

namespace prometheus {
class Exposer;
}

namespace sluice {

class SluiceCollector;

class PrometheusExporter {
public:
    // Listens on "HOST:PORT"; throws std::runtime_error when it cannot. view must outlive the exporter.
    PrometheusExporter(const std::string& listen, const StatusView& view, std::string version);
    ~PrometheusExporter();
    PrometheusExporter(const PrometheusExporter&) = delete;
    PrometheusExporter& operator=(const PrometheusExporter&) = delete;

private:
    std::string listen_;
    std::shared_ptr<SluiceCollector> collector_;
    std::unique_ptr<prometheus::Exposer> exposer_;
};

}  // namespace sluice

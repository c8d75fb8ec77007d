#include "metrics/prometheus_exporter.hpp"

#include <prometheus/collectable.h>
#include <prometheus/exposer.h>

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

PrometheusExporter::PrometheusExporter(const std::string& listen, const StatusView& view, std::string version)
    : collector_(std::make_shared<SluiceCollector>(view, std::move(version))),
      exposer_(std::make_unique<prometheus::Exposer>(listen, 1)) {
    exposer_->RegisterCollectable(collector_);
}

PrometheusExporter::~PrometheusExporter() = default;  // the Exposer stops its HTTP thread first

}  // namespace sluice

#include <catch2/catch.hpp>

#include "control/rule_hits.hpp"

using namespace sluice;

namespace {

// A snapshot whose firewall has these rules and, per lcore slot, these counts (each slot's last is the default's).
std::unique_ptr<Snapshot> counted(std::vector<std::string> names, std::vector<uint64_t> hits) {
    auto snapshot = std::make_unique<Snapshot>();
    snapshot->firewall->rule_names = std::move(names);
    snapshot->firewall->hits = std::make_unique<RuleHits>();
    snapshot->firewall->hits->rule_count = snapshot->firewall->rule_names.size();
    snapshot->firewall->hits->hits = std::move(hits);
    return snapshot;
}

}  // namespace

TEST_CASE("rule hits: summed over lcore slots by name, the default apart", "[rule_hits]") {
    const auto snapshot = counted({"ssh", "web"}, {1, 2, 10, 4, 8, 20});
    const RuleHitCounts counts = rule_hits_of(*snapshot);
    CHECK(counts.by_rule.at("ssh") == 5);
    CHECK(counts.by_rule.at("web") == 10);
    CHECK(counts.default_hits == 30);
}

TEST_CASE("rule hits: a snapshot without a firewall counts nothing", "[rule_hits]") {
    const Snapshot empty;
    const RuleHitCounts counts = rule_hits_of(empty);
    CHECK(counts.by_rule.empty());
    CHECK(counts.default_hits == 0);
}

TEST_CASE("rule hits: a retired snapshot's counts carry over to the rules that stay, by name", "[rule_hits]") {
    RuleHitLedger ledger;
    ledger.fold(*counted({"ssh", "web", "gone"}, {1, 2, 3, 4}));
    ledger.fold(*counted({"web"}, {5, 6}));
    // The running snapshot renumbered the rules and added one.
    const auto running = counted({"new", "web", "ssh"}, {100, 200, 300, 400});
    RuleHitsRecord record;
    record.rules = {{"stale", 9}};
    ledger.totals(*running, record);
    using Row = std::pair<std::string, uint64_t>;
    CHECK(record.rules == std::vector<Row>{{"new", 100}, {"web", 200 + 2 + 5}, {"ssh", 300 + 1}});
    CHECK(record.default_hits == 400 + 4 + 6);
}

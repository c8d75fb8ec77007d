#include "control/rule_hits.hpp"

#include "common/compiler.hpp"

namespace sluice {

RuleHitCounts rule_hits_of(const Snapshot& snapshot) {
    RuleHitCounts counts;
    const FirewallTables& fw = *snapshot.firewall;
    if (!fw.hits) return counts;
    const std::size_t rule_count = fw.hits->rule_count;
    const std::size_t stride = rule_count + 1;  // each lcore slot ends with the default's counter
    for (std::size_t slot = 0; slot * stride < fw.hits->hits.size(); ++slot) {
        for (std::size_t r = 0; r < rule_count; ++r)
            counts.by_rule[fw.rule_names[r]] += counter_read(fw.hits->hits[slot * stride + r]);
        counts.default_hits += counter_read(fw.hits->hits[slot * stride + rule_count]);
    }
    return counts;
}

void RuleHitLedger::fold(const Snapshot& retired) {
    const RuleHitCounts counts = rule_hits_of(retired);
    for (const auto& [name, hits] : counts.by_rule) carried_.by_rule[name] += hits;
    carried_.default_hits += counts.default_hits;
}

void RuleHitLedger::totals(const Snapshot& running, RuleHitsRecord& record) const {
    const RuleHitCounts live = rule_hits_of(running);
    record.rules.clear();
    for (const std::string& name : running.firewall->rule_names) {
        const auto found = live.by_rule.find(name);
        const auto carried = carried_.by_rule.find(name);
        record.rules.emplace_back(name, (found == live.by_rule.end() ? 0 : found->second) +
                                            (carried == carried_.by_rule.end() ? 0 : carried->second));
    }
    record.default_hits = live.default_hits + carried_.default_hits;
}

}  // namespace sluice

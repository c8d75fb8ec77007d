// New connections decided by each rule, by rule name, over every snapshot a rule has lived in: a reload retires a
// snapshot and its per-lcore counters with it, so their counts are folded here and a rule's counter never goes
// back. Owned by the Reloader; control thread only.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "control/status.hpp"
#include "pipeline/snapshot.hpp"

namespace sluice {

struct RuleHitCounts {
    std::map<std::string, uint64_t> by_rule;
    uint64_t default_hits = 0;  // the default action's
};

// Sums a snapshot's per-lcore rule counters by rule name (every rule present, zero or not).
RuleHitCounts rule_hits_of(const Snapshot& snapshot);

class RuleHitLedger {
public:
    // A snapshot no lcore reads any more: its counts carry over.
    void fold(const Snapshot& retired);
    // The running snapshot's rules in rule order with their counts (live plus carried), and the default's; the
    // record's traffic is left as it is.
    void totals(const Snapshot& running, RuleHitsRecord& record) const;

private:
    RuleHitCounts carried_;
};

}  // namespace sluice

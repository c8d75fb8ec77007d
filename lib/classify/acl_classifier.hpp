// The ordered rule list of one address family compiled into an rte_acl context: first match wins (earlier rules
// get higher rte_acl priority). Built on the control thread (can take seconds for 10k rules); classify() is
// const, allocation-free and safe to call from any number of lcores at once.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "classify/acl_parts.hpp"
#include "classify/rule.hpp"
#include "common/five_tuple.hpp"

struct rte_acl_ctx;

namespace sluice {

// A pinned classify method this CPU, DPDK build or EAL cannot run (AclClassifier's constructor).
class AclMethodUnavailable : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// Which of the timed classify methods to run: timings holds (rte_acl_classify_alg, cycles) pairs; the fastest,
// unless `keep` is among them and at most 5 % slower (then kept is true when it is slower). Method 0 when timings
// is empty. Pure.
struct ClassifyChoice {
    int method = 0;
    bool kept = false;  // a method slower than the fastest, kept because it runs now
};
ClassifyChoice choose_classify_method(std::span<const std::pair<int, uint64_t>> timings, int keep);

class AclClassifier {
public:
    static constexpr uint32_t kNoMatch = UINT32_MAX;
    static constexpr uint32_t kMaxBurst = 64;  // classify() takes at most this many tuples per call
    static constexpr std::size_t kPartRules = 4096;

    // rules must all be of `family`. name must be unique among live contexts (rte_acl names them). method: an
    // rte_acl_classify_alg to classify with, or RTE_ACL_CLASSIFY_DEFAULT (0) to time every method this CPU offers
    // on a sample of keys made from the rules and use the fastest (about 1 ms at 10k rules); then `keep` (the
    // method of the context this one replaces, or 0) stays unless another is more than 5 % faster, so that a
    // reload does not switch between methods that time within noise of each other.
    // Throws std::runtime_error naming the cause (too many expanded rules, rte_acl_build failure), and
    // AclMethodUnavailable for a method that does not run here.
    //
    // The rules are cut into parts of about kPartRules rte_acl rules, each its own rte_acl context (rte_acl_build's
    // time and memory grow faster than its rule count), at places that depend on the rules' contents, so an edit
    // moves only the cuts near it. A part whose rules match as a part of `reuse` (the context this one replaces) did
    // is shared with it, not built again. When few parts changed (an edit), each changed one is built as pieces of
    // a quarter of its size, and only the pieces whose rules changed are built. part_rules: the part size, for tests.
    // The classifier keeps a key of each part's rules (MatchKey), not the rules: they are freed once the parts to
    // build are expanded, before rte_acl_build runs. Pass them moved when the caller has no use for them after.
    AclClassifier(IpFamily family, std::vector<Rule> rules, int socket_id, const std::string& name, int method = 0,
                  int keep = 0, const AclClassifier* reuse = nullptr, std::size_t part_rules = kPartRules);
    ~AclClassifier();
    AclClassifier(const AclClassifier&) = delete;
    AclClassifier& operator=(const AclClassifier&) = delete;

    // For each tuple (network byte order, as parse_frame fills it; of this classifier's family), its ingress DPDK
    // port id and its L4 match bytes, writes the index in `rules` of the first rule that matches, or kNoMatch.
    // count <= kMaxBurst.
    void classify(const FiveTuple* const* tuples, const uint16_t* in_ports, const L4MatchBytes* l4,
                  uint32_t* rule_index, uint32_t count) const;

    IpFamily family() const { return family_; }
    std::size_t rule_count() const { return rule_count_; }  // rules given
    // Rule `index` as given, with only its protocol and its tests besides addresses and ports (ICMP types and codes,
    // TCP flags; l4_match_text): the classifier keeps these of the rules that have them, not the rules.
    Rule l4_tests(std::size_t index) const;
    std::size_t expanded_rule_count() const { return expanded_; }  // rte_acl rules after expanding lists
    // The rte_acl_classify_alg that classify() runs: the one given, or the one choose_classify_method took from
    // the methods this CPU offers, timed on this context when it was built (the fastest, or `keep` within 5 % of
    // it); 0 (RTE_ACL_CLASSIFY_DEFAULT) when rte_acl_create's own pick stays (no rules, or no method could be set).
    int classify_method() const { return method_; }
    // The method and what each one measured, for the log: "avx512x16 (TSC cycles per key: sse 52, avx2 48,
    // avx512x16 44; 90% of the keys matched a rule)", "avx2 (kept: within 5% of the fastest; TSC cycles per key:
    // ...)", or "sse (pinned)" when the constructor was given it.
    const std::string& method_report() const { return method_report_; }
    // Wall time the constructor took (expansion, rte_acl_build, timing the methods), for the reload log.
    double build_ms() const { return build_ms_; }
    std::size_t part_count() const { return parts_.size(); }
    std::size_t parts_reused() const { return parts_reused_; }  // shared with `reuse`, not built

    // Whether AclClassifier(family(), rules, ..., method) would build this same context: every rule matches what
    // the one at its index here matched (names and actions are not rte_acl's: the firewall reads them by rule id;
    // compared by MatchKey), and method is the setting this one was given. A reload then keeps this context instead
    // of building it again.
    bool built_from(const std::vector<Rule>& rules, int method) const;

private:
    template <IpFamily F>
    void build_parts(std::vector<Rule>& rules, int socket_id, const std::string& name, int keep,
                     const AclClassifier* reuse, std::size_t part_rules);

    IpFamily family_;
    std::vector<AclPart> parts_;  // in rule order: the first part with a match has the first matching rule
    std::size_t parts_reused_ = 0;
    std::size_t rule_count_ = 0;
    std::size_t expanded_ = 0;
    int method_ = 0;
    int method_setting_ = 0;                           // the constructor's `method`
    MatchKey key_;                                     // of all its rules, for built_from()
    std::vector<std::pair<uint32_t, Rule>> l4_tests_;  // (index, l4_tests()) of the rules with such tests, in order
    std::string method_report_;
    double build_ms_ = 0;
};

}  // namespace sluice

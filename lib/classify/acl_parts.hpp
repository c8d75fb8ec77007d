// How AclClassifier cuts its rules into parts, each its own rte_acl context (rte_acl_build's time and memory grow
// faster than its rule count), and which parts of the running classifier a reload keeps: the rules' match keys,
// where the cuts go, and which running part serves which new one. Pure (no EAL, no rte_acl call); internal to
// lib/classify. Control thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "classify/rule.hpp"

struct rte_acl_ctx;

namespace sluice {

// Two unrelated 64-bit hashes of what a list of rules matches (AclClassifier keeps these instead of its rules).
struct MatchKey {
    uint64_t fnv = 0;
    uint64_t murmur = 0;
    friend bool operator==(const MatchKey&, const MatchKey&) = default;
};

// Rules [first, first + count) of a classifier in one rte_acl context, whose userdata is the index within the part
// (so a context serves wherever its rules sit in a later list). Internal to AclClassifier.
struct AclPart {
    std::shared_ptr<rte_acl_ctx> ctx;
    uint32_t first = 0;
    uint32_t count = 0;
    int method = 0;      // its rte_acl_classify_alg
    std::string report;  // as method_report()
    MatchKey key;        // of its rules, for the next reload to find it
};

// Two unrelated 64-bit hashes of what each rule matches (FNV-1a and libstdc++'s murmur of match_bytes): the
// classifier keeps these per part instead of its rules, and two rule lists whose keys are equal are taken to match
// the same packets. fnv also places the cuts.
std::vector<MatchKey> match_keys(const std::vector<Rule>& rules);

// The key of rules [first, first + count): their count and both hashes of every rule, in order.
MatchKey part_key(std::span<const MatchKey> keys, uint32_t first, uint32_t count);

// The parts a classifier's rules are cut into, in rule order (keys: match_keys(rules); counts: the rte_acl rules
// each expands into, expanded in all), each holding the context of the part of `running` (the parts of the
// classifier it replaces, or none) whose rules match as its own do, else no context: to build. The cuts come from
// the rules' contents (cut_regions), so an edit moves only the cuts near it; a region few enough of whose rules
// changed (an edit) is cut again into pieces, and only the pieces that changed are built.
std::vector<AclPart> cut_into_parts(const std::vector<MatchKey>& keys, const std::vector<std::size_t>& counts,
                                    std::size_t expanded, std::size_t part_rules, std::span<const AclPart> running);

}  // namespace sluice

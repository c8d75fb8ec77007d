// A classifier's rules as rte_acl rules: each rule checked, and expanded into the cross product of its lists.
// Internal to lib/classify. Control thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "classify/acl_layout.hpp"
#include "classify/rule.hpp"

namespace sluice::acl {

// The number of rte_acl rules each rule expands into (the cross product of its lists), after checking it; throws
// when the total passes kMaxExpandedRules.
template <IpFamily F>
std::vector<std::size_t> expansions(const std::vector<Rule>& rules);

// Expands rules [first, first + count) (counts: expansions()). Rule first + i gets priority RTE_ACL_MAX_PRIORITY - i
// (earlier rules win; rte_acl picks an undefined winner between equal priorities, which only happens here among
// copies of one rule) and userdata i + 1 (rte_acl returns 0 for "no match"): indexes within the part, so a part's
// context serves wherever the part sits in a later rule list.
template <IpFamily F>
std::vector<AclRule<F>> expand(const std::vector<Rule>& rules, uint32_t first, uint32_t count,
                               const std::vector<std::size_t>& counts);

}  // namespace sluice::acl

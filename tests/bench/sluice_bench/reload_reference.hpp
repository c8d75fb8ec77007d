// Section reload's reference: rte_acl_create + rte_acl_add_rules + rte_acl_build alone on the rte_acl rules of the
// loaded config. The rules follow sluice's IPv4 layout (the search key Ipv4AclKey of acl_key.hpp, and the field
// definitions of make_config in lib/classify/acl_classifier.cpp, private there: protocol, ingress port, source,
// destination, both ports in one input group) and its expansion of a rule's lists into their cross product, rule i
// at priority RTE_ACL_MAX_PRIORITY - i with userdata i + 1, as AclClassifier builds them. Written apart from
// sluice's code on purpose: section_reload classifies a trace through both contexts and drops the reference (with
// a warning) if a single result differs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <rte_acl.h>

#include "classbench.hpp"
#include "classify/acl_classifier.hpp"
#include "config/config.hpp"

namespace sluice::bench {

constexpr uint32_t kAclFields = 6;
RTE_ACL_RULE_DEF(ReferenceAclRule, kAclFields);

std::vector<ReferenceAclRule> reference_acl_rules(const FirewallConfig& fc);

// rte_acl_create + rte_acl_add_rules + rte_acl_build on the rules; returns the context (the caller frees it) and
// the build's TSC cycles.
rte_acl_ctx* build_reference_acl(const std::vector<ReferenceAclRule>& rules, uint64_t& cycles);

// Trace tuples whose rule the reference and sluice's classifier disagree on (both built from the same config).
std::size_t reference_mismatches(rte_acl_ctx* reference, const AclClassifier& acl,
                                 const std::vector<TraceTuple>& trace);

}  // namespace sluice::bench

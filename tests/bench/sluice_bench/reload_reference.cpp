// Section reload's reference rte_acl context, built from the config apart from sluice's code.
#include <netinet/in.h>

#include <algorithm>
#include <cstddef>
#include <string>

#include <rte_byteorder.h>
#include <rte_cycles.h>
#include <rte_errno.h>
#include <rte_lcore.h>

#include "acl_key.hpp"
#include "dpdk/mempool.hpp"
#include "harness.hpp"
#include "reload_reference.hpp"

namespace sluice::bench {
namespace {

rte_acl_config reference_acl_config() {
    rte_acl_config cfg{};
    cfg.num_categories = 1;
    cfg.num_fields = kAclFields;
    cfg.max_size = 0;
    cfg.defs[0] = {RTE_ACL_FIELD_TYPE_BITMASK, 1, 0, 0, offsetof(Ipv4AclKey, proto)};
    cfg.defs[1] = {RTE_ACL_FIELD_TYPE_BITMASK, 4, 1, 1, offsetof(Ipv4AclKey, in_port)};
    cfg.defs[2] = {RTE_ACL_FIELD_TYPE_MASK, 4, 2, 2, offsetof(Ipv4AclKey, src)};
    cfg.defs[3] = {RTE_ACL_FIELD_TYPE_MASK, 4, 3, 3, offsetof(Ipv4AclKey, dst)};
    cfg.defs[4] = {RTE_ACL_FIELD_TYPE_RANGE, 2, 4, 4, offsetof(Ipv4AclKey, src_port)};
    cfg.defs[5] = {RTE_ACL_FIELD_TYPE_RANGE, 2, 5, 4, offsetof(Ipv4AclKey, dst_port)};
    return cfg;
}

}  // namespace

std::vector<ReferenceAclRule> reference_acl_rules(const FirewallConfig& fc) {
    std::vector<ReferenceAclRule> out;
    uint32_t index = 0;  // among the rules of IPv4 (AclClassifier's rule index)
    for (const FirewallRuleConfig& r : fc.rules) {
        if ((!r.source.any && r.source.v4.empty()) || (!r.destination.any && r.destination.v4.empty()) ||
            r.protocol == IPPROTO_ICMPV6)
            continue;  // no IPv4 rule
        if (!r.in_ports.empty()) fail("reload: the reference does not expand in_ports");
        ReferenceAclRule base{};
        base.data.category_mask = 1;
        base.data.priority = static_cast<int32_t>(RTE_ACL_MAX_PRIORITY - index);
        base.data.userdata = index + 1;
        ++index;
        base.field[0].value.u8 = r.protocol == kAnyProtocol ? 0 : static_cast<uint8_t>(r.protocol);
        base.field[0].mask_range.u8 = r.protocol == kAnyProtocol ? 0 : 0xff;
        const bool ports = has_ports(static_cast<uint8_t>(r.protocol)) && r.protocol != kAnyProtocol;
        const std::vector<Prefix> any_prefix{Prefix{}};
        const std::vector<PortRange> any_port{PortRange{0, 65535}};
        const auto& sources = r.source.any ? any_prefix : r.source.v4;
        const auto& destinations = r.destination.any ? any_prefix : r.destination.v4;
        const auto& sports = ports && !r.source_ports.empty() ? r.source_ports : any_port;
        const auto& dports = ports && !r.destination_ports.empty() ? r.destination_ports : any_port;
        const auto set_prefix = [](rte_acl_field& f, const Prefix& p) {
            f.value.u32 = rte_be_to_cpu_32(p.address.words[0]) & prefix_mask(p.length);
            f.mask_range.u32 = p.length;
        };
        for (const Prefix& src : sources)
            for (const Prefix& dst : destinations)
                for (const PortRange& sp : sports)
                    for (const PortRange& dp : dports) {
                        ReferenceAclRule rule = base;
                        set_prefix(rule.field[2], src);
                        set_prefix(rule.field[3], dst);
                        rule.field[4].value.u16 = sp.first;
                        rule.field[4].mask_range.u16 = sp.last;
                        rule.field[5].value.u16 = dp.first;
                        rule.field[5].mask_range.u16 = dp.last;
                        out.push_back(rule);
                    }
    }
    return out;
}

rte_acl_ctx* build_reference_acl(const std::vector<ReferenceAclRule>& rules, uint64_t& cycles) {
    const std::string name = unique_name("bench_ref_acl_");
    const rte_acl_config cfg = reference_acl_config();
    const uint64_t t0 = rte_rdtsc();
    rte_acl_param param{};
    param.name = name.c_str();
    param.socket_id = static_cast<int>(rte_socket_id());
    param.rule_size = RTE_ACL_RULE_SZ(kAclFields);
    param.max_rule_num = static_cast<uint32_t>(rules.size());
    rte_acl_ctx* ctx = rte_acl_create(&param);
    if (!ctx) fail("rte_acl_create: " + std::string(rte_strerror(rte_errno)));
    int rc = rte_acl_add_rules(ctx, reinterpret_cast<const rte_acl_rule*>(rules.data()),
                               static_cast<uint32_t>(rules.size()));
    if (rc == 0) rc = rte_acl_build(ctx, &cfg);
    cycles = rte_rdtsc() - t0;
    if (rc != 0) fail("reference rte_acl_add_rules/build: " + std::string(rte_strerror(-rc)));
    return ctx;
}

std::size_t reference_mismatches(rte_acl_ctx* reference, const AclClassifier& acl,
                                 const std::vector<TraceTuple>& trace) {
    std::size_t differ = 0;
    for (std::size_t off = 0; off < trace.size(); off += kBurst) {
        const auto n = static_cast<uint32_t>(std::min<std::size_t>(kBurst, trace.size() - off));
        FiveTuple tuples[kBurst];
        const FiveTuple* tuple_ptrs[kBurst];
        Ipv4AclKey keys[kBurst];
        const uint8_t* key_ptrs[kBurst];
        const uint16_t in_ports[kBurst] = {};
        const L4MatchBytes l4[kBurst] = {};
        uint32_t sluice[kBurst], raw[kBurst];
        for (uint32_t i = 0; i < n; ++i) {
            tuples[i] = to_tuple(trace[off + i]);
            tuple_ptrs[i] = &tuples[i];
            keys[i] = ipv4_acl_key(tuples[i]);
            key_ptrs[i] = reinterpret_cast<const uint8_t*>(&keys[i]);
        }
        acl.classify(tuple_ptrs, in_ports, l4, sluice, n);
        rte_acl_classify(reference, key_ptrs, raw, n, 1);
        for (uint32_t i = 0; i < n; ++i) differ += (raw[i] == 0 ? AclClassifier::kNoMatch : raw[i] - 1) != sluice[i];
    }
    return differ;
}

}  // namespace sluice::bench

#include "classify/acl_expansion.hpp"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>
#include <utility>

#include <rte_acl.h>
#include <rte_byteorder.h>

namespace sluice::acl {
namespace {

// Expanding lists is a cross product; a rule such as 1000 sources x 1000 destinations would exhaust memory long
// before rte_acl_build finished (10k rules take ~3 s, 100k ~40 s and ~370 MiB: FIELD-NOTES; rules with odd prefix
// lengths and wide port ranges need far more). One million is past what builds in reasonable time, so the limit
// only stops accidents early, with a message naming the rule; rte_acl_build's ENOMEM catches the rest.
constexpr std::size_t kMaxExpandedRules = 1'000'000;

bool has_ports(uint16_t protocol) {
    return protocol == kIpProtoTcp || protocol == kIpProtoUdp || protocol == kIpProtoSctp;
}

std::string rule_label(const Rule& rule, std::size_t index) {
    return "rule #" + std::to_string(index) + (rule.name.empty() ? std::string() : " '" + rule.name + "'");
}

std::size_t saturating_mul(std::size_t a, std::size_t b) {
    std::size_t r;
    return __builtin_mul_overflow(a, b, &r) ? SIZE_MAX : r;
}

// Writes an address prefix into `words` consecutive 4-byte MASK fields: host byte order values, each field's own
// prefix length (rte_acl MASK fields are at most 8 bytes, so IPv6 is split the way l3fwd-acl does it).
void set_prefix(rte_acl_field* fields, uint32_t words, const Prefix* prefix) {
    for (uint32_t w = 0; w < words; ++w) {
        if (prefix == nullptr) {
            fields[w].value.u32 = 0;
            fields[w].mask_range.u32 = 0;
            continue;
        }
        const int bits = std::clamp(int{prefix->length} - 32 * static_cast<int>(w), 0, 32);
        const uint32_t mask = bits == 0 ? 0 : ~uint32_t{0} << (32 - bits);
        fields[w].value.u32 = rte_be_to_cpu_32(prefix->address.words[w]) & mask;
        fields[w].mask_range.u32 = static_cast<uint32_t>(bits);
    }
}

void set_range(rte_acl_field& field, const PortRange* range) {
    field.value.u16 = range ? range->first : 0;
    field.mask_range.u16 = range ? range->last : 65535;
}

// The ranges a rule matches in the key's two port slots: its ports for TCP/UDP/SCTP, its ICMP types and codes for
// the family's ICMP (fill_key puts them there), none (any) for other protocols.
template <IpFamily F>
std::pair<std::vector<PortRange>, std::vector<PortRange>> slot_ranges(const Rule& r) {
    if (has_ports(r.protocol)) return {r.source_ports, r.destination_ports};
    if (r.protocol != own_icmp<F>()) return {};
    const auto widen = [](const std::vector<IcmpRange>& list) {
        std::vector<PortRange> out;
        out.reserve(list.size());
        for (const IcmpRange& range : list) out.push_back({range.first, range.last});
        return out;
    };
    return {widen(r.icmp_types), widen(r.icmp_codes)};
}

const char* family_name(IpFamily f) {
    return f == IpFamily::ipv4 ? "IPv4" : f == IpFamily::ipv6 ? "IPv6" : "no family";
}

void check_rule(const Rule& rule, std::size_t index, IpFamily family) {
    if (rule.family != family)
        throw std::runtime_error(rule_label(rule, index) + " is " + family_name(rule.family) +
                                 " but its classifier is " + family_name(family));
    const unsigned max_len = family == IpFamily::ipv4 ? 32 : 128;
    for (const auto* list : {&rule.sources, &rule.destinations})
        for (const Prefix& p : *list)
            if (p.length > max_len)
                throw std::runtime_error(rule_label(rule, index) + ": prefix length " + std::to_string(p.length) +
                                         " is longer than " + std::to_string(max_len));
    if (rule.protocol > kAnyProtocol)
        throw std::runtime_error(rule_label(rule, index) + ": protocol " + std::to_string(rule.protocol) +
                                 " is out of range");
    for (const auto* list : {&rule.source_ports, &rule.destination_ports})
        for (const PortRange& r : *list)
            if (r.first > r.last)
                throw std::runtime_error(rule_label(rule, index) + ": port range " + std::to_string(r.first) + "-" +
                                         std::to_string(r.last) + " is empty");
    for (const auto* list : {&rule.icmp_types, &rule.icmp_codes})
        for (const IcmpRange& r : *list)
            if (r.first > r.last)
                throw std::runtime_error(rule_label(rule, index) + ": ICMP range " + std::to_string(r.first) + "-" +
                                         std::to_string(r.last) + " is empty");
}

// An empty list is one wildcard entry: iterate over {nullptr} then.
template <typename T>
std::vector<const T*> entries(const std::vector<T>& list) {
    std::vector<const T*> out;
    if (list.empty()) {
        out.push_back(nullptr);
        return out;
    }
    for (const T& item : list) out.push_back(&item);
    return out;
}

}  // namespace

template <IpFamily F>
std::vector<std::size_t> expansions(const std::vector<Rule>& rules) {
    std::vector<std::size_t> counts;
    counts.reserve(rules.size());
    std::size_t total = 0;
    for (std::size_t i = 0; i < rules.size(); ++i) {
        const Rule& r = rules[i];
        check_rule(r, i, F);
        const auto [first_slot, second_slot] = slot_ranges<F>(r);
        std::size_t n = std::max<std::size_t>(r.in_ports.size(), 1);
        n = saturating_mul(n, std::max<std::size_t>(r.sources.size(), 1));
        n = saturating_mul(n, std::max<std::size_t>(r.destinations.size(), 1));
        n = saturating_mul(n, std::max<std::size_t>(first_slot.size(), 1));
        n = saturating_mul(n, std::max<std::size_t>(second_slot.size(), 1));
        if (n > kMaxExpandedRules - total)
            throw std::runtime_error(rule_label(r, i) + " expands to " +
                                     (n == SIZE_MAX ? std::string("too many") : std::to_string(n)) +
                                     " rte_acl rules (in_ports x sources x destinations x source_ports "
                                     "(icmp_type) x destination_ports (icmp_code)); with the " +
                                     std::to_string(total) + " of the rules before it that exceeds the limit of " +
                                     std::to_string(kMaxExpandedRules) + " per address family");
        total += n;
        counts.push_back(n);
    }
    // total >= rules.size(), so the cap also keeps every priority within [RTE_ACL_MIN_PRIORITY, MAX_PRIORITY].
    static_assert(kMaxExpandedRules < RTE_ACL_MAX_PRIORITY);
    return counts;
}

template <IpFamily F>
std::vector<AclRule<F>> expand(const std::vector<Rule>& rules, uint32_t first, uint32_t count,
                               const std::vector<std::size_t>& counts) {
    constexpr uint32_t words = Layout<F>::kAddrWords;
    std::vector<AclRule<F>> out;
    out.reserve(std::accumulate(counts.begin() + first, counts.begin() + first + count, std::size_t{0}));
    for (uint32_t i = 0; i < count; ++i) {
        const Rule& r = rules[first + i];
        const auto [first_slot, second_slot] = slot_ranges<F>(r);
        AclRule<F> base{};
        base.data.category_mask = 1;
        base.data.priority = static_cast<int32_t>(RTE_ACL_MAX_PRIORITY - i);
        base.data.userdata = i + 1;
        base.field[kFieldProto].value.u8 = r.protocol == kAnyProtocol ? 0 : static_cast<uint8_t>(r.protocol);
        base.field[kFieldProto].mask_range.u8 = r.protocol == kAnyProtocol ? 0 : 0xff;
        const bool tcp = r.protocol == kIpProtoTcp;
        base.field[field_tcp_flags<F>()].value.u32 = tcp ? r.tcp_flags.value & r.tcp_flags.mask : 0;
        base.field[field_tcp_flags<F>()].mask_range.u32 = tcp ? r.tcp_flags.mask : 0;
        for (const uint16_t* port : entries(r.in_ports)) {
            base.field[kFieldInPort].value.u32 = port ? *port : 0;
            base.field[kFieldInPort].mask_range.u32 = port ? UINT32_MAX : 0;
            for (const Prefix* src : entries(r.sources)) {
                set_prefix(&base.field[kFieldSrc], words, src);
                for (const Prefix* dst : entries(r.destinations)) {
                    set_prefix(&base.field[field_dst<F>()], words, dst);
                    for (const PortRange* sp : entries(first_slot)) {
                        set_range(base.field[field_src_port<F>()], sp);
                        for (const PortRange* dp : entries(second_slot)) {
                            set_range(base.field[field_src_port<F>() + 1], dp);
                            out.push_back(base);
                        }
                    }
                }
            }
        }
    }
    return out;
}
template std::vector<std::size_t> expansions<IpFamily::ipv4>(const std::vector<Rule>&);
template std::vector<std::size_t> expansions<IpFamily::ipv6>(const std::vector<Rule>&);
template std::vector<AclRule<IpFamily::ipv4>> expand<IpFamily::ipv4>(const std::vector<Rule>&, uint32_t, uint32_t,
                                                                     const std::vector<std::size_t>&);
template std::vector<AclRule<IpFamily::ipv6>> expand<IpFamily::ipv6>(const std::vector<Rule>&, uint32_t, uint32_t,
                                                                     const std::vector<std::size_t>&);

}  // namespace sluice::acl

#include "classify/acl_classifier.hpp"

#include <netinet/in.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>

#include <rte_acl.h>
#include <rte_byteorder.h>
#include <rte_errno.h>

#include "common/compiler.hpp"

namespace sluice {

namespace {

// Up to this many expanded rules, classify with SSE rather than rte_acl's widest method (see the constructor).
constexpr std::size_t kSseMaxRules = 4096;


// Expanding lists is a cross product; a rule such as 1000 sources x 1000 destinations would exhaust memory long
// before rte_acl_build finished (10k rules take ~3 s, 100k ~40 s and ~370 MiB: FIELD-NOTES; rules with odd prefix
// lengths and wide port ranges need far more). One million is past what builds in reasonable time, so the limit
// only stops accidents early, with a message naming the rule; rte_acl_build's ENOMEM catches the rest.
constexpr std::size_t kMaxExpandedRules = 1'000'000;

// The search key rte_acl reads for one packet, in network byte order. rte_acl's layout rules (rte_acl.h,
// programmer's guide "Packet Classification and Access Control"): the first field is one byte, every other field
// belongs to a 4-byte input group whose bytes are all covered by fields. Field offsets below are offsets into these
// structs; the data pointers handed to rte_acl_classify point at their first byte.
//
// The ingress port gets a whole 4-byte group (a 2-byte field would leave half a group uncovered). When no rule
// names a port, rte_acl drops the always-wild group at build time, so it costs nothing then.
struct Ipv4Key {
    uint8_t proto;
    uint8_t pad[3];
    uint32_t in_port;  // big-endian DPDK port id
    uint32_t src;
    uint32_t dst;
    uint16_t src_port;
    uint16_t dst_port;
};
static_assert(sizeof(Ipv4Key) == 20);

struct Ipv6Key {
    uint8_t proto;
    uint8_t pad[3];
    uint32_t in_port;
    uint32_t src[4];
    uint32_t dst[4];
    uint16_t src_port;
    uint16_t dst_port;
};
static_assert(sizeof(Ipv6Key) == 44);

// Field indexes inside an rte_acl rule (rte_acl_field[]); the address fields of IPv6 take four slots each.
enum : uint8_t { kFieldProto = 0, kFieldInPort = 1, kFieldSrc = 2 };

template <IpFamily F>
struct Layout;

template <>
struct Layout<IpFamily::ipv4> {
    using Key = Ipv4Key;
    static constexpr uint32_t kAddrWords = 1;
};

template <>
struct Layout<IpFamily::ipv6> {
    using Key = Ipv6Key;
    static constexpr uint32_t kAddrWords = 4;
};

template <IpFamily F>
constexpr uint32_t field_dst() { return kFieldSrc + Layout<F>::kAddrWords; }
template <IpFamily F>
constexpr uint32_t field_src_port() { return field_dst<F>() + Layout<F>::kAddrWords; }
template <IpFamily F>
constexpr uint32_t field_count() { return field_src_port<F>() + 2; }

RTE_ACL_RULE_DEF(AclRule4, field_count<IpFamily::ipv4>());
RTE_ACL_RULE_DEF(AclRule6, field_count<IpFamily::ipv6>());

template <IpFamily F>
using AclRule = std::conditional_t<F == IpFamily::ipv4, AclRule4, AclRule6>;

template <IpFamily F>
rte_acl_config make_config() {
    using Key = typename Layout<F>::Key;
    constexpr uint32_t words = Layout<F>::kAddrWords;
    rte_acl_config cfg{};
    cfg.num_categories = 1;
    cfg.num_fields = field_count<F>();
    cfg.max_size = 0;  // no limit: the expansion cap bounds the rule count, hence the memory
    uint8_t input = 0;
    auto def = [&cfg](uint32_t field, uint8_t type, uint8_t size, uint8_t input_index, std::size_t offset) {
        cfg.defs[field] = rte_acl_field_def{type, size, static_cast<uint8_t>(field), input_index,
                                            static_cast<uint32_t>(offset)};
    };
    def(kFieldProto, RTE_ACL_FIELD_TYPE_BITMASK, 1, input++, offsetof(Key, proto));
    def(kFieldInPort, RTE_ACL_FIELD_TYPE_BITMASK, 4, input++, offsetof(Key, in_port));
    for (uint32_t w = 0; w < words; ++w)
        def(kFieldSrc + w, RTE_ACL_FIELD_TYPE_MASK, 4, input++, offsetof(Key, src) + 4 * w);
    for (uint32_t w = 0; w < words; ++w)
        def(field_dst<F>() + w, RTE_ACL_FIELD_TYPE_MASK, 4, input++, offsetof(Key, dst) + 4 * w);
    // Both ports share one input group.
    def(field_src_port<F>(), RTE_ACL_FIELD_TYPE_RANGE, 2, input, offsetof(Key, src_port));
    def(field_src_port<F>() + 1, RTE_ACL_FIELD_TYPE_RANGE, 2, input, offsetof(Key, dst_port));
    return cfg;
}

bool has_ports(uint16_t protocol) {
    return protocol == IPPROTO_TCP || protocol == IPPROTO_UDP || protocol == IPPROTO_SCTP;
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

const char* family_name(IpFamily f) { return f == IpFamily::ipv4 ? "IPv4" : f == IpFamily::ipv6 ? "IPv6" : "no family"; }

void check_rule(const Rule& rule, std::size_t index, IpFamily family) {
    if (rule.family != family)
        throw std::runtime_error(rule_label(rule, index) + " is " + family_name(rule.family) + " but its classifier is " +
                                 family_name(family));
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
}

// An empty list is one wildcard entry: iterate over {nullptr} then.
template <typename T>
std::vector<const T*> entries(const std::vector<T>& list, bool used = true) {
    std::vector<const T*> out;
    if (!used || list.empty()) {
        out.push_back(nullptr);
        return out;
    }
    for (const T& item : list) out.push_back(&item);
    return out;
}

// Expands every rule's lists into their cross product. Rule i gets priority RTE_ACL_MAX_PRIORITY - i (earlier rules
// win; rte_acl picks an undefined winner between equal priorities, which only happens here among copies of one
// rule) and userdata i + 1 (rte_acl returns 0 for "no match").
template <IpFamily F>
std::vector<AclRule<F>> expand(const std::vector<Rule>& rules) {
    constexpr uint32_t words = Layout<F>::kAddrWords;
    std::size_t total = 0;
    for (std::size_t i = 0; i < rules.size(); ++i) {
        const Rule& r = rules[i];
        check_rule(r, i, F);
        const bool ports = has_ports(r.protocol);
        std::size_t n = std::max<std::size_t>(r.in_ports.size(), 1);
        n = saturating_mul(n, std::max<std::size_t>(r.sources.size(), 1));
        n = saturating_mul(n, std::max<std::size_t>(r.destinations.size(), 1));
        if (ports) {
            n = saturating_mul(n, std::max<std::size_t>(r.source_ports.size(), 1));
            n = saturating_mul(n, std::max<std::size_t>(r.destination_ports.size(), 1));
        }
        if (n > kMaxExpandedRules - total)
            throw std::runtime_error(rule_label(r, i) + " expands to " +
                                     (n == SIZE_MAX ? std::string("too many") : std::to_string(n)) +
                                     " rte_acl rules (in_ports x sources x destinations x source_ports x "
                                     "destination_ports); with the " + std::to_string(total) +
                                     " of the rules before it that exceeds the limit of " +
                                     std::to_string(kMaxExpandedRules) + " per address family");
        total += n;
    }
    // total >= rules.size(), so the cap also keeps every priority within [RTE_ACL_MIN_PRIORITY, MAX_PRIORITY].
    static_assert(kMaxExpandedRules < RTE_ACL_MAX_PRIORITY);

    std::vector<AclRule<F>> out;
    out.reserve(total);
    for (std::size_t i = 0; i < rules.size(); ++i) {
        const Rule& r = rules[i];
        const bool ports = has_ports(r.protocol);
        AclRule<F> base{};
        base.data.category_mask = 1;
        base.data.priority = static_cast<int32_t>(RTE_ACL_MAX_PRIORITY - i);
        base.data.userdata = static_cast<uint32_t>(i + 1);
        base.field[kFieldProto].value.u8 = r.protocol == kAnyProtocol ? 0 : static_cast<uint8_t>(r.protocol);
        base.field[kFieldProto].mask_range.u8 = r.protocol == kAnyProtocol ? 0 : 0xff;
        for (const uint16_t* port : entries(r.in_ports)) {
            base.field[kFieldInPort].value.u32 = port ? *port : 0;
            base.field[kFieldInPort].mask_range.u32 = port ? UINT32_MAX : 0;
            for (const Prefix* src : entries(r.sources)) {
                set_prefix(&base.field[kFieldSrc], words, src);
                for (const Prefix* dst : entries(r.destinations)) {
                    set_prefix(&base.field[field_dst<F>()], words, dst);
                    for (const PortRange* sp : entries(r.source_ports, ports)) {
                        set_range(base.field[field_src_port<F>()], sp);
                        for (const PortRange* dp : entries(r.destination_ports, ports)) {
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

struct CtxDeleter {
    void operator()(rte_acl_ctx* ctx) const { rte_acl_free(ctx); }
};

template <IpFamily F>
rte_acl_ctx* build_context(const std::vector<AclRule<F>>& acl_rules, int socket_id, const std::string& name) {
    if (name.empty() || name.size() >= RTE_ACL_NAMESIZE)
        throw std::runtime_error("ACL context name '" + name + "' must be 1 to " +
                                 std::to_string(RTE_ACL_NAMESIZE - 1) + " characters");
    // rte_acl_create hands back the existing context when the name is taken; two owners would free it twice.
    if (rte_acl_find_existing(name.c_str()) != nullptr)
        throw std::runtime_error("ACL context '" + name + "' already exists");
    rte_acl_param param{};
    param.name = name.c_str();
    param.socket_id = socket_id;
    param.rule_size = RTE_ACL_RULE_SZ(field_count<F>());
    param.max_rule_num = static_cast<uint32_t>(acl_rules.size());
    std::unique_ptr<rte_acl_ctx, CtxDeleter> ctx(rte_acl_create(&param));
    if (!ctx)
        throw std::runtime_error("rte_acl_create('" + name + "', " + std::to_string(acl_rules.size()) +
                                 " rules): " + rte_strerror(rte_errno));
    int rc = rte_acl_add_rules(ctx.get(), reinterpret_cast<const rte_acl_rule*>(acl_rules.data()),
                               static_cast<uint32_t>(acl_rules.size()));
    if (rc != 0)
        throw std::runtime_error("rte_acl_add_rules('" + name + "', " + std::to_string(acl_rules.size()) +
                                 " rules): " + rte_strerror(-rc));
    const rte_acl_config cfg = make_config<F>();
    rc = rte_acl_build(ctx.get(), &cfg);
    if (rc != 0)
        throw std::runtime_error("rte_acl_build('" + name + "', " + std::to_string(acl_rules.size()) +
                                 " rules): " + rte_strerror(-rc) +
                                 (rc == -ENOMEM ? std::string(" (the tries did not fit in the memory DPDK has free; "
                                                              "fewer or simpler rules, or more hugepages, will help)")
                                                : std::string()));
    return ctx.release();
}

// rte_acl reads the key in 4-byte words right after it is written, so each word is written by one store: a load
// that narrower stores just before must make up cannot take their data and waits for them to retire. The protocol's
// and the ports' words were four and two stores. (AclClassifier stays 10-25 cycles a packet over raw rte_acl with
// warm input, mostly this fill loop; the share of the stalls in that could not be resolved on the VM.)
template <IpFamily F>
void fill_key(typename Layout<F>::Key& key, const FiveTuple& t, uint16_t in_port) {
    using Key = typename Layout<F>::Key;
    static_assert(offsetof(Key, dst_port) == offsetof(Key, src_port) + 2);
    static_assert(offsetof(FiveTuple, dst_port) == offsetof(FiveTuple, src_port) + 2);
    auto* bytes = reinterpret_cast<uint8_t*>(&key);
    struct ProtoWord {
        uint8_t proto, pad0, pad1, pad2;  // scalars: an array member made GCC assemble the word on the stack
    };
    store_as_one_word(bytes + offsetof(Key, proto), ProtoWord{t.proto, 0, 0, 0});
    key.in_port = rte_cpu_to_be_32(in_port);
    if constexpr (F == IpFamily::ipv4) {
        key.src = t.src.words[0];
        key.dst = t.dst.words[0];
    } else {
        std::memcpy(key.src, t.src.bytes, 16);
        std::memcpy(key.dst, t.dst.bytes, 16);
    }
    struct Ports {
        uint16_t src, dst;
    };
    store_as_one_word(bytes + offsetof(Key, src_port), Ports{t.src_port, t.dst_port});
}

template <IpFamily F>
void classify_burst(const rte_acl_ctx* ctx, const FiveTuple* const* tuples, const uint16_t* in_ports,
                    uint32_t* rule_index, uint32_t count) {
    typename Layout<F>::Key keys[AclClassifier::kMaxBurst];
    const uint8_t* data[AclClassifier::kMaxBurst];
    uint32_t results[AclClassifier::kMaxBurst];
    for (uint32_t i = 0; i < count; ++i) {
        fill_key<F>(keys[i], *tuples[i], in_ports[i]);
        data[i] = reinterpret_cast<const uint8_t*>(&keys[i]);
    }
    rte_acl_classify(ctx, data, results, count, 1);
    for (uint32_t i = 0; i < count; ++i) rule_index[i] = results[i] == 0 ? AclClassifier::kNoMatch : results[i] - 1;
}

}  // namespace

AclClassifier::AclClassifier(IpFamily family, const std::vector<Rule>& rules, int socket_id, const std::string& name)
    : family_(family), rule_count_(rules.size()) {
    if (family == IpFamily::ipv4) {
        const auto acl_rules = expand<IpFamily::ipv4>(rules);
        expanded_ = acl_rules.size();
        // rte_acl_build fails on a context without rules: an empty list needs no context, classify says kNoMatch.
        if (!acl_rules.empty()) ctx_ = build_context<IpFamily::ipv4>(acl_rules, socket_id, name);
    } else if (family == IpFamily::ipv6) {
        const auto acl_rules = expand<IpFamily::ipv6>(rules);
        expanded_ = acl_rules.size();
        if (!acl_rules.empty()) ctx_ = build_context<IpFamily::ipv6>(acl_rules, socket_id, name);
    } else {
        throw std::runtime_error("ACL classifier '" + name + "' needs an address family");
    }
    // rte_acl_create picks the widest method the CPU has (AVX512X16 on an AVX-512 CPU). With bursts of 32, SSE was
    // faster up to 1k rules on the Intel VM and AVX512X16 only at 10k (tests/bench/firewall.sh: raw ~94-115 vs
    // 150-185 cycles/packet at 10 and 1k rules), so small rule sets use SSE where the CPU has it (else rte_acl's
    // choice stays). The differential test checks every method.
    if (ctx_ && expanded_ <= kSseMaxRules && rte_acl_set_ctx_classify(ctx_, RTE_ACL_CLASSIFY_SSE) == 0)
        method_ = RTE_ACL_CLASSIFY_SSE;
}

AclClassifier::~AclClassifier() { rte_acl_free(ctx_); }

void AclClassifier::classify(const FiveTuple* const* tuples, const uint16_t* in_ports, uint32_t* rule_index,
                             uint32_t count) const {
    if (ctx_ == nullptr) {
        std::fill(rule_index, rule_index + count, kNoMatch);
        return;
    }
    // Longer bursts than promised are split rather than overrunning the stack scratch.
    for (uint32_t done = 0; done < count; done += kMaxBurst) {
        const uint32_t n = std::min(kMaxBurst, count - done);
        if (family_ == IpFamily::ipv4)
            classify_burst<IpFamily::ipv4>(ctx_, tuples + done, in_ports + done, rule_index + done, n);
        else
            classify_burst<IpFamily::ipv6>(ctx_, tuples + done, in_ports + done, rule_index + done, n);
    }
}

}  // namespace sluice

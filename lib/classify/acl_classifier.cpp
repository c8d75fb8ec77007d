#include "classify/acl_classifier.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <memory>
#include <numeric>
#include <random>

#include <stdexcept>
#include <string>
#include <utility>

#include <rte_acl.h>
#include <rte_byteorder.h>
#include <rte_cycles.h>
#include <rte_errno.h>

#include "classify/acl_expansion.hpp"
#include "classify/acl_layout.hpp"
#include "classify/acl_method.hpp"
#include "common/compiler.hpp"
#include "common/ip_proto.hpp"

namespace sluice {

using namespace acl;  // acl_layout.hpp, acl_expansion.hpp: internal to lib/classify, in a namespace of their own

namespace {

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
        cfg.defs[field] =
            rte_acl_field_def{type, size, static_cast<uint8_t>(field), input_index, static_cast<uint32_t>(offset)};
    };
    def(kFieldProto, RTE_ACL_FIELD_TYPE_BITMASK, 1, input++, offsetof(Key, proto));
    def(kFieldInPort, RTE_ACL_FIELD_TYPE_BITMASK, 4, input++, offsetof(Key, in_port));
    for (uint32_t w = 0; w < words; ++w)
        def(kFieldSrc + w, RTE_ACL_FIELD_TYPE_MASK, 4, input++, offsetof(Key, src) + std::size_t{4} * w);
    for (uint32_t w = 0; w < words; ++w)
        def(field_dst<F>() + w, RTE_ACL_FIELD_TYPE_MASK, 4, input++, offsetof(Key, dst) + std::size_t{4} * w);
    // Both ports share one input group.
    def(field_src_port<F>(), RTE_ACL_FIELD_TYPE_RANGE, 2, input, offsetof(Key, src_port));
    def(field_src_port<F>() + 1, RTE_ACL_FIELD_TYPE_RANGE, 2, input++, offsetof(Key, dst_port));
    def(field_tcp_flags<F>(), RTE_ACL_FIELD_TYPE_BITMASK, 4, input, offsetof(Key, tcp_flags));
    return cfg;
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
// that narrower stores just before must make up cannot take their data and waits for them to retire.
template <IpFamily F>
void fill_key(typename Layout<F>::Key& key, const FiveTuple& t, uint16_t in_port, const L4MatchBytes& l4) {
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
    if (t.proto == own_icmp<F>())
        store_as_one_word(bytes + offsetof(Key, src_port),
                          Ports{rte_cpu_to_be_16(l4.icmp_type), rte_cpu_to_be_16(l4.icmp_code)});
    else store_as_one_word(bytes + offsetof(Key, src_port), Ports{t.src_port, t.dst_port});
    key.tcp_flags = rte_cpu_to_be_32(l4.tcp_flags);
}

// Each part's context in turn, on the tuples no earlier part matched: the first part with a match holds the first
// matching rule.
template <IpFamily F>
void classify_burst(const std::vector<AclPart>& parts, const FiveTuple* const* tuples, const uint16_t* in_ports,
                    const L4MatchBytes* l4, uint32_t* rule_index, uint32_t count) {
    typename Layout<F>::Key keys[AclClassifier::kMaxBurst];
    const uint8_t* data[AclClassifier::kMaxBurst];
    uint8_t waiting[AclClassifier::kMaxBurst];  // data[j] is the key of tuple waiting[j]
    uint32_t results[AclClassifier::kMaxBurst];
    for (uint32_t i = 0; i < count; ++i) {
        fill_key<F>(keys[i], *tuples[i], in_ports[i], l4[i]);
        data[i] = reinterpret_cast<const uint8_t*>(&keys[i]);
        waiting[i] = static_cast<uint8_t>(i);
        rule_index[i] = AclClassifier::kNoMatch;
    }
    uint32_t left = count;
    for (const AclPart& part : parts) {
        if (left == 0) break;
        rte_acl_classify(part.ctx.get(), data, results, left, 1);
        uint32_t still = 0;
        for (uint32_t j = 0; j < left; ++j) {
            if (results[j] != 0) {
                rule_index[waiting[j]] = part.first + results[j] - 1;
                continue;
            }
            waiting[still] = waiting[j];
            data[still++] = data[j];
        }
        left = still;
    }
}

// A value inside an address field of a rule (a MASK field: value and prefix length), host order.
uint32_t inside(const rte_acl_field& f, std::mt19937_64& rng) {
    const uint32_t bits = f.mask_range.u32;
    const uint32_t host = bits >= 32 ? 0 : ~uint32_t{0} >> bits;
    return f.value.u32 | (static_cast<uint32_t>(rng()) & host);
}

// Keys to time the methods on, made as a ClassBench trace is (and tests/bench's): nine in ten inside a rule picked
// at random, the rest anywhere; TCP or UDP where the rule takes any protocol. The mix matters: with a quarter of the
// keys matching nothing, avx512x16 fell from first to last at 10 rules. The same rules give the same sample.
template <IpFamily F>
std::vector<typename Layout<F>::Key> sample_keys(const std::vector<AclRule<F>>& rules, std::size_t n) {
    constexpr uint32_t words = Layout<F>::kAddrWords;
    std::mt19937_64 rng(rules.size());
    std::vector<typename Layout<F>::Key> keys(n);
    for (std::size_t i = 0; i < n; ++i) {
        FiveTuple t;
        t.family = F;
        uint16_t in_port = 0;
        L4MatchBytes l4;
        if (i % 10 == 9) {
            t.proto = static_cast<uint8_t>(rng() % 2 ? kIpProtoTcp : kIpProtoUdp);
            for (uint32_t w = 0; w < words; ++w) {
                t.src.words[w] = static_cast<uint32_t>(rng());
                t.dst.words[w] = static_cast<uint32_t>(rng());
            }
            t.src_port = static_cast<uint16_t>(rng());
            t.dst_port = static_cast<uint16_t>(rng());
        } else {
            const rte_acl_field* f = rules[rng() % rules.size()].field;
            t.proto = f[kFieldProto].mask_range.u8 ? f[kFieldProto].value.u8
                                                   : static_cast<uint8_t>(rng() % 2 ? kIpProtoTcp : kIpProtoUdp);
            if (f[kFieldInPort].mask_range.u32) in_port = static_cast<uint16_t>(f[kFieldInPort].value.u32);
            for (uint32_t w = 0; w < words; ++w) {
                t.src.words[w] = rte_cpu_to_be_32(inside(f[kFieldSrc + w], rng));
                t.dst.words[w] = rte_cpu_to_be_32(inside(f[field_dst<F>() + w], rng));
            }
            const auto in_range = [&rng](const rte_acl_field& range) {
                return static_cast<uint16_t>(range.value.u16 +
                                             rng() % (uint32_t{range.mask_range.u16} - range.value.u16 + 1));
            };
            const uint16_t first = in_range(f[field_src_port<F>()]), second = in_range(f[field_src_port<F>() + 1]);
            if (t.proto == own_icmp<F>()) {
                l4.icmp_type = static_cast<uint8_t>(first);
                l4.icmp_code = static_cast<uint8_t>(second);
            } else {
                t.src_port = rte_cpu_to_be_16(first);
                t.dst_port = rte_cpu_to_be_16(second);
            }
            const rte_acl_field& flags = f[field_tcp_flags<F>()];
            l4.tcp_flags = static_cast<uint8_t>(flags.value.u32 | (rng() & ~flags.mask_range.u32));
        }
        fill_key<F>(keys[i], t, in_port, l4);
    }
    return keys;
}

// Times every method this CPU offers on a sample of keys, in calls of 32 keys, and leaves the context on the
// one choose_classify_method takes (the fastest, or `keep` within 5 % of it); returns it (0 when none of them can
// be set: rte_acl_create's pick stays), and writes the figures to report. rte_acl_create picks the widest method,
// but which is fastest depends on the CPU and the rule set (docs/benchmarks.md); the Linux kernel picks its raid6
// and xor routines the same way at boot. Calls of 32 are what a worker makes when every
// packet of its burst opens a connection (a flood, a busy front end): where classification costs the most. With a
// few new connections per burst, its calls are short and rte_acl's wide methods fall back to narrower code, but then
// classification is a small share of the burst whichever method runs. Best of five rounds, each method once per
// round, so a preempted round does not decide it. `keep` (the method the running context
// uses, or 0) stays unless another is more than 5 % faster: methods that time within noise of each other would
// otherwise take turns from one reload to the next.
template <IpFamily F>
int time_and_choose_method(rte_acl_ctx* ctx, const std::vector<AclRule<F>>& rules, int keep, std::string& report) {
    constexpr std::size_t kSample = 2048, kRounds = 5;
    constexpr uint32_t kBurst = 32;
    const auto keys = sample_keys<F>(rules, kSample);
    std::vector<const uint8_t*> data(kSample);
    for (std::size_t i = 0; i < kSample; ++i) data[i] = reinterpret_cast<const uint8_t*>(&keys[i]);
    std::vector<uint32_t> results(kSample);
    uint64_t best[std::size(kAclMethods)];
    std::fill(std::begin(best), std::end(best), UINT64_MAX);
    for (std::size_t round = 0; round < kRounds; ++round) {
        for (std::size_t m = 0; m < std::size(kAclMethods); ++m) {
            if (!kAclMethods[m].timed || rte_acl_set_ctx_classify(ctx, kAclMethods[m].alg) != 0) continue;
            const uint64_t start = rte_rdtsc();
            for (std::size_t at = 0; at < kSample; at += kBurst)
                rte_acl_classify(ctx, &data[at], &results[at], kBurst, 1);
            best[m] = std::min(best[m], rte_rdtsc() - start);
        }
    }
    std::vector<std::pair<int, uint64_t>> timings;
    for (std::size_t m = 0; m < std::size(kAclMethods); ++m) {
        if (best[m] == UINT64_MAX) continue;
        timings.emplace_back(kAclMethods[m].alg, best[m]);
        char figure[48];
        std::snprintf(figure, sizeof figure, "%s%s %.0f", report.empty() ? "" : ", ", kAclMethods[m].name,
                      static_cast<double>(best[m]) / kSample);
        report += figure;
    }
    const auto [chosen, kept] = choose_classify_method(timings, keep);
    if (chosen == 0 || rte_acl_set_ctx_classify(ctx, static_cast<enum rte_acl_classify_alg>(chosen)) != 0) {
        report = "rte_acl's own pick (no method could be set)";
        return 0;
    }
    // The share of the sample that matched a rule (the last pass's results): the mix decides the winner, so the
    // report shows it.
    const auto matched = std::count_if(results.begin(), results.end(), [](uint32_t r) { return r != 0; });
    report = std::string(acl_method_name(chosen)) + (kept ? " (kept: within 5% of the fastest; " : " (") +
             "TSC cycles per key: " + report + "; " +
             std::to_string(matched * 100 / static_cast<std::ptrdiff_t>(kSample)) + "% of the keys matched a rule)";
    return chosen;
}

// Builds the context of non-empty acl_rules and sets its method: `method`, or the fastest (RTE_ACL_CLASSIFY_DEFAULT;
// `keep` as time_and_choose_method takes it).
template <IpFamily F>
rte_acl_ctx* build_classifier(const std::vector<AclRule<F>>& acl_rules, int socket_id, const std::string& name,
                              int method, int keep, int& chosen, std::string& report) {
    std::unique_ptr<rte_acl_ctx, CtxDeleter> built(build_context<F>(acl_rules, socket_id, name));
    if (method == RTE_ACL_CLASSIFY_DEFAULT) {
        chosen = time_and_choose_method<F>(built.get(), acl_rules, keep, report);
    } else {
        if (rte_acl_set_ctx_classify(built.get(), static_cast<enum rte_acl_classify_alg>(method)) != 0)
            throw AclMethodUnavailable(std::string("rte_acl classify method ") + acl_method_name(method) +
                                       " does not run here: this CPU or this DPDK build lacks it, or the EAL's SIMD "
                                       "width limit is below it (the EAL option --force-max-simd-bitwidth=512 lets "
                                       "avx512x32 run)");
        chosen = method;
        report = std::string(acl_method_name(method)) + " (pinned)";
    }
    return built.release();
}

}  // namespace

ClassifyChoice choose_classify_method(std::span<const std::pair<int, uint64_t>> timings, int keep) {
    const std::pair<int, uint64_t>* fastest = nullptr;
    const std::pair<int, uint64_t>* kept = nullptr;
    for (const auto& t : timings) {
        if (!fastest || t.second < fastest->second) fastest = &t;
        if (t.first == keep) kept = &t;
    }
    if (!fastest) return {};
    if (kept && kept->second - fastest->second <= fastest->second / 20)  // at most 5 % slower
        return {kept->first, kept->second > fastest->second};
    return {fastest->first, false};
}

AclClassifier::AclClassifier(IpFamily family, std::vector<Rule> rules, int socket_id, const std::string& name,
                             int method, int keep, const AclClassifier* reuse, std::size_t part_rules)
    : family_(family), rule_count_(rules.size()), method_setting_(method) {
    const auto started = std::chrono::steady_clock::now();
    if (method != RTE_ACL_CLASSIFY_DEFAULT && std::none_of(std::begin(kAclMethods), std::end(kAclMethods),
                                                           [method](const auto& m) { return m.alg == method; }))
        throw std::runtime_error("ACL classifier '" + name + "': unknown classify method " + std::to_string(method));
    if (family == IpFamily::ipv4) build_parts<IpFamily::ipv4>(rules, socket_id, name, keep, reuse, part_rules);
    else if (family == IpFamily::ipv6) build_parts<IpFamily::ipv6>(rules, socket_id, name, keep, reuse, part_rules);
    else throw std::runtime_error("ACL classifier '" + name + "' needs an address family");
    build_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
}

// rte_acl_build fails on a context without rules: an empty list needs no context, classify says kNoMatch.
template <IpFamily F>
void AclClassifier::build_parts(std::vector<Rule>& rules, int socket_id, const std::string& name, int keep,
                                const AclClassifier* reuse, std::size_t part_rules) {
    const std::vector<std::size_t> counts = expansions<F>(rules);
    expanded_ = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
    const std::vector<MatchKey> keys = match_keys(rules);
    key_ = part_key(keys, 0, static_cast<uint32_t>(keys.size()));
    std::span<const AclPart> running;
    if (reuse && reuse->family_ == family_ && reuse->method_setting_ == method_setting_) running = reuse->parts_;
    parts_ = cut_into_parts(keys, counts, expanded_, part_rules, running);
    parts_reused_ = static_cast<std::size_t>(
        std::count_if(parts_.begin(), parts_.end(), [](const AclPart& part) { return part.ctx != nullptr; }));
    // The parts to build are expanded first, so that the rules are freed before rte_acl_build's peak.
    std::vector<std::vector<AclRule<F>>> expanded;
    for (const AclPart& part : parts_)
        if (!part.ctx) expanded.push_back(expand<F>(rules, part.first, part.count, counts));
    for (uint32_t i = 0; i < rules.size(); ++i) {
        Rule& r = rules[i];
        if (r.icmp_types.empty() && r.icmp_codes.empty() && r.tcp_flags.mask == 0) continue;
        Rule tests;
        tests.family = r.family;
        tests.protocol = r.protocol;
        tests.icmp_types = std::move(r.icmp_types);
        tests.icmp_codes = std::move(r.icmp_codes);
        tests.tcp_flags = r.tcp_flags;
        l4_tests_.emplace_back(i, std::move(tests));
    }
    std::vector<Rule>().swap(rules);
    const bool one_context = parts_.size() == 1;
    std::size_t largest = SIZE_MAX;  // index in parts_
    auto next = expanded.begin();
    for (std::size_t i = 0; i < parts_.size(); ++i) {
        AclPart& part = parts_[i];
        if (!part.ctx) {
            const std::string part_name = one_context ? name : name + "." + std::to_string(i);
            std::vector<AclRule<F>> part_rules_expanded = std::move(*next++);
            part.ctx.reset(build_classifier<F>(part_rules_expanded, socket_id, part_name, method_setting_, keep,
                                               part.method, part.report),
                           CtxDeleter{});
        }
        if (largest == SIZE_MAX || part.count > parts_[largest].count) largest = i;
    }
    if (largest == SIZE_MAX) return;
    method_ = parts_[largest].method;
    method_report_ = parts_[largest].report;
    if (parts_.size() > 1)
        method_report_ += " in " + std::to_string(parts_.size()) + " rte_acl contexts (" +
                          std::to_string(parts_reused_) + " kept from the running rules)";
}

AclClassifier::~AclClassifier() = default;

Rule AclClassifier::l4_tests(std::size_t index) const {
    const auto at = std::lower_bound(l4_tests_.begin(), l4_tests_.end(), index,
                                     [](const auto& tests, std::size_t i) { return tests.first < i; });
    if (at == l4_tests_.end() || at->first != index) return Rule{.family = family_};
    return at->second;
}

bool AclClassifier::built_from(const std::vector<Rule>& rules, int method) const {
    return method == method_setting_ && rules.size() == rule_count_ &&
           part_key(match_keys(rules), 0, static_cast<uint32_t>(rules.size())) == key_;
}

void AclClassifier::classify(const FiveTuple* const* tuples, const uint16_t* in_ports, const L4MatchBytes* l4,
                             uint32_t* rule_index, uint32_t count) const {
    // Longer bursts than promised are split rather than overrunning the stack scratch.
    for (uint32_t done = 0; done < count; done += kMaxBurst) {
        const uint32_t n = std::min(kMaxBurst, count - done);
        if (family_ == IpFamily::ipv4)
            classify_burst<IpFamily::ipv4>(parts_, tuples + done, in_ports + done, l4 + done, rule_index + done, n);
        else classify_burst<IpFamily::ipv6>(parts_, tuples + done, in_ports + done, l4 + done, rule_index + done, n);
    }
}

}  // namespace sluice

// Section classify: AclClassifier::classify on ClassBench-like rule sets of 10, 1k and 10k rules (or --rules and
// --trace), beside raw rte_acl_classify on the same context, for every algorithm the context accepts; checked
// against a linear first-match first.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include <rte_acl.h>
#include <rte_cycles.h>
#include <rte_lcore.h>

#include "acl_key.hpp"
#include "classify/acl_classifier.hpp"
#include "classify/acl_method.hpp"
#include "dpdk/mempool.hpp"
#include "sections.hpp"

namespace sluice::bench {
namespace {

// rte_acl's own order of preference (acl_get_best_alg in lib/acl/rte_acl.c): the first one the CPU and the EAL's
// max SIMD bitwidth allow is what rte_acl_create picks (AclClassifier keeps it only when it could set none).
// Their names are acl_method_name's.
constexpr enum rte_acl_classify_alg kAlgs[] = {RTE_ACL_CLASSIFY_AVX512X32, RTE_ACL_CLASSIFY_AVX512X16,
                                               RTE_ACL_CLASSIFY_AVX2, RTE_ACL_CLASSIFY_SSE, RTE_ACL_CLASSIFY_SCALAR};

volatile uint32_t g_warm_sink = 0;

// Reads bytes from first into the cache (untimed) before they are classified: in the pipeline the firewall stage
// classifies tuples the parser wrote moments before, and rte_acl reads keys that AclClassifier has just written.
// Cold, the 2.5 MiB of tuples made the wrapped pass pay a miss per tuple that the stage never pays.
void warm(const void* first, std::size_t bytes) {
    const auto* p = static_cast<const uint8_t*>(first);
    uint32_t sum = 0;
    for (std::size_t at = 0; at < bytes; at += 64) sum += p[at];
    g_warm_sink = sum + p[bytes - 1];
}

// One rule set and its trace: AclClassifier built from the rules, the trace as its tuples and as rte_acl keys.
// A pass goes over the trace in bursts of 32, as dpdk-test-acl --tracestep=32 does, each burst timed on its own so
// that preempted ones can be left out (see timed_pass); it returns cycles per tuple.
class ClassifyRun {
public:
    ClassifyRun(Dpdk& d, const std::vector<RuleSpec>& specs, const std::vector<TraceTuple>& trace)
        : d_(d), specs_(specs), trace_(trace), n_(trace.size()) {
        build();
        tuples_.resize(n_);
        tuple_ptrs_.resize(n_);
        keys_.resize(n_);
        key_ptrs_.resize(n_);
        for (std::size_t i = 0; i < n_; ++i) {
            tuples_[i] = to_tuple(trace[i]);
            tuple_ptrs_[i] = &tuples_[i];
            keys_[i] = ipv4_acl_key(tuples_[i]);
            key_ptrs_[i] = reinterpret_cast<const uint8_t*>(&keys_[i]);
        }
        wrapped_.resize(n_);
        raw_.resize(n_);
        parted_out_.resize(n_);
    }
    ClassifyRun(const ClassifyRun&) = delete;
    ClassifyRun& operator=(const ClassifyRun&) = delete;

    double pass_wrapped() {
        return pass(tuples_, tuple_ptrs_, [&](std::size_t off, uint32_t count) {
            acl_->classify(&tuple_ptrs_[off], in_ports_.data(), l4_.data(), &wrapped_[off], count);
        });
    }

    // The rules in rte_acl parts of the size a reload cuts (AclClassifier's default), when that is more than one:
    // what the firewall stage runs for a new connection.
    double pass_parted() {
        return pass(tuples_, tuple_ptrs_, [&](std::size_t off, uint32_t count) {
            parted_->classify(&tuple_ptrs_[off], in_ports_.data(), l4_.data(), &parted_out_[off], count);
        });
    }
    const AclClassifier* parted() const { return parted_.get(); }

    double pass_raw() {
        return pass(keys_, key_ptrs_, [&](std::size_t off, uint32_t count) {
            rte_acl_classify(ctx_, &key_ptrs_[off], &raw_[off], count, 1);
        });
    }

    // Correctness first: AclClassifier against a linear first-match on a sample, and against raw rte_acl. Returns
    // whether raw rte_acl is a valid reference.
    bool check(const std::string& label) {
        pass_wrapped();
        pass_raw();
        if (parted_) pass_parted();
        const std::size_t sample = std::min<std::size_t>(n_, 4096);
        std::size_t linear_mismatch = 0, raw_mismatch = 0, parted_mismatch = 0, matched = 0;
        for (std::size_t i = 0; i < sample; ++i) linear_mismatch += wrapped_[i] != linear_match(specs_, trace_[i]);
        for (std::size_t i = 0; i < n_; ++i) {
            raw_mismatch += (raw_[i] == 0 ? AclClassifier::kNoMatch : raw_[i] - 1) != wrapped_[i];
            if (parted_) parted_mismatch += parted_out_[i] != wrapped_[i];
            matched += wrapped_[i] != AclClassifier::kNoMatch;
        }
        std::printf("classify %s: %zu rules (%zu rte_acl rules), built in %.2f s; %zu tuples, %.1f%% match a rule; "
                    "AclClassifier vs linear first-match on %zu tuples: %zu differ; vs raw rte_acl: %zu differ\n",
                    label.c_str(), specs_.size(), acl_->expanded_rule_count(), build_s_, n_, 100.0 * matched / n_,
                    sample, linear_mismatch, raw_mismatch);
        std::printf("classify %s: AclClassifier's method, timed when it was built: %s\n", label.c_str(),
                    acl_->method_report().c_str());
        if (parted_)
            std::printf("classify %s: in the reload's parts: %s\n", label.c_str(), parted_->method_report().c_str());
        if (linear_mismatch) std::printf("WARNING: AclClassifier disagrees with first-match semantics\n");
        if (parted_mismatch)
            std::printf("WARNING: the rules in parts classify %zu tuples otherwise\n", parted_mismatch);
        if (raw_mismatch)
            std::printf("WARNING: raw rte_acl results differ: the search-key layout copied from acl_layout.hpp "
                        "has drifted; the in-process reference is left out\n");
        return raw_mismatch == 0;
    }

    // sluice's figure is the method AclClassifier runs: the one it set, else rte_acl_create's pick, which is the
    // first in kAlgs that the context accepts (trying them changes the context: restore_method puts it back).
    const enum rte_acl_classify_alg* sluice_method() {
        for (const enum rte_acl_classify_alg& a : kAlgs) {
            const bool runs = acl_->classify_method() != 0 ? static_cast<int>(a) == acl_->classify_method()
                                                           : rte_acl_set_ctx_classify(ctx_, a) == 0;
            if (runs) return &a;
        }
        return nullptr;
    }

    bool set_method(enum rte_acl_classify_alg a) { return rte_acl_set_ctx_classify(ctx_, a) == 0; }

private:
    // Each burst's inputs and the pointers to them are warmed (untimed), then classify_burst(offset, count) is timed.
    template <typename Input, typename Pointer, typename ClassifyBurst>
    double pass(const std::vector<Input>& inputs, const std::vector<Pointer>& pointers, ClassifyBurst classify_burst) {
        bursts_.clear();
        for (std::size_t off = 0; off < n_; off += kBurst) {
            const auto count = static_cast<uint32_t>(std::min<std::size_t>(kBurst, n_ - off));
            warm(&inputs[off], count * sizeof(Input));
            warm(&pointers[off], count * sizeof(Pointer));
            const uint64_t t0 = rte_rdtsc_precise();
            classify_burst(off, count);
            bursts_.emplace_back(timed_cycles(d_, t0, rte_rdtsc_precise()), count);
        }
        return cycles_per_item(d_, bursts_);
    }

    void build() {
        std::vector<Rule> rules;
        for (std::size_t i = 0; i < specs_.size(); ++i) rules.push_back(to_rule(specs_[i], i));
        const std::string name = unique_name("bench_acl_" + std::to_string(specs_.size()) + "_");
        const uint64_t build_start = rte_rdtsc();
        // One context whatever the rule count, so that the wrapper is measured against raw rte_acl on the same one.
        constexpr std::size_t kOneContext = std::size_t{1} << 40;
        try {
            acl_ = std::make_unique<AclClassifier>(IpFamily::ipv4, rules, static_cast<int>(rte_socket_id()), name, 0, 0,
                                                   nullptr, kOneContext);
        } catch (const std::exception& e) {
            fail(std::string("AclClassifier: ") + e.what());
        }
        build_s_ = seconds_since(d_, build_start);
        try {
            parted_ = std::make_unique<AclClassifier>(IpFamily::ipv4, std::move(rules),
                                                      static_cast<int>(rte_socket_id()), name + "p");
        } catch (const std::exception& e) {
            fail(std::string("AclClassifier in parts: ") + e.what());
        }
        if (parted_->part_count() <= 1) parted_.reset();
        ctx_ = rte_acl_find_existing(name.c_str());
        if (!ctx_) fail("rte_acl_find_existing(" + name + ") found nothing");
    }

    Dpdk& d_;
    const std::vector<RuleSpec>& specs_;
    const std::vector<TraceTuple>& trace_;
    const std::size_t n_;
    std::unique_ptr<AclClassifier> acl_;
    std::unique_ptr<AclClassifier> parted_;  // null when the default part size gives one context
    rte_acl_ctx* ctx_ = nullptr;
    double build_s_ = 0;
    std::vector<FiveTuple> tuples_;
    std::vector<const FiveTuple*> tuple_ptrs_;
    std::vector<Ipv4AclKey> keys_;
    std::vector<const uint8_t*> key_ptrs_;
    const std::vector<uint16_t> in_ports_ = std::vector<uint16_t>(kBurst, 0);
    const std::vector<L4MatchBytes> l4_ = std::vector<L4MatchBytes>(kBurst);
    std::vector<uint32_t> wrapped_, raw_, parted_out_;
    std::vector<std::pair<uint64_t, uint32_t>> bursts_;  // cycles, tuples
};

void classify_one(Dpdk& d, const Options& o, Table& table, const std::vector<RuleSpec>& specs,
                  const std::vector<TraceTuple>& trace, const std::string& label, Meta& meta) {
    ClassifyRun run(d, specs, trace);
    const bool raw_valid = run.check(label);
    const enum rte_acl_classify_alg* sluice_alg = run.sluice_method();
    for (const enum rte_acl_classify_alg& a : kAlgs) {
        if (!run.set_method(a)) continue;
        const std::string alg_name = acl_method_name(a);
        auto r = interleaved(o.reps, {[&] { return run.pass_raw(); }, [&] { return run.pass_wrapped(); }});
        const bool runs_in_sluice = sluice_alg == &a;
        table.add(Row{.id = "classify-" + std::to_string(specs.size()) + (runs_in_sluice ? "" : "-" + alg_name),
                      .measurement = "classify " + label + ", " + alg_name + (runs_in_sluice ? " (sluice's)" : ""),
                      .unit = "cycles/pkt",
                      .reference = "raw rte_acl_classify, same context",
                      .ref = stat_of(r[0]),
                      .sluice = stat_of(r[1]),
                      .has_ref = raw_valid});
        if (runs_in_sluice) meta.emplace_back("acl_sluice_alg", alg_name);
    }
    // Leave the context as AclClassifier set it.
    if (sluice_alg) run.set_method(*sluice_alg);
    if (const AclClassifier* parted = run.parted()) {
        auto r = interleaved(o.reps, {[&] { return run.pass_raw(); }, [&] { return run.pass_parted(); }});
        table.add(Row{.id = "classify-" + std::to_string(specs.size()) + "-parts",
                      .measurement = "classify " + label + ", in the reload's parts (" +
                                     std::to_string(parted->part_count()) + " rte_acl contexts)",
                      .unit = "cycles/pkt",
                      .reference = "raw rte_acl_classify, all rules in one context",
                      .ref = stat_of(r[0]),
                      .sluice = stat_of(r[1]),
                      .has_ref = raw_valid});
    }
}

}  // namespace

void section_classify(Dpdk& d, const Options& o, Table& table, const AclFiles& files, Meta& meta) {
    if (!o.rules_file.empty()) {
        classify_one(d, o, table, files.rules, files.trace,
                     ordinal_count(files.rules.size()) + " rules (" + o.rules_file + ")", meta);
        return;
    }
    for (const std::size_t count : {std::size_t{10}, std::size_t{1000}, std::size_t{10000}}) {
        const auto rules = generate_rules(count, o.seed);
        classify_one(d, o, table, rules, generate_trace(rules, 65536, o.seed), ordinal_count(count) + " rules", meta);
    }
}

}  // namespace sluice::bench

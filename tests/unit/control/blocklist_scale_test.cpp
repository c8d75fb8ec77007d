// The early-drop tables at the size docs/config.md promises: 1M IPv4 and 1M IPv6 prefixes built in the memory
// docs/operations/host.md states, then rebuilt for a reload that changes 1 % of them; a sample of addresses (each end
// of listed prefixes, their neighbours, addresses in and out of the clusters) checked against exact matches of every
// listed length. And the worst case per prefix: 1M IPv6 /64s spread over the address space.
#include <algorithm>
#include <random>

#include <catch2/catch.hpp>
#include <rte_lcore.h>
#include <rte_malloc.h>

#include "common/blocklist_sets.hpp"
#include "control/blocklist_builder.hpp"
#include "pipeline/early_drop.hpp"

using namespace sluice;
using namespace sluice::test;

namespace {

// Under the sanitizers (about five times slower) a tenth of the size, in a tenth of the clusters (the same density):
// the same code paths, within the suite's time.
#if defined(__SANITIZE_ADDRESS__)
constexpr std::size_t kScale = 100'000;
#else
constexpr std::size_t kScale = 1'000'000;
#endif

uint64_t heap_bytes() {
    rte_malloc_socket_stats s{};
    rte_malloc_get_socket_stats(static_cast<int>(rte_socket_id()), &s);
    return s.heap_allocsz_bytes;
}

// The last address of a prefix, and the addresses just before and after it.
IpAddress v4_address(uint32_t host) { return IpAddress::from_v4(rte_cpu_to_be_32(host)); }

IpAddress v6_address(uint64_t hi, uint64_t lo) { return v6_prefix(hi, lo, 128).address; }

std::vector<IpAddress> v4_probes(const std::vector<Prefix>& listed, const V4Clusters& clusters, std::mt19937_64& rng) {
    std::vector<IpAddress> probes;
    for (int i = 0; i < 20000; ++i) {
        const Prefix& p = listed[rng() % listed.size()];
        const uint32_t first = rte_be_to_cpu_32(p.address.words[0]);
        const uint32_t last = first | (p.length == 32 ? 0 : ~uint32_t{0} >> p.length);
        for (const uint32_t a :
             {first, last, first - 1, last + 1, first | (static_cast<uint32_t>(rng()) & (last - first))})
            probes.push_back(v4_address(a));
    }
    for (int i = 0; i < 40000; ++i) probes.push_back(v4_address(clusters.address(rng)));
    for (int i = 0; i < 10000; ++i) probes.push_back(v4_address(static_cast<uint32_t>(rng())));
    return probes;
}

std::vector<IpAddress> v6_probes(const std::vector<Prefix>& listed, const V6Clusters& clusters, std::mt19937_64& rng) {
    std::vector<IpAddress> probes;
    for (int i = 0; i < 20000; ++i) {
        const Prefix& p = listed[rng() % listed.size()];
        const uint64_t hi = v6_hi(p.address), lo = v6_lo(p.address);
        const Prefix span = v6_prefix(~uint64_t{0}, ~uint64_t{0}, p.length);  // the prefix's mask
        const uint64_t last_hi = hi | ~v6_hi(span.address), last_lo = lo | ~v6_lo(span.address);
        probes.push_back(v6_address(hi, lo));
        probes.push_back(v6_address(last_hi, last_lo));
        probes.push_back(v6_address(lo == 0 ? hi - 1 : hi, lo - 1));
        probes.push_back(v6_address(last_lo == ~uint64_t{0} ? last_hi + 1 : last_hi, last_lo + 1));
        probes.push_back(v6_address(hi | (rng() & ~v6_hi(span.address)), lo | (rng() & ~v6_lo(span.address))));
    }
    for (int i = 0; i < 20000; ++i) probes.push_back(v6_address(clusters.in_provider(rng), rng()));
    for (int i = 0; i < 20000; ++i) probes.push_back(v6_address(clusters.in_site(rng), rng()));
    for (int i = 0; i < 10000; ++i) probes.push_back(v6_address(rng(), rng()));
    return probes;
}

struct Agreement {
    std::size_t listed = 0, wrong = 0;
};

// What the lcores' lookup (early_dropped: the same tables, one address at a time) says against the reference.
Agreement check(const Blocklist& tables, IpFamily family, const std::vector<IpAddress>& probes,
                const ListedReference& reference, std::vector<bool>* answers = nullptr) {
    FirewallTables fw;
    fw.blocklist_v4 = tables.v4.get();
    fw.blocklist_v6 = tables.v6.get();
    Agreement a;
    for (const IpAddress& probe : probes) {
        const bool expected = reference.listed(probe, family == IpFamily::ipv4);
        const bool dropped = early_dropped(fw, family, probe);
        a.listed += expected;
        a.wrong += dropped != expected;
        if (answers) answers->push_back(dropped);
    }
    return a;
}

// docs/operations/host.md's bound: 256 KiB, and 72 B per node on a prefix's path (one per byte boundary from bit 16
// below its length), were no node shared.
uint64_t worst_case_bytes(const std::vector<Prefix>& prefixes) {
    uint64_t bytes = PrefixSetTable::kRootSlots * 4;
    for (const Prefix& p : prefixes) bytes += p.length > 16 ? 72 * ((p.length - 16 + 7) / 8) : 0;
    return bytes;
}

// 1 % of the prefixes replaced by as many new ones.
std::vector<Prefix> changed(std::vector<Prefix> prefixes, const std::vector<Prefix>& added, std::mt19937_64& rng) {
    std::shuffle(prefixes.begin(), prefixes.end(), rng);
    prefixes.resize(prefixes.size() - added.size());
    prefixes.insert(prefixes.end(), added.begin(), added.end());
    return prefixes;
}

std::vector<Prefix> sorted(std::vector<Prefix> prefixes) {
    sort_distinct(prefixes);
    return prefixes;
}

std::shared_ptr<const Blocklist> build_family(IpFamily family, const std::vector<Prefix>& prefixes,
                                              const std::shared_ptr<const Blocklist>& previous) {
    return family == IpFamily::ipv4 ? build_blocklist(sorted(prefixes), {}, 0, previous)
                                    : build_blocklist({}, sorted(prefixes), 0, previous);
}

// Builds prefixes (one family's), checks the heap it took (at most max_bytes_per_prefix per prefix kept) and the
// answers on probes; then a reload that replaces 1 % of them with replacements.
void check_at_scale(IpFamily family, const std::vector<Prefix>& prefixes, const std::vector<Prefix>& replacements,
                    const std::vector<IpAddress>& probes, std::size_t max_bytes_per_prefix, std::mt19937_64& rng) {
    const bool v4 = family == IpFamily::ipv4;
    const uint64_t before = heap_bytes();
    const auto first = build_family(family, prefixes, nullptr);
    const PrefixSetTable* table = v4 ? first->v4.get() : first->v6.get();
    REQUIRE(table != nullptr);
    REQUIRE((v4 ? first->v6 : first->v4) == nullptr);
    const std::vector<Prefix>& kept = v4 ? first->v4_prefixes : first->v6_prefixes;
    CHECK(kept.size() < sorted(prefixes).size());  // the ones inside a shorter listed prefix take nothing
    const uint64_t taken = heap_bytes() - before;  // what the log line says, and what the clusters share
    CHECK(taken >= table->bytes());
    CHECK(taken <= table->bytes() + 4096);
    CHECK(taken <= worst_case_bytes(kept));
    CHECK(taken <= max_bytes_per_prefix * kept.size());

    std::vector<bool> before_answers, after_answers;
    const Agreement a = check(*first, family, probes, ListedReference(prefixes), &before_answers);
    CHECK(a.wrong == 0);
    CHECK(a.listed > probes.size() / 5);
    CHECK(a.listed < probes.size() * 4 / 5);

    const std::vector<Prefix> reloaded = changed(prefixes, replacements, rng);
    const auto second = build_family(family, reloaded, first);
    REQUIRE(second != first);
    const Agreement b = check(*second, family, probes, ListedReference(reloaded), &after_answers);
    CHECK(b.wrong == 0);
    std::size_t flipped = 0;
    for (std::size_t i = 0; i < probes.size(); ++i) flipped += before_answers[i] != after_answers[i];
    CHECK(flipped > 100);  // the probes see the change
}

}  // namespace

TEST_CASE("early-drop set of 1M IPv4 prefixes (ASan: 100k): built, rebuilt for a 1 % change, as exact matches say",
          "[blocklist-scale]") {
    std::mt19937_64 rng(29);
    const V4Clusters clusters(rng, 4096 * kScale / 1'000'000);
    const std::vector<Prefix> prefixes = clustered_v4(kScale, clusters, rng);
    const std::vector<IpAddress> probes = v4_probes(prefixes, clusters, rng);
    check_at_scale(IpFamily::ipv4, prefixes, clustered_v4(kScale / 100, clusters, rng), probes, 48, rng);
}

TEST_CASE("early-drop set of 1M IPv6 prefixes (ASan: 100k): built, rebuilt for a 1 % change, as exact matches say",
          "[blocklist-scale]") {
    std::mt19937_64 rng(31);
    const V6Clusters clusters(rng, 256 * kScale / 1'000'000, 65536 * kScale / 1'000'000);
    const std::vector<Prefix> prefixes = clustered_v6(kScale, clusters, rng);
    const std::vector<IpAddress> probes = v6_probes(prefixes, clusters, rng);
    check_at_scale(IpFamily::ipv6, prefixes, clustered_v6(kScale / 100, clusters, rng), probes, 40, rng);
}

TEST_CASE("early-drop tables: prefixes covered by a shorter listed one are dropped", "[blocklist-scale]") {
    std::vector<Prefix> v4 = {v4_prefix(0x0a000000, 8),  v4_prefix(0x0a010203, 32), v4_prefix(0x0a7f0000, 16),
                              v4_prefix(0x0b000000, 32), v4_prefix(0x0b000000, 24), v4_prefix(0x0b000100, 24),
                              v4_prefix(0x0b000180, 25)};
    sort_distinct(v4);
    drop_covered(v4);
    CHECK(v4 == std::vector<Prefix>{v4_prefix(0x0a000000, 8), v4_prefix(0x0b000000, 24), v4_prefix(0x0b000100, 24)});
    std::vector<Prefix> v6 = {v6_prefix(0x20010db800000000, 0, 32), v6_prefix(0x20010db8ffff0000, 0, 48),
                              v6_prefix(0x20010db900000000, 0, 33), v6_prefix(0x20010db980000000, 0, 48)};
    sort_distinct(v6);
    drop_covered(v6);
    CHECK(v6 == std::vector<Prefix>{v6_prefix(0x20010db800000000, 0, 32), v6_prefix(0x20010db900000000, 0, 33),
                                    v6_prefix(0x20010db980000000, 0, 48)});
}

TEST_CASE("early-drop set of 1M IPv6 /64s (100k under ASan) spread over 2000::/3: the most a prefix costs",
          "[blocklist-scale]") {
    // Each /64 in a /24 of its own: a node for each of its bytes 3 to 7, beside its /16's (docs/operations/host.md).
    std::mt19937_64 rng(41);
    std::vector<Prefix> prefixes = sparse_v6(kScale, 64, rng);
    const std::vector<Prefix> sample(prefixes.begin(), prefixes.begin() + 20000);
    sort_distinct(prefixes);
    const uint64_t before = heap_bytes();
    const auto table = build_blocklist({}, prefixes, 0, nullptr);
    REQUIRE(table->v6 != nullptr);
    CHECK(heap_bytes() - before <= worst_case_bytes(prefixes) + 4096);
    CHECK(heap_bytes() - before >= 4 * 72 * prefixes.size());  // only the /16s' nodes are shared
    FirewallTables fw;
    fw.blocklist_v6 = table->v6.get();
    std::size_t wrong = 0;
    for (const Prefix& p : sample) {
        const uint64_t hi = v6_hi(p.address);
        wrong += !early_dropped(fw, IpFamily::ipv6, v6_address(hi, rng()));
        wrong +=
            early_dropped(fw, IpFamily::ipv6, v6_address(hi ^ 1, rng())) !=
            std::binary_search(prefixes.begin(), prefixes.end(), v6_prefix(hi ^ 1, 0, 64),
                               [](const Prefix& a, const Prefix& b) { return v6_hi(a.address) < v6_hi(b.address); });
    }
    CHECK(wrong == 0);
}

// Section blocklist (only when named): the early-drop tables (PrefixSetTable, built by control/blocklist_builder.hpp)
// for 1M prefixes in each family: the seconds a build takes, the seconds a reload that changes 1 % of them takes (a
// build beside the running tables, as the daemon holds both until the swap), the DPDK heap per prefix, and the
// cycles per address looked up (bursts of 32 random addresses of the sets' clusters, about half listed).
// The sets are tests/unit/common/blocklist_sets.hpp's: clustered (1M each family) and sparse (single long prefixes
// spread over the address space, the most a prefix costs: 250k each, their memory per prefix holds at any count).
// Reference: the DPDK tables sluice used before, sized exactly from the same prefixes (rte_fib DIR-24-8 with the
// narrowest next hop that indexes its tbl8 groups; rte_lpm6 with the groups the set needs), built and looked up the
// same way; a sparse set's reference is computed (1M /64s would need about 5 GiB), not built, and so is any the
// EAL's memory cannot hold (1M clustered IPv4 prefixes take rte_fib about 1 GiB: run with `-- -m 4096 ...`).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>

#include <rte_byteorder.h>
#include <rte_cycles.h>
#include <rte_fib.h>
#include <rte_lcore.h>
#include <rte_lpm6.h>
#include <rte_malloc.h>

#include "common/blocklist_sets.hpp"
#include "control/blocklist_builder.hpp"
#include "sections.hpp"

namespace sluice::bench {
namespace {

uint64_t heap_bytes() {
    rte_malloc_socket_stats s{};
    rte_malloc_get_socket_stats(static_cast<int>(rte_socket_id()), &s);
    return s.heap_allocsz_bytes;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// DIR-24-8: a group per /24 holding a longer prefix. rte_lpm6: a group per distinct leading 24, 32, ... bits of the
// prefixes longer than that. Both over lists in address order.
uint64_t v4_groups(const std::vector<Prefix>& sorted) {
    uint64_t groups = 0;
    const Prefix* last = nullptr;
    for (const Prefix& p : sorted) {
        if (p.length <= 24) continue;
        if (!last || std::memcmp(last->address.bytes, p.address.bytes, 3) != 0) ++groups;
        last = &p;
    }
    return groups;
}

uint64_t v6_groups(const std::vector<Prefix>& sorted) {
    uint64_t groups = 0;
    for (unsigned bytes = 3; bytes < 16; ++bytes) {
        const Prefix* last = nullptr;
        for (const Prefix& p : sorted) {
            if (p.length <= bytes * 8) continue;
            if (!last || std::memcmp(last->address.bytes, p.address.bytes, bytes) != 0) ++groups;
            last = &p;
        }
    }
    return groups;
}

struct Reference {
    rte_fib* fib = nullptr;
    rte_lpm6* lpm6 = nullptr;
    ~Reference() {
        rte_fib_free(fib);
        rte_lpm6_free(lpm6);
    }
};

void build_reference(Reference& r, IpFamily family, const std::vector<Prefix>& prefixes) {
    if (family == IpFamily::ipv4) {
        const uint64_t groups = std::max<uint64_t>(v4_groups(prefixes), 1);
        rte_fib_conf c{};
        c.type = RTE_FIB_DIR24_8;
        c.max_routes = static_cast<int>(prefixes.size());
        c.dir24_8.nh_sz = groups <= 127     ? RTE_FIB_DIR24_8_1B
                          : groups <= 32767 ? RTE_FIB_DIR24_8_2B
                                            : RTE_FIB_DIR24_8_4B;
        c.dir24_8.num_tbl8 = static_cast<uint32_t>(groups);
        r.fib = rte_fib_create("bench_bl_fib", 0, &c);
        if (!r.fib) throw std::runtime_error("rte_fib_create: out of DPDK memory (give the EAL more: -m)");
        for (const Prefix& p : prefixes) rte_fib_add(r.fib, rte_be_to_cpu_32(p.address.words[0]), p.length, 1);
    } else {
        rte_lpm6_config c{};
        c.max_rules = static_cast<uint32_t>(prefixes.size());
        c.number_tbl8s = static_cast<uint32_t>(std::max<uint64_t>(v6_groups(prefixes), 1));
        r.lpm6 = rte_lpm6_create("bench_bl_lpm6", 0, &c);
        if (!r.lpm6) throw std::runtime_error("rte_lpm6_create: out of DPDK memory (give the EAL more: -m)");
        for (const Prefix& p : prefixes) rte_lpm6_add(r.lpm6, p.address.bytes, p.length, 1);
    }
}

// What the reference takes, computed: its tables, and rte_rib's two nodes per prefix (192-byte mempool objects) or
// rte_lpm6's rule hash (about 60 B per prefix).
double reference_bytes(IpFamily family, const std::vector<Prefix>& prefixes) {
    if (family == IpFamily::ipv4) {
        const double groups = double(v4_groups(prefixes));
        const double slot = groups <= 127 ? 1 : groups <= 32767 ? 2 : 4;
        return (double(1 << 24) + 256 * groups) * slot + 384.0 * double(prefixes.size());
    }
    return double(1 << 24) * 4 + 1040.0 * double(v6_groups(prefixes)) + 60.0 * double(prefixes.size());
}

// Cycles per address: bursts of 32 through the table (PrefixSetTable::contains per address, as early_drop_burst)
// or the reference (one bulk call per burst, as sluice did).
struct Lookups {
    double table = 0, reference = 0;
};

Lookups time_lookups(const Blocklist& bl, const Reference& ref, IpFamily family, const std::vector<IpAddress>& probes) {
    constexpr unsigned kBurst = 32;
    Lookups out;
    uint64_t hits = 0;
    const PrefixSetTable& table = family == IpFamily::ipv4 ? *bl.v4 : *bl.v6;
    uint64_t start = rte_rdtsc_precise();
    for (std::size_t i = 0; i + kBurst <= probes.size(); i += kBurst)
        for (unsigned k = 0; k < kBurst; ++k) hits += table.contains(probes[i + k].bytes);
    out.table = double(rte_rdtsc_precise() - start) / double(probes.size());
    start = rte_rdtsc_precise();
    if (family == IpFamily::ipv4) {
        uint32_t ips[kBurst];
        uint64_t hops[kBurst];
        for (std::size_t i = 0; i + kBurst <= probes.size(); i += kBurst) {
            for (unsigned k = 0; k < kBurst; ++k) ips[k] = rte_be_to_cpu_32(probes[i + k].words[0]);
            rte_fib_lookup_bulk(ref.fib, ips, hops, kBurst);
            for (unsigned k = 0; k < kBurst; ++k) hits -= hops[k] != 0;
        }
    } else {
        uint8_t ips[kBurst][16];
        int32_t hops[kBurst];
        for (std::size_t i = 0; i + kBurst <= probes.size(); i += kBurst) {
            for (unsigned k = 0; k < kBurst; ++k) std::memcpy(ips[k], probes[i + k].bytes, 16);
            rte_lpm6_lookup_bulk_func(ref.lpm6, ips, hops, kBurst);
            for (unsigned k = 0; k < kBurst; ++k) hits -= hops[k] >= 0;
        }
    }
    out.reference = double(rte_rdtsc_precise() - start) / double(probes.size());
    if (hits != 0)
        std::printf("blocklist: the table and the reference disagree on %llu addresses\n",
                    static_cast<unsigned long long>(hits));
    return out;
}

struct Measured {
    double build_s = 0, reload_s = 0, bytes_per_prefix = 0, ref_build_s = 0, ref_bytes_per_prefix = 0;
    Lookups cycles;
    std::size_t stored = 0, nodes = 0;
    bool reference_built = false;
};

// prefixes: as listed; probes: addresses to time lookups with (none: no lookup, no reference built).
Measured measure(IpFamily family, std::vector<Prefix> prefixes, const std::vector<Prefix>& replacements,
                 const std::vector<IpAddress>& probes, std::mt19937_64& rng) {
    const bool v4 = family == IpFamily::ipv4;
    Measured m;
    uint64_t before = heap_bytes();
    auto start = std::chrono::steady_clock::now();
    std::vector<Prefix> listed = prefixes;
    sort_distinct(listed);  // timed: build_snapshot does it
    const auto first = v4 ? build_blocklist(listed, {}, 0, nullptr) : build_blocklist({}, listed, 0, nullptr);
    m.build_s = seconds_since(start);
    m.bytes_per_prefix = double(heap_bytes() - before) / double(prefixes.size());
    m.stored = (v4 ? first->v4_prefixes : first->v6_prefixes).size();
    m.nodes = (v4 ? *first->v4 : *first->v6).node_count();
    drop_covered(listed);  // what the reference would need at least
    m.ref_bytes_per_prefix = reference_bytes(family, listed) / double(prefixes.size());
    if (!replacements.empty()) {
        std::shuffle(prefixes.begin(), prefixes.end(), rng);
        prefixes.resize(prefixes.size() - replacements.size());
        prefixes.insert(prefixes.end(), replacements.begin(), replacements.end());
        start = std::chrono::steady_clock::now();
        sort_distinct(prefixes);
        const auto second =  // beside first, as the daemon holds both until the swap
            v4 ? build_blocklist(prefixes, {}, 0, first) : build_blocklist({}, prefixes, 0, first);
        m.reload_s = seconds_since(start);
    }
    if (!probes.empty()) {
        Reference ref;
        before = heap_bytes();
        start = std::chrono::steady_clock::now();
        try {
            build_reference(ref, family, listed);
            m.ref_build_s = seconds_since(start);
            m.ref_bytes_per_prefix = double(heap_bytes() - before) / double(prefixes.size());
            m.reference_built = true;
        } catch (const std::runtime_error& e) {
            std::printf("blocklist: reference not built: %s; its memory computed, no build or lookup time\n", e.what());
        }
        if (m.reference_built) m.cycles = time_lookups(*first, ref, family, probes);
    }
    return m;
}

}  // namespace

void section_blocklist(Dpdk&, const Options& o, Table& table) {
    std::mt19937_64 rng(o.seed + 29);
    const auto rows = [&](const std::string& id, const std::string& what, const Measured& m, bool timed) {
        std::printf("blocklist: %s: %zu prefixes kept, %zu nodes, build %.2f s (reference %.2f s), reload %.2f s, "
                    "%.1f B/prefix (reference %.1f), lookup %.1f cycles (reference %.1f)\n",
                    what.c_str(), m.stored, m.nodes, m.build_s, m.ref_build_s, m.reload_s, m.bytes_per_prefix,
                    m.ref_bytes_per_prefix, m.cycles.table, m.cycles.reference);
        const std::string reference =
            m.reference_built ? "rte_fib/rte_lpm6 sized from the set" : "rte_fib/rte_lpm6 sized from the set, computed";
        if (timed) {
            table.add(Row{.id = id + "-build",
                          .measurement = "early-drop build, " + what,
                          .unit = "s",
                          .reference = reference,
                          .ref = constant_stat(m.ref_build_s),
                          .sluice = constant_stat(m.build_s),
                          .has_ref = m.reference_built});
            table.add(Row{.id = id + "-reload",
                          .measurement = "early-drop reload, 1 % changed, " + what,
                          .unit = "s",
                          .reference = "",
                          .ref = {},
                          .sluice = constant_stat(m.reload_s),
                          .has_ref = false});
            table.add(Row{.id = id + "-lookup",
                          .measurement = "early-drop lookup, " + what,
                          .unit = "cycles/addr",
                          .reference = reference,
                          .ref = constant_stat(m.cycles.reference),
                          .sluice = constant_stat(m.cycles.table),
                          .has_ref = m.reference_built});
        }
        table.add(Row{.id = id + "-memory",
                      .measurement = "early-drop memory, " + what,
                      .unit = "bytes/prefix",
                      .reference = reference,
                      .ref = constant_stat(m.ref_bytes_per_prefix),
                      .sluice = constant_stat(m.bytes_per_prefix)});
    };
    {
        const test::V4Clusters clusters(rng);
        const auto prefixes = test::clustered_v4(1'000'000, clusters, rng);
        std::vector<IpAddress> probes(1 << 20);
        for (IpAddress& a : probes) a = IpAddress::from_v4(rte_cpu_to_be_32(clusters.address(rng)));
        rows("blocklist-v4", "1M IPv4 clustered",
             measure(IpFamily::ipv4, prefixes, test::clustered_v4(10'000, clusters, rng), probes, rng), true);
    }
    {
        const test::V6Clusters clusters(rng);
        const auto prefixes = test::clustered_v6(1'000'000, clusters, rng);
        std::vector<IpAddress> probes(1 << 20);
        for (std::size_t i = 0; i < probes.size(); ++i)
            probes[i] = test::v6_prefix(i % 2 ? clusters.in_site(rng) : clusters.in_provider(rng), rng(), 128).address;
        rows("blocklist-v6", "1M IPv6 clustered",
             measure(IpFamily::ipv6, prefixes, test::clustered_v6(10'000, clusters, rng), probes, rng), true);
    }
    rows("blocklist-v4-sparse", "250k IPv4 /32 sparse",
         measure(IpFamily::ipv4, test::sparse_v4(250'000, rng), {}, {}, rng), false);
    rows("blocklist-v6-sparse48", "250k IPv6 /48 sparse",
         measure(IpFamily::ipv6, test::sparse_v6(250'000, 48, rng), {}, {}, rng), false);
    rows("blocklist-v6-sparse64", "250k IPv6 /64 sparse",
         measure(IpFamily::ipv6, test::sparse_v6(250'000, 64, rng), {}, {}, rng), false);
}

}  // namespace sluice::bench

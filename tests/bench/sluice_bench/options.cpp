// sluice_bench's command line: parse_options (the comment at the top of main.cpp explains each option).
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include <rte_config.h>

#include "dpdk/mempool.hpp"
#include "options.hpp"

namespace sluice::bench {
namespace {

std::vector<std::string> split(const std::string& s, char delimiter) {
    std::vector<std::string> out;
    std::stringstream in(s);
    for (std::string item; std::getline(in, item, delimiter);)
        if (!item.empty()) out.push_back(item);
    return out;
}

uint64_t parse_number(const std::string& s, const std::string& option) {
    errno = 0;
    char* end = nullptr;
    const unsigned long long v = std::strtoull(s.c_str(), &end, 0);
    if (errno != 0 || end == s.c_str() || *end != '\0') fail("option " + option + ": '" + s + "' is not a number");
    return v;
}

}  // namespace

Options parse_options(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--") {
            for (++i; i < argc; ++i) o.eal.emplace_back(argv[i]);
            break;
        }
        if (a == "-h" || a == "--help") {
            std::printf("usage: %s [--only LIST] [--rules FILE --trace FILE] [--write-acl-files DIR] [--reps N]\n"
                        "       [--packets N] [--conns LIST] [--new-conns N] [--lb-conns N] [--capacity-conns LIST]\n"
                        "       [--seed N]\n"
                        "       [--results FILE] [--lcore N] [--eal-add ARG]... [--trimmed-heap] [--handshake]\n"
                        "       [-- EAL args]\n"
                        "(the comment at the top of tests/bench/sluice_bench/main.cpp explains each)\n",
                        argv[0]);
            std::exit(0);
        }
        if (a == "--trimmed-heap") {
            o.trimmed_heap = true;
            continue;
        }
        if (a == "--handshake") {
            o.handshake = true;
            continue;
        }
        if (a.rfind("--eal-add=", 0) == 0) {
            o.eal_add.push_back(a.substr(std::strlen("--eal-add=")));
            continue;
        }
        if (i + 1 >= argc) fail("option " + a + " needs a value (or is unknown; see --help)");
        const std::string v = argv[++i];
        if (a == "--only") {
            o.sections.clear();
            for (const std::string& s : split(v, ',')) {
                if (s != "parse" && s != "classify" && s != "established" && s != "new" && s != "lb" && s != "memory" &&
                    s != "reload" && s != "scaling" && s != "walk" && s != "blocklist" && s != "routes" &&
                    s != "capacity")
                    fail("--only: unknown section '" + s +
                         "' (parse, classify, established, new, lb, memory, reload, scaling, walk, blocklist, routes, "
                         "capacity)");
                o.sections.insert(s);
            }
        } else if (a == "--rules") {
            o.rules_file = v;
        } else if (a == "--trace") {
            o.trace_file = v;
        } else if (a == "--write-acl-files") {
            o.write_dir = v;
        } else if (a == "--lcore") {
            o.lcore = static_cast<unsigned>(std::min<uint64_t>(parse_number(v, a), RTE_MAX_LCORE - 1));
        } else if (a == "--eal-add") {
            o.eal_add.push_back(v);
        } else if (a == "--results") {
            o.results_file = v;
        } else if (a == "--reps") {
            o.reps = static_cast<unsigned>(std::clamp<uint64_t>(parse_number(v, a), 1, 1000));
        } else if (a == "--packets") {
            o.packets = static_cast<uint32_t>(std::clamp<uint64_t>(parse_number(v, a), kBurst, 1u << 24));
        } else if (a == "--conns") {
            o.conns.clear();
            for (const std::string& s : split(v, ',')) o.conns.push_back(static_cast<uint32_t>(parse_number(s, a)));
        } else if (a == "--new-conns") {
            o.new_conns = static_cast<uint32_t>(std::clamp<uint64_t>(parse_number(v, a), kBurst, 1u << 22));
        } else if (a == "--lb-conns") {
            o.lb_conns = static_cast<uint32_t>(std::clamp<uint64_t>(parse_number(v, a), kBurst, 1'000'000));
        } else if (a == "--capacity-conns") {
            o.capacity_conns.clear();
            for (const std::string& s : split(v, ','))
                o.capacity_conns.push_back(static_cast<uint32_t>(parse_number(s, a)));
        } else if (a == "--seed") {
            o.seed = parse_number(v, a);
        } else {
            fail("unknown option " + a + " (see --help)");
        }
    }
    if (o.rules_file.empty() != o.trace_file.empty()) fail("--rules and --trace go together");
    for (uint32_t c : o.conns)
        if (c < 1 || c > 16'000'000) fail("--conns: each count must be within 1..16000000");
    for (uint32_t c : o.capacity_conns)
        if (c < 131072 || c > 64'000'000) fail("--capacity-conns: each count must be within 131072..64000000");
    if (o.capacity_conns.empty()) fail("--capacity-conns: at least one count");
    return o;
}

}  // namespace sluice::bench

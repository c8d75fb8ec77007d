// sluice_bench's command line (the comment at the top of main.cpp explains each option), and how it fails.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

namespace sluice::bench {

struct Options {
    std::set<std::string> sections{"parse", "classify", "established", "new", "lb", "memory", "reload", "scaling"};
    std::string rules_file, trace_file, write_dir, results_file;
    unsigned reps = 7;
    uint32_t packets = 65536;
    std::vector<uint32_t> conns{1000, 100000, 1000000};
    uint32_t new_conns = 262144;
    uint32_t lb_conns = 100000;
    std::vector<uint32_t> capacity_conns{1000000, 10000000};  // section capacity: the first is the reference
    uint64_t seed = 1;
    std::vector<std::string> eal;      // after --, verbatim
    std::vector<std::string> eal_add;  // --eal-add, appended to the defaults
    unsigned lcore = 0;
    bool trimmed_heap = false;  // --trimmed-heap
    bool handshake = false;     // --handshake
};

// Exits on a bad option (and after --help).
Options parse_options(int argc, char** argv);

// Prints the message, removes the EAL runtime directory of our own prefix (harness.cpp) and exits with status 1.
[[noreturn]] void fail(const std::string& message);

}  // namespace sluice::bench

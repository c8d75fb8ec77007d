// Main of the unit tests that need DPDK memory (rte_hash, rte_acl, rte_lpm): the EAL starts once, without
// hugepages, with a file prefix of its own, then Catch2 runs.
#include <unistd.h>

#include <string>

#include <rte_eal.h>

#include "catch_session.hpp"

int main(int argc, char** argv) {
    const std::string prefix = "--file-prefix=unit-" + std::to_string(getpid());
    const char* eal_args[] = {"dpdk_unit_tests",   "--no-huge",    "-m",   "1024", "--no-pci", "-l", "0",
                              "--log-level=error", prefix.c_str(), nullptr};
    if (rte_eal_init(9, const_cast<char**>(eal_args)) < 0) return 2;
    const int result = run_catch_session(argc, argv);
    rte_eal_cleanup();
    return result;
}

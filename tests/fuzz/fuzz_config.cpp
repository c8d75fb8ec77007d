// libFuzzer target "config": sluice::load_config_text on arbitrary text (a config is written by an operator, but
// --check-config and a reload must survive any file: a typo must give an error, never a crash, a hang or an exception
// out of the loader). Checks:
//  - nothing is thrown out of load_config_text;
//  - a config and errors are exclusive, and one of them is there;
//  - every error has a non-empty message and file, and a position that is not negative;
//  - a config that loads is sane where the daemon relies on it without checking again: its hash is 16 hex digits,
//    it has ports and rx and worker lcores, forward entries name its ports, restart_required_changes(c, c) is empty,
//    and assign_rx_queues gives every rx lcore valid (port, queue) pairs covering each queue once.
// Prefix-set files ("file:") are read relative to the current directory (the name given is "fuzz.yaml");
// tests/fuzz/run_fuzzers.sh runs this target in tests/fuzz/config-files, which holds a few. SLUICE_FUZZ_VERBOSE=1
// prints what each input loaded to (to check a seed: fuzz_config FILE...).
#include <cstdlib>
#include <exception>
#include <set>
#include <string>

#include "config/config.hpp"
#include "fuzz_common.hpp"

using namespace sluice;

namespace {

constexpr std::size_t kMaxText = 64 * 1024;

void check_config(const Config& c) {
    FUZZ_CHECK(c.path == "fuzz.yaml", "path '%s'", c.path.c_str());
    FUZZ_CHECK(c.hash.size() == 16 && c.hash.find_first_not_of("0123456789abcdef") == std::string::npos, "hash '%s'",
               c.hash.c_str());
    FUZZ_CHECK(!c.ports.empty(), "a config without ports");
    bool rx = false, worker = false;
    for (const LcoreConfig& l : c.lcores) rx |= l.rx, worker |= l.worker;
    FUZZ_CHECK(rx && worker, "a config without rx or worker lcores");
    for (const ForwardConfig& f : c.forward)
        FUZZ_CHECK(c.find_port(f.from) && c.find_port(f.to), "forward %s -> %s names an unknown port", f.from.c_str(),
                   f.to.c_str());
    for (const ServiceConfig& s : c.services)
        FUZZ_CHECK(s.table_size > s.backends.size() && !s.backends.empty(), "service '%s': table %u, %zu backends",
                   s.name.c_str(), s.table_size, s.backends.size());
    FUZZ_CHECK(restart_required_changes(c, c).empty(), "a config differs from itself");

    const auto plan = assign_rx_queues(c);
    FUZZ_CHECK(plan.size() == c.lcores.size(), "a plan for %zu of %zu lcores", plan.size(), c.lcores.size());
    std::set<std::pair<std::size_t, uint16_t>> seen;
    for (std::size_t l = 0; l < plan.size(); ++l)
        for (const auto& [port, queue] : plan[l]) {
            FUZZ_CHECK(c.lcores[l].rx, "lcore %u polls a queue without the rx role", c.lcores[l].id);
            FUZZ_CHECK(port < c.ports.size() && queue < c.ports[port].rx_queues, "lcore %u polls port %zu queue %u",
                       c.lcores[l].id, port, queue);
            FUZZ_CHECK(seen.insert({port, queue}).second, "port %zu queue %u polled twice", port, queue);
        }
    std::size_t queues = 0;
    for (const PortSpec& p : c.ports) queues += p.rx_queues;
    FUZZ_CHECK(seen.size() == queues, "%zu of %zu rx queues polled", seen.size(), queues);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size > kMaxText) return 0;
    const std::string text(reinterpret_cast<const char*>(data), size);
    ConfigResult result;
    try {
        result = load_config_text(text, "fuzz.yaml");
    } catch (const std::exception& e) {
        FUZZ_CHECK(false, "load_config_text threw %s", e.what());
    } catch (...) {
        FUZZ_CHECK(false, "load_config_text threw something that is not a std::exception");
    }
    FUZZ_CHECK(result.config.has_value() != !result.errors.empty(), "config %s and %zu errors",
               result.config ? "present" : "absent", result.errors.size());
    for (const ConfigError& e : result.errors) {
        FUZZ_CHECK(!e.message.empty(), "an error without a message at %s:%d:%d", e.file.c_str(), e.line, e.column);
        FUZZ_CHECK(!e.file.empty() && e.line >= 0 && e.column >= 0, "error '%s' at '%s':%d:%d", e.message.c_str(),
                   e.file.c_str(), e.line, e.column);
    }
    if (result.config) check_config(*result.config);
    static const bool verbose = std::getenv("SLUICE_FUZZ_VERBOSE") != nullptr;
    if (verbose) {
        std::fprintf(stderr, "%s\n", result.config ? "config loaded" : "errors:");
        for (const ConfigError& e : result.errors) std::fprintf(stderr, "  %s\n", e.to_string().c_str());
    }
    return 0;
}

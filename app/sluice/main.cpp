// sluice: a DPDK L4 load balancer and stateful firewall.
//   sluice --config FILE [-- EAL args]    run until SIGINT/SIGTERM
//   sluice --check-config FILE            validate FILE and exit 0, or print every error and exit 2
//   sluice --withdraw-vips FILE           have BIRD withdraw every VIP FILE's bgp section announces (after a crash)
#include <csignal>
#include <cstdio>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "common/heap.hpp"
#include "common/log.hpp"
#include "config/config.hpp"
#include "control/bird_announcer.hpp"
#include "daemon.hpp"

namespace {

int usage(const char* program, int code) {
    std::fprintf(code ? stderr : stdout,
                 "usage: %s --config FILE [-- EAL arguments]\n"
                 "       %s --check-config FILE\n"
                 "       %s --withdraw-vips FILE\n"
                 "       %s --version\n",
                 program, program, program, program);
    return code;
}

// A sluice that died without its stop (SIGKILL, a crash) leaves its VIPs in BIRD's include file, and BIRD, alive,
// keeps announcing them: traffic would go to a host that drops it. The systemd unit runs this after every exit.
int withdraw_vips(const sluice::Config& config) {
    if (!config.bgp.enabled) {
        std::printf("%s: no bgp section: nothing announced\n", config.path.c_str());
        return 0;
    }
    sluice::BirdAnnouncer announcer(config.bgp);
    if (!announcer.update({}, std::chrono::steady_clock::now(), true)) {
        std::fprintf(stderr, "sluice: could not withdraw the VIPs: %s\n", announcer.record().last_error.c_str());
        return 1;
    }
    std::printf("every VIP withdrawn (%s emptied, BIRD reconfigured)\n", config.bgp.include_file.c_str());
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    std::string config_path;
    bool check_only = false;
    bool withdraw = false;
    std::vector<std::string> extra_eal_args;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if ((arg == "--config" || arg == "--check-config" || arg == "--withdraw-vips") && i + 1 < argc) {
            check_only = arg == "--check-config";
            withdraw = arg == "--withdraw-vips";
            config_path = argv[++i];
        } else if (arg == "--") {
            extra_eal_args.assign(argv + i + 1, argv + argc);
            break;
        } else if (arg == "--version") {
            std::printf("sluice %s\n", SLUICE_VERSION);
            return 0;
        } else if (arg == "-h" || arg == "--help") {
            return usage(argv[0], 0);
        } else {
            std::fprintf(stderr, "sluice: unexpected argument '%s'\n", arg.c_str());
            return usage(argv[0], sluice::kExitBadConfig);
        }
    }
    if (config_path.empty()) return usage(argv[0], sluice::kExitBadConfig);
    // Before the config's first load, and before any thread starts.
    if (!sluice::retain_freed_heap())
        std::fprintf(stderr,
                     "sluice: warning: glibc refused the heap settings: reloads will fault pages in as they build\n");

    sluice::ConfigResult loaded = sluice::load_config_file(config_path);
    for (const sluice::ConfigError& e : loaded.warnings) std::fprintf(stderr, "%s\n", e.to_string().c_str());
    for (const sluice::ConfigError& e : loaded.errors) std::fprintf(stderr, "%s\n", e.to_string().c_str());
    if (!loaded.config) return sluice::kExitBadConfig;
    if (check_only) {
        std::printf("%s: configuration is valid\n", config_path.c_str());
        return 0;
    }
    if (withdraw) return withdraw_vips(*loaded.config);

    try {
        sluice::setup_logging(loaded.config->log.level, loaded.config->log.file);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "sluice: log: %s\n", e.what());
        return sluice::kExitBadConfig;
    }
    // Blocked before the EAL starts its threads, so they inherit the mask and only the control thread takes them.
    sigset_t signals;
    sigemptyset(&signals);
    for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&signals, s);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);

    spdlog::info("sluice {} starting with {}", SLUICE_VERSION, config_path);
    // Moved: the daemon holds the one copy of the rules.
    return sluice::run_daemon(std::move(*loaded.config), argv[0], extra_eal_args);
}

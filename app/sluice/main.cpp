// sluice: a DPDK L4 load balancer and stateful firewall.
//   sluice --config FILE [-- EAL args]    run until SIGINT/SIGTERM
//   sluice --check-config FILE            validate FILE and exit 0, or print every error and exit 2
#include <csignal>
#include <cstdio>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "common/log.hpp"
#include "control/config.hpp"
#include "daemon.hpp"

namespace {

int usage(const char* program, int code) {
    std::fprintf(code ? stderr : stdout,
                 "usage: %s --config FILE [-- EAL arguments]\n"
                 "       %s --check-config FILE\n"
                 "       %s --version\n",
                 program, program, program);
    return code;
}

}  // namespace

int main(int argc, char** argv) {
    std::string config_path;
    bool check_only = false;
    std::vector<std::string> extra_eal_args;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if ((arg == "--config" || arg == "--check-config") && i + 1 < argc) {
            check_only = arg == "--check-config";
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

    const sluice::ConfigResult loaded = sluice::load_config_file(config_path);
    for (const sluice::ConfigError& e : loaded.errors) std::fprintf(stderr, "%s\n", e.to_string().c_str());
    if (!loaded.config) return sluice::kExitBadConfig;
    if (check_only) {
        std::printf("%s: configuration is valid\n", config_path.c_str());
        return 0;
    }

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
    return sluice::run_daemon(*loaded.config, argv[0], extra_eal_args);
}

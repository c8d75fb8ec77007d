#include "dpdk/eal.hpp"

#include <algorithm>
#include <string_view>
#include <utility>

#include <rte_eal.h>
#include <rte_errno.h>

#include <spdlog/spdlog.h>

#include "dpdk/startup_error.hpp"

namespace sluice {

std::vector<std::string> build_eal_args(const std::string& program, const std::vector<std::string>& config_args,
                                        const std::vector<PortSpec>& ports,
                                        const std::vector<std::string>& extra_args) {
    std::vector<std::string> args{program};
    args.insert(args.end(), config_args.begin(), config_args.end());
    bool any_pci = false;
    for (const PortSpec& port : ports) {
        if (is_pci_address(port.device)) {
            any_pci = true;
            args.insert(args.end(), {"-a", port.device});
        } else {
            args.push_back("--vdev=" + port.device);
        }
    }
    const auto mentions = [&](std::string_view flag) {
        const auto has = [&](const std::string& a) { return a == flag || a.starts_with(std::string(flag) + "="); };
        return std::any_of(config_args.begin(), config_args.end(), has) ||
               std::any_of(extra_args.begin(), extra_args.end(), has);
    };
    if (!any_pci && !mentions("--no-pci") && !mentions("-a") && !mentions("--allow")) args.push_back("--no-pci");
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    return args;
}

std::string secondary_process_blocker(const std::vector<std::string>& eal_args) {
    // A secondary finds the primary through its runtime files and maps the primary's hugepage files at the same
    // addresses.
    static constexpr std::pair<std::string_view, std::string_view> kBlockers[] = {
        {"--in-memory", "no runtime files for a secondary process to find"},
        {"--no-shconf", "no runtime files for a secondary process to find"},
        {"--no-huge", "memory is not in hugepage files a secondary process could map"},
        {"--huge-unlink", "hugepage files are removed, so a secondary process cannot map them"},
    };
    for (const std::string& arg : eal_args) {
        if (arg == "--huge-unlink=never") continue;
        for (const auto& [flag, reason] : kBlockers)
            if (arg == flag || arg.starts_with(std::string(flag) + "="))
                return std::string(flag) + ": " + std::string(reason);
    }
    return {};
}

EalGuard::EalGuard(const std::vector<std::string>& args) {
    std::vector<char*> argv;
    argv.reserve(args.size() + 1);
    std::vector<std::string> storage = args;  // rte_eal_init may permute argv
    for (std::string& a : storage) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::string joined;
    for (const std::string& a : args) joined += (joined.empty() ? "" : " ") + a;
    spdlog::info("EAL arguments: {}", joined);
    if (rte_eal_init(static_cast<int>(argv.size() - 1), argv.data()) < 0) {
        const int err = rte_errno;
        std::string hint;
        if (err == ENOMEM || err == EACCES || err == EFAULT)
            hint = " (are 2 MiB hugepages reserved and hugetlbfs mounted? deploy/install-deps.sh does both)";
        throw StartupError("rte_eal_init failed: " + std::string(rte_strerror(err)) + hint);
    }
}

EalGuard::~EalGuard() { rte_eal_cleanup(); }

}  // namespace sluice

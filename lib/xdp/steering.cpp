#include "xdp/steering.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <spdlog/spdlog.h>

#include "common/unique_fd.hpp"
#include "dpdk/startup_error.hpp"
#include "xdp/steer_maps.h"

namespace sluice {
namespace {

constexpr const char* kProgramName = "sluice_steer";  // the SEC("xdp") function in steer.bpf.c

steer_key to_key(const SteeringEntry& entry) {
    steer_key key{};
    const bool v4 = entry.family == IpFamily::ipv4;
    key.prefixlen = STEER_KEY_FAMILY_BITS + entry.prefix.length;
    key.family = v4 ? STEER_FAMILY_IPV4 : STEER_FAMILY_IPV6;
    std::memcpy(key.address, entry.prefix.address.bytes, v4 ? 4 : 16);
    return key;
}

// The id of the XDP program attached to ifindex (0: none), and its name.
uint32_t attached_program(int ifindex, std::string& name) {
    uint32_t id = 0;
    if (bpf_xdp_query_id(ifindex, 0, &id) != 0 || id == 0) return 0;
    const UniqueFd program(bpf_prog_get_fd_by_id(id));
    if (!program.valid()) return id;
    bpf_prog_info info{};
    uint32_t length = sizeof info;
    if (bpf_obj_get_info_by_fd(program.get(), &info, &length) == 0) name = info.name;
    return id;
}

int interface_index(const std::string& iface) {
    const unsigned index = if_nametoindex(iface.c_str());
    if (index == 0) throw StartupError("XDP steering: no interface named '" + iface + "' in this network namespace");
    return static_cast<int>(index);
}

}  // namespace

std::string steering_program_path() {
    std::error_code error;
    const std::string self = std::filesystem::read_symlink("/proc/self/exe", error).string();
    const std::string build_root = SLUICE_BUILD_ROOT "/";
    return !error && self.starts_with(build_root) ? SLUICE_XDP_BUILD_PATH : SLUICE_XDP_INSTALL_PATH;
}

std::string af_xdp_interface(const std::string& device) {
    if (!device.starts_with("net_af_xdp")) return {};
    std::size_t at = 0;
    while ((at = device.find(',', at)) != std::string::npos) {
        ++at;
        if (device.compare(at, 6, "iface=") == 0) return device.substr(at + 6, device.find(',', at) - at - 6);
    }
    return {};
}

std::vector<PortSpec> prepare_xdp_ports(const std::vector<PortSpec>& ports) {
    std::vector<PortSpec> prepared = ports;
    for (PortSpec& spec : prepared) {
        const std::string iface = af_xdp_interface(spec.device);
        if (iface.empty() || spec.xdp_steering == XdpSteeringMode::off) continue;
        const int ifindex = interface_index(iface);
        std::string name;
        if (const uint32_t id = attached_program(ifindex, name)) {
            if (name != kProgramName)
                throw StartupError("port '" + spec.name + "': interface " + iface + " already has XDP program '" +
                                   name + "' (id " + std::to_string(id) + "); remove it (ip link set dev " + iface +
                                   " xdp off) or set xdp_steering: off to let the PMD use its own");
            // A sluice killed without its clean stop leaves its program attached, and the PMD attaches only to a
            // free interface.
            if (bpf_xdp_detach(ifindex, 0, nullptr) != 0)
                throw StartupError("port '" + spec.name +
                                   "': cannot remove the XDP program a previous sluice left on " + iface);
            spdlog::warn("port '{}': removed the XDP program (id {}) a previous sluice left on {}", spec.name, id,
                         iface);
        }
        const std::string program = steering_program_path();
        if (!std::filesystem::exists(program))
            throw StartupError("port '" + spec.name + "': sluice's XDP program " + program +
                               " is missing (build or install it)");
        spec.device += ",xdp_prog=" + program;
    }
    return prepared;
}

std::vector<SteeringEntry> steering_entries(const Config& config, const std::string& port,
                                            const std::vector<SteeringEntry>& kernel_addresses) {
    std::vector<SteeringEntry> entries = kernel_addresses;
    const auto add = [&](IpFamily family, const IpAddress& address, uint8_t length) {
        SteeringEntry entry{family, Prefix{address, length}, SteeringVerdict::sluice};
        // An address both sluice's and the kernel's is a config mistake; the data plane wins, as it did before.
        std::erase_if(entries, [&](const SteeringEntry& e) { return e.family == family && e.prefix == entry.prefix; });
        entries.push_back(entry);
    };
    const auto host = [](IpFamily family) { return static_cast<uint8_t>(family == IpFamily::ipv4 ? 32 : 128); };
    // The port's own addresses and its VLANs': the program reads past tags as sluice's parser does.
    for (const PortAddress& own : config.port_addresses)
        if (interface_port_name(own.port) == port) add(own.family, own.address, host(own.family));
    for (const ServiceConfig& service : config.services) add(service.family, service.vip, host(service.family));
    for (std::size_t i = 0; i < config.load_balancer.nat_pool.size(); ++i) {
        const Prefix& pool = config.load_balancer.nat_pool[i];
        add(config.load_balancer.nat_pool_families[i], pool.address, pool.length);
    }
    return entries;
}

std::vector<SteeringEntry> kernel_addresses(const std::string& iface) {
    std::vector<SteeringEntry> entries;
    ifaddrs* list = nullptr;
    if (getifaddrs(&list) != 0) return entries;
    for (const ifaddrs* a = list; a; a = a->ifa_next) {
        if (!a->ifa_addr || iface != a->ifa_name) continue;
        SteeringEntry entry;
        entry.verdict = SteeringVerdict::kernel;
        if (a->ifa_addr->sa_family == AF_INET) {
            entry.family = IpFamily::ipv4;
            entry.prefix = {IpAddress::from_v4(reinterpret_cast<const sockaddr_in*>(a->ifa_addr)->sin_addr.s_addr), 32};
        } else if (a->ifa_addr->sa_family == AF_INET6) {
            entry.family = IpFamily::ipv6;
            entry.prefix = {IpAddress::from_v6(reinterpret_cast<const sockaddr_in6*>(a->ifa_addr)->sin6_addr.s6_addr),
                            128};
        } else {
            continue;
        }
        entries.push_back(entry);
    }
    freeifaddrs(list);
    return entries;
}

XdpSteering::XdpSteering(std::string port, std::string iface) : port_(std::move(port)), iface_(std::move(iface)) {
    std::string name;
    const uint32_t id = attached_program(interface_index(iface_), name);
    if (id == 0 || name != kProgramName)
        throw StartupError("port '" + port_ + "': sluice's XDP program is not attached to " + iface_);
    const UniqueFd program(bpf_prog_get_fd_by_id(id));
    if (!program.valid()) throw StartupError("port '" + port_ + "': cannot open XDP program " + std::to_string(id));
    bpf_prog_info info{};
    uint32_t length = sizeof info;
    std::vector<uint32_t> map_ids(16);
    info.nr_map_ids = static_cast<uint32_t>(map_ids.size());
    info.map_ids = reinterpret_cast<uint64_t>(map_ids.data());
    if (bpf_obj_get_info_by_fd(program.get(), &info, &length) != 0)
        throw StartupError("port '" + port_ + "': cannot read XDP program " + std::to_string(id) + "'s maps");
    for (uint32_t i = 0; i < std::min<uint32_t>(info.nr_map_ids, map_ids.size()); ++i) {
        UniqueFd fd(bpf_map_get_fd_by_id(map_ids[i]));
        if (!fd.valid()) continue;
        bpf_map_info map{};
        uint32_t map_length = sizeof map;
        UniqueFd* slot = nullptr;
        if (bpf_obj_get_info_by_fd(fd.get(), &map, &map_length) == 0) {
            const std::string_view map_name = map.name;
            if (map_name == "steer_prefixes") slot = &prefixes_fd_;
            else if (map_name == "steer_mode") slot = &mode_fd_;
            else if (map_name == "steer_stats") slot = &stats_fd_;
        }
        if (slot && !slot->valid()) *slot = std::move(fd);
    }
    if (!prefixes_fd_.valid() || !mode_fd_.valid() || !stats_fd_.valid())
        throw StartupError("port '" + port_ + "': the XDP program on " + iface_ +
                           " lacks sluice's maps (an old build?)");
}

bool XdpSteering::publish(XdpSteeringMode mode, const std::vector<SteeringEntry>& entries) {
    bool ok = true;
    for (const SteeringEntry& entry : entries) {
        const steer_key key = to_key(entry);
        const uint32_t verdict = static_cast<uint32_t>(entry.verdict);
        if (bpf_map_update_elem(prefixes_fd_.get(), &key, &verdict, BPF_ANY) != 0) {
            spdlog::error("port '{}': XDP steering: cannot add a prefix on {}: {}", port_, iface_,
                          std::strerror(errno));
            ok = false;
        }
    }
    const uint32_t zero = 0;
    const uint32_t mode_value = mode == XdpSteeringMode::services ? STEER_MODE_SERVICES : STEER_MODE_ALL;
    if (bpf_map_update_elem(mode_fd_.get(), &zero, &mode_value, BPF_ANY) != 0) ok = false;
    for (const SteeringEntry& old : published_) {
        if (std::find(entries.begin(), entries.end(), old) != entries.end()) continue;
        const bool replaced = std::any_of(entries.begin(), entries.end(), [&](const SteeringEntry& e) {
            return e.family == old.family && e.prefix == old.prefix;  // same key, new verdict: already updated
        });
        if (replaced) continue;
        const steer_key key = to_key(old);
        bpf_map_delete_elem(prefixes_fd_.get(), &key);
    }
    published_ = entries;
    return ok;
}

SteeringCounters XdpSteering::counters() const {
    SteeringCounters totals;
    const int cpus = libbpf_num_possible_cpus();
    if (cpus <= 0) return totals;
    std::vector<uint64_t> values(static_cast<std::size_t>(cpus));
    for (uint32_t counter : {STEER_COUNT_SLUICE, STEER_COUNT_KERNEL, STEER_COUNT_OTHER}) {
        if (bpf_map_lookup_elem(stats_fd_.get(), &counter, values.data()) != 0) continue;
        uint64_t sum = 0;
        for (uint64_t v : values) sum += v;
        (counter == STEER_COUNT_SLUICE   ? totals.to_sluice
         : counter == STEER_COUNT_KERNEL ? totals.to_kernel
                                         : totals.other) = sum;
    }
    return totals;
}

}  // namespace sluice

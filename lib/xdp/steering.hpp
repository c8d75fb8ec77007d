// sluice's XDP steering on net_af_xdp ports (the program is steer.bpf.c): which frames of a link go to sluice and
// which stay with the kernel. Control thread only: everything here makes syscalls.
//
// Start-up: prepare_xdp_ports() names sluice's program in each such device string (`xdp_prog=`) before the EAL
// probes it, after removing a copy a killed sluice left attached. Once the port runs, XdpSteering finds the
// program's maps through the interface and keeps them equal to what the config and the interface's own kernel
// addresses say (steering_entries()).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/unique_fd.hpp"
#include "config/config.hpp"
#include "dpdk/port.hpp"

namespace sluice {

// The compiled program sluice uses: the build tree's when this binary runs from it, else the installed one.
std::string steering_program_path();

// The `iface=` of a net_af_xdp device string; empty for any other device.
std::string af_xdp_interface(const std::string& device);

// The port specs with sluice's program added to the devices that steer (net_af_xdp, xdp_steering not off). Removes
// a sluice program left attached to such an interface; throws StartupError when another program is attached.
std::vector<PortSpec> prepare_xdp_ports(const std::vector<PortSpec>& ports);

enum class SteeringVerdict : uint32_t { sluice = 1, kernel = 2 };  // steer_maps.h's STEER_SLUICE / STEER_KERNEL

struct SteeringEntry {
    IpFamily family = IpFamily::none;
    Prefix prefix;
    SteeringVerdict verdict = SteeringVerdict::sluice;
    friend bool operator==(const SteeringEntry&, const SteeringEntry&) = default;
};

// What port `port` steers: sluice's own addresses there (its port addresses, every VIP and NAT pool address) to
// sluice, the interface's kernel addresses (given) to the kernel.
std::vector<SteeringEntry> steering_entries(const Config& config, const std::string& port,
                                            const std::vector<SteeringEntry>& kernel_addresses);

// The addresses the kernel holds on iface, as host prefixes with the kernel verdict (getifaddrs).
std::vector<SteeringEntry> kernel_addresses(const std::string& iface);

struct SteeringCounters {
    uint64_t to_sluice = 0;
    uint64_t to_kernel = 0;  // addressed to the kernel (or, in services mode, not to sluice)
    uint64_t other = 0;      // neither IP nor ARP: always the kernel's
};

class XdpSteering {
public:
    // Opens the maps of sluice's program attached to iface. Throws StartupError when it is not attached.
    XdpSteering(std::string port, std::string iface);

    // Makes the program's prefixes exactly `entries` and sets its mode: new entries first, stale ones removed last,
    // so an address in both the old and the new set never falls through. Returns false (and logs) on a map error.
    bool publish(XdpSteeringMode mode, const std::vector<SteeringEntry>& entries);
    SteeringCounters counters() const;  // summed over CPUs
    const std::string& port() const { return port_; }
    const std::string& iface() const { return iface_; }

private:
    std::string port_;
    std::string iface_;
    UniqueFd prefixes_fd_;  // the program's maps; closed when a constructor's check throws, too
    UniqueFd mode_fd_;
    UniqueFd stats_fd_;
    std::vector<SteeringEntry> published_;
};

}  // namespace sluice

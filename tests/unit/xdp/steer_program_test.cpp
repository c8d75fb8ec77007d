// sluice's XDP program (lib/xdp/steer.bpf.c) run by the kernel on crafted frames (BPF_PROG_TEST_RUN): which
// frames it gives sluice and which the kernel, read from its own verdict counters. Needs root (CAP_BPF), as sluice.
// Also the pure parts of lib/xdp/steering.cpp.
#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <catch2/catch.hpp>

#include "xdp/steer_maps.h"
#include "xdp/steering.hpp"

namespace sluice {
namespace {

using Frame = std::vector<uint8_t>;

void put16(Frame& f, uint16_t host) {
    f.push_back(static_cast<uint8_t>(host >> 8));
    f.push_back(static_cast<uint8_t>(host));
}

void put_v4(Frame& f, const char* text) {
    in_addr a{};
    REQUIRE(inet_pton(AF_INET, text, &a) == 1);
    const auto* b = reinterpret_cast<const uint8_t*>(&a);
    f.insert(f.end(), b, b + 4);
}

void put_v6(Frame& f, const char* text) {
    in6_addr a{};
    REQUIRE(inet_pton(AF_INET6, text, &a) == 1);
    f.insert(f.end(), a.s6_addr, a.s6_addr + 16);
}

// Ethernet header, with VLAN tags (TPIDs) before the ethertype.
Frame ethernet(uint16_t ethertype, std::vector<uint16_t> tags = {}) {
    Frame f(12, 0x02);
    for (uint16_t tpid : tags) {
        put16(f, tpid);
        put16(f, 100);  // the tag's TCI; its ethertype follows
    }
    put16(f, ethertype);
    return f;
}

Frame ipv4_to(const char* destination, std::vector<uint16_t> tags = {}) {
    Frame f = ethernet(0x0800, std::move(tags));
    const uint8_t header[] = {0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0};
    f.insert(f.end(), header, header + sizeof header);
    put_v4(f, "192.0.2.1");
    put_v4(f, destination);
    f.resize(f.size() + 8, 0);  // a UDP header
    return f;
}

Frame arp_for(const char* target, uint16_t protocol = 0x0800) {
    Frame f = ethernet(0x0806);
    put16(f, 1);
    put16(f, protocol);
    f.push_back(6);
    f.push_back(4);
    put16(f, 1);  // request
    f.resize(f.size() + 6, 0x02);
    put_v4(f, "192.0.2.1");
    f.resize(f.size() + 6, 0);
    put_v4(f, target);
    return f;
}

Frame ipv6_to(const char* destination, uint8_t next_header = 17) {
    Frame f = ethernet(0x86DD);
    const uint8_t header[] = {0x60, 0, 0, 0, 0, 24, next_header, 255};
    f.insert(f.end(), header, header + sizeof header);
    put_v6(f, "2001:db8:ffff::1");
    put_v6(f, destination);
    return f;
}

// A neighbour solicitation to target, sent (as they are) to its solicited-node multicast group.
Frame solicitation_for(const char* target) {
    Frame f = ipv6_to("ff02::1:ff00:5", 58);
    const uint8_t icmp[] = {135, 0, 0, 0, 0, 0, 0, 0};
    f.insert(f.end(), icmp, icmp + sizeof icmp);
    put_v6(f, target);
    return f;
}

class LoadedProgram {
public:
    LoadedProgram() {
        libbpf_set_print([](libbpf_print_level, const char*, va_list) { return 0; });
        object_ = bpf_object__open_file(SLUICE_XDP_BUILD_PATH, nullptr);
        REQUIRE(object_ != nullptr);
        const int loaded = bpf_object__load(object_);
        INFO("loading " SLUICE_XDP_BUILD_PATH " needs root (CAP_BPF): " << std::strerror(-loaded));
        REQUIRE(loaded == 0);
        program_ = bpf_program__fd(bpf_object__find_program_by_name(object_, "sluice_steer"));
        prefixes_ = bpf_object__find_map_fd_by_name(object_, "steer_prefixes");
        mode_ = bpf_object__find_map_fd_by_name(object_, "steer_mode");
        stats_ = bpf_object__find_map_fd_by_name(object_, "steer_stats");
        REQUIRE((program_ >= 0 && prefixes_ >= 0 && mode_ >= 0 && stats_ >= 0));
    }
    ~LoadedProgram() { bpf_object__close(object_); }

    void add(int family, const char* text, uint8_t length, uint32_t verdict) {
        steer_key key{};
        key.prefixlen = STEER_KEY_FAMILY_BITS + length;
        key.family = family == AF_INET ? STEER_FAMILY_IPV4 : STEER_FAMILY_IPV6;
        REQUIRE(inet_pton(family, text, key.address) == 1);
        REQUIRE(bpf_map_update_elem(prefixes_, &key, &verdict, BPF_ANY) == 0);
    }
    void set_mode(uint32_t mode) {
        const uint32_t zero = 0;
        REQUIRE(bpf_map_update_elem(mode_, &zero, &mode, BPF_ANY) == 0);
    }

    // Runs the program on frame; returns which of its counters moved: "sluice", "kernel" or "other".
    std::string verdict(const Frame& frame) {
        const std::vector<uint64_t> before = counters();
        LIBBPF_OPTS(bpf_test_run_opts, run, .data_in = frame.data(),
                    .data_size_in = static_cast<uint32_t>(frame.size()), .repeat = 1);
        REQUIRE(bpf_prog_test_run_opts(program_, &run) == 0);
        const std::vector<uint64_t> after = counters();
        std::string moved;
        const char* names[] = {"sluice", "kernel", "other"};
        for (int i = 0; i < STEER_COUNTERS; ++i)
            if (after[i] != before[i]) moved += std::string(moved.empty() ? "" : "+") + names[i];
        return moved;
    }

private:
    std::vector<uint64_t> counters() {
        std::vector<uint64_t> totals(STEER_COUNTERS);
        std::vector<uint64_t> per_cpu(static_cast<std::size_t>(libbpf_num_possible_cpus()));
        for (uint32_t c = 0; c < STEER_COUNTERS; ++c) {
            REQUIRE(bpf_map_lookup_elem(stats_, &c, per_cpu.data()) == 0);
            for (uint64_t v : per_cpu) totals[c] += v;
        }
        return totals;
    }

    bpf_object* object_ = nullptr;
    int program_ = -1, prefixes_ = -1, mode_ = -1, stats_ = -1;
};

}  // namespace

TEST_CASE("xdp steering program: the kernel keeps its own addresses, sluice gets the rest", "[xdp]") {
    LoadedProgram p;
    p.add(AF_INET, "10.0.0.5", 32, STEER_KERNEL);    // a management address on the interface
    p.add(AF_INET, "10.0.100.1", 32, STEER_SLUICE);  // a VIP
    p.add(AF_INET6, "2001:db8::5", 128, STEER_KERNEL);
    p.add(AF_INET6, "2001:db8::100", 128, STEER_SLUICE);

    SECTION("mode all (a gateway)") {
        CHECK(p.verdict(ipv4_to("10.0.0.5")) == "kernel");
        CHECK(p.verdict(ipv4_to("10.0.100.1")) == "sluice");
        CHECK(p.verdict(ipv4_to("198.51.100.7")) == "sluice");  // forwarded traffic
        CHECK(p.verdict(ipv4_to("10.0.0.5", {0x8100})) == "kernel");
        CHECK(p.verdict(ipv4_to("10.0.0.5", {0x88A8, 0x8100})) == "kernel");
        CHECK(p.verdict(arp_for("10.0.0.5")) == "kernel");
        CHECK(p.verdict(arp_for("10.0.100.1")) == "sluice");
        CHECK(p.verdict(arp_for("198.51.100.7")) == "sluice");
        CHECK(p.verdict(arp_for("10.0.0.5", 0x86DD)) == "other");  // not IPv4 ARP
        CHECK(p.verdict(ipv6_to("2001:db8::5")) == "kernel");
        CHECK(p.verdict(ipv6_to("2001:db8::100")) == "sluice");
        CHECK(p.verdict(solicitation_for("2001:db8::5")) == "kernel");  // by its target, not its multicast destination
        CHECK(p.verdict(solicitation_for("2001:db8::100")) == "sluice");
        Frame lldp = ethernet(0x88CC);
        lldp.resize(60, 0);
        CHECK(p.verdict(lldp) == "other");
    }
    SECTION("mode services (a host that also balances)") {
        p.set_mode(STEER_MODE_SERVICES);
        CHECK(p.verdict(ipv4_to("10.0.100.1")) == "sluice");
        CHECK(p.verdict(ipv4_to("198.51.100.7")) == "kernel");
        CHECK(p.verdict(ipv4_to("10.0.0.5")) == "kernel");
        CHECK(p.verdict(arp_for("10.0.100.1")) == "sluice");
        CHECK(p.verdict(solicitation_for("2001:db8::100")) == "sluice");
        CHECK(p.verdict(ipv6_to("2001:db8:1::9")) == "kernel");
    }
    SECTION("truncated headers go to sluice, which counts them by reason") {
        Frame cut_ip = ipv4_to("10.0.0.5");
        cut_ip.resize(14 + 12);  // ends inside the IPv4 header
        CHECK(p.verdict(cut_ip) == "sluice");
        Frame cut_tag = ethernet(0x8100);
        cut_tag.resize(16);  // ends inside the VLAN tag
        CHECK(p.verdict(cut_tag) == "sluice");
    }
}

TEST_CASE("xdp steering: entries from the config and the interface", "[xdp]") {
    CHECK(af_xdp_interface("net_af_xdp0,iface=eth1") == "eth1");
    CHECK(af_xdp_interface("net_af_xdp1,start_queue=0,iface=gw-server,queue_count=1") == "gw-server");
    CHECK(af_xdp_interface("net_af_packet0,iface=eth1").empty());

    const std::string yaml = R"(
ports:
  - {name: lan, device: "net_af_xdp0,iface=eth1", addresses: [10.0.0.1/24], vlans: [{id: 50, addresses: [10.0.50.1/24]}]}
  - {name: wan, device: "net_af_xdp1,iface=eth2", addresses: [192.0.2.1/24], vlans: [{id: 60, addresses: [10.0.60.1/24]}]}
lcores:
  - {id: 1, roles: [rx, worker]}
load_balancer: {nat_pool: [10.0.3.100]}
services:
  - {name: web, vip: 10.0.100.1, port: 80, protocol: tcp, mode: nat, backends: [{address: 10.0.2.11}]}
)";
    const ConfigResult loaded = load_config_text(yaml, "steering.yaml");
    std::string errors;
    for (const ConfigError& e : loaded.errors) errors += e.to_string() + "\n";
    INFO(errors);
    REQUIRE(loaded.errors.empty());
    const Config& config = *loaded.config;
    SteeringEntry kernel{IpFamily::ipv4, {IpAddress::from_v4(htonl(0x0a000005)), 32}, SteeringVerdict::kernel};
    SteeringEntry clash{IpFamily::ipv4, {IpAddress::from_v4(htonl(0x0a006401)), 32}, SteeringVerdict::kernel};
    const std::vector<SteeringEntry> entries = steering_entries(config, "lan", {kernel, clash});
    const auto has = [&](uint32_t host_order, uint8_t length, SteeringVerdict verdict) {
        const SteeringEntry e{IpFamily::ipv4, {IpAddress::from_v4(htonl(host_order)), length}, verdict};
        return std::count(entries.begin(), entries.end(), e) == 1;
    };
    CHECK(has(0x0a000005, 32, SteeringVerdict::kernel));
    CHECK(has(0x0a000001, 32, SteeringVerdict::sluice));        // lan's own address
    CHECK(has(0x0a003201, 32, SteeringVerdict::sluice));        // lan's VLAN 50's: the program reads past tags
    CHECK_FALSE(has(0xc0000201, 32, SteeringVerdict::sluice));  // wan's is not lan's
    CHECK_FALSE(has(0x0a003c01, 32, SteeringVerdict::sluice));  // nor wan's VLAN's
    CHECK(has(0x0a000364, 32, SteeringVerdict::sluice));        // the NAT pool
    CHECK(has(0x0a006401, 32, SteeringVerdict::sluice));        // the VIP wins over a kernel address that clashes
    CHECK_FALSE(has(0x0a006401, 32, SteeringVerdict::kernel));
    CHECK(entries.size() == 5);
}

}  // namespace sluice

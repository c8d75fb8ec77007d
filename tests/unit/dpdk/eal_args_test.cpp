#include <catch2/catch.hpp>

#include <algorithm>

#include "dpdk/eal.hpp"

using namespace sluice;

namespace {
bool contains(const std::vector<std::string>& v, const std::string& s) {
    return std::find(v.begin(), v.end(), s) != v.end();
}
}  // namespace

TEST_CASE("eal args: vdevs become --vdev, and no PCI device is probed", "[eal]") {
    std::vector<PortSpec> ports(2);
    ports[0].device = "net_pcap0,rx_pcap=in.pcap,tx_pcap=out.pcap";
    ports[1].device = "net_null0";
    const auto args = build_eal_args("sluice", {"-l", "0-1"}, ports, {"--file-prefix=t1"});
    CHECK(args.front() == "sluice");
    CHECK(contains(args, "--vdev=net_pcap0,rx_pcap=in.pcap,tx_pcap=out.pcap"));
    CHECK(contains(args, "--vdev=net_null0"));
    CHECK(contains(args, "--no-pci"));
    CHECK(args.back() == "--file-prefix=t1");  // the command line comes last, so it wins
}

TEST_CASE("eal args: PCI ports are allowed by address", "[eal]") {
    std::vector<PortSpec> ports(1);
    ports[0].device = "0000:03:00.0";
    const auto args = build_eal_args("sluice", {}, ports, {});
    const auto a = std::find(args.begin(), args.end(), "-a");
    REQUIRE(a != args.end());
    CHECK(*(a + 1) == "0000:03:00.0");
    CHECK_FALSE(contains(args, "--no-pci"));
}

TEST_CASE("eal args: device names", "[eal]") {
    CHECK(is_pci_address("0000:03:00.0"));
    CHECK(is_pci_address("03:00.1"));
    CHECK_FALSE(is_pci_address("net_af_xdp0,iface=veth0"));
    CHECK(device_name("net_af_xdp0,iface=veth0") == "net_af_xdp0");
    CHECK(device_name("net_null0") == "net_null0");
}

TEST_CASE("eal args: the options that keep dpdk-dumpcap from attaching are named", "[eal]") {
    CHECK(secondary_process_blocker({"sluice", "--lcores=0@0,1@1", "--file-prefix=sluice"}).empty());
    CHECK(secondary_process_blocker({"sluice", "--huge-unlink=never"}).empty());
    CHECK(secondary_process_blocker({"sluice", "-l", "0", "--in-memory"}).starts_with("--in-memory: "));
    CHECK(secondary_process_blocker({"sluice", "--no-shconf"}).starts_with("--no-shconf: "));
    CHECK(secondary_process_blocker({"sluice", "--no-huge", "-m", "256"}).starts_with("--no-huge: "));
    CHECK(secondary_process_blocker({"sluice", "--huge-unlink"}).starts_with("--huge-unlink: "));
    CHECK(secondary_process_blocker({"sluice", "--huge-unlink=always"}).starts_with("--huge-unlink: "));
}

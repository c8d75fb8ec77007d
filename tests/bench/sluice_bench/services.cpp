// The snapshots of the sections: rules, forwarding and the load balancer's three services.
#include <arpa/inet.h>
#include <netinet/in.h>

#include <exception>
#include <iterator>
#include <string>

#include <rte_lcore.h>

#include "control/snapshot_builder.hpp"
#include "services.hpp"

namespace sluice::bench {

IpAddress v4(uint32_t host) { return IpAddress::from_v4(htonl(host)); }

void add_services(Config& config) {
    LoadBalancerConfig& lc = config.load_balancer;
    for (uint32_t i = 0; i < kLbPoolV4; ++i) {
        lc.nat_pool.push_back(Prefix{v4(0x0a010064 + i), 32});  // 10.1.0.100 + i
        lc.nat_pool_families.push_back(IpFamily::ipv4);
    }
    uint8_t bytes[16];
    inet_pton(AF_INET6, "2001:db8:1::100", bytes);
    lc.nat_pool.push_back(Prefix{IpAddress::from_v6(bytes), 128});
    lc.nat_pool_families.push_back(IpFamily::ipv6);
    lc.tunnel_source_v4 = v4(0x0a010001);  // 10.1.0.1
    const std::pair<LbMode, uint32_t> services[] = {
        {LbMode::nat, kVipNat}, {LbMode::dsr, kVipDsr}, {LbMode::tunnel, kVipTunnel}};
    for (uint32_t s = 0; s < std::size(services); ++s) {
        ServiceConfig sc;
        sc.name = std::string("bench-") + lb_mode_name(services[s].first);
        sc.vip = v4(services[s].second);
        sc.family = IpFamily::ipv4;
        sc.port = kVipPort;
        sc.protocol = IPPROTO_TCP;
        sc.mode = services[s].first;
        sc.table_size = kLbMaglevSize;
        for (uint32_t b = 0; b < kLbBackends; ++b) {
            BackendConfig bc;
            bc.address = v4(0x0a010000 + ((s + 1) << 8) + 11 + b);  // 10.1.<service+1>.11 and up
            bc.family = IpFamily::ipv4;
            bc.port = services[s].first == LbMode::nat ? kNatBackendPort : 0;  // dsr/tunnel keep the VIP's port
            bc.has_mac = services[s].first == LbMode::dsr;  // dsr needs one; the others use the forward entry's
            bc.mac = rte_ether_addr{{0x02, 0, 0, 0, static_cast<uint8_t>(s + 1), static_cast<uint8_t>(b)}};
            sc.backends.push_back(bc);
        }
        config.services.push_back(sc);
    }
}

std::unique_ptr<Snapshot> make_snapshot(const Dpdk& d, const std::vector<RuleSpec>& rules, bool services,
                                        bool firewall) {
    Config config;
    config.forward.push_back(ForwardConfig{"null", "null", rte_ether_addr{{0x02, 0, 0, 0, 0, 0x09}}});
    config.firewall.enabled = firewall;
    config.firewall.default_action = RuleAction::allow;
    for (std::size_t i = 0; i < rules.size(); ++i) config.firewall.rules.push_back(to_rule_config(rules[i], i));
    if (services) add_services(config);
    const std::vector<PortIdentity> ports{PortIdentity{"null", d.port, d.port_mac}};
    try {
        return build_snapshot(config, ports, 1, static_cast<int>(rte_socket_id()));
    } catch (const std::exception& e) {
        fail(std::string("build_snapshot: ") + e.what());
    }
}

}  // namespace sluice::bench

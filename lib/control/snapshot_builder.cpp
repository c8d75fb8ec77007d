#include "control/snapshot_builder.hpp"

#include <algorithm>
#include <atomic>
#include <stdexcept>

#include <rte_cycles.h>
#include <rte_errno.h>
#include <rte_hash.h>

#include "common/ip_proto.hpp"
#include "control/blocklist_builder.hpp"
#include "lb/maglev.hpp"

namespace sluice {
namespace {

// rte_acl and rte_hash name their tables; every snapshot gets fresh names.
std::atomic<uint64_t> g_generation{0};

// The rule as rte_acl sees it for one family: lists of that family's prefixes, port names resolved to ids.
Rule compile_rule(const FirewallRuleConfig& config, IpFamily family, const std::vector<PortIdentity>& ports) {
    Rule rule;
    rule.name = config.name;
    rule.family = family;
    for (const std::string& port : config.in_ports) rule.in_ports.push_back(interface_named(ports, port));
    const auto pick = [&](const AddressMatch& m) {
        return m.any ? std::vector<Prefix>{} : (family == IpFamily::ipv4 ? m.v4 : m.v6);
    };
    rule.sources = pick(config.source);
    rule.destinations = pick(config.destination);
    rule.protocol = config.protocol;
    rule.source_ports = config.source_ports;
    rule.destination_ports = config.destination_ports;
    rule.icmp_types = config.icmp_types;
    rule.icmp_codes = config.icmp_codes;
    rule.tcp_flags = config.tcp_flags;
    rule.action = config.action;
    return rule;
}

bool matches_family(const FirewallRuleConfig& rule, IpFamily family) {
    if (rule.protocol == kIpProtoIcmp && family == IpFamily::ipv6) return false;
    if (rule.protocol == kIpProtoIcmpv6 && family == IpFamily::ipv4) return false;
    const auto allows = [&](const AddressMatch& m) {
        return m.any || !(family == IpFamily::ipv4 ? m.v4 : m.v6).empty();
    };
    return allows(rule.source) && allows(rule.destination);
}

// The early-drop sets' tables: the running ones (previous) when the prefixes are the same, else built anew. A
// reload compares the sorted lists, so a reordered file keeps the built tables.
void build_blocklists(const FirewallConfig& config, FirewallTables& fw, int socket,
                      const std::shared_ptr<const Blocklist>& previous) {
    std::vector<Prefix> v4, v6;
    for (const PrefixSetConfig& set : config.prefix_sets) {
        if (!set.early_drop) continue;
        v4.insert(v4.end(), set.v4.begin(), set.v4.end());
        v6.insert(v6.end(), set.v6.begin(), set.v6.end());
    }
    if (v4.empty() && v6.empty()) return;
    sort_distinct(v4);  // one line twice, or in two sets, is one prefix
    sort_distinct(v6);
    fw.blocklist_prefixes = v4.size() + v6.size();
    fw.blocklist = build_blocklist(std::move(v4), std::move(v6), socket, previous);
    fw.blocklist_v4 = fw.blocklist->v4.get();
    fw.blocklist_v6 = fw.blocklist->v6.get();
}

void build_rate_limits(const FirewallConfig& config, FirewallTables& fw, std::size_t lcore_count,
                       std::size_t worker_count, int socket, uint64_t generation) {
    const double tsc_hz = static_cast<double>(rte_get_tsc_hz());
    const double workers = static_cast<double>(std::max<std::size_t>(worker_count, 1));
    auto state = std::make_unique<RateLimiterState>();
    for (const FirewallRuleConfig& rule : config.rules) {
        RateLimit limit;
        state->index.push_back(0);
        if (rule.rate_limit.rate) {
            limit.tokens_per_tsc = rule.rate_limit.rate / workers / tsc_hz;
            limit.burst = std::max(1.0, rule.rate_limit.burst / workers);
            limit.per_source = rule.rate_limit.per_source;
            state->index.back() =
                static_cast<uint32_t>(limit.per_source ? state->source_limiters_per_slot++ : state->buckets_per_slot++);
        }
        fw.limits.push_back(limit);
    }
    if (state->buckets_per_slot == 0 && state->source_limiters_per_slot == 0) return;
    // Buckets start full; so do the sources' (SourceLimiter).
    state->buckets.resize(state->buckets_per_slot * lcore_count);
    for (std::size_t slot = 0; slot < lcore_count; ++slot)
        for (uint32_t id = 0; id < fw.limits.size(); ++id) {
            const RateLimit& limit = fw.limits[id];
            if (limit.tokens_per_tsc == 0) continue;
            if (!limit.per_source) {
                state->buckets[slot * state->buckets_per_slot + state->index[id]] = TokenBucket{limit.burst, 0};
                continue;
            }
            const std::string name = "sl_src" + std::to_string(generation) + "_" + std::to_string(slot) + "_" +
                                     std::to_string(state->index[id]);
            state->source_limiters.push_back(std::make_unique<SourceLimiter>(name, socket, limit));
        }
    fw.limiter = std::move(state);
}

}  // namespace

std::shared_ptr<const LbTables> build_lb_tables(const Config& config, BackendRegistry& registry,
                                                const BackendHealth& healthy, int socket,
                                                const NeighbourLookup& neighbours,
                                                const std::vector<PortIdentity>* ports) {
    auto lb = std::make_shared<LbTables>();
    const LoadBalancerConfig& lc = config.load_balancer;
    for (std::size_t i = 0; i < lc.nat_pool.size(); ++i)
        lb->nat_pool.add(lc.nat_pool[i].address, lc.nat_pool_families[i]);
    if (lc.tunnel_source_v4) lb->tunnel_source_v4 = *lc.tunnel_source_v4;
    if (lc.tunnel_source_v6) lb->tunnel_source_v6 = *lc.tunnel_source_v6;

    for (LbBackend& b : registry.known) {
        b.removed = true;
        b.service = UINT32_MAX;
    }
    for (std::size_t s = 0; s < config.services.size(); ++s) {
        const ServiceConfig& sc = config.services[s];
        LbService service;
        service.name = sc.name;
        service.vip.address = sc.vip;
        service.vip.port_be = rte_cpu_to_be_16(sc.port);
        service.vip.proto = sc.protocol;
        service.vip.family = sc.family;
        service.mode = sc.mode;
        service.syn_proxy = sc.syn_proxy;
        service.tcp_window_check = sc.tcp_window_check;
        service.table_size = sc.table_size;
        std::vector<MaglevBackend> maglev;
        for (const BackendConfig& bc : sc.backends) {
            const std::string key = sc.name + "/" + bc.name();
            const auto [it, added] = registry.ids.try_emplace(key, static_cast<uint32_t>(registry.known.size()));
            if (added) {
                if (registry.known.size() >= kMaxBackends) {
                    registry.ids.erase(it);
                    throw std::runtime_error("more than " + std::to_string(kMaxBackends) +
                                             " backends known since start: restart sluice to reuse backend ids");
                }
                registry.known.emplace_back();
            }
            const uint32_t id = it->second;
            LbBackend& b = registry.known[id];
            b.address = bc.address;
            b.family = bc.family;
            b.has_mac = bc.has_mac;
            b.mac = bc.mac;
            b.removed = false;
            b.drop_when_removed = sc.drop_removed;
            b.mode = sc.mode;
            b.port_be = rte_cpu_to_be_16(bc.port);
            b.service = static_cast<uint32_t>(s);
            const bool up = !healthy || healthy(id);
            service.backend_ids.push_back(id);
            service.backend_up.push_back(up ? 1 : 0);
            maglev.push_back(MaglevBackend{bc.name(), up ? bc.weight : 0});
        }
        service.maglev = build_maglev_table(maglev, sc.table_size);
        lb->services.push_back(std::move(service));
    }
    // A removed backend keeps its last service's drop/keep choice (its service may be gone too).
    lb->backends = registry.known;
    // Backends on one of sluice's links with no mac in the config: the MAC ARP/ND found, or none yet.
    for (LbBackend& b : lb->backends) {
        if (b.has_mac || b.removed) continue;
        const std::string link = interface_on_link(config, b.family, b.address);
        if (link.empty()) continue;
        const auto mac =
            neighbours && ports ? neighbours(interface_named(*ports, link), b.family, b.address) : std::nullopt;
        b.has_mac = mac.has_value();
        b.awaiting_neighbour = !b.has_mac;
        if (mac) b.mac = *mac;
    }

    if (!lb->services.empty()) {
        static std::atomic<uint64_t> generation{0};
        const std::string name = "sl_vip_" + std::to_string(generation.fetch_add(1));
        rte_hash_parameters params{};
        params.name = name.c_str();
        params.entries =
            static_cast<uint32_t>(std::max<std::size_t>(lb->services.size() * 4, 16));  // services and addresses
        params.key_len = sizeof(VipKey);
        params.socket_id = socket;
        lb->vips = rte_hash_create(&params);  // freed by ~LbTables
        if (!lb->vips) throw std::runtime_error("VIP table: rte_hash_create: " + std::string(rte_strerror(rte_errno)));
        for (std::size_t s = 0; s < lb->services.size(); ++s) {
            const VipKey address_alone{.address = lb->services[s].vip.address, .family = lb->services[s].vip.family};
            if (rte_hash_add_key_data(lb->vips, &lb->services[s].vip, reinterpret_cast<void*>(s)) < 0 ||
                rte_hash_add_key_data(lb->vips, &address_alone,
                                      reinterpret_cast<void*>(intptr_t{LbTables::kVipUnserved})) < 0)
                throw std::runtime_error("VIP table: cannot add service '" + lb->services[s].name + "'");
        }
    }
    return lb;
}

namespace {

// Ports, forwarding entries (next hops by MAC, or resolved by ARP/ND) and the addresses sluice answers for.
void fill_forwarding(Snapshot& snapshot, const Config& config, const std::vector<PortIdentity>& ports,
                     const NeighbourLookup& neighbours) {
    for (const PortIdentity& p : ports) {
        snapshot.port_mac[p.id] = p.mac;
        const PortSpec* spec = config.find_port(p.name);
        snapshot.port_mtu[p.id] = spec ? spec->mtu : 1500;
    }
    for (const VlanConfig& v : config.vlans)
        snapshot.vlans.add(interface_port(interface_named(ports, v.interface())), v.id);
    for (const ForwardConfig& f : config.forward) {
        const PortIdentity& in = port_named(ports, f.from);
        const uint16_t out = interface_named(ports, f.to);
        ForwardEntry entry = forward_entry(out, f.next_hop_mac, snapshot.port_mac);
        if (f.resolve_next_hop) {
            const auto mac = neighbours ? neighbours(out, f.next_hop_family, f.next_hop) : std::nullopt;
            entry.awaiting_neighbour = !mac;
            if (mac) entry.dst_mac = *mac;
        }
        snapshot.forward_by_in_port[in.id] = entry;
    }
    for (const PortAddress& a : config.port_addresses)
        snapshot.port_addresses.push_back({a.address, a.family, interface_named(ports, a.port)});
    const auto add_service_address = [&](const IpAddress& address, IpFamily family) {
        auto& listed = snapshot.service_addresses;
        if (std::none_of(listed.begin(), listed.end(),
                         [&](const OwnedAddress& a) { return a.family == family && a.address == address; }))
            listed.push_back({address, family, OwnedAddress::kAnyPort});  // a VIP of several services: listed once
    };
    for (const ServiceConfig& s : config.services) add_service_address(s.vip, s.family);
    for (std::size_t i = 0; i < config.load_balancer.nat_pool.size(); ++i)
        add_service_address(config.load_balancer.nat_pool[i].address, config.load_balancer.nat_pool_families[i]);
}

// sluice's own addresses as sources no packet from the network may carry: the ports', the NAT pool's, and the VIPs
// whose services are all nat. dsr and tunnel backends answer from their VIP, and their answers may be routed
// through sluice.
void fill_martians(MartianFilter& martians, const Config& config) {
    martians.set_checked(config.dataplane.drop_martians_v4, config.dataplane.drop_martians_v6);
    for (const PortAddress& a : config.port_addresses) martians.add_port_address(a.family, a.address, a.length);
    for (std::size_t i = 0; i < config.load_balancer.nat_pool.size(); ++i)
        martians.add_service_address(config.load_balancer.nat_pool_families[i],
                                     config.load_balancer.nat_pool[i].address);
    for (const ServiceConfig& s : config.services) {
        const bool answered_by_backends = std::any_of(config.services.begin(), config.services.end(), [&](auto& o) {
            return o.family == s.family && o.vip == s.vip && o.mode != LbMode::nat;
        });
        if (!answered_by_backends) martians.add_service_address(s.family, s.vip);
    }
    martians.seal();
}

// A dataplane rate that each worker applies on its own (0: no cap); a burst of 0 is one second's worth.
RateLimit per_worker_limit(uint32_t per_second, uint32_t burst) {
    if (per_second == 0) return {};
    return {.tokens_per_tsc = per_second / static_cast<double>(rte_get_tsc_hz()),
            .burst = double(burst ? burst : per_second)};
}

}  // namespace

std::unique_ptr<Snapshot> rebuild_live(const Snapshot& base, const Config& config,
                                       const std::vector<PortIdentity>& ports, int socket, const LiveState& live) {
    auto snapshot = std::make_unique<Snapshot>();
    fill_forwarding(*snapshot, config, ports, live.neighbours);
    snapshot->routes = resolve_routes(base.routes.fib, snapshot->port_mac, live.neighbours,  // same config, same FIB
                                      live.hosts ? live.hosts() : std::vector<ConnectedHost>{}, socket);
    fill_martians(snapshot->martians, config);
    BackendRegistry local;
    snapshot->lb =
        build_lb_tables(config, live.backends ? *live.backends : local, live.healthy, socket, live.neighbours, &ports);
    snapshot->firewall = base.firewall;
    snapshot->new_connections = base.new_connections;
    snapshot->error_replies = base.error_replies;
    return snapshot;
}

std::unique_ptr<Snapshot> with_routes(const Snapshot& base, std::shared_ptr<const RouteFib> fib, const Config& config,
                                      const std::vector<PortIdentity>& ports, int socket, const LiveState& live) {
    auto snapshot = std::make_unique<Snapshot>();
    fill_forwarding(*snapshot, config, ports, live.neighbours);
    snapshot->routes = resolve_routes(std::move(fib), snapshot->port_mac, live.neighbours,
                                      live.hosts ? live.hosts() : std::vector<ConnectedHost>{}, socket);
    fill_martians(snapshot->martians, config);
    snapshot->lb = base.lb;
    snapshot->firewall = base.firewall;
    snapshot->new_connections = base.new_connections;
    snapshot->error_replies = base.error_replies;
    return snapshot;
}

namespace {

// A snapshot without its routes.
std::unique_ptr<Snapshot> build_all_but_routes(const Config& config, const std::vector<PortIdentity>& ports,
                                               std::size_t lcore_count, int socket, std::size_t worker_count,
                                               const LiveState& live) {
    auto snapshot = std::make_unique<Snapshot>();
    fill_forwarding(*snapshot, config, ports, live.neighbours);
    fill_martians(snapshot->martians, config);
    BackendRegistry local;
    snapshot->lb =
        build_lb_tables(config, live.backends ? *live.backends : local, live.healthy, socket, live.neighbours, &ports);
    StableRuleIds* stable_ids = live.rule_ids;
    // Per worker: not divided by the worker count.
    snapshot->new_connections =
        per_worker_limit(config.dataplane.max_new_connections_per_second, config.dataplane.new_connection_burst);
    snapshot->error_replies =
        per_worker_limit(config.dataplane.max_error_replies_per_second, config.dataplane.error_reply_burst);

    const FirewallConfig& fc = config.firewall;
    FirewallTables& fw = *snapshot->firewall;
    fw.enabled = fc.enabled;
    if (!fc.enabled) return snapshot;
    fw.loose_pickup = fc.loose_pickup;
    fw.tcp_window_check = fc.tcp_window_check;
    fw.log_default = fc.log_default;
    fw.log_tokens_per_tsc = fc.log_rate / static_cast<double>(rte_get_tsc_hz());
    fw.default_action = fc.default_action;
    const uint64_t generation = g_generation.fetch_add(1);
    // Sized exactly: the classifiers keep them (grown by doubling, 100k rules would hold room for 131k).
    const auto of_family = [&](IpFamily family) {
        return static_cast<std::size_t>(std::count_if(
            fc.rules.begin(), fc.rules.end(), [&](const FirewallRuleConfig& r) { return matches_family(r, family); }));
    };
    std::vector<Rule> v4, v6;
    v4.reserve(of_family(IpFamily::ipv4));
    v6.reserve(of_family(IpFamily::ipv6));
    for (uint32_t id = 0; id < fc.rules.size(); ++id) {
        const FirewallRuleConfig& rule = fc.rules[id];
        fw.actions.push_back(rule.action);
        fw.log_rule.push_back(rule.log ? 1 : 0);
        fw.window_checks.push_back(rule.tcp_window_check);
        fw.rule_names.push_back(rule.name);
        if (stable_ids) {
            const auto [it, added] = stable_ids->try_emplace(rule.name, static_cast<uint32_t>(stable_ids->size()));
            fw.stable_ids.push_back(it->second);
        } else {
            fw.stable_ids.push_back(id);
        }
        if (matches_family(rule, IpFamily::ipv4)) {
            v4.push_back(compile_rule(rule, IpFamily::ipv4, ports));
            fw.v4_rule_ids.push_back(id);
        }
        if (matches_family(rule, IpFamily::ipv6)) {
            v6.push_back(compile_rule(rule, IpFamily::ipv6, ports));
            fw.v6_rule_ids.push_back(id);
        }
    }
    // The running classifier when its rules match as they did (a reload of services or prefix sets only), else a
    // new one that shares the running one's parts whose rules did not change: an rte_acl build of 10k rules takes
    // 0.4-0.7 s of the control thread here.
    const auto classifier = [&](IpFamily family, std::vector<Rule>& rules,
                                const std::shared_ptr<const AclClassifier>& running,
                                const char* name) -> std::shared_ptr<const AclClassifier> {
        if (rules.empty()) return nullptr;
        if (running && running->built_from(rules, fc.acl_method)) return running;
        return std::make_shared<AclClassifier>(family, std::move(rules), socket, name + std::to_string(generation),
                                               fc.acl_method, running ? running->classify_method() : 0, running.get());
    };
    try {
        fw.acl_v4 = classifier(IpFamily::ipv4, v4, live.acl_v4, "sl_acl4_");
        fw.acl_v6 = classifier(IpFamily::ipv6, v6, live.acl_v6, "sl_acl6_");
    } catch (const AclMethodUnavailable& e) {
        throw std::runtime_error(std::string("firewall acl_method: ") + e.what());  // the key that pinned it
    }
    build_blocklists(fc, fw, socket, live.blocklist);
    build_rate_limits(fc, fw, lcore_count, worker_count, socket, generation);
    fw.hits = std::make_unique<RuleHits>();
    fw.hits->rule_count = fc.rules.size();
    fw.hits->hits.assign(lcore_count * (fc.rules.size() + 1), 0);
    return snapshot;
}

}  // namespace

std::unique_ptr<Snapshot> build_snapshot(const Config& config, const std::vector<PortIdentity>& ports,
                                         std::size_t lcore_count, int socket, std::size_t worker_count,
                                         const LiveState& live) {
    auto snapshot = build_all_but_routes(config, ports, lcore_count, socket, worker_count, live);
    // Last: once the writer took the config's routes, nothing may refuse the snapshot.
    snapshot->routes =
        resolve_routes(build_route_fib(config, ports, socket, live.routes), snapshot->port_mac, live.neighbours,
                       live.hosts ? live.hosts() : std::vector<ConnectedHost>{}, socket);
    return snapshot;
}

}  // namespace sluice

// sluice's configuration: plain structs decoded from YAML, every key checked (unknown keys are errors), every error
// reported as FILE:LINE:COL with what is wrong. Loading is pure (no EAL); control thread only.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <rte_ether.h>

#include "classify/rule.hpp"
#include "conntrack/conn_table.hpp"
#include "dpdk/port.hpp"
#include "lb/lb_tables.hpp"

namespace sluice {

struct ConfigError {
    std::string file;
    int line = 0;  // 1-based; 0 when the error concerns the whole file
    int column = 0;
    std::string message;

    std::string to_string() const;
};

struct RxQueueName {
    std::string port;
    uint16_t queue = 0;
    friend bool operator==(const RxQueueName&, const RxQueueName&) = default;
};

struct LcoreConfig {
    unsigned id = 0;
    bool rx = false;
    bool worker = false;
    std::vector<RxQueueName> rx_queues;  // empty on every rx lcore: queues are spread round-robin
    friend bool operator==(const LcoreConfig&, const LcoreConfig&) = default;
};

struct ForwardConfig {
    std::string from;  // a port: its frames on every VLAN
    std::string to;    // an interface's canonical name
    rte_ether_addr next_hop_mac{};
    bool resolve_next_hop = false;  // next_hop given: its MAC comes from ARP/ND on the `to` port
    IpAddress next_hop{};
    IpFamily next_hop_family = IpFamily::none;
};

// ports[].vlans[]: an 802.1Q sub-interface of a port, an L3 interface of its own: its addresses, neighbours, routes
// and rules (in_ports) are its own; frames tagged with its id on the port are its, and it sends tagged.
struct VlanConfig {
    std::string port;
    uint16_t id = 0;   // 1..4094
    std::string name;  // its own name (ports[].vlans[].name), empty when none; "PORT.ID" names it always
    std::string interface() const { return port + "." + std::to_string(id); }
    friend bool operator==(const VlanConfig&, const VlanConfig&) = default;
};

// The port an interface's canonical name (Config::canonical_interface) belongs to: "trunk" of "trunk.100".
std::string interface_port_name(const std::string& interface);

// One of sluice's own addresses on an interface: answered in ARP/ND, the source of sluice's own solicitations there,
// and its prefix says which next hops and backends are on that link.
struct PortAddress {
    std::string port;  // the interface's canonical name: a port's, or "PORT.ID" of one of its VLANs
    IpAddress address{};
    IpFamily family = IpFamily::none;
    uint8_t length = 0;
    friend bool operator==(const PortAddress&, const PortAddress&) = default;
};

// What a route does with the packets it matches: sends them to its next hops, or drops them (blackhole), or drops
// them and tells their sender (reject: ICMP/ICMPv6 destination unreachable, administratively prohibited).
enum class RouteType : uint8_t { via, blackhole, reject };

struct RouteNextHop {
    IpAddress address{};
    std::string port;     // the interface whose link it is on (given, or the one whose addresses hold it)
    uint32_t weight = 1;  // its share of the route's flows (ECMP)
    friend bool operator==(const RouteNextHop&, const RouteNextHop&) = default;
};

// routes[]: a static route. Next hops are on one of sluice's links and resolved with ARP/ND.
struct RouteConfig {
    Prefix prefix;
    IpFamily family = IpFamily::none;
    RouteType type = RouteType::via;
    std::vector<RouteNextHop> next_hops;  // type via only
    friend bool operator==(const RouteConfig&, const RouteConfig&) = default;
};

// Next hops of one route at most (ECMP group size).
inline constexpr std::size_t kMaxRouteNextHops = 16;

struct LogConfig {
    std::string level = "info";
    std::string file;  // empty: stderr (journald under systemd)
};

struct DataplaneConfig {
    uint32_t ring_size = 4096;
    uint32_t idle_sleep_us = 0;
    // New connections each worker may open per second, whatever rule allowed them (0: no cap), and how many it may
    // open at once after a quiet spell (default: one second's worth). Reloadable: they travel in the snapshot.
    uint32_t max_new_connections_per_second = 0;
    uint32_t new_connection_burst = 0;
    // Error replies each worker may send per second (reject rules' RSTs and ICMP unreachables, ICMP too-big and
    // time-exceeded errors; 0: no cap), and how many at once (0: one second's worth). Reloadable, as above.
    uint32_t max_error_replies_per_second = 1000;
    uint32_t error_reply_burst = 0;
    // Martian packets of each family dropped on the RX lcores (martians: {ipv4: drop|off, ipv6: drop|off}).
    // Reloadable, as above.
    bool drop_martians_v4 = true;
    bool drop_martians_v6 = true;
    friend bool operator==(const DataplaneConfig&, const DataplaneConfig&) = default;
};

struct MetricsConfig {
    std::string listen = "127.0.0.1:9469";  // empty: no exporter
};

// Addresses a rule matches, with prefix sets already expanded. any: no address was given.
struct AddressMatch {
    bool any = true;
    std::vector<Prefix> v4;
    std::vector<Prefix> v6;
};

struct PrefixSetConfig {
    std::string name;
    std::string file;         // where the prefixes came from, when not inline
    bool early_drop = false;  // sources in this set are dropped on the RX lcores, before any ring or rule
    std::vector<Prefix> v4;
    std::vector<Prefix> v6;
};

// New connections a rule admits per second (token bucket); rate 0: unlimited.
struct RateLimitConfig {
    uint32_t rate = 0;
    uint32_t burst = 0;
    bool per_source = false;  // one bucket per source address instead of one for the rule
};

struct FirewallRuleConfig {
    std::string name;
    std::vector<std::string> in_ports;  // interfaces' canonical names; empty: any
    AddressMatch source;
    AddressMatch destination;
    uint16_t protocol = kAnyProtocol;
    std::vector<PortRange> source_ports;
    std::vector<PortRange> destination_ports;
    std::vector<IcmpRange> icmp_types;  // protocol icmp or icmpv6; empty: any
    std::vector<IcmpRange> icmp_codes;
    TcpFlagsMatch tcp_flags;  // protocol tcp; mask 0: any
    RuleAction action = RuleAction::allow;
    RateLimitConfig rate_limit;
    bool log = false;  // log the new connections this rule decides (sampled: firewall.log_rate)
    std::optional<TcpWindowCheck> tcp_window_check;  // its TCP connections' sequence check; unset: the service's
};

struct FirewallConfig {
    bool enabled = false;  // a firewall section is present: connections are tracked and rules apply
    RuleAction default_action = RuleAction::allow;  // for new connections no rule matches (allow or deny)
    bool loose_pickup = false;                      // TCP without SYN may open a connection (after a restart)
    TcpWindowCheck tcp_window_check = TcpWindowCheck::strict;  // for connections whose rule and service say nothing
    bool log_default = false;                                  // log the new connections the default action decides
    uint32_t log_rate = 10;         // decision log lines per second and worker at most (a flood cannot flood the log)
    uint32_t table_size = 1000000;  // tracked connections per worker (not a power of two: see conn_table.hpp)
    uint32_t ipv6_table_size = 0;   // of them at most this many IPv6 ones; 0: ConnTable::default_ipv6_capacity
    int acl_method = 0;  // the rte_acl_classify_alg to classify with; 0 ("auto"): AclClassifier times them all
    ConnTimeouts timeouts;
    std::vector<PrefixSetConfig> prefix_sets;
    std::vector<FirewallRuleConfig> rules;  // firewall.rules, then the rules of each firewall.include file in order
    std::vector<std::string> include;       // the files as given
};

enum class HealthCheckType : uint8_t { none, tcp, http };

// How the control thread checks a backend (through the kernel: see docs/architecture.md, "exception path").
struct HealthCheckConfig {
    HealthCheckType type = HealthCheckType::none;
    uint16_t port = 0;        // 0: the backend's port (or the service's)
    std::string path = "/";   // http
    int expect_status = 200;  // http
    uint32_t interval_ms = 2000;
    uint32_t timeout_ms = 1000;
    uint32_t rise = 2;
    uint32_t fall = 3;
    friend bool operator==(const HealthCheckConfig&, const HealthCheckConfig&) = default;
};

struct BackendConfig {
    IpAddress address{};
    IpFamily family = IpFamily::none;
    uint16_t port = 0;    // 0: the packet's destination port is kept
    uint32_t weight = 1;  // 0: draining (no new connections)
    bool has_mac = false;
    rte_ether_addr mac{};      // next-hop MAC towards it; required by dsr
    HealthCheckConfig health;  // the service's unless the backend has its own

    std::string name() const;  // "10.1.0.11:8080", "[2001:db8::11]:80", "10.1.0.12" (no port): Maglev's input
};

struct ServiceConfig {
    std::string name;
    IpAddress vip{};
    IpFamily family = IpFamily::none;
    uint16_t port = 0;     // 0: any port
    uint8_t protocol = 6;  // IPPROTO_TCP or IPPROTO_UDP
    LbMode mode = LbMode::nat;
    uint32_t table_size = 65537;
    bool drop_removed = false;  // removed_backends: drop (else keep until they end)
    uint32_t min_healthy = 1;   // bgp: the VIP is announced only while this many backends are usable
    bool syn_proxy = false;     // SYN cookies: no state before the client completes the handshake (nat, tcp only)
    std::optional<TcpWindowCheck> tcp_window_check;  // unset: the firewall's default (strict)
    std::vector<BackendConfig> backends;
};

struct LoadBalancerConfig {
    std::vector<Prefix> nat_pool;  // host addresses (length 32 / 128), in config order
    std::vector<IpFamily> nat_pool_families;
    uint16_t nat_port_first = 1024;
    uint16_t nat_port_last = 65535;
    std::optional<IpAddress> tunnel_source_v4;
    std::optional<IpAddress> tunnel_source_v6;
};

// Announcing the VIPs over BGP through a local BIRD (lib/control/bird_announcer.hpp); absent section: off.
struct BgpConfig {
    bool enabled = false;
    std::string bird_socket = "/run/bird/bird.ctl";
    std::string include_file = "/run/bird/sluice-vips.conf";
    uint32_t drain_seconds = 10;  // sluicectl drain / SIGTERM: VIPs withdrawn, data plane kept this long, then stop
    bool drain_on_sigterm = true;
    uint32_t timeout_ms = 2000;  // one request to BIRD (connect, configure, answer) at most
    friend bool operator==(const BgpConfig&, const BgpConfig&) = default;
};

// routing: what sluice takes from the host's routing engine (docs/config.md, "routing").
struct RoutingConfig {
    uint32_t kernel_table = 0;  // a kernel routing table mirrored over netlink (routes BIRD or FRR install); 0: none
    // The netlink socket's receive buffer: route notifications that arrive while the control thread is busy wait
    // here; beyond it they are lost and the table is read whole again (a resync).
    uint32_t kernel_socket_buffer_kib = 8192;
    friend bool operator==(const RoutingConfig&, const RoutingConfig&) = default;
};

// neighbours: how sluice's ARP/ND resolver keeps next hops (docs/config.md, "Neighbours"); Linux's neigh sysctls
// base_reachable_time_ms, retrans_time_ms and ucast_solicit by other names.
struct NeighboursConfig {
    uint32_t reachable_ms = 30000;  // an entry confirmed this long ago is probed again
    uint32_t retransmit_ms = 1000;  // between two solicitations or probes of one address
    uint32_t probes = 3;            // unanswered probes before a resolved address is forgotten
    friend bool operator==(const NeighboursConfig&, const NeighboursConfig&) = default;
};

// One end of the sync channel: an IP address and UDP port.
struct SyncEndpoint {
    IpAddress address;
    IpFamily family = IpFamily::none;
    uint16_t port = 0;
    std::string text;  // as written, for logs
    friend bool operator==(const SyncEndpoint& a, const SyncEndpoint& b) { return a.text == b.text; }
};

// Connection-state sync between instances (lib/sync, docs/operations/ha.md); absent section: off.
struct SyncConfig {
    bool enabled = false;
    SyncEndpoint listen;  // the local address and port on the dedicated sync network
    std::vector<SyncEndpoint> peers;
    std::string key_file;  // the shared HMAC key: a file only root may read (never inline in the config)
    std::string key;       // its bytes, read at load
    // An entry whose peers were last told about it this share of its state's timeout ago is sent again.
    double refresh_fraction = 0.5;
    uint32_t ring_size = 16384;  // events per worker ring, each way
    friend bool operator==(const SyncConfig&, const SyncConfig&) = default;
};

// Largest prefix-set file accepted (bytes): a config author cannot make sluice read an unbounded file.
inline constexpr std::size_t kMaxPrefixFileBytes = 64u << 20;

// A file the config read besides its own (a prefix set's file, the sync key) and the hash of the bytes it read.
struct ConfigInput {
    std::string path;
    std::string hash;  // content_hash
};

// Where a config's rules from each file of firewall.include sit in its firewall.rules, by path. A load given the
// running config takes a file's rules from the running config's firewall.rules instead of parsing the file again
// when its bytes, and the ports, VLANs and prefix sets its rules may name, are the same: the decoded rules are held
// once, by the config.
struct IncludeIndex {
    struct File {
        std::string hash;       // content_hash of its bytes
        std::string context;    // of what its rules may name (include_context in config_firewall.cpp)
        std::size_t first = 0;  // its rules: firewall.rules[first, first + count)
        std::size_t count = 0;
        std::vector<std::pair<int, int>> name_marks;  // each rule's name: line and column, for "defined twice"
    };
    std::map<std::string, File> files;
};

struct Config {
    std::string path;
    std::string hash;  // FNV-1a 64 of the file's bytes, 16 hex digits: tells which config runs
    std::vector<ConfigInput> inputs;
    IncludeIndex include_index;  // where its rule files' rules are in firewall.rules
    std::vector<std::string> eal;
    LogConfig log;
    DataplaneConfig dataplane;
    MetricsConfig metrics;
    FirewallConfig firewall;
    LoadBalancerConfig load_balancer;
    std::vector<ServiceConfig> services;
    BgpConfig bgp;
    SyncConfig sync;
    std::vector<PortSpec> ports;
    std::vector<VlanConfig> vlans;
    std::vector<PortAddress> port_addresses;
    std::vector<LcoreConfig> lcores;
    std::vector<ForwardConfig> forward;
    std::vector<RouteConfig> routes;
    RoutingConfig routing;
    NeighboursConfig neighbours;

    const PortSpec* find_port(const std::string& name) const;
    // The canonical name of the interface `name` refers to: a port's name, or "PORT.ID" for one of its VLANs (named
    // so, or by its own name); empty when none.
    std::string canonical_interface(const std::string& name) const;
    // Every interface's canonical name: the ports, then the VLANs.
    std::vector<std::string> interfaces() const;
    // Workers track connections: the firewall is on or a service exists.
    bool tracks_connections() const { return firewall.enabled || !services.empty(); }
};

// Where loading a config spent its time, for the reload log.
struct ConfigLoadTimes {
    double yaml_ms = 0;    // yaml-cpp building the node tree
    double decode_ms = 0;  // decoding and checking it (prefix files read)
};

struct ConfigResult {
    std::optional<Config> config;  // set only when errors is empty
    std::vector<ConfigError> errors;
    std::vector<ConfigError> warnings;  // legal but likely mistakes, "warning: ..."; printed, never refused
    ConfigLoadTimes times;
};

// previous: the running config, whose unchanged rule files (Config::include_index) are not parsed again; null to parse
// every one.
ConfigResult load_config_file(const std::string& path, const Config* previous = nullptr);
// `name` stands for the file in error messages.
ConfigResult load_config_text(const std::string& text, const std::string& name, const Config* previous = nullptr);
// The whole file into text; false when it cannot be read.
bool read_config_text(const std::string& path, std::string& text);
// FNV-1a 64 of bytes, 16 hex digits (Config::hash, ConfigInput::hash).
std::string content_hash(std::string_view bytes);
// Whether loading text (the bytes of config.path now) would give config again: the same bytes, and every file it
// read (Config::inputs) hashes as it did then. A reload of an unchanged config is skipped on this.
bool same_sources(const Config& config, const std::string& text);

// What differs between the running config and a candidate that only a restart can apply (EAL arguments, ports,
// lcores, data-plane sizes, the metrics listener), one line each; empty when the candidate can go live.
std::vector<std::string> restart_required_changes(const Config& running, const Config& candidate);

// Whether address lies inside one of port's addresses (ports[].addresses; port: an interface's canonical name): on
// that link, resolved with ARP/ND.
bool on_link(const Config& config, const std::string& port, IpFamily family, const IpAddress& address);
// The first interface (Config::interfaces order) whose link holds address; empty when none.
std::string interface_on_link(const Config& config, IpFamily family, const IpAddress& address);

// The RX queues each rx lcore polls, as (port index, queue): the explicit lists, or every queue of every port
// spread round-robin over the rx lcores when no lcore lists any. Indexed like config.lcores.
std::vector<std::vector<std::pair<std::size_t, uint16_t>>> assign_rx_queues(const Config& config);

}  // namespace sluice

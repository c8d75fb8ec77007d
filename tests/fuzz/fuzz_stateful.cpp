// libFuzzer target "stateful": sequences of packets through sluice's whole data path in process (the pipeline lab of
// tests/unit/pipeline: ring ports, the daemon's build, the lcores' loops on this thread), both directions of a few
// flows (a NAT service, a SYN-proxied one, DSR, firewalled hosts, IPv6, martian sources), with time steps and reloads
// between them. Each input is a program: every byte pair is one step. After each step:
//  - every mbuf is back in the pool or was taken off a TX ring (nothing leaks, nothing is held);
//  - every frame sluice sent has valid checksums and no martian address or port 0, by the data path's own predicate
//    (MartianFilter, without sluice's own addresses: sluice sends from those);
//  - the counters add up: frames received + frames sluice made = frames sent + drops - frames answered in place
//    from a dropped packet (a reject, a challenge ACK, an ICMP error: counted as a drop and as a frame sent);
//  - a closed TCP connection passes no data: once a flow was idle past the close timeout after sluice passed its
//    RST, or past every timeout, none of its data segments is forwarded until a SYN of it is;
//  - NAT is reversible: a backend's reply to the pool address and port a client's packet left with comes back to
//    that client from the VIP, and a connection keeps its pool port and backend while it lives;
//  - a NAT connection that timed out passes nothing back: after a step past every timeout, a backend's packet to
//    its old pool port reaches no client.
#include <arpa/inet.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <rte_eal.h>

#include "fuzz_common.hpp"
#include "packet/martian.hpp"
#include "pipeline/pipeline_lab.hpp"

using namespace sluice;
using namespace sluice::test;
using sluice::fuzz::be16;

namespace {

constexpr const char* kPorts = R"(
ports:
  - {name: client, device: ring_client, addresses: [203.0.113.1/24, "2001:db8:a::1/64"]}
  - {name: server, device: ring_server, addresses: [10.9.0.1/24, "2001:db8:b::1/64"]}
lcores: [{id: 1, roles: [rx, worker]}]
forward:
  - {from: client, to: server, next_hop_mac: "02:00:00:00:00:0b"}
  - {from: server, to: client, next_hop_mac: "02:00:00:00:00:0a"}
load_balancer:
  nat_pool: [10.1.0.100]
  nat_ports: 40000-40063
)";

// Two configs the program switches between: the second drops a backend (its connections removed), moves the web
// rule below a deny and tightens the limits.
constexpr const char* kRulesA = R"(
firewall:
  table_size: 1024
  default: deny
  rules:
    - {name: no-telnet, protocol: tcp, destination_ports: 23, action: reject}
    - {name: web, protocol: tcp, destination_ports: [80, 8443], action: allow}
    - {name: dns, protocol: udp, destination_ports: 53, action: allow, rate_limit: {rate: 50, burst: 20}}
    - {name: web6, protocol: tcp, destination: "2001:db8:b::/64", action: allow}
    - {name: inside-out, in_ports: [server], action: allow}
services:
  - name: web
    vip: 192.0.2.100
    port: 80
    protocol: tcp
    mode: nat
    table_size: 251
    removed_backends: drop
    backends: [{address: 10.1.0.11, port: 8080}, {address: 10.1.0.12, port: 8080}]
  - name: dns
    vip: 192.0.2.100
    port: 53
    protocol: udp
    mode: dsr
    table_size: 251
    backends: [{address: 10.1.0.21, mac: "02:00:00:00:03:21"}]
  - name: guarded
    vip: 192.0.2.101
    port: 8443
    protocol: tcp
    mode: nat
    table_size: 251
    syn_proxy: true
    backends: [{address: 10.1.0.41, port: 8443}]
)";

constexpr const char* kRulesB = R"(
dataplane: {max_new_connections_per_second: 20}
firewall:
  table_size: 1024
  default: deny
  rules:
    - {name: no-telnet, protocol: tcp, destination_ports: 23, action: reject}
    - {name: quarantine, source: 203.0.113.12/32, action: deny}
    - {name: web, protocol: tcp, destination_ports: [80, 8443], action: allow}
    - {name: dns, protocol: udp, destination_ports: 53, action: allow}
    - {name: inside-out, in_ports: [server], action: allow}
services:
  - name: web
    vip: 192.0.2.100
    port: 80
    protocol: tcp
    mode: nat
    table_size: 251
    removed_backends: drop
    backends: [{address: 10.1.0.11, port: 8080}]
  - name: dns
    vip: 192.0.2.100
    port: 53
    protocol: udp
    mode: dsr
    table_size: 251
    backends: [{address: 10.1.0.21, mac: "02:00:00:00:03:21"}]
  - name: guarded
    vip: 192.0.2.101
    port: 8443
    protocol: tcp
    mode: nat
    table_size: 251
    syn_proxy: true
    backends: [{address: 10.1.0.41, port: 8443}]
)";

// SLUICE_FUZZ_VERBOSE=1: each step, the frames in and out, and the drop reasons counted, on stderr.
const bool kVerbose = std::getenv("SLUICE_FUZZ_VERBOSE") != nullptr;

constexpr const char* kPoolAddress = "10.1.0.100";
constexpr double kPastEveryTimeout = 4000;  // seconds: above every ConnTimeouts default
constexpr double kShortestTimeout = 10;     // tcp_close
constexpr double kLongestTimeout = 3600;    // tcp_established
// Idle polls after a time step, as the daemon's loops poll while time passes: the expiry sweep runs (a lookup
// also refuses an entry past its timeout, so the sweep need not finish).
constexpr unsigned kSweepPolls = 32;

struct Endpoint {
    std::string address;
    uint16_t port = 0;
    bool operator==(const Endpoint&) const = default;
};

struct FlowKind {
    const char* client;
    const char* server;
    uint8_t proto;
    uint16_t server_port;
    bool nat;  // the server side sees a pool address and port, learned from what sluice sent
};

const std::array kFlows = {
    FlowKind{"203.0.113.7", "192.0.2.100", IPPROTO_TCP, 80, true},    // NAT service
    FlowKind{"203.0.113.8", "192.0.2.101", IPPROTO_TCP, 8443, true},  // NAT behind the SYN proxy
    FlowKind{"203.0.113.9", "10.9.0.50", IPPROTO_TCP, 80, false},     // firewalled host
    FlowKind{"203.0.113.10", "10.9.0.50", IPPROTO_UDP, 53, false},    // rate-limited rule
    FlowKind{"203.0.113.11", "192.0.2.100", IPPROTO_UDP, 53, false},  // DSR service
    FlowKind{"203.0.113.12", "10.9.0.50", IPPROTO_TCP, 23, false},    // reject rule
    FlowKind{"2001:db8:a::7", "2001:db8:b::50", IPPROTO_TCP, 80, false},
    FlowKind{nullptr, "192.0.2.100", IPPROTO_TCP, 80, true},  // martian sources (kMartians) to the NAT service
    FlowKind{nullptr, "192.0.2.100", IPPROTO_TCP, 80, true},
};
constexpr unsigned kInstances = 4;  // client ports per kind
constexpr unsigned kFlowCount = kFlows.size() * kInstances;
constexpr unsigned kFirstMartian = 7 * kInstances;
// Sources no packet may come from: broadcast, this network, loopback, multicast, class E, a land attack (the VIP
// to itself, port 80 to 80), the NAT pool, and port 0.
const std::array<Endpoint, 8> kMartians = {{{"255.255.255.255", 40000},
                                            {"0.0.0.0", 40000},
                                            {"127.0.0.1", 40000},
                                            {"224.0.0.5", 40000},
                                            {"240.0.0.1", 40000},
                                            {"192.0.2.100", 80},
                                            {"10.1.0.100", 40000},
                                            {"203.0.113.13", 0}}};
const std::array kTimeSteps = {0.0, 0.001, 0.5, 2.0, 11.0, 31.0, 121.0, kPastEveryTimeout};
const std::array kFlagChoices = {kSyn, uint8_t(kSyn | kAck), kAck, uint8_t(kAck | 0x08), uint8_t(kFin | kAck),
                                 kRst, uint8_t(kRst | kAck)};

// What the program knows of one flow instance (a kind and one of four client ports).
struct FlowState {
    Endpoint client, server;                  // as the client sees them
    std::optional<Endpoint> pool, backend;    // NAT: the server side, from the last packet sluice sent there
    bool binding_fixed = false;               // no time step, reload or RST/FIN since pool/backend were seen
    bool expired = false;                     // a step past every timeout since the server side was seen
    bool stale = false;                       // time enough since then for the pool port to be someone else's
    bool reset = false;                       // TCP: sluice passed a RST of it, and no SYN since
    double idle = 0;                          // seconds since sluice last passed a packet of it
    uint32_t client_seq = 0, server_seq = 0;  // each side's next sequence number
    uint32_t client_acks = 0, server_acks = 0;
};

struct Sent {
    SeenFrame frame;
    uint32_t seq = 0;
    uint32_t segment_length = 0;  // sequence space the segment takes (data, SYN, FIN)
    uint32_t payload = 0;         // bytes of data
};

Sent read_sent(const Bytes& b) {
    Sent s{read_frame(b), 0, 0, 0};
    if (s.frame.proto != IPPROTO_TCP) return s;
    const bool v6 = be16(&b[12]) == 0x86dd;
    const uint8_t* ip = &b[14];
    const std::size_t ihl = v6 ? 40 : (ip[0] & 0x0f) * 4u;
    const std::size_t ip_len = v6 ? 40u + be16(ip + 4) : be16(ip + 2);
    const uint8_t* tcp = ip + ihl;
    s.seq = static_cast<uint32_t>(tcp[4]) << 24 | tcp[5] << 16 | tcp[6] << 8 | tcp[7];
    const std::size_t data = ip_len - ihl - (tcp[12] >> 4) * 4u;
    s.payload = static_cast<uint32_t>(data);
    s.segment_length = s.payload + ((tcp[13] & (kSyn | kFin)) ? 1 : 0);
    return s;
}

// The frame's addresses, protocol and ports as the martian check reads them.
FiveTuple sent_tuple(const Bytes& b) {
    FiveTuple t;
    const bool v6 = be16(&b[12]) == 0x86dd;
    const uint8_t* ip = &b[14];
    t.family = v6 ? IpFamily::ipv6 : IpFamily::ipv4;
    t.proto = ip[v6 ? 6 : 9];
    if (v6) {
        t.src = IpAddress::from_v6(ip + 8), t.dst = IpAddress::from_v6(ip + 24);
    } else {
        std::memcpy(t.src.bytes, ip + 12, 4);
        std::memcpy(t.dst.bytes, ip + 16, 4);
    }
    if (t.proto == IPPROTO_TCP || t.proto == IPPROTO_UDP) {
        const uint8_t* l4 = ip + (v6 ? 40 : (ip[0] & 0x0f) * 4u);
        t.src_port = sluice::fuzz::raw16(l4), t.dst_port = sluice::fuzz::raw16(l4 + 2);
    }
    return t;
}

// ICMPv6 neighbour discovery (RS, RA, NS, NA, redirect) uses link-local and multicast addresses by design.
bool neighbour_discovery(const Bytes& b, const SeenFrame& f) {
    return f.proto == IPPROTO_ICMPV6 && b.size() > 54 && b[54] >= 133 && b[54] <= 137;
}

void check_sent(const MartianFilter& martians, const Bytes& b, const Sent& s, const char* port) {
    const SeenFrame& f = s.frame;
    if (f.proto != IPPROTO_TCP && f.proto != IPPROTO_UDP && f.proto != IPPROTO_ICMP && f.proto != IPPROTO_ICMPV6)
        return;  // tunnels: fuzz_parse checks encapsulation
    FUZZ_CHECK(f.checksums_ok, "a frame sent on %s has a bad checksum: %s -> %s proto %u", port, f.src.c_str(),
               f.dst.c_str(), f.proto);
    if (neighbour_discovery(b, f)) return;
    const DropReason martian = martians.check(sent_tuple(b));
    FUZZ_CHECK(martian == DropReason::none, "a martian frame left on %s (%s): %s:%u -> %s:%u proto %u", port,
               std::string(drop_reason_name(martian)).c_str(), f.src.c_str(), f.src_port, f.dst.c_str(), f.dst_port,
               f.proto);
}

uint64_t port_sum(const CounterTotals& t, uint64_t PortCounters::*member) {
    uint64_t sum = 0;
    for (const PortCounters& p : t.ports) sum += p.*member;
    return sum;
}

class Program {
public:
    // One lab for the process, restarted for each program: every program starts from the same empty state.
    explicit Program(PipelineLab& lab) : lab_(lab) {
        lab_.restart(std::string(kPorts) + kRulesA);
        lab_.advance_seconds(1);
        egress_martians_.set_checked(true, true);
        egress_martians_.seal();
    }

    // One step per pair of bytes: the first chooses what, the second how.
    void step(uint8_t what, uint8_t how) {
        if (kVerbose) std::fprintf(stderr, "step %02x %02x\n", what, how);
        switch (what >> 6) {
        case 0:
        case 1: send(what % kFlowCount, /*from_client=*/true, how); break;
        case 2: send((what & 0x3f) % kFlowCount, /*from_client=*/false, how); break;  // every flow's server too
        default:
            if ((what & 0x3f) < 48) burst(what, how);
            else if ((what & 0x3f) < 60) advance(kTimeSteps[how % kTimeSteps.size()]);
            else reload();
        }
        check_accounting();
    }

private:
    FlowState& state(unsigned flow) {
        FlowState& s = flows_[flow];
        if (s.client.address.empty()) {
            const FlowKind& kind = kFlows[flow / kInstances];
            s.client = flow >= kFirstMartian ? kMartians[flow - kFirstMartian]
                                             : Endpoint{kind.client, static_cast<uint16_t>(40000 + flow % kInstances)};
            s.server = {kind.server, kind.server_port};
            s.client_seq = 1000u * (flow + 1);
            s.server_seq = 7000000u * (flow + 1);
        }
        return s;
    }

    FrameSpec spec(unsigned flow, bool from_client, uint8_t how) {
        FlowState& s = state(flow);
        const FlowKind& kind = kFlows[flow / kInstances];
        // The server side of a NAT flow is the backend and the pool address; unlearned, a guess.
        const Endpoint server = !kind.nat ? s.server : s.backend ? *s.backend : Endpoint{"10.1.0.11", 8080};
        const Endpoint client = !kind.nat ? s.client : s.pool ? *s.pool : Endpoint{kPoolAddress, 40000};
        const Endpoint& from = from_client ? s.client : server;
        const Endpoint& to = from_client ? s.server : client;
        FrameSpec f;
        f.proto = kind.proto;
        f.src = from.address, f.src_port = from.port;
        f.dst = to.address, f.dst_port = to.port;
        f.payload = 64u * ((how >> 3) % 4);
        if (f.proto == IPPROTO_TCP) {
            f.tcp_flags = how & 0x80 ? static_cast<uint8_t>(how * 37) : kFlagChoices[how % kFlagChoices.size()];
            uint32_t& seq = from_client ? s.client_seq : s.server_seq;
            const bool in_order = !(how & 0x40);
            f.seq = in_order ? seq : seq + how * 7919u;  // in order, or a guess such as a blind spoofer's
            f.ack = from_client ? s.client_acks : s.server_acks;
            if (in_order) seq += static_cast<uint32_t>(f.payload) + ((f.tcp_flags & (kSyn | kFin)) ? 1 : 0);
            if (f.tcp_flags & (kRst | kFin)) s.binding_fixed = false;
        }
        return f;
    }

    void send(unsigned flow, bool from_client, uint8_t how) {
        const FrameSpec f = spec(flow, from_client, how);
        if (kVerbose)
            std::fprintf(stderr, "  in  %s: %s:%u -> %s:%u flags 0x%02x seq %u ack %u, %zu bytes\n",
                         from_client ? "client" : "server", f.src.c_str(), f.src_port, f.dst.c_str(), f.dst_port,
                         f.tcp_flags, f.seq, f.ack, f.payload);
        lab_.send(from_client ? "client" : "server", {frame(f)});
        settle(flow, !from_client);
    }

    // Several packets in one RX burst: first packets of flows and their followers decided together. Which packet
    // left for which flow is not known here, so the flows' NAT bindings are learned again from their next packets.
    void burst(uint8_t what, uint8_t how) {
        const unsigned count = 2 + how % 14;
        for (unsigned i = 0; i < count; ++i) {
            const unsigned flow = (what + i * (1 + how % 3)) % kFlowCount;
            lab_.send("client", {frame(spec(flow, true, static_cast<uint8_t>(how & 0x3f)))});
            FlowState& s = flows_[flow];
            s.pool.reset(), s.backend.reset();
            s.binding_fixed = s.expired = s.stale = s.reset = false;  // which of them passed is not known
            s.idle = 0;
        }
        settle(std::nullopt, false);
    }

    void advance(double seconds) {
        lab_.advance_seconds(seconds);
        for (unsigned i = 0; i < kSweepPolls; ++i) lab_.dataplane().run_inline(lab_.now_tsc());
        for (FlowState& s : flows_) {
            s.binding_fixed = s.binding_fixed && seconds < 1;
            s.expired = s.expired || seconds >= kPastEveryTimeout;
            s.idle += seconds;
            s.stale = s.stale || seconds >= kShortestTimeout;
        }
        settle(std::nullopt, false);
    }

    void reload() {
        rules_b_ = !rules_b_;
        lab_.reload(std::string(kPorts) + (rules_b_ ? kRulesB : kRulesA));
        for (FlowState& s : flows_) s.binding_fixed = false, s.stale = true;
        settle(std::nullopt, false);
    }

    // Runs the lcores, reads what they sent and checks it against the flow in play (if one).
    void settle(std::optional<unsigned> flow, bool from_server) {
        lab_.run();
        for (const char* port : {"client", "server"})
            for (const Bytes& b : lab_.take_sent(port)) {
                const uint16_t ether_type = be16(&b[12]);
                if (ether_type != 0x0800 && ether_type != 0x86dd) continue;  // ARP: its own target's checks
                const Sent sent = read_sent(b);
                if (kVerbose)
                    std::fprintf(stderr, "  out %s: %s:%u -> %s:%u flags 0x%02x seq %u ack %u, %u bytes\n", port,
                                 sent.frame.src.c_str(), sent.frame.src_port, sent.frame.dst.c_str(),
                                 sent.frame.dst_port, sent.frame.tcp_flags, sent.frame.seq, sent.frame.ack,
                                 sent.payload);
                check_sent(egress_martians_, b, sent, port);
                if (flow)
                    observe(sent, std::string(port) == "server", flows_[*flow], kFlows[*flow / kInstances],
                            from_server);
            }
        FUZZ_CHECK(lab_.mbufs_out() == 0, "%u mbufs are held after a step", lab_.mbufs_out());
    }

    static void observe(const Sent& sent, bool to_server, FlowState& s, const FlowKind& kind, bool from_server) {
        const SeenFrame& f = sent.frame;
        if (f.proto != kind.proto) return;  // an ICMP error about it, say
        const Endpoint src{f.src, f.src_port}, dst{f.dst, f.dst_port};
        // A server's packet reaches this flow's client only if it is this flow's: a NAT flow's server side aims at
        // a pool port guessed or learned, which may be another connection's.
        const bool ours = !from_server || (dst == s.client && src == s.server);
        if (f.proto == IPPROTO_TCP && to_server != from_server && ours) {  // forwarded, not answered
            // Past its timeout (with a margin for the step sizes) the connection's entry is gone.
            const bool closed = (s.reset && s.idle > kShortestTimeout + 0.5) || s.idle > kLongestTimeout + 0.5;
            FUZZ_CHECK(!closed || (f.tcp_flags & kSyn) || sent.payload == 0,
                       "a closed connection (%s, idle %.1f s) passed %u bytes of data: %s:%u -> %s:%u, flags 0x%02x",
                       s.reset ? "reset" : "timed out", s.idle, sent.payload, f.src.c_str(), f.src_port, f.dst.c_str(),
                       f.dst_port, f.tcp_flags);
            if (f.tcp_flags & kSyn) s.reset = false;
            else if (f.tcp_flags & kRst) s.reset = true;
            s.idle = 0;
        }
        if (to_server && !from_server) {
            if (kind.nat && f.src == kPoolAddress) {
                FUZZ_CHECK(!s.binding_fixed || (s.pool == src && s.backend == dst),
                           "a live NAT connection moved: %s:%u now leaves as %s:%u to %s:%u, before as %s:%u",
                           s.client.address.c_str(), s.client.port, f.src.c_str(), f.src_port, f.dst.c_str(),
                           f.dst_port, s.pool ? s.pool->address.c_str() : "-", s.pool ? s.pool->port : 0);
                s.pool = src, s.backend = dst;
                s.binding_fixed = true, s.expired = s.stale = false;
            }
            s.server_acks = sent.seq + sent.segment_length;
        } else if (!to_server) {
            if (dst == s.client && src == s.server) s.client_acks = sent.seq + sent.segment_length;
            if (!from_server || !kind.nat || !s.pool) return;
            // The backend's packet to its pool port came back: to this client, from the VIP, and only while the
            // connection lives (after a long enough pause, the port may be another client's).
            FUZZ_CHECK(s.stale || (dst == s.client && src == s.server),
                       "a reply to pool port %u came back as %s:%u -> %s:%u", s.pool->port, f.src.c_str(), f.src_port,
                       f.dst.c_str(), f.dst_port);
            FUZZ_CHECK(!s.expired || dst != s.client, "a timed-out NAT connection passed a reply to %s:%u",
                       f.dst.c_str(), f.dst_port);
        }
    }

    void check_accounting() {
        const CounterTotals t = lab_.totals();
        if (kVerbose)
            for (std::size_t r = 0; r < kDropReasonCount; ++r)
                if (t.drops[r] != drops_seen_[r])
                    std::fprintf(stderr, "  dropped: %s\n", std::string(drop_reason_name(DropReason(r))).c_str());
        drops_seen_ = t.drops;
        const uint64_t rx = port_sum(t, &PortCounters::rx_packets), tx = port_sum(t, &PortCounters::tx_packets);
        // Generated frames (solicitations) add to tx; answers made in place from a dropped packet count twice.
        const uint64_t answered_drops = t.rejects_sent + t.challenge_acks_sent + t.too_big_sent + t.time_exceeded_sent;
        const uint64_t in = rx + t.neighbour_solicitations, out = tx + t.total_drops() - answered_drops;
        FUZZ_CHECK(in == out,
                   "counters do not add up: rx %lu + solicitations %lu != tx %lu + drops %lu - answered drops %lu "
                   "(rejects %lu, challenge ACKs %lu, too big %lu, time exceeded %lu)",
                   rx, t.neighbour_solicitations, tx, t.total_drops(), answered_drops, t.rejects_sent,
                   t.challenge_acks_sent, t.too_big_sent, t.time_exceeded_sent);
    }

    PipelineLab& lab_;
    std::array<uint64_t, kDropReasonCount> drops_seen_{};
    MartianFilter egress_martians_;  // class, land and port-0 checks only: sluice sends from its own addresses
    std::array<FlowState, kFlowCount> flows_{};
    bool rules_b_ = false;
};

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    static const std::string prefix = "--file-prefix=fuzz-stateful-" + std::to_string(getpid());
    const char* eal_args[] = {"fuzz_stateful",     "--no-huge",      "-m",           "512",  "--no-pci", "-l", "0",
                              "--log-level=error", "--no-telemetry", prefix.c_str(), nullptr};
    if (rte_eal_init(10, const_cast<char**>(eal_args)) < 0) std::abort();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size > 512) return -1;  // 256 steps are plenty; longer programs only slow the search down
    static PipelineLab lab(std::string(kPorts) + kRulesA);
    Program program(lab);
    for (size_t i = 0; i + 1 < size; i += 2) program.step(data[i], data[i + 1]);
    return 0;
}

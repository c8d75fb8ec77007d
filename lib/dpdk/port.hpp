// Ethernet ports: what the config asks of one, and the bring-up/tear-down of the device.
// Control thread only (start-up and shutdown); nothing here runs on an lcore.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <rte_ether.h>
#include <rte_mempool.h>

struct rte_eth_dev_info;

namespace sluice {

// What sluice's XDP program does on a net_af_xdp port (lib/xdp): everything but the kernel's own addresses to
// sluice (a gateway), only sluice's addresses (VIPs, NAT pool, port addresses), or no program of sluice's.
enum class XdpSteeringMode : uint8_t { all, services, off };

struct PortSpec {
    std::string name;    // the operator's name, used in logs, metrics and the forwarding table
    std::string device;  // a PCI address (0000:03:00.0) or a vdev string (net_pcap0,rx_pcap=in.pcap)
    uint16_t rx_queues = 1;
    uint16_t rx_descriptors = 1024;
    uint16_t tx_descriptors = 1024;
    uint16_t mtu = 1500;
    bool promiscuous = true;
    XdpSteeringMode xdp_steering = XdpSteeringMode::all;  // net_af_xdp devices only
    friend bool operator==(const PortSpec&, const PortSpec&) = default;
};

bool is_pci_address(const std::string& device);
// The ethdev name a device is known by once probed: the vdev name before its first comma, or the PCI address.
std::string device_name(const std::string& device);

// Largest frame a port of this MTU receives: MTU + Ethernet header + two VLAN tags + CRC.
constexpr uint32_t max_frame_size(uint16_t mtu) {
    return mtu + RTE_ETHER_HDR_LEN + 2 * RTE_VLAN_HLEN + RTE_ETHER_CRC_LEN;
}

// Per port, whether its TX queues may ask for RTE_ETH_TX_OFFLOAD_MBUF_FAST_FREE, under which the driver frees sent
// mbufs in bulk to one pool without looking at each: every mbuf a queue sends must come from that one pool. A
// worker's TX queue on any port sends what any port received (a backend or a forward entry may sit behind any port,
// and rejects leave by the port a packet came in on), in mbufs of the receiving port's socket pool, and worker 0's
// ARP/ND solicitations, built from the pool on solicitation_socket. So fast free is safe only while all of those are
// one pool; allocating solicitations per sending port would not help, since forwarded mbufs cross sockets anyway.
// port_sockets[i]: the socket of port i's pool. The device must offer the offload too.
std::vector<bool> plan_tx_fast_free(const std::vector<int>& port_sockets, int solicitation_socket);

// The Toeplitz key sluice gives a port's RSS: the bytes 0x6d 0x5a repeated. A key with a 16-bit period hashes
// (src, dst, sport, dport) and (dst, src, dport, sport) alike, so the NIC puts both directions of a flow into one
// RX queue (Woo and Park, "Scalable TCP Session Monitoring with Symmetric Receive-side Scaling", 2012). bytes: the
// device's hash_key_size (40 on most NICs, 52 on Intel's 700 and 800 series).
std::vector<uint8_t> symmetric_rss_key(std::size_t bytes);

// The kernel's counters of an AF_XDP socket (struct xdp_statistics, getsockopt XDP_STATISTICS), declared once as
// X(name, help). DPDK 22.11's net_af_xdp reports only rx_dropped (as imissed) and has no xstats for the rest.
#define SLUICE_XSK_COUNTERS(X)                                                                                   \
    X(rx_dropped, "Frames the kernel dropped at the port's AF_XDP sockets other than for a full RX ring, those " \
                  "that found the fill ring empty included (what net_af_xdp reports as rx_missed)")              \
    X(rx_invalid_descs, "Frames the kernel dropped at the port's AF_XDP sockets for an invalid RX descriptor")   \
    X(tx_invalid_descs, "Frames the kernel dropped at the port's AF_XDP sockets for an invalid TX descriptor")   \
    X(rx_ring_full, "Frames the kernel dropped because a socket's RX ring was full: the RX lcore fell behind")   \
    X(rx_fill_ring_empty_descs, "Times the kernel found a socket's fill ring empty: no buffer for a frame")      \
    X(tx_ring_empty_descs, "Times the kernel, woken to send, found a socket's TX ring empty (not drops)")

struct XskCounters {
#define SLUICE_XSK_COUNTER_MEMBER(name, help) uint64_t name = 0;
    SLUICE_XSK_COUNTERS(SLUICE_XSK_COUNTER_MEMBER)
#undef SLUICE_XSK_COUNTER_MEMBER
};

// A configured, started port. Owned by the daemon; closes the device when it goes.
class Port {
public:
    // Finds the probed device for spec, or throws StartupError naming it.
    explicit Port(const PortSpec& spec);
    ~Port();
    Port(const Port&) = delete;
    Port& operator=(const Port&) = delete;

    // Configures RX queues (RSS over IPv4/IPv6 TCP/UDP with symmetric_rss_key when more than one and the device
    // hashes) and tx_queues TX queues, all RX queues taking mbufs from pool, then starts the device. tx_fast_free:
    // plan_tx_fast_free's answer for this port. Throws StartupError.
    void start(uint16_t tx_queues, rte_mempool* pool, bool tx_fast_free);
    void stop();  // idempotent; the PMD returns its RX descriptors' mbufs to the pool

    uint16_t id() const { return port_id_; }
    const std::string& name() const { return spec_.name; }
    const PortSpec& spec() const { return spec_; }
    int socket() const;  // the NUMA socket the device sits on (0 when unknown)
    const rte_ether_addr& mac() const { return mac_; }
    // mbufs the driver takes when its RX queues are set up and never gives back, not even at close: DPDK 22.11's
    // net_af_xdp stocks each queue's AF_XDP fill ring with 2048 mbufs (its zero-copy umem is the pool) and deletes
    // the umem over them. The pool is sized with them and the shutdown check counts them as accounted for.
    uint32_t mbufs_kept_by_driver() const;
    // What the driver holds that way now: none for queues never set up (a start that failed before them).
    uint32_t mbufs_held_by_driver() const;
    // net_af_xdp ports: the kernel's counters of the port's AF_XDP sockets, summed; nullopt for other devices or
    // when the kernel would not say. Control thread only: a getsockopt per RX queue.
    std::optional<XskCounters> xsk_counters() const;
    void log_link() const;

private:
    // Throws StartupError when the device cannot take spec_.mtu, or pool's mbufs cannot hold a frame of it whole.
    void check_mtu(const std::string& who, const rte_eth_dev_info& info, rte_mempool* pool) const;

    PortSpec spec_;
    uint16_t port_id_ = 0;
    rte_ether_addr mac_{};
    bool started_ = false;
    uint16_t rx_queues_set_up_ = 0;
    uint16_t tx_queues_ = 0;
    std::vector<int> xsk_fds_;  // the AF_XDP sockets net_af_xdp opened for this port's RX queues
};

}  // namespace sluice

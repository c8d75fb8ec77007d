#include "dpdk/port.hpp"

#include <dirent.h>
#include <linux/if_xdp.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <iterator>

#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>

#include <spdlog/spdlog.h>

#include "dpdk/startup_error.hpp"

namespace sluice {

bool is_pci_address(const std::string& device) {
    // [DDDD:]BB:DD.F, optionally followed by ",devargs"
    const std::string name = device_name(device);
    const std::string shape = name.size() == 12 ? "xxxx:xx:xx.f" : "xx:xx.f";
    if (name.size() != shape.size()) return false;
    for (std::size_t i = 0; i < shape.size(); ++i) {
        const char c = name[i];
        const bool ok = shape[i] == 'x'   ? std::isxdigit(static_cast<unsigned char>(c)) != 0
                        : shape[i] == 'f' ? (c >= '0' && c <= '7')
                                          : c == shape[i];
        if (!ok) return false;
    }
    return true;
}

std::string device_name(const std::string& device) { return device.substr(0, device.find(',')); }

namespace {

std::string errstr(int ret) { return rte_strerror(ret < 0 ? -ret : ret); }

// Whether the device's RSS key is key, as far as it says: one that cannot report its key (net_tap) is taken at its
// word. Some virtual functions keep their physical function's key whatever they are given.
bool holds_rss_key(uint16_t port_id, const std::vector<uint8_t>& key) {
    std::vector<uint8_t> held(key.size());
    rte_eth_rss_conf conf{};
    conf.rss_key = held.data();
    conf.rss_key_len = static_cast<uint8_t>(held.size());
    if (rte_eth_dev_rss_hash_conf_get(port_id, &conf) != 0) return true;
    return held == key;
}

// How a started device spreads packets over its rx_queues (more than one) RX queues, to the log: hash_types 0 (no
// RSS), the device's own key (rss_key empty), or sluice's symmetric key, which the device may not have kept.
void log_rss(const std::string& who, uint16_t port_id, uint16_t rx_queues, uint64_t hash_types,
             const std::vector<uint8_t>& rss_key) {
    if (hash_types == 0)
        spdlog::info("{}: the device does no RSS: its driver decides which RX queue a packet lands in (sluice's "
                     "steering to workers does not depend on it)",
                     who);
    else if (rss_key.empty())
        spdlog::warn("{}: RSS over {} RX queues with the device's own key (it does not say its key size): both "
                     "directions of a flow may land in different queues",
                     who, rx_queues);
    else if (!holds_rss_key(port_id, rss_key))
        spdlog::warn("{}: RSS over {} RX queues, but the device reports a key other than the symmetric one sluice "
                     "gave it: both directions of a flow may land in different queues",
                     who, rx_queues);
    else
        spdlog::info("{}: RSS over {} RX queues with a symmetric {}-byte Toeplitz key, hash types {:#x}", who,
                     rx_queues, rss_key.size(), hash_types);
}

// Reads an AF_XDP socket's counters; false for any other descriptor. A kernel older than 5.9 fills the first three.
bool read_xsk_statistics(int fd, xdp_statistics& stats) {
    stats = {};
    socklen_t length = sizeof stats;
    return getsockopt(fd, SOL_XDP, XDP_STATISTICS, &stats, &length) == 0;
}

// The AF_XDP sockets among this process's descriptors, in order. net_af_xdp keeps its sockets to itself, so a port
// learns which are its own by looking before and after its RX queues are set up.
std::vector<int> open_xsk_fds() {
    std::vector<int> fds;
    DIR* dir = opendir("/proc/self/fd");
    if (!dir) return fds;
    while (const dirent* entry = readdir(dir)) {
        char* end = nullptr;
        const long fd = std::strtol(entry->d_name, &end, 10);
        struct stat st {};
        xdp_statistics stats;
        if (*end != '\0' || end == entry->d_name || fd == dirfd(dir)) continue;
        if (fstat(static_cast<int>(fd), &st) == 0 && S_ISSOCK(st.st_mode) &&
            read_xsk_statistics(static_cast<int>(fd), stats))
            fds.push_back(static_cast<int>(fd));
    }
    closedir(dir);
    std::sort(fds.begin(), fds.end());
    return fds;
}

std::string format_mac(const rte_ether_addr& mac) {
    char buf[RTE_ETHER_ADDR_FMT_SIZE];
    rte_ether_format_addr(buf, sizeof buf, &mac);
    return buf;
}

// The largest MTU the device takes, as rte_ethdev reckons it: its max_mtu, and max_rx_pktlen less the L2 overhead
// (the gap between the two when the driver states both, else an Ethernet header and CRC).
uint32_t device_max_mtu(const rte_eth_dev_info& info) {
    const uint32_t overhead = info.max_mtu != UINT16_MAX && info.max_rx_pktlen > info.max_mtu
                                  ? info.max_rx_pktlen - info.max_mtu
                                  : RTE_ETHER_HDR_LEN + RTE_ETHER_CRC_LEN;
    return std::min<uint32_t>(info.max_mtu, info.max_rx_pktlen > overhead ? info.max_rx_pktlen - overhead : 0);
}

}  // namespace

void Port::check_mtu(const std::string& who, const rte_eth_dev_info& info, rte_mempool* pool) const {
    const uint32_t largest = device_max_mtu(info);
    if (spec_.mtu < info.min_mtu || spec_.mtu > largest)
        throw StartupError(who + ": mtu " + std::to_string(spec_.mtu) + " is out of what device '" + spec_.device +
                           "' (driver " + info.driver_name + ") takes: " + std::to_string(info.min_mtu) + ".." +
                           std::to_string(largest) + " (largest frame " + std::to_string(info.max_rx_pktlen) +
                           " bytes)");
    // sluice reads every frame from one segment (no RX scatter): the mbufs must hold the port's largest frame.
    const uint32_t room = rte_pktmbuf_data_room_size(pool) - RTE_PKTMBUF_HEADROOM;
    if (room < max_frame_size(spec_.mtu))
        throw StartupError(who + ": mtu " + std::to_string(spec_.mtu) + " needs mbufs of " +
                           std::to_string(max_frame_size(spec_.mtu)) + " bytes of data, pool '" + pool->name +
                           "' has " + std::to_string(room));
}

Port::Port(const PortSpec& spec) : spec_(spec) {
    std::string name = device_name(spec.device);
    if (rte_eth_dev_get_port_by_name(name.c_str(), &port_id_) != 0)
        throw StartupError("port '" + spec.name + "': no probed device named '" + name + "' (device '" + spec.device +
                           "'); check the device string and that its driver is available");
    rte_eth_macaddr_get(port_id_, &mac_);
}

Port::~Port() {
    stop();
    rte_eth_dev_close(port_id_);
}

int Port::socket() const {
    const int s = rte_eth_dev_socket_id(port_id_);
    return s < 0 ? 0 : s;
}

std::vector<uint8_t> symmetric_rss_key(std::size_t bytes) {
    std::vector<uint8_t> key(bytes);
    for (std::size_t i = 0; i < bytes; ++i) key[i] = i % 2 == 0 ? 0x6d : 0x5a;
    return key;
}

std::vector<bool> plan_tx_fast_free(const std::vector<int>& port_sockets, int solicitation_socket) {
    const bool one_pool = std::all_of(port_sockets.begin(), port_sockets.end(),
                                      [&](int socket) { return socket == solicitation_socket; });
    return std::vector<bool>(port_sockets.size(), one_pool);
}

// XSK_RING_CONS__DEFAULT_NUM_DESCS, the fill-ring stock of 22.11's net_af_xdp (ETH_AF_XDP_DFLT_NUM_DESCS).
constexpr uint32_t kAfXdpFillRingMbufs = 2048;

bool is_af_xdp(const std::string& device) { return device.starts_with("net_af_xdp"); }

void Port::start(uint16_t tx_queues, rte_mempool* pool, bool tx_fast_free) {
    const std::string who = "port '" + spec_.name + "'";
    // The driver keeps at most its fill ring's stock in flight whatever the RX ring's size: a larger ring would
    // only turn "RX ring full" drops into "fill ring empty" ones while the pool held mbufs it can never use.
    if (is_af_xdp(spec_.device) && spec_.rx_descriptors > kAfXdpFillRingMbufs)
        throw StartupError(who + ": rx_descriptors " + std::to_string(spec_.rx_descriptors) +
                           " on net_af_xdp: the driver stocks each AF_XDP fill ring with " +
                           std::to_string(kAfXdpFillRingMbufs) + " buffers whatever the RX ring's size, so a ring " +
                           "larger than that drops as \"fill ring empty\" what it would drop as \"RX ring full\"; " +
                           "set rx_descriptors to " + std::to_string(kAfXdpFillRingMbufs) + " or less");
    rte_eth_dev_info info{};
    int ret = rte_eth_dev_info_get(port_id_, &info);
    if (ret != 0) throw StartupError(who + ": rte_eth_dev_info_get: " + errstr(ret));
    if (spec_.rx_queues > info.max_rx_queues)
        throw StartupError(who + ": " + std::to_string(spec_.rx_queues) + " RX queues asked, the device has " +
                           std::to_string(info.max_rx_queues));
    if (tx_queues > info.max_tx_queues)
        throw StartupError(who + ": needs one TX queue per worker (" + std::to_string(tx_queues) +
                           "), the device has " + std::to_string(info.max_tx_queues));

    check_mtu(who, info, pool);

    rte_eth_conf conf{};
    conf.rxmode.mtu = spec_.mtu;
    std::vector<uint8_t> rss_key;  // read by rte_eth_dev_configure
    if (spec_.rx_queues > 1) {
        conf.rxmode.mq_mode = RTE_ETH_MQ_RX_RSS;
        rte_eth_rss_conf& rss = conf.rx_adv_conf.rss_conf;
        rss.rss_hf = (RTE_ETH_RSS_IP | RTE_ETH_RSS_TCP | RTE_ETH_RSS_UDP) & info.flow_type_rss_offloads;
        // A device that hashes without saying its key size keeps its own key: a key of the wrong size is refused.
        if (rss.rss_hf != 0 && info.hash_key_size != 0) {
            rss_key = symmetric_rss_key(info.hash_key_size);
            rss.rss_key = rss_key.data();
            rss.rss_key_len = static_cast<uint8_t>(rss_key.size());
        }
    }
    // sluice's mbufs have refcnt 1 when sent; whether they all come from one pool is plan_tx_fast_free's answer.
    if (tx_fast_free && (info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MBUF_FAST_FREE))
        conf.txmode.offloads |= RTE_ETH_TX_OFFLOAD_MBUF_FAST_FREE;

    ret = rte_eth_dev_configure(port_id_, spec_.rx_queues, tx_queues, &conf);
    if (ret != 0) throw StartupError(who + ": rte_eth_dev_configure: " + errstr(ret));
    // Devices with an MTU of their own (a kernel interface under net_af_packet, a NIC's MAC) take it here; the
    // others (net_ring, net_pcap) only filter by the configured MTU.
    ret = rte_eth_dev_set_mtu(port_id_, spec_.mtu);
    if (ret != 0 && ret != -ENOTSUP)
        throw StartupError(who + ": setting mtu " + std::to_string(spec_.mtu) + ": " + errstr(ret));
    uint16_t rx_desc = spec_.rx_descriptors, tx_desc = spec_.tx_descriptors;
    ret = rte_eth_dev_adjust_nb_rx_tx_desc(port_id_, &rx_desc, &tx_desc);
    if (ret != 0) throw StartupError(who + ": descriptor counts: " + errstr(ret));

    const unsigned socket_id = static_cast<unsigned>(socket());
    const std::vector<int> xsk_before = is_af_xdp(spec_.device) ? open_xsk_fds() : std::vector<int>{};
    for (uint16_t q = 0; q < spec_.rx_queues; ++q) {
        ret = rte_eth_rx_queue_setup(port_id_, q, rx_desc, socket_id, nullptr, pool);
        if (ret != 0) throw StartupError(who + ": RX queue " + std::to_string(q) + ": " + errstr(ret));
        rx_queues_set_up_ = static_cast<uint16_t>(q + 1);
    }
    if (is_af_xdp(spec_.device)) {
        const std::vector<int> xsk_after = open_xsk_fds();
        xsk_fds_.clear();
        std::set_difference(xsk_after.begin(), xsk_after.end(), xsk_before.begin(), xsk_before.end(),
                            std::back_inserter(xsk_fds_));
        if (xsk_fds_.size() != spec_.rx_queues)
            spdlog::warn("{}: found {} AF_XDP socket(s) for {} RX queue(s): its xdp_* counters may be incomplete", who,
                         xsk_fds_.size(), spec_.rx_queues);
    }
    rte_eth_txconf txconf = info.default_txconf;
    txconf.offloads = conf.txmode.offloads;
    for (uint16_t q = 0; q < tx_queues; ++q) {
        ret = rte_eth_tx_queue_setup(port_id_, q, tx_desc, socket_id, &txconf);
        if (ret != 0) throw StartupError(who + ": TX queue " + std::to_string(q) + ": " + errstr(ret));
    }
    if (spec_.promiscuous && (ret = rte_eth_promiscuous_enable(port_id_)) != 0 && ret != -ENOTSUP)
        spdlog::warn("{}: promiscuous mode not enabled: {}", who, errstr(ret));
    ret = rte_eth_dev_start(port_id_);
    if (ret != 0) throw StartupError(who + ": rte_eth_dev_start: " + errstr(ret));
    started_ = true;
    tx_queues_ = tx_queues;
    if (spec_.rx_queues > 1) log_rss(who, port_id_, spec_.rx_queues, conf.rx_adv_conf.rss_conf.rss_hf, rss_key);
    spdlog::info(
        "{}: {} ({}) port id {}, mac {}, {} RX queue(s) x {} desc, {} TX queue(s) x {} desc, mtu {}, socket {}{}", who,
        spec_.device, info.driver_name, port_id_, format_mac(mac_), spec_.rx_queues, rx_desc, tx_queues, tx_desc,
        spec_.mtu, socket_id, (conf.txmode.offloads & RTE_ETH_TX_OFFLOAD_MBUF_FAST_FREE) ? ", tx fast free" : "");
}

uint32_t Port::mbufs_kept_by_driver() const {
    return is_af_xdp(spec_.device) ? uint32_t{spec_.rx_queues} * kAfXdpFillRingMbufs : 0;
}

uint32_t Port::mbufs_held_by_driver() const {
    return is_af_xdp(spec_.device) ? uint32_t{rx_queues_set_up_} * kAfXdpFillRingMbufs : 0;
}

std::optional<XskCounters> Port::xsk_counters() const {
    if (xsk_fds_.empty()) return std::nullopt;
    XskCounters total;
    for (const int fd : xsk_fds_) {
        xdp_statistics stats;
        if (!read_xsk_statistics(fd, stats)) return std::nullopt;
#define SLUICE_XSK_COUNTER_ADD(name, help) total.name += stats.name;
        SLUICE_XSK_COUNTERS(SLUICE_XSK_COUNTER_ADD)
#undef SLUICE_XSK_COUNTER_ADD
    }
    return total;
}

void Port::stop() {
    if (!started_) return;
    started_ = false;
    xsk_fds_.clear();  // the driver closes them with the device; their numbers may be reused
    // net_af_xdp frees a sent mbuf only when a later TX call reaps the completion ring; an empty burst reaps them
    // (the lcores have stopped: the control thread owns the queues now).
    if (is_af_xdp(spec_.device))
        for (uint16_t q = 0; q < tx_queues_; ++q) rte_eth_tx_burst(port_id_, q, nullptr, 0);
    const int ret = rte_eth_dev_stop(port_id_);
    if (ret != 0) spdlog::warn("port '{}': rte_eth_dev_stop: {}", spec_.name, errstr(ret));
}

void Port::log_link() const {
    rte_eth_link link{};
    if (rte_eth_link_get_nowait(port_id_, &link) != 0) return;
    char text[RTE_ETH_LINK_MAX_STR_LEN];
    rte_eth_link_to_str(text, sizeof text, &link);
    spdlog::info("port '{}': {}", spec_.name, text);
}

}  // namespace sluice

// Section parse: parse_burst with and without the flow hash and the martian check, the IPv4 checksum verified in
// software or flagged good by the NIC, beside DPDK's own parser (rte_net_get_ptype) on the same frames.
#include <cstdio>

#include <rte_mbuf_ptype.h>
#include <rte_net.h>

#include "dpdk/mempool.hpp"
#include "packet/martian.hpp"
#include "packet/packet_meta.hpp"
#include "sections.hpp"
#include "traffic.hpp"

namespace sluice::bench {

void section_parse(Dpdk& d, const Options& o, Table& table) {
    Rng rng(o.seed);
    std::vector<FiveTuple> flows = distinct_flows(4096, rng, 70);
    // Unicast addresses, as real traffic has: random ones are martian one time in five (224/3 alone is an eighth),
    // and the martian check's row would measure mispredicted branches on traffic no network carries.
    for (FiveTuple& f : flows)
        for (uint8_t* first : {&f.src.bytes[0], &f.dst.bytes[0]})
            if (*first == 0 || *first == 127 || *first == 169 || *first >= 224)
                *first = static_cast<uint8_t>(*first % 100 + 1);
    std::vector<PacketSpec> stream(o.packets);
    for (PacketSpec& p : stream) {
        p.tuple = flows[uniform(rng, 0, static_cast<uint32_t>(flows.size() - 1))];
        p.tcp_flags = kTcpAck;
    }
    DropReason verdicts[kBurst];
    const Stage parse = [&](rte_mbuf** pkts, uint16_t n) -> uint16_t {
        parse_burst(pkts, n, verdicts, true);  // with the flow hash, as an RX lcore in front of several workers
        return n;
    };
    // As a daemon with two port addresses, a NAT pool address and four VIPs checks them (the addresses are
    // random: about one frame in eight is a martian, multicast or class E sources most).
    MartianFilter martians;
    for (const uint32_t port_address : {0x0a0000feu, 0xc0000201u})
        martians.add_port_address(IpFamily::ipv4, IpAddress::from_v4(rte_cpu_to_be_32(port_address)), 24);
    for (const uint32_t own : {0x0a010064u, 0xc6336401u, 0xc6336402u, 0xc6336403u, 0xc6336404u})
        martians.add_service_address(IpFamily::ipv4, IpAddress::from_v4(rte_cpu_to_be_32(own)));
    martians.seal();
    const Stage parse_martians = [&](rte_mbuf** pkts, uint16_t n) -> uint16_t {
        parse_burst(pkts, n, verdicts, true, &martians);  // as an RX lcore of a running sluice
        return n;
    };
    const Stage parse_unhashed = [&](rte_mbuf** pkts, uint16_t n) -> uint16_t {
        parse_burst(pkts, n, verdicts, false);  // an RX lcore with one worker and no connection table (hash_flows)
        return n;
    };
    uint32_t ptypes = 0;  // kept live so the reference loop is not optimised away
    const Stage ptype = [&](rte_mbuf** pkts, uint16_t n) -> uint16_t {
        rte_net_hdr_lens lens;
        for (uint16_t i = 0; i < n; ++i) ptypes += rte_net_get_ptype(pkts[i], &lens, RTE_PTYPE_ALL_MASK);
        return n;
    };
    for (const bool good : {false, true}) {
        const PassOptions po{.parse_first = false, .checksum_good = good};
        auto r = interleaved(o.reps, {[&] { return timed_pass(d, stream, ptype, po); },
                                      [&] { return timed_pass(d, stream, parse, po); },
                                      [&] { return timed_pass(d, stream, parse_unhashed, po); },
                                      [&] { return timed_pass(d, stream, parse_martians, po); }});
        const auto add = [&](std::string id, std::string measurement, const std::vector<double>& sluice) {
            table.add(Row{.id = std::move(id),
                          .measurement = std::move(measurement),
                          .unit = "cycles/pkt",
                          .reference = "rte_net_get_ptype (DPDK's parser)",
                          .ref = stat_of(r[0]),
                          .sluice = stat_of(sluice)});
        };
        add(good ? "parse-csum-good" : "parse",
            good ? "parse_burst, IPv4 checksum flagged good by the NIC"
                 : "parse_burst, IPv4 checksum verified in software",
            r[1]);
        add(good ? "parse-csum-good-unhashed" : "parse-unhashed",
            good ? "parse_burst, checksum good, no flow hash (one worker)"
                 : "parse_burst, checksum in software, no flow hash (one worker)",
            r[2]);
        add(good ? "parse-csum-good-martians" : "parse-martians",
            good ? "parse_burst, checksum good, with the martian check"
                 : "parse_burst, checksum in software, with the martian check",
            r[3]);
    }
    if (ptypes == 0) std::printf("(rte_net_get_ptype returned no type)\n");
    check_pool(d, "parse");
}

}  // namespace sluice::bench

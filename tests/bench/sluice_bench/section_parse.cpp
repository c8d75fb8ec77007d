// Section parse: parse_burst with and without the flow hash, the IPv4 checksum verified in software or flagged
// good by the NIC, beside DPDK's own parser (rte_net_get_ptype) on the same frames.
#include <cstdio>

#include <rte_mbuf_ptype.h>
#include <rte_net.h>

#include "dpdk/mempool.hpp"
#include "packet/packet_meta.hpp"
#include "sections.hpp"
#include "traffic.hpp"

namespace sluice::bench {

void section_parse(Dpdk& d, const Options& o, Table& table) {
    Rng rng(o.seed);
    const std::vector<FiveTuple> flows = distinct_flows(4096, rng, 70);
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
                                      [&] { return timed_pass(d, stream, parse_unhashed, po); }});
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
    }
    if (ptypes == 0) std::printf("(rte_net_get_ptype returned no type)\n");
    check_pool(d, "parse");
}

}  // namespace sluice::bench

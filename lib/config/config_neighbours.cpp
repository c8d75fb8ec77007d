// neighbours: the ARP/ND resolver's timers (docs/config.md, "Neighbours").
#include <yaml-cpp/yaml.h>

#include "config/config_decoder.hpp"

namespace sluice::config_detail {

void decode_neighbours(Decoder& d, const YAML::Node& node, Config& config) {
    if (!d.map(node, "neighbours", {"reachable_ms", "retransmit_ms", "probes"})) return;
    NeighboursConfig& n = config.neighbours;
    d.field(node, "reachable_ms", "neighbours", false,
            [&](const YAML::Node& v) { d.integer(v, "neighbours reachable_ms", n.reachable_ms, 100, 3600000); });
    d.field(node, "retransmit_ms", "neighbours", false,
            [&](const YAML::Node& v) { d.integer(v, "neighbours retransmit_ms", n.retransmit_ms, 100, 60000); });
    d.field(node, "probes", "neighbours", false,
            [&](const YAML::Node& v) { d.integer(v, "neighbours probes", n.probes, 1, 100); });
}

}  // namespace sluice::config_detail

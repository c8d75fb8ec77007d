#include "control/snapshot_builder.hpp"

#include <stdexcept>

namespace sluice {

std::unique_ptr<Snapshot> build_snapshot(const Config& config, const std::vector<PortIdentity>& ports) {
    const auto port_named = [&](const std::string& name) -> const PortIdentity& {
        for (const PortIdentity& p : ports)
            if (p.name == name) return p;
        throw std::invalid_argument("no running port named '" + name + "'");
    };
    auto snapshot = std::make_unique<Snapshot>();
    for (const ForwardConfig& f : config.forward) {
        const PortIdentity& in = port_named(f.from);
        const PortIdentity& out = port_named(f.to);
        snapshot->forward_by_in_port[in.id] =
            ForwardEntry{.dst_mac = f.next_hop_mac, .src_mac = out.mac, .out_port = out.id, .valid = true};
    }
    return snapshot;
}

}  // namespace sluice

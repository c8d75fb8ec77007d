// sync: connection-state sync between instances (docs/config.md, "sync").
#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sys/stat.h>
#include <unistd.h>

#include <yaml-cpp/yaml.h>

#include "config/config_decoder.hpp"
#include "sync/sync_wire.hpp"

namespace sluice::config_detail {
namespace {

constexpr std::size_t kMaxKeyBytes = 4096;

// "192.0.2.1:7900" or "[2001:db8::1]:7900".
bool decode_endpoint(Decoder& d, const YAML::Node& v, const std::string& what, SyncEndpoint& out) {
    std::string text;
    if (!d.string(v, what, text)) return false;
    const auto colon = text.rfind(':');
    std::string host = colon == std::string::npos ? "" : text.substr(0, colon);
    const std::string port = colon == std::string::npos ? "" : text.substr(colon + 1);
    const bool bracketed = host.size() > 2 && host.front() == '[' && host.back() == ']';
    if (bracketed) host = host.substr(1, host.size() - 2);
    unsigned long number = 0;
    const bool port_ok = !port.empty() && port.size() <= 5 &&
                         port.find_first_not_of("0123456789") == std::string::npos &&
                         (number = std::stoul(port)) >= 1 && number <= 65535;
    IpAddress address{};
    IpFamily family = IpFamily::none;
    if (!bracketed && inet_pton(AF_INET, host.c_str(), address.bytes) == 1) family = IpFamily::ipv4;
    else if (bracketed && inet_pton(AF_INET6, host.c_str(), address.bytes) == 1) family = IpFamily::ipv6;
    if (!port_ok || family == IpFamily::none) {
        d.error(v, what + " '" + text + "' must be ADDRESS:PORT (192.0.2.1:7900 or [2001:db8::1]:7900)");
        return false;
    }
    out = SyncEndpoint{address, family, static_cast<uint16_t>(number), text};
    return true;
}

// The key's bytes (a trailing newline dropped), from a regular file no one but its owner, root or sluice's user,
// may read or write: anyone who can read the key can open holes in the firewall through the sync port.
void read_key_file(Decoder& d, const YAML::Node& v, SyncConfig& sync) {
    struct stat st {};
    if (::stat(sync.key_file.c_str(), &st) != 0) {
        d.error(v, "sync key_file '" + sync.key_file + "': " + std::strerror(errno));
        return;
    }
    if (!S_ISREG(st.st_mode)) return d.error(v, "sync key_file '" + sync.key_file + "' is not a regular file");
    if (st.st_uid != 0 && st.st_uid != ::geteuid())
        return d.error(v, "sync key_file '" + sync.key_file + "' must be owned by root (or sluice's user)");
    if (st.st_mode & (S_IRWXG | S_IRWXO))
        return d.error(v, "sync key_file '" + sync.key_file +
                              "' may be read or written by others than its owner: chmod 600 it");
    std::ifstream in(sync.key_file, std::ios::binary);
    std::string key((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in.eof() && in.fail()) return d.error(v, "sync key_file '" + sync.key_file + "' cannot be read");
    while (!key.empty() && (key.back() == '\n' || key.back() == '\r')) key.pop_back();
    if (key.size() < kSyncMinKeyBytes || key.size() > kMaxKeyBytes)
        return d.error(v, "sync key_file '" + sync.key_file + "' holds " + std::to_string(key.size()) +
                              " bytes: the key must have " + std::to_string(kSyncMinKeyBytes) + " to " +
                              std::to_string(kMaxKeyBytes) + " (e.g. head -c 32 /dev/urandom | base64)");
    sync.key = std::move(key);
}

}  // namespace

void decode_sync(Decoder& d, const YAML::Node& node, Config& config) {
    if (!d.map(node, "sync", {"enabled", "listen", "peers", "key_file", "key", "refresh_fraction", "ring_size"}))
        return;
    SyncConfig& sync = config.sync;
    sync.enabled = true;
    d.field(node, "enabled", "sync", false, [&](const YAML::Node& v) { d.boolean(v, "sync enabled", sync.enabled); });
    d.field(node, "key", "sync", false, [&](const YAML::Node& v) {
        d.error(v, "sync key: the key is not written in the config (it would be readable with it); put it in a file "
                   "only root may read and give its path as key_file");
    });
    d.field(node, "listen", "sync", true,
            [&](const YAML::Node& v) { decode_endpoint(d, v, "sync listen", sync.listen); });
    d.field(node, "peers", "sync", true, [&](const YAML::Node& v) {
        for (const YAML::Node& p : one_or_list(d, v, "sync peers")) {
            SyncEndpoint peer;
            if (!decode_endpoint(d, p, "sync peer", peer)) continue;
            if (sync.listen.family != IpFamily::none && peer.family != sync.listen.family)
                d.error(p, "sync peer '" + peer.text + "' is not of the listen address's family");
            else if (sync.listen.family != IpFamily::none && peer.address == sync.listen.address &&
                     peer.port == sync.listen.port)
                d.error(p, "sync peer '" + peer.text + "' is this instance's own listen address");
            for (const SyncEndpoint& seen : sync.peers)
                if (seen.address == peer.address && seen.port == peer.port)
                    d.error(p, "sync peer '" + peer.text + "' is listed twice");
            sync.peers.push_back(peer);
        }
    });
    d.field(node, "key_file", "sync", true, [&](const YAML::Node& v) {
        if (!d.string(v, "sync key_file", sync.key_file)) return;
        if (sync.key_file[0] != '/')
            return d.error(v, "sync key_file '" + sync.key_file + "' must be an absolute path");
        if (sync.enabled) read_key_file(d, v, sync);
    });
    d.field(node, "refresh_fraction", "sync", false, [&](const YAML::Node& v) {
        double fraction = 0;
        try {
            if (!v.IsScalar()) throw YAML::BadConversion(v.Mark());
            fraction = v.as<double>();
        } catch (const YAML::Exception&) {
            return d.error(v, "sync refresh_fraction must be a number between 0.1 and 0.9");
        }
        if (!(fraction >= 0.1 && fraction <= 0.9))
            return d.error(v, "sync refresh_fraction must be between 0.1 and 0.9, not " + v.Scalar());
        sync.refresh_fraction = fraction;
    });
    d.field(node, "ring_size", "sync", false, [&](const YAML::Node& v) {
        if (d.integer(v, "sync ring_size", sync.ring_size, 1024, 1 << 22) && (sync.ring_size & (sync.ring_size - 1)))
            d.error(v, "sync ring_size must be a power of two, not " + std::to_string(sync.ring_size));
    });
    if (sync.enabled && !config.tracks_connections())
        d.warning(node, "sync is on, but nothing tracks connections (no firewall, no service): nothing to sync");
}

}  // namespace sluice::config_detail

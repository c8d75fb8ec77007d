#include "control/telemetry.hpp"

#include <algorithm>
#include <mutex>
#include <string>
#include <string_view>

#include <rte_cycles.h>
#include <rte_telemetry.h>

#include "sync/sync_channel.hpp"

namespace sluice {
namespace {

std::mutex g_mutex;  // control plane only: the telemetry thread against attach/detach
const StatusView* g_view = nullptr;
ReloadRequester g_reload;
LineCommands g_lines;

void add_reload_record(rte_tel_data* d, const ReloadRecord& r) {
    rte_tel_data_add_dict_string(d, "path", r.running_path.c_str());
    rte_tel_data_add_dict_string(d, "hash", r.running_hash.c_str());
    rte_tel_data_add_dict_u64(d, "reloads_ok", r.successes);
    rte_tel_data_add_dict_u64(d, "reloads_failed", r.failures);
    rte_tel_data_add_dict_u64(d, "last_reload_ok", r.last_ok);
    rte_tel_data_add_dict_u64(d, "last_reload_unix", static_cast<uint64_t>(r.last_attempt_unix));
    if (r.last_errors.empty()) return;
    // The entries above (telemetry cuts the path at 127 bytes) and the reply's framing take under 1 KiB of the
    // 16 KiB reply; the errors get the rest.
    constexpr std::size_t kErrorBudget = std::size_t{15} * 1024;
    const TelemetryTextPieces split = split_for_telemetry(r.last_errors, kErrorBudget, RTE_TEL_MAX_ARRAY_ENTRIES);
    rte_tel_data* pieces = rte_tel_data_alloc();
    rte_tel_data* counts = rte_tel_data_alloc();
    if (!pieces || !counts) {
        rte_tel_data_free(pieces);
        rte_tel_data_free(counts);
        return;
    }
    rte_tel_data_start_array(pieces, RTE_TEL_STRING_VAL);
    rte_tel_data_start_array(counts, RTE_TEL_U64_VAL);
    for (const std::string& piece : split.pieces) rte_tel_data_add_array_string(pieces, piece.c_str());
    for (const uint64_t count : split.counts) rte_tel_data_add_array_u64(counts, count);
    rte_tel_data_add_dict_container(d, "last_error_pieces", pieces, 0);
    rte_tel_data_add_dict_container(d, "last_error_piece_counts", counts, 0);
}

// /sluice/stats: flat dict (22.11 telemetry cannot nest dicts) of totals, drops by reason and per-port counters.
int stats_command(const char*, const char*, rte_tel_data* d) {
    std::lock_guard lock(g_mutex);
    if (!g_view || !g_view->dataplane) return -1;
    const Dataplane& dataplane = *g_view->dataplane;
    const CounterTotals totals = dataplane.totals();
    const auto add = [d](const std::string& key, uint64_t value) { rte_tel_data_add_dict_u64(d, key.c_str(), value); };
    rte_tel_data_start_dict(d);
    uint64_t rx = 0, tx = 0;
    for (const PortReading& port : read_ports(*g_view, totals)) {
        rx += port.counters.rx_packets;
        tx += port.counters.tx_packets;
        const std::string prefix = "port/" + port.name + "/";
        for (const PortCounterInfo& info : kPortCounterInfo)
            add(prefix + std::string(info.name), port.counters.*info.member);
        for (std::size_t q = 0; q < port.rx_queue_packets.size(); ++q)
            add(prefix + "rx_queue_" + std::to_string(q) + "_packets", port.rx_queue_packets[q]);
        if (!port.device) continue;
        for (const PortDeviceCounterInfo& info : kPortDeviceCounterInfo)
            add(prefix + std::string(info.telemetry_key), (*port.device).*info.member);
    }
    if (g_view->xsk)
        for (const XskPortRecord& port : g_view->xsk->read().ports)
            for (const XskCounterInfo& info : kXskCounterInfo)
                add("port/" + port.port + "/" + std::string(info.telemetry_key), port.counters.*info.member);
    add("rx_packets", rx);
    add("tx_packets", tx);
    add("drops", totals.total_drops());
    for (std::size_t r = 1; r < kDropReasonCount; ++r)
        add("drop/" + std::string(kDropReasonInfo[r].name), totals.drops[r]);
    for (const LcoreCounterInfo& info : kLcoreCounterInfo)
        if (!info.telemetry_key.empty()) add(std::string(info.telemetry_key), totals.*info.total);
    add("tsc_hz", rte_get_tsc_hz());
    add("ring_backlog", dataplane.ring_backlog());
    uint64_t in_use = 0;
    for (const PoolReading& pool : read_pools(*g_view)) in_use += pool.in_use;
    add("mbufs_in_use", in_use);
    ConnTableReading tables;
    for (const LcoreReading& lcore : read_lcores(dataplane)) {
        if (!lcore.table) continue;
        tables.capacity += lcore.table->capacity;
        tables.ipv6_entries += lcore.table->ipv6_entries;
        tables.ipv6_capacity += lcore.table->ipv6_capacity;
    }
    add("conn_entries", totals.conn_inserts - totals.conn_expired);
    add("conn_capacity", tables.capacity);
    add("conn_ipv6_entries", tables.ipv6_entries);
    add("conn_ipv6_capacity", tables.ipv6_capacity);
    return 0;
}

// /sluice/rules: rule names and their hits as two parallel arrays (names may hold characters dict keys may not).
int rules_command(const char*, const char*, rte_tel_data* d) {
    std::lock_guard lock(g_mutex);
    if (!g_view || !g_view->rules) return -1;
    const RuleHitsRecord record = g_view->rules->read();
    rte_tel_data* names = rte_tel_data_alloc();
    rte_tel_data* hits = rte_tel_data_alloc();
    rte_tel_data* packets = rte_tel_data_alloc();
    rte_tel_data* bytes = rte_tel_data_alloc();
    rte_tel_data_start_array(names, RTE_TEL_STRING_VAL);
    rte_tel_data_start_array(hits, RTE_TEL_U64_VAL);
    rte_tel_data_start_array(packets, RTE_TEL_U64_VAL);
    rte_tel_data_start_array(bytes, RTE_TEL_U64_VAL);
    for (std::size_t r = 0; r < record.rules.size(); ++r) {
        rte_tel_data_add_array_string(names, record.rules[r].first.c_str());
        rte_tel_data_add_array_u64(hits, record.rules[r].second);
        rte_tel_data_add_array_u64(packets, record.traffic[r].first);
        rte_tel_data_add_array_u64(bytes, record.traffic[r].second);
    }
    rte_tel_data_start_dict(d);
    rte_tel_data_add_dict_container(d, "names", names, 0);
    rte_tel_data_add_dict_container(d, "hits", hits, 0);
    rte_tel_data_add_dict_container(d, "packets", packets, 0);
    rte_tel_data_add_dict_container(d, "bytes", bytes, 0);
    rte_tel_data_add_dict_u64(d, "default_hits", record.default_hits);
    return 0;
}

// /sluice/backends: every backend of every service, as parallel arrays (22.11 telemetry cannot nest dicts in lists).
int backends_command(const char*, const char*, rte_tel_data* d) {
    std::lock_guard lock(g_mutex);
    if (!g_view || !g_view->backends) return -1;
    const BackendsRecord record = g_view->backends->read();
    const auto strings = [&](const char* key, auto get) {
        rte_tel_data* a = rte_tel_data_alloc();
        rte_tel_data_start_array(a, RTE_TEL_STRING_VAL);
        for (const BackendRecord& b : record.backends) rte_tel_data_add_array_string(a, get(b).c_str());
        rte_tel_data_add_dict_container(d, key, a, 0);
    };
    const auto numbers = [&](const char* key, auto get) {
        rte_tel_data* a = rte_tel_data_alloc();
        rte_tel_data_start_array(a, RTE_TEL_U64_VAL);
        for (const BackendRecord& b : record.backends) rte_tel_data_add_array_u64(a, get(b));
        rte_tel_data_add_dict_container(d, key, a, 0);
    };
    rte_tel_data_start_dict(d);
    strings("service", [](const BackendRecord& b) { return b.service; });
    strings("backend", [](const BackendRecord& b) { return b.backend; });
    strings("mode", [](const BackendRecord& b) { return b.mode; });
    strings("health", [](const BackendRecord& b) {
        return std::string(!b.checked ? "unchecked" : b.up ? "up" : "down");
    });
    strings("last_error", [](const BackendRecord& b) { return b.last_error; });
    numbers("weight", [](const BackendRecord& b) { return uint64_t{b.weight}; });
    numbers("new_connections", [](const BackendRecord& b) { return b.new_connections; });
    numbers("active_connections", [](const BackendRecord& b) { return b.active_connections; });
    numbers("packets", [](const BackendRecord& b) { return b.packets; });
    numbers("bytes", [](const BackendRecord& b) { return b.bytes; });
    // nat: the fullest pool address's ports in use, of the capacity each pool address has (0 and 0 otherwise).
    numbers("nat_ports_in_use", [](const BackendRecord& b) {
        return b.nat_ports_in_use.empty() ? 0 : *std::max_element(b.nat_ports_in_use.begin(), b.nat_ports_in_use.end());
    });
    numbers("nat_ports_capacity", [](const BackendRecord& b) { return b.nat_ports_capacity; });
    return 0;
}

// /sluice/config: which config runs (path, hash) and how reloads went.
int config_command(const char*, const char*, rte_tel_data* d) {
    std::lock_guard lock(g_mutex);
    if (!g_view || !g_view->reload) return -1;
    rte_tel_data_start_dict(d);
    add_reload_record(d, g_view->reload->read());
    return 0;
}

// /sluice/reload: reloads the config file now (as SIGHUP does) and answers with the outcome.
int reload_command(const char*, const char*, rte_tel_data* d) {
    ReloadRequester reload;
    {
        std::lock_guard lock(g_mutex);
        reload = g_reload;
    }
    if (!reload) return -1;
    const ReloadRecord outcome = reload();  // outside the lock: the control thread may detach meanwhile
    rte_tel_data_start_dict(d);
    add_reload_record(d, outcome);
    return 0;
}

// A telemetry string holds RTE_TEL_MAX_STRING_LEN - 1 characters and cuts the rest silently: a longer line goes
// out as several, broken at spaces, the later ones indented under it.
void add_wrapped_line(rte_tel_data* d, const std::string& line) {
    constexpr std::size_t kWidth = RTE_TEL_MAX_STRING_LEN - 1;
    const std::size_t indent = std::min<std::size_t>(line.find_first_not_of(' '), 8) + 4;
    std::string rest = line;
    while (rest.size() > kWidth) {
        std::size_t cut = rest.rfind(' ', kWidth);
        if (cut == std::string::npos || cut <= indent) cut = kWidth;  // no space to break at: cut the word
        rte_tel_data_add_array_string(d, rest.substr(0, cut).c_str());
        const std::size_t next = rest.find_first_not_of(' ', cut);
        rest = std::string(indent, ' ') + (next == std::string::npos ? "" : rest.substr(next));
    }
    rte_tel_data_add_array_string(d, rest.c_str());
}

// /sluice/explain,PROTO SRC:PORT DST:PORT [PORT]: what the live tables would do with such a packet.
// /sluice/explain, /sluice/flows, /sluice/dryrun, /sluice/routes, /sluice/neighbours: lines from the control thread.
int lines_command(const char* cmd, const char* params, rte_tel_data* d) {
    LinesRequester requester;
    {
        std::lock_guard lock(g_mutex);
        const std::string name = cmd;
        requester = name == "/sluice/explain"      ? g_lines.explain
                    : name == "/sluice/flows"      ? g_lines.flows
                    : name == "/sluice/drain"      ? g_lines.drain
                    : name == "/sluice/routes"     ? g_lines.routes
                    : name == "/sluice/neighbours" ? g_lines.neighbours
                                                   : g_lines.dry_run;
    }
    if (!requester) return -1;
    const std::vector<std::string> lines = requester(params ? params : "");
    rte_tel_data_start_array(d, RTE_TEL_STRING_VAL);
    for (const std::string& line : lines) add_wrapped_line(d, line);
    return 0;
}

// /sluice/sync: the state-sync channel's counters, and its peers as parallel arrays.
int sync_command(const char*, const char*, rte_tel_data* d) {
    std::lock_guard lock(g_mutex);
    if (!g_view) return -1;
    rte_tel_data_start_dict(d);
    rte_tel_data_add_dict_u64(d, "enabled", g_view->sync != nullptr);
    if (!g_view->sync) return 0;
    const SyncChannel& sync = *g_view->sync;
    rte_tel_data_add_dict_u64(d, "epoch", sync.epoch());
    rte_tel_data_add_dict_u64(d, "resync_pending", sync.resync_pending());
    const SyncCounters& c = sync.counters();
#define SLUICE_SYNC_COUNTER_TELEMETRY(member, family, help) \
    rte_tel_data_add_dict_u64(d, #member, c.member.load(std::memory_order_relaxed));
    SLUICE_SYNC_COUNTERS(SLUICE_SYNC_COUNTER_TELEMETRY)
#undef SLUICE_SYNC_COUNTER_TELEMETRY
    const std::vector<SyncPeerStatus> peers = sync.peers();
    const auto array = [&](const char* key, auto add, bool strings) {
        rte_tel_data* a = rte_tel_data_alloc();
        rte_tel_data_start_array(a, strings ? RTE_TEL_STRING_VAL : RTE_TEL_U64_VAL);
        for (const SyncPeerStatus& p : peers) add(a, p);
        rte_tel_data_add_dict_container(d, key, a, 0);
    };
    array(
        "peer", [](rte_tel_data* a, const SyncPeerStatus& p) { rte_tel_data_add_array_string(a, p.address.c_str()); },
        true);
    array(
        "up", [](rte_tel_data* a, const SyncPeerStatus& p) { rte_tel_data_add_array_u64(a, p.up); }, false);
    array(
        "lag_ms",
        [](rte_tel_data* a, const SyncPeerStatus& p) {
            rte_tel_data_add_array_u64(a, p.silence_seconds < 0 ? UINT64_MAX
                                                                : static_cast<uint64_t>(p.silence_seconds * 1000));
        },
        false);
    array(
        "instance", [](rte_tel_data* a, const SyncPeerStatus& p) { rte_tel_data_add_array_u64(a, p.instance); }, false);
    array(
        "sequence", [](rte_tel_data* a, const SyncPeerStatus& p) { rte_tel_data_add_array_u64(a, p.highest_sequence); },
        false);
    return 0;
}

// /sluice/bgp: VIP announcements through BIRD: state and counts, the VIPs as parallel arrays.
int bgp_command(const char*, const char*, rte_tel_data* d) {
    std::lock_guard lock(g_mutex);
    if (!g_view || !g_view->bgp) return -1;
    const BgpRecord r = g_view->bgp->read();
    rte_tel_data_start_dict(d);
    rte_tel_data_add_dict_u64(d, "enabled", r.enabled);
    rte_tel_data_add_dict_u64(d, "draining", r.draining);
    rte_tel_data_add_dict_u64(d, "drain_ends_unix", static_cast<uint64_t>(r.drain_ends_unix));
    rte_tel_data_add_dict_u64(d, "in_sync", r.in_sync);
    rte_tel_data_add_dict_u64(d, "reconfigures", r.reconfigures);
    rte_tel_data_add_dict_u64(d, "reconfigure_failures", r.reconfigure_failures);
    rte_tel_data_add_dict_string(d, "last_error", r.last_error.substr(0, 127).c_str());
    const auto array = [&](const char* key, auto get, bool strings) {
        rte_tel_data* a = rte_tel_data_alloc();
        rte_tel_data_start_array(a, strings ? RTE_TEL_STRING_VAL : RTE_TEL_U64_VAL);
        for (const BgpVipRecord& v : r.vips) get(a, v);
        rte_tel_data_add_dict_container(d, key, a, 0);
    };
    array(
        "vip", [](rte_tel_data* a, const BgpVipRecord& v) { rte_tel_data_add_array_string(a, v.vip.c_str()); }, true);
    array(
        "wanted", [](rte_tel_data* a, const BgpVipRecord& v) { rte_tel_data_add_array_u64(a, v.wanted); }, false);
    array(
        "announced", [](rte_tel_data* a, const BgpVipRecord& v) { rte_tel_data_add_array_u64(a, v.announced); }, false);
    array(
        "announcements", [](rte_tel_data* a, const BgpVipRecord& v) { rte_tel_data_add_array_u64(a, v.announcements); },
        false);
    array(
        "withdrawals", [](rte_tel_data* a, const BgpVipRecord& v) { rte_tel_data_add_array_u64(a, v.withdrawals); },
        false);
    return 0;
}

}  // namespace

TelemetryTextPieces split_for_telemetry(const std::vector<std::string>& texts, std::size_t json_budget_bytes,
                                        std::size_t max_pieces) {
    static constexpr std::size_t kPiece = RTE_TEL_MAX_STRING_LEN - 1;
    // Bytes a piece takes in the JSON reply: quotes and comma, and escapes for quotes, backslashes and controls.
    const auto json_bytes = [](std::string_view text) {
        std::size_t n = 3;
        for (const unsigned char c : text) n += c == '"' || c == '\\' ? 2 : c < 0x20 ? 6 : 1;
        return n;
    };
    const auto cut = [](const std::string& text) {
        std::vector<std::string> out;
        for (std::size_t at = 0; at < text.size() || out.empty();) {
            std::size_t n = std::min(kPiece, text.size() - at);
            // Never split a UTF-8 character: a half would make the reply invalid JSON.
            while (at + n < text.size() && n > 1 && (static_cast<unsigned char>(text[at + n]) & 0xc0) == 0x80) --n;
            out.push_back(text.substr(at, n));
            at += n;
        }
        return out;
    };
    // The line that stands for the errors that do not fit.
    const auto left_out = [](std::size_t n) {
        return std::to_string(n) + " more error(s) not shown here: sluice --check-config FILE prints them all";
    };
    TelemetryTextPieces result;
    std::size_t used = 0;
    for (std::size_t i = 0; i < texts.size(); ++i) {
        std::vector<std::string> pieces = cut(texts[i]);
        std::size_t bytes = 4;  // its count
        for (const std::string& p : pieces) bytes += json_bytes(p);
        const std::size_t reserve = i + 1 < texts.size() ? json_bytes(left_out(texts.size())) + 4 : 0;
        if (used + bytes + reserve > json_budget_bytes || result.pieces.size() + pieces.size() + 1 > max_pieces) {
            result.pieces.push_back(left_out(texts.size() - i));
            result.counts.push_back(1);
            break;
        }
        used += bytes;
        result.counts.push_back(pieces.size());
        for (std::string& p : pieces) result.pieces.push_back(std::move(p));
    }
    return result;
}

void register_telemetry_commands() {
    rte_telemetry_register_cmd(
        "/sluice/stats", stats_command,
        "sluice counters: per-port packets and bytes, drops by reason, lcore polls. No parameters");
    rte_telemetry_register_cmd(
        "/sluice/backends", backends_command,
        "Load-balancer backends: service, health, weight, connections, packets, bytes. No parameters");
    rte_telemetry_register_cmd("/sluice/rules", rules_command,
                               "Firewall rules in order with the new connections each decided. No parameters");
    rte_telemetry_register_cmd("/sluice/config", config_command,
                               "The running config's path and hash, and reload counts. No parameters");
    rte_telemetry_register_cmd("/sluice/explain", lines_command,
                               "What sluice would do with a packet. Parameters: PROTO SRC:PORT DST:PORT [PORT]");
    rte_telemetry_register_cmd("/sluice/flows", lines_command,
                               "Tracked connections (at most 100 listed). Parameters: [ADDRESS] [port N] [PROTO]");
    rte_telemetry_register_cmd(
        "/sluice/dryrun", lines_command,
        "What a candidate config would change for live traffic, applying nothing. Parameters: [FILE]");
    rte_telemetry_register_cmd("/sluice/bgp", bgp_command,
                               "VIP announcements through BIRD: wanted, announced, counts, drain state. No parameters");
    rte_telemetry_register_cmd("/sluice/sync", sync_command,
                               "State sync with peer instances: counters, peers up, lag. No parameters");
    rte_telemetry_register_cmd(
        "/sluice/drain", lines_command,
        "Withdraw every VIP from BGP, keep forwarding bgp.drain_seconds, then stop. No parameters");
    rte_telemetry_register_cmd(
        "/sluice/routes", lines_command,
        "The route table: prefix, source, next hops and whether each is resolved. No parameters");
    rte_telemetry_register_cmd(
        "/sluice/neighbours", lines_command,
        "sluice's ARP/ND table: address, port, MAC, state and age, next hop or host. No parameters");
    rte_telemetry_register_cmd("/sluice/reload", reload_command,
                               "Reload the config file now, as SIGHUP does; answers with the outcome. No parameters");
}

void attach_telemetry(const StatusView* view, ReloadRequester reload, LineCommands lines) {
    std::lock_guard lock(g_mutex);
    g_view = view;
    g_reload = std::move(reload);
    g_lines = std::move(lines);
}

}  // namespace sluice

// Section reload: what the control thread does when the config file changes (app/sluice/daemon.cpp,
// Daemon::apply_reload): load_config_file (YAML, validation, prefix files), restart_required_changes,
// build_snapshot with the daemon's live state (rule ids and backend registry, copied and committed after), then
// Dataplane::publish (one atomic store and an RCU grace period) and the old snapshot freed. Not timed: what the
// daemon does after that (neighbour and health-check targets, XDP steering, BGP, logging), none of which builds a
// table.
//
// The config: the 10k ClassBench-style rules of section classify (all allow, default allow), the three services of
// section lb (Maglev 65537 each) and two prefix sets:
// - blocklist: kBlocklistPrefixes prefixes from a file, early_drop (an LPM table on the RX lcores, the use
//   docs/config.md sizes for 1M prefixes). Not referenced by a rule: a rule over a set expands into one rte_acl rule
//   per prefix (config.cpp decode_address copies the set into the rule, AclClassifier expands the cross product),
//   so one rule over it would mean 100k more rte_acl rules (FIELD-NOTES: ~40 s and ~370 MiB to build).
// - partners: kPartnerPrefixes prefixes inline, referenced by one rule (tcp to port 22): kPartnerPrefixes rte_acl
//   rules, the way an operator lists the networks an allow rule admits.
// Reference: rte_acl_create + rte_acl_add_rules + rte_acl_build alone on the same rte_acl rules, built here from
// the loaded config (see reference_acl_rules), interleaved with the reloads. Beside them, yaml-cpp alone on the same
// file's text: with the rules' build as sluice does it today, it makes the least a reload of changed rules takes
// (the floor row), since the rules are not all known before the YAML is parsed, nor built before they are.
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include <rte_acl.h>
#include <rte_byteorder.h>
#include <rte_cycles.h>
#include <rte_ether.h>
#include <rte_lcore.h>

#include <yaml-cpp/yaml.h>

#include "config/config.hpp"
#include "control/snapshot_builder.hpp"
#include "reload_reference.hpp"
#include "sections.hpp"
#include "services.hpp"
#include "traffic.hpp"
#include "workers.hpp"

namespace sluice::bench {
namespace {

constexpr uint32_t kReloadRules = 10000;
constexpr uint32_t kBlocklistPrefixes = 100000;
constexpr uint32_t kPartnerPrefixes = 1000;
constexpr uint64_t kWindowUs = 1000;  // the worker counts its packets per window of this length
constexpr auto kQuietBeforeReload = std::chrono::milliseconds(100);  // the worker's reference windows
constexpr double kReloadBudgetSeconds = 90;  // for the repetitions: fewer than --reps when they would take longer
const char* const kReloadPort = "bench";

// Distinct random IPv4 prefixes, lengths drawn by pick_length, outside 10/8, 127/8 and 192.0.2/24 (the
// benchmark's own addresses).
std::vector<Prefix> random_prefixes(std::size_t count, Rng& rng, const std::function<uint8_t(Rng&)>& pick_length) {
    std::vector<Prefix> out;
    out.reserve(count);
    std::unordered_set<uint64_t> seen;
    seen.reserve(count * 2);
    while (out.size() < count) {
        const uint8_t len = pick_length(rng);
        const uint32_t a = static_cast<uint32_t>(rng()) & prefix_mask(len);
        if ((a >> 24) == 10 || (a >> 24) == 127 || (a >> 8) == 0xc00002) continue;
        if (!seen.insert(uint64_t{a} << 8 | len).second) continue;
        out.push_back(Prefix{v4(a), len});
    }
    return out;
}

std::string prefix_text(const Prefix& p) {
    return to_string(p.address, IpFamily::ipv4) + "/" + std::to_string(p.length);
}

std::string ports_text(uint16_t lo, uint16_t hi) {
    return lo == hi ? std::to_string(lo) : "\"" + std::to_string(lo) + "-" + std::to_string(hi) + "\"";
}

std::string mac_text(const rte_ether_addr& mac) {
    char buf[RTE_ETHER_ADDR_FMT_SIZE];
    rte_ether_format_addr(buf, sizeof buf, &mac);
    return buf;
}

// Writes dir/sluice.yaml (and the blocklist's file beside it) for section reload, with the services of
// add_services; returns the config's path.
std::string write_reload_config(const std::string& dir, const std::vector<RuleSpec>& rules,
                                const std::vector<Prefix>& partners, const std::vector<Prefix>& blocklist) {
    {
        std::ofstream f(dir + "/blocklist.txt");
        f << "# " << blocklist.size() << " prefixes written by sluice_bench\n";
        for (const Prefix& p : blocklist) f << prefix_text(p) << "\n";
        if (!f) fail("cannot write " + dir + "/blocklist.txt");
    }
    Config lb;
    add_services(lb);
    std::ofstream y(dir + "/sluice.yaml");
    y << "# Written by sluice_bench (section reload)\n"
      << "ports:\n  - {name: " << kReloadPort << ", device: net_null0}\n"
      << "lcores:\n  - {id: 1, roles: [rx, worker]}\n"
      << "forward:\n  - {from: " << kReloadPort << ", to: " << kReloadPort << ", next_hop_mac: \"02:00:00:00:00:09\"}\n"
      << "firewall:\n  default: allow\n  prefix_sets:\n"
      << "    - {name: blocklist, file: blocklist.txt, early_drop: true}\n"
      << "    - name: partners\n      prefixes: [";
    for (std::size_t i = 0; i < partners.size(); ++i) y << (i ? ", " : "") << prefix_text(partners[i]);
    y << "]\n  rules:\n"
      << "    - {name: partners-ssh, source: \"@partners\", protocol: tcp, destination_ports: 22, action: allow}\n";
    for (std::size_t i = 0; i < rules.size(); ++i) {
        const RuleSpec& r = rules[i];
        y << "    - {name: r" << i;
        if (r.src_len) y << ", source: " << dotted(r.src) << "/" << unsigned{r.src_len};
        if (r.dst_len) y << ", destination: " << dotted(r.dst) << "/" << unsigned{r.dst_len};
        if (r.proto_mask) y << ", protocol: " << unsigned{r.proto};
        if (r.sport_lo != 0 || r.sport_hi != 65535) y << ", source_ports: " << ports_text(r.sport_lo, r.sport_hi);
        if (r.dport_lo != 0 || r.dport_hi != 65535) y << ", destination_ports: " << ports_text(r.dport_lo, r.dport_hi);
        y << ", action: allow}\n";
    }
    y << "load_balancer:\n  nat_pool: [";
    for (std::size_t i = 0; i < lb.load_balancer.nat_pool.size(); ++i)
        y << (i ? ", " : "") << "\""
          << to_string(lb.load_balancer.nat_pool[i].address, lb.load_balancer.nat_pool_families[i]) << "\"";
    y << "]\n  tunnel_source: " << to_string(*lb.load_balancer.tunnel_source_v4, IpFamily::ipv4) << "\nservices:\n";
    for (const ServiceConfig& s : lb.services) {
        y << "  - name: " << s.name << "\n    vip: " << to_string(s.vip, s.family) << "\n    port: " << s.port
          << "\n    protocol: tcp\n    mode: " << lb_mode_name(s.mode) << "\n    table_size: " << s.table_size
          << "\n    backends:\n";
        for (const BackendConfig& b : s.backends) {
            y << "      - {address: " << to_string(b.address, b.family);
            if (b.port) y << ", port: " << b.port;
            if (b.has_mac) y << ", mac: \"" << mac_text(b.mac) << "\"";
            y << "}\n";
        }
    }
    if (!y) fail("cannot write " + dir + "/sluice.yaml");
    return dir + "/sluice.yaml";
}

// A temporary directory, removed with what is in it when it goes.
struct TempDir {
    std::string path;
    TempDir() {
        char name[] = "/tmp/sluice_bench_reload.XXXXXX";
        if (!mkdtemp(name)) fail(std::string("mkdtemp: ") + std::strerror(errno));
        path = name;
    }
    ~TempDir() {
        std::error_code ignored;
        std::filesystem::remove_all(path, ignored);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
};

// The section's state from the generated config to the rows: the running config and the daemon's live state, the
// reference's rules, the worker on the second lcore with its windows, and the timings of the repetitions.
class ReloadSection {
public:
    ReloadSection(Dpdk& d, const Options& o) : d_(d), o_(o), rng_(o.seed + 30) {}

    void run(Table& table) {
        write_and_load();
        check_reference();
        plan_repetitions();
        start_worker();
        const std::vector<std::vector<double>> r = repeat();
        add_rows(table, r);
        if (with_worker_) add_worker_rows(table);
        dataplane_.reset();
        check_pool(d_, "reload");
    }

private:
    struct Span {
        uint64_t begin, end;  // TSC: load_config_file starts, the old snapshot is freed
    };

    // keep: the running snapshot's firewall, whose tables the build may keep as the daemon's does (null: none kept,
    // everything is built, as the target's figure has it).
    std::unique_ptr<Snapshot> build(const Config& config, StableRuleIds* ids, BackendRegistry* registry,
                                    const FirewallTables* keep = nullptr) {
        try {
            LiveState live{ids, registry, healthy_, nullptr};
            if (keep) {
                live.blocklist = keep->blocklist;
                live.acl_v4 = keep->acl_v4;
                live.acl_v6 = keep->acl_v6;
            }
            return build_snapshot(config, ports_, config.lcores.size(), socket_, 1, live);
        } catch (const std::exception& e) {
            fail(std::string("reload: build_snapshot: ") + e.what());
        }
    }

    void write_and_load() {
        rules_ = generate_rules(kReloadRules, o_.seed);  // section classify's 10k rules
        // Blocklist: 60 % single addresses, 30 % /24s, 10 % /16-/23 (a mix like public blocklists', e.g. FireHOL's).
        blocklist_ = random_prefixes(kBlocklistPrefixes, rng_, [](Rng& r) {
            const uint32_t p = uniform(r, 0, 9);
            return static_cast<uint8_t>(p < 6 ? 32 : p < 9 ? 24 : uniform(r, 16, 23));
        });
        partners_ =
            random_prefixes(kPartnerPrefixes, rng_, [](Rng& r) { return static_cast<uint8_t>(uniform(r, 16, 28)); });
        path_ = write_reload_config(dir_.path, rules_, partners_, blocklist_);

        const uint64_t load_start = rte_rdtsc();
        ConfigResult loaded = load_config_file(path_);
        first_load_ms_ = cycles_to_ms(d_, rte_rdtsc() - load_start);
        if (!loaded.config)
            fail("reload: the generated config is refused: " +
                 (loaded.errors.empty() ? std::string() : loaded.errors.front().to_string()));
        running_ = std::move(*loaded.config);
        ports_ = {PortIdentity{kReloadPort, d_.port, d_.port_mac}};
        const uint64_t first_start = rte_rdtsc();
        first_ = build(running_, &rule_ids_, &backends_);
        first_ms_ = cycles_to_ms(d_, rte_rdtsc() - first_start);
        if (!first_->firewall->acl_v4) fail("reload: the snapshot has no IPv4 rte_acl context");
    }

    // The reference, checked against sluice's context on a trace of the ClassBench rules (with tuples from the
    // partner networks to port 22 among them).
    void check_reference() {
        const std::size_t sluice_acl_rules = first_->firewall->acl_v4->expanded_rule_count();
        reference_rules_ = reference_acl_rules(running_.firewall);
        std::vector<TraceTuple> trace = generate_trace(rules_, 65536, o_.seed);
        for (std::size_t i = 0; i < trace.size(); i += 16) {
            const Prefix& p = partners_[uniform(rng_, 0, kPartnerPrefixes - 1)];
            trace[i] = TraceTuple{
                rte_be_to_cpu_32(p.address.words[0]) | (static_cast<uint32_t>(rng_()) & ~prefix_mask(p.length)),
                static_cast<uint32_t>(rng_()), static_cast<uint16_t>(uniform(rng_, 1024, 65535)), 22, IPPROTO_TCP};
        }
        rte_acl_ctx* reference_ctx = build_reference_acl(reference_rules_, ref_cycles_);
        const std::size_t mismatches = reference_mismatches(reference_ctx, *first_->firewall->acl_v4, trace);
        rte_acl_free(reference_ctx);
        reference_valid_ = mismatches == 0 && reference_rules_.size() == sluice_acl_rules;
        std::printf("reload: config %s: %zu rules (%zu rte_acl rules), prefix sets blocklist (%zu prefixes from a "
                    "file, early_drop) and partners (%zu, one rule); %zu services; first build %.0f ms. Reference: "
                    "%zu rte_acl rules, built in %.0f ms; %zu of %zu trace tuples classified differently\n",
                    path_.c_str(), running_.firewall.rules.size(), sluice_acl_rules, blocklist_.size(),
                    partners_.size(), running_.services.size(), first_ms_, reference_rules_.size(),
                    cycles_to_ms(d_, ref_cycles_), mismatches, trace.size());
        if (!reference_valid_)
            std::printf("WARNING: reload: the reference's rte_acl rules are not sluice's (rule count or results "
                        "differ): the layout copied from acl_layout.hpp has drifted; the ratios are left out\n");
    }

    // The pieces' own builds: the rules without the early-drop set, the early-drop set without rules (neither with
    // services; the set once, before the repetitions: it can take as long as the reload), and the load balancer's
    // tables. Then how many repetitions fit in the section's budget.
    void plan_repetitions() {
        rules_only_ = running_;
        sets_only_ = running_;
        std::erase_if(rules_only_.firewall.prefix_sets, [](const PrefixSetConfig& s) { return s.early_drop; });
        rules_only_.services.clear();
        sets_only_.firewall.rules.clear();
        sets_only_.services.clear();
        const uint64_t sets_start = rte_rdtsc();
        std::unique_ptr<Snapshot> sets_built = build(sets_only_, nullptr, nullptr);
        set_ms_ = cycles_to_ms(d_, rte_rdtsc() - sets_start);
        const std::size_t blocklisted = sets_built->firewall->blocklist_prefixes;
        sets_built.reset();
        // The first build and the reference's warm the caches and the allocator: no warm-up round. Each repetition
        // takes about a reload (a load and a build), a reference, a rules-only build, a reload that keeps the
        // tables (a load), yaml-cpp alone (less than a load) and two quiet stretches.
        const double rep_seconds = (first_ms_ + 3 * first_load_ms_ + 2 * cycles_to_ms(d_, ref_cycles_)) / 1e3 +
                                   2 * kQuietBeforeReload.count() / 1e3;
        reps_ = static_cast<unsigned>(std::clamp<double>(std::floor(kReloadBudgetSeconds / rep_seconds), 1, o_.reps));
        char why[160] = "";
        if (reps_ < o_.reps)
            std::snprintf(why, sizeof why,
                          " (fewer than --reps: one takes about %.0f s, the section keeps within %.0f s)", rep_seconds,
                          kReloadBudgetSeconds);
        std::printf("reload: the early-drop set alone (%zu prefixes) built in %.0f ms; %u repetitions%s\n", blocklisted,
                    set_ms_, reps_, why);
        std::fflush(stdout);
    }

    // A worker on the second lcore forwards packets of established connections (no service, half replies, through
    // stateful_burst + forward_burst) on whatever snapshot is current, counting them per window.
    void start_worker() {
        worker_lcore_ = second_lcore();
        with_worker_ = worker_lcore_ < RTE_MAX_LCORE;
        live_ = o_.lb_conns;
        dataplane_ =
            bench_dataplane(d_, {with_worker_ ? worker_lcore_ : rte_get_main_lcore()}, 2 * live_, std::move(first_));
        ctx_ = worker_contexts(*dataplane_).front();
        const std::vector<FiveTuple> flows = distinct_flows(live_, rng_, 70);
        refused_ = insert_established(*ctx_->conn_table, flows);
        stream_ = random_packets(flows, o_.packets, rng_);
        window_tsc_ = d_.tsc_hz / (1'000'000 / kWindowUs);
        windows_.assign(600'000'000 / kWindowUs, 0);  // 10 minutes
        window_timed_.assign(windows_.size(), 0);
        window_cycles_.assign(windows_.size(), 0);
        worker_ = WorkerRun{.d = &d_,
                            .ctx = ctx_,
                            .stream = &stream_,
                            .start_tsc = rte_rdtsc(),
                            .stop = &stop_,
                            .window_tsc = window_tsc_,
                            .windows = &windows_,
                            .window_cycles = &window_cycles_,
                            .window_timed = &window_timed_};
        drops_before_ = ctx_->counters.drops;
        if (with_worker_) launch_worker(worker_, worker_lcore_);
        else
            std::printf("reload: one lcore only: the forwarded rate during a reload is not measured (give the EAL a "
                        "second lcore, e.g. -- -l 0,1)\n");
    }

    double reload() {
        std::this_thread::sleep_for(kQuietBeforeReload);
        const uint64_t t0 = rte_rdtsc();
        ConfigResult candidate = load_config_file(path_);
        const uint64_t t1 = rte_rdtsc();
        if (!candidate.config) fail("reload: the config is refused on reload");
        if (!restart_required_changes(running_, *candidate.config).empty()) fail("reload: the config needs a restart");
        StableRuleIds ids = rule_ids_;
        BackendRegistry registry = backends_;
        std::unique_ptr<Snapshot> next = build(*candidate.config, &ids, &registry);
        const uint64_t t2 = rte_rdtsc();
        std::unique_ptr<Snapshot> old = dataplane_->publish(std::move(next));
        const uint64_t t3 = rte_rdtsc();
        rule_ids_ = std::move(ids);
        backends_ = std::move(registry);
        running_ = std::move(*candidate.config);
        old.reset();
        const uint64_t t4 = rte_rdtsc();
        spans_.push_back(Span{t0, t4});
        load_ms_.push_back(cycles_to_ms(d_, t1 - t0));
        build_ms_.push_back(cycles_to_ms(d_, t2 - t1));
        publish_ms_.push_back(cycles_to_ms(d_, t3 - t2));
        free_ms_.push_back(cycles_to_ms(d_, t4 - t3));
        return cycles_to_ms(d_, t3 - t0);
    }

    // The same config again, as the daemon reloads it: its tables are kept (nothing in them changed), so this is
    // what a reload of services or prefix sets alone costs beside the YAML.
    double reload_kept() {
        std::this_thread::sleep_for(kQuietBeforeReload);
        const uint64_t t0 = rte_rdtsc();
        ConfigResult candidate = load_config_file(path_);
        if (!candidate.config) fail("reload: the config is refused on reload");
        StableRuleIds ids = rule_ids_;
        BackendRegistry registry = backends_;
        std::unique_ptr<Snapshot> next =
            build(*candidate.config, &ids, &registry, dataplane_->snapshot().firewall.get());
        if (next->firewall->acl_v4 != dataplane_->snapshot().firewall->acl_v4)
            fail("reload: the same rules were built again instead of kept");
        std::unique_ptr<Snapshot> old = dataplane_->publish(std::move(next));
        const uint64_t t1 = rte_rdtsc();
        old.reset();
        kept_ms_.push_back(cycles_to_ms(d_, t1 - t0));
        return kept_ms_.back();
    }

    double reference() {
        uint64_t cycles = 0;
        rte_acl_free(build_reference_acl(reference_rules_, cycles));
        return cycles_to_ms(d_, cycles);
    }

    // The pieces' builds are timed without freeing what they built.
    double piece(std::vector<double>& out, const Config& config) {
        const uint64_t t0 = rte_rdtsc();
        const std::unique_ptr<Snapshot> built = build(config, nullptr, nullptr);
        out.push_back(cycles_to_ms(d_, rte_rdtsc() - t0));
        return out.back();
    }

    // yaml-cpp alone on the same file's text (YAML::Load, the tree freed): every reload of this file pays it
    // before a table is built, so with today's rules' build beside it, it is the least a reload of changed rules
    // takes. The file is read once (read_yaml_text), outside the timed region.
    double yaml_alone() {
        const uint64_t t0 = rte_rdtsc();
        { const YAML::Node root = YAML::Load(yaml_text_); }
        yaml_ms_.push_back(cycles_to_ms(d_, rte_rdtsc() - t0));
        return yaml_ms_.back();
    }

    void read_yaml_text() {
        std::ifstream in(path_);
        if (!in) fail("reload: cannot read " + path_);
        yaml_text_ = std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }

    double lb_piece() {
        const uint64_t t0 = rte_rdtsc();
        BackendRegistry registry = backends_;
        const std::shared_ptr<const LbTables> built = build_lb_tables(running_, registry, healthy_, socket_);
        lb_ms_.push_back(cycles_to_ms(d_, rte_rdtsc() - t0));
        return lb_ms_.back();
    }

    // The reloads interleaved with their reference and pieces, then the worker stopped.
    std::vector<std::vector<double>> repeat() {
        read_yaml_text();
        const uint64_t t_start = rte_rdtsc();
        auto r = interleaved(reps_,
                             {[&] { return reload(); }, [&] { return reference(); },
                              [&] { return piece(rules_ms_, rules_only_); }, [&] { return lb_piece(); },
                              [&] { return reload_kept(); }, [&] { return yaml_alone(); }},
                             false);
        std::this_thread::sleep_for(kQuietBeforeReload);
        stop_.store(true, std::memory_order_relaxed);
        if (with_worker_) wait_worker(worker_lcore_);
        std::printf("reload: %zu reloads with their references and pieces in %.1f s\n", spans_.size(),
                    seconds_since(d_, t_start));
        return r;
    }

    void add_rows(Table& table, const std::vector<std::vector<double>>& r) {
        const Stat ref = stat_of(r[1]);
        const std::string acl = "rte_acl create+add+build alone, " + ordinal_count(reference_rules_.size()) + " rules";
        const std::string what = "reload " + ordinal_count(kReloadRules) + " rules + " +
                                 ordinal_count(kBlocklistPrefixes) + "-prefix early-drop set";
        const auto add = [&](const char* id, const std::string& measurement, const std::vector<double>& v) {
            table.add(Row{.id = id,
                          .measurement = measurement,
                          .unit = "ms",
                          .reference = acl,
                          .ref = ref,
                          .sluice = stat_of(v),
                          .has_ref = reference_valid_});
        };
        add("reload", what + ": YAML -> published", r[0]);
        if (reps_ != o_.reps)
            table.note("reload: median of " + std::to_string(reps_) + " repetitions, not " + std::to_string(o_.reps) +
                       " (see above).");
        add("reload-load", "  of which load_config_file (YAML, checks, 100k-line file)", load_ms_);
        add("reload-build", "  of which build_snapshot (+ restart check, live state)", build_ms_);
        add("reload-publish", "  of which publish (swap, RCU grace period)", publish_ms_);
        add("reload-free", "then freeing the old snapshot", free_ms_);
        add("reload-rules", "build_snapshot, rules only (no early-drop set, services)", rules_ms_);
        add("reload-set", "build_snapshot, early-drop set only (LPM, 100k), 1 run", {set_ms_});
        add("reload-lb", "build_lb_tables (3 services, Maglev 65537)", lb_ms_);
        add("reload-kept", "the same config reloaded as the daemon does (rte_acl, early-drop tables kept)", kept_ms_);
        add("reload-yaml", "yaml-cpp alone: YAML::Load of the same file's text (tree freed)", yaml_ms_);
        // interleaved() ran each piece once per repetition, in the same order: the floor pairs them up.
        if (rules_ms_.size() != reps_ || yaml_ms_.size() != reps_)
            fail("reload: the pieces' repetitions do not pair up");
        std::vector<double> floor_ms(reps_);
        for (std::size_t i = 0; i < reps_; ++i) floor_ms[i] = rules_ms_[i] + yaml_ms_[i];
        add("reload-floor", "floor of a reload of changed rules: rules' build + yaml-cpp alone", floor_ms);
    }

    // Per reload: the median window in the quiet stretch before it (nothing but the worker running), the lowest
    // window in that stretch (the noise floor), and the lowest and the median window from load_config_file to the
    // old snapshot freed; and the stage's cycles per packet before and during.
    struct WindowFigures {
        std::vector<double> before, quiet_min, during_min, during_median, cycles_before, cycles_during;
    };

    // The stage's cycles per packet over a range of windows, bursts the OS preempted left out: what the reload
    // costs the worker through the caches and memory, apart from the CPU time it lost on a shared machine.
    double cycles_per_packet(std::size_t from, std::size_t to) const {
        uint64_t cycles = 0, packets = 0;
        for (std::size_t w = from; w < to; ++w) cycles += window_cycles_[w], packets += window_timed_[w];
        return packets ? static_cast<double>(cycles) / static_cast<double>(packets) : 0.0;
    }

    WindowFigures window_figures() const {
        const double per_window_to_mpps = 1e6 / static_cast<double>(kWindowUs) / 1e6;
        const auto window_of = [&](uint64_t tsc) {
            return static_cast<std::size_t>((tsc - worker_.start_tsc) / window_tsc_);
        };
        const auto windows_from = [&](std::size_t from, std::size_t to) {
            return std::vector<double>(windows_.begin() + static_cast<std::ptrdiff_t>(from),
                                       windows_.begin() + static_cast<std::ptrdiff_t>(to));
        };
        const uint64_t quiet_tsc = d_.tsc_hz * static_cast<uint64_t>(kQuietBeforeReload.count()) / 1000;
        WindowFigures f;
        for (const Span& s : spans_) {
            if (s.begin < worker_.start_tsc + quiet_tsc) continue;
            const std::size_t b = window_of(s.begin), e = std::min(window_of(s.end), windows_.size() - 1);
            const std::size_t q = window_of(s.begin - quiet_tsc) + 1;  // whole windows inside the quiet stretch
            if (q >= b || b >= windows_.size()) continue;
            const std::vector<double> quiet = windows_from(q, b), during = windows_from(b, e + 1);
            const Stat sq = stat_of(quiet), sd = stat_of(during);
            f.before.push_back(sq.median * per_window_to_mpps);
            f.quiet_min.push_back(sq.min * per_window_to_mpps);
            f.during_min.push_back(sd.min * per_window_to_mpps);
            f.during_median.push_back(sd.median * per_window_to_mpps);
            f.cycles_before.push_back(cycles_per_packet(q, b));
            f.cycles_during.push_back(cycles_per_packet(b, e + 1));
            std::size_t low = 0;
            for (const double w : during) low += w < 0.9 * sq.median;
            std::printf("reload %zu: %zu windows of %" PRIu64 " us from YAML to the old snapshot freed: %.2f Mpps "
                        "before (lowest quiet window %.2f), lowest during %.2f (%.2fx), median during %.2f; %zu "
                        "windows below 0.9x; stage %.0f cycles/pkt before, %.0f during (bursts not preempted)\n",
                        f.before.size(), during.size(), kWindowUs, f.before.back(), f.quiet_min.back(),
                        f.during_min.back(), f.before.back() > 0 ? f.during_min.back() / f.before.back() : 0.0,
                        f.during_median.back(), low, f.cycles_before.back(), f.cycles_during.back());
        }
        return f;
    }

    void add_worker_rows(Table& table) {
        const WindowFigures f = window_figures();
        const std::string window = std::to_string(kWindowUs) + " us window";
        const std::string reference_rate = "median " + window + " in the 100 ms before";
        const Stat before = stat_of(f.before);
        table.add(Row{.id = "reload-rate-min",
                      .measurement = "forwarded during a reload: lowest " + window,
                      .unit = "Mpps",
                      .reference = reference_rate,
                      .ref = before,
                      .sluice = stat_of(f.during_min)});
        table.add(Row{.id = "reload-rate-median",
                      .measurement = "forwarded during a reload: median " + window,
                      .unit = "Mpps",
                      .reference = reference_rate,
                      .ref = before,
                      .sluice = stat_of(f.during_median)});
        table.add(Row{.id = "reload-stage-cycles",
                      .measurement = "worker stage during a reload (not preempted)",
                      .unit = "cycles/pkt",
                      .reference = "the same in the 100 ms before",
                      .ref = stat_of(f.cycles_before),
                      .sluice = stat_of(f.cycles_during)});
        table.add(Row{.id = "reload-rate-quiet-min",
                      .measurement = "forwarded, no reload: lowest " + window + " (noise)",
                      .unit = "Mpps",
                      .reference = reference_rate,
                      .ref = before,
                      .sluice = stat_of(f.quiet_min)});
        const std::string drops = drops_since(ctx_->counters, drops_before_);
        std::printf("reload: the worker forwarded %" PRIu64 " packets of %u connections in %.1f s (%.2f Mpps)%s%s\n",
                    worker_.packets, live_ - refused_, worker_.seconds(), worker_.mpps(),
                    drops.empty() ? "" : "; drops: ", drops.c_str());
        check_run(worker_, "reload worker");
    }

    Dpdk& d_;
    const Options& o_;
    const int socket_ = static_cast<int>(rte_socket_id());
    Rng rng_;
    // The generated config, as written and as loaded.
    std::vector<RuleSpec> rules_;
    std::vector<Prefix> blocklist_, partners_;
    const TempDir dir_;
    std::string path_, yaml_text_;
    Config running_, rules_only_, sets_only_;
    std::vector<PortIdentity> ports_;
    // The daemon's live state (Daemon::stable_rule_ids_, backends_): copied for each reload, committed after it.
    StableRuleIds rule_ids_;
    BackendRegistry backends_;
    const BackendHealth healthy_ = [](uint32_t) { return true; };
    std::unique_ptr<Snapshot> first_;
    double first_load_ms_ = 0, first_ms_ = 0, set_ms_ = 0;
    std::vector<ReferenceAclRule> reference_rules_;
    uint64_t ref_cycles_ = 0;
    bool reference_valid_ = false;
    unsigned reps_ = 1;
    // The worker and its windows.
    unsigned worker_lcore_ = RTE_MAX_LCORE;
    bool with_worker_ = false;
    uint32_t live_ = 0, refused_ = 0;
    std::unique_ptr<Dataplane> dataplane_;
    LcoreContext* ctx_ = nullptr;
    std::vector<PacketSpec> stream_;
    uint64_t window_tsc_ = 0;
    std::vector<uint32_t> windows_, window_timed_;
    std::vector<uint64_t> window_cycles_;
    std::atomic<bool> stop_{false};
    WorkerRun worker_;
    DropCounts drops_before_{};
    // The repetitions' timings.
    std::vector<Span> spans_;
    std::vector<double> load_ms_, build_ms_, publish_ms_, free_ms_, rules_ms_, lb_ms_, kept_ms_, yaml_ms_;
};

}  // namespace

void section_reload(Dpdk& d, const Options& o, Table& table) { ReloadSection(d, o).run(table); }

}  // namespace sluice::bench

"""Live reload under traffic: the snapshot swap (RCU) loses no packet and leaks no mbuf; a bad or restart-only
config is refused whole and the running one stays."""

import os
import re
import signal
import time
from pathlib import Path

import yaml
from scapy.all import IP, UDP, Ether, wrpcap

from sluice_harness import Sluice, reload_errors, wait_until

NEXT_HOP = "02:00:00:00:00:02"


def looping_config(tmp_path, forward_p0):
    """p0 replays a pcap forever (infinite_rx); p1 only transmits. forward_p0=False leaves p0 without a route."""
    config = {
        "dataplane": {"idle_sleep_us": 0},
        "ports": [
            {"name": "p0", "device": f"net_pcap0,rx_pcap={tmp_path}/loop.pcap,tx_pcap={tmp_path}/unused.pcap,infinite_rx=1"},
            {"name": "p1", "device": "net_null0,no-rx=1"},
        ],
        "lcores": [{"id": 1, "roles": ["rx", "worker"]}],
        "forward": [{"from": "p1", "to": "p0", "next_hop_mac": NEXT_HOP}],
    }
    if forward_p0:
        config["forward"].append({"from": "p0", "to": "p1", "next_hop_mac": NEXT_HOP})
    return config


def final_totals(log):
    """From sluice's log after its stop: packets received on p0 and sent on p1 (the lcores' final totals)."""
    rx = int(log.split("port 'p0': rx ")[1].split()[0])
    tx = int(log.split("port 'p1': rx 0 packets 0 bytes, tx ")[1].split()[0])
    return rx, tx


def write_atomically(path, config, eal):
    """What careful editors do: write a new file, then rename it over the old one."""
    config = dict(config, eal=eal, metrics={"listen": ""})
    tmp = Path(str(path) + ".tmp")
    tmp.write_text(yaml.safe_dump(config, sort_keys=False))
    os.replace(tmp, path)


def wait_forwarding(sluice, what="forwarding to go on"):
    """Waits until p1 has sent another thousand packets."""
    tx = sluice.stats()["port/p1/tx_packets"]
    wait_until(lambda: sluice.stats()["port/p1/tx_packets"] > tx + 1000, what=what)


def start_looping(tmp_path, config=None):
    frames = [Ether(src="02:aa:00:00:00:01", dst="02:bb:00:00:00:01") / IP(src=f"10.0.0.{i}", dst="10.1.0.1") / UDP(sport=1000 + i, dport=53) for i in range(1, 9)]
    wrpcap(str(tmp_path / "loop.pcap"), frames)
    sluice = Sluice(tmp_path, config or looping_config(tmp_path, forward_p0=True))
    sluice.start()
    eal = yaml.safe_load(sluice.config_path.read_text())["eal"]
    return sluice, eal


def test_hundred_reloads_under_traffic_lose_nothing(tmp_path):
    sluice, eal = start_looping(tmp_path)
    try:
        configs = [looping_config(tmp_path, forward_p0=(i % 2 == 0)) for i in range(2)]
        hashes = set()
        for i in range(100):
            write_atomically(sluice.config_path, configs[(i + 1) % 2], eal)
            outcome = sluice.telemetry.query("/sluice/reload")
            assert outcome["last_reload_ok"] == 1, outcome
            hashes.add(outcome["hash"])
            time.sleep(0.01)
        assert len(hashes) == 2
        stats = sluice.stats()
        assert stats["tx_packets"] > 0 and stats["drop/no_route"] > 0, stats
        config = sluice.telemetry.query("/sluice/config")
        assert config["reloads_ok"] >= 100 and config["reloads_failed"] == 0
        assert sluice.stop() == 0, sluice.log()
    finally:
        sluice.kill()
    log = sluice.log()
    # The final totals, logged after the drain: every packet received was forwarded or dropped for want of a route.
    rx, tx = final_totals(log)
    no_route = int(log.split("dropped no_route: ")[1].split()[0])
    other_drops = [line for line in log.splitlines() if "dropped " in line and "no_route" not in line]
    assert rx == tx + no_route and not other_drops, log
    assert "all" in log and "mbufs returned" in log


def rss_kib(pid):
    return int(next(l for l in Path(f"/proc/{pid}/status").read_text().splitlines() if l.startswith("VmRSS:")).split()[1])


def test_reload_storm_of_a_thousand_with_bad_configs_midway_loses_nothing_and_leaks_nothing(tmp_path):
    """1,000 reloads under traffic, each a different rule set (rte_acl rebuilt every time) that allows the looping
    flows; every 100th config is invalid and refused. Nothing dropped, every reload accounted for, memory flat."""
    def firewalled(generation):
        config = looping_config(tmp_path, forward_p0=True)
        decoys = [{"name": f"decoy-{generation}-{i}", "source": f"172.{16 + i}.{generation % 256}.0/24",
                   "protocol": "tcp", "destination_ports": 1000 + generation % 1000, "action": "deny"}
                  for i in range(1 + generation % 8)]
        config["firewall"] = {"default": "deny", "rules": decoys + [
            {"name": "looping", "source": "10.0.0.0/24", "destination": "10.1.0.1", "action": "allow"}]}
        return config

    sluice, eal = start_looping(tmp_path, firewalled(0))
    try:
        rss_start = None
        for generation in range(1, 1001):
            if generation % 100 == 50:
                bad = firewalled(generation)
                bad["firewall"]["rules"][0]["action"] = "maybe"
                write_atomically(sluice.config_path, bad, eal)
                assert sluice.telemetry.query("/sluice/reload")["last_reload_ok"] == 0
                continue
            write_atomically(sluice.config_path, firewalled(generation), eal)
            assert sluice.telemetry.query("/sluice/reload")["last_reload_ok"] == 1
            if generation == 100:
                rss_start = rss_kib(sluice.proc.pid)  # after the first hundred: allocator pools warmed up
        rss_end = rss_kib(sluice.proc.pid)
        config = sluice.telemetry.query("/sluice/config")
        assert config["reloads_failed"] >= 10 and config["reloads_ok"] >= 990, config  # the file watch may add some
        stats = sluice.stats()
        assert stats["tx_packets"] > 0 and stats["drops"] == 0, {k: v for k, v in stats.items() if v and "drop" in k}
        # KiB: 900 rebuilds may not grow it by 8 MiB. Not under ASan, whose quarantine keeps freed memory resident.
        if "libasan" not in Path(f"/proc/{sluice.proc.pid}/maps").read_text():
            assert rss_end - rss_start < 8 * 1024, (rss_start, rss_end)
        assert sluice.stop() == 0, sluice.log()
    finally:
        sluice.kill()
    log = sluice.log()
    rx, tx = final_totals(log)
    assert rx == tx and "dropped " not in log, log[-3000:]
    assert "all" in log and "mbufs returned" in log


def test_bad_config_is_refused_and_the_running_one_stays(tmp_path):
    sluice, eal = start_looping(tmp_path)
    try:
        before = sluice.telemetry.query("/sluice/config")
        sluice.config_path.write_text(sluice.config_path.read_text().replace("next_hop_mac: 02:00:00:00:00:02",
                                                                             "next_hop_mac: 02:00:00:00:00", 1))
        outcome = sluice.telemetry.query("/sluice/reload")
        assert outcome["last_reload_ok"] == 0
        assert outcome["hash"] == before["hash"]
        assert any(re.match(re.escape(str(sluice.config_path)) + r":\d+:\d+: next_hop_mac .* is not a MAC address", e)
                   for e in reload_errors(outcome)), outcome
        assert re.search(re.escape(str(sluice.config_path)) + r":\d+:\d+: next_hop_mac", sluice.log())
        assert "the running config" in sluice.log() and "stays in force" in sluice.log()
        wait_forwarding(sluice)  # still, with the old table
        assert sluice.stats()["drop/no_route"] == 0

        # A restart-only change is refused whole, naming the setting.
        config = looping_config(tmp_path, forward_p0=False)
        config["ports"][1]["mtu"] = 9000
        write_atomically(sluice.config_path, config, eal)
        outcome = sluice.telemetry.query("/sluice/reload")
        assert outcome["last_reload_ok"] == 0
        assert any("ports changed: p1" in e and "restart is needed" in e for e in reload_errors(outcome))
        assert sluice.stats()["drop/no_route"] == 0  # the forward change in the same file was not applied

        # A deleted file is an error too.
        os.unlink(sluice.config_path)
        sluice.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: "cannot read the file" in sluice.log(), what="the reload error")
        assert sluice.telemetry.query("/sluice/config")["reloads_failed"] >= 3
        assert sluice.stop() == 0, sluice.log()
    finally:
        sluice.kill()


def test_editing_the_file_reloads_it(tmp_path):
    sluice, eal = start_looping(tmp_path)
    try:
        before = sluice.telemetry.query("/sluice/config")["hash"]
        write_atomically(sluice.config_path, looping_config(tmp_path, forward_p0=False), eal)
        after = wait_until(lambda: (h := sluice.telemetry.query("/sluice/config")["hash"]) != before and h,
                           timeout=5, what="the change to be picked up")
        assert after != before
        drops = sluice.stats()["drop/no_route"]
        wait_until(lambda: sluice.stats()["drop/no_route"] > drops + 1000, what="the new table to take effect")
        assert "reload (file changed)" in sluice.log()
        assert sluice.stop() == 0, sluice.log()
    finally:
        sluice.kill()


def test_an_edit_followed_by_sighup_is_reloaded_once(tmp_path):
    """An editor's save followed by SIGHUP (as `systemctl reload` after an edit does): the file watch and the
    signal each ask for a reload, and only the first reads a changed file; the second finds it running. A prefix
    file changed under an unchanged config file is a change: SIGHUP applies it."""
    config = looping_config(tmp_path, forward_p0=True)
    (tmp_path / "blocked.txt").write_text("192.0.2.0/24\n")
    config["firewall"] = {"default": "allow",
                          "prefix_sets": [{"name": "blocked", "file": "blocked.txt", "early_drop": True}]}
    sluice, eal = start_looping(tmp_path, config)
    try:
        applied = lambda: sluice.log().count("reload applied")
        unchanged = lambda: sluice.log().count("nothing to reload")
        config["forward"][0]["next_hop_mac"] = "02:00:00:00:00:03"
        write_atomically(sluice.config_path, config, eal)
        sluice.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: applied() + unchanged() == 2, timeout=10, what="both triggers to be handled")
        time.sleep(0.5)  # past the file watch's 200 ms debounce: nothing else comes
        log = sluice.log()
        assert "reload (SIGHUP)" in log and "reload (file changed)" in log, log
        assert (applied(), unchanged(), log.count("tables built in")) == (1, 1, 1), log

        drops = sluice.stats()["drop/blocklisted"]
        (tmp_path / "blocked.txt").write_text("192.0.2.0/24\n10.0.0.0/24\n")  # the looping flows' sources
        sluice.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: applied() == 2, timeout=10, what="the prefix file's change to be applied")
        wait_until(lambda: sluice.stats()["drop/blocklisted"] > drops + 1000, what="the new early-drop set")
        sluice.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: unchanged() == 2, timeout=10, what="the repeated SIGHUP to be skipped")
        assert applied() == 2
        assert sluice.telemetry.query("/sluice/config")["reloads_failed"] == 0
        assert sluice.stop() == 0, sluice.log()
    finally:
        sluice.kill()


def test_an_included_rule_file_edited_then_sighup_applies_and_its_errors_name_it(tmp_path):
    """firewall.include: an edit of an included file is applied on SIGHUP (the file watch sees only the config file);
    a broken one is refused with the included file's own FILE:LINE:COL and the running rules stay."""
    config = looping_config(tmp_path, forward_p0=True)
    rules = tmp_path / "rules.yaml"
    rules.write_text("- {name: looping, source: 10.0.0.0/24, action: allow}\n")
    config["firewall"] = {"default": "deny", "include": ["rules.yaml"]}
    sluice, eal = start_looping(tmp_path, config)
    try:
        wait_forwarding(sluice, what="the included rule to allow the looping flows")
        assert sluice.stats()["drop/rule_deny"] == 0

        rules.write_text("- {name: decoy, source: 172.16.0.0/12, action: deny}\n"
                         "- {name: looping, source: 10.0.0.0/24, action: maybe}\n")
        sluice.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: "stays in force" in sluice.log(), what="the refusal")
        assert re.search(re.escape(str(rules)) + r":2:\d+: rule 'looping': action 'maybe' is not allow", sluice.log())
        wait_forwarding(sluice)  # still, with the running rules
        assert sluice.stats()["drop/rule_deny"] == 0

        rules.write_text("- {name: decoy, source: 172.16.0.0/12, action: deny}\n"
                         "- {name: looping, source: 10.0.0.0/24, action: allow}\n")
        sluice.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: sluice.log().count("reload applied") == 1, what="the included file's change")
        assert "firewall: 2 rule(s)" in sluice.log()
        # The config file is the same: the log names the file that changed.
        applied = re.search(r"reload applied: config (\w+) replaces (\w+)(.*)", sluice.log())
        assert applied and applied.group(1) == applied.group(2), sluice.log()
        assert applied.group(3) == f"; changed besides it: {rules}", applied.group(0)
        wait_forwarding(sluice)
        assert sluice.stats()["drop/rule_deny"] == 0
        assert sluice.stop() == 0, sluice.log()
    finally:
        sluice.kill()


def test_sluicectl_answers_from_the_running_sluice(tmp_path):
    import json
    import subprocess
    from sluice_harness import ROOT
    sluicectl = str(ROOT / "app/sluicectl/sluicectl")
    sluice, eal = start_looping(tmp_path)
    try:
        run = lambda *args: subprocess.run([sluicectl, "--prefix", sluice.prefix, *args], capture_output=True,
                                           text=True, timeout=30)
        stats = run("stats")
        assert stats.returncode == 0, stats.stderr
        assert "p0" in stats.stdout and "drops: 0" in stats.stdout
        assert re.search(r"lcores: \d+ polls, [\d.]+% of them moved packets, [\d.]+ s busy \(all lcores\)", stats.stdout), stats.stdout
        as_json = json.loads(run("--json", "stats").stdout)
        assert as_json["port/p0/rx_packets"] > 0
        reload = run("reload")
        assert reload.returncode == 0 and "last applied" in reload.stdout, reload.stdout + reload.stderr
        config = json.loads(run("--json", "config").stdout)
        assert config["reloads_ok"] >= 1 and config["path"] == str(sluice.config_path)
        assert sluice.stop() == 0
    finally:
        sluice.kill()
    gone = subprocess.run([sluicectl, "--prefix", sluice.prefix, "stats"], capture_output=True, text=True, timeout=30)
    assert gone.returncode != 0 and "cannot reach sluice" in gone.stderr


def test_acl_method_reloads_live_and_one_this_machine_cannot_run_is_refused(tmp_path):
    """firewall.acl_method: a pinned method is the one the log names; a method the EAL's SIMD limit rules out
    (avx512x32 needs --force-max-simd-bitwidth=512) refuses the reload and the running rules stay; auto times them."""
    config = looping_config(tmp_path, forward_p0=True)
    config["firewall"] = {"default": "deny", "acl_method": "scalar",
                          "rules": [{"name": "dns", "protocol": "udp", "destination_ports": 53, "action": "allow"}]}
    sluice, eal = start_looping(tmp_path, config)
    try:
        wait_until(lambda: "IPv4 rte_acl classify method scalar (pinned)" in sluice.log(),
                   what="the pinned method in the log")
        wait_forwarding(sluice, what="the allowed flows to pass")

        config["firewall"]["acl_method"] = "avx512x32"
        write_atomically(sluice.config_path, config, eal)
        outcome = sluice.telemetry.query("/sluice/reload")
        assert outcome["last_reload_ok"] == 0, outcome
        assert any("firewall acl_method: rte_acl classify method avx512x32 does not run here" in e
                   for e in reload_errors(outcome)), outcome
        wait_forwarding(sluice)

        config["firewall"]["acl_method"] = "auto"
        write_atomically(sluice.config_path, config, eal)
        outcome = sluice.telemetry.query("/sluice/reload")
        assert outcome["last_reload_ok"] == 1, outcome
        assert re.search(r"IPv4 rte_acl classify method \S+ \(TSC cycles per key: sse \d+.*; \d+% of the keys matched a rule\)", sluice.log()), sluice.log()
        wait_forwarding(sluice)
        assert sluice.stats()["drop/rule_deny"] == 0
        assert sluice.stop() == 0, sluice.log()
    finally:
        sluice.kill()


def test_config_mistakes_once_accepted_silently_are_refused_and_the_running_config_stays(tmp_path):
    """A section given twice (yaml-cpp kept the first), a network with host bits set and a name that is not
    printable ASCII: each reload is refused with FILE:LINE:COL, and traffic goes on under the running config. A
    service whose backends all have weight 0 (a whole service drained, or a mistake) is applied with a warning."""
    config = looping_config(tmp_path, forward_p0=True)
    config["firewall"] = {"default": "allow",
                          "rules": [{"name": "dns", "protocol": "udp", "source": "10.0.0.0/24", "action": "allow"}]}
    config["load_balancer"] = {"nat_pool": "10.1.0.100"}
    config["services"] = [{"name": "web", "vip": "192.0.2.100", "port": 80, "protocol": "tcp", "mode": "nat",
                           "backends": [{"address": "10.2.0.11", "port": 8080},
                                        {"address": "10.2.0.12", "port": 8080}]}]
    sluice, eal = start_looping(tmp_path, config)
    path = re.escape(str(sluice.config_path))

    def broken(change):
        variant = yaml.safe_load(yaml.safe_dump(config))
        change(variant)
        return variant

    def set_weights(c):
        for b in c["services"][0]["backends"]:
            b["weight"] = 0

    mistakes = [
        (broken(lambda c: c["firewall"]["rules"][0].update(source="10.0.0.77/24")),
         r"rule 'dns' source: 10\.0\.0\.77/24 has host bits set; did you mean 10\.0\.0\.0/24\?"),
        (broken(lambda c: c["firewall"]["rules"][0].update(name="dns-café")),
         r"rule name 'dns-caf\\xc3\\xa9' must be printable ASCII"),
        (None, r"duplicate key 'firewall' in the top level \(first at line \d+"),
    ]
    try:
        before = sluice.telemetry.query("/sluice/config")["hash"]
        for variant, message in mistakes:
            if variant is None:  # appended by hand after the file's own firewall section
                write_atomically(sluice.config_path, config, eal)
                text = sluice.config_path.read_text() + "firewall: {default: deny}\n"
                tmp = Path(str(sluice.config_path) + ".tmp")
                tmp.write_text(text)
                os.replace(tmp, sluice.config_path)
            else:
                write_atomically(sluice.config_path, variant, eal)
            outcome = sluice.telemetry.query("/sluice/reload")
            assert outcome["last_reload_ok"] == 0, (message, outcome)
            assert outcome["hash"] == before
            assert any(re.match(path + r":\d+:\d+: " + message, e) for e in reload_errors(outcome)), \
                (message, reload_errors(outcome))
            assert re.search(path + r":\d+:\d+: " + message, sluice.log())
            wait_forwarding(sluice)  # under the running config
        assert sluice.stats()["drops"] == 0

        write_atomically(sluice.config_path, broken(set_weights), eal)
        outcome = sluice.telemetry.query("/sluice/reload")
        assert outcome["last_reload_ok"] == 1 and outcome["hash"] != before, outcome
        assert re.search(r"warn.*reload: " + path + r":\d+:\d+: warning: service 'web': every backend has weight 0",
                         sluice.log())
        wait_forwarding(sluice)
        assert sluice.stop() == 0, sluice.log()
    finally:
        sluice.kill()

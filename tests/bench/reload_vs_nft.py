#!/usr/bin/env python3
"""sluice's reload against `nft -f` loading the same rules, side by side in one invocation (reload_vs_nft.sh).

Cases, each timed on both in alternation, REPS times:
  all-10k     RULES rules, every one different from the running set
  one-10k     the same rules but one (its destination port changed), each repetition in another place of the file:
              the first edit in its part of the rules
  again-10k   the rule one-10k changed last, changed again: an edit where the previous one was
  all-100k    BIG_RULES rules, every one different (also the peak memory of each)
sluice: the running daemon (net_null port, one rx+worker lcore on CPU 1, control thread on CPU 0) gets its config
file rewritten and SIGHUP; the time is its own log's, from "reload (SIGHUP): reading" to "reload applied" (ms
timestamps); the peak memory is the process's VmHWM over the reload (reset before it through clear_refs) plus the
hugepage memory it took (EAL --no-huge: all of DPDK's memory is the process's own, so VmHWM counts it).
nft: `nft -f FILE` (flush ruleset + one inet table, forward hook, the same rules) in a network namespace of its own,
on CPU 0 as sluice's control thread; the time is the command's wall time, the memory its maximum RSS (/usr/bin/time).
The ratio is sluice / nft: below 1.0, sluice is faster (or smaller).
nft's rules also take kernel memory, which its process peak leaves out: the "kernel MiB" column is the growth of the
kernel's slab (/proc/meminfo Slab) over the first `nft -f` of each size into the empty namespace, once per size, for
context only (the targets compare the process peaks; other processes' slab moves with it, so it is approximate).
"""

import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

SLUICE = os.environ["SLUICE"]
RULES = int(os.environ.get("RULES", "10000"))
BIG_RULES = int(os.environ.get("BIG_RULES", "100000"))
REPS = int(os.environ.get("REPS", "3"))
CASES = os.environ.get("CASES", "all-10k one-10k again-10k all-100k").split()
KEEP = os.environ.get("KEEP") == "1"
FILES = int(os.environ.get("FILES", "20"))  # firewall.include files the sluice rules are split into; 0: inline
TARGETS = {"all-10k": 1.0, "one-10k": 0.25, "again-10k": 0.25, "all-100k": 1.0}


def log(*args):
    print("[reload_vs_nft]", *args, file=sys.stderr, flush=True)


def random_rules(count, seed):
    """count rules as (source, destination, protocol, source ports, destination ports, action)."""
    rng = random.Random(seed)
    rules = []
    for _ in range(count):
        def prefix():
            length = rng.choice([8, 12, 16, 20, 24, 24, 28, 32])
            address = rng.getrandbits(32) & (0xFFFFFFFF << (32 - length)) & 0xFFFFFFFF
            if address >> 24 in (0, 10, 127) or address >> 24 >= 224:
                address = (address & 0x00FFFFFF) | (11 << 24)
            return f"{address >> 24}.{address >> 16 & 255}.{address >> 8 & 255}.{address & 255}/{length}"
        protocol = rng.choice(["tcp", "tcp", "udp", "any"])
        sports = dports = None
        if protocol != "any":
            if rng.random() < 0.3:
                low = rng.randrange(1024, 60000)
                sports = (low, low + rng.randrange(0, 4000))
            port = rng.randrange(1, 65000)
            dports = (port, port) if rng.random() < 0.7 else (port, port + rng.randrange(1, 500))
        rules.append([prefix(), prefix(), protocol, sports, dports, rng.choice(["allow", "deny"])])
    return rules


def ports_text(ports):
    return str(ports[0]) if ports[0] == ports[1] else f"\"{ports[0]}-{ports[1]}\""


def rule_text(i, rule):
    src, dst, proto, sports, dports, action = rule
    fields = [f"name: r{i}", f"source: {src}", f"destination: {dst}"]
    if proto != "any":
        fields.append(f"protocol: {proto}")
    if sports:
        fields.append(f"source_ports: {ports_text(sports)}")
    if dports:
        fields.append(f"destination_ports: {ports_text(dports)}")
    fields.append(f"action: {action}")
    return "{" + ", ".join(fields) + "}"


def replace_file(path, text):
    """Writes text to path as editors save (a new file renamed over the old one), unless it holds text already."""
    path = Path(path)
    if path.exists() and path.read_text() == text:
        return
    tmp = Path(str(path) + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_sluice(path, rules, eal):
    """The config, with the rules inline (FILES=0) or in FILES files of firewall.include."""
    lines = ["eal: [" + ", ".join(eal) + "]", "metrics: {listen: \"\"}", "log: {level: info}",
             "ports:", "  - {name: p0, device: \"net_null0,no-rx=1\"}",
             "lcores:", "  - {id: 1, roles: [rx, worker]}",
             "firewall:", "  default: allow"]
    if FILES == 0:
        lines.append("  rules:")
        lines += ["    - " + rule_text(i, rule) for i, rule in enumerate(rules)]
    else:
        per_file = -(-len(rules) // FILES)
        names = []
        for f in range(FILES):
            name = f"{Path(path).stem}.rules{f:03}.yaml"
            names.append(name)
            chunk = range(f * per_file, min(len(rules), (f + 1) * per_file))
            replace_file(Path(path).parent / name, "".join(f"- {rule_text(i, rules[i])}\n" for i in chunk))
        lines.append("  include: [" + ", ".join(names) + "]")
    replace_file(path, "\n".join(lines) + "\n")


def write_nft(path, rules):
    lines = ["flush ruleset", "table inet bench {", "  chain forward {",
             "    type filter hook forward priority 0; policy accept;"]
    for src, dst, proto, sports, dports, action in rules:
        match = f"ip saddr {src} ip daddr {dst}"
        if proto != "any":
            match += f" meta l4proto {proto}"
            for key, ports in (("sport", sports), ("dport", dports)):
                if ports:
                    match += f" {proto} {key} {ports[0]}" + (f"-{ports[1]}" if ports[0] != ports[1] else "")
        lines.append(f"    {match} {'accept' if action == 'allow' else 'drop'}")
    lines += ["  }", "}"]
    Path(path).write_text("\n".join(lines) + "\n")


def run_nft(netns, path):
    """Seconds and peak KiB of `nft -f path` on CPU 0 in netns."""
    out = Path(str(path) + ".time")
    started = time.perf_counter()
    subprocess.run(["ip", "netns", "exec", netns, "taskset", "-c", "0", "/usr/bin/time", "-f", "%M", "-o", str(out),
                    "nft", "-f", str(path)], check=True)
    seconds = time.perf_counter() - started
    return seconds, int(out.read_text().split()[-1])


def slab_kib():
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("Slab:"):
            return int(line.split()[1])
    return 0


def stamp(line):
    return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S.%f").timestamp()


class Daemon:
    def __init__(self, work, name, rules, memory_mb):
        self.work = work
        self.config = work / f"{name}.yaml"
        self.log_path = work / f"{name}.log"
        self.eal = [f"\"{a}\"" for a in ("--lcores=0@0,1@1", f"--file-prefix=slreload{os.getpid()}{name}",
                                           "--no-huge", "-m", str(memory_mb), "--no-pci")]
        write_sluice(self.config, rules, self.eal)
        started = time.perf_counter()  # (the file watch's trigger for a replaced file comes 200 ms after it)
        self.proc = subprocess.Popen([SLUICE, "--config", str(self.config)], stdout=open(self.log_path, "w"),
                                     stderr=subprocess.STDOUT)
        self.wait(lambda text: "ready:" in text, 600, "sluice to start")
        self.start_seconds = time.perf_counter() - started

    def text(self):
        return self.log_path.read_text(errors="replace")

    def wait(self, done, timeout, what):
        deadline = time.monotonic() + timeout
        while not done(self.text()):
            if self.proc.poll() is not None:
                raise RuntimeError(f"sluice exited ({self.proc.returncode}) waiting for {what}:\n{self.text()[-3000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting for {what}:\n{self.text()[-3000:]}")
            time.sleep(0.005)

    def status_kib(self, key):
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
        return 0

    def settle(self):
        """Waits until every reload the log began has ended and none began for 0.6 s (the file watch's trigger for
        an edit comes 200 ms after it)."""
        def ended(text):
            return text.count("): reading ") == (text.count("reload applied") + text.count("stays in force") +
                                                 text.count("nothing to reload"))
        quiet_since, seen = time.monotonic(), self.text()
        while time.monotonic() - quiet_since < 0.6 or not ended(seen):
            time.sleep(0.02)
            now = self.text()
            if now != seen:
                quiet_since, seen = time.monotonic(), now

    def reload(self, rules):
        """Seconds from the SIGHUP reload's first log line to "reload applied", the process's peak KiB over it, and
        the reload's log lines."""
        self.settle()
        before = len(self.text().splitlines())
        write_sluice(self.config, rules, self.eal)
        Path(f"/proc/{self.proc.pid}/clear_refs").write_text("5")  # VmHWM := VmRSS
        self.rss_before = self.status_kib("VmRSS")
        os.kill(self.proc.pid, signal.SIGHUP)

        def span(text):
            lines = text.splitlines()[before:]
            starts = [i for i, l in enumerate(lines) if "reload (SIGHUP): reading" in l]
            if not starts:
                return None
            for i in range(starts[0], len(lines)):
                if "reload applied" in lines[i] or "stays in force" in lines[i]:
                    return lines[starts[0]:i + 1]
            return None
        self.wait(span, 600, "the reload")
        lines = span(self.text())
        if "stays in force" in lines[-1]:
            raise RuntimeError("reload refused:\n" + "\n".join(lines))
        return stamp(lines[-1]) - stamp(lines[0]), self.status_kib("VmHWM"), lines

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def median(values):
    return statistics.median(values)


def main():
    work = Path(tempfile.mkdtemp(prefix="reload_vs_nft."))
    netns = f"slnft{os.getpid()}"
    subprocess.run(["ip", "netns", "add", netns], check=True)
    rows = []
    daemons = []
    kernel_kib = {}
    try:
        for size, cases in ((RULES, [c for c in CASES if c.endswith("10k")]),
                            (BIG_RULES, [c for c in CASES if c.endswith("100k")])):
            if not cases:
                continue
            log(f"{size} rules: writing configs, starting sluice")
            sets = [random_rules(size, seed) for seed in range(2)]
            daemon = Daemon(work, f"s{size}", sets[0], 1024 if size <= 20000 else 3072)
            daemons.append(daemon)
            log(f"sluice started with {size} rules in {daemon.start_seconds:.1f} s "
                f"(VmHWM {daemon.status_kib('VmHWM') // 1024} MiB)")
            nft_file = work / f"n{size}.nft"
            write_nft(nft_file, sets[0])
            slab_before = slab_kib()
            run_nft(netns, nft_file)  # the kernel holds the running set, as sluice does
            time.sleep(1)  # (rules freed by the flush go after an RCU grace period; this namespace had none)
            kernel_kib[size] = slab_kib() - slab_before
            log(f"nft -f of {size} rules into the empty namespace: the kernel's slab grew by "
                f"{kernel_kib[size] // 1024} MiB")
            current = 0
            edited = 0  # the rule the last one-10k repetition changed
            for case in cases:
                for rep in range(REPS):
                    if case.startswith("all"):
                        current ^= 1
                        rules = sets[current]
                    else:
                        rules = [list(r) for r in sets[current]]
                        if case.startswith("one"):  # spread over the file: 1/6, 3/6, 5/6 of it with 3 repetitions
                            edited = (2 * rep + 1) * len(rules) // (2 * REPS)
                        changed = rules[edited]
                        port = (changed[4] or (1, 1))[0] % 60000 + 1 + rep + (REPS if case.startswith("again") else 0)
                        changed[2] = changed[2] if changed[2] != "any" else "tcp"
                        changed[4] = (port, port)
                        sets[current] = rules
                    write_nft(nft_file, rules)
                    order = ["nft", "sluice"] if rep % 2 == 0 else ["sluice", "nft"]
                    result = {}
                    for who in order:
                        if who == "nft":
                            result["nft"] = run_nft(netns, nft_file)
                        else:
                            seconds, peak, phases = daemon.reload(rules)
                            result["sluice"] = (seconds, peak)
                            result["sluice_growth"] = peak - daemon.rss_before
                            daemon.settle()  # the file watch's trigger for the same edit: skipped, or a reload
                    rows.append((case, rep, result))
                    log(f"{case} #{rep + 1}: sluice {result['sluice'][0]:.3f} s, {result['sluice'][1] // 1024} MiB "
                        f"({result['sluice_growth'] // 1024} MiB over its RSS before the reload); "
                        f"nft {result['nft'][0]:.3f} s, {result['nft'][1] // 1024} MiB")
                    for line in phases:
                        if "reload" in line and any(w in line for w in ("ms", "reading", "applied", "memory")):
                            log("    " + line[line.find(": ") + 2:])
            daemon.stop()
    finally:
        for d in daemons:
            if d.proc.poll() is None:
                d.proc.kill()
        subprocess.run(["ip", "netns", "del", netns])
        if not KEEP:
            subprocess.run(["rm", "-rf", str(work)])
        else:
            log(f"kept {work}")

    print(f"{'case':<10} {'sluice s':>9} {'nft s':>7} {'time x':>7} {'target':>7}  {'sluice MiB':>10} {'nft MiB':>8} "
          f"{'mem x':>6} {'growth MiB':>10} {'kernel MiB':>10}")
    for case in CASES:
        runs = [r for c, _, r in rows if c == case]
        if not runs:
            continue
        s_time = median([r["sluice"][0] for r in runs])
        n_time = median([r["nft"][0] for r in runs])
        ratio = median([r["sluice"][0] / r["nft"][0] for r in runs])
        s_mem = median([r["sluice"][1] for r in runs]) / 1024
        growth = median([r["sluice_growth"] for r in runs]) / 1024
        n_mem = median([r["nft"][1] for r in runs]) / 1024
        met = "met" if ratio <= TARGETS[case] else "NOT met"
        print(f"{case:<10} {s_time:9.3f} {n_time:7.3f} {ratio:7.2f} {TARGETS[case]:6.2f}x  {s_mem:10.0f} {n_mem:8.0f} "
              f"{s_mem / n_mem:6.2f} {growth:10.0f} {kernel_kib[BIG_RULES if case.endswith('100k') else RULES] / 1024:10.0f}"
              f"  time {met}"
              + (f", memory {'met' if s_mem <= n_mem else 'NOT met'}" if case.endswith("100k") else ""))


if __name__ == "__main__":
    main()

"""The benchmark scripts' shared helpers (tests/bench/firewall.sh, run-all.sh): CPU use from /proc/stat, the
idlest CPU, sluice_bench's result files, and the rows they append to docs/benchmarks.md."""
import csv, glob, os, re, statistics, sys

def cpu():
    """Prints 'busy total' jiffies of the whole machine."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    print(sum(v) - v[3] - v[4], sum(v))

def idlest_cpu():
    """Prints the CPU that was busy the least over half a second (others' builds and tests come and go)."""
    import time
    def sample():
        out = {}
        with open("/proc/stat") as f:
            for line in f:
                m = re.match(r"cpu(\d+) (.*)", line)
                if m:
                    v = [int(x) for x in m.group(2).split()[:8]]
                    out[int(m.group(1))] = (sum(v) - v[3] - v[4], sum(v))
        return out
    a = sample(); time.sleep(0.5); b = sample()
    share = {c: (b[c][0] - a[c][0]) / max(1, b[c][1] - a[c][1]) for c in b if c in a}
    print(min(share, key=share.get) if share else 0)

def acl_cycles(path):
    """The cycles/pkt figure dpdk-test-acl printed, or nothing."""
    m = re.search(r"([0-9.]+) cycles/pkt", open(path, errors="replace").read())
    if m:
        print(m.group(1))

def read_tsv(path):
    meta, rows = {}, {}
    with open(path) as f:
        lines = [l for l in f if l.strip()]
    for l in lines:
        if l.startswith("#"):
            k, _, v = l[1:].rstrip("\n").partition("\t")
            meta.setdefault(k, v)
    body = [l for l in lines if not l.startswith("#")]
    for r in csv.DictReader(body, delimiter="\t"):
        rows[r["id"]] = r
    return meta, rows

def num(s):
    return None if s in ("-", "", None) else float(s)

def fmt(v):
    if v is None:
        return "-"
    return f"{v:.0f}" if v >= 1000 else f"{v:.1f}" if v >= 100 else f"{v:.2f}"

def label(n):
    n = int(n)
    return f"{n // 1000}k" if n >= 1000 and n % 1000 == 0 else str(n)

def report(work, doc, record, machine_extra, command, acl_others):
    rows = []  # (measurement, unit, reference label, ref, sluice)
    main_meta, main = read_tsv(os.path.join(work, "main.tsv"))
    # parse
    for key in ("parse", "parse-csum-good"):
        if key in main:
            r = main[key]
            rows.append((r["measurement"], r["unit"], r["reference"], num(r["ref_median"]), num(r["sluice_median"])))
    # classify: dpdk-test-acl's best algorithm against AclClassifier with the algorithm sluice runs
    per_alg = []
    for n in (10, 1000, 10000):
        path = os.path.join(work, f"classify-{n}.tsv")
        if not os.path.exists(path):
            continue
        meta, cl = read_tsv(path)
        default = meta.get("acl_sluice_alg", "?")  # the method AclClassifier runs
        acl = {}
        for f in glob.glob(os.path.join(work, f"acl-{n}-*-run*.txt.cycles")):
            alg = re.search(rf"acl-{n}-(\w+)-run", os.path.basename(f)).group(1)
            v = open(f).read().strip()
            if v:
                acl.setdefault(alg, []).append(float(v))
        # The least-disturbed run: dpdk-test-acl times its whole run, preemptions included (sluice_bench leaves
        # preempted bursts out), so on a shared machine its median would overstate its cost.
        med = {alg: min(v) for alg, v in acl.items()}
        best = min(med, key=med.get) if med else None
        sl = cl.get(f"classify-{n}")
        rows.append((f"classify {label(n)} rules, 64k-tuple trace: AclClassifier::classify, "
                     f"{default} (what sluice runs)", "cycles/pkt",
                     f"dpdk-test-acl, best algorithm ({best}), best of {len(acl[best])} runs" if best else "dpdk-test-acl (no figure)",
                     med.get(best), num(sl["sluice_median"]) if sl else None))
        parts = cl.get(f"classify-{n}-parts")
        if parts:  # the rules in the reload's rte_acl parts, against dpdk-test-acl's one context
            rows.append((f"classify {label(n)} rules, 64k-tuple trace: {parts['measurement'].split(', ', 1)[1]}, "
                         f"{default}", "cycles/pkt",
                         f"dpdk-test-acl, best algorithm ({best}), best of {len(acl[best])} runs" if best else "dpdk-test-acl (no figure)",
                         med.get(best), num(parts["sluice_median"])))
        for alg in sorted(set(med) | {r["id"].rsplit("-", 1)[-1] for r in cl.values()
                                      if r["id"] not in (f"classify-{n}", f"classify-{n}-parts")} | {default},
                          key=lambda a: ["scalar", "sse", "avx2", "avx512x16", "avx512x32"].index(a)
                          if a in ["scalar", "sse", "avx2", "avx512x16", "avx512x32"] else 9):
            r = cl.get(f"classify-{n}" if alg == default else f"classify-{n}-{alg}")
            per_alg.append((label(n), alg + (" *" if alg == default else ""), med.get(alg),
                            num(r["ref_median"]) if r else None, num(r["sluice_median"]) if r else None))
    for key in [k for k in main if k.startswith("established")]:
        r = main[key]
        rows.append((r["measurement"], r["unit"], r["reference"], num(r["ref_median"]), num(r["sluice_median"])))
    if "new-rate" in main:
        r, c = main["new-rate"], main.get("new-cycles")
        extra = f"; {fmt(num(c['sluice_median']))} cycles/conn" if c else ""
        rows.append((r["measurement"] + extra, r["unit"], r["reference"], num(r["ref_median"]), num(r["sluice_median"])))
    if "memory" in main:
        r = main["memory"]
        rows.append((r["measurement"], r["unit"], r["reference"], num(r["ref_median"]), num(r["sluice_median"])))

    ratio = lambda ref, s: (s / ref) if ref and s is not None else None
    print()
    print(f"{'measurement':<100} {'unit':<11} {'reference':<36} {'ref':>8} {'sluice':>8} {'ratio':>6}")
    for m, u, rl, ref, s in rows:
        print(f"{m:<100} {u:<11} {rl:<36} {fmt(ref):>8} {fmt(s):>8} {fmt(ratio(ref, s)):>6}")
    if per_alg:
        print("\nclassify per algorithm, cycles/pkt (* = the one AclClassifier runs):")
        print(f"{'rules':>6} {'algorithm':<12} {'dpdk-test-acl':>14} {'raw rte_acl':>12} {'AclClassifier':>14}")
        for n, alg, a, raw, wrapped in per_alg:
            print(f"{n:>6} {alg:<12} {fmt(a):>14} {fmt(raw):>12} {fmt(wrapped):>14}")
    others = float(main_meta.get("others_cpu", "0"))
    noisy = others > 0.05 or acl_others > 0.05
    print(f"\nload average {main_meta.get('load_start')} -> {main_meta.get('load_end')}; other processes used "
          f"{acl_others:.0%} of all CPU time during the dpdk-test-acl runs and {others:.0%} during sluice_bench's main "
          f"run" + (": noisy, figures are high and spread out" if noisy else ""))
    if record != "1":
        return
    machine = (f"{main_meta.get('cpu', '?')}, {main_meta.get('cpus', '?')} vCPU; load {main_meta.get('load_start')}; "
               f"others used {acl_others:.0%}/{others:.0%} CPU{machine_extra}")
    if noisy:
        machine += ": **noisy**"
    date = main_meta.get("date", "").replace(" UTC", "")[:16]
    table_rows = [f"| {date} | {machine} | {command} | {m} ({u}) | {rl} | {fmt(ref)} | {fmt(s)} | {fmt(ratio(ref, s))} |"
                  for m, u, rl, ref, s in rows]
    record_rows(doc, table_rows)
    print(f"\n{len(table_rows)} rows appended to {doc}")

MARK = "<!-- firewall.sh appends rows above this line -->"
HEADER = """## Firewall: per-stage costs in one process (`tests/bench/firewall.sh`)

`tests/bench/sluice_bench` starts the EAL itself (one lcore, a `net_null` port to transmit on), builds 60-byte
IPv4 TCP/UDP frames into mbufs and times only the stage under test with `rte_rdtsc_precise`, in bursts of 32
(frames are written and parsed outside the timed region). Each figure is the median of several repetitions,
interleaved with its reference. References: `parse` against DPDK's own `rte_net_get_ptype`; `classify` against
`dpdk-test-acl` on the same ClassBench-style rule and trace files (best algorithm, one category, 32 per call,
100 passes per run, the quickest of 3 runs since it times its whole run, preemptions included);
`established` with 10k rules against the same with 10 rules (ratio ~1: packets of tracked connections never reach
the rule set), and firewall + forward against forward alone; new connections against the 2 M/s-per-worker target;
memory against `conn_table.hpp`'s estimate. Ratio = sluice / reference. The "machine" column gives the share of
all CPU time other processes used during the dpdk-test-acl runs / sluice_bench's run (from /proc/stat); rows where
either is above 5% are marked noisy.

| date (UTC) | machine | command | measurement (unit) | reference | ref | sluice | ratio |
| --- | --- | --- | --- | --- | ---: | ---: | ---: |
"""

def record_rows(doc, rows, mark=MARK, header=HEADER):
    text = open(doc).read() if os.path.exists(doc) else "# Benchmarks\n"
    if mark not in text:
        text = text.rstrip("\n") + "\n\n" + header + mark + "\n"
    text = text.replace(mark, "\n".join(rows) + "\n" + mark, 1)
    with open(doc + ".tmp", "w") as f:
        f.write(text)
    os.replace(doc + ".tmp", doc)

if __name__ == "__main__":
    if sys.argv[1] == "report":
        report(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6], float(sys.argv[7]))
    else:
        globals()[sys.argv[1]](*sys.argv[2:])

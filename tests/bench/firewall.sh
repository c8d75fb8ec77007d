#!/usr/bin/env bash
# Firewall benchmark: the costs of sluice's firewall path measured in-process by sluice_bench, each beside a
# reference, on this machine, in one go.
#
#   tests/bench/firewall.sh [--no-record]          (as root; about 1-2 minutes)
#
# 1. sluice_bench writes ClassBench-style rule sets of 10, 1k and 10k IPv4 rules and a 64k-header trace for each,
#    in dpdk-test-acl's file formats.
# 2. Reference for classification: dpdk-test-acl on those files, for every rte_acl algorithm (ACL_RUNS runs of
#    ACL_ITER passes over the trace each, --tracestep=32 like sluice's bursts, one category like sluice's
#    contexts); the reference is the best algorithm's quickest run (it times a whole run, preemptions included,
#    where sluice_bench leaves preempted bursts out). Each tool runs on the CPU that was idlest just before.
# 3. sluice_bench --rules/--trace on the same files: AclClassifier::classify (and raw rte_acl_classify on the same
#    context) for every algorithm; sluice's figure is the algorithm rte_acl_create picks, i.e. what sluice runs.
# 4. sluice_bench for the rest: parse_burst vs rte_net_get_ptype; firewall_burst on packets of tracked
#    connections with 10k rules vs 10 rules (and firewall + forward vs forward alone) at 1k, 100k and 1M
#    connections; new connections per second vs the 2 M/s per-worker target; bytes per tracked connection vs
#    conn_table.hpp's estimate.
# Prints one table (and the per-algorithm comparison) and appends a dated row per measurement to
# docs/benchmarks.md (unless --no-record). Nothing asserts a speed; exit status 1 only when a tool fails.
#
# Environment: SLUICE_BENCH (binary; default build/tests/bench/sluice_bench, else build-bench/...), TESTACL
# (default dpdk-test-acl), REPS (sluice_bench repetitions, default 7), ACL_RUNS (default 3), ACL_ITER (default 100:
# dpdk-test-acl times all its passes together and its first pass over the trace is cold, ~2.5x a warm one, so few
# passes inflate its figure), ACL_ALGS (default "scalar sse avx2 avx512x16"), SIMD512=1 (both sides get
# --force-max-simd-bitwidth=512, which lets rte_acl use avx512x32; sluice's EAL does not set it unless its config's
# eal: does), BENCH_DOC (default docs/benchmarks.md), KEEP=1 keeps the work directory (files, logs).
set -euo pipefail

readonly REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
readonly TESTACL="${TESTACL:-dpdk-test-acl}"
readonly REPS="${REPS:-7}"
readonly ACL_RUNS="${ACL_RUNS:-3}"
readonly ACL_ITER="${ACL_ITER:-100}"
readonly SIMD512="${SIMD512:-0}"
if [[ $SIMD512 == 1 ]]; then readonly ACL_ALGS="${ACL_ALGS:-scalar sse avx2 avx512x16 avx512x32}"
else readonly ACL_ALGS="${ACL_ALGS:-scalar sse avx2 avx512x16}"; fi
readonly BENCH_DOC="${BENCH_DOC:-$REPO/docs/benchmarks.md}"
RECORD=1
case "${1:-}" in
    --no-record) RECORD=0 ;;
    "") ;;
    -h|--help) sed -n '2,26p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "usage: $0 [--no-record]" >&2; exit 2 ;;
esac

log() { printf '[firewall.sh] %s\n' "$*" >&2; }
die() { log "FAIL: $*"; exit 1; }

[[ $EUID -eq 0 ]] || die "run as root (hugepages)"
if [[ -z "${SLUICE_BENCH:-}" ]]; then
    for candidate in "$REPO/build/tests/bench/sluice_bench" "$REPO/build-bench/tests/bench/sluice_bench"; do
        [[ -x $candidate ]] && { SLUICE_BENCH=$candidate; break; }
    done
fi
[[ -x "${SLUICE_BENCH:-}" ]] || die "no sluice_bench binary (build it: ninja -C build tests/bench/sluice_bench, or set SLUICE_BENCH)"
command -v "$TESTACL" >/dev/null || die "$TESTACL not found (Debian package dpdk-dev)"
command -v python3 >/dev/null || die "python3 not found"
[[ -x /usr/bin/time ]] || die "/usr/bin/time not found (Debian package time)"

ulimit -c 0   # dpdk-test-acl 22.11 may crash in rte_acl_free at exit (FIELD-NOTES): no core files
unset RUNTIME_DIRECTORY
readonly ID="sluice-fwbench-$$"
readonly WORK="$(mktemp -d "/tmp/$ID.XXXXXX")"
PREFIXES=()
cleanup() {
    local p
    for p in "${PREFIXES[@]}"; do rm -rf "/var/run/dpdk/${p:?}" /dev/hugepages/"$p"map_*; done
    if [[ "${KEEP:-0}" == 1 ]]; then log "kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Run a copy: a rebuild during the benchmark must not swap the binary. Its hash goes into the table.
cp "$SLUICE_BENCH" "$WORK/sluice_bench"
readonly BENCH_ID="$(sha256sum "$WORK/sluice_bench" | cut -c1-8), built $(date -u -r "$SLUICE_BENCH" '+%Y-%m-%d %H:%M')"
log "sluice_bench $SLUICE_BENCH ($BENCH_ID); work dir $WORK; load average $(cut -d' ' -f1-3 /proc/loadavg)"

# Both sides get the same EAL memory mode and SIMD limit.
free_pages=$(cat /sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages 2>/dev/null || echo 0)
if (( free_pages >= 300 )); then MEM_ARGS=(--in-memory); else MEM_ARGS=(--no-huge -m 1024); log "only $free_pages free hugepages: running without hugepages"; fi
SIMD_ARGS=()
[[ $SIMD512 == 1 ]] && SIMD_ARGS=(--force-max-simd-bitwidth=512)
BENCH_EAL_ADD=()
for a in "${SIMD_ARGS[@]}"; do BENCH_EAL_ADD+=("--eal-add=$a"); done

cat >"$WORK/fwbench.py" <<'PY'
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
        default = meta.get("acl_default_alg", "?")
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
                     f"{default} (rte_acl's pick)", "cycles/pkt",
                     f"dpdk-test-acl, best algorithm ({best}), best of {len(acl[best])} runs" if best else "dpdk-test-acl (no figure)",
                     med.get(best), num(sl["sluice_median"]) if sl else None))
        for alg in sorted(set(med) | {r["id"].rsplit("-", 1)[-1] for r in cl.values() if r["id"] != f"classify-{n}"} | {default},
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
        print("\nclassify per algorithm, cycles/pkt (* = the one rte_acl_create picks here, which sluice runs):")
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

def record_rows(doc, rows):
    text = open(doc).read() if os.path.exists(doc) else "# Benchmarks\n"
    if MARK not in text:
        text = text.rstrip("\n") + "\n\n" + HEADER + MARK + "\n"
    text = text.replace(MARK, "\n".join(rows) + "\n" + MARK, 1)
    with open(doc + ".tmp", "w") as f:
        f.write(text)
    os.replace(doc + ".tmp", doc)

if __name__ == "__main__":
    if sys.argv[1] == "report":
        report(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6], float(sys.argv[7]))
    else:
        globals()[sys.argv[1]](*sys.argv[2:])
PY
fw() { python3 "$WORK/fwbench.py" "$@"; }

# --- 1. rule sets and traces -----------------------------------------------------------------------------------
"$WORK/sluice_bench" --write-acl-files "$WORK" >/dev/null || die "sluice_bench --write-acl-files failed"

# --- 2. reference: dpdk-test-acl --------------------------------------------------------------------------------
CPU=$(fw idlest_cpu)
log "dpdk-test-acl runs on CPU $CPU (the idlest just now)"
read -r busy0 total0 < <(fw cpu)
acl_cpu=0   # centiseconds of CPU the dpdk-test-acl runs used
for n in 10 1000 10000; do
    for alg in $ACL_ALGS; do
        for ((run = 1; run <= ACL_RUNS; run++)); do
            out="$WORK/acl-$n-$alg-run$run.txt"
            prefix="$ID-acl-$n-$alg-$run"
            PREFIXES+=("$prefix")
            rc=0
            /usr/bin/time -f "%U %S" -o "$out.time" stdbuf -oL "$TESTACL" -l "$CPU" --no-pci --no-telemetry "${MEM_ARGS[@]}" \
                --file-prefix="$prefix" --log-level=error "${SIMD_ARGS[@]}" -- \
                --rulesf="$WORK/rules-$n.txt" --tracef="$WORK/trace-$n.txt" --verbose=0 --alg="$alg" \
                --bldcat=1 --runcat=1 --tracestep=32 --iter="$ACL_ITER" >"$out" 2>&1 </dev/null || rc=$?
            fw acl_cycles "$out" >"$out.cycles"
            if [[ ! -s "$out.cycles" ]]; then
                log "note: dpdk-test-acl $n rules --alg=$alg printed no figure (exit $rc): $(tail -n 1 "$out")"
                break   # an algorithm this CPU/EAL does not offer: no point in running it again
            fi
            (( rc == 0 )) || log "note: dpdk-test-acl $n rules --alg=$alg exited $rc after printing its figure (known crash at exit)"
            read -r u s < <(tail -n 1 "$out.time") || { u=0; s=0; }
            acl_cpu=$(python3 -c "print(round($acl_cpu + ($u + $s) * 100))")
        done
    done
    log "dpdk-test-acl, $n rules: $(for alg in $ACL_ALGS; do printf '%s %s  ' "$alg" "$(cat "$WORK"/acl-$n-$alg-run*.txt.cycles 2>/dev/null | tr '\n' ' ')"; done)"
done
read -r busy1 total1 < <(fw cpu)
# jiffies are 1/100 s here (USER_HZ), like /usr/bin/time's centiseconds.
ACL_OTHERS=$(python3 -c "t = $total1 - $total0; print(max(0.0, ($busy1 - $busy0 - $acl_cpu) / t) if t else 0.0)")

# --- 3. sluice: classify the same files --------------------------------------------------------------------------
CPU=$(fw idlest_cpu)
log "sluice_bench runs on CPU $CPU (the idlest just now)"
for n in 10 1000 10000; do
    "$WORK/sluice_bench" --lcore "$CPU" --only classify --rules "$WORK/rules-$n.txt" --trace "$WORK/trace-$n.txt" --reps "$REPS" \
        --results "$WORK/classify-$n.tsv" "${BENCH_EAL_ADD[@]}" >"$WORK/classify-$n.log" 2>&1 \
        || { tail -n 20 "$WORK/classify-$n.log" >&2; die "sluice_bench (classify, $n rules) failed"; }
    grep -E "^(classify [0-9]|WARNING)" "$WORK/classify-$n.log" >&2 || true
done

# --- 4. sluice: parse, established, new connections, memory -------------------------------------------------------
CPU=$(fw idlest_cpu)
log "sluice_bench runs on CPU $CPU (the idlest just now)"
"$WORK/sluice_bench" --lcore "$CPU" --only parse,established,new,memory --reps "$REPS" --results "$WORK/main.tsv" \
    "${BENCH_EAL_ADD[@]}" >"$WORK/main.log" 2>&1 || { tail -n 20 "$WORK/main.log" >&2; die "sluice_bench failed"; }
grep -E "^(machine|EAL|established:|memory:|WARNING|[a-z]+: [0-9.]+ s,)" "$WORK/main.log" >&2 || true

# --- 5. report ----------------------------------------------------------------------------------------------------
rev=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)
if [[ $rev != unknown ]] && ! git -C "$REPO" diff --quiet HEAD -- . ":(exclude)${BENCH_DOC#"$REPO"/}" 2>/dev/null; then
    rev+=-dirty
fi
cmd="\`tests/bench/firewall.sh\`"
[[ $REPS == 7 && $ACL_RUNS == 3 && $ACL_ITER == 100 && $SIMD512 == 0 ]] \
    || cmd="\`REPS=$REPS ACL_RUNS=$ACL_RUNS ACL_ITER=$ACL_ITER SIMD512=$SIMD512 tests/bench/firewall.sh\`"
extra=""
[[ ${MEM_ARGS[0]} == --no-huge ]] && extra+=", no hugepages"
fw report "$WORK" "$BENCH_DOC" "$RECORD" "$extra" "$cmd @ $rev, sluice_bench $BENCH_ID" "$ACL_OTHERS"

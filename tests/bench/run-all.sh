#!/usr/bin/env bash
# Every benchmark of tests/bench in one go, each appending its rows to docs/benchmarks.md as it does alone:
#
#   tests/bench/run-all.sh [--peers] [--routes] [--nft] [--capacity]   (as root; about 11 minutes; each flag adds one)
#
# Builds the release build directory `build` (sluice and sluice_bench; `meson setup` first if it does not exist),
# then runs forward.sh, forward.sh --pipeline, firewall.sh, `sluice_bench --only lb` (its rows go to the "Load
# balancer" table through firewall.sh's own table code), `sluice_bench --only reload,scaling` (printed), and
# kernel_compare.sh when the lab's tools are installed and no lab is up. --peers adds peer_ovs.sh (OVS-DPDK side by
# side, about 8 minutes: the whole would pass 15, hence a flag); --routes adds forward.sh --routes (a 1M-route kernel
# table, then 3 rounds of 3 runs: 5-10 minutes, a flag for the same reason); --nft adds reload_vs_nft.sh (the reload
# against `nft -f`, about 3 minutes); --capacity adds capacity.sh (1M and 10M connection tables, 2-4 minutes a round,
# CAPACITY_ROUNDS, default 1). All four flags together take about 40 minutes. Not soak.sh (hours). Stops at the first
# failure and names it.
#
# Environment: BUILD (build directory, default build), STEPS (default "forward pipeline firewall lb reload-scaling
# kernel", plus "peer", "routes", "nft", "capacity" with their flags: a subset to run), BENCH_DOC (default
# docs/benchmarks.md; passed on to every script).
set -euo pipefail

readonly REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${BUILD:-build}"; [[ $BUILD == /* ]] || BUILD="$REPO/$BUILD"
STEPS=" ${STEPS:-forward pipeline firewall lb reload-scaling kernel} "
for arg in "$@"; do
    case "$arg" in
        --peers) STEPS+="peer " ;;
        --routes) STEPS+="routes " ;;
        --nft) STEPS+="nft " ;;
        --capacity) STEPS+="capacity " ;;
        -h|--help) ;;
        *) echo "usage: $0 [--peers] [--routes] [--nft] [--capacity]" >&2; exit 2 ;;
    esac
done
readonly STEPS
export BENCH_DOC="${BENCH_DOC:-$REPO/docs/benchmarks.md}"
export SLUICE="$BUILD/app/sluice/sluice" SLUICE_BIN="$BUILD/app/sluice/sluice" SLUICE_BENCH="$BUILD/tests/bench/sluice_bench"
[[ ${1:-} != -h && ${1:-} != --help ]] || { sed -n '2,18p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0; }

log() { printf '\n[run-all.sh] %s\n' "$*" >&2; }
STEP="build"
step() { [[ $STEPS == *" $1 "* ]] || return 0; STEP=$1; log "=== $1: $2"; shift 2; "$@"; }
[[ $EUID -eq 0 ]] || { echo "run as root" >&2; exit 1; }
WORK=$(mktemp -d /tmp/sluice-run-all.XXXXXX)
trap 'rc=$?; rm -rf "$WORK"; (( rc == 0 )) || log "FAIL: step \"$STEP\" failed (exit $rc); the steps after it did not run"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

[[ -f $BUILD/build.ninja ]] || meson setup "$BUILD" "$REPO" --buildtype=release
ninja -C "$BUILD" app/sluice/sluice tests/bench/sluice_bench

# sluice_bench --only lb: firewall.sh's table code (bench_table.py) appends the rows to the "Load balancer" table,
# behind a marker that the first run puts under that table.
lb() {
    local cpu; cpu=$(python3 "$REPO/tests/bench/bench_table.py" idlest_cpu)
    "$SLUICE_BENCH" --only lb --lcore "$cpu" --results "$WORK/lb.tsv"
    local rev; rev=$(git -C "$REPO" rev-parse --short HEAD)
    git -C "$REPO" diff --quiet HEAD -- . ":(exclude)${BENCH_DOC#"$REPO"/}" 2>/dev/null || rev+=-dirty
    python3 - "$REPO/tests/bench" "$WORK" "$BENCH_DOC" "\`${SLUICE_BENCH#"$REPO"/} --only lb --lcore $cpu\` @ $rev, sluice_bench $(sha256sum "$SLUICE_BENCH" | cut -c1-8)" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import bench_table as fw
work, doc, command = sys.argv[2:5]
MARK = "<!-- run-all.sh appends sluice_bench --only lb rows above this line -->"
HEADER = ("## Load balancer: path cost per packet and new connections per second (`sluice_bench --only lb`)\n\n"
             "| date (UTC) | machine | command | measurement (unit) | reference | ref | sluice | ratio |\n"
             "| --- | --- | --- | --- | --- | ---: | ---: | ---: |\n")
lines = open(doc).read().split("\n")
if MARK not in lines and any(l.startswith("## Load balancer") for l in lines):  # under the section's table
    i = next(k for k, l in enumerate(lines) if l.startswith("## Load balancer"))
    i = next(k for k in range(i, len(lines)) if lines[k].startswith("| date (UTC)"))
    while i + 1 < len(lines) and lines[i + 1].startswith("|"):
        i += 1
    lines.insert(i + 1, MARK)
    open(doc, "w").write("\n".join(lines))
meta, rows = fw.read_tsv(f"{work}/lb.tsv")
others = float(meta.get("others_cpu", "0"))
machine = (f"{meta.get('cpu')}, {meta.get('cpus')} vCPU; load {meta.get('load_start')}; others used {others:.0%} CPU"
           + ("; no hugepages" if "--no-huge" in meta.get("eal", "") else "") + (": **noisy**" if others > 0.05 else ""))
out = []
for r in rows.values():
    ref, s = fw.num(r["ref_median"]), fw.num(r["sluice_median"])
    out.append(f"| {meta.get('date', '')[:16]} | {machine} | {command} | {r['measurement']} ({r['unit']}) | "
               f"{r['reference']} | {fw.fmt(ref)} | {fw.fmt(s)} | {fw.fmt(s / ref if ref and s is not None else None)} |")
fw.record_rows(doc, out, MARK, HEADER)
print(f"{len(out)} rows appended to {doc}")
PY
}

lab_ready() {
    local tool
    for tool in iperf3 nft ethtool ip; do command -v "$tool" >/dev/null || { log "kernel_compare.sh skipped: no $tool"; return 1; }; done
    if ip netns list | grep -q '^sl-'; then log "kernel_compare.sh skipped: a lab is up (sl-* namespaces): its sluice would poll on the measured CPUs"; return 1; fi
}

step forward "tests/bench/forward.sh" "$REPO/tests/bench/forward.sh"
step pipeline "tests/bench/forward.sh --pipeline" "$REPO/tests/bench/forward.sh" --pipeline
step routes "tests/bench/forward.sh --routes" "$REPO/tests/bench/forward.sh" --routes
step firewall "tests/bench/firewall.sh" "$REPO/tests/bench/firewall.sh"
step lb "sluice_bench --only lb" lb
step reload-scaling "sluice_bench --only reload,scaling" "$SLUICE_BENCH" --only reload,scaling
step peer "tests/bench/peer_ovs.sh" "$REPO/tests/bench/peer_ovs.sh"
step nft "tests/bench/reload_vs_nft.sh" "$REPO/tests/bench/reload_vs_nft.sh"
step capacity "tests/bench/capacity.sh" env ROUNDS="${CAPACITY_ROUNDS:-1}" SLUICE_BENCH="$SLUICE_BENCH" "$REPO/tests/bench/capacity.sh"
if [[ $STEPS == *" kernel "* ]] && lab_ready; then step kernel "tests/bench/kernel_compare.sh" "$REPO/tests/bench/kernel_compare.sh"; fi
STEP=done
log "all benchmarks ran; rows appended to $BENCH_DOC"

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
#    context) for every algorithm; sluice's figure is the algorithm AclClassifier runs (AclClassifier::classify_method).
# 4. sluice_bench for the rest: parse_burst vs rte_net_get_ptype; stateful_burst on packets of tracked
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

fw() { python3 "$REPO/tests/bench/bench_table.py" "$@"; }

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

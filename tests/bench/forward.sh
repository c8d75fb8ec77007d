#!/usr/bin/env bash
# Forwarding benchmark: sluice against dpdk-testpmd on the same traffic, on this machine, in one go.
#
#   tests/bench/forward.sh [--pipeline | --routes] [--no-record]   (as root; about 90 s: 3 rounds of 2 runs, each 2 s
#                                                       warm-up + 8 s window; pipeline 3 runs a round, about 3.5 min;
#                                                       routes 5-10 min: each routed start reads the 1M routes
#                                                       and builds two copies of sluice's table)
#
# 1. Reference: testpmd txonly (64 B UDP, --txonly-multi-flow) as the memif *server* on CPU 0, started first;
#    then testpmd io as the memif client forwarding memif -> net_null (no-rx=1) with its forwarding lcore on CPU 1.
# 2. sluice: the same generator; sluice as the memif client (port `in`) forwarding to net_null (`out`), one lcore
#    [rx, worker] on CPU 1.
# Each receiver's rate is read from its own counters over telemetry (testpmd: /ethdev/stats,0 ipackets; sluice:
# /sluice/stats port/in/rx_packets), once a second over a window after a warm-up. The two take turns for ROUNDS
# rounds (the VM's speed moves between minutes). Prints both rates in Mpps and sluice/reference per round and their
# medians, the busy cycles per packet of each receiver (testpmd --record-core-cycles; sluice's busy_cycles), and
# appends a row to docs/benchmarks.md (unless --no-record).
#
# --pipeline (or MODE=pipeline): the issue's target "full pipeline over net_memif, 64 B: 1k ACL rules, 100k tracked
# connections, nat service". testpmd 22.11's --txonly-multi-flow varies only the third byte of the IPv4 source
# (src = tx-ip DST | n << 8, plus the lcore id; n = 0..255; UDP ports fixed): 256 flows. So in this mode the
# generator, for both runs, is testpmd io replaying from memory (net_pcap infinite_rx=1) a pcap of FLOWS distinct
# 64 B UDP flows (clients 100.64.0.0 + i, ports 1024-65023) to the VIP 198.51.100.10:53 into the same memif server.
# sluice adds: the firewall with RULES ClassBench-like rules (fixed seed; prefixes /8-/32, the port classes
# WC/HI/LO/EM/AR, a protocol mix) none of which matches the traffic but the last, an allow of udp to the VIP port 53,
# and default deny; a udp `nat` service on the VIP with 8 backends behind `out` (static MACs) and a NAT pool of one
# address per 40k flows; table_size 4 x FLOWS (a NAT connection takes two entries). Each flow's first packet (in the
# warm-up) is classified, given a backend by Maglev and a NAT port; every packet is looked up in conntrack,
# NAT-rewritten and sent. sluice's rate is then what it sent on `out`, not what it received. After the window it
# prints the tracked connections, the packets NATed to each backend and the drops by reason, and fails when less
# than half of the window's packets were NATed and sent. Each round then runs sluice a third time on the same
# traffic with neither firewall nor service (forwarding only): its busy cycles per packet, beside the pipeline's,
# say what the stateful stages cost and what the forwarding around them (memif, parsing, rewrite) costs. Rows go
# to a second table ("Full pipeline").
#
# --routes (or MODE=routes): forwarding by the route table with a full BGP-sized table, the issue's "forwarding ratio
# against testpmd io with a full table". The script runs itself again inside a network namespace of its own
# (sluice-bench-routes-PID, deleted at exit) whose kernel table ROUTES_TABLE it fills with ROUTES random IPv4 prefixes
# of /8-/24 (as sluice_bench's routes section draws them) via one next hop (memif_bench.py load_routes: the
# RTM_NEWROUTE messages `ip route add` sends, a thousand per sendmsg and no acknowledgement waited for; `ip -batch`
# took 149 s for 1M on this shared VM, as it waits for each answer); sluice mirrors that
# table (routing.kernel_table), as it takes a routing daemon's routes in production, and reads it whole at each start
# (static routes in YAML would be parsed again at every start, at yaml-cpp's 2.5-5 MB/s about 10-20 s for 1M, and are
# not how a full table reaches a gateway). The generator replays FLOWS 64 B UDP frames, each to a random address
# inside a random one of the prefixes, so the lookups spread over the table. `out` is a net_pcap device in all three
# runs of a round, whose RX holds the next hop's one ARP reply (sluice learns its MAC from it, as from an answer to
# its solicitation; net_null receives nothing) and whose TX writes to /dev/null (one write(2) per burst). Each round:
# testpmd io (memif -> that device), sluice routing by the table (its rate: what it sent on `out`; the run fails when
# less than 99 % of what it received was routed and sent), and sluice forwarding the same traffic to the same device
# by the port's `forward:` entry: the busy cycles per packet of the two sluice runs say what the lookups in a 1M-route
# table cost. Rows go to a third table ("Forwarding with a full route table"). The memif sockets are abstract, so the
# generator and the receivers all run in the namespace.
#
# Nothing asserts a speed. Exit status 1 only when a process fails to start, no packet arrives, sluice exits
# non-zero (its leaked-mbuf check), sluice's totals do not add up (rx != tx + drops), or (pipeline) most packets
# were not NATed and sent.
#
# Environment: WARMUP (s, default 2; pipeline 5: every flow opens its connection in it; routes 3), DURATION (measured window
# in s, default 8), ROUNDS (default 3), SLUICE (binary, default build/app/sluice/sluice), TESTPMD (default
# dpdk-testpmd), BENCH_DOC (default docs/benchmarks.md), KEEP=1 keeps the work directory (logs, config) and prints
# its path; MODE (plain, pipeline or routes), FLOWS (pipeline and routes, default 100000), RULES (pipeline, default
# 1000), ROUTES (routes, default 1000000), ROUTES_TABLE (routes, default 100).
set -euo pipefail

readonly REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
readonly DURATION="${DURATION:-8}"
readonly ROUNDS="${ROUNDS:-3}"
readonly SLUICE="${SLUICE:-$REPO/build/app/sluice/sluice}"
readonly TESTPMD="${TESTPMD:-dpdk-testpmd}"
readonly BENCH_DOC="${BENCH_DOC:-$REPO/docs/benchmarks.md}"
MODE="${MODE:-plain}"
readonly FLOWS="${FLOWS:-100000}"
readonly RULES="${RULES:-1000}"
readonly ROUTES="${ROUTES:-1000000}"
readonly ROUTES_TABLE="${ROUTES_TABLE:-100}"
RECORD=1
for arg in "$@"; do
    case "$arg" in
        --no-record) RECORD=0 ;;
        --pipeline) MODE=pipeline ;;
        --routes) MODE=routes ;;
        -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "usage: $0 [--pipeline | --routes] [--no-record]" >&2; exit 2 ;;
    esac
done
readonly MODE
# Pipeline: every flow opens its connection in the warm-up. Routes: the next hop's ARP reply is learnt in it.
readonly DEFAULT_WARMUP=$(case $MODE in plain) echo 2 ;; routes) echo 3 ;; *) echo 5 ;; esac)
readonly WARMUP="${WARMUP:-$DEFAULT_WARMUP}"
[[ $MODE == plain || $MODE == pipeline || $MODE == routes ]] || { echo "MODE must be plain, pipeline or routes" >&2; exit 2; }
[[ $ROUTES =~ ^[0-9]+$ ]] && (( ROUTES >= 1 && ROUTES <= 4000000 )) || { echo "ROUTES must be 1-4000000" >&2; exit 2; }
[[ $ROUTES_TABLE =~ ^[0-9]+$ ]] && (( ROUTES_TABLE >= 1 && ROUTES_TABLE != 254 && ROUTES_TABLE != 255 )) \
    || { echo "ROUTES_TABLE must be a table number other than main (254) and local (255)" >&2; exit 2; }
[[ $FLOWS =~ ^[0-9]+$ ]] && (( FLOWS >= 1 && FLOWS <= 500000 )) || { echo "FLOWS must be 1-500000 (16 NAT pool addresses)" >&2; exit 2; }
[[ $RULES =~ ^[0-9]+$ ]] && (( RULES >= 1 )) || { echo "RULES must be at least 1" >&2; exit 2; }
[[ $ROUNDS =~ ^[0-9]+$ ]] && (( ROUNDS >= 1 )) || { echo "ROUNDS must be at least 1" >&2; exit 2; }

# shellcheck source=tests/bench/memif_lib.sh
source "$REPO/tests/bench/memif_lib.sh"
bench() { python3 "$REPO/tests/bench/memif_bench.py" "$@"; }

[[ $EUID -eq 0 ]] || die "run as root (hugepages, /run sockets)"
# Routes mode: the rest runs in a network namespace of its own, where the kernel table is filled.
if [[ $MODE == routes && -z ${SLUICE_BENCH_NETNS:-} ]]; then
    NETNS="sluice-bench-routes-$$"
    ip netns add "$NETNS" || die "cannot create network namespace $NETNS"
    trap 'ip netns del "$NETNS" 2>/dev/null || true' EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    rc=0
    ip netns exec "$NETNS" env SLUICE_BENCH_NETNS="$NETNS" bash "${BASH_SOURCE[0]}" "$@" || rc=$?
    exit "$rc"
fi
[[ -x "$SLUICE" ]] || die "no sluice binary at $SLUICE (build it first)"
command -v "$TESTPMD" >/dev/null || die "$TESTPMD not found (Debian package dpdk-dev)"
command -v python3 >/dev/null || die "python3 not found"
bench_start

log "$MODE mode; sluice binary $SLUICE ($SLUICE_ID); window ${DURATION} s after ${WARMUP} s warm-up; work dir $WORK"

# sluice's config first: a config sluice rejects fails the run before any traffic.
SOCK_SL="/run/$ID-sluice.sock"
write_sluice_config "$WORK/sluice.yaml" "$SOCK_SL"
if [[ $MODE == pipeline ]]; then
    cp "$WORK/sluice.yaml" "$WORK/sluice-forward.yaml"  # the same traffic forwarded only: what the stages add
    bench pipeline_config "$WORK/sluice.yaml" "$FLOWS" "$RULES"
    bench write_pcap "$WORK/flows.pcap" "$FLOWS"
    log "pipeline: $RULES rules, $FLOWS UDP flows to the nat service 198.51.100.10:53 (8 backends)"
fi
# Routes mode: the kernel's leg on the next hop's link (a veth: a route's gateway must be on a link of the kernel's),
# the table, the traffic, and the sink device of every run.
ROUTES_SUMMARY=""
OUT_DEVICE="net_null0,no-rx=1"
if [[ $MODE == routes ]]; then
    readonly ROUTES_SLUICE_ADDRESS=10.0.0.1/24
    # sluice's two copies of a 1M-route table (each a 64 MiB DIR-24-8 level, its rte_rib nodes and next hops), its
    # mbufs, and the generator's replayed flows.
    reserve_hugepages 800
    ip link set lo up
    ip link add sl-routes-gw type veth peer name sl-routes-gwp
    ip link set sl-routes-gw up && ip link set sl-routes-gwp up
    ip addr add 10.0.0.254/24 dev sl-routes-gw
    bench routes_files "$WORK/routes.batch" "$WORK/flows.pcap" "$ROUTES" "$FLOWS" "$ROUTES_TABLE"
    loaded=$(date +%s.%N)
    bench load_routes "$WORK/routes.batch" "$ROUTES_TABLE" || die "could not fill kernel table $ROUTES_TABLE"
    loaded=$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.0f}')" "$loaded" "$(date +%s.%N)")
    in_table=$(ip -4 route show table "$ROUTES_TABLE" | wc -l)
    (( in_table == ROUTES )) || die "kernel table $ROUTES_TABLE holds $in_table routes, not $ROUTES"
    log "routes: $ROUTES routes in kernel table $ROUTES_TABLE of namespace $SLUICE_BENCH_NETNS in $loaded s"
    bench arp_pcap "$WORK/arp.pcap"
    OUT_DEVICE="net_pcap0,rx_pcap=$WORK/arp.pcap,tx_pcap=/dev/null"
    write_sluice_config "$WORK/sluice-forward.yaml" "$SOCK_SL" "$OUT_DEVICE"
    write_sluice_config "$WORK/sluice.yaml" "$SOCK_SL" "$OUT_DEVICE" routed
    ROUTES_SUMMARY="$ROUTES IPv4 routes (/8-/24) in the kernel table (loaded in $loaded s)"
fi
check_sluice_configs

# --- 1. references: testpmd io, and (plain mode) testpmd 5tswap ------------------------------------------------
# run_reference K [5tswap]: round K's reference, testpmd io (which touches no packet) or 5tswap (which swaps each
# packet's MACs, addresses and ports, touching L2-L4 as sluice does); its figures go to $WORK/ref-K.json and
# $WORK/cycles-K (io), or $WORK/ref5tswap-K.json and $WORK/cycles5tswap-K.
run_reference() {
    local k=$1 fwd=${2:-io} sock="/run/$ID-ref.sock"
    local name="ref${2:-}" cycles="$WORK/cycles${2:-}-$k"
    start_generator "$name-$k" "$sock"
    PREFIXES+=("$ID-$name-rcv-$k")
    "$TESTPMD" --lcores=0@0,1@1 --no-pci --in-memory --file-prefix="$ID-$name-rcv-$k" \
        --vdev="net_memif0,role=client,socket=$sock" --vdev="$OUT_DEVICE" -- \
        --no-mlockall --forward-mode="$fwd" --burst=32 --nb-cores=1 --total-num-mbufs=16384 --stats-period=1 \
        --record-core-cycles \
        </dev/null >"$WORK/$name-rcv-$k.log" 2>&1 &
    RCV_PID=$!
    PIDS+=("$RCV_PID")
    if ! BENCH_PIDS="$GEN_PID $RCV_PID" bench sample "$RUNDIR/$ID-$name-rcv-$k/dpdk_telemetry.v2" "$WARMUP" \
            "$DURATION" \
            /ethdev/stats,0 ipackets >"$WORK/$name-$k.json"; then
        show_log "$WORK/$name-rcv-$k.log"
        die "reference: the receiver (testpmd $fwd) did not start or stopped answering"
    fi
    finish_run "$name-$k" "$RCV_PID" INT generator-first
    [[ $RECEIVER_RC == 0 ]] || log "warning: reference: testpmd $fwd exited $(describe_rc "$RECEIVER_RC")"
    bench testpmd_cycles "$WORK/$name-rcv-$k.log" >"$cycles"
    bench summary "$WORK/$name-$k.json" "round $k: reference (testpmd $fwd)"
    [[ $(bench field "$WORK/$name-$k.json" packets) != 0 ]] \
        || { show_log "$WORK/$name-rcv-$k.log"; die "reference: no packet arrived"; }
}

# --- 2. sluice ------------------------------------------------------------------------------------------------
# run_sluice K [forward]: round K's sluice run: $WORK/sluice-K.json, and $WORK/cycles-K (and cycles5tswap-K);
# FAILED=1 when sluice misbehaved. With `forward` (pipeline and routes modes): sluice forwarding the same traffic
# by the port's forward entry with neither firewall nor service nor route lookup ($WORK/sluice-forward.yaml), into
# $WORK/sluice-forward-K.json and its busy cycles per packet into $WORK/cycles-forward-K.
FAILED=0
run_sluice() {
    local k=$1 variant=${2:-}
    local name="sluice${variant:+-$variant}"
    local log="$WORK/$name-$k.log"
    start_generator "$name-$k" "$SOCK_SL"
    "$WORK/sluice" --config "$WORK/$name.yaml" </dev/null >"$log" 2>&1 &
    SL_PID=$!
    PIDS+=("$SL_PID")
    # With a full kernel table sluice reads it and builds both copies of its route table before it is ready.
    if ! wait_for "$SL_PID" "$([[ $MODE == routes ]] && echo 300 || echo 20)" grep -qs "ready:" "$log"; then
        show_log "$log"; die "sluice did not start"
    fi
    if [[ $MODE == routes && -z $variant ]] && ! wait_for "$SL_PID" 120 grep -qEs \
            "kernel table $ROUTES_TABLE: $ROUTES prefixes mirrored" "$log"; then
        show_log "$log"; die "sluice did not mirror the $ROUTES routes of kernel table $ROUTES_TABLE"
    fi
    # The rate: what sluice received; in pipeline mode what it sent (NATed) on `out`.
    local rate=(/sluice/stats port/in/rx_packets /ethdev/stats,0)
    [[ $MODE == plain ]] || rate=(/sluice/stats port/out/tx_packets /ethdev/stats,0)
    [[ $MODE != pipeline || -n $variant ]] || rate+=(/sluice/backends)
    if ! BENCH_PIDS="$GEN_PID $SL_PID" bench sample "$RUNDIR/$ID-sluice/dpdk_telemetry.v2" "$WARMUP" "$DURATION" "${rate[@]}" \
            >"$WORK/$name-$k.json"; then
        show_log "$log"; die "sluice's telemetry did not answer"
    fi
    finish_run "$name-$k" "$SL_PID" TERM receiver-first
    # The cycles file holds "reference sluice" when both figures exist.
    local ref_cycles sl_cycles
    sl_cycles=$(bench sluice_cycles "$WORK/$name-$k.json")
    if [[ -n $variant ]]; then
        echo "$sl_cycles" >"$WORK/cycles-$variant-$k"
    else
        local cycles
        for cycles in "$WORK/cycles-$k" "$WORK/cycles5tswap-$k"; do
            [[ -f $cycles ]] || continue
            ref_cycles=$(cat "$cycles")
            if [[ -n $ref_cycles && -n $sl_cycles ]]; then echo "$ref_cycles $sl_cycles" >"$cycles"
            else : >"$cycles"; fi
        done
    fi
    local what=""
    [[ $MODE != routes ]] || what=" (by the route table)"
    [[ -z $variant ]] || what=" ($variant only: no firewall, no service$([[ $MODE != routes ]] || echo ", no route lookup"))"
    bench summary "$WORK/$name-$k.json" "round $k: sluice$what"
    bench window_check "$WORK/$name-$k.json"
    if [[ $MODE == pipeline && -z $variant ]]; then bench pipeline_check "$WORK/sluice-$k.json" "$FLOWS" || FAILED=1; fi
    if [[ $MODE == routes && -z $variant ]]; then bench routes_check "$WORK/sluice-$k.json" || FAILED=1; fi
    if [[ $RECEIVER_RC != 0 ]]; then
        log "FAIL: sluice exited $(describe_rc "$RECEIVER_RC") on SIGTERM (2: startup, 3: leaked mbufs)"
        show_log "$log"; FAILED=1
    fi
    bench totals_check "$log" || { show_log "$log"; FAILED=1; }
    [[ $(bench field "$WORK/$name-$k.json" packets) != 0 ]] || { show_log "$log"; log "FAIL: sluice: no packet arrived"; FAILED=1; }
}

# The VM's speed moves by up to 2x between minutes: the two receivers take turns, and the medians are reported.
for ((round = 1; round <= ROUNDS; round++)); do
    run_reference "$round"
    [[ $MODE != plain ]] || run_reference "$round" 5tswap
    run_sluice "$round"
    [[ $MODE == plain ]] || run_sluice "$round" forward
done

# --- 3. report ------------------------------------------------------------------------------------------------
combined=$(bench combine "$WORK" "$ROUNDS") || die "could not combine the rounds' figures (see above)"
IFS=$'\t' read -r REF_M SL_M RATIO RATIO_CELL CYCLES others NOISY <<<"$combined"
echo "reference ${REF_M} Mpps, sluice ${SL_M} Mpps (medians of $ROUNDS rounds), ratio sluice/reference ${RATIO_CELL}"
# The rates compare the receivers only while each is the bottleneck of its run; a generator that cannot fill the
# receiver (it shares the machine's other vCPU) caps both. Busy cycles per packet compare what each receiver's core
# spends on a packet, whatever the generator's pace: reference/sluice is the rate ratio both would reach CPU-bound.
# Not quite like for like: testpmd counts its non-empty bursts over its whole run (warm-up included), sluice whole
# loop iterations that moved packets (expiry, TX drain and RCU report included) over the window.
if [[ $CYCLES != "—" ]]; then
    echo "busy cycles per packet: reference (testpmd --record-core-cycles, whole run) / sluice (busy_cycles, window): $CYCLES"
else
    log "note: no cycles-per-packet figure (testpmd printed none, or sluice received nothing)"
fi
if [[ $MODE == plain ]]; then
    combined=$(bench combine "$WORK" "$ROUNDS" ref5tswap cycles5tswap) || die "could not combine the 5tswap rounds"
    IFS=$'\t' read -r REF5_M _ RATIO5 RATIO5_CELL CYCLES5 others5 NOISY5 <<<"$combined"
    echo "reference testpmd 5tswap ${REF5_M} Mpps, ratio sluice/5tswap ${RATIO5_CELL}; busy cycles per packet" \
         "5tswap / sluice: $CYCLES5"
    echo "forwarding target: >= 0.95 of testpmd 5tswap:" \
         "$(python3 -c "print('met' if $RATIO5 >= 0.95 else 'NOT met')")"
    (( NOISY5 == 0 )) || log "note: other processes used up to $others5 of the CPUs during the 5tswap/sluice windows"
fi
FORWARD_ONLY=""
if [[ $MODE != plain ]]; then
    FORWARD_ONLY=$(bench forward_only "$WORK" "$ROUNDS" "$MODE") || die "could not combine the forwarding-only runs' figures"
    echo "$FORWARD_ONLY"
fi
if [[ $MODE == pipeline ]]; then
    echo "pipeline target (the issue): ratio >= 0.80: $(python3 -c "print('met' if $RATIO >= 0.80 else 'NOT met')")"
fi
if (( NOISY )); then
    log "note: other processes used up to $others of the CPUs during the reference/sluice windows: these figures are" \
        "low and noisy; rerun on a quiet machine to compare"
fi
(( FAILED == 0 )) || die "sluice misbehaved (see above); no row recorded"

if (( RECORD )); then
    cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1 | sed 's/(R)//g; s/(TM)//g; s/  */ /g')
    machine="$cpu, $(nproc) vCPU; others used $others CPU"
    (( NOISY == 0 )) || machine+=": **noisy**"
    # The commit, "-dirty" when tracked files differ from it (this table excepted: recording a row edits it).
    rev=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)
    if [[ $rev != unknown ]] && ! git -C "$REPO" diff --quiet HEAD -- . ":(exclude)${BENCH_DOC#"$REPO"/}" 2>/dev/null; then
        rev+=-dirty
    fi
    env=""
    [[ $WARMUP == "$DEFAULT_WARMUP" && $DURATION == 8 ]] || env+="WARMUP=$WARMUP DURATION=$DURATION "
    [[ $ROUNDS == 3 ]] || env+="ROUNDS=$ROUNDS "
    [[ $MODE != pipeline || ($FLOWS == 100000 && $RULES == 1000) ]] || env+="FLOWS=$FLOWS RULES=$RULES "
    [[ $MODE != routes || ($FLOWS == 100000 && $ROUTES == 1000000) ]] || env+="FLOWS=$FLOWS ROUTES=$ROUTES "
    cmd="\`${env}tests/bench/forward.sh$([[ $MODE == plain ]] || echo " --$MODE")\`"
    summary=""
    [[ $MODE != pipeline ]] || summary="round $ROUNDS: $(bench pipeline_summary "$WORK/sluice-$ROUNDS.json" "$FLOWS" "$RULES"); $FORWARD_ONLY"
    [[ $MODE != routes ]] || summary="$ROUTES_SUMMARY, $FLOWS flows; $FORWARD_ONLY"
    bench record "$BENCH_DOC" "$MODE" "$(date -u '+%Y-%m-%d %H:%M')" "$machine" "$cmd @ $rev, sluice binary $SLUICE_ID" \
        "$REF_M" "$SL_M" "$RATIO_CELL" "$CYCLES" "$summary"
    if [[ $MODE == plain ]]; then
        bench record "$BENCH_DOC" 5tswap "$(date -u '+%Y-%m-%d %H:%M')" \
            "$cpu, $(nproc) vCPU; others used $others5 CPU$( (( NOISY5 == 0 )) || echo ": **noisy**")" \
            "$cmd @ $rev, sluice binary $SLUICE_ID" "$REF5_M" "$SL_M" "$RATIO5_CELL" "$CYCLES5"
    fi
    log "rows appended to $BENCH_DOC"
fi

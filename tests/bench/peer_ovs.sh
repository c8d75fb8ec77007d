#!/usr/bin/env bash
# sluice against OVS-DPDK doing the same four jobs on the same memif traffic, side by side, in one go.
#
#   tests/bench/peer_ovs.sh [--no-record]   (as root, after `deploy/install-deps.sh --bench-extras`; about 8 min)
#
# Traffic: forward.sh --pipeline's: testpmd io replays from memory a pcap of FLOWS 64 B UDP flows (clients
# 100.64.0.0 + i) to the VIP 198.51.100.10:53 into a memif server on CPU 0. The receiver, on CPU 1, is sluice (one
# [rx, worker] lcore, its main lcore on CPU 0) or OVS-DPDK (Debian's openvswitch-switch-dpdk on the same DPDK 22.11:
# one PMD thread on CPU 1, its other threads on CPU 0, a netdev bridge with the memif client `in` and a net_null sink
# `out`). The jobs, each a sluice config and an OpenFlow table doing the same thing (peer_ovs.py write_flows):
#   plain     forward in -> out: TTL decremented, both MACs rewritten
#   firewall  conntrack + RULES ClassBench-like rules (none matches but the last allow; OVS: the port ranges as
#             value/mask matches, about 5.3 flows a rule), default deny; FLOWS tracked connections
#   lb        the nat service: DNAT to one of 8 backends by hash (OVS: a select group, ct nat in zone 1) and SNAT to
#             the pool (OVS: ct nat in zone 2); no rules
#   pipeline  firewall + lb, as forward.sh --pipeline
# In each of ROUNDS rounds every job runs on both, their order alternating; each run starts its receiver afresh and
# measures a DURATION s window after WARMUP s (every flow opens its connection in it). OVS runs twice per run: with
# its defaults (EMC on, SMC off), then with SMC on and EMC off (emc-insert-inv-prob=0), which suits 100k flows
# better. Figures: busy cycles per received packet (OVS: the PMD's processing cycles from dpif-netdev/pmd-stats-show;
# sluice: busy_cycles) and OVS/sluice per round, with medians; what each sent as context. The machine is shared:
# compare the ratios within a round, not cycles across runs.
#
# OVS runs with its own database, run and log directories under the work directory (OVS_RUNDIR, OVS_DBDIR, ...) and
# its own EAL prefix; a system OVS, if any, is not touched. Everything started is stopped at exit.
#
# Exit status 1 when a process fails to start, a receiver sends less than half of what it received, sluice exits
# non-zero or its totals do not add up. Nothing asserts a speed; the issue's targets are printed as met or not.
#
# Environment: WARMUP (s, default 5), DURATION (s, default 5), ROUNDS (default 3), JOBS (default "plain firewall lb
# pipeline"), FLOWS (default 100000), RULES (default 1000), SLUICE, TESTPMD, OVS_VSWITCHD (default Debian's DPDK
# build, /usr/lib/openvswitch-switch-dpdk/ovs-vswitchd-dpdk), BENCH_DOC, KEEP=1 (keeps the work directory).
set -euo pipefail

readonly REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
readonly WARMUP="${WARMUP:-5}"
readonly DURATION="${DURATION:-5}"
readonly ROUNDS="${ROUNDS:-3}"
readonly JOBS="${JOBS:-plain firewall lb pipeline}"
readonly FLOWS="${FLOWS:-100000}"
readonly RULES="${RULES:-1000}"
readonly SLUICE="${SLUICE:-$REPO/build/app/sluice/sluice}"
readonly TESTPMD="${TESTPMD:-dpdk-testpmd}"
readonly OVS_VSWITCHD="${OVS_VSWITCHD:-/usr/lib/openvswitch-switch-dpdk/ovs-vswitchd-dpdk}"
readonly BENCH_DOC="${BENCH_DOC:-$REPO/docs/benchmarks.md}"
readonly MODE=peer  # the generator replays the flows' pcap
readonly GEN_RXQ=2  # OVS opens a TX queue per PMD thread plus one on the memif port
RECORD=1
for arg in "$@"; do
    case "$arg" in
        --no-record) RECORD=0 ;;
        -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "usage: $0 [--no-record]" >&2; exit 2 ;;
    esac
done
for job in $JOBS; do
    [[ " plain firewall lb pipeline " == *" $job "* ]] || { echo "unknown job '$job' in JOBS" >&2; exit 2; }
done
[[ $FLOWS =~ ^[0-9]+$ ]] && (( FLOWS >= 1 && FLOWS <= 500000 )) || { echo "FLOWS must be 1-500000" >&2; exit 2; }
[[ $RULES =~ ^[0-9]+$ ]] && (( RULES >= 1 )) || { echo "RULES must be at least 1" >&2; exit 2; }
[[ $ROUNDS =~ ^[0-9]+$ ]] && (( ROUNDS >= 1 )) || { echo "ROUNDS must be at least 1" >&2; exit 2; }

# shellcheck source=tests/bench/memif_lib.sh
source "$REPO/tests/bench/memif_lib.sh"
bench() { python3 "$REPO/tests/bench/memif_bench.py" "$@"; }
peer() { python3 "$REPO/tests/bench/peer_ovs.py" "$@"; }

[[ $EUID -eq 0 ]] || die "run as root (hugepages, /run sockets)"
[[ -x "$SLUICE" ]] || die "no sluice binary at $SLUICE (build it first)"
command -v "$TESTPMD" >/dev/null || die "$TESTPMD not found (Debian package dpdk-dev)"
for tool in "$OVS_VSWITCHD" ovsdb-tool ovsdb-server ovs-vsctl ovs-ofctl ovs-appctl; do
    command -v "$tool" >/dev/null || die "$tool not found: deploy/install-deps.sh --bench-extras installs OVS-DPDK"
done
bench_start
ovs_version() { "$OVS_VSWITCHD" --version | head -n1 | sed 's/.*) //'; }
log "sluice binary $SLUICE ($SLUICE_ID); OVS $(ovs_version); jobs: $JOBS; $ROUNDS rounds;" \
    "window ${DURATION} s after ${WARMUP} s warm-up; work dir $WORK"

# --- traffic, sluice's configs, OVS's tables ------------------------------------------------------------------
SOCK_SL="/run/$ID-sluice.sock"
SOCK_OVS="/run/$ID-ovs.sock"
bench write_pcap "$WORK/flows.pcap" "$FLOWS"
for job in $JOBS; do
    write_sluice_config "$WORK/sluice-$job.yaml" "$SOCK_SL"
    case $job in
        firewall) bench pipeline_config "$WORK/sluice-$job.yaml" "$FLOWS" "$RULES" firewall ;;
        lb) bench pipeline_config "$WORK/sluice-$job.yaml" "$FLOWS" "$RULES" lb ;;
        pipeline) bench pipeline_config "$WORK/sluice-$job.yaml" "$FLOWS" "$RULES" firewall,lb ;;
    esac
    log "$job: $(peer write_flows "$WORK" "$job" "$FLOWS" "$RULES") OpenFlow flows"
done
check_sluice_configs

# --- OVS: its own database and directories --------------------------------------------------------------------
readonly OVS_DIR="$WORK/ovs"
mkdir -p "$OVS_DIR"
export OVS_RUNDIR="$OVS_DIR" OVS_DBDIR="$OVS_DIR" OVS_LOGDIR="$OVS_DIR" OVS_SYSCONFDIR="$OVS_DIR"
VSCTL=(ovs-vsctl --db="unix:$OVS_DIR/db.sock" --timeout=30)
OFCTL="ovs-ofctl -O OpenFlow15 --timeout=30"
APPCTL="ovs-appctl -t $OVS_DIR/ovs-vswitchd.ctl --timeout=30"
ovsdb-tool create "$OVS_DIR/conf.db" /usr/share/openvswitch/vswitch.ovsschema
taskset -c 0 ovsdb-server "$OVS_DIR/conf.db" --remote="punix:$OVS_DIR/db.sock" --unixctl="$OVS_DIR/ovsdb-server.ctl" \
    --log-file="$OVS_DIR/ovsdb-server.log" </dev/null >/dev/null 2>&1 &
DB_PID=$!
PIDS+=("$DB_PID")
wait_for "$DB_PID" 20 "${VSCTL[@]}" --no-wait init 2>/dev/null \
    || die "ovsdb-server did not start ($OVS_DIR/ovsdb-server.log)"
PREFIXES+=("$ID-ovs")
"${VSCTL[@]}" --no-wait set Open_vSwitch . other_config:dpdk-init=true \
    "other_config:dpdk-extra=--no-pci --in-memory --file-prefix=$ID-ovs" other_config:dpdk-lcore-mask=0x1 \
    other_config:pmd-cpu-mask=0x2 other_config:dpdk-socket-mem=1024 other_config:dpdk-socket-limit=1024 \
    other_config:n-handler-threads=1 other_config:n-revalidator-threads=1 \
    -- add-br br0 -- set bridge br0 datapath_type=netdev \
    -- add-port br0 in -- set Interface in type=dpdk ofport_request=1 \
       "options:dpdk-devargs=net_memif0,role=client,socket=$SOCK_OVS,id=0" \
    -- add-port br0 out -- set Interface out type=dpdk ofport_request=2 "options:dpdk-devargs=net_null0,no-rx=1"

ovs_ready() {
    local ports
    ports=$($OFCTL dump-ports-desc br0 2>/dev/null) && grep -q '^ 1(in)' <<<"$ports" && grep -q '^ 2(out)' <<<"$ports"
}

# run_ovs K JOB: round K's OVS run of JOB: $WORK/ovs-JOB-K-emc.json and -smc.json.
run_ovs() {
    local k=$1 job=$2 name="ovs-$2-$1"
    start_generator "$name" "$SOCK_OVS"  # the memif server must be up before OVS adds its port
    "${VSCTL[@]}" --no-wait set Open_vSwitch . other_config:smc-enable=false other_config:emc-insert-inv-prob=100
    taskset -c 0 "$OVS_VSWITCHD" "unix:$OVS_DIR/db.sock" --unixctl="$OVS_DIR/ovs-vswitchd.ctl" \
        --log-file="$WORK/$name.log" </dev/null >/dev/null 2>&1 &
    local vs_pid=$!
    PIDS+=("$vs_pid")
    wait_for "$vs_pid" 60 ovs_ready || { show_log "$WORK/$name.log"; die "$name: ovs-vswitchd did not start"; }
    [[ ! -s $WORK/ovs-$job.groups ]] || $OFCTL add-groups br0 "$WORK/ovs-$job.groups"
    $OFCTL replace-flows br0 "$WORK/ovs-$job.flows"
    sleep "$WARMUP"
    peer ovs_window "$WORK/$name-emc.json" "$DURATION" "$GEN_PID $vs_pid" "$APPCTL" "$OFCTL"
    peer ovs_summary "$WORK/$name-emc.json" "round $k: $job: OVS (EMC on, SMC off)" \
        || { show_log "$WORK/$name.log"; FAILED=1; }
    "${VSCTL[@]}" set Open_vSwitch . other_config:smc-enable=true other_config:emc-insert-inv-prob=0
    sleep 2  # the SMC fills from megaflow hits: every flow comes by several times a second
    peer ovs_window "$WORK/$name-smc.json" "$DURATION" "$GEN_PID $vs_pid" "$APPCTL" "$OFCTL"
    peer ovs_summary "$WORK/$name-smc.json" "round $k: $job: OVS (SMC on, EMC off)" \
        || { show_log "$WORK/$name.log"; FAILED=1; }
    [[ $job == plain ]] \
        || log "round $k: $job: OVS conntrack: $($APPCTL dpctl/ct-stats-show | sed -n 's/^ *Total: //p') entries"
    finish_run "$name" "$vs_pid" TERM receiver-first
}

# run_sluice K JOB: round K's sluice run of JOB: $WORK/sluice-JOB-K.json.
run_sluice() {
    local k=$1 job=$2 name="sluice-$2-$1"
    start_generator "$name" "$SOCK_SL"
    "$WORK/sluice" --config "$WORK/sluice-$job.yaml" </dev/null >"$WORK/$name.log" 2>&1 &
    local sl_pid=$!
    PIDS+=("$sl_pid")
    wait_for "$sl_pid" 30 grep -qs "ready:" "$WORK/$name.log" \
        || { show_log "$WORK/$name.log"; die "$name: sluice did not start"; }
    local rate=(/sluice/stats port/out/tx_packets /ethdev/stats,0)
    [[ $job != lb && $job != pipeline ]] || rate+=(/sluice/backends)
    BENCH_PIDS="$GEN_PID $sl_pid" bench sample "$RUNDIR/$ID-sluice/dpdk_telemetry.v2" "$WARMUP" "$DURATION" \
        "${rate[@]}" \
        >"$WORK/$name.json" || { show_log "$WORK/$name.log"; die "$name: sluice's telemetry did not answer"; }
    finish_run "$name" "$sl_pid" TERM receiver-first
    bench summary "$WORK/$name.json" "round $k: $job: sluice"
    bench window_check "$WORK/$name.json"
    if [[ $job == lb || $job == pipeline ]]; then
        bench pipeline_check "$WORK/$name.json" "$FLOWS" || FAILED=1
    else
        peer sluice_check "$WORK/$name.json" "round $k: $job: sluice" || FAILED=1
    fi
    if [[ $RECEIVER_RC != 0 ]]; then
        log "FAIL: sluice exited $(describe_rc "$RECEIVER_RC") on SIGTERM (2: startup, 3: leaked mbufs)"
        show_log "$WORK/$name.log"; FAILED=1
    fi
    bench totals_check "$WORK/$name.log" || { show_log "$WORK/$name.log"; FAILED=1; }
}

FAILED=0
turn=0
for ((round = 1; round <= ROUNDS; round++)); do
    for job in $JOBS; do
        # Who goes first alternates, so that neither always meets the machine's next mood.
        if (( turn++ % 2 == 0 )); then run_ovs "$round" "$job"; run_sluice "$round" "$job"
        else run_sluice "$round" "$job"; run_ovs "$round" "$job"; fi
    done
done
(( FAILED == 0 )) || die "a receiver misbehaved (see above); no row recorded"

# --- report ---------------------------------------------------------------------------------------------------
peer combine "$WORK" "$ROUNDS" "$JOBS" >"$WORK/combined.tsv" || die "could not combine the rounds' figures"
echo "busy cycles per packet, medians of $ROUNDS rounds (OVS/sluice: the median of the rounds' ratios):"
while IFS=$'\t' read -r job emc smc slu emc_cell smc_cell rates others; do
    echo "  $job: OVS EMC $emc, OVS SMC $smc, sluice $slu; OVS/sluice $emc_cell (EMC), $smc_cell (SMC);" \
         "Mpps sent OVS EMC / SMC / sluice $rates; others used up to $others CPU"
done <"$WORK/combined.tsv"
peer targets "$WORK/combined.tsv"
echo "note: the machine is shared; the ratios within a round compare, the cycles across runs do not."

if (( RECORD )); then
    cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1 | sed 's/(R)//g; s/(TM)//g; s/  */ /g')
    rev=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)
    if [[ $rev != unknown ]] \
        && ! git -C "$REPO" diff --quiet HEAD -- . ":(exclude)${BENCH_DOC#"$REPO"/}" 2>/dev/null; then
        rev+=-dirty
    fi
    env=""
    [[ $WARMUP == 5 && $DURATION == 5 ]] || env+="WARMUP=$WARMUP DURATION=$DURATION "
    [[ $ROUNDS == 3 ]] || env+="ROUNDS=$ROUNDS "
    [[ $FLOWS == 100000 && $RULES == 1000 ]] || env+="FLOWS=$FLOWS RULES=$RULES "
    peer record "$BENCH_DOC" "$WORK/combined.tsv" "$(date -u '+%Y-%m-%d %H:%M')" "$cpu, $(nproc) vCPU" \
        "\`${env}tests/bench/peer_ovs.sh\` @ $rev, sluice binary $SLUICE_ID, OVS $(ovs_version)"
    log "rows appended to $BENCH_DOC"
fi

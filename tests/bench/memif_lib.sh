# The memif benchmarks' shared shell: the work directory and its clean-up, process control, and the testpmd
# generator (memif server). Sourced by tests/bench/forward.sh and peer_ovs.sh, which set SLUICE, TESTPMD, MODE
# (plain: txonly; otherwise a pcap of FLOWS flows, $WORK/flows.pcap, replayed) and FLOWS, then call bench_start.
# log and die name the sourcing script; a function extra_cleanup, when the script defines one, runs first at exit.

log() { printf '[%s] %s\n' "$(basename "$0")" "$*" >&2; }
die() { log "FAIL: $*"; exit 1; }

# bench_start: the work directory ($WORK; EAL prefixes and sockets use $ID), the clean-up at exit, and a copy of
# $SLUICE run from it (a rebuild during the benchmark must not swap the binary between the check and the run); its
# hash and build time in $SLUICE_ID go into the table (the commit alone does not tell which code a working tree's
# binary was built from).
bench_start() {
    ulimit -c 0   # a crashing testpmd would drop a core file in the current directory
    # The EAL puts its runtime directory under $RUNTIME_DIRECTORY when set; keep everything under /var/run/dpdk.
    unset RUNTIME_DIRECTORY
    declare -gr RUNDIR=/var/run/dpdk
    declare -gr ID="sluice-bench-$$"
    declare -gr WORK="$(mktemp -d "/tmp/$ID.XXXXXX")"
    PIDS=()        # every process this script started and has not reaped yet
    PREFIXES=()    # EAL file prefixes used (their runtime dirs are removed at exit)
    SOCKETS=()     # memif sockets
    trap cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    cp "$SLUICE" "$WORK/sluice"
    declare -gr SLUICE_ID="$(sha256sum "$WORK/sluice" | cut -c1-8), built $(date -u -r "$SLUICE" '+%Y-%m-%d %H:%M')"
}

cleanup() {
    local pid
    if declare -F extra_cleanup >/dev/null; then extra_cleanup || true; fi
    for pid in "${PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    local p
    for p in "${PREFIXES[@]}"; do rm -rf "${RUNDIR:?}/$p" /dev/hugepages/"$p"map_*; done
    restore_hugepages
    rm -f "${SOCKETS[@]}"
    if [[ "${KEEP:-0}" == 1 ]]; then log "kept $WORK"; else rm -rf "$WORK"; fi
}

# shellcheck source=tests/bench/hugepages_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/hugepages_lib.sh"

forget_pid() {
    local keep=() p
    for p in "${PIDS[@]}"; do [[ $p == "$1" ]] || keep+=("$p"); done
    PIDS=("${keep[@]}")
}

# alive PID: true while PID runs (a child that exited but was not reaped yet is a zombie: not alive).
alive() {
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    stat=${stat##*) }
    [[ ${stat:0:1} != Z ]]
}

# stop PID SIGNAL TIMEOUT: signal, wait up to TIMEOUT s (then SIGKILL), reap; sets STOP_RC to the exit status.
stop() {
    local pid=$1 sig=$2 timeout=$3 i
    STOP_RC=0
    kill "-$sig" "$pid" 2>/dev/null || true
    for ((i = 0; i < timeout * 10; i++)); do alive "$pid" || break; sleep 0.1; done
    if alive "$pid"; then
        log "warning: pid $pid did not stop within $timeout s of SIG$sig; killing it"
        kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" || STOP_RC=$?
    forget_pid "$pid"
}

describe_rc() {
    local rc=$1
    if (( rc > 128 )); then echo "$rc (signal $(kill -l $((rc - 128)) 2>/dev/null || echo $((rc - 128))))"; else echo "$rc"; fi
}

# wait_for PID TIMEOUT CONDITION...: polls CONDITION every 0.1 s while PID lives.
wait_for() {
    local pid=$1 timeout=$2; shift 2
    local deadline=$((SECONDS + timeout))
    until "$@"; do
        alive "$pid" || return 1
        (( SECONDS < deadline )) || return 2
        sleep 0.1
    done
}

show_log() { log "--- last lines of $1"; tail -n 25 "$1" | sed 's/\x1b\[[0-9;]*[A-Za-z]//g' >&2 || true; }

# start_generator NAME SOCKET: testpmd as the memif server, forwarding lcore on CPU 0: txonly, or (MODE other than
# plain) io from the flows' pcap replayed in a loop (every frame is held in an mbuf, hence the pool). GEN_RXQ
# (default 1) queues on each port: a client that opens more TX queues than the server has RX queues is refused
# ("Invalid ring index"); with 2 the pcap is replayed once per queue. Sets GEN_PID.
start_generator() {
    local name=$1 sock=$2 prefix="$ID-$1-gen" source rxq=${GEN_RXQ:-1} pcaps="" q
    PREFIXES+=("$prefix"); SOCKETS+=("$sock")
    rm -f "$sock"
    if [[ $MODE != plain ]]; then
        for ((q = 0; q < rxq; q++)); do pcaps+=",rx_pcap=$WORK/flows.pcap"; done
        source=(--vdev="net_pcap0${pcaps},infinite_rx=1" --vdev="net_memif0,role=server,socket=$sock"
                -- --forward-mode=io --mbuf-size=256 --total-num-mbufs=$((rxq * FLOWS + 32768)))
    else
        source=(--vdev="net_memif0,role=server,socket=$sock"
                -- --forward-mode=txonly --txpkts=64 --txonly-multi-flow --port-topology=loop --total-num-mbufs=16384)
    fi
    (( rxq == 1 )) || source+=(--rxq="$rxq" --txq=1)
    "$TESTPMD" --lcores=0@0,1@0 --no-pci --in-memory --file-prefix="$prefix" "${source[@]}" \
        --no-mlockall --burst=32 --nb-cores=1 --stats-period=1 </dev/null >"$WORK/$name-gen.log" 2>&1 &
    GEN_PID=$!
    PIDS+=("$GEN_PID")
    # Forwarding has started once the first statistics are printed. (memif's socket is abstract by default, so
    # no file appears at $sock.)
    if ! wait_for "$GEN_PID" 20 grep -qs "Port statistics" "$WORK/$name-gen.log"; then
        show_log "$WORK/$name-gen.log"; die "$name: the generator did not start"
    fi
}

# finish_run NAME RECEIVER_PID RECEIVER_SIGNAL receiver-first|generator-first: stops both; sets RECEIVER_RC.
# receiver-first stops the receiver under load (sluice must drain and return every mbuf then), but testpmd's memif
# server sometimes segfaults (in librte_net_memif, ~1 run in 6) when its client disconnects while it transmits:
# that is reported, and does not affect the figures, which were read before.
finish_run() {
    local name=$1 rpid=$2 rsig=$3 order=$4 grc
    alive "$GEN_PID" || { show_log "$WORK/$name-gen.log"; die "$name: the generator died during the run"; }
    if [[ $order == generator-first ]]; then
        stop "$GEN_PID" INT 10; grc=$STOP_RC
        stop "$rpid" "$rsig" 20; RECEIVER_RC=$STOP_RC
    else
        stop "$rpid" "$rsig" 20; RECEIVER_RC=$STOP_RC
        stop "$GEN_PID" INT 10; grc=$STOP_RC
    fi
    if [[ $grc != 0 ]]; then
        log "note: $name: the generator (testpmd txonly, memif server) exited $(describe_rc "$grc") when stopped;" \
            "a known testpmd/memif crash on client disconnect, not the receiver's doing; figures unaffected"
    fi
}

# write_sluice_config PATH SOCKET [OUT_DEVICE [routed]]: sluice as the benchmarks run it: `in` the memif client of
# SOCKET, `out` OUT_DEVICE (default a net_null sink), one lcore [rx, worker] on CPU 1, forward entries both ways.
# routed: no forward entries; `out` holds an address on the next hop's link ($ROUTES_SLUICE_ADDRESS) and the routes
# come from kernel table $ROUTES_TABLE (forward.sh --routes). EAL prefix $ID-sluice.
write_sluice_config() {
    local out=${3:-net_null0,no-rx=1} routed=${4:-}
    PREFIXES+=("$ID-sluice")
    {
        cat <<EOF
eal:
  - --lcores=0@0,1@1
  - --file-prefix=$ID-sluice
  - --in-memory
dataplane:
  ring_size: 4096
  idle_sleep_us: 0
ports:
  - name: in
    device: net_memif0,role=client,socket=$2
  - name: out
    device: $out
EOF
        [[ -z $routed ]] || echo "    addresses: [$ROUTES_SLUICE_ADDRESS]"
        cat <<EOF
lcores:
  - id: 1
    roles: [rx, worker]
EOF
        if [[ -n $routed ]]; then
            # The next hop answers ARP once, at start: kept for the run, not probed again.
            printf 'routing: {kernel_table: %s}\nneighbours: {reachable_ms: 3600000}\n' "$ROUTES_TABLE"
        else
            cat <<EOF
forward:
  - {from: in, to: out, next_hop_mac: "02:00:00:00:00:02"}
  - {from: out, to: in, next_hop_mac: "02:00:00:00:00:01"}
EOF
        fi
    } >"$1"
}

# check_sluice_configs: a config sluice rejects fails the run before any traffic.
check_sluice_configs() {
    local config
    for config in "$WORK"/sluice*.yaml; do
        "$WORK/sluice" --check-config "$config" >"$WORK/check-config.log" 2>&1 \
            || { show_log "$WORK/check-config.log"; die "sluice rejects the benchmark config $(basename "$config")"; }
    done
}

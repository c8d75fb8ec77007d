#!/usr/bin/env bash
# sluice against the Linux kernel doing the same job in the same lab, on the same CPUs: a full-NAT load-balanced VIP
# between the client namespace and a backend, with connection tracking.
#
#   tests/bench/kernel_compare.sh [--no-record]      (as root; about 1 minute a round)
#
# A lab of its own (deploy/lab/lab.sh with namespaces kc<pid>-*, so a lab that runs meanwhile is left alone). Two
# gateways take turns on the same namespaces, links and backends, ROUNDS times, the first alternating:
#   sluice: config/lab.yaml plus two nat services on 10.77.100.1:5201 (TCP and UDP) to backend1, net_af_xdp.
#   kernel: sluice stopped; the gateway namespace's kernel owns gw-client and gw-server (the lab's gateway addresses
#           10.77.1.1 and 10.77.2.1, ip_forward on, gw-mgmt down) with nftables: DNAT of 10.77.100.1 by `jhash ...
#           mod 3` onto a map (the IPVS/nftables way to spread a VIP) and SNAT to the NAT pool 10.77.3.100, as sluice
#           does. Only backend1 runs iperf3, so the map sends every flow there (the three-way hash is still paid).
# Placement, the same for both: the client (iperf3 -c) on the gateway's CPU (SLUICE_LAB_CPU, sluice's lcore), the
# server (iperf3 -s) alone on another; RPS as lab.sh sets it (the hosts' veths and the bridge's to the server's
# CPU, the gateway's to the gateway's). The client and the forwarding share one CPU: the kernel forwards inside the
# client's send call, sluice polls beside it.
# Load: iperf3 UDP with 64-byte payloads unpaced (-b 0), then one TCP stream, DURATION s each. Counters are read
# before and after each run (tests/bench/kernel_compare.py), packets over the client's duration give the rates: the
# client's sent packets, the gateway's egress (sluice: its server port's TX; the kernel: gw-server's TX), the
# packets delivered to the server's socket, the loss of each stage (client -> gateway: AF_XDP's RX ring full / fill
# ring empty, the veth; in the gateway; gateway -> server socket: its buffer full). Steal and the CPU other
# processes used (/proc/stat) over the run's middle (1 s after its start to 1 s before its end). Reports the median
# of the rounds with each round in brackets, and sluice / kernel.
#
# Nothing asserts a speed. Environment: ROUNDS (default 3), DURATION (s, default 7), SLUICE_LAB_CPU (lab.sh's,
# default 1), NICE (default 0: the niceness of both runs' iperf3 and sluice, and of their scheduler autogroup; below
# the builds' on a shared machine, it keeps them off the measured CPUs), SLUICE_BIN, BENCH_DOC (default
# docs/benchmarks.md), UDP_BITRATE (iperf3 -b of the UDP runs, payload bits/s; default 0, unpaced).
set -euo pipefail

readonly REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
readonly ROUNDS="${ROUNDS:-3}"
readonly DURATION="${DURATION:-7}"
readonly NICE="${NICE:-0}"
readonly UDP_BITRATE="${UDP_BITRATE:-0}"
readonly BENCH_DOC="${BENCH_DOC:-$REPO/docs/benchmarks.md}"
readonly LAB="$REPO/deploy/lab/lab.sh"
readonly HELPER="$REPO/tests/bench/kernel_compare.py"
export SLUICE_BIN="${SLUICE_BIN:-$REPO/build/app/sluice/sluice}"
# One session for the clients, the servers and sluice (lab.sh's SLUICE_LAB_SESSION): the scheduler's autogroups weigh
# sessions against each other, and the kernel's forwarding runs inside the client's calls, in the client's session.
export SLUICE_LAB_NS="kc$$" SLUICE_LAB_CPU="${SLUICE_LAB_CPU:-1}" SLUICE_LAB_SESSION=caller
readonly NS=$SLUICE_LAB_NS GW_CPU=$SLUICE_LAB_CPU FILE_PREFIX="sluice-kc$$"
RECORD=1
case "${1:-}" in
    --no-record) RECORD=0 ;;
    "") ;;
    -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "usage: $0 [--no-record]" >&2; exit 2 ;;
esac

log() { printf '[kernel_compare.sh] %s\n' "$*" >&2; }
die() { log "FAIL: $*"; exit 1; }
[[ $EUID -eq 0 ]] || die "run as root"
command -v iperf3 >/dev/null || die "iperf3 is missing (deploy/install-deps.sh installs it)"
command -v nft >/dev/null || die "nft is missing (deploy/install-deps.sh installs nftables)"
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "ROUNDS must be a positive number"
if ! [[ $DURATION =~ ^[0-9]+$ ]] || ((DURATION < 4)); then die "DURATION must be 4 s or more (1 s at each end is left out)"; fi
SERVER_CPU=""
for ((c = 0; c < $(nproc --all); c++)); do ((c == GW_CPU)) || { SERVER_CPU=$c; break; }; done
[[ -n $SERVER_CPU ]] || die "one CPU: the server needs a CPU of its own beside the gateway's ($GW_CPU)"
autogroup_nice=""
if [[ $NICE != 0 && -w /proc/self/autogroup ]]; then  # this session's weight; restored at exit
    autogroup_nice=$(sed -n 's/.* nice //p' /proc/self/autogroup)
    echo "$NICE" >/proc/self/autogroup
fi

work=$(mktemp -d /tmp/sluice-kernel-compare.XXXXXX)
export SLUICE_LAB_STATE="$work/lab" SLUICE_LAB_CONFIG="$work/lab.yaml"
server_pid=""
cleanup() {
    [[ -z $server_pid ]] || kill "$server_pid" 2>/dev/null || true
    "$LAB" down >/dev/null 2>&1 || true
    rm -rf "$work"
    [[ -z $autogroup_nice ]] || echo "$autogroup_nice" >/proc/self/autogroup
}
trap cleanup EXIT

/usr/bin/python3 - "$REPO/config/lab.yaml" "$SLUICE_LAB_CONFIG" "$FILE_PREFIX" <<'PY'
import sys, yaml
config = yaml.safe_load(open(sys.argv[1]))
config["eal"] = [a if not a.startswith("--file-prefix=") else f"--file-prefix={sys.argv[3]}" for a in config["eal"]]
for protocol in ("tcp", "udp"):
    config["services"].append({"name": f"iperf-{protocol}", "vip": "10.77.100.1", "port": 5201, "protocol": protocol,
                               "mode": "nat", "backends": [{"address": "10.77.2.11", "mac": "02:77:00:00:03:01"}]})
yaml.safe_dump(config, open(sys.argv[2], "w"), sort_keys=False)
PY
telemetry_socket=/var/run/dpdk/$FILE_PREFIX/dpdk_telemetry.v2
[[ -z ${RUNTIME_DIRECTORY:-} ]] || telemetry_socket=$RUNTIME_DIRECTORY/dpdk/$FILE_PREFIX/dpdk_telemetry.v2

"$LAB" up >/dev/null
results=$work/results
mkdir -p "$results"

# measure ROUND GATEWAY udp|tcp: one iperf3 run; its files are $results/rROUND-GATEWAY-KIND.*.json.
measure() {
    local round=$1 gateway=$2 kind=$3 base
    base="$results/r$round-$gateway-$kind"
    nice -n "$NICE" taskset -c "$SERVER_CPU" ip netns exec "$NS-backend1" iperf3 -s -1 -J >"$base.server.json" 2>&1 &
    server_pid=$!
    local deadline=$((SECONDS + 10))
    until ip netns exec "$NS-backend1" ss -Hltn 'sport = :5201' | grep -q .; do
        ((SECONDS < deadline)) || die "iperf3 server did not listen"
        sleep 0.1
    done
    local args=(-t "$DURATION")
    [[ $kind == tcp ]] || args+=(-u -b "$UDP_BITRATE" -l 64)
    /usr/bin/python3 "$HELPER" counters "$NS" "$gateway" "$telemetry_socket" >"$base.before.json" ||
        die "reading the counters failed ($gateway, $kind)"
    /usr/bin/python3 "$HELPER" cpu "$NS" 1 "$((DURATION - 2))" >"$base.cpu.json" &
    local cpu_pid=$!
    nice -n "$NICE" taskset -c "$GW_CPU" ip netns exec "$NS-client" iperf3 -c 10.77.100.1 "${args[@]}" -J >"$base.client.json" ||
        die "iperf3 client ($gateway, $kind) failed: $(head -c 600 "$base.client.json")"
    wait "$cpu_pid" || die "reading the CPU times failed ($gateway, $kind)"
    wait "$server_pid" || true
    server_pid=""
    sleep 0.5  # what is still in the rings drains
    /usr/bin/python3 "$HELPER" counters "$NS" "$gateway" "$telemetry_socket" >"$base.after.json" ||
        die "reading the counters failed ($gateway, $kind)"
}

sluice_round() {
    log "round $1: sluice (net_af_xdp, nat service, conntrack)"
    "$LAB" start >/dev/null
    local pid task
    pid=$("$LAB" pid)
    for task in /proc/"$pid"/task/*; do renice -n "$NICE" -p "${task##*/}" >/dev/null; done
    [[ $(cut -d' ' -f1 "/proc/$pid/autogroup") == "$(cut -d' ' -f1 /proc/self/autogroup)" ]] ||
        die "sluice runs in a scheduler autogroup other than the client's"
    sleep 1
    measure "$1" sluice udp
    measure "$1" sluice tcp
    "$LAB" stop >/dev/null || die "sluice did not stop cleanly (see $SLUICE_LAB_STATE/sluice.log)"
}

kernel_round() {
    log "round $1: the kernel (nftables DNAT jhash map + SNAT, conntrack)"
    local dev
    for dev in gw-client gw-server; do  # the kernel's turn must not pass through sluice's XDP program
        ! ip -n "$NS-gw" link show dev "$dev" | grep -q 'prog/xdp' || die "an XDP program is still attached to $dev"
    done
    ip -n "$NS-gw" link set gw-mgmt down
    ip -n "$NS-gw" addr add 10.77.1.1/24 dev gw-client
    ip -n "$NS-gw" addr add 10.77.2.1/24 dev gw-server
    ip netns exec "$NS-gw" sysctl -qw net.ipv4.ip_forward=1
    ip netns exec "$NS-gw" nft -f - <<'NFT'
table ip lb {
    chain prerouting {
        type nat hook prerouting priority dstnat; policy accept;
        ip daddr 10.77.100.1 dnat to jhash ip saddr . ip daddr . meta l4proto mod 3 map { 0 : 10.77.2.11, 1 : 10.77.2.11, 2 : 10.77.2.11 }
    }
    chain postrouting {
        type nat hook postrouting priority srcnat; policy accept;
        ip daddr 10.77.2.0/24 oifname "gw-server" snat to 10.77.3.100
    }
}
NFT
    measure "$1" kernel udp
    measure "$1" kernel tcp
    # Back to the lab's gateway for sluice's next turn: no addresses of its own on sluice's links, gw-mgmt up with
    # its neighbours (taking it down flushed them).
    ip netns exec "$NS-gw" nft delete table ip lb
    ip netns exec "$NS-gw" sysctl -qw net.ipv4.ip_forward=0
    ip -n "$NS-gw" addr del 10.77.1.1/24 dev gw-client
    ip -n "$NS-gw" addr del 10.77.2.1/24 dev gw-server
    ip -n "$NS-gw" link set gw-mgmt up
    local n
    for n in 1 2 3; do
        ip -n "$NS-gw" neigh replace "10.77.2.1$n" lladdr "02:77:00:00:03:0$n" dev gw-mgmt nud permanent
    done
}

for ((round = 1; round <= ROUNDS; round++)); do
    if ((round % 2)); then sluice_round "$round"; kernel_round "$round"
    else kernel_round "$round"; sluice_round "$round"; fi
done

report=$(/usr/bin/python3 "$HELPER" report "$results")
printf '\nfull NAT VIP, conntrack (lab, iperf3; client and gateway on CPU %s, server on CPU %s; %s rounds of %s s)\n' \
    "$GW_CPU" "$SERVER_CPU" "$ROUNDS" "$DURATION"
sed '$d' <<<"$report"

if [[ $RECORD == 1 ]]; then
    machine="$(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) vCPU"
    commit=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)
    git -C "$REPO" diff --quiet HEAD 2>/dev/null || commit+="-dirty"
    row=$(tail -n 1 <<<"$report")
    row=${row/"{date}"/"$(date -u '+%F %H:%M'), \`$commit\`"}
    row=${row/"{machine}"/"$machine, $ROUNDS rounds$( ((NICE == 0)) || echo ", nice $NICE")$([[ $UDP_BITRATE == 0 ]] || echo ", UDP at $UDP_BITRATE")"}
    # Into the kernel table (behind its marker), as the other benchmarks record theirs (bench_table.py).
    /usr/bin/python3 -c '
import sys
sys.path.insert(0, sys.argv[1])
import bench_table
bench_table.record_rows(sys.argv[2], [sys.argv[3]], "<!-- kernel_compare.sh appends rows above this line -->", "")
' "$(dirname "${BASH_SOURCE[0]}")" "$BENCH_DOC" "$row"
    log "row appended to $BENCH_DOC"
fi

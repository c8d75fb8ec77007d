#!/usr/bin/env bash
# sluice against the Linux kernel doing the same job in the same lab: a full-NAT load-balanced VIP between the
# client namespace and a backend, with connection tracking.
#
#   tests/bench/kernel_compare.sh [--no-record]      (as root; about 1 minute)
#
# The lab (deploy/lab/lab.sh) is brought up afresh. Two runs on the same namespaces, links and backends:
#   sluice: config/lab.yaml plus two nat services on 10.77.100.1:5201 (TCP and UDP) to sl-backend1, net_af_xdp.
#   kernel: sluice stopped; sl-gw's kernel owns gw-client and gw-server (the lab's gateway addresses 10.77.1.1 and
#           10.77.2.1, ip_forward on, gw-mgmt down) with nftables: DNAT of 10.77.100.1 by `jhash ... mod 3` onto
#           a map (the IPVS/nftables way to spread a VIP) and SNAT to the NAT pool 10.77.3.100, as sluice does.
#           Only backend1 runs iperf3, so the map sends every flow there (the three-way hash is still paid).
# Load (iperf3 from sl-client to the VIP, server in sl-backend1): UDP with 64-byte payloads at full speed, and one
# TCP stream; each for DURATION seconds. Reports the receiver's packets/s (UDP, and its loss) and Gbit/s (TCP) for
# both, and sluice/kernel. On this 2-vCPU VM the generator, both kernels' veth softirq work and sluice's poll loop
# share two CPUs: the figures say what a user of the lab sees, not either data path's ceiling.
#
# Nothing asserts a speed. Environment: DURATION (s, default 5), SLUICE_BIN, BENCH_DOC (default
# docs/benchmarks.md).
set -euo pipefail

readonly REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
readonly DURATION="${DURATION:-5}"
readonly BENCH_DOC="${BENCH_DOC:-$REPO/docs/benchmarks.md}"
readonly LAB="$REPO/deploy/lab/lab.sh"
export SLUICE_BIN="${SLUICE_BIN:-$REPO/build/app/sluice/sluice}"
RECORD=1
case "${1:-}" in
    --no-record) RECORD=0 ;;
    "") ;;
    -h|--help) sed -n '2,19p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "usage: $0 [--no-record]" >&2; exit 2 ;;
esac

log() { printf '[kernel_compare.sh] %s\n' "$*" >&2; }
die() { log "FAIL: $*"; exit 1; }
[[ $EUID -eq 0 ]] || die "run as root"
command -v iperf3 >/dev/null || die "iperf3 is missing (deploy/install-deps.sh installs it)"
command -v nft >/dev/null || die "nft is missing (deploy/install-deps.sh installs nftables)"

work=$(mktemp -d /tmp/sluice-kernel-compare.XXXXXX)
export SLUICE_LAB_STATE="$work/lab" SLUICE_LAB_CONFIG="$work/lab.yaml"
cleanup() { "$LAB" down >/dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT

/usr/bin/python3 - "$REPO/config/lab.yaml" "$SLUICE_LAB_CONFIG" <<'PY'
import sys, yaml
config = yaml.safe_load(open(sys.argv[1]))
for protocol in ("tcp", "udp"):
    config["services"].append({"name": f"iperf-{protocol}", "vip": "10.77.100.1", "port": 5201, "protocol": protocol,
                               "mode": "nat", "backends": [{"address": "10.77.2.11", "mac": "02:77:00:00:03:01"}]})
yaml.safe_dump(config, open(sys.argv[2], "w"), sort_keys=False)
PY

"$LAB" up >/dev/null

# iperf3 client in sl-client; prints "pps loss%" (UDP) or "gbps" (TCP) from the receiver's side.
measure() {
    local kind=$1 out
    ip netns exec sl-backend1 pkill -x iperf3 2>/dev/null || true
    ip netns exec sl-backend1 iperf3 -s -D >/dev/null 2>&1
    sleep 0.5
    if [[ $kind == udp ]]; then
        out=$(ip netns exec sl-client iperf3 -c 10.77.100.1 -u -b 0 -l 64 -t "$DURATION" -J)
        /usr/bin/python3 -c '
import json, sys
end = json.loads(sys.stdin.read())["end"]["sum"]
print(end["packets"] - end["lost_packets"], end["seconds"], round(end["lost_percent"], 1))' <<<"$out"
    else
        out=$(ip netns exec sl-client iperf3 -c 10.77.100.1 -t "$DURATION" -J)
        /usr/bin/python3 -c '
import json, sys
print(round(json.loads(sys.stdin.read())["end"]["sum_received"]["bits_per_second"] / 1e9, 3))' <<<"$out"
    fi
}

log "run 1: sluice (net_af_xdp, nat service, conntrack)"
"$LAB" start >/dev/null
sleep 1
read -r sluice_udp_packets sluice_udp_seconds sluice_udp_loss < <(measure udp)
sluice_tcp=$(measure tcp)
"$LAB" stop >/dev/null || die "sluice did not stop cleanly (see $SLUICE_LAB_STATE/sluice.log)"

log "run 2: the kernel (nftables DNAT jhash map + SNAT, conntrack)"
ip -n sl-gw link set gw-mgmt down
ip -n sl-gw addr add 10.77.1.1/24 dev gw-client
ip -n sl-gw addr add 10.77.2.1/24 dev gw-server
ip netns exec sl-gw sysctl -qw net.ipv4.ip_forward=1
ip netns exec sl-gw nft -f - <<'NFT'
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
read -r kernel_udp_packets kernel_udp_seconds kernel_udp_loss < <(measure udp)
kernel_tcp=$(measure tcp)

read -r sluice_pps kernel_pps udp_ratio tcp_ratio < <(/usr/bin/python3 -c "
s = $sluice_udp_packets / $sluice_udp_seconds; k = $kernel_udp_packets / $kernel_udp_seconds
print(f'{s:.0f} {k:.0f} {s / k:.2f} {$sluice_tcp / $kernel_tcp:.2f}')")
printf '\n%-44s %14s %14s %8s\n' "full NAT VIP, conntrack (lab, iperf3)" sluice kernel ratio
printf '%-44s %14s %14s %8s\n' "UDP 64 B payload, received packets/s" "$sluice_pps" "$kernel_pps" "$udp_ratio"
printf '%-44s %14s %14s\n' "UDP loss at the receiver" "$sluice_udp_loss %" "$kernel_udp_loss %"
printf '%-44s %14s %14s %8s\n' "TCP one stream, Gbit/s" "$sluice_tcp" "$kernel_tcp" "$tcp_ratio"

if [[ $RECORD == 1 ]]; then
    machine="$(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) vCPU, load $(cut -d' ' -f1-3 /proc/loadavg)"
    row=$(printf '| %s | %s | %s / %s / %s | %s %% / %s %% | %s / %s / %s |' "$(date -u '+%F %H:%M')" "$machine" \
        "$kernel_pps" "$sluice_pps" "$udp_ratio" "$kernel_udp_loss" "$sluice_udp_loss" "$kernel_tcp" "$sluice_tcp" "$tcp_ratio")
    # Into the kernel table (behind its marker), as the other benchmarks record theirs (bench_table.py).
    /usr/bin/python3 -c '
import sys
sys.path.insert(0, sys.argv[1])
import bench_table
bench_table.record_rows(sys.argv[2], [sys.argv[3]], "<!-- kernel_compare.sh appends rows above this line -->", "")
' "$(dirname "${BASH_SOURCE[0]}")" "$BENCH_DOC" "$row"
    log "row appended to $BENCH_DOC"
fi

#!/usr/bin/env bash
# The ECMP lab: two sluice instances behind a router that spreads a VIP over both, each announcing the VIP over BGP
# through its own BIRD (docs/architecture.md, "Announcing VIPs over BGP"). Everything lives in network namespaces
# named se-* (the main lab's are sl-*); nothing touches the root namespace's interfaces or routes.
#
#   se-client                se-router (BIRD: BGP to both, ECMP into the kernel)        se-lan (bridge br0)
#   c0 10.88.1.2/24 <-> r-c 10.88.1.1   r-lb1 10.88.11.1  r-lb2 10.88.12.1   r-lan 10.88.2.1 <-> rt
#                                          |                  |                                   |
#   se-lb1 (sluice + BIRD)   uplink 10.88.11.2 (kernel; BGP)      |         lan 10.88.2.21 (kernel)  <-> lb1
#   se-lb2 (sluice + BIRD)           uplink 10.88.12.2 (kernel; BGP)     lan 10.88.2.22 (kernel)  <-> lb2
#   se-be1, se-be2: eth0 10.88.2.11/.12, the dsr VIP 10.88.100.1 on lo, backend.py :80   <-> be1, be2
#
# Each sluice owns `uplink` and `lan` through net_af_xdp with xdp_steering: services: only the VIP goes to sluice, the
# rest (BGP to the router, ARP, the health checks from the kernel's `lan` address) stays with the kernel on the same
# link, so no management interface is needed. sluice forwards VIP traffic (mode dsr) to a backend on the LAN; the
# backend answers the client directly through the router. The router's BIRD merges the equal routes from both
# instances into one multipath kernel route (merge paths), hashed on ports (fib_multipath_hash_policy=1).
#
# usage: ecmp.sh up                  namespaces, links, backends, the three BIRDs, sluice configs (tears down first)
#        ecmp.sh start N | stop N    start sluice N (1, 2) in se-lbN in the background / SIGTERM it (a drain)
#        ecmp.sh down                stop everything this lab started, delete its namespaces and state; idempotent
#        ecmp.sh status              namespaces, BGP sessions, the router's route to the VIP, sluice processes
#        ecmp.sh backend-stop N | backend-start N
#
# Environment: SLUICE_BIN (default build/app/sluice/sluice), SLUICE_ECMP_STATE (default /run/se-ecmp: configs, BIRD
# sockets, pid files, logs), SLUICE_ECMP_DRAIN (bgp.drain_seconds, default 4).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)

SLUICE_BIN=${SLUICE_BIN:-$root/build/app/sluice/sluice}
STATE=${SLUICE_ECMP_STATE:-/run/se-ecmp}
DRAIN=${SLUICE_ECMP_DRAIN:-4}
PYTHON=/usr/bin/python3
NAMESPACES=(se-client se-router se-lan se-lb1 se-lb2 se-be1 se-be2)
VIP=10.88.100.1

say() { printf 'ecmp: %s\n' "$*"; }
die() { printf 'ecmp: error: %s\n' "$*" >&2; exit 1; }
need_root() { [ "$(id -u)" -eq 0 ] || die "must run as root (namespaces, veth, XDP)"; }
ns_exists() { ip netns list 2>/dev/null | awk '{print $1}' | grep -qx "$1"; }

# Checksum offloads, segmentation and GRO off: sluice's AF_XDP sockets must see whole frames with real checksums.
no_offloads() {
  local ns=$1 dev=$2 f
  for f in rx tx sg tso gso gro lro rx-gro-list rx-udp-gro-forwarding; do
    ip netns exec "$ns" ethtool -K "$dev" "$f" off >/dev/null 2>&1 || true
  done
}

# A veth pair from namespace $1 (device $2, MAC $3) to namespace $4 (device $5, MAC $6), made inside $1 so no end
# ever lives in the root namespace.
pair() {
  ip -n "$1" link add "$2" type veth peer name "$5" netns "$4"
  ip -n "$1" link set dev "$2" address "$3"
  ip -n "$4" link set dev "$5" address "$6"
  no_offloads "$1" "$2"
  no_offloads "$4" "$5"
}

quiet_ns() {
  ip netns exec "$1" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
  ip -n "$1" link set lo up
}

wait_gone() {  # pid, seconds
  local pid=$1 deadline=$((SECONDS + $2))
  while kill -0 "$pid" 2>/dev/null; do
    [ "$SECONDS" -lt "$deadline" ] || return 1
    sleep 0.1
  done
}

kill_pidfile() {  # file: SIGTERM the pid it names, SIGKILL after 5 s
  local pid
  pid=$(cat "$1" 2>/dev/null) || return 0
  if kill -TERM "$pid" 2>/dev/null; then wait_gone "$pid" 5 || kill -KILL "$pid" 2>/dev/null || true; fi
  rm -f "$1"
}

# BIRD on an instance: deploy/bird/bird.conf itself with this lab's addresses, paths and short timers.
bird_lb_conf() {
  local n=$1 me=10.88.1$1.2 router=10.88.1$1.1
  sed -e "s#^log syslog all;#log \"$STATE/bird-lb$n.log\" all;#" \
      -e "s#192\.0\.2\.10#$me#g" -e "s#neighbor 192\.0\.2\.1 #neighbor $router #" \
      -e "s#/run/bird/sluice-vips.con\[f\]#$STATE/lb$n/sluice-vips.con[f]#" \
      -e "s#hold time 9;#hold time 3;#" \
      -e "s#keepalive time 3;#keepalive time 1; connect delay time 1; connect retry time 2; error wait time 1, 4;#" \
      "$root/deploy/bird/bird.conf"
}

bird_router_conf() {
  cat <<EOF
log "$STATE/bird-router.log" all;
router id 10.88.1.1;
protocol device { scan time 2; }
# Equal BGP routes from both instances become one multipath kernel route.
protocol kernel { ipv4 { export all; }; merge paths on; scan time 5; }
template bgp sluice_host {
    local as 65000;
    hold time 3; keepalive time 1; connect delay time 1; connect retry time 2; error wait time 1, 4;
    graceful restart off;
    ipv4 { import all; export none; };
}
protocol bgp lb1 from sluice_host { neighbor 10.88.11.2 as 65010; source address 10.88.11.1; }
protocol bgp lb2 from sluice_host { neighbor 10.88.12.2 as 65010; source address 10.88.12.1; }
EOF
}

sluice_conf() {
  local n=$1
  cat <<EOF
# sluice instance $n of the ECMP lab (deploy/lab/ecmp.sh).
eal: ["--lcores=0@0,1@1", "--file-prefix=se-lb$n", "--log-level=pmd.net.af_xdp:warning"]
log: {level: info}
metrics: {listen: ""}
dataplane: {idle_sleep_us: 50, ring_size: 1024}
ports:
  - {name: up, device: "net_af_xdp0,iface=uplink", xdp_steering: services, rx_descriptors: 512, tx_descriptors: 512}
  - {name: lan, device: "net_af_xdp1,iface=lan", xdp_steering: services, rx_descriptors: 512, tx_descriptors: 512}
lcores:
  - {id: 1, roles: [rx, worker]}
forward:
  - {from: up, to: lan, next_hop_mac: "02:88:00:02:00:01"}
  - {from: lan, to: up, next_hop_mac: "02:88:00:1$n:00:01"}
firewall: {default: allow, table_size: 16384}
services:
  - name: web
    vip: $VIP
    port: 80
    protocol: tcp
    mode: dsr
    min_healthy: 1
    health_check: {type: tcp, port: 80, interval_ms: 200, timeout_ms: 150, rise: 2, fall: 2}
    backends:
      - {address: 10.88.2.11, mac: "02:88:00:02:00:11"}
      - {address: 10.88.2.12, mac: "02:88:00:02:00:12"}
bgp:
  bird_socket: $STATE/lb$n.ctl
  include_file: $STATE/lb$n/sluice-vips.conf
  drain_seconds: $DRAIN
  drain_on_sigterm: true
  timeout_ms: 1000
EOF
}

start_backend() {
  local n=$1
  setsid ip netns exec "se-be$n" "$PYTHON" "$here/backend.py" "be$n" >"$STATE/be$n.log" 2>&1 </dev/null &
  echo $! >"$STATE/be$n.pid"
  local deadline=$((SECONDS + 10))
  until ip netns exec "se-be$n" ss -Hltn 'sport = :80' 2>/dev/null | grep -q LISTEN; do
    [ "$SECONDS" -lt "$deadline" ] || die "backend $n does not listen: $(cat "$STATE/be$n.log")"
    sleep 0.1
  done
}

cmd_up() {
  need_root
  command -v bird >/dev/null || die "bird is missing (apt-get install bird2; deploy/install-deps.sh does it)"
  cmd_down --quiet
  mkdir -p "$STATE/lb1" "$STATE/lb2"
  local ns
  for ns in "${NAMESPACES[@]}"; do ip netns add "$ns"; quiet_ns "$ns"; done
  pair se-router r-c 02:88:00:01:00:01 se-client c0 02:88:00:01:00:02
  pair se-router r-lb1 02:88:00:11:00:01 se-lb1 uplink 02:88:00:11:00:02
  pair se-router r-lb2 02:88:00:12:00:01 se-lb2 uplink 02:88:00:12:00:02
  pair se-router r-lan 02:88:00:02:00:01 se-lan rt 02:88:00:02:00:fe
  pair se-lb1 lan 02:88:00:02:00:21 se-lan lb1 02:88:00:02:01:21
  pair se-lb2 lan 02:88:00:02:00:22 se-lan lb2 02:88:00:02:01:22
  pair se-be1 eth0 02:88:00:02:00:11 se-lan be1 02:88:00:02:01:11
  pair se-be2 eth0 02:88:00:02:00:12 se-lan be2 02:88:00:02:01:12

  ip -n se-lan link add br0 type bridge
  for dev in rt lb1 lb2 be1 be2; do ip -n se-lan link set "$dev" master br0 up; done
  ip -n se-lan link set br0 up

  ip -n se-client addr add 10.88.1.2/24 dev c0
  ip -n se-client link set c0 up
  ip -n se-client route add default via 10.88.1.1

  # The router forwards, hashes flows on ports, and does not drop the backends' replies (source: the VIP, which it
  # routes towards the instances) with reverse-path filtering.
  ip netns exec se-router sysctl -qw net.ipv4.ip_forward=1 net.ipv4.fib_multipath_hash_policy=1 \
    net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0
  local dev addr
  for pair in r-c=10.88.1.1/24 r-lb1=10.88.11.1/24 r-lb2=10.88.12.1/24 r-lan=10.88.2.1/24; do
    dev=${pair%%=*} addr=${pair#*=}
    ip -n se-router addr add "$addr" dev "$dev"
    ip netns exec se-router sysctl -qw "net.ipv4.conf.$dev.rp_filter=0"
    ip -n se-router link set "$dev" up
  done

  local n
  for n in 1 2; do
    ip -n "se-lb$n" addr add "10.88.1$n.2/24" dev uplink
    ip -n "se-lb$n" addr add "10.88.2.2$n/24" dev lan
    ip -n "se-lb$n" link set dev uplink up
    ip -n "se-lb$n" link set dev lan up
    # Backends: the VIP on lo, answered from it (dsr), never claimed in ARP on the LAN.
    ip netns exec "se-be$n" sysctl -qw net.ipv4.conf.all.arp_ignore=1 net.ipv4.conf.all.arp_announce=2
    ip -n "se-be$n" addr add "$VIP/32" dev lo
    ip -n "se-be$n" addr add "10.88.2.1$n/24" dev eth0
    ip -n "se-be$n" link set eth0 up
    ip -n "se-be$n" route add default via 10.88.2.1
    start_backend "$n"
    sluice_conf "$n" >"$STATE/lb$n.yaml"
    bird_lb_conf "$n" >"$STATE/bird-lb$n.conf"
    ip netns exec "se-lb$n" bird -c "$STATE/bird-lb$n.conf" -s "$STATE/lb$n.ctl" -P "$STATE/bird-lb$n.pid"
  done
  bird_router_conf >"$STATE/bird-router.conf"
  ip netns exec se-router bird -c "$STATE/bird-router.conf" -s "$STATE/router.ctl" -P "$STATE/bird-router.pid"
  say "up: client 10.88.1.2 -> router -> VIP $VIP over se-lb1 / se-lb2 (sluice configs $STATE/lb1.yaml, lb2.yaml)"
  say "start the instances with: $0 start 1; $0 start 2"
}

cmd_start() {
  local n=${1:?instance 1 or 2}
  [ -x "$SLUICE_BIN" ] || die "no sluice at $SLUICE_BIN (set SLUICE_BIN)"
  : >"$STATE/sluice-lb$n.log"  # before the background redirection: the wait below must not find the last run's line
  setsid ip netns exec "se-lb$n" "$SLUICE_BIN" --config "$STATE/lb$n.yaml" >"$STATE/sluice-lb$n.log" 2>&1 </dev/null &
  echo $! >"$STATE/sluice-lb$n.pid"
  local deadline=$((SECONDS + 30))
  until grep -q "ready:" "$STATE/sluice-lb$n.log"; do
    kill -0 "$(cat "$STATE/sluice-lb$n.pid")" 2>/dev/null || die "sluice $n exited: $(tail -5 "$STATE/sluice-lb$n.log")"
    [ "$SECONDS" -lt "$deadline" ] || die "sluice $n not ready after 30 s"
    sleep 0.2
  done
  say "sluice $n ready (log $STATE/sluice-lb$n.log)"
}

cmd_stop() {
  local n=${1:?instance 1 or 2} pid
  pid=$(cat "$STATE/sluice-lb$n.pid" 2>/dev/null) || { say "sluice $n is not running"; return 0; }
  kill -TERM "$pid" 2>/dev/null || true
  wait_gone "$pid" $((DRAIN + 30)) || kill -KILL "$pid" 2>/dev/null || true
  rm -f "$STATE/sluice-lb$n.pid"
}

cmd_down() {
  local f ns pid
  for f in "$STATE"/sluice-lb*.pid "$STATE"/bird-*.pid "$STATE"/be*.pid; do
    [ -e "$f" ] && kill_pidfile "$f"
  done
  # Anything else still running inside this lab's namespaces was started in them by this lab or its test.
  for ns in "${NAMESPACES[@]}"; do
    ns_exists "$ns" || continue
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
    ip netns del "$ns"
  done
  rm -rf /var/run/dpdk/se-lb1 /var/run/dpdk/se-lb2
  rm -rf "$STATE"
  [ "${1:-}" = --quiet ] || say "down"
}

cmd_status() {
  local ns
  for ns in "${NAMESPACES[@]}"; do printf '%-10s %s\n' "$ns" "$(ns_exists "$ns" && echo present || echo absent)"; done
  ns_exists se-router || return 0
  echo "router's route to $VIP:"
  ip -n se-router route show "$VIP" | sed 's/^/  /'
  [ -S "$STATE/router.ctl" ] && birdc -s "$STATE/router.ctl" show protocols | sed 's/^/  /'
  local n pid
  for n in 1 2; do
    pid=$(cat "$STATE/sluice-lb$n.pid" 2>/dev/null || true)
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then echo "sluice $n: running (pid $pid)"; else echo "sluice $n: not running"; fi
  done
}

case "${1:-}" in
  up) cmd_up ;;
  down) shift; cmd_down "$@" ;;
  start) need_root; cmd_start "${2:-}" ;;
  stop) cmd_stop "${2:-}" ;;
  status) cmd_status ;;
  backend-stop) kill_pidfile "$STATE/be${2:?N}.pid" ;;
  backend-start) start_backend "${2:?N}" ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2 ;;
esac

#!/usr/bin/env bash
# The built-in virtual lab: sluice between a client and a server LAN with three load-balancer backends, all inside
# network namespaces.
#
#   sl-client                         sl-gw (sluice)                          sl-server (a bridge: the server LAN)
#   client0 10.77.1.2/24  <-veth->  gw-client ==sluice== gw-server  <-veth->  br0 10.77.2.2/24 fd77:2::2/64
#           fd77:1::2/64                                                       |  (the server host itself)
#   02:77:00:00:01:02               02:77:00:00:01:01   02:77:00:00:02:01      02:77:00:00:02:02
#                                   gw-mgmt 10.77.2.254 <-veth----------------|  kernel only: health checks
#                                   02:77:00:00:02:fe                          |
#                                          sl-backend1..3: eth0 10.77.2.11..13 (02:77:00:00:03:01..03), VIP
#                                          10.77.100.2 on lo (dsr), backend.py: HTTP :80 (its name), UDP :53
#                                          sl-router: eth0 10.77.2.3 (02:77:00:00:04:01), the remote network
#                                          10.77.50.0/24 behind it (remote0 10.77.50.1, backend.py "remote")
#
# Routing: sluice routes the client LAN's traffic (`routes:` in config/lab.yaml: a default route via 10.77.2.2, the
# server host) and mirrors kernel table 100 of sl-gw (`routing: {kernel_table: 100}`), where the gateway's BIRD
# installs what sl-router's BIRD announces over BGP (10.77.50.0/24 via 10.77.2.3; the session runs between the
# kernels, sl-gw's gw-mgmt and sl-router's eth0). sluice resolves 10.77.2.2 and 10.77.2.3 with ARP from its port
# address 10.77.2.1. Traffic back to the client LAN takes the server port's `forward` entry.
#
# sluice owns gw-client and gw-server through net_af_xdp and its XDP program (config/lab.yaml; SLUICE_LAB_DRIVER=
# af_packet selects the af_packet fallback). The gateway addresses 10.77.1.1,
# 10.77.2.1, fd77:1::1 and fd77:2::1 exist nowhere: the hosts reach them through permanent neighbour entries. sluice's
# VIPs (10.77.100.0/24) and NAT pool (10.77.3.100) are routed to it the same way. gw-mgmt is the exception path: the
# kernel of sl-gw reaches the backends through it for sluice's health checks and BGP, beside the data plane. The
# hosts' neighbour entries for the gateway are permanent; sluice resolves its next hops itself. No link leaves the namespaces; nothing here touches the root
# namespace's interfaces or routes.
#
# usage: lab.sh up [--jumbo]   create the namespaces and links (tears down leftovers first); --jumbo: MTU 9000 on
#                         every link, and `start` runs sluice on net_pcap with mtu 9000 on its ports (below)
#        lab.sh start     start sluice in sl-gw in the background and wait for "ready:" (lab must be up)
#        lab.sh stop      stop the sluice this script started (SIGTERM, bounded wait)
#        lab.sh down      stop everything in the lab's namespaces, delete them and the state; idempotent
#        lab.sh status    namespaces, links, whether sluice runs, its counters
#        lab.sh stats [--json]   sluice's counters from DPDK telemetry (/sluice/stats)
#        lab.sh pid       print the pid of the sluice started by 'start'; status 1 if it does not run
#        lab.sh backend-stop N | backend-start N   stop / start backend N's servers (health-check experiments)
#
# Jumbo frames (`up --jumbo`): DPDK 22.11's kernel-interface PMDs cap the frame below 9000 (net_af_xdp: MTU 3542,
# one 4 KiB page per frame; net_af_packet: 1500), so the jumbo lab runs sluice on net_pcap (libpcap on gw-client and
# gw-server: slower, no XDP steering; the kernel of sl-gw sees every frame too and, with no address on those links,
# drops them), which takes 9000, and gives its ports `mtu: 9000`. docs/operations/mtu.md.
#
# Environment: SLUICE_BIN (default build/app/sluice/sluice), SLUICE_LAB_CONFIG (default config/lab.yaml),
# SLUICE_LAB_STATE (default /run/sluice-lab: pid file, sluice log), SLUICE_LAB_READY_TIMEOUT (seconds, default 30),
# SLUICE_LAB_DRIVER (af_xdp, the default; af_packet; or pcap, the jumbo lab's and its default there), SLUICE_LAB_NS
# (the namespaces' prefix, default sl),
# SLUICE_LAB_CPU (the CPU of sluice's lcore in the config, default 1: the gateway's veths steer their receive work to
# it with RPS, the hosts' veths and the bridge's to the other CPUs; see placement below), SLUICE_LAB_SESSION (caller:
# 'start' keeps sluice in the caller's session instead of a new one; for benchmarks, see cmd_start).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)

NS=${SLUICE_LAB_NS:-sl}  # the namespaces' prefix: a benchmark's own lab leaves the default one alone
NS_CLIENT=$NS-client
NS_SERVER=$NS-server
NS_GW=$NS-gw
BACKENDS=(1 2 3)
NS_ROUTER=$NS-router
NAMESPACES=("$NS_CLIENT" "$NS_SERVER" "$NS_GW" "$NS-backend1" "$NS-backend2" "$NS-backend3" "$NS_ROUTER")
KERNEL_TABLE=100  # routing.kernel_table in config/lab.yaml

SLUICE_BIN=${SLUICE_BIN:-$root/build/app/sluice/sluice}
CONFIG=${SLUICE_LAB_CONFIG:-$root/config/lab.yaml}
STATE=${SLUICE_LAB_STATE:-/run/sluice-lab}
READY_TIMEOUT=${SLUICE_LAB_READY_TIMEOUT:-30}
PIDFILE=$STATE/sluice.pid
LOG=$STATE/sluice.log
# The EAL file prefix of the config's sluice (its runtime directory and hugepage files).
FILE_PREFIX=$(sed -n 's/.*--file-prefix=\([A-Za-z0-9_.-]*\).*/\1/p' "$CONFIG" 2>/dev/null | head -n 1)
FILE_PREFIX=${FILE_PREFIX:-sluice-lab}
# The CPU of sluice's data-plane lcore (config/lab.yaml: --lcores=0@0,1@1, lcore 1). The lab keeps the gateway's
# packet work on it and the hosts' on the other CPUs (placement below).
GW_CPU=${SLUICE_LAB_CPU:-1}
PYTHON=/usr/bin/python3  # not the first python3 on PATH: a pyenv shim may shadow it
DRIVER=${SLUICE_LAB_DRIVER:-}  # af_xdp unless the lab is jumbo; af_packet: the fallback, for kernels without AF_XDP
JUMBO_MTU=9000

say() { printf 'lab: %s\n' "$*"; }
die() { printf 'lab: error: %s\n' "$*" >&2; exit 1; }

need_root() { [ "$(id -u)" -eq 0 ] || die "must run as root (namespaces, veth, af_packet)"; }

ns_exists() { ip netns list 2>/dev/null | awk '{print $1}' | grep -qx "$1"; }

# The DPDK runtime directory of the lab's sluice. `ip netns exec` remounts /sys only; /var/run is shared with the
# root namespace, so telemetry is reachable from anywhere on the host.
runtime_dir() {
  if [ -n "${RUNTIME_DIRECTORY:-}" ]; then echo "$RUNTIME_DIRECTORY/dpdk/$FILE_PREFIX"; else echo "/var/run/dpdk/$FILE_PREFIX"; fi
}

# --- sluice process -------------------------------------------------------------------------------------------------

# The pid of the sluice this script started, if it still runs (and really is that sluice, in sl-gw).
sluice_pid() {
  [ -r "$PIDFILE" ] || return 1
  local pid
  pid=$(cat "$PIDFILE" 2>/dev/null) || return 1
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  [ -d "/proc/$pid" ] || return 1
  [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = sluice ] || return 1
  [ "$(ip netns identify "$pid" 2>/dev/null)" = "$NS_GW" ] || return 1
  echo "$pid"
}

# Waits up to $2 seconds for pid $1 to exit. Returns 0 if it did.
wait_gone() {
  local pid=$1 deadline=$((SECONDS + $2))
  while [ -d "/proc/$pid" ] && [ "$(cut -d' ' -f3 "/proc/$pid/stat" 2>/dev/null)" != Z ]; do
    [ "$SECONDS" -lt "$deadline" ] || return 1
    sleep 0.1
  done
}

cmd_start() {
  need_root
  for ns in "${NAMESPACES[@]}"; do ns_exists "$ns" || die "namespace $ns is missing; run '$0 up' first"; done
  if pid=$(sluice_pid); then say "sluice already runs (pid $pid)"; return 0; fi
  [ -x "$SLUICE_BIN" ] || die "$SLUICE_BIN is missing; build first (ninja -C build)"
  [ -r "$CONFIG" ] || die "$CONFIG is missing"
  mkdir -p "$STATE"
  local config=$CONFIG driver=$DRIVER mtu=""
  [ ! -f "$STATE/jumbo" ] || mtu=$JUMBO_MTU
  [ -n "$driver" ] || driver=$([ -n "$mtu" ] && echo pcap || echo af_xdp)
  if [ -n "$mtu" ] && [ "$driver" != pcap ]; then
    die "the lab is up with --jumbo (MTU $mtu): $driver in DPDK 22.11 takes an MTU of $([ "$driver" = af_xdp ] && echo 3542 || echo 1500) at most; leave SLUICE_LAB_DRIVER unset (pcap)"
  fi
  case "$driver" in
    af_xdp) ;;
    af_packet)  # the same config with the fallback devices config/lab.yaml documents
      config=$STATE/lab-af_packet.yaml
      sed -E 's#device: net_af_xdp([0-9]+),iface=([a-z0-9-]+)$#device: net_af_packet\1,iface=\2,qpairs=1,framecnt=4096#' \
        "$CONFIG" > "$config" ;;
    pcap)  # libpcap on the interfaces; with --jumbo the ports' mtu too
      config=$STATE/lab-pcap.yaml
      sed -E 's#^( *)device: net_af_xdp([0-9]+),iface=([a-z0-9-]+)$#\1device: net_pcap\2,iface=\3'"${mtu:+\\n\\1mtu: $mtu}"'#' \
        "$CONFIG" > "$config" ;;
    *) die "SLUICE_LAB_DRIVER must be af_xdp, af_packet or pcap, not '$driver'" ;;
  esac
  # Emptied here, not only by the redirection below: that happens in the background child, and until it does, the
  # wait for "ready:" would find the previous run's line and report a sluice ready that is still starting.
  : >"$LOG"
  # setsid: the daemon outlives the calling shell and a Ctrl-C there. SLUICE_LAB_SESSION=caller keeps it in the
  # caller's session, and so in the caller's scheduler autogroup: a benchmark's client and sluice then share one CPU
  # share, as the client and the kernel's forwarding inside its calls do. `ip netns exec` execs without forking, so
  # $! is sluice's own pid.
  local session=(setsid)
  [ "${SLUICE_LAB_SESSION:-}" != caller ] || session=()
  "${session[@]}" ip netns exec "$NS_GW" "$SLUICE_BIN" --config "$config" >"$LOG" 2>&1 </dev/null &
  local pid=$!
  echo "$pid" >"$PIDFILE"
  local deadline=$((SECONDS + READY_TIMEOUT))
  while ! grep -q 'ready:' "$LOG" 2>/dev/null; do
    if ! [ -d "/proc/$pid" ] || [ "$(cut -d' ' -f3 "/proc/$pid/stat" 2>/dev/null)" = Z ]; then
      wait "$pid" 2>/dev/null && rc=0 || rc=$?
      rm -f "$PIDFILE"
      printf 'lab: sluice exited during startup (status %s); its log (%s):\n' "$rc" "$LOG" >&2
      tail -n 30 "$LOG" >&2
      return 1
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      printf 'lab: sluice not ready after %ss; its log (%s):\n' "$READY_TIMEOUT" "$LOG" >&2
      tail -n 30 "$LOG" >&2
      stop_sluice "$pid" || true
      return 1
    fi
    sleep 0.2
  done
  say "sluice ready (pid $pid, log $LOG): $(grep -m1 -o 'ready:.*' "$LOG")"
}

# Stops sluice: SIGTERM, then SIGKILL if it does not exit within 15 s.
stop_sluice() {
  local pid=$1
  kill -TERM "$pid" 2>/dev/null || true
  if ! wait_gone "$pid" 15; then
    say "sluice (pid $pid) ignored SIGTERM for 15 s; killing it"
    kill -KILL "$pid" 2>/dev/null || true
    wait_gone "$pid" 5 || true
    rm -f "$PIDFILE"
    return 1
  fi
  rm -f "$PIDFILE"
}

# The exit status belongs to the shell that started sluice (gone by now), so judge the stop by the log: sluice logs
# "all N mbufs returned" per mempool after a clean stop, and errors (leaked mbufs among them) at level error.
cmd_stop() {
  need_root
  local pid
  if ! pid=$(sluice_pid); then say "sluice is not running"; rm -f "$PIDFILE"; return 0; fi
  say "stopping sluice (pid $pid)"
  if ! stop_sluice "$pid"; then say "sluice had to be killed (log: $LOG)"; return 1; fi
  if grep -q '\[error\]\|leaked' "$LOG" || ! grep -q 'mbufs returned' "$LOG"; then
    say "sluice did not stop cleanly; from its log ($LOG):"
    grep -E 'error|leaked|stopping|port .*: rx|dropped|mempool' "$LOG" | sed 's/^/  /' | tail -n 20
    return 1
  fi
  say "sluice stopped cleanly; its final counters:"
  grep -E "port '.*': rx|dropped " "$LOG" | sed 's/^.*\] /  /'
}

# --- topology ---------------------------------------------------------------------------------------------------------

# Turns checksum offloads, segmentation and GRO off on a veth inside a namespace. Otherwise af_packet sees packets
# whose checksum is still CHECKSUM_PARTIAL (not filled in) and sluice forwards them with bad TCP/UDP checksums, and
# GRO/TSO hand it super-frames larger than the MTU.
no_offloads() {
  local ns=$1 dev=$2 f
  for f in rx tx sg tso gso gro lro rx-gro-list rx-udp-gro-forwarding; do
    ip netns exec "$ns" ethtool -K "$dev" "$f" off >/dev/null 2>&1 || true
  done
  local left
  left=$(ip netns exec "$ns" ethtool -k "$dev" 2>/dev/null |
         grep -E '^(rx-checksumming|tx-checksumming|tcp-segmentation-offload|generic-segmentation-offload|generic-receive-offload): on' || true)
  [ -z "$left" ] || die "$ns/$dev: offloads still on: ${left//$'\n'/; }"
}

# Host side of one end: address, MAC, quiet IPv6, permanent neighbour for the (absent) gateway, default routes.
setup_host() {
  local ns=$1 dev=$2 mac=$3 v4=$4 gw4=$5 gwmac=$6 v6=$7 gw6=$8
  local nsx=(ip netns exec "$ns")
  "${nsx[@]}" ip link set lo up
  ip -n "$ns" link set "$dev" address "$mac"
  # IPv6 without chatter: no link-local address, no DAD, no router solicitations, no RA. The only packets the kernel
  # then sends on its own are the unsolicited MLD reports (hop limit 1) for the global address's solicited-node
  # group: one when the address is added, a repeat up to mldv2_unsolicited_report_interval later (default 1 s).
  # Squeeze that to 10 ms so both are out before sluice opens its sockets; otherwise sluice catches the repeat and
  # rightly drops it as ttl_expired, and the demo shows a drop that is no fault.
  "${nsx[@]}" sysctl -qw "net.ipv6.conf.$dev.addr_gen_mode=1" "net.ipv6.conf.$dev.accept_dad=0" \
    "net.ipv6.conf.$dev.router_solicitations=0" "net.ipv6.conf.$dev.accept_ra=0" \
    "net.ipv6.conf.$dev.mldv2_unsolicited_report_interval=10" "net.ipv6.conf.$dev.mldv1_unsolicited_report_interval=10"
  no_offloads "$ns" "$dev"
  ip -n "$ns" addr add "$v4" dev "$dev"
  ip -n "$ns" -6 addr add "$v6" dev "$dev" nodad
  ip -n "$ns" link set "$dev" up
  ip -n "$ns" neigh replace "$gw4" lladdr "$gwmac" dev "$dev" nud permanent
  ip -n "$ns" -6 neigh replace "$gw6" lladdr "$gwmac" dev "$dev" nud permanent
  ip -n "$ns" route replace default via "$gw4" dev "$dev"
  ip -n "$ns" -6 route replace default via "$gw6" dev "$dev"
}

cmd_up() {
  need_root
  local jumbo=""
  case "${1:-}" in
    "") ;;
    --jumbo) jumbo=1 ;;
    *) die "usage: $0 up [--jumbo]" ;;
  esac
  command -v ethtool >/dev/null || die "ethtool is missing (deploy/install-deps.sh installs it)"
  local ns
  for ns in "${NAMESPACES[@]}"; do
    if ns_exists "$ns"; then say "removing the previous lab first"; break; fi
  done
  cmd_down --quiet
  say "creating namespaces ${NAMESPACES[*]}"
  for ns in "${NAMESPACES[@]}"; do ip netns add "$ns"; done
  # Create each pair inside the gateway namespace and move the host end out: no interface, not even briefly, lives
  # in the root namespace.
  ip -n "$NS_GW" link add gw-client type veth peer name client0 netns "$NS_CLIENT"
  ip -n "$NS_GW" link add gw-server type veth peer name uplink netns "$NS_SERVER"
  ip -n "$NS_GW" link add gw-mgmt type veth peer name mgmt netns "$NS_SERVER"

  # Gateway side: no addresses and no IPv6, so the kernel sends nothing that sluice's af_packet sockets would pick
  # up as outgoing traffic and forward.
  ip netns exec "$NS_GW" ip link set lo up
  ip netns exec "$NS_GW" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
  # gw-mgmt and gw-server share the server LAN: each answers ARP only for its own addresses (no ARP flux), so an
  # address the kernel holds on gw-server is reached through gw-server, past sluice's XDP program.
  ip netns exec "$NS_GW" sysctl -qw net.ipv4.conf.all.arp_ignore=1 net.ipv4.conf.all.arp_announce=2
  local dev mac
  for pair in gw-client=02:77:00:00:01:01 gw-server=02:77:00:00:02:01; do
    dev=${pair%%=*} mac=${pair#*=}
    ip -n "$NS_GW" link set "$dev" address "$mac"
    ip netns exec "$NS_GW" sysctl -qw "net.ipv6.conf.$dev.disable_ipv6=1"
    no_offloads "$NS_GW" "$dev"
    ip -n "$NS_GW" link set "$dev" up
  done

  # The server LAN: a bridge in sl-server whose ports are sluice's link, the management link and the backends'.
  ip -n "$NS_SERVER" link add br0 type bridge
  for dev in uplink mgmt; do bridge_port "$NS_SERVER" "$dev"; done
  local n
  for n in "${BACKENDS[@]}"; do
    ip -n "$NS_GW" link add "gw-be$n" type veth peer name eth0 netns "$NS-backend$n"  # made in sl-gw, moved out next
    ip -n "$NS_GW" link set "gw-be$n" netns "$NS_SERVER" name "be$n"
    bridge_port "$NS_SERVER" "be$n"
    # Static forwarding entries: the bridge never floods a frame for a backend (or for the management link) to
    # sluice's port while it has not learnt where that MAC lives.
    ip netns exec "$NS_SERVER" bridge fdb replace "02:77:00:00:03:0$n" dev "be$n" master static
  done
  ip netns exec "$NS_SERVER" bridge fdb replace 02:77:00:00:02:fe dev mgmt master static
  ip netns exec "$NS_SERVER" bridge fdb replace 02:77:00:00:02:01 dev uplink master static
  setup_host "$NS_CLIENT" client0 02:77:00:00:01:02 10.77.1.2/24 10.77.1.1 02:77:00:00:01:01 fd77:1::2/64 fd77:1::1
  setup_host "$NS_SERVER" br0 02:77:00:00:02:02 10.77.2.2/24 10.77.2.1 02:77:00:00:02:01 fd77:2::2/64 fd77:2::1

  # The exception path: the gateway's kernel on the server LAN (never through sluice), IPv4 only.
  ip -n "$NS_GW" link set gw-mgmt address 02:77:00:00:02:fe
  no_offloads "$NS_GW" gw-mgmt
  ip -n "$NS_GW" addr add 10.77.2.254/24 dev gw-mgmt
  ip -n "$NS_GW" link set gw-mgmt up
  for n in "${BACKENDS[@]}"; do
    setup_backend "$n"
    ip -n "$NS_GW" neigh replace "10.77.2.1$n" lladdr "02:77:00:00:03:0$n" dev gw-mgmt nud permanent
  done
  setup_router
  placement
  if [ -n "$jumbo" ]; then set_jumbo; fi
  say "up: $NS_CLIENT 10.77.1.2 fd77:1::2 <-> $NS_GW (gw-client, gw-server) <-> $NS_SERVER 10.77.2.2 fd77:2::2"
  say "    backends $NS-backend1..3 10.77.2.11..13 (HTTP :80, UDP :53); health checks from $NS_GW via gw-mgmt 10.77.2.254"
  say "    $NS_ROUTER 10.77.2.3 announces 10.77.50.0/24 over BGP to $NS_GW's BIRD (kernel table $KERNEL_TABLE)"
  say "start sluice with: $0 start"
}

# The hex mask of the CPUs given as arguments, for rps_cpus.
cpu_mask() { local c m=0; for c in "$@"; do m=$((m | 1 << c)); done; printf '%x' "$m"; }

# Sets rps_cpus of every RX queue of interface $2 in namespace $1 to mask $3.
set_rps() {
  # shellcheck disable=SC2016  # expanded by the inner sh, inside the namespace (its own /sys)
  ip netns exec "$1" sh -c 'for q in /sys/class/net/$0/queues/rx-*/rps_cpus; do echo "$1" >"$q"; done' "$2" "$3" ||
    die "$1/$2: cannot set rps_cpus to $3"
}

# Where the kernel processes what each veth receives (RPS): a veth receives in the sender's context, so without it
# a host's whole receive path (bridge, IP, socket) would run inside sluice's TX call on sluice's CPU. The gateway's
# veths steer to sluice's CPU (what the kernel does there when it forwards instead of sluice: the gateway's work on
# one CPU either way; AF_XDP takes its frames before RPS), every host's and the bridge's to the other CPUs.
placement() {
  local cpus c others=()
  cpus=$(nproc --all)
  ((GW_CPU < cpus)) || die "SLUICE_LAB_CPU=$GW_CPU: this machine has CPUs 0..$((cpus - 1))"
  for ((c = 0; c < cpus; c++)); do ((c == GW_CPU)) || others+=("$c"); done
  ((${#others[@]})) || { say "one CPU: no receive steering"; return 0; }
  local gw hosts dev n
  gw=$(cpu_mask "$GW_CPU") hosts=$(cpu_mask "${others[@]}")
  for dev in gw-client gw-server; do set_rps "$NS_GW" "$dev" "$gw"; done
  set_rps "$NS_CLIENT" client0 "$hosts"
  for dev in uplink mgmt rt br0; do set_rps "$NS_SERVER" "$dev" "$hosts"; done
  for n in "${BACKENDS[@]}"; do
    set_rps "$NS_SERVER" "be$n" "$hosts"
    set_rps "$NS-backend$n" eth0 "$hosts"
  done
  set_rps "$NS_ROUTER" eth0 "$hosts"
}

# --jumbo: MTU 9000 on every interface of the lab's links (a bridge takes its ports' smallest MTU), and the mark that
# tells `start` to run sluice with mtu 9000 on devices that take it.
set_jumbo() {
  local ns dev names='$2 != "lo" {sub(/@.*/, "", $2); print $2}'
  for ns in "${NAMESPACES[@]}"; do
    # The bridge after its ports: its MTU follows theirs.
    for dev in $(ip -n "$ns" -o link show | awk -F': ' "$names" | grep -vxF -f <(ip -n "$ns" -o link show type bridge |
                 awk -F': ' "$names"; echo lo)) $(ip -n "$ns" -o link show type bridge | awk -F': ' "$names"); do
      ip -n "$ns" link set "$dev" mtu "$JUMBO_MTU"
    done
  done
  mkdir -p "$STATE"
  echo "$JUMBO_MTU" >"$STATE/jumbo"
  say "jumbo: MTU $JUMBO_MTU on every link; 'start' runs sluice on net_pcap with mtu $JUMBO_MTU on its ports"
}

# A bridge port in namespace $1: no offloads, no IPv6 of its own (no MLD or ND chatter), enslaved to br0, up.
bridge_port() {
  local ns=$1 dev=$2
  ip netns exec "$ns" sysctl -qw "net.ipv6.conf.$dev.disable_ipv6=1"
  no_offloads "$ns" "$dev"
  ip -n "$ns" link set "$dev" master br0
  ip -n "$ns" link set "$dev" up
}

# Backend N: IPv4 only, 10.77.2.1N, the dsr VIP on its loopback, the gateway and the management address as
# permanent neighbours, and its servers.
setup_backend() {
  local n=$1 ns=$NS-backend$1
  local nsx=(ip netns exec "$ns")
  "${nsx[@]}" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
  "${nsx[@]}" ip link set lo up
  ip -n "$ns" addr add 10.77.100.2/32 dev lo    # the dsr VIP: the backend answers for it, and from it
  ip -n "$ns" link set eth0 address "02:77:00:00:03:0$n"
  no_offloads "$ns" eth0
  ip -n "$ns" addr add "10.77.2.1$n/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" neigh replace 10.77.2.1 lladdr 02:77:00:00:02:01 dev eth0 nud permanent
  ip -n "$ns" neigh replace 10.77.2.254 lladdr 02:77:00:00:02:fe dev eth0 nud permanent
  ip -n "$ns" route replace default via 10.77.2.1 dev eth0
  start_backend "$n"
}

# The router on the server LAN and the two BIRDs: sl-router announces its remote network 10.77.50.0/24 to the
# gateway's BIRD (deploy/bird/gateway-kernel-table.conf with this lab's addresses), which installs it into kernel
# table $KERNEL_TABLE of sl-gw for sluice to mirror. The router reaches the client LAN through sluice (10.77.2.1,
# a permanent neighbour as on the other hosts); its HTTP server on 10.77.50.1 is the demo's routed destination.
setup_router() {
  command -v bird >/dev/null || die "bird is missing (apt-get install bird2; deploy/install-deps.sh does it)"
  local nsx=(ip netns exec "$NS_ROUTER")
  ip -n "$NS_GW" link add gw-rt type veth peer name eth0 netns "$NS_ROUTER"  # made in sl-gw, moved out next
  ip -n "$NS_GW" link set gw-rt netns "$NS_SERVER" name rt
  bridge_port "$NS_SERVER" rt
  ip netns exec "$NS_SERVER" bridge fdb replace 02:77:00:00:04:01 dev rt master static
  "${nsx[@]}" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
  "${nsx[@]}" ip link set lo up
  ip -n "$NS_ROUTER" link set eth0 address 02:77:00:00:04:01
  no_offloads "$NS_ROUTER" eth0
  ip -n "$NS_ROUTER" addr add 10.77.2.3/24 dev eth0
  ip -n "$NS_ROUTER" link set eth0 up
  # The remote network: a veth pair inside sl-router (no dummy driver in every kernel); remote0 holds its address.
  ip -n "$NS_ROUTER" link add remote0 type veth peer name remote0p
  ip -n "$NS_ROUTER" link set remote0p up
  ip -n "$NS_ROUTER" addr add 10.77.50.1/24 dev remote0
  ip -n "$NS_ROUTER" link set remote0 up
  ip -n "$NS_ROUTER" neigh replace 10.77.2.1 lladdr 02:77:00:00:02:01 dev eth0 nud permanent
  ip -n "$NS_ROUTER" route replace 10.77.1.0/24 via 10.77.2.1 dev eth0
  mkdir -p "$STATE"
  setsid "${nsx[@]}" "$PYTHON" "$here/backend.py" remote >"$STATE/remote.log" 2>&1 </dev/null &
  echo $! >"$STATE/remote.pid"
  cat >"$STATE/bird-router.conf" <<EOF
log "$STATE/bird-router.log" all;
router id 10.77.2.3;
protocol device { scan time 10; }
protocol static remote_net { ipv4; route 10.77.50.0/24 via "remote0"; }
protocol bgp to_gateway {
    local 10.77.2.3 as 65050;
    neighbor 10.77.2.254 as 65077;
    hold time 9; keepalive time 3; connect retry time 1;
    ipv4 { import none; export where proto = "remote_net"; next hop self; };
}
EOF
  # The gateway's side is the example config itself, with this lab's addresses and one router.
  sed -e "s#^log syslog all;#log \"$STATE/bird-gw.log\" all;#" \
      -e "s#^router id .*#router id 10.77.2.254;#" \
      -e "s#kernel table 100;#kernel table $KERNEL_TABLE;#" \
      -e "s#local as 65000;#local as 65077;#" \
      -e "s#hold time 9; keepalive time 3;#hold time 9; keepalive time 3; connect retry time 1;#" \
      -e '/^protocol bgp router/d' "$root/deploy/bird/gateway-kernel-table.conf" >"$STATE/bird-gw.conf"
  echo 'protocol bgp router1 from upstream { neighbor 10.77.2.3 as 65050; source address 10.77.2.254; }' \
    >>"$STATE/bird-gw.conf"
  ip netns exec "$NS_GW" bird -c "$STATE/bird-gw.conf" -s "$STATE/bird-gw.ctl" -P "$STATE/bird-gw.pid"
  "${nsx[@]}" bird -c "$STATE/bird-router.conf" -s "$STATE/bird-router.ctl" -P "$STATE/bird-router.pid"
}

# Starts backend N's servers (backend.py) in its namespace and waits until it listens.
start_backend() {
  local n=$1 ns=$NS-backend$1
  mkdir -p "$STATE"
  setsid ip netns exec "$ns" "$PYTHON" "$here/backend.py" "backend$n" >"$STATE/backend$n.log" 2>&1 </dev/null &
  echo $! >"$STATE/backend$n.pid"
  local deadline=$((SECONDS + 10))
  until ip netns exec "$ns" ss -Hltn 'sport = :80' 2>/dev/null | grep -q LISTEN; do
    [ "$SECONDS" -lt "$deadline" ] || die "backend$n does not listen after 10 s: $(cat "$STATE/backend$n.log")"
    sleep 0.1
  done
}

stop_backend() {
  local n=$1 pid
  pid=$(cat "$STATE/backend$n.pid" 2>/dev/null) || { say "backend$n is not running"; return 0; }
  kill -TERM "$pid" 2>/dev/null || true
  wait_gone "$pid" 5 || kill -KILL "$pid" 2>/dev/null || true
  rm -f "$STATE/backend$n.pid"
  say "backend$n stopped"
}

# Removes everything `up`, `start` and demo.sh created: processes inside the lab's namespaces (sluice, the demo's
# HTTP server), the namespaces (and with them every veth), sluice's DPDK runtime and hugepage files, the state dir.
# True if a live process holds the EAL config file of runtime dir $1 open (every running primary does).
prefix_in_use() {
  [ -e "$1/config" ] || return 1
  local target
  target=$(readlink -f "$1/config")
  [ -n "$(find /proc/[0-9]*/fd -maxdepth 1 -lname "$target" -print -quit 2>/dev/null)" ]
}

cmd_down() {
  need_root
  local quiet=${1:-}
  local pid
  if pid=$(sluice_pid); then
    [ -n "$quiet" ] || say "stopping sluice (pid $pid)"
    stop_sluice "$pid" || true
  fi
  # First end everything still running inside the namespaces (started by this lab: a sluice not started through
  # 'start', the demo's HTTP server, shells), then delete the namespaces: sluice never sees its interfaces vanish.
  local ns pids p
  for ns in "${NAMESPACES[@]}"; do
    ns_exists "$ns" || continue
    pids=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')
    [ -n "${pids// /}" ] || continue
    [ -n "$quiet" ] || say "ending processes in $ns: $pids"
    # shellcheck disable=SC2086  # a list of pids
    kill -TERM $pids 2>/dev/null || true
    for p in $pids; do wait_gone "$p" 15 || kill -KILL "$p" 2>/dev/null || true; done
    for p in $pids; do wait_gone "$p" 5 || say "WARNING: pid $p in $ns did not exit"; done
  done
  for ns in "${NAMESPACES[@]}"; do
    ns_exists "$ns" || continue
    ip netns del "$ns" 2>/dev/null || true
    [ -n "$quiet" ] || say "deleted namespace $ns"
  done
  # The veths die with their namespaces; a namespace's name can linger for a moment while the kernel tears it down.
  local deadline=$((SECONDS + 10))
  while :; do
    local left=()
    for ns in "${NAMESPACES[@]}"; do ns_exists "$ns" && left+=("$ns"); done
    ((${#left[@]})) || break
    [ "$SECONDS" -lt "$deadline" ] || die "namespaces still present: ${left[*]}"
    sleep 0.2
  done
  # A sluice that was killed (not stopped) leaves its runtime dir and hugepage files; remove them, but only when no
  # process of that prefix is alive (the EAL holds a lock on its config file while it runs).
  local rdir
  rdir=$(runtime_dir)
  if prefix_in_use "$rdir"; then
    say "WARNING: a DPDK process with prefix $FILE_PREFIX still runs outside the lab; leaving $rdir"
  else
    rm -rf "$rdir"
    rm -f /dev/hugepages/"$FILE_PREFIX"map_* 2>/dev/null || true
  fi
  rm -rf "$STATE"
  [ -n "$quiet" ] || say "down: nothing of the lab is left"
}

# --- status -----------------------------------------------------------------------------------------------------------

# Prints /sluice/stats from sluice's telemetry socket. With --json: the raw JSON object.
cmd_stats() {
  local sock
  sock="$(runtime_dir)/dpdk_telemetry.v2"
  "$PYTHON" - "$sock" "${1:-}" <<'EOF'
import json, socket, sys
path, mode = sys.argv[1], sys.argv[2]
try:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(5)
    s.connect(path)
    greeting = json.loads(s.recv(1024))
    s.send(b"/sluice/stats")
    reply = json.loads(s.recv(greeting.get("max_output_len", 16384)))
except (OSError, ValueError) as e:
    sys.exit(f"lab: telemetry at {path} unreachable ({e}); is sluice running?")
stats = reply.get("/sluice/stats")
if not isinstance(stats, dict):
    sys.exit(f"lab: /sluice/stats gave no data (sluice not ready yet?): {reply}")
if mode == "--json":
    print(json.dumps(stats, indent=1, sort_keys=True)); sys.exit(0)
ports = {}
for k, v in stats.items():
    if k.startswith("port/"):
        _, name, field = k.split("/", 2)
        ports.setdefault(name, {})[field] = v
print(f"  {'port':<8} {'rx pkts':>10} {'rx bytes':>12} {'tx pkts':>10} {'tx bytes':>12} {'missed':>7} {'nombuf':>7} {'rx err':>7} {'tx err':>7}")
for name, c in ports.items():
    print(f"  {name:<8} {c['rx_packets']:>10} {c['rx_bytes']:>12} {c['tx_packets']:>10} {c['tx_bytes']:>12}"
          f" {c.get('hw_rx_missed', '-'):>7} {c.get('hw_rx_nombuf', '-'):>7} {c.get('hw_rx_errors', '-'):>7} {c.get('hw_tx_errors', '-'):>7}")
drops = {k[5:]: v for k, v in stats.items() if k.startswith("drop/") and v}
print(f"  drops {stats['drops']}" + ("" if not drops else ": " + ", ".join(f"{k} {v}" for k, v in sorted(drops.items()))))
print(f"  polls {stats['polls']} ({stats['busy_polls']} moved packets, {stats['busy_cycles'] / stats['tsc_hz']:.1f} s busy), ring enq/deq {stats['ring_enqueued']}/{stats['ring_dequeued']}"
      f" backlog {stats['ring_backlog']}, mbufs in use {stats['mbufs_in_use']}")
EOF
}

# The kernel's counters of sluice's two interfaces. 22.11's af_packet PMD does not report the packets the kernel
# dropped because sluice's RX ring (framecnt= in the device string) was full: sluice's hw_rx_missed stays 0. Kernel
# rx on gw-X minus sluice's rx on that port is that loss (plus anything that arrived while sluice was not running).
kernel_counters() {
  ns_exists "$NS_GW" || return 0
  local dev f v line
  echo "  kernel view of sluice's interfaces ($NS_GW):"
  for dev in gw-client gw-server; do
    line=""
    for f in rx_packets tx_packets rx_dropped tx_dropped; do
      v=$(ip netns exec "$NS_GW" cat "/sys/class/net/$dev/statistics/$f" 2>/dev/null || echo '?')
      line+=" $f $v,"
    done
    printf '    %-10s%s\n' "$dev" "${line%,}"
  done
}

cmd_status() {
  need_root
  local ns any=0
  for ns in "${NAMESPACES[@]}"; do
    if ns_exists "$ns"; then
      any=1
      echo "namespace $ns:"
      local dev state mac addrs
      while read -r dev state mac _; do
        dev=${dev%@*}
        [ "$dev" = lo ] && continue
        addrs=$(ip -n "$ns" -br addr show dev "$dev" | awk '{$1=$2=""; print}' | xargs)
        printf '  %-10s %-8s %s  %s\n' "$dev" "$state" "$mac" "${addrs:-(no addresses)}"
      done < <(ip -n "$ns" -br link show)
    else
      echo "namespace $ns: absent"
    fi
  done
  [ "$any" -eq 1 ] || { echo "the lab is down (start it with $0 up)"; }
  if [ -S "$STATE/bird-gw.ctl" ]; then
    echo "BGP ($NS_GW's BIRD): $(birdc -s "$STATE/bird-gw.ctl" show protocols router1 2>&1 | awk '$1 == "router1" {print $4, $6}')"
    echo "kernel table $KERNEL_TABLE of $NS_GW (what sluice mirrors):"
    ip -n "$NS_GW" route show table "$KERNEL_TABLE" 2>/dev/null | sed 's/^/  /'
  fi
  local pid p
  if pid=$(sluice_pid); then
    echo "sluice: running, pid $pid, log $LOG"
    cmd_stats || true
    kernel_counters
  elif ns_exists "$NS_GW" && pid=$(for p in $(ip netns pids "$NS_GW"); do
                                     [ "$(cat "/proc/$p/comm" 2>/dev/null)" = sluice ] && echo "$p"; done) && [ -n "$pid" ]; then
    echo "sluice: running in $NS_GW, pid ${pid//$'\n'/ }, but not started by '$0 start'"
    cmd_stats || true
    kernel_counters
  else
    echo "sluice: not running"
    [ -r "$LOG" ] && echo "  last log: $LOG"
  fi
  return 0
}

case "${1:-}" in
  up) cmd_up "${2:-}" ;;
  down) cmd_down ;;
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  stats) shift; cmd_stats "${1:-}"; [ "${1:-}" = --json ] || kernel_counters ;;
  pid) sluice_pid ;;
  backend-stop) need_root; [[ ${2:-} =~ ^[123]$ ]] || die "usage: $0 backend-stop 1|2|3"; stop_backend "$2" ;;
  backend-start) need_root; [[ ${2:-} =~ ^[123]$ ]] || die "usage: $0 backend-start 1|2|3"
                 [ -r "$STATE/backend$2.pid" ] && stop_backend "$2"; start_backend "$2"; say "backend$2 started" ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 2 ;;
esac

#!/usr/bin/env bash
# The demo: from a fresh Debian 12 box (as root) to real traffic through sluice in a virtual lab.
#
#   1. install the packages and hugepages (deploy/install-deps.sh)
#   2. build sluice if build/app/sluice/sluice is missing (or with --rebuild)
#   3. create the lab (deploy/lab/lab.sh up): namespaces sl-client, sl-gw, sl-server joined by veth pairs
#   4. start sluice in sl-gw, wait for "ready:"
#   5. ping the server from the client over IPv4 and IPv6 (replies must come back with TTL 63: one hop, sluice)
#   6. fetch a file over TCP (IPv4 and IPv6) from an HTTP server in sl-server, compare checksums
#   7. a route learned over BGP: sl-router's BIRD announces 10.77.50.0/24, the gateway's BIRD installs it into the
#      kernel table sluice mirrors; an HTTP request to 10.77.50.1 goes through that route
#   8. the load balancer: HTTP requests to a full-NAT VIP and a DSR VIP, UDP to a NAT VIP, printing which backend
#      answered each; a backend stopped and started again (health checks take it out and bring it back)
#   9. the firewall's verdicts (sluicectl rules), the backends (sluicectl backends), a few lines of /metrics
#  10. print sluice's counters, then how to look around and how to stop
#
# usage: demo.sh [--once] [--rebuild] [--no-deps]
#   --once      tear everything down at the end; exit status 1 if any step failed (for tests)
#   --rebuild   run the build even if the binary exists
#   --no-deps   skip deploy/install-deps.sh
# All traffic stays inside the lab's namespaces. Every wait is bounded.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
lab="$here/lab.sh"
SLUICE_BIN=${SLUICE_BIN:-$root/build/app/sluice/sluice}
STATE=${SLUICE_LAB_STATE:-/run/sluice-lab}
export SLUICE_LAB_STATE=$STATE
PYTHON=/usr/bin/python3   # a pyenv shim may shadow python3 on PATH
FILE_MIB=${SLUICE_DEMO_FILE_MIB:-8}
HTTP_PORT=8080
PINGS=5

once=0 rebuild=0 deps=1
for a in "$@"; do
  case "$a" in
    --once) once=1 ;;
    --rebuild) rebuild=1 ;;
    --no-deps) deps=0 ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "demo: unknown argument $a (try --help)" >&2; exit 2 ;;
  esac
done

[ "$(id -u)" -eq 0 ] || { echo "demo: must run as root (packages, hugepages, namespaces)" >&2; exit 1; }

failed=()
sluice_started=0
fetched=0   # files transferred intact
t_start=$SECONDS
rm -f /tmp/sluice-lab-failed.log  # from an earlier failed --once run
bold() { if [ -t 1 ]; then printf '\033[1m%s\033[0m\n' "$*"; else printf '%s\n' "$*"; fi; }
note() { printf '   %s\n' "$*"; }

# step NAME FUNCTION: runs it, times it, records a failure. A failed prerequisite step stops the demo.
step() {
  local name=$1 fn=$2 t0=$SECONDS rc=0
  bold "== $name"
  "$fn" || rc=$?
  if [ "$rc" -eq 0 ]; then note "ok ($((SECONDS - t0)) s)"; else note "FAILED ($((SECONDS - t0)) s)"; failed+=("$name"); fi
  return "$rc"
}

finish() {
  local rc=0
  ((${#failed[@]})) && rc=1
  if [ "$once" -eq 1 ]; then
    bold "== teardown"
    if ((${#failed[@]})) && [ -r "$STATE/sluice.log" ]; then
      cp "$STATE/sluice.log" /tmp/sluice-lab-failed.log 2>/dev/null && note "sluice's log kept in /tmp/sluice-lab-failed.log"
    fi
    if [ "$sluice_started" -eq 1 ] && ! "$lab" pid >/dev/null; then
      note "sluice is no longer running; the end of its log:"; tail -n 20 "$STATE/sluice.log" 2>/dev/null | sed 's/^/   /'
      failed+=("sluice died"); rc=1
    elif [ "$sluice_started" -eq 1 ] && ! "$lab" stop; then
      failed+=("clean stop of sluice"); rc=1
    fi
    "$lab" down || rc=1
  fi
  echo
  if ((${#failed[@]})); then
    if [ "$once" -eq 0 ]; then
      note "whatever came up is left running for inspection: $lab status; sluice's log: $STATE/sluice.log"
      note "remove it all with: $lab down"
    fi
    local IFS=';'
    bold "demo FAILED after $((SECONDS - t_start)) s; failed steps: ${failed[*]}"
  else
    bold "demo passed in $((SECONDS - t_start)) s"
  fi
  exit "$rc"
}

on_signal() {
  echo; echo "demo: interrupted" >&2
  failed+=("interrupted")
  trap - INT TERM
  finish
}
trap on_signal INT TERM

# --- steps ----------------------------------------------------------------------------------------------------------

deps() { "$root/deploy/install-deps.sh"; }

build() {
  if [ "$rebuild" -eq 0 ] && [ -x "$SLUICE_BIN" ]; then note "using $SLUICE_BIN (--rebuild to rebuild)"; return 0; fi
  cd "$root" || return 1
  if [ ! -f build/build.ninja ]; then
    note "meson setup build"
    timeout 600 meson setup build || return 1
  fi
  # Only the daemon and what it links: the demo does not need the unit tests (ninja -C build builds everything).
  note "ninja -C build app/sluice/sluice (a few minutes on 2 CPUs)"
  timeout 3600 ninja -C build app/sluice/sluice || return 1
  [ -x "$SLUICE_BIN" ]
}

check_config() { "$SLUICE_BIN" --check-config "$root/config/lab.yaml"; }

lab_up() { "$lab" up; }

start_sluice() { "$lab" start && sluice_started=1; }

# ping_check FAMILY ADDRESS: every echo must come back, with TTL/hop limit 63 (64 minus sluice's hop).
ping_check() {
  local fam=$1 addr=$2 out
  out=$(ip netns exec sl-client timeout 20 ping "$fam" -n -c "$PINGS" -i 0.2 -W 2 -w 6 "$addr" 2>&1)
  local rc=$?
  printf '%s\n' "$out" | grep -E 'bytes from|packets transmitted|rtt' | sed 's/^/   /'
  [ "$rc" -eq 0 ] || { note "ping $addr failed (status $rc)"; return 1; }
  local got
  got=$(printf '%s\n' "$out" | grep -Eo '[0-9]+ received' | grep -Eo '[0-9]+')
  [ "${got:-0}" -eq "$PINGS" ] || { note "only ${got:-0} of $PINGS replies"; return 1; }
  local hops
  hops=$(printf '%s\n' "$out" | grep -Eo '(ttl|hlim)=[0-9]+' | sort -u | tr '\n' ' ')
  [ "$hops" = "ttl=63 " ] || [ "$hops" = "hlim=63 " ] ||
    { note "replies came back with $hops, expected 63 (64 minus one hop through sluice)"; return 1; }
}
ping4() { ping_check -4 10.77.2.2; }
ping6() { ping_check -6 fd77:2::2; }

http_server() {
  local www=$STATE/www
  mkdir -p "$www" || return 1
  head -c "$((FILE_MIB << 20))" /dev/urandom >"$www/blob.bin" || return 1
  sha256sum "$www/blob.bin" | cut -d' ' -f1 >"$STATE/blob.sha256"
  # Dual-stack (IPv4 and IPv6) on :: -- inside sl-server, where the only addresses are 10.77.2.2 and fd77:2::2.
  setsid ip netns exec sl-server "$PYTHON" -m http.server --bind :: --directory "$www" "$HTTP_PORT" \
    >"$STATE/http.log" 2>&1 </dev/null &
  local pid=$! deadline=$((SECONDS + 10))
  until ip netns exec sl-server ss -Hltn "sport = :$HTTP_PORT" 2>/dev/null | grep -q LISTEN; do
    if ! kill -0 "$pid" 2>/dev/null; then note "the HTTP server exited:"; sed 's/^/   /' "$STATE/http.log"; return 1; fi
    [ "$SECONDS" -lt "$deadline" ] || { note "the HTTP server is not listening after 10 s"; return 1; }
    sleep 0.1
  done
  note "python3 -m http.server in sl-server (pid $pid) serves a $FILE_MIB MiB random file on port $HTTP_PORT"
}

# fetch URL TAG: curl from sl-client, compare the checksum.
fetch() {
  local url=$1 out=$STATE/got-$2.bin res
  res=$(ip netns exec sl-client curl --noproxy '*' -g -sS --connect-timeout 5 --max-time 60 -o "$out" \
          -w '%{http_code} %{size_download} %{time_total} %{speed_download}' "$url" 2>"$STATE/curl.err") || {
    note "curl $url failed: $(cat "$STATE/curl.err")"; rm -f "$out"; return 1; }
  read -r code size secs speed <<<"$res"
  note "GET $url: HTTP $code, $size bytes in ${secs}s ($(awk -v s="$speed" 'BEGIN{printf "%.1f", s*8/1e6}') Mbit/s)"
  [ "$code" = 200 ] || return 1
  local want got
  want=$(cat "$STATE/blob.sha256") got=$(sha256sum "$out" | cut -d' ' -f1)
  rm -f "$out"
  [ "$got" = "$want" ] || { note "checksum mismatch: got $got, want $want"; return 1; }
  note "sha256 matches ($got)"
  fetched=$((fetched + 1))
}
fetch4() { fetch "http://10.77.2.2:$HTTP_PORT/blob.bin" v4; }
fetch6() { fetch "http://[fd77:2::2]:$HTTP_PORT/blob.bin" v6; }

SLUICECTL=("$PYTHON" "$root/app/sluicectl/sluicectl" --prefix sluice-lab)

# vip_requests URL N: N requests from sl-client; prints which backend answered each, fails if any request failed.
vip_requests() {
  local url=$1 n=$2 i answers=() failed_requests=0 body
  for ((i = 0; i < n; i++)); do
    if body=$(ip netns exec sl-client curl --noproxy '*' -sS --connect-timeout 3 --max-time 5 "$url" 2>&1); then
      answers+=("$body")
    else
      failed_requests=$((failed_requests + 1)); note "request $((i + 1)) failed: $body"
    fi
  done
  note "GET $url x $n: ${answers[*]}"
  printf '%s\n' "${answers[@]}" | sort | uniq -c | awk '{printf "   %s answered %d\n", $2, $1}'
  [ "$failed_requests" -eq 0 ]
}
lb_nat() { vip_requests http://10.77.100.1/ 12; }
lb_dsr() { vip_requests http://10.77.100.2/ 6; }
lb_udp() {
  ip netns exec sl-client "$PYTHON" -c '
import socket
answers = []
for i in range(6):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(3)
    s.sendto(b"hello %d" % i, ("10.77.100.3", 53))  # a new source port each time: a new UDP flow
    answers.append(s.recv(200).decode())
print("   UDP 10.77.100.3:53 x 6:", "; ".join(answers))'
}

# Stops backend3's servers: its health checks fail, sluice takes it out of the Maglev tables; requests keep working.
lb_health() {
  local t0=$SECONDS
  "$lab" backend-stop 3 | sed 's/^/   /'
  local deadline=$((SECONDS + 10))
  until grep -q 'backend web/10.77.2.13 is down' "$STATE/sluice.log"; do
    [ "$SECONDS" -lt "$deadline" ] || { note "backend3 not marked down after 10 s"; return 1; }
    sleep 0.2
  done
  note "backend3 marked down within $((SECONDS - t0 + 1)) s; sluice's log says:"
  grep 'is down' "$STATE/sluice.log" | tail -n 1 | sed 's/^/   /'
  vip_requests http://10.77.100.1/ 8 || return 1
  "$lab" backend-start 3 | sed 's/^/   /'
  deadline=$((SECONDS + 10))
  until grep -q 'backend web/10.77.2.13 is up' "$STATE/sluice.log"; do
    [ "$SECONDS" -lt "$deadline" ] || { note "backend3 not back up after 10 s"; return 1; }
    sleep 0.2
  done
  note "backend3 is up again"
}

# The route to sl-router's network comes from BGP: sl-router's BIRD announces it to sl-gw's BIRD, which installs it
# into kernel table 100; sluice mirrors that table. Waits for the route in sluice, then fetches from behind the router.
routed() {
  local deadline=$((SECONDS + 30)) t0=$SECONDS
  # Its next hop resolved too (sluice asks ARP for it once the route arrives): no first request dropped meanwhile.
  until "${SLUICECTL[@]}" routes 2>/dev/null | grep '10\.77\.50\.0/24.*kernel' | grep -qv unresolved; do
    [ "$SECONDS" -lt "$deadline" ] || {
      note "10.77.50.0/24 did not reach sluice's route table within 30 s; sluicectl routes:"
      "${SLUICECTL[@]}" routes 2>&1 | sed 's/^/     /'
      note "kernel table 100 of sl-gw:"; ip -n sl-gw route show table 100 2>&1 | sed 's/^/     /'
      return 1
    }
    sleep 0.2
  done
  note "BGP route in sluice after $((SECONDS - t0)) s; kernel table 100 of sl-gw: $(ip -n sl-gw route show table 100)"
  note "sluicectl routes:"
  "${SLUICECTL[@]}" routes | sed 's/^/     /'
  vip_requests http://10.77.50.1/ 3
}

looks() {
  note "sluicectl rules:"
  "${SLUICECTL[@]}" rules | sed 's/^/     /' || return 1
  note "sluicectl services:"
  "${SLUICECTL[@]}" services | sed 's/^/     /' || return 1
  note "sluicectl backends:"
  "${SLUICECTL[@]}" backends | sed 's/^/     /' || return 1
  note "curl http://127.0.0.1:9469/metrics (a few lines; sluice runs in sl-gw):"
  ip netns exec sl-gw curl -s --max-time 5 http://127.0.0.1:9469/metrics |
    grep -E '^sluice_(backend_connections_total|rule_hits_total)' | head -n 12 | sed 's/^/     /'
}

# The counters must show the traffic: at least the pings both ways and every file fetched intact, client rx = server tx and
# server rx = client tx when nothing was dropped. Drops are reported, not failed on: TCP recovers from them.
counters() {
  "$lab" stats | sed 's/^ \{0,2\}/   /' || return 1
  local json
  json=$("$lab" stats --json) || return 1
  "$PYTHON" - "$json" "$PINGS" "$FILE_MIB" "$fetched" <<'EOF'
import json, sys
s, pings, mib, fetched = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
c = lambda port, f: s[f"port/{port}/{f}"]
ok = True
def need(cond, msg):
    global ok
    if not cond:
        print("   counter check failed:", msg); ok = False
need(c("client", "rx_packets") >= 2 * pings, "client rx below the pings sent")
need(c("server", "rx_packets") >= 2 * pings, "server rx below the ping replies")
need(c("client", "tx_bytes") >= fetched * (mib << 20), f"client tx bytes below {fetched} copies of the file")
if s["drops"] == 0:
    need(c("client", "rx_packets") == c("server", "tx_packets"), "client rx != server tx with no drops")
    need(c("server", "rx_packets") == c("client", "tx_packets"), "server rx != client tx with no drops")
else:
    print(f"   note: sluice dropped {s['drops']} packet(s); see the drop reasons above")
for p in ("client", "server"):
    for f in ("hw_rx_missed", "hw_rx_nombuf", "hw_rx_errors", "hw_tx_errors"):
        if s.get(f"port/{p}/{f}"):
            print(f"   note: port {p} {f} = {s[f'port/{p}/{f}']}")
sys.exit(0 if ok else 1)
EOF
}

# --- run ------------------------------------------------------------------------------------------------------------

bold "sluice demo: client (sl-client) <-> sluice (sl-gw) <-> server (sl-server), all in network namespaces"
if [ "$deps" -eq 1 ]; then step "install dependencies" deps || finish; fi
step "build" build || finish
step "check the lab config" check_config || finish
step "lab up" lab_up || finish
step "start sluice" start_sluice || finish
step "ping 10.77.2.2 from sl-client" ping4
step "ping fd77:2::2 from sl-client" ping6
if step "HTTP server in sl-server" http_server; then
  step "TCP transfer over IPv4" fetch4
  step "TCP transfer over IPv6" fetch6
fi
step "routed through a BIRD-fed table: 10.77.50.1 behind sl-router" routed
step "load balancer: full NAT VIP 10.77.100.1:80 (weights 2:1:1)" lb_nat
step "load balancer: DSR VIP 10.77.100.2:80" lb_dsr
step "load balancer: UDP over NAT, VIP 10.77.100.3:53" lb_udp
step "health checks: backend3 stopped, then started again" lb_health
step "firewall verdicts, backends, metrics" looks
step "sluice counters (telemetry /sluice/stats)" counters

if [ "$once" -eq 0 ]; then
  echo
  bold "The lab is up and sluice is running. Look around:"
  note "$lab status    # namespaces, links, sluice and its counters"
  note "/usr/bin/python3 /usr/bin/dpdk-telemetry.py -f sluice-lab <<< /sluice/stats    # raw telemetry; interactive without <<<"
  note "ip netns exec sl-client ping 10.77.2.2"
  note "ip netns exec sl-client curl --noproxy '*' -o /dev/null http://10.77.2.2:$HTTP_PORT/blob.bin"
  note "ip netns exec sl-client curl --noproxy '*' http://10.77.100.1/    # a VIP (nat); 10.77.100.2 is dsr"
  note "$PYTHON $root/app/sluicectl/sluicectl --prefix sluice-lab backends    # health, connections per backend"
  note "$lab backend-stop 2; $lab backend-start 2    # watch the health checks take it out and back"
  note "tail -f $STATE/sluice.log    # sluice's log"
  bold "Stop everything with: $lab down"
fi
finish

#!/usr/bin/env bash
# Forwarding benchmark: sluice against dpdk-testpmd on the same traffic, on this machine, in one go.
#
#   tests/bench/forward.sh [--pipeline] [--no-record]   (as root; about 90 s: 3 rounds of 2 runs, each 2 s warm-up
#                                                       + 8 s window; pipeline 3 runs a round, about 3.5 min)
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
# Nothing asserts a speed. Exit status 1 only when a process fails to start, no packet arrives, sluice exits
# non-zero (its leaked-mbuf check), sluice's totals do not add up (rx != tx + drops), or (pipeline) most packets
# were not NATed and sent.
#
# Environment: WARMUP (s, default 2; pipeline 5: every flow opens its connection in it), DURATION (measured window
# in s, default 8), ROUNDS (default 3), SLUICE (binary, default build/app/sluice/sluice), TESTPMD (default
# dpdk-testpmd), BENCH_DOC (default docs/benchmarks.md), KEEP=1 keeps the work directory (logs, config) and prints
# its path; MODE (plain or pipeline), FLOWS (pipeline, default 100000), RULES (pipeline, default 1000).
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
RECORD=1
for arg in "$@"; do
    case "$arg" in
        --no-record) RECORD=0 ;;
        --pipeline) MODE=pipeline ;;
        -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "usage: $0 [--pipeline] [--no-record]" >&2; exit 2 ;;
    esac
done
readonly MODE
readonly DEFAULT_WARMUP=$([[ $MODE == plain ]] && echo 2 || echo 5)
readonly WARMUP="${WARMUP:-$DEFAULT_WARMUP}"
[[ $MODE == plain || $MODE == pipeline ]] || { echo "MODE must be plain or pipeline" >&2; exit 2; }
[[ $FLOWS =~ ^[0-9]+$ ]] && (( FLOWS >= 1 && FLOWS <= 500000 )) || { echo "FLOWS must be 1-500000 (16 NAT pool addresses)" >&2; exit 2; }
[[ $RULES =~ ^[0-9]+$ ]] && (( RULES >= 1 )) || { echo "RULES must be at least 1" >&2; exit 2; }
[[ $ROUNDS =~ ^[0-9]+$ ]] && (( ROUNDS >= 1 )) || { echo "ROUNDS must be at least 1" >&2; exit 2; }

log() { printf '[forward.sh] %s\n' "$*" >&2; }
die() { log "FAIL: $*"; exit 1; }

[[ $EUID -eq 0 ]] || die "run as root (hugepages, /run sockets)"
[[ -x "$SLUICE" ]] || die "no sluice binary at $SLUICE (build it first)"
command -v "$TESTPMD" >/dev/null || die "$TESTPMD not found (Debian package dpdk-dev)"
command -v python3 >/dev/null || die "python3 not found"

ulimit -c 0   # a crashing testpmd would drop a core file in the current directory
# The EAL puts its runtime directory under $RUNTIME_DIRECTORY when set; keep everything under /var/run/dpdk.
unset RUNTIME_DIRECTORY
readonly RUNDIR=/var/run/dpdk
readonly ID="sluice-bench-$$"
readonly WORK="$(mktemp -d "/tmp/$ID.XXXXXX")"
PIDS=()        # every process this script started and has not reaped yet
PREFIXES=()    # EAL file prefixes used (their runtime dirs are removed at exit)
SOCKETS=()     # memif sockets

cleanup() {
    local pid
    for pid in "${PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    local p
    for p in "${PREFIXES[@]}"; do rm -rf "${RUNDIR:?}/$p" /dev/hugepages/"$p"map_*; done
    rm -f "${SOCKETS[@]}"
    if [[ "${KEEP:-0}" == 1 ]]; then log "kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Run a copy: a rebuild during the benchmark must not swap the binary between the check and the run. Its hash and
# build time go into the table (the commit alone does not tell which code a working tree's binary was built from).
cp "$SLUICE" "$WORK/sluice"
readonly SLUICE_ID="$(sha256sum "$WORK/sluice" | cut -c1-8), built $(date -u -r "$SLUICE" '+%Y-%m-%d %H:%M')"

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

# The telemetry sampler, the totals check and the table writer.
cat >"$WORK/bench.py" <<'PY'
import json, os, re, socket, sys, time

def telemetry_connect(path, timeout):
    deadline = time.monotonic() + timeout
    while True:
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            s.connect(path)
            greeting = json.loads(s.recv(4096).decode())
            return s, int(greeting.get("max_output_len", 16384))
        except (FileNotFoundError, ConnectionRefusedError, ValueError):
            s.close()
            if time.monotonic() > deadline:
                raise SystemExit(f"telemetry socket {path} did not answer within {timeout} s")
            time.sleep(0.1)

def query(s, size, cmd):
    s.send(cmd.encode())
    reply = json.loads(s.recv(size).decode())
    return reply[cmd.split(",")[0]]

def cpu_times(pids):
    """(busy jiffies of the whole machine incl. steal, all jiffies, jiffies used by `pids` and this process)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]  # user nice system idle iowait irq softirq steal
    ours = 0
    for pid in pids + [os.getpid()]:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            ours += int(fields[11]) + int(fields[12])  # utime, stime (all threads)
        except (FileNotFoundError, IndexError):
            pass
    return sum(v) - v[3] - v[4], sum(v), ours

def sample(path, warmup, duration, rate_cmd, rate_key, *other_cmds):
    """Queries rate_cmd (and other_cmds) once a second for `duration` s after `warmup` s; JSON summary on stdout.
    BENCH_PIDS (environment) names the benchmark's processes: CPU time that others used meanwhile is reported."""
    s, size = telemetry_connect(path, 20)
    pids = [int(p) for p in os.environ.get("BENCH_PIDS", "").split()]
    time.sleep(warmup)
    samples = []
    cpu0 = cpu_times(pids)
    start = time.monotonic()
    for tick in range(int(duration) + 1):
        delay = start + tick - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        t0 = time.monotonic()
        first = query(s, size, rate_cmd)
        t1 = time.monotonic()
        rest = {c: query(s, size, c) for c in other_cmds}
        samples.append({"t": (t0 + t1) / 2, "replies": {rate_cmd: first, **rest}})
    cpu1 = cpu_times(pids)
    busy, total, ours = (b - a for a, b in zip(cpu0, cpu1))
    counts = [x["replies"][rate_cmd][rate_key] for x in samples]
    times = [x["t"] for x in samples]
    per_second = [(counts[i + 1] - counts[i]) / (times[i + 1] - times[i]) for i in range(len(counts) - 1)]
    json.dump({"window_s": times[-1] - times[0], "packets": counts[-1] - counts[0],
               "rate_pps": (counts[-1] - counts[0]) / (times[-1] - times[0]), "per_second_pps": per_second,
               "others_cpu": max(0.0, (busy - ours) / total) if total else 0.0,
               "first": samples[0]["replies"], "last": samples[-1]["replies"]}, sys.stdout)

def field(path, *keys):
    """Prints one value of a sample() summary: field FILE key [key...]."""
    v = json.load(open(path))
    for k in keys:
        v = v[int(k)] if isinstance(v, list) else v[k]
    print(v)

def summary(path, label):
    v = json.load(open(path))
    ps = v["per_second_pps"]
    print(f"{label}: {v['rate_pps'] / 1e6:.3f} Mpps ({v['packets']} packets in {v['window_s']:.2f} s; "
          f"per second {min(ps) / 1e6:.2f}..{max(ps) / 1e6:.2f} Mpps; other processes used "
          f"{v['others_cpu']:.0%} of the CPUs meanwhile)")

def pipeline_summary(path, flows, rules):
    """The last column of a pipeline row."""
    v = json.load(open(path))
    st, be = v["last"]["/sluice/stats"], "/sluice/backends"
    rx = st["rx_packets"] - v["first"]["/sluice/stats"]["rx_packets"]
    nat = sum(b - a for a, b in zip(v["first"][be]["packets"], v["last"][be]["packets"]))
    tx = st["tx_packets"] - v["first"]["/sluice/stats"]["tx_packets"]
    drops = st["drops"] - v["first"]["/sluice/stats"]["drops"]
    print(f"{int(rules)} rules, {int(flows)} flows: {st['conn_entries']} tracked conns; sent {tx / rx if rx else 0:.1%} "
          f"of rx, {drops} drops; the 8 backends counted {nat / rx if rx else 0:.0%} of rx (refreshed every 250 ms)")

def window_check(path):
    """sluice's own counters over the window against the memif PMD's, and rx against tx + drops."""
    v = json.load(open(path))
    d = lambda cmd, key: v["last"][cmd][key] - v["first"][cmd][key]
    st = "/sluice/stats"
    rx, tx, drops = d(st, "rx_packets"), d(st, "tx_packets"), d(st, "drops")
    pmd = d("/ethdev/stats,0", "ipackets")
    reasons = {k[5:]: d(st, k) for k in v["last"][st] if k.startswith("drop/") and d(st, k)}
    print(f"sluice window: rx {rx}, tx {tx}, drops {drops} {reasons or ''}; memif PMD ipackets {pmd}; "
          f"mbufs_in_use {v['last'][st]['mbufs_in_use']}, ring_backlog {v['last'][st]['ring_backlog']}, "
          f"busy polls {d(st, 'busy_polls')} of {d(st, 'polls')}; lcore load "
          f"{'unknown' if load(v) is None else format(load(v), '.0%')}")

def load(v):
    """The share of the window sluice's lcore spent in iterations that moved packets (None from a sluice without
    the busy_cycles counter)."""
    st = "/sluice/stats"
    if "busy_cycles" not in v["last"][st]:
        return None
    busy = v["last"][st]["busy_cycles"] - v["first"][st]["busy_cycles"]
    return busy / (v["window_s"] * v["last"][st]["tsc_hz"])

def sluice_cycles(path):
    """sluice's busy TSC cycles per received packet over the window (its one lcore does all the work)."""
    v = json.load(open(path))
    d = lambda key: v["last"]["/sluice/stats"][key] - v["first"]["/sluice/stats"][key]
    print(f"{d('busy_cycles') / d('rx_packets'):.1f}" if "busy_cycles" in v["last"]["/sluice/stats"] and d("rx_packets") else "")

def combine(work, rounds):
    """The rounds' medians, tab-separated for the shell: reference Mpps, sluice Mpps, ratio (median of the rounds'
    sluice/reference), the ratio cell, the cycles cell, what other processes used (the worst round's reference /
    sluice window) and 1 when that is over 5 %. Prints the rounds to stderr."""
    import statistics
    rounds = int(rounds)
    ref = [json.load(open(f"{work}/ref-{k}.json")) for k in range(1, rounds + 1)]
    slu = [json.load(open(f"{work}/sluice-{k}.json")) for k in range(1, rounds + 1)]
    cyc = [open(f"{work}/cycles-{k}").read().split() for k in range(1, rounds + 1)]
    ratios = [s["rate_pps"] / r["rate_pps"] for r, s in zip(ref, slu)]
    cycle_pairs = [(float(c[0]), float(c[1])) for c in cyc if len(c) == 2]
    for k in range(rounds):
        c = f"; busy cycles/pkt {cyc[k][0]} / {cyc[k][1]}" if len(cyc[k]) == 2 else ""
        print(f"round {k + 1}: reference {ref[k]['rate_pps'] / 1e6:.2f} Mpps, sluice {slu[k]['rate_pps'] / 1e6:.2f} Mpps, "
              f"ratio {ratios[k]:.3f}{c}", file=sys.stderr)
    med = statistics.median
    ratio = med(ratios)
    cell = f"{ratio:.3f}" if rounds == 1 else f"{ratio:.3f} (median of {rounds}: {', '.join(f'{x:.2f}' for x in ratios)})"
    cycles = "—"
    if cycle_pairs:
        r, s = med(p[0] for p in cycle_pairs), med(p[1] for p in cycle_pairs)
        cycles = f"{r:.0f} / {s:.0f} ({med(p[0] / p[1] for p in cycle_pairs):.2f})"
    worst_ref, worst_slu = max(x["others_cpu"] for x in ref), max(x["others_cpu"] for x in slu)
    print("\t".join([f"{med(x['rate_pps'] for x in ref) / 1e6:.2f}", f"{med(x['rate_pps'] for x in slu) / 1e6:.2f}",
                     f"{ratio:.3f}", cell, cycles, f"{worst_ref:.0%}/{worst_slu:.0%}",
                     "1" if max(worst_ref, worst_slu) > 0.05 else "0"]))

def forward_only(work, rounds):
    """Pipeline mode: sluice forwarding the same traffic with neither firewall nor service, beside the reference and
    the full pipeline of the same rounds: the medians of its rate, of its ratio to the reference, of its busy cycles
    per packet and of what the full pipeline took more in the same round (the stateful stages: connection tracking,
    rules, NAT), with its lcore load (under ~95 % its rate was the generator's) and what other processes used."""
    import statistics
    med, rounds = statistics.median, int(rounds)
    ks = range(1, rounds + 1)
    ref = [json.load(open(f"{work}/ref-{k}.json")) for k in ks]
    fwd = [json.load(open(f"{work}/sluice-forward-{k}.json")) for k in ks]
    fwd_cycles = [open(f"{work}/cycles-forward-{k}").read().split() for k in ks]
    full_cycles = [open(f"{work}/cycles-{k}").read().split() for k in ks]
    loads = [x for x in (load(v) for v in fwd) if x is not None]
    text = (f"forwarding only (same traffic, no firewall, no service; medians of {rounds} round(s)): "
            f"{med(v['rate_pps'] for v in fwd) / 1e6:.2f} Mpps, ratio "
            f"{med(f['rate_pps'] / r['rate_pps'] for f, r in zip(fwd, ref)):.3f}")
    paired = [(float(f[0]), float(p[1])) for f, p in zip(fwd_cycles, full_cycles) if len(f) == 1 and len(p) == 2]
    if paired:
        text += (f", {med(f for f, _ in paired):.0f} busy cycles/pkt; the stateful stages add "
                 f"{med(p - f for f, p in paired):.0f}")
    if loads:
        text += f"; lcore load {med(loads):.0%}"
    others = max(v["others_cpu"] for v in fwd)
    text += f"; others used up to {others:.0%} CPU" + (" (noisy)" if others > 0.05 else "")
    print(text)

def testpmd_cycles(log_path):
    """testpmd's --record-core-cycles busy cycles over its whole run, per packet it sent (printed when it stops).
    Not its own cycles/packet figure: that divides by the memif port's RX count, which the memif PMD resets when
    the generator disconnects (it then reads 2^64 - n). io mode sends every packet it receives on the null port."""
    text = open(log_path, errors="replace").read()
    cycles = re.findall(r"CPU cycles/packet=\S+ \(total cycles=(\d+)", text)
    sent = re.findall(r"Accumulated forward statistics.*?TX-packets: +(\d+)", text, re.S)
    print(f"{int(cycles[-1]) / int(sent[-1]):.1f}" if cycles and sent and int(sent[-1]) else "")

def totals_check(log_path):
    """sluice logs its totals when it stops: every packet received was sent or dropped. Exit 1 if not."""
    text = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", open(log_path, errors="replace").read())
    rx = tx = 0
    ports = re.findall(r"port '(\w+)': rx (\d+) packets \d+ bytes, tx (\d+) packets", text)
    for _, r, t in ports:
        rx += int(r); tx += int(t)
    drops = {m[0]: int(m[1]) for m in re.findall(r"dropped (\w+): (\d+)", text)}
    if not ports:
        print("sluice totals: not found in its log"); sys.exit(1)
    ok = rx == tx + sum(drops.values())
    print(f"sluice totals at stop: rx {rx} = tx {tx} + drops {sum(drops.values())} {drops or ''}: "
          f"{'ok' if ok else 'MISMATCH'}")
    sys.exit(0 if ok else 1)

# --- pipeline mode: traffic, config, checks ---
VIP, VIP_PORT, BACKEND_PORT, BACKENDS = "198.51.100.10", 53, 8053, 8
CLIENTS = 0x64400000  # 100.64.0.0: client i is 100.64.0.0 + i, UDP source port 1024 + (i * 7919) % 64000

def dotted(a):
    return ".".join(str(a >> s & 255) for s in (24, 16, 8, 0))

def write_pcap(path, flows):
    """FLOWS 64-byte UDP frames, one per client, to VIP:VIP_PORT, in a shuffled order (libpcap format)."""
    import random, struct
    def csum(b):
        s = sum(struct.unpack(f"!{len(b) // 2}H", b))
        s = (s >> 16) + (s & 0xffff)
        return ~(s + (s >> 16)) & 0xffff
    vip = bytes(int(x) for x in VIP.split("."))
    out = [struct.pack("<IHHiIII", 0xa1b2c3d4, 2, 4, 0, 0, 65535, 1)]
    order = list(range(int(flows)))
    random.Random(1).shuffle(order)
    for i in order:
        udp = struct.pack("!HHHH", 1024 + (i * 7919) % 64000, VIP_PORT, 30, 0) + bytes(22)
        ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 50, 0, 0, 64, 17, 0, struct.pack("!I", CLIENTS + i), vip)
        frame = bytes.fromhex("020000000002020000000001" "0800") + ip[:10] + struct.pack("!H", csum(ip)) + ip[12:] + udp
        out.append(struct.pack("<IIII", 0, 0, 64, 64) + frame)
    with open(path, "wb") as f:
        f.write(b"".join(out))

def classbench_rules(count, flows, seed=1):
    """COUNT - 1 ClassBench-like rules (after sluice_bench's generator: prefixes /8-/32, source ports WC 70 HI 10
    EM 10 AR 10, destination ports WC 30 HI 10 LO 10 EM 35 AR 15, TCP 45 UDP 25 ICMP 5 any 25; allow 70, deny 25,
    reject 5) that cannot match the benchmark's traffic, then the allow rule it matches. YAML lines."""
    import random
    rng = random.Random(seed)
    well_known = [22, 25, 53, 80, 123, 161, 389, 443, 993, 3306, 5432, 8080, 8443]
    def ports(dst):
        p = rng.randrange(100)
        wc = 30 if dst else 70
        high, low = wc + 10, wc + 20 if dst else wc + 10
        exact = low + (35 if dst else 10)
        if p < wc: return None
        if p < high: return (1024, 65535)
        if p < low: return (0, 1023)
        if p < exact:
            v = rng.choice(well_known) if dst and rng.randrange(2) else rng.randint(1, 65535)
            return (v, v)
        lo = rng.randint(0, 65000)
        return (lo, min(65535, lo + rng.randint(1, 8192)))
    def prefix():
        n = rng.randint(8, 32)
        return rng.getrandbits(32) & (0xffffffff << (32 - n)) & 0xffffffff, n
    def overlaps(a, n, lo, hi):  # prefix a/n meets [lo, hi]
        first, last = a, a | (0xffffffff >> n)
        return first <= hi and lo <= last
    vip = sum(int(x) << s for x, s in zip(VIP.split("."), (24, 16, 8, 0)))
    lines = []
    while len(lines) < count - 1:
        (src, sl), (dst, dl) = prefix(), prefix()
        proto = rng.choices(["tcp", "udp", "icmp", None], [45, 25, 5, 25])[0]
        sp, dp = (ports(False), ports(True)) if proto in ("tcp", "udp") else (None, None)
        action = rng.choices(["allow", "deny", "reject"], [70, 25, 5])[0]
        if (proto in ("udp", None) and overlaps(src, sl, CLIENTS, CLIENTS + flows - 1) and overlaps(dst, dl, vip, vip)
                and (dp is None or dp[0] <= VIP_PORT <= dp[1]) and (sp is None or sp[0] <= 65023 and sp[1] >= 1024)):
            continue  # could decide the benchmark's flows: the allow at the end must
        r = f"{{name: r{len(lines) + 1:04d}, source: {dotted(src)}/{sl}, destination: {dotted(dst)}/{dl}"
        if proto:
            r += f", protocol: {proto}"
        for key, v in (("source_ports", sp), ("destination_ports", dp)):
            if v:
                r += f", {key}: {v[0]}" if v[0] == v[1] else f', {key}: "{v[0]}-{v[1]}"'
        lines.append(f"    - {r}, action: {action}}}")
    lines.append(f"    - {{name: allow-bench-vip, protocol: udp, destination: {VIP}/32, destination_ports: {VIP_PORT}, "
                 f"action: allow}}")
    return lines

def pipeline_config(path, flows, rules):
    """Appends the firewall, the NAT pool and the nat service to sluice's config."""
    flows, rules = int(flows), int(rules)
    pool = [f"10.255.0.{k + 1}" for k in range(min(16, -(-flows // 40000)))]  # a worker has 64512 ports per address
    text = ["firewall:", "  default: deny", f"  table_size: {4 * flows + 1000}", "  rules:"]
    text += classbench_rules(rules, flows)
    text += ["load_balancer:", f"  nat_pool: [{', '.join(pool)}]", "services:",
             "  - {name: bench, vip: %s, port: %d, protocol: udp, mode: nat, backends: [%s]}" % (VIP, VIP_PORT, ", ".join(
                 f'{{address: 10.1.0.{k + 1}, port: {BACKEND_PORT}, mac: "02:00:00:00:01:{k + 1:02x}"}}'
                 for k in range(BACKENDS)))]
    with open(path, "a") as f:
        f.write("\n".join(text) + "\n")

def pipeline_check(path, flows):
    """What the pipeline did in the window: NATed to backends, sent, dropped (by reason); tracked connections.
    Exit 1 when less than half of the packets received in the window were NATed and sent."""
    v = json.load(open(path))
    st, be = "/sluice/stats", "/sluice/backends"
    d = lambda key: v["last"][st][key] - v["first"][st][key]
    rx, tx = d("rx_packets"), d("tx_packets")
    per_backend = [b - a for a, b in zip(v["first"][be]["packets"], v["last"][be]["packets"])]
    nat = sum(per_backend)
    window = {k[5:]: d(k) for k in v["last"][st] if k.startswith("drop/") and d(k)}
    since_start = {k[5:]: n for k, n in v["last"][st].items() if k.startswith("drop/") and n}
    entries = v["last"][st]["conn_entries"]
    print(f"pipeline: tracked connections {entries} (conn_entries at the window's end; target {int(flows)}), "
          f"{sum(v['last'][be]['active_connections'])} active at the backends, {v['last'][st]['conn_inserts']} "
          f"opened since start")
    print(f"pipeline window: rx {rx}, NATed to a backend {nat} ({nat / rx if rx else 0:.1%}; per backend "
          f"{min(per_backend)}..{max(per_backend)}; sluice refreshes these counters every 250 ms), tx {tx}, "
          f"drops {d('drops')} by reason {window or '{}'}; drops since start {since_start or '{}'}")
    if d("conn_inserts"):
        print(f"pipeline: note: {d('conn_inserts')} connections were opened inside the window (the warm-up did not "
              f"cover the first pass over the flows; a longer WARMUP does)")
    if entries < 0.9 * flows:
        print(f"pipeline: WARNING: {entries} tracked connections, fewer than the {int(flows)} flows sent")
    if not rx or nat < rx / 2 or tx < rx / 2:
        print("pipeline: FAIL: most packets were not NATed and sent (see the drops above)")
        sys.exit(1)

MARK = "<!-- forward.sh appends rows above this line -->"
HEADER = """## Forwarding: memif -> null, 64 B, one data-plane core (`tests/bench/forward.sh`)

Generator: `dpdk-testpmd --forward-mode=txonly --txpkts=64 --txonly-multi-flow`, memif server, its forwarding lcore
on CPU 0. Reference: `dpdk-testpmd --forward-mode=io` as the memif client, forwarding memif -> `net_null0,no-rx=1`,
forwarding lcore on CPU 1. sluice: the same topology (`in` = memif client, `out` = `net_null0,no-rx=1`), one lcore
`[rx, worker]` on CPU 1, forward entries in->out and out->in. Each rate is the receiver's own RX counter read over
telemetry once a second across the measured window (after a warm-up); Mpps = 10^6 packets per second.
The generator and the receiver each busy-poll one of the 2 vCPUs, so anything else running (builds, tests) takes
time from one of them: the "machine" column gives the share of all CPU time that other processes used during the
reference and the sluice windows (from /proc/stat); rows where either is above 5% are marked noisy. Only rows where
both are near 0% compare.

| date (UTC) | machine | command | reference Mpps | sluice Mpps | ratio | busy cycles/pkt: reference / sluice (ratio) |
| --- | --- | --- | ---: | ---: | ---: | ---: |
"""

PIPELINE_MARK = "<!-- forward.sh --pipeline appends rows above this line -->"
PIPELINE_HEADER = """### Full pipeline: 1k rules, 100k tracked connections, a `nat` service (`tests/bench/forward.sh --pipeline`)

| date (UTC) | machine | command | reference Mpps | sluice Mpps | ratio | busy cycles/pkt: reference / sluice (ratio) | sluice's pipeline in the window |
| --- | --- | --- | ---: | ---: | ---: | ---: | --- |
"""

def record(doc, mode, date, machine, command, ref, slu, ratio, cycles, pipeline=""):
    mark, header = (PIPELINE_MARK, PIPELINE_HEADER) if mode == "pipeline" else (MARK, HEADER)
    row = f"| {date} | {machine} | {command} | {ref} | {slu} | {ratio} | {cycles} |" + (f" {pipeline} |" if mode == "pipeline" else "")
    text = open(doc).read() if os.path.exists(doc) else "# Benchmarks\n"
    if mark not in text:
        text = text.rstrip("\n") + "\n\n" + header + mark + "\n"
    text = text.replace(mark, row + "\n" + mark, 1)
    os.makedirs(os.path.dirname(os.path.abspath(doc)), exist_ok=True)
    with open(doc + ".tmp", "w") as f:
        f.write(text)
    os.replace(doc + ".tmp", doc)

if __name__ == "__main__":
    globals()[sys.argv[1]](*[a if not re.fullmatch(r"[0-9.]+", a) or sys.argv[1] in ("field", "record", "pipeline_summary") else float(a)
                            for a in sys.argv[2:]])
PY
bench() { python3 "$WORK/bench.py" "$@"; }

# start_generator NAME SOCKET: testpmd as the memif server, forwarding lcore on CPU 0: txonly, or (pipeline) io
# from the flows' pcap replayed in a loop (every frame is held in an mbuf, hence the pool). Sets GEN_PID.
start_generator() {
    local name=$1 sock=$2 prefix="$ID-$1-gen" source
    PREFIXES+=("$prefix"); SOCKETS+=("$sock")
    rm -f "$sock"
    if [[ $MODE == pipeline ]]; then
        source=(--vdev="net_pcap0,rx_pcap=$WORK/flows.pcap,infinite_rx=1" --vdev="net_memif0,role=server,socket=$sock"
                -- --forward-mode=io --mbuf-size=256 --total-num-mbufs=$((FLOWS + 32768)))
    else
        source=(--vdev="net_memif0,role=server,socket=$sock"
                -- --forward-mode=txonly --txpkts=64 --txonly-multi-flow --port-topology=loop --total-num-mbufs=16384)
    fi
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

log "$MODE mode; sluice binary $SLUICE ($SLUICE_ID); window ${DURATION} s after ${WARMUP} s warm-up; work dir $WORK"

# sluice's config first: a config sluice rejects fails the run before any traffic.
SOCK_SL="/run/$ID-sluice.sock"
PREFIXES+=("$ID-sluice")
cat >"$WORK/sluice.yaml" <<EOF
eal:
  - --lcores=0@0,1@1
  - --file-prefix=$ID-sluice
  - --in-memory
dataplane:
  ring_size: 4096
  idle_sleep_us: 0
ports:
  - name: in
    device: net_memif0,role=client,socket=$SOCK_SL
  - name: out
    device: net_null0,no-rx=1
lcores:
  - id: 1
    roles: [rx, worker]
forward:
  - {from: in, to: out, next_hop_mac: "02:00:00:00:00:02"}
  - {from: out, to: in, next_hop_mac: "02:00:00:00:00:01"}
EOF
if [[ $MODE == pipeline ]]; then
    cp "$WORK/sluice.yaml" "$WORK/sluice-forward.yaml"  # the same traffic forwarded only: what the stages add
    bench pipeline_config "$WORK/sluice.yaml" "$FLOWS" "$RULES"
    bench write_pcap "$WORK/flows.pcap" "$FLOWS"
    log "pipeline: $RULES rules, $FLOWS UDP flows to the nat service 198.51.100.10:53 (8 backends)"
fi
for config in "$WORK"/sluice*.yaml; do
    "$WORK/sluice" --check-config "$config" >"$WORK/check-config.log" 2>&1 \
        || { show_log "$WORK/check-config.log"; die "sluice rejects the benchmark config $(basename "$config")"; }
done

# --- 1. reference: testpmd io -------------------------------------------------------------------------------
# run_reference K: round K's reference; its figures go to $WORK/ref-K.json and $WORK/cycles-K.
run_reference() {
    local k=$1 sock="/run/$ID-ref.sock"
    start_generator "ref-$k" "$sock"
    PREFIXES+=("$ID-ref-rcv-$k")
    "$TESTPMD" --lcores=0@0,1@1 --no-pci --in-memory --file-prefix="$ID-ref-rcv-$k" \
        --vdev="net_memif0,role=client,socket=$sock" --vdev=net_null0,no-rx=1 -- \
        --no-mlockall --forward-mode=io --burst=32 --nb-cores=1 --total-num-mbufs=16384 --stats-period=1 --record-core-cycles \
        </dev/null >"$WORK/ref-rcv-$k.log" 2>&1 &
    RCV_PID=$!
    PIDS+=("$RCV_PID")
    if ! BENCH_PIDS="$GEN_PID $RCV_PID" bench sample "$RUNDIR/$ID-ref-rcv-$k/dpdk_telemetry.v2" "$WARMUP" "$DURATION" \
            /ethdev/stats,0 ipackets >"$WORK/ref-$k.json"; then
        show_log "$WORK/ref-rcv-$k.log"; die "reference: the receiver (testpmd io) did not start or stopped answering"
    fi
    finish_run "ref-$k" "$RCV_PID" INT generator-first
    [[ $RECEIVER_RC == 0 ]] || log "warning: reference: testpmd io exited $(describe_rc "$RECEIVER_RC")"
    bench testpmd_cycles "$WORK/ref-rcv-$k.log" >"$WORK/cycles-$k"
    bench summary "$WORK/ref-$k.json" "round $k: reference (testpmd io)"
    [[ $(bench field "$WORK/ref-$k.json" packets) != 0 ]] || { show_log "$WORK/ref-rcv-$k.log"; die "reference: no packet arrived"; }
}

# --- 2. sluice ------------------------------------------------------------------------------------------------
# run_sluice K [forward]: round K's sluice run: $WORK/sluice-K.json, and $WORK/cycles-K; FAILED=1 when sluice
# misbehaved. With `forward` (pipeline mode): sluice forwarding the same traffic with neither firewall nor service
# ($WORK/sluice-forward.yaml), into $WORK/sluice-forward-K.json and its busy cycles per packet into
# $WORK/cycles-forward-K.
FAILED=0
run_sluice() {
    local k=$1 variant=${2:-}
    local name="sluice${variant:+-$variant}"
    local log="$WORK/$name-$k.log"
    start_generator "$name-$k" "$SOCK_SL"
    "$WORK/sluice" --config "$WORK/$name.yaml" </dev/null >"$log" 2>&1 &
    SL_PID=$!
    PIDS+=("$SL_PID")
    if ! wait_for "$SL_PID" 20 grep -qs "ready:" "$log"; then
        show_log "$log"; die "sluice did not start"
    fi
    # The rate: what sluice received; in pipeline mode what it sent (NATed) on `out`.
    local rate=(/sluice/stats port/in/rx_packets /ethdev/stats,0)
    [[ $MODE == plain ]] || rate=(/sluice/stats port/out/tx_packets /ethdev/stats,0)
    [[ $MODE == plain || -n $variant ]] || rate+=(/sluice/backends)
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
        ref_cycles=$(cat "$WORK/cycles-$k")
        if [[ -n $ref_cycles && -n $sl_cycles ]]; then echo "$ref_cycles $sl_cycles" >"$WORK/cycles-$k"; else : >"$WORK/cycles-$k"; fi
    fi
    bench summary "$WORK/$name-$k.json" "round $k: sluice${variant:+ ($variant only: no firewall, no service)}"
    bench window_check "$WORK/$name-$k.json"
    if [[ $MODE == pipeline && -z $variant ]]; then bench pipeline_check "$WORK/sluice-$k.json" "$FLOWS" || FAILED=1; fi
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
FORWARD_ONLY=""
if [[ $MODE == pipeline ]]; then
    FORWARD_ONLY=$(bench forward_only "$WORK" "$ROUNDS") || die "could not combine the forwarding-only runs' figures"
    echo "$FORWARD_ONLY"
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
    [[ $MODE == plain || ($FLOWS == 100000 && $RULES == 1000) ]] || env+="FLOWS=$FLOWS RULES=$RULES "
    cmd="\`${env}tests/bench/forward.sh$([[ $MODE == plain ]] || echo " --pipeline")\`"
    summary=""
    [[ $MODE == plain ]] || summary="round $ROUNDS: $(bench pipeline_summary "$WORK/sluice-$ROUNDS.json" "$FLOWS" "$RULES"); $FORWARD_ONLY"
    bench record "$BENCH_DOC" "$MODE" "$(date -u '+%Y-%m-%d %H:%M')" "$machine" "$cmd @ $rev, sluice binary $SLUICE_ID" \
        "$REF_M" "$SL_M" "$RATIO_CELL" "$CYCLES" "$summary"
    log "row appended to $BENCH_DOC"
fi

"""The memif benchmarks' shared helpers (tests/bench/forward.sh, peer_ovs.sh): telemetry sampling, the checks of
sluice's counters, the pipeline's traffic, rules and config, and the rows they append to docs/benchmarks.md.
Run as `python3 memif_bench.py FUNCTION ARGS...`."""
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

def combine(work, rounds, ref_name="ref", cycles_name="cycles"):
    """The rounds' medians, tab-separated for the shell: reference Mpps, sluice Mpps, ratio (median of the rounds'
    sluice/reference), the ratio cell, the cycles cell, what other processes used (the worst round's reference /
    sluice window) and 1 when that is over 5 %. Prints the rounds to stderr. ref_name, cycles_name: the reference's
    files, WORK/REF_NAME-K.json and WORK/CYCLES_NAME-K ("reference sluice")."""
    import statistics
    rounds = int(rounds)
    ref = [json.load(open(f"{work}/{ref_name}-{k}.json")) for k in range(1, rounds + 1)]
    slu = [json.load(open(f"{work}/sluice-{k}.json")) for k in range(1, rounds + 1)]
    cyc = [open(f"{work}/{cycles_name}-{k}").read().split() for k in range(1, rounds + 1)]
    ratios = [s["rate_pps"] / r["rate_pps"] for r, s in zip(ref, slu)]
    cycle_pairs = [(float(c[0]), float(c[1])) for c in cyc if len(c) == 2]
    for k in range(rounds):
        c = f"; busy cycles/pkt {cyc[k][0]} / {cyc[k][1]}" if len(cyc[k]) == 2 else ""
        print(f"round {k + 1}: reference ({ref_name}) {ref[k]['rate_pps'] / 1e6:.2f} Mpps, sluice {slu[k]['rate_pps'] / 1e6:.2f} Mpps, "
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

def forward_only(work, rounds, mode="pipeline"):
    """Pipeline and routes modes: sluice forwarding the same traffic by the port's forward entry (no firewall, no
    service, no route lookup), beside the reference and the full pipeline (or the routed run) of the same rounds: the
    medians of its rate, of its ratio to the reference, of its busy cycles per packet and of what the other sluice run
    took more in the same round (the stateful stages: connection tracking, rules, NAT; or the route lookups), with
    its lcore load (under ~95 % its rate was the generator's) and what other processes used."""
    import statistics
    med, rounds = statistics.median, int(rounds)
    ks = range(1, rounds + 1)
    ref = [json.load(open(f"{work}/ref-{k}.json")) for k in ks]
    fwd = [json.load(open(f"{work}/sluice-forward-{k}.json")) for k in ks]
    fwd_cycles = [open(f"{work}/cycles-forward-{k}").read().split() for k in ks]
    full_cycles = [open(f"{work}/cycles-{k}").read().split() for k in ks]
    loads = [x for x in (load(v) for v in fwd) if x is not None]
    what = "no firewall, no service" if mode == "pipeline" else "same sink, by the forward entry"
    added = "the stateful stages add" if mode == "pipeline" else "the route lookups add"
    text = (f"forwarding only (same traffic, {what}; medians of {rounds} round(s)): "
            f"{med(v['rate_pps'] for v in fwd) / 1e6:.2f} Mpps, ratio "
            f"{med(f['rate_pps'] / r['rate_pps'] for f, r in zip(fwd, ref)):.3f}")
    paired = [(float(f[0]), float(p[1])) for f, p in zip(fwd_cycles, full_cycles) if len(f) == 1 and len(p) == 2]
    if paired:
        text += (f", {med(f for f, _ in paired):.0f} busy cycles/pkt; {added} "
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

def write_frames(path, frames):
    """A libpcap file of Ethernet frames (bytes)."""
    import struct
    out = [struct.pack("<IHHiIII", 0xa1b2c3d4, 2, 4, 0, 0, 65535, 1)]
    out += [struct.pack("<IIII", 0, 0, len(f), len(f)) + f for f in frames]
    with open(path, "wb") as f:
        f.write(b"".join(out))

def udp_frame(src, dst, sport, dport):
    """A 64-byte UDP frame from 02:00:00:00:00:01 to 02:00:00:00:00:02; addresses as host-order integers."""
    import struct
    def csum(b):
        s = sum(struct.unpack(f"!{len(b) // 2}H", b))
        s = (s >> 16) + (s & 0xffff)
        return ~(s + (s >> 16)) & 0xffff
    udp = struct.pack("!HHHH", sport, dport, 30, 0) + bytes(22)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 50, 0, 0, 64, 17, 0, struct.pack("!I", src), struct.pack("!I", dst))
    return bytes.fromhex("020000000002020000000001" "0800") + ip[:10] + struct.pack("!H", csum(ip)) + ip[12:] + udp

def write_pcap(path, flows):
    """FLOWS 64-byte UDP frames, one per client, to VIP:VIP_PORT, in a shuffled order (libpcap format)."""
    import random
    vip = sum(int(x) << s for x, s in zip(VIP.split("."), (24, 16, 8, 0)))
    order = list(range(int(flows)))
    random.Random(1).shuffle(order)
    write_frames(path, (udp_frame(CLIENTS + i, vip, 1024 + (i * 7919) % 64000, VIP_PORT) for i in order))

# --- routes mode: a full table in a kernel routing table, and traffic spread over it ---
ROUTES_LINK, ROUTES_SLUICE, ROUTES_KERNEL, ROUTES_HOP = "10.0.0.0/24", "10.0.0.1/24", "10.0.0.254/24", "10.0.0.2"
ROUTES_HOP_MAC = "02:00:00:00:01:01"

def bgp_prefixes(count, seed=1):
    """COUNT distinct random IPv4 prefixes of /8-/24, as in a full BGP table (after sluice_bench's section_routes),
    none in 0/8, 10/8, 127/8 or 224/3 (the next hop's link, loopback, multicast and reserved space)."""
    import random
    rng, seen = random.Random(seed), set()
    while len(seen) < count:
        n = rng.randint(8, 24)
        a = rng.getrandbits(32) & (0xffffffff << (32 - n)) & 0xffffffff
        if a >> 24 in (0, 10, 127) or a >> 29 == 7:
            continue
        seen.add((a, n))
    return sorted(seen)

def routes_files(batch, pcap, count, flows, table):
    """The `ip -batch` file (load_routes reads it) that puts COUNT prefixes into kernel table TABLE via ROUTES_HOP, and FLOWS 64-byte UDP
    frames (one per client) each to a random address inside a random one of them, so that the lookups spread over
    the whole table as a transit router's do. Prints the prefix lengths' spread."""
    import random
    prefixes = bgp_prefixes(int(count))
    with open(batch, "w") as f:
        f.writelines(f"route add {dotted(a)}/{n} table {int(table)} via {ROUTES_HOP}\n" for a, n in prefixes)
    rng = random.Random(2)
    frames = []
    while len(frames) < int(flows):
        a, n = prefixes[rng.randrange(len(prefixes))]
        dst = a | rng.getrandbits(32 - n)
        if dst >> 16 == 0xa9fe:  # 169.254/16 inside a shorter prefix: link-local, dropped as a martian
            continue
        i = len(frames)
        frames.append(udp_frame(CLIENTS + i, dst, 1024 + (i * 7919) % 64000, VIP_PORT))
    write_frames(pcap, frames)
    by_length = {}
    for _, n in prefixes:
        by_length[n] = by_length.get(n, 0) + 1
    print(f"{len(prefixes)} prefixes (/{min(by_length)}-/{max(by_length)}, {by_length.get(24, 0)} of them /24), "
          f"{int(flows)} flows to addresses inside them")

def load_routes(batch, table):
    """Adds the routes of an `ip -batch` file written by routes_files to kernel table TABLE over rtnetlink, many
    RTM_NEWROUTE messages per sendmsg and no acknowledgement asked (the kernel answers only a failure): `ip -batch`
    waits for an answer to each route, which on this shared VM took minutes for 1M. Exit 1 on any failure."""
    import ipaddress, socket, struct
    NEWROUTE, REQUEST, CREATE, EXCL = 24, 0x1, 0x400, 0x200
    RTA_DST, RTA_GATEWAY, RTA_TABLE = 1, 5, 15
    s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
    s.bind((0, 0))
    s.setblocking(False)
    errors, sent, chunk = [], 0, []

    def drain():
        while True:
            try:
                data = s.recv(65536)
            except BlockingIOError:
                return
            except OSError as e:  # ENOBUFS: more failures than the socket holds
                errors.append(e.errno)
                continue
            while data:
                length, kind = struct.unpack_from("=IH", data)
                if kind == 2:  # NLMSG_ERROR
                    code = struct.unpack_from("=i", data, 16)[0]
                    if code:
                        errors.append(-code)
                data = data[(length + 3) & ~3:]

    def flush():
        nonlocal chunk
        if chunk:
            s.setblocking(True)
            s.send(b"".join(chunk))
            s.setblocking(False)
            chunk = []
            drain()

    for line in open(batch):
        words = line.split()  # route add PREFIX table N via GATEWAY
        net = ipaddress.IPv4Network(words[2])
        gateway = ipaddress.IPv4Address(words[words.index("via") + 1])
        attrs = (struct.pack("=HH4s", 8, RTA_DST, net.network_address.packed)
                 + struct.pack("=HH4s", 8, RTA_GATEWAY, gateway.packed) + struct.pack("=HHI", 8, RTA_TABLE, int(table)))
        body = struct.pack("=BBBBBBBBI", socket.AF_INET, net.prefixlen, 0, 0, 0, 3, 0, 1, 0) + attrs  # boot, unicast
        sent += 1
        chunk.append(struct.pack("=IHHII", 16 + len(body), NEWROUTE, REQUEST | CREATE | EXCL, sent, 0) + body)
        if len(chunk) == 1000:
            flush()
    flush()  # the kernel handles a sendmsg's messages before it returns: every answer is in by now
    s.close()
    print(f"{sent} routes sent, {len(errors)} refused" + (f" (first: {os.strerror(errors[0])})" if errors else ""))
    if errors:
        sys.exit(1)

def arp_pcap(path):
    """One ARP reply from the next hop, ROUTES_HOP at ROUTES_HOP_MAC, to sluice's address on the link (broadcast):
    what the next hop would answer to sluice's solicitation; the sink port reads it once and sluice learns the MAC."""
    import struct
    mac = bytes.fromhex(ROUTES_HOP_MAC.replace(":", ""))
    ip = lambda a: bytes(int(x) for x in a.split("/")[0].split("."))
    arp = struct.pack("!HHBBH", 1, 0x0800, 6, 4, 2) + mac + ip(ROUTES_HOP) + b"\xff" * 6 + ip(ROUTES_SLUICE)
    write_frames(path, [b"\xff" * 6 + mac + b"\x08\x06" + arp + bytes(18)])

def routes_check(path):
    """A routed run: what sluice received in the window left through the route's next hop (tx on `out`), and not as
    drops (no_route, neighbour_unresolved). Exit 1 when less than 99 % did."""
    v = json.load(open(path))
    st = "/sluice/stats"
    d = lambda key: v["last"][st][key] - v["first"][st][key]
    rx, tx = d("rx_packets"), d("port/out/tx_packets")
    reasons = {k[5:]: d(k) for k in v["last"][st] if k.startswith("drop/") and d(k)}
    print(f"routes window: rx {rx}, routed and sent {tx} ({tx / rx if rx else 0:.2%}), drops {reasons or '{}'}")
    if not rx or tx < 0.99 * rx:
        print("routes: FAIL: packets were not routed (see the drops above)")
        sys.exit(1)

def classbench_rules(count, flows, seed=1):
    """COUNT - 1 ClassBench-like rules (after sluice_bench's generator: prefixes /8-/32, source ports WC 70 HI 10
    EM 10 AR 10, destination ports WC 30 HI 10 LO 10 EM 35 AR 15, TCP 45 UDP 25 ICMP 5 any 25; allow 70, deny 25,
    reject 5) that cannot match the benchmark's traffic, then the allow rule it matches, first match first. Each a
    dict: name, src and dst ((address, length) or None), proto (None: any), sport and dport ((low, high) or None),
    action."""
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
    rules = []
    while len(rules) < count - 1:
        (src, sl), (dst, dl) = prefix(), prefix()
        proto = rng.choices(["tcp", "udp", "icmp", None], [45, 25, 5, 25])[0]
        sp, dp = (ports(False), ports(True)) if proto in ("tcp", "udp") else (None, None)
        action = rng.choices(["allow", "deny", "reject"], [70, 25, 5])[0]
        if (proto in ("udp", None) and overlaps(src, sl, CLIENTS, CLIENTS + flows - 1) and overlaps(dst, dl, vip, vip)
                and (dp is None or dp[0] <= VIP_PORT <= dp[1]) and (sp is None or sp[0] <= 65023 and sp[1] >= 1024)):
            continue  # could decide the benchmark's flows: the allow at the end must
        rules.append({"name": f"r{len(rules) + 1:04d}", "src": (src, sl), "dst": (dst, dl), "proto": proto,
                      "sport": sp, "dport": dp, "action": action})
    rules.append({"name": "allow-bench-vip", "src": None, "dst": (vip, 32), "proto": "udp", "sport": None,
                  "dport": (VIP_PORT, VIP_PORT), "action": "allow"})
    return rules

def rule_yaml(rule):
    """One rule of classbench_rules as a line of sluice's firewall.rules."""
    r = f"{{name: {rule['name']}"
    for key, v in (("source", rule["src"]), ("destination", rule["dst"])):
        if v:
            r += f", {key}: {dotted(v[0])}/{v[1]}"
    if rule["proto"]:
        r += f", protocol: {rule['proto']}"
    for key, v in (("source_ports", rule["sport"]), ("destination_ports", rule["dport"])):
        if v:
            r += f", {key}: {v[0]}" if v[0] == v[1] else f', {key}: "{v[0]}-{v[1]}"'
    return f"    - {r}, action: {rule['action']}}}"

def nat_pool(flows):
    """The NAT pool's addresses: a worker has 64512 ports per address and backend."""
    return [f"10.255.0.{k + 1}" for k in range(min(16, -(-int(flows) // 40000)))]

def pipeline_config(path, flows, rules, parts="firewall,lb"):
    """Appends the pipeline's parts to sluice's config: `firewall` (RULES rules, default deny, a table for FLOWS
    NAT connections), `lb` (the NAT pool and the nat service; without the firewall sluice tracks only the VIP's
    connections, in a table of the default size)."""
    flows, rules, parts = int(flows), int(rules), parts.split(",")
    text = []
    if "firewall" in parts:
        text += ["firewall:", "  default: deny", f"  table_size: {4 * flows + 1000}", "  rules:"]
        text += [rule_yaml(r) for r in classbench_rules(rules, flows)]
    if "lb" in parts:
        text += ["load_balancer:", f"  nat_pool: [{', '.join(nat_pool(flows))}]", "services:",
                 "  - {name: bench, vip: %s, port: %d, protocol: udp, mode: nat, backends: [%s]}" % (
                     VIP, VIP_PORT, ", ".join(f'{{address: {backend_address(k)}, port: {BACKEND_PORT}, '
                                              f'mac: "{backend_mac(k)}"}}' for k in range(BACKENDS)))]
    with open(path, "a") as f:
        f.write("\n".join(text) + "\n")

def backend_address(k):
    return f"10.1.0.{k + 1}"

def backend_mac(k):
    return f"02:00:00:00:01:{k + 1:02x}"

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

ROUTES_MARK = "<!-- forward.sh --routes appends rows above this line -->"
ROUTES_HEADER = """### Forwarding with a full route table (`tests/bench/forward.sh --routes`)

sluice routing by a mirrored kernel table of 1M random IPv4 prefixes (/8-/24) against testpmd io, on 100k flows to
addresses spread over the table, all three runs of a round into the same sink (net_pcap, TX to /dev/null); the last
column has sluice forwarding the same traffic by the port's forward entry in the same rounds.

| date (UTC) | machine | command | reference Mpps | sluice Mpps | ratio | busy cycles/pkt: reference / sluice (ratio) | table; sluice by the forward entry |
| --- | --- | --- | ---: | ---: | ---: | ---: | --- |
"""

SWAP_MARK = "<!-- forward.sh appends 5tswap rows above this line -->"
SWAP_HEADER = """### Forwarding against testpmd 5tswap (`tests/bench/forward.sh`)

The same runs' sluice against `dpdk-testpmd --forward-mode=5tswap` in the same set-up and the same rounds: it swaps
each packet's MACs, IP addresses and L4 ports, so it reads and writes L2-L4 as sluice's forwarding does (testpmd io
touches no packet byte).

| date (UTC) | machine | command | 5tswap Mpps | sluice Mpps | ratio | busy cycles/pkt: 5tswap / sluice (ratio) |
| --- | --- | --- | ---: | ---: | ---: | ---: |
"""

def record(doc, mode, date, machine, command, ref, slu, ratio, cycles, pipeline=""):
    mark, header = {"pipeline": (PIPELINE_MARK, PIPELINE_HEADER), "5tswap": (SWAP_MARK, SWAP_HEADER),
                    "routes": (ROUTES_MARK, ROUTES_HEADER)}.get(mode, (MARK, HEADER))
    row = (f"| {date} | {machine} | {command} | {ref} | {slu} | {ratio} | {cycles} |"
           + (f" {pipeline} |" if mode in ("pipeline", "routes") else ""))
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

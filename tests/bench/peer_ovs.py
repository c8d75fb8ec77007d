"""tests/bench/peer_ovs.sh's helpers: OVS-DPDK's OpenFlow tables for the four jobs, its figures from
`ovs-appctl dpif-netdev/pmd-stats-show`, and the rounds' report and rows. The traffic, the rules and sluice's configs
come from memif_bench.py, so both sides get the same ones. Run as `python3 peer_ovs.py FUNCTION ARGS...`."""
import json, os, re, statistics, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import memif_bench as mb

JOBS = ("plain", "firewall", "lb", "pipeline")
JOB_TEXT = {
    "plain": "plain forwarding (TTL, MACs)",
    "firewall": "firewall: conntrack + rules, default deny",
    "lb": "load balancer: DNAT to 8 backends + SNAT to the pool",
    "pipeline": "full pipeline: firewall + load balancer",
}
IN_PORT, OUT_PORT = 1, 2
OUT_MAC = "02:00:00:00:00:fe"
NEXT_HOP = "02:00:00:00:00:02"  # sluice's forward entry in -> out
MARK_NAT, MARK_FORWARD = 1, 2  # ct_mark of an allowed connection in zone 1: balanced, or forwarded as it is


def port_masks(low, high):
    """The fewest value/mask pairs covering the port range [low, high] (OpenFlow matches ports by mask only)."""
    out = []
    while low <= high:
        size = low & -low if low else 1 << 16
        while size > high - low + 1:
            size >>= 1
        out.append((low, 0xffff & ~(size - 1)))
        low += size
    return out


def rule_flows(rule, priority, allow):
    """One classbench_rules rule as OpenFlow matches in table 1, a flow per port-mask pair."""
    base = f"table=1,priority={priority},{rule['proto'] or 'ip'}"
    for key, v in (("nw_src", rule["src"]), ("nw_dst", rule["dst"])):
        if v:
            base += f",{key}={mb.dotted(v[0])}/{v[1]}"
    action = allow if rule["action"] == "allow" else "drop"
    sports = port_masks(*rule["sport"]) if rule["sport"] else [None]
    dports = port_masks(*rule["dport"]) if rule["dport"] else [None]
    for sp in sports:
        for dp in dports:
            match = base
            for key, v in (("tp_src", sp), ("tp_dst", dp)):
                if v:
                    match += f",{key}={v[0]:#x}/{v[1]:#x}" if v[1] != 0xffff else f",{key}={v[0]}"
            yield f"{match},actions={action}"


def forward(mac):
    """What sluice's forward stage does to a packet: TTL, checksum, both MACs, out."""
    return f"dec_ttl,mod_dl_src:{OUT_MAC},mod_dl_dst:{mac},output:{OUT_PORT}"


def write_flows(work, job, flows, rules):
    """Writes WORK/ovs-JOB.flows and WORK/ovs-JOB.groups: OVS doing the job sluice's config of the same name does.
    Conntrack zone 1 tracks (and DNATs) the client's connection, zone 2 SNATs it to the pool. One-way UDP stays
    +new in OVS's userspace conntrack, so an allowed connection is committed with a ct_mark and its later packets are
    forwarded on the mark. ct(commit,nat) in a select group's bucket needs table=N (else OVS drops the packet)."""
    flows, rules = int(flows), int(rules)
    vip = f"udp,nw_dst={mb.VIP},tp_dst={mb.VIP_PORT}"
    pool = mb.nat_pool(flows)
    out, groups = [], []
    if job == "plain":
        out.append(f"table=0,priority=10,in_port={IN_PORT},ip,actions={forward(NEXT_HOP)}")
    else:
        nat = ",nat" if job in ("lb", "pipeline") else ""
        out.append(f"table=0,priority=10,in_port={IN_PORT},ip,actions=ct(zone=1{nat},table=1)")
        out.append(f"table=1,priority=60000,ip,ct_mark={MARK_FORWARD},actions={forward(NEXT_HOP)}")
        commit_forward = f"ct(commit,zone=1,exec(set_field:{MARK_FORWARD}->ct_mark)),{forward(NEXT_HOP)}"
        if job in ("lb", "pipeline"):
            out.append(f"table=1,priority=60000,ip,ct_mark={MARK_NAT},actions=ct(zone=2,nat,table=4)")
            groups.append("group_id=1,type=select," + ",".join(
                f"bucket=actions=ct(commit,zone=1,nat(dst={mb.backend_address(k)}:{mb.BACKEND_PORT}),"
                f"exec(set_field:{MARK_NAT}->ct_mark),table=3)" for k in range(mb.BACKENDS)))
            out.append(f"table=3,priority=10,ip,actions=ct(commit,zone=2,nat(src={pool[0]}-{pool[-1]}:1024-65535),"
                       "table=4)")
            out += [f"table=4,priority=10,ip,nw_dst={mb.backend_address(k)},actions={forward(mb.backend_mac(k))}"
                    for k in range(mb.BACKENDS)]
            out.append("table=4,priority=0,actions=drop")
        if job in ("firewall", "pipeline"):
            ruleset = mb.classbench_rules(rules, flows)
            for i, r in enumerate(ruleset):
                out += rule_flows(r, 50000 - i, "resubmit(,2)")
            out.append("table=2,priority=10," + (f"{vip},actions=group:1" if job == "pipeline" else
                                                 f"ip,actions={commit_forward}"))
            if job == "pipeline":
                out.append(f"table=2,priority=0,ip,actions={commit_forward}")
        else:
            out.append(f"table=1,priority=10,{vip},actions=group:1")
        out.append("table=1,priority=0,actions=drop")
    out.append("table=0,priority=0,actions=drop")
    with open(f"{work}/ovs-{job}.flows", "w") as f:
        f.write("\n".join(out) + "\n")
    with open(f"{work}/ovs-{job}.groups", "w") as f:
        f.write("\n".join(groups) + ("\n" if groups else ""))
    print(len(out))


def pmd_stats(appctl):
    """The PMD thread's counters from dpif-netdev/pmd-stats-show (the first PMD: there is one)."""
    text = subprocess.run(appctl + ["dpif-netdev/pmd-stats-show"], check=True, capture_output=True,
                          text=True).stdout
    pmd = text.split("main thread:")[0]
    get = lambda key: int(re.search(rf"{key}: (\d+)", pmd).group(1)) if re.search(rf"{key}: (\d+)", pmd) else 0
    return {k.replace(" ", "_"): get(k) for k in ("packets received", "packet recirculations", "emc hits",
                                                  "smc hits", "megaflow hits", "miss with success upcall",
                                                  "miss with failed upcall", "idle cycles", "processing cycles")}


def port_packets(ofctl):
    """rx packets of port `in`, tx packets of port `out` (ovs-ofctl dump-ports: live, not the 5 s database)."""
    text = subprocess.run(ofctl + ["dump-ports", "br0"], check=True, capture_output=True, text=True).stdout
    rx = int(re.search(rf"port +{IN_PORT}: rx pkts=(\d+)", text).group(1))
    tx = int(re.search(rf"port +{OUT_PORT}: rx pkts=\d+.*?\n\s+tx pkts=(\d+)", text).group(1))
    return rx, tx


def ovs_window(out_path, duration, pids, appctl, ofctl):
    """One measured window of OVS: the PMD's counters cleared, DURATION s, read again. JSON to OUT_PATH. appctl and
    ofctl are command lines (space-separated) reaching this OVS's ovs-vswitchd."""
    appctl, ofctl, duration = appctl.split(), ofctl.split(), float(duration)
    pids = [int(p) for p in pids.split()]
    subprocess.run(appctl + ["dpif-netdev/pmd-stats-clear"], check=True, capture_output=True)
    rx0, tx0 = port_packets(ofctl)
    cpu0, t0 = mb.cpu_times(pids), time.monotonic()
    time.sleep(duration)
    stats, t1 = pmd_stats(appctl), time.monotonic()
    rx1, tx1 = port_packets(ofctl)
    busy, total, ours = (b - a for a, b in zip(cpu0, mb.cpu_times(pids)))
    received = stats["packets_received"]
    json.dump({"window_s": t1 - t0, "packets": received, "rx_pps": received / (t1 - t0),
               "rate_pps": (tx1 - tx0) / (t1 - t0), "port_rx": rx1 - rx0, "port_tx": tx1 - tx0,
               "cycles_per_packet": stats["processing_cycles"] / received if received else 0.0,
               "load": stats["processing_cycles"] / max(1, stats["processing_cycles"] + stats["idle_cycles"]),
               "others_cpu": max(0.0, (busy - ours) / total) if total else 0.0, "pmd": stats},
              open(out_path, "w"))


def ovs_summary(path, label):
    """One line about an OVS window; exit 1 when OVS forwarded less than half of what it received."""
    v = json.load(open(path))
    p = v["pmd"]
    passes = v["packets"] + p["packet_recirculations"]  # a recirculated packet is looked up again
    hits = {k: p[k] / passes if passes else 0 for k in ("emc_hits", "smc_hits", "megaflow_hits")}
    print(f"{label}: received {v['rx_pps'] / 1e6:.3f} Mpps, sent {v['rate_pps'] / 1e6:.3f} Mpps; "
          f"{v['cycles_per_packet']:.0f} processing cycles/pkt (PMD load {v['load']:.0%}); recirculations "
          f"{p['packet_recirculations'] / v['packets'] if v['packets'] else 0:.2f}/pkt; EMC {hits['emc_hits']:.0%}, "
          f"SMC {hits['smc_hits']:.0%}, megaflow {hits['megaflow_hits']:.0%} of lookups, upcalls "
          f"{p['miss_with_success_upcall']} (+{p['miss_with_failed_upcall']} failed); others used "
          f"{v['others_cpu']:.0%} CPU")
    if not v["packets"] or v["port_tx"] < v["port_rx"] / 2:
        print(f"{label}: FAIL: OVS sent {v['port_tx']} of the {v['port_rx']} packets it received")
        sys.exit(1)


def sluice_check(path, label):
    """Exit 1 when sluice sent less than half of what it received in the window."""
    v = json.load(open(path))
    d = lambda key: v["last"]["/sluice/stats"][key] - v["first"]["/sluice/stats"][key]
    if not d("rx_packets") or d("tx_packets") < d("rx_packets") / 2:
        print(f"{label}: FAIL: sluice sent {d('tx_packets')} of the {d('rx_packets')} packets it received")
        sys.exit(1)


def sluice_figures(v):
    d = lambda key: v["last"]["/sluice/stats"][key] - v["first"]["/sluice/stats"][key]
    return {"rate_pps": v["rate_pps"], "cycles_per_packet": d("busy_cycles") / d("rx_packets") if d("rx_packets")
            else 0.0, "others_cpu": v["others_cpu"]}


def combine(work, rounds, jobs):
    """The rounds' figures per job, tab-separated lines for the shell: job, OVS EMC cycles, OVS SMC cycles, sluice
    cycles, OVS(EMC)/sluice cycles cell, OVS(SMC)/sluice cell, rates cell, worst others_cpu. Medians over the
    rounds; each ratio is taken within its round first. Prints the rounds to stderr."""
    med = statistics.median
    for job in jobs.split():
        emc, smc, slu = [], [], []
        for k in range(1, int(rounds) + 1):
            emc.append(json.load(open(f"{work}/ovs-{job}-{k}-emc.json")))
            smc.append(json.load(open(f"{work}/ovs-{job}-{k}-smc.json")))
            slu.append(sluice_figures(json.load(open(f"{work}/sluice-{job}-{k}.json"))))
        for k, (e, s, sl) in enumerate(zip(emc, smc, slu), 1):
            print(f"{job} round {k}: busy cycles/pkt OVS EMC {e['cycles_per_packet']:.0f}, OVS SMC "
                  f"{s['cycles_per_packet']:.0f}, sluice {sl['cycles_per_packet']:.0f}; OVS/sluice "
                  f"{e['cycles_per_packet'] / sl['cycles_per_packet']:.2f} / "
                  f"{s['cycles_per_packet'] / sl['cycles_per_packet']:.2f}", file=sys.stderr)

        def cell(ovs):
            ratios = [o["cycles_per_packet"] / s["cycles_per_packet"] for o, s in zip(ovs, slu)]
            return f"{med(ratios):.2f}" + (f" ({', '.join(f'{x:.2f}' for x in ratios)})" if len(ratios) > 1 else "")

        others = max(x["others_cpu"] for x in emc + smc + slu)
        print("\t".join([job, f"{med(x['cycles_per_packet'] for x in emc):.0f}",
                         f"{med(x['cycles_per_packet'] for x in smc):.0f}",
                         f"{med(x['cycles_per_packet'] for x in slu):.0f}", cell(emc), cell(smc),
                         f"{med(x['rate_pps'] for x in emc) / 1e6:.2f} / {med(x['rate_pps'] for x in smc) / 1e6:.2f}"
                         f" / {med(x['rate_pps'] for x in slu) / 1e6:.2f}", f"{others:.0%}"]))


TARGETS = {"pipeline": 10.0, "plain": 1.3}  # the targets: sluice at least this many times OVS-DPDK's speed


def targets(combined_path):
    """The issue's targets against the lower of the EMC and SMC ratios (OVS at its better setting)."""
    for line in open(combined_path).read().splitlines():
        job, *_, emc_cell, smc_cell, _rates, _others = line.split("\t")
        if job in TARGETS:
            ratio = min(float(emc_cell.split()[0]), float(smc_cell.split()[0]))
            print(f"target: sluice >= {TARGETS[job]}x OVS-DPDK's speed on {job}: {ratio:.2f}x, "
                  + ("met" if ratio >= TARGETS[job] else "NOT met"))


MARK = "<!-- peer_ovs.sh appends rows above this line -->"
HEADER = """### OVS-DPDK side by side (`tests/bench/peer_ovs.sh`)

| date (UTC) | machine | command | job | busy cycles/pkt: OVS EMC / OVS SMC / sluice | OVS/sluice, EMC (rounds) \
| OVS/sluice, SMC (rounds) | Mpps sent: OVS EMC / SMC / sluice |
| --- | --- | --- | --- | ---: | ---: | ---: | ---: |
"""


def record(doc, combined_path, date, machine, command):
    rows = []
    for line in open(combined_path).read().splitlines():
        job, emc, smc, slu, emc_cell, smc_cell, rates, others = line.split("\t")
        noisy = ": **noisy**" if float(others.rstrip("%")) > 5 else ""
        rows.append(f"| {date} | {machine}; others used {others} CPU{noisy} | {command} | {JOB_TEXT[job]} | "
                    f"{emc} / {smc} / {slu} | {emc_cell} | {smc_cell} | {rates} |")
    text = open(doc).read() if os.path.exists(doc) else "# Benchmarks\n"
    if MARK not in text:
        text = text.rstrip("\n") + "\n\n" + HEADER + MARK + "\n"
    text = text.replace(MARK, "\n".join(rows) + "\n" + MARK, 1)
    with open(doc + ".tmp", "w") as f:
        f.write(text)
    os.replace(doc + ".tmp", doc)


if __name__ == "__main__":
    globals()[sys.argv[1]](*sys.argv[2:])

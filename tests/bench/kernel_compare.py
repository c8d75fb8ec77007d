"""kernel_compare.sh's measuring side: counters along the lab's path before and after each iperf3 run, the CPU
over the run's middle, and the report over all rounds.

  kernel_compare.py counters NS GATEWAY TELEMETRY_SOCKET > BASE.before.json (and BASE.after.json)
      Every counter (below). GATEWAY is sluice or kernel: sluice's own counts come from its telemetry.
  kernel_compare.py cpu NS LEAD SECONDS > BASE.cpu.json
      Steal and the CPU other processes used, over SECONDS s after LEAD s.
  kernel_compare.py report RESULTS_DIR
      From the files rROUND-GATEWAY-KIND.{before,after,cpu,client}.json: the table (median of rounds, each round in
      brackets) and, on its last line, the docs/benchmarks.md row. Rates are packets over the client's duration.

Counters, in the packets' order (namespaces NS-*): the client's client0 (sent), the gateway (sluice: its ports'
packets, its drops and the AF_XDP sockets' drops; the kernel: gw-client / gw-server), the server LAN's bridge ports,
backend1's eth0 and its UDP and TCP MIB (/proc/net/snmp: datagrams delivered to sockets, socket buffer drops). CPU: /proc/stat (steal;
the time of tasks outside the lab's namespaces, other than the softirq threads, is "others")."""
import json, os, re, statistics, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from memif_bench import query, telemetry_connect  # noqa: E402  (the benchmarks' one telemetry client)


def link_stats(ns, dev):
    out = subprocess.run(["ip", "-n", ns, "-s", "-j", "link", "show", "dev", dev], capture_output=True, text=True,
                         check=True).stdout
    s = json.loads(out)[0]["stats64"]
    return {"rx": s["rx"]["packets"], "rx_dropped": s["rx"]["dropped"], "tx": s["tx"]["packets"],
            "tx_dropped": s["tx"]["dropped"]}


def snmp(ns):
    out = subprocess.run(["ip", "netns", "exec", ns, "cat", "/proc/net/snmp"], capture_output=True, text=True,
                         check=True).stdout
    lines = [l.split() for l in out.splitlines()]
    table = {}
    for head, values in zip(lines[0::2], lines[1::2]):  # a line of names, then a line of values, per protocol
        table.update({f"{head[0][:-1]}.{k}": int(v) for k, v in zip(head[1:], values[1:])})
    return table


def lab_pids(ns):
    pids = set()
    for name in os.listdir("/run/netns"):
        if name.startswith(ns + "-"):
            out = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True).stdout
            pids.update(int(p) for p in out.split())
    for entry in os.listdir("/proc"):  # the softirq threads: the lab's packets are most of their work
        if entry.isdigit():
            try:
                if open(f"/proc/{entry}/comm").read().startswith("ksoftirqd/"):
                    pids.add(int(entry))
            except OSError:
                pass
    return pids


def task_jiffies(pids):
    out = {}
    for pid in pids:
        try:
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
            out[pid] = int(fields[11]) + int(fields[12])  # utime, stime of the whole thread group
        except (OSError, IndexError):
            pass
    return out


def cpu_line():
    """Task time apart: the lab's veths make most of the softirq time, so memif_bench.cpu_times' busy would not do."""
    v = [int(x) for x in open("/proc/stat").readline().split()[1:9]]  # user nice system idle iowait irq softirq steal
    return {"tasks": v[0] + v[1] + v[2], "steal": v[7], "total": sum(v)}


def counters(ns, gateway, tel_path):
    """Every counter along the path, read while no test traffic flows (so the order of the reads does not matter)."""
    r = {"gateway": gateway}
    for dev, where in (("client0", "client"), ("gw-client", "gw"), ("gw-server", "gw"), ("uplink", "server"),
                       ("be1", "server"), ("eth0", "backend1")):
        r[dev] = link_stats(f"{ns}-{where}", dev)
    r["snmp"] = snmp(f"{ns}-backend1")
    if gateway == "sluice":
        sock, size = telemetry_connect(tel_path, 5)
        r["sluice"] = {k: v for k, v in query(sock, size, "/sluice/stats").items() if isinstance(v, int)}
        sock.close()
    json.dump(r, sys.stdout)


def cpu(ns, lead, seconds):
    """Steal and the CPU time of tasks outside the lab, over SECONDS s after LEAD s (inside the iperf3 run)."""
    time.sleep(float(lead))
    a = (cpu_line(), task_jiffies(lab_pids(ns) | {os.getpid()}))
    time.sleep(float(seconds))
    b = (cpu_line(), task_jiffies(lab_pids(ns) | {os.getpid()}))
    total = b[0]["total"] - a[0]["total"]
    ours = sum(b[1][p] - a[1][p] for p in b[1] if p in a[1])
    json.dump({"steal": (b[0]["steal"] - a[0]["steal"]) / total if total else 0.0,
               "others": max(0, b[0]["tasks"] - a[0]["tasks"] - ours) / total if total else 0.0}, sys.stdout)


def run_delta(base):
    """One run's counters (after - before), its CPU window and the client's duration, from its files."""
    a, b = json.load(open(f"{base}.before.json")), json.load(open(f"{base}.after.json"))
    d = {"gateway": a["gateway"]}
    for k in a:
        if isinstance(a[k], dict):
            d[k] = {n: b[k][n] - a[k].get(n, 0) for n in b[k]}
    d.update(json.load(open(f"{base}.cpu.json")))
    d["client"] = json.load(open(f"{base}.client.json"))
    d["seconds"] = d["client"]["end"]["sum"]["seconds"] if "sum" in d["client"]["end"] else \
        d["client"]["end"]["sum_sent"]["seconds"]
    return d


def udp_figures(w):
    """pps sent, at the gateway's egress, delivered to the server's socket; the loss of each stage (share of sent)."""
    s = w["seconds"]
    sent = w["client0"]["tx"]
    if w["gateway"] == "sluice":
        sl = w["sluice"]
        gw_in, gw_out = sl["port/client/rx_packets"], sl["port/server/tx_packets"]
        ring = sl.get("port/client/xdp_rx_ring_full", 0)
        fill = sl.get("port/client/xdp_rx_dropped", 0)
        gw_drops = sl["drops"] + sl.get("port/server/hw_tx_errors", 0)
    else:
        gw_in, gw_out = w["gw-client"]["rx"], w["gw-server"]["tx"]
        ring = fill = 0
        gw_drops = w["gw-server"]["tx_dropped"]
    delivered = w["snmp"]["Udp.InDatagrams"]
    socket_drops = w["snmp"]["Udp.RcvbufErrors"]
    # A frame AF_XDP refuses counts as the veth's XDP drop too: the veth's own are what is left.
    veth_in = max(0, w["client0"]["tx_dropped"] + w["gw-client"]["rx_dropped"] - ring - fill)
    return {"sent_pps": sent / s, "egress_pps": gw_out / s, "received_pps": delivered / s,
            # client -> gateway: what the gateway never took in (AF_XDP's rings for sluice, the veth for both)
            "loss_in": max(0, sent - gw_in) / sent if sent else 0.0, "ring_full": ring / sent if sent else 0.0,
            "fill_empty": fill / sent if sent else 0.0, "veth_in": veth_in / sent if sent else 0.0,
            "loss_gw": max(0, gw_in - gw_out) / sent if sent else 0.0, "gw_drops": gw_drops,
            # gateway -> server: the bridge, the server's veth and its socket buffer
            "loss_out": max(0, gw_out - delivered) / sent if sent else 0.0,
            "socket": socket_drops / sent if sent else 0.0,
            "steal": w["steal"], "others": w["others"]}


def tcp_figures(w):
    end = w["client"]["end"]
    sent = w["client0"]["tx"]
    gw_in = w["sluice"]["port/client/rx_packets"] if w["gateway"] == "sluice" else w["gw-client"]["rx"]
    return {"gbps": end["sum_received"]["bits_per_second"] / 1e9, "retransmits": end["sum_sent"].get("retransmits", 0),
            "loss_in": max(0, sent - gw_in) / sent if sent else 0.0, "steal": w["steal"], "others": w["others"]}


def med(values):
    return statistics.median(values) if values else float("nan")


def report(results):
    rounds = sorted({int(m.group(1)) for f in os.listdir(results) if (m := re.match(r"r(\d+)-", f))})
    runs = {}
    for r in rounds:
        for gw in ("kernel", "sluice"):
            runs[(r, gw)] = {"udp": udp_figures(run_delta(f"{results}/r{r}-{gw}-udp")),
                             "tcp": tcp_figures(run_delta(f"{results}/r{r}-{gw}-tcp"))}

    def per(gw, kind, key):
        return [runs[(r, gw)][kind][key] for r in rounds]

    def ratios(kind, key):
        return [runs[(r, "sluice")][kind][key] / runs[(r, "kernel")][kind][key] for r in rounds]

    def cell(values, fmt):
        return f"{fmt(med(values))} [{', '.join(fmt(v) for v in values)}]"

    kpps = lambda v: f"{v / 1000:.1f}k"
    pct = lambda v: f"{100 * v:.1f} %"
    pct2 = lambda v: f"{100 * v:.2f} %"
    ratio = lambda v: f"{v:.2f}"
    gbit = lambda v: f"{v:.2f}"
    lines = [("UDP-64 sent by the client, pps", "udp", "sent_pps", kpps),
             ("UDP-64 at the gateway's egress, pps", "udp", "egress_pps", kpps),
             ("UDP-64 delivered to the server, pps", "udp", "received_pps", kpps),
             ("  lost client -> gateway", "udp", "loss_in", pct2),
             ("    of it AF_XDP RX ring full", "udp", "ring_full", pct2),
             ("    of it AF_XDP fill ring empty / other", "udp", "fill_empty", pct2),
             ("    of it dropped by the veth otherwise", "udp", "veth_in", pct2),
             ("  lost in the gateway", "udp", "loss_gw", pct2),
             ("  lost gateway -> server socket", "udp", "loss_out", pct2),
             ("    of it the socket's buffer full", "udp", "socket", pct2),
             ("  steal during the UDP windows", "udp", "steal", pct),
             ("  others' CPU during the UDP windows", "udp", "others", pct),
             ("TCP one stream, Gbit/s received", "tcp", "gbps", gbit),
             ("  retransmitted segments", "tcp", "retransmits", lambda v: f"{v:.0f}"),
             ("  segments lost client -> gateway", "tcp", "loss_in", pct2),
             ("  steal during the TCP windows", "tcp", "steal", pct),
             ("  others' CPU during the TCP windows", "tcp", "others", pct)]
    print(f"{'median [round 1, 2, ...]':<42} {'kernel':<40} {'sluice':<40}")
    for label, kind, key, fmt in lines:
        print(f"{label:<42} {cell(per('kernel', kind, key), fmt):<40} {cell(per('sluice', kind, key), fmt):<40}")
    udp_r, tcp_r, egress_r = ratios("udp", "received_pps"), ratios("tcp", "gbps"), ratios("udp", "egress_pps")
    print(f"{'sluice / kernel, UDP-64 delivered pps':<42} {cell(udp_r, ratio)}")
    print(f"{'sluice / kernel, UDP-64 gateway egress pps':<42} {cell(egress_r, ratio)}")
    print(f"{'sluice / kernel, TCP Gbit/s':<42} {cell(tcp_r, ratio)}")

    def loss_cell(gw):
        f = lambda key: pct2(med(per(gw, "udp", key)))
        extra = f" (RX ring full {f('ring_full')}, fill ring {f('fill_empty')})" if gw == "sluice" else ""
        return f"in {f('loss_in')}{extra} / gateway {f('loss_gw')} / out {f('loss_out')} (socket {f('socket')})"

    steal = max(per("kernel", "udp", "steal") + per("sluice", "udp", "steal") + per("kernel", "tcp", "steal") +
                per("sluice", "tcp", "steal"))
    others = per("kernel", "udp", "others") + per("sluice", "udp", "others") + per("kernel", "tcp", "others") + \
        per("sluice", "tcp", "others")
    noise = f"steal ≤ {pct(steal)}, others used {pct(min(others))}-{pct(max(others))} CPU"
    row = (f"| {{date}} | {{machine}}; {noise} | {kpps(med(per('kernel', 'udp', 'received_pps')))} / "
           f"{kpps(med(per('sluice', 'udp', 'received_pps')))} / {cell(udp_r, ratio)} | "
           f"{kpps(med(per('kernel', 'udp', 'sent_pps')))}, {kpps(med(per('kernel', 'udp', 'egress_pps')))} / "
           f"{kpps(med(per('sluice', 'udp', 'sent_pps')))}, {kpps(med(per('sluice', 'udp', 'egress_pps')))} / "
           f"egress {cell(egress_r, ratio)} | "
           f"kernel: {loss_cell('kernel')}; sluice: {loss_cell('sluice')} | "
           f"{gbit(med(per('kernel', 'tcp', 'gbps')))} / {gbit(med(per('sluice', 'tcp', 'gbps')))} / "
           f"{cell(tcp_r, ratio)} |")
    print(row)


if __name__ == "__main__":
    if sys.argv[1] == "counters":
        counters(*sys.argv[2:5])
    elif sys.argv[1] == "cpu":
        cpu(*sys.argv[2:5])
    elif sys.argv[1] == "report":
        report(sys.argv[2])
    else:
        sys.exit(f"usage: {sys.argv[0]} counters NS GATEWAY SOCKET | cpu NS LEAD SECONDS | report DIR")

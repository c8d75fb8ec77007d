#!/usr/bin/python3
"""Soak: sluice under steady mixed traffic with a reload every few seconds, sampled for growth.

    tests/bench/soak.sh [SECONDS]        (as root; default 1800; tests/run.sh runs 120)

One sluice with a stateful firewall and a UDP nat service forwards a pcap of 6,000 flows (net_pcap keeps the replayed file in mbufs of the pool: it must fit) (UDP and TCP through the
firewall, UDP to the service's VIP) replayed without end (net_pcap infinite_rx) to net_null; every RELOAD_EVERY
seconds the config is rewritten with another set of decoy rules and backend weights (rte_acl and Maglev rebuilt).
Every SAMPLE_EVERY seconds: RSS, mbufs out of the pool, tracked connections, packets. After a warm-up (the first
fifth of the run) these must be flat: RSS within 8 MiB of its warm-up peak, mbufs in use never above their
warm-up peak by more than a burst's worth per ring, connections exactly the flows' count; no reload refused,
no drop but the expected ones, every mbuf back at the end. Prints the samples and one verdict line; exit 0 when
flat. The figures go to docs/benchmarks.md ("Soak") by hand."""

import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests/integration"))
import yaml  # noqa: E402
from scapy.all import IP, TCP, UDP, Ether, wrpcap  # noqa: E402

from sluice_harness import Sluice  # noqa: E402

SAMPLE_EVERY = 5
RELOAD_EVERY = 3
FLOWS_FIREWALL = 4800
FLOWS_SERVICE = 1200


def frames():
    eth = Ether(src="02:aa:00:00:00:01", dst="02:bb:00:00:00:01")
    out = []
    for i in range(FLOWS_FIREWALL):
        src = f"10.0.{i // 250}.{1 + i % 250}"
        l4 = UDP(sport=1024 + i % 50000, dport=53) if i % 2 else TCP(sport=1024 + i % 50000, dport=80, flags="S")
        out.append(eth / IP(src=src, dst="10.1.0.1") / l4)
    for i in range(FLOWS_SERVICE):
        out.append(eth / IP(src=f"10.0.{100 + i // 250}.{1 + i % 250}", dst="10.1.100.1") / UDP(sport=2000 + i, dport=53))
    return out


def config(work, generation):
    decoys = [{"name": f"decoy-{generation}-{i}", "source": f"172.{16 + i}.{generation % 250}.0/24", "protocol": "tcp",
               "destination_ports": 1000 + generation % 1000, "action": "deny"} for i in range(1 + generation % 16)]
    return {
        "eal": [],
        "dataplane": {"idle_sleep_us": 0},
        "metrics": {"listen": ""},
        "ports": [
            {"name": "lan", "device": f"net_pcap0,rx_pcap={work}/soak.pcap,tx_pcap={work}/unused.pcap,infinite_rx=1"},
            {"name": "wan", "device": "net_null0,no-rx=1"},
        ],
        "lcores": [{"id": 1, "roles": ["rx", "worker"]}],
        "forward": [{"from": "lan", "to": "wan", "next_hop_mac": "02:00:00:00:00:02"},
                    {"from": "wan", "to": "lan", "next_hop_mac": "02:00:00:00:00:01"}],
        "firewall": {"default": "deny", "table_size": 100000, "rules": decoys + [
            {"name": "clients", "source": "10.0.0.0/16", "action": "allow"}]},
        "load_balancer": {"nat_pool": ["10.1.200.1"]},
        "services": [{"name": "dns", "vip": "10.1.100.1", "port": 53, "protocol": "udp", "mode": "nat",
                      "backends": [{"address": f"10.1.2.{11 + b}", "mac": "02:00:00:00:03:01",
                                    "weight": 1 + (generation + b) % 3} for b in range(3)]}],
    }


def rss_kib(pid):
    return int(next(l for l in Path(f"/proc/{pid}/status").read_text().splitlines() if l.startswith("VmRSS:")).split()[1])


def main():
    seconds = int(sys.argv[1]) if len(sys.argv) > 1 else 1800
    work = Path(tempfile.mkdtemp(prefix="sluice-soak-"))
    wrpcap(str(work / "soak.pcap"), frames())
    sluice = Sluice(work, config(work, 0))
    eal = yaml.safe_load(sluice.config_path.read_text())["eal"]
    samples, refused, generation = [], 0, 0
    sluice.start()
    try:
        started = next_sample = next_reload = time.monotonic()
        while time.monotonic() - started < seconds:
            now = time.monotonic()
            if now >= next_reload:
                generation += 1
                text = yaml.safe_dump(dict(config(work, generation), eal=eal), sort_keys=False)
                tmp = Path(str(sluice.config_path) + ".tmp")
                tmp.write_text(text)
                os.replace(tmp, sluice.config_path)
                # The reply waits for the reload (rte_acl build, RCU grace period): on a starved machine that can
                # take seconds, which is slowness, not a failure of the soak.
                refused += sluice.telemetry.query("/sluice/reload", timeout=60)["last_reload_ok"] == 0
                next_reload = now + RELOAD_EVERY
            if now >= next_sample:
                s = sluice.telemetry.query("/sluice/stats", timeout=60)
                samples.append((now - started, rss_kib(sluice.proc.pid), s["mbufs_in_use"], s["conn_entries"],
                                s["rx_packets"], s["drops"]))
                print("t={:6.0f}s rss={:7d} KiB mbufs_in_use={:6d} connections={:6d} rx={:12d} drops={}".format(*samples[-1]),
                      flush=True)
                next_sample = now + SAMPLE_EVERY
            time.sleep(0.2)
        stopped = sluice.stop()
    finally:
        sluice.kill()
    log = sluice.log()

    warm = max(2, len(samples) // 5)
    rss_peak = max(s[1] for s in samples[:warm])
    mbuf_peak = max(s[2] for s in samples[:warm])
    failures = []
    if max(s[1] for s in samples[warm:]) - rss_peak > 8 * 1024:
        failures.append(f"RSS grew from {rss_peak} to {max(s[1] for s in samples[warm:])} KiB")
    if max(s[2] for s in samples[warm:]) > mbuf_peak + 2 * 512:
        failures.append(f"mbufs in use grew from {mbuf_peak} to {max(s[2] for s in samples[warm:])}")
    flows = FLOWS_FIREWALL + FLOWS_SERVICE
    if any(s[3] != flows for s in samples[warm:]):
        failures.append(f"tracked connections not flat at {flows}: {sorted({s[3] for s in samples[warm:]})}")
    if refused:
        failures.append(f"{refused} reloads refused")
    if samples[-1][5] != 0:
        failures.append(f"{samples[-1][5]} packets dropped")
    if stopped != 0 or "mbufs returned" not in log:
        failures.append(f"sluice exited {stopped}: {log[-2000:]}")
    rate = (samples[-1][4] - samples[warm][4]) / (samples[-1][0] - samples[warm][0]) / 1e6
    print(f"soak {seconds} s, {generation} reloads, {len(samples)} samples: RSS {samples[0][1]}..{max(s[1] for s in samples)} "
          f"KiB, mbufs in use {min(s[2] for s in samples)}..{max(s[2] for s in samples)}, connections {samples[-1][3]}, "
          f"{rate:.2f} Mpps: " + ("FLAT" if not failures else "NOT FLAT: " + "; ".join(failures)))
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())

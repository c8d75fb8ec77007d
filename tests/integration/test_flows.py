"""sluicectl flows and reload --dry-run against a running sluice with real tracked connections: the workers walk their
own tables (single-owner), and the dry run re-judges every connection with a candidate config, applying nothing."""

import copy
import logging
import os
import subprocess
from pathlib import Path

import pytest
import yaml

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import IP, TCP, Ether

from netns import Netns
from sluice_harness import ROOT, Sluice, wait_until

SLUICECTL = str(ROOT / "app/sluicectl/sluicectl")
CLIENT_PEER, SERVER_PEER = "02:00:00:00:01:01", "02:00:00:00:02:01"
VIP, BACKENDS = "192.0.2.100", ["10.1.0.11", "10.1.0.12", "10.1.0.13"]


@pytest.fixture
def ns():
    namespace = Netns(f"slfl{os.getpid()}", ["cl0", "sv0"])
    yield namespace
    namespace.delete()


def base_config(tmp_path):
    return {
        "dataplane": {"idle_sleep_us": 50},
        # Two workers: one TX queue (one tx_pcap) each per port.
        "ports": [{"name": "client", "device": f"net_pcap0,rx_iface=cl0,tx_pcap={tmp_path}/c0.pcap,tx_pcap={tmp_path}/c1.pcap"},
                  {"name": "server", "device": f"net_pcap1,rx_iface=sv0,tx_pcap={tmp_path}/s0.pcap,tx_pcap={tmp_path}/s1.pcap"}],
        "lcores": [{"id": 1, "roles": ["rx", "worker"]}, {"id": 2, "roles": ["worker"]}],
        "forward": [{"from": "client", "to": "server", "next_hop_mac": SERVER_PEER},
                    {"from": "server", "to": "client", "next_hop_mac": CLIENT_PEER}],
        "firewall": {"default": "deny", "rules": [{"name": "clients", "in_ports": "client", "action": "allow"}]},
        "load_balancer": {"nat_pool": "10.1.0.100"},
        "services": [{"name": "web", "vip": VIP, "port": 80, "protocol": "tcp", "mode": "nat", "removed_backends": "drop",
                      "backends": [{"address": b, "port": 8080, "mac": SERVER_PEER} for b in BACKENDS]}],
    }


def ctl(sluice, *args):
    out = subprocess.run([SLUICECTL, "--prefix", sluice.prefix, *args], capture_output=True, text=True, timeout=60)
    lines = []
    for line in out.stdout.splitlines():  # sluicectl wraps a long flow line; its rest comes indented
        if line.startswith("    ") and lines:
            lines[-1] += " " + line.strip()
        else:
            lines.append(line)
    return out.returncode, lines


def test_flows_lists_tracked_connections_and_dry_run_counts_what_a_candidate_would_change(tmp_path, ns):
    config = base_config(tmp_path)
    sluice = Sluice(tmp_path, config, lcores="0@0,1@1,2@1", netns=ns)
    clients = [f"203.0.113.{i}" for i in range(1, 41)] + [f"198.51.100.{i}" for i in range(1, 21)]
    syns = [Ether(src=CLIENT_PEER, dst="02:00:00:00:00:aa") / IP(src=c, dst=VIP) / TCP(sport=40000 + i, dport=80, flags="S")
            for i, c in enumerate(clients)]
    with sluice:
        ns.inject("cl0", syns, tmp_path)
        sluice.wait_accounted(len(syns))

        rc, lines = ctl(sluice, "flows")
        assert rc == 0 and lines[0] == "60 connection(s) match, 60 listed", lines[:3]
        assert all(" -> web/10.1.0.1" in l and "nat:" in l and "tcp_syn_sent" in l for l in lines[1:]), lines[1:4]
        rc, lines = ctl(sluice, "flows", "198.51.100.7")
        assert rc == 0 and lines[0] == "1 connection(s) match, 1 listed" and "198.51.100.7:40046" in lines[1], lines
        rc, lines = ctl(sluice, "flows", "port", "40003", "tcp")
        assert rc == 0 and lines[0].startswith("1 connection(s)"), lines
        rc, lines = ctl(sluice, "flows", "udp")
        assert rc == 0 and lines[0].startswith("0 connection(s)"), lines
        rc, lines = ctl(sluice, "flows", "bogus")
        assert rc == 1 and lines[0].startswith("error:"), lines

        # Which backend each connection has, from the listing: the dry run's "dropped" count must equal it.
        rc, listed = ctl(sluice, "flows")
        on_removed = sum(1 for l in listed[1:] if "-> web/10.1.0.13:8080" in l)
        candidate = copy.deepcopy(config)
        candidate["eal"] = yaml.safe_load(sluice.config_path.read_text())["eal"]
        candidate["firewall"]["rules"] = [
            {"name": "no-test-net-2", "source": "198.51.100.0/24", "action": "deny"},
            {"name": "clients-v2", "in_ports": "client", "action": "allow"}]
        candidate["services"][0]["backends"] = candidate["services"][0]["backends"][:2]
        candidate_path = tmp_path / "candidate.yaml"
        candidate_path.write_text(yaml.safe_dump(candidate, sort_keys=False))
        before = sluice.telemetry.query("/sluice/config")
        rc, lines = ctl(sluice, "reload", "--dry-run", str(candidate_path))
        assert rc == 0, lines
        text = "\n".join(lines)
        assert "rule added: no-test-net-2" in text and "rule added: clients-v2" in text and "rule removed: clients" in text
        assert "tracked connections: 60" in text
        assert "would be denied as new connections (they keep their verdict): 20" in text, text
        assert f"backend removed, connection dropped (removed_backends: drop): {on_removed}" in text, text
        assert 0 < on_removed < 60
        after = sluice.telemetry.query("/sluice/config")
        assert after["hash"] == before["hash"] and after["reloads_ok"] == before["reloads_ok"]  # nothing applied

        rc, lines = ctl(sluice, "reload", "--dry-run", str(ROOT / "config/invalid/rule-bad-action.yaml"))
        assert rc == 1 and lines[0].startswith("error:") and "rule-bad-action.yaml" in lines[0], lines
        assert sluice.stop() == 0, sluice.log()

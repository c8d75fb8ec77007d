"""End to end through the lab: real TCP stacks (curl-like HTTP clients in sl-client, Python servers in
sl-backend1..3), sluice in sl-gw on net_af_xdp with its own XDP program, health checks over the lab's exception path. Each test is bounded
in time and leaves the lab as it found it."""

import json
import math
import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, lab
from sluice_harness import Telemetry, wait_until

CLIENT = ["ip", "netns", "exec", "sl-client", "/usr/bin/python3", str(Path(__file__).with_name("lab_client.py"))]
telemetry = Telemetry("sluice-lab")
NAT_VIP, DSR_VIP, UDP_VIP, GUARDED_VIP = "10.77.100.1", "10.77.100.2", "10.77.100.3", "10.77.100.4"
# SYNs to a VIP from spoofed sources in 198.18.0.0/15 (RFC 2544's benchmark range: the answers go nowhere).
SYN_FLOOD = r'''
import logging, random, socket, sys
logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import IP, TCP
rng = random.Random(11)
raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)  # IP_HDRINCL: the spoofed source is kept
for _ in range(int(sys.argv[2])):
    syn = IP(src="198.%d.%d.%d" % (18 + rng.randrange(2), rng.randrange(256), rng.randrange(1, 255)), dst=sys.argv[1]) / \
        TCP(sport=rng.randrange(1024, 65536), dport=80, flags="S", seq=rng.randrange(2**32))
    raw.sendto(bytes(syn), (sys.argv[1], 0))
'''
BACKEND_OF = {"backend1": "10.77.2.11", "backend2": "10.77.2.12", "backend3": "10.77.2.13"}


def client(*args, timeout=300):
    out = subprocess.run(CLIENT + [str(a) for a in args], capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def assert_spread(answers, weights, total):
    """Each backend's share is within 10% of what its weight asks for, or within 4 standard deviations of the
    binomial sampling noise when that is wider (with 1,000 flows a 25% share varies by +-1.4 points by chance)."""
    weight_sum = sum(weights.values())
    for name, weight in weights.items():
        expected = total * weight / weight_sum
        p = weight / weight_sum
        slack = max(0.10 * expected, 4 * math.sqrt(total * p * (1 - p)))
        assert abs(answers.get(name, 0) - expected) <= slack, (name, answers, expected, slack)


def backends():
    b = telemetry.query("/sluice/backends")
    return [dict(zip(b, row)) for row in zip(*b.values())]


def health(service, address):
    return next(b["health"] for b in backends() if b["service"] == service and b["backend"] == address)


def stats():
    return telemetry.query("/sluice/stats")


def test_1000_tcp_connections_through_a_nat_vip_follow_the_weights(lab_env):
    result = client("http", f"http://{NAT_VIP}/", 1000)
    assert result["error_count"] == 0, result["errors"]
    assert sum(result["answers"].values()) == 1000
    assert_spread(result["answers"], {"backend1": 2, "backend2": 1, "backend3": 1}, 1000)
    # sluicectl sums it up per service and per backend, from the workers' counters (refreshed every 250 ms).
    def web_row():
        out = subprocess.run(["/usr/bin/python3", str(ROOT / "app/sluicectl/sluicectl"), "--prefix", "sluice-lab", "services"],
                             capture_output=True, text=True, timeout=30).stdout
        row = next(l.split() for l in out.splitlines() if l.startswith("web "))
        return row if int(row[4]) >= 1000 else None
    web = wait_until(web_row, timeout=5, what="sluicectl services to count the 1000 connections")
    assert web[1] == "nat" and web[2] == "3/3", web
    per_backend = {b["backend"]: b["new_connections"] for b in backends() if b["service"] == "web"}
    assert sum(per_backend.values()) == int(web[4])


def test_syn_proxy_vip_carries_real_tcp_and_a_syn_flood_opens_nothing(lab_env):
    """Real TCP stacks through the SYN proxy (sequence numbers translated both ways for the whole connection),
    while 3,000 SYNs from spoofed sources hit the same VIP: each gets a cookie, none gets an entry."""
    before = stats()
    flood = subprocess.Popen(["ip", "netns", "exec", "sl-client", "/usr/bin/python3", "-c", SYN_FLOOD, GUARDED_VIP, "3000"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # 100 connections: each waits one retransmission of its request (~200 ms; docs/architecture.md, "SYN proxy").
    result = client("http", f"http://{GUARDED_VIP}/", 100)
    _, flood_err = flood.communicate(timeout=300)
    assert flood.returncode == 0, flood_err
    assert result["error_count"] == 0, result["errors"]
    assert set(result["answers"]) == {"backend1", "backend2", "backend3"}, result["answers"]
    after = wait_until(lambda: (s := stats())["syn_cookies_sent"] - before["syn_cookies_sent"] >= 3100 and s,
                       timeout=10, what="a cookie for every SYN")
    assert after["syn_cookies_accepted"] - before["syn_cookies_accepted"] == 100
    assert after["conn_inserts"] - before["conn_inserts"] == 100, "only completed handshakes make entries"


def test_tcp_connections_through_a_dsr_vip(lab_env):
    result = client("http", f"http://{DSR_VIP}/", 300)
    assert result["error_count"] == 0, result["errors"]
    assert_spread(result["answers"], {"backend1": 1, "backend2": 1, "backend3": 1}, 300)


def test_1000_udp_flows_through_a_nat_vip(lab_env):
    result = client("udp", UDP_VIP, 53, 1000)
    assert result["error_count"] == 0, result["errors"]
    assert_spread(result["answers"], {"backend1": 1, "backend2": 1, "backend3": 1}, 1000)


def test_firewall_denied_source_gets_nothing_rejected_port_is_refused_at_once(lab_env):
    subprocess.run(["ip", "-n", "sl-client", "addr", "add", "10.77.1.66/32", "dev", "client0"], check=True)
    try:
        denied = client("http", f"http://{NAT_VIP}/", 3, "--source", "10.77.1.66")
        assert denied["error_count"] == 3 and all("timed out" in e for e in denied["errors"]), denied
    finally:
        subprocess.run(["ip", "-n", "sl-client", "addr", "del", "10.77.1.66/32", "dev", "client0"], check=True)
    allowed = client("http", f"http://{NAT_VIP}/", 3)
    assert allowed["error_count"] == 0, allowed
    rejects = stats()["drop/rule_reject"]
    started = time.monotonic()
    refused = subprocess.run(["ip", "netns", "exec", "sl-client", "curl", "--noproxy", "*", "-sS", "--max-time", "5",
                              "http://10.77.2.2:23/"], capture_output=True, text=True)
    assert refused.returncode == 7, refused.stderr  # curl: could not connect (a RST; a timeout would be 28)
    assert time.monotonic() - started < 2, "a reject rule answers at once with a RST, no timeout"
    assert stats()["drop/rule_reject"] == rejects + 1


def test_health_check_takes_a_stopped_backend_out_and_brings_it_back(lab_env):
    keepalive = subprocess.Popen(CLIENT + ["keepalive", f"http://{NAT_VIP}/", "12"], stdout=subprocess.PIPE, text=True)
    try:
        held = json.loads(keepalive.stdout.readline())["first"]  # a long-lived connection to this backend
        victim = next(name for name in ("backend3", "backend2", "backend1") if name != held)
        number = victim[-1]
        lab("backend-stop", number)
        stopped = time.monotonic()
        wait_until(lambda: health("web", BACKEND_OF[victim]) == "down", timeout=10, what=f"{victim} marked down")
        # fall x interval (2 x 0.5 s) plus a check's timeout and the phase of the schedule, plus the 250 ms refresh.
        assert time.monotonic() - stopped <= 2 * 0.5 + 0.3 + 0.5 + 0.5 + 1.0
        time.sleep(0.3)  # the rebuilt Maglev table is published right after the transition
        during = client("http", f"http://{NAT_VIP}/", 200)
        assert during["error_count"] == 0, during["errors"]
        assert victim not in during["answers"], during
        lab("backend-start", number)
        wait_until(lambda: health("web", BACKEND_OF[victim]) == "up", timeout=10, what=f"{victim} back up")
        time.sleep(0.3)
        after = client("http", f"http://{NAT_VIP}/", 200)
        assert after["error_count"] == 0, after["errors"]
        assert after["answers"].get(victim, 0) >= 20, after  # about a quarter (or half) of 200
        held_result = json.loads(keepalive.communicate(timeout=30)[0].strip().splitlines()[-1])
        assert held_result["error_count"] == 0, held_result["errors"]
        assert set(held_result["answers"]) == {held}, held_result  # the established connection never moved
    finally:
        if keepalive.poll() is None:
            keepalive.kill()
        lab("backend-start", "1", check=False) if health("web", "10.77.2.11") == "down" else None


def test_reload_under_load_loses_no_connection(lab_env):
    config_path = lab_env["config"]
    stopfile = lab_env["state"] / "stop-load"
    stopfile.unlink(missing_ok=True)
    load = subprocess.Popen(CLIENT + ["http-until", f"http://{NAT_VIP}/", str(stopfile)], stdout=subprocess.PIPE, text=True)
    try:
        base = yaml.safe_load(lab_env["original"])
        before = telemetry.query("/sluice/config")["reloads_ok"]
        for i in range(20):
            config = yaml.safe_load(lab_env["original"])
            web = next(s for s in config["services"] if s["name"] == "web")
            for k, b in enumerate(web["backends"]):
                b["weight"] = 1 + (i + k) % 3  # every reload moves the Maglev table
            telnet = next(r for r in config["firewall"]["rules"] if r["name"] == "no-telnet")
            telnet["destination_ports"] = [23, 2300 + i] if i % 2 else 23
            tmp = config_path.with_suffix(".tmp")
            tmp.write_text(yaml.safe_dump(config, sort_keys=False))
            tmp.replace(config_path)
            wait_until(lambda: telemetry.query("/sluice/config")["reloads_ok"] >= before + i + 1, timeout=10,
                       what=f"reload {i + 1} applied")
            assert telemetry.query("/sluice/config")["last_reload_ok"] == 1
            time.sleep(0.1)
        assert base  # the original is restored below
    finally:
        stopfile.touch()
        result = json.loads(load.communicate(timeout=60)[0].strip().splitlines()[-1])
        config_path.write_text(lab_env["original"])
        wait_until(lambda: telemetry.query("/sluice/config")["hash"] and
                   telemetry.query("/sluice/config")["last_reload_ok"] == 1, timeout=10, what="original config back")
    assert sum(result["answers"].values()) >= 100, result  # the load really ran through the reloads
    assert result["error_count"] == 0, result["errors"]


def test_sigterm_under_traffic_exits_clean_and_a_restart_carries_traffic_again(lab_env):
    stopfile = lab_env["state"] / "stop-restart"
    stopfile.unlink(missing_ok=True)
    load = subprocess.Popen(CLIENT + ["http-until", f"http://{NAT_VIP}/", str(stopfile)], stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(1.0)
        stopped = lab("stop", check=False)  # SIGTERM; judged by the log: every mbuf returned, no error
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        assert "stopped cleanly" in stopped.stdout
        started = lab("start", check=False)
        assert started.returncode == 0, started.stdout + started.stderr
        time.sleep(1.5)  # health checks: backends start up; the client resumes on its own
    finally:
        stopfile.touch()
        result = json.loads(load.communicate(timeout=60)[0].strip().splitlines()[-1])
    after = client("http", f"http://{NAT_VIP}/", 50)
    assert after["error_count"] == 0, after["errors"]
    assert sum(result["answers"].values()) > 0


def metric(name, **labels):
    """A sample of sluice's /metrics (it listens on 127.0.0.1 inside sl-gw)."""
    text = subprocess.run(["ip", "netns", "exec", "sl-gw", "curl", "-s", "-m", "5", "http://127.0.0.1:9469/metrics"],
                          capture_output=True, text=True, timeout=10, check=True).stdout
    wanted = ",".join(f'{k}="{v}"' for k, v in labels.items())
    for line in text.splitlines():
        if line.startswith(f"{name}{{{wanted}}} "):
            return float(line.split()[-1])
    raise AssertionError(f"no {name}{{{wanted}}} in /metrics")


def xdp_program(iface):
    link = subprocess.run(["ip", "-n", "sl-gw", "link", "show", iface], capture_output=True, text=True, check=True).stdout
    return link.split("prog/xdp", 1)[1].split()[3] if "prog/xdp" in link else None  # "id N name NAME ..."


def ping_from_server_lan(address, count):
    out = subprocess.run(["ip", "netns", "exec", "sl-server", "ping", "-c", str(count), "-i", "0.2", "-W", "1", address],
                         capture_output=True, text=True, timeout=30)
    return int(out.stdout.split(" received")[0].rsplit(",", 1)[1])


def test_xdp_program_gives_the_kernel_its_own_addresses_and_sluice_the_rest(lab_env):
    """gw-server carries sluice's data plane through net_af_xdp; an address the kernel holds on that same link is
    answered by the kernel (its ARP and pings pass), everything else stays sluice's (the same ping, once the address
    is gone, reaches sluice, whose firewall drops it)."""
    assert xdp_program("gw-server") == "sluice_steer" and xdp_program("gw-client") == "sluice_steer"
    prefixes = metric("sluice_xdp_prefixes", port="server")
    kernel_before = metric("sluice_xdp_frames_total", port="server", verdict="kernel")
    subprocess.run(["ip", "-n", "sl-gw", "addr", "add", "10.77.2.253/32", "dev", "gw-server"], check=True)
    try:
        wait_until(lambda: metric("sluice_xdp_prefixes", port="server") == prefixes + 1, timeout=5,
                   what="the kernel's new address in the steering map")
        load = subprocess.Popen(CLIENT + ["http", f"http://{NAT_VIP}/", "100"], stdout=subprocess.PIPE, text=True)
        assert ping_from_server_lan("10.77.2.253", 5) == 5  # the kernel answers through sluice's own link
        during = json.loads(load.communicate(timeout=120)[0].strip().splitlines()[-1])
        assert during["error_count"] == 0, during["errors"]  # sluice's traffic on the same link is untouched
        wait_until(lambda: metric("sluice_xdp_frames_total", port="server", verdict="kernel") >= kernel_before + 6,
                   timeout=5, what="an ARP request and 5 echo requests passed to the kernel")
    finally:
        subprocess.run(["ip", "-n", "sl-gw", "addr", "del", "10.77.2.253/32", "dev", "gw-server"], check=False)
    wait_until(lambda: metric("sluice_xdp_prefixes", port="server") == prefixes, timeout=5, what="the address withdrawn")
    denied_before = stats()["drop/rule_deny"]
    assert ping_from_server_lan("10.77.2.253", 3) == 0  # sl-server still has the MAC: the frames now reach sluice
    wait_until(lambda: stats()["drop/rule_deny"] >= denied_before + 3, timeout=5,
               what="sluice's firewall dropping the pings it now gets")


def test_a_killed_sluice_leaves_its_xdp_program_and_the_next_start_replaces_it(lab_env):
    pid = lab("pid").stdout.strip()
    subprocess.run(["kill", "-KILL", pid], check=True)
    wait_until(lambda: not Path(f"/proc/{pid}").exists(), timeout=10, what="sluice gone")
    assert xdp_program("gw-server") == "sluice_steer"  # the kernel keeps it: the PMD could not detach it
    started = lab("start", check=False)
    assert started.returncode == 0, started.stdout + started.stderr
    log = (lab_env["state"] / "sluice.log").read_text()
    assert "removed the XDP program" in log and "a previous sluice left on gw-server" in log
    time.sleep(1.5)  # health checks mark the backends up again
    after = client("http", f"http://{NAT_VIP}/", 50)
    assert after["error_count"] == 0, after["errors"]


def test_af_packet_fallback_carries_the_same_traffic(lab_env):
    assert lab("stop", check=False).returncode == 0
    env = dict(os.environ, SLUICE_LAB_DRIVER="af_packet")
    try:
        started = subprocess.run([str(ROOT / "deploy/lab/lab.sh"), "start"], capture_output=True, text=True, timeout=120,
                                 env=env)
        assert started.returncode == 0, started.stdout + started.stderr
        assert "net_af_packet0,iface=gw-client" in (lab_env["state"] / "sluice.log").read_text()
        assert xdp_program("gw-server") is None
        time.sleep(1.5)
        result = client("http", f"http://{NAT_VIP}/", 100)
        assert result["error_count"] == 0, result["errors"]
        assert len(result["answers"]) == 3, result
        stopped = lab("stop", check=False)
        assert stopped.returncode == 0 and "stopped cleanly" in stopped.stdout, stopped.stdout + stopped.stderr
    finally:
        lab("stop", check=False)
        lab("start")
    assert xdp_program("gw-server") == "sluice_steer"

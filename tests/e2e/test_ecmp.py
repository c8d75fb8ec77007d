"""Scale-out over BGP (deploy/lab/ecmp.sh): two sluice instances announce a dsr VIP through their own BIRD to a
router namespace that installs one ECMP route over both. Checks what operators rely on: both next hops while both
run, traffic over both, a SIGTERM (or `sluicectl drain`) withdraws the instance's next hop before the process exits,
a service without healthy backends is withdrawn and comes back with one.

Runs as root with bird2 installed; everything lives in namespaces named se-* that the module creates and deletes
(also on failure). SLUICE_BIN selects the binary. Timings are printed (pytest -s shows them)."""

import json
import os
from datetime import datetime
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests/integration"))
from sluice_harness import Telemetry, wait_until  # noqa: E402

ECMP = str(ROOT / "deploy/lab/ecmp.sh")
SLUICECTL = str(ROOT / "app/sluicectl/sluicectl")
SLUICE = os.environ.get("SLUICE_BIN", str(ROOT / "build/app/sluice/sluice"))
PYTHON = "/usr/bin/python3"
VIP = "10.88.100.1"
NEXT_HOPS = {1: "10.88.11.2", 2: "10.88.12.2"}
DRAIN = 4  # bgp.drain_seconds of both instances

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (namespaces, XDP)"),
    pytest.mark.skipif(shutil.which("bird") is None, reason="bird2 not installed (deploy/install-deps.sh)"),
    pytest.mark.skipif(not Path(SLUICE).exists(), reason=f"no sluice binary at {SLUICE}"),
]

# Runs in se-client: N HTTP requests to the VIP, each on a new connection (a new source port, so a new ECMP hash).
CLIENT = r'''
import http.client, json, sys
answers, errors = {}, []
for _ in range(int(sys.argv[1])):
    try:
        c = http.client.HTTPConnection("10.88.100.1", 80, timeout=2)
        c.request("GET", "/")
        name = c.getresponse().read().decode().strip()
        answers[name] = answers.get(name, 0) + 1
        c.close()
    except Exception as e:
        errors.append(repr(e))
print(json.dumps({"answers": answers, "errors": errors}))
'''


def next_hops():
    """The router's kernel next hops for the VIP (what ECMP spreads over)."""
    out = subprocess.run(["ip", "-n", "se-router", "route", "show", VIP], capture_output=True, text=True, timeout=5).stdout
    return {w[i + 1] for w in [line.split() for line in out.splitlines()] for i, x in enumerate(w) if x == "via"}


def requests(n):
    out = subprocess.run(["ip", "netns", "exec", "se-client", PYTHON, "-c", CLIENT, str(n)], capture_output=True,
                         text=True, timeout=60, check=True).stdout
    return json.loads(out)


class Instance:
    """sluice N in se-lbN, with the config ecmp.sh wrote."""

    def __init__(self, n, state):
        self.n = n
        self.config = state / f"lb{n}.yaml"
        self.log_path = state / f"sluice-lb{n}.log"
        self.telemetry = Telemetry(f"se-lb{n}")
        self.proc = None

    def start(self):
        log = open(self.log_path, "w")
        self.proc = subprocess.Popen(["ip", "netns", "exec", f"se-lb{self.n}", SLUICE, "--config", str(self.config)],
                                     stdout=log, stderr=subprocess.STDOUT)
        log.close()
        wait_until(lambda: "ready:" in self.log() or self.proc.poll() is not None, timeout=30, what=f"sluice {self.n}")
        assert self.proc.poll() is None, self.log()
        return self

    def log(self):
        return self.log_path.read_text(errors="replace")

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def port_rx(self):
        return self.telemetry.query("/sluice/stats")["port/up/rx_packets"]

    def bgp(self):
        return self.telemetry.query("/sluice/bgp")

    def kill(self):
        if self.running():
            self.proc.kill()
            self.proc.wait()


def timed_stop(instance, stop):
    """Calls stop(); samples the router's next hops until the process is gone. Returns (seconds until the router lost
    the instance's next hop, seconds until the process exited)."""
    hop = NEXT_HOPS[instance.n]
    started = time.monotonic()
    stop()
    withdrawn = None
    while instance.proc.poll() is None:
        if withdrawn is None and hop not in next_hops():
            withdrawn = time.monotonic() - started
        assert time.monotonic() - started < DRAIN + 20, "sluice did not stop"
        time.sleep(0.02)
    exited = time.monotonic() - started
    return withdrawn, exited


@pytest.fixture(scope="module")
def lab():
    # A short state path: BIRD's control sockets live there (unix socket paths stop at 107 bytes).
    state = Path(tempfile.mkdtemp(prefix="se-ecmp-", dir="/tmp"))
    env = dict(os.environ, SLUICE_BIN=SLUICE, SLUICE_ECMP_STATE=str(state), SLUICE_ECMP_DRAIN=str(DRAIN))

    def ecmp(*args, check=True):
        return subprocess.run([ECMP, *args], env=env, capture_output=True, text=True, timeout=60, check=check)

    instances = {}
    try:
        ecmp("up")
        instances = {n: Instance(n, state) for n in (1, 2)}
        for i in instances.values():
            i.start()
        yield {"ecmp": ecmp, "instances": instances, "state": state}
    finally:
        for i in instances.values():
            i.kill()
        ecmp("down", check=False)
        shutil.rmtree(state, ignore_errors=True)


def both_announced():
    return next_hops() == set(NEXT_HOPS.values())


def test_both_instances_announce_and_share_the_traffic(lab):
    started = time.monotonic()
    wait_until(both_announced, timeout=15, interval=0.05, what="two next hops for the VIP on the router")
    print(f"\nboth next hops on the router {time.monotonic() - started:.2f} s after the instances were ready")
    a, b = lab["instances"][1], lab["instances"][2]
    before = (a.port_rx(), b.port_rx())
    result = requests(60)
    assert not result["errors"], result
    assert sum(result["answers"].values()) == 60
    gained = (a.port_rx() - before[0], b.port_rx() - before[1])
    print(f"packets from the router: instance 1 {gained[0]}, instance 2 {gained[1]}; backends {result['answers']}")
    assert gained[0] > 0 and gained[1] > 0, "ECMP sent every connection to one instance"
    for i in (a, b):
        bgp = i.bgp()
        assert bgp["in_sync"] == 1 and bgp["vip"] == [VIP] and bgp["announced"] == [1]


def test_vip_is_withdrawn_without_healthy_backends_and_announced_again_with_one(lab):
    ecmp = lab["ecmp"]
    wait_until(both_announced, timeout=15, what="two next hops")
    try:
        ecmp("backend-stop", "1")
        started = time.monotonic()
        ecmp("backend-stop", "2")  # returns once the process is gone (it takes a while to be reaped)
        wait_until(lambda: not next_hops(), timeout=10, interval=0.02, what="the VIP withdrawn from the router")
        print(f"\nlast backend stop begun -> VIP gone from the router: {time.monotonic() - started:.2f} s "
              "(health checks: interval 200 ms, fall 2)")
        for i in lab["instances"].values():
            bgp = i.bgp()
            assert bgp["announced"] == [0] and bgp["wanted"] == [0] and bgp["withdrawals"] == [1]
        started = time.monotonic()
        ecmp("backend-start", "1")
        wait_until(both_announced, timeout=10, interval=0.02, what="the VIP announced again")
        print(f"one backend back -> both next hops again: {time.monotonic() - started:.2f} s (rise 2)")
        result = requests(10)
        assert not result["errors"] and result["answers"] == {"be1": 10}, result
    finally:
        ecmp("backend-start", "2", check=False)
        ecmp("backend-start", "1", check=False)  # fails harmlessly when it runs already


def test_sigterm_withdraws_before_the_process_exits(lab):
    b = lab["instances"][2]
    wait_until(both_announced, timeout=15, what="two next hops")
    withdrawn, exited = timed_stop(b, lambda: b.proc.send_signal(signal.SIGTERM))
    print(f"\nSIGTERM -> router lost the next hop after {withdrawn:.3f} s; process exited after {exited:.2f} s "
          f"(drain_seconds {DRAIN})")
    assert withdrawn is not None and withdrawn < exited, "the next hop outlived the process"
    assert withdrawn < 2.0
    assert exited >= DRAIN - 0.2, "sluice did not keep forwarding for drain_seconds"
    assert b.proc.returncode == 0, b.log()
    assert "SIGTERM: draining" in b.log() and "drain over" in b.log()
    assert next_hops() == {NEXT_HOPS[1]}
    result = requests(20)  # everything goes to instance 1 now
    assert not result["errors"], result


def test_sluicectl_drain_and_a_second_sigterm(lab):
    b = lab["instances"][2]
    if not b.running():
        b.start()
    wait_until(both_announced, timeout=15, what="instance 2 announcing again")

    def drain():
        out = subprocess.run([PYTHON, SLUICECTL, "--prefix", "se-lb2", "drain"], capture_output=True, text=True, timeout=20)
        assert out.returncode == 0, out.stdout + out.stderr
        assert "every VIP withdrawn" in out.stdout

    withdrawn, exited = timed_stop(b, drain)
    print(f"\nsluicectl drain -> next hop gone after {withdrawn:.3f} s; process exited after {exited:.2f} s")
    assert withdrawn is not None and withdrawn < exited and exited >= DRAIN - 0.2
    assert b.proc.returncode == 0

    b.start()
    wait_until(both_announced, timeout=15, what="instance 2 announcing again")

    def twice():
        b.proc.send_signal(signal.SIGTERM)
        wait_until(lambda: "SIGTERM: draining" in b.log(), timeout=5, what="the drain to start")
        b.proc.send_signal(signal.SIGTERM)

    withdrawn, exited = timed_stop(b, twice)
    print(f"SIGTERM twice -> exited after {exited:.2f} s")
    assert "SIGTERM during the drain: stopping at once" in b.log()
    # Judged by sluice's own log: the stop began well before drain_seconds ran out (the exit itself also waits for
    # the lcores and the AF_XDP sockets to close, which a loaded machine stretches).
    stamp = lambda text: datetime.strptime(next(l for l in b.log().splitlines() if text in l)[:23], "%Y-%m-%d %H:%M:%S.%f")
    waited = (stamp("stopping at once") - stamp("SIGTERM: draining")).total_seconds()
    assert waited < DRAIN - 1, f"a second SIGTERM must stop at once, not after {waited:.2f} s"
    assert NEXT_HOPS[2] not in next_hops()


# Runs in se-client: N persistent HTTP/1.1 connections to the VIP, a GET on each every 0.1 s until the stop file
# appears. A connection breaks when a request fails (timeout 10 s: long enough for TCP to retransmit across the
# router's hold time); it is not reopened. Prints per-connection backends, breaks and the longest stall.
LONG_LIVED = r'''
import http.client, json, os, sys, time
n, stop = int(sys.argv[1]), sys.argv[2]
conns = [http.client.HTTPConnection("10.88.100.1", 80, timeout=10) for _ in range(n)]
backends, broken, stall = [set() for _ in range(n)], [None] * n, 0.0
print("open", flush=True)
while not os.path.exists(stop):
    for i, c in enumerate(conns):
        if broken[i]:
            continue
        started = time.monotonic()
        try:
            c.request("GET", "/")
            backends[i].add(c.getresponse().read().decode().strip())
        except Exception as e:
            broken[i] = repr(e)
        stall = max(stall, time.monotonic() - started)
    time.sleep(0.1)
print(json.dumps({"backends": [sorted(b) for b in backends], "broken": [b for b in broken if b], "stall": stall}))
'''


def test_losing_an_instance_keeps_long_lived_connections_through_the_other(lab):
    """The host of instance 1 dies (sluice and its BIRD killed with SIGKILL): the router drops its next hop after the
    BGP hold time (3 s in the lab), ECMP moves its connections to instance 2, which has no state for them and picks
    each up by Maglev (the same table on both instances): the same backend, so the connections live on (dsr)."""
    a, b = lab["instances"][1], lab["instances"][2]
    for i in (a, b):
        if not i.running():
            i.start()
    wait_until(both_announced, timeout=15, what="two next hops")
    stop = lab["state"] / "stop-long-lived"
    client = subprocess.Popen(["ip", "netns", "exec", "se-client", PYTHON, "-c", LONG_LIVED, "24", str(stop)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert client.stdout.readline().strip() == "open"
        time.sleep(1.5)  # every connection established, through one instance or the other
        adopted_before = b.telemetry.query("/sluice/stats")["lb_stateless_adoptions"]
        bird_pid = int((lab["state"] / "bird-lb1.pid").read_text())
        killed = time.monotonic()
        os.kill(bird_pid, signal.SIGKILL)
        a.kill()
        wait_until(lambda: next_hops() == {NEXT_HOPS[2]}, timeout=15, interval=0.05, what="the router to drop instance 1")
        print(f"\nhost of instance 1 killed -> router dropped its next hop after {time.monotonic() - killed:.2f} s")
        time.sleep(4)  # the moved connections retransmit and go on through instance 2
    finally:
        stop.touch()
        result = json.loads(client.communicate(timeout=60)[0].strip().splitlines()[-1])
    adopted = b.telemetry.query("/sluice/stats")["lb_stateless_adoptions"] - adopted_before
    print(f"connections: 24, broken {len(result['broken'])}, adopted by instance 2: {adopted}, "
          f"longest stall {result['stall']:.2f} s")
    assert adopted >= 1, "no connection was moving through instance 1: the test proved nothing"
    assert result["broken"] == [], result["broken"]
    assert all(len(b) == 1 for b in result["backends"]), "a connection changed backend: " + str(result["backends"])

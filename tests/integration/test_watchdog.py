"""The systemd watchdog proven on a real notify socket, and the stop under traffic.

A data-plane lcore is stalled honestly: its thread alone is stopped with ptrace (SEIZE + INTERRUPT; a SIGSTOP would
stop the whole process), the control thread and the other threads run on. The notify socket's messages are replayed
as systemd 252 times them (the period runs from the last WATCHDOG=1; WATCHDOG_USEC= replaces the period, still timed
from that ping) to say whether, and when, systemd would have killed sluice."""

import ctypes
import os
import re
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest
import yaml
from scapy.all import IP, TCP, UDP, Ether, wrpcap

from sluice_harness import ROOT, Sluice, wait_until

pytestmark = pytest.mark.release_pass_only

SLUICECTL = str(ROOT / "app/sluicectl/sluicectl")
WATCHDOG_USEC = 1_000_000  # WatchdogSec=1s: sluice checks its lcores and pings every 0.5 s
EXTENDED_USEC = 300_000_000  # SystemdNotifier::kReloadWatchdog

_libc = ctypes.CDLL(None, use_errno=True)
_libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
_PTRACE_DETACH, _PTRACE_SEIZE, _PTRACE_INTERRUPT, _WALL = 17, 0x4206, 0x4207, 0x40000000


class StoppedThread:
    """One thread of another process held in a ptrace-stop (only that thread: the others run), until release()."""

    def __init__(self, tid):
        self.tid = tid
        for request in (_PTRACE_SEIZE, _PTRACE_INTERRUPT):
            if _libc.ptrace(request, tid, None, None) != 0:
                raise OSError(ctypes.get_errno(), f"ptrace({request:#x}) of thread {tid}")
        os.waitpid(tid, _WALL)

    def release(self):
        if self.tid and _libc.ptrace(_PTRACE_DETACH, self.tid, None, None) != 0:
            raise OSError(ctypes.get_errno(), f"ptrace detach of thread {self.tid}")
        self.tid = None


def thread_states(pid):
    """{thread name: state letter} of a process (t: stopped by a tracer)."""
    states = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        name = (task / "comm").read_text().strip()
        states[name] = (task / "stat").read_text().rsplit(")", 1)[1].split()[0]
    return states


def lcore_thread(pid, lcore):
    """The thread id of DPDK's lcore thread (22.11 names them rte-worker-N)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        if (task / "comm").read_text().strip() == f"rte-worker-{lcore}":
            return int(task.name)
    raise LookupError(f"no thread rte-worker-{lcore} in {pid}")


class NotifySocket:
    """The unix datagram socket systemd would own (NOTIFY_SOCKET): every message, with when it came (a thread reads
    them as they come, whatever the test does meanwhile)."""

    def __init__(self, path):
        self.path = str(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.sock.settimeout(0.05)
        self.messages = []  # (monotonic time, set of lines)
        self.closed = False
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        while not self.closed:
            try:
                data = self.sock.recv(4096)  # stamped once it came, not when the wait for it began
                self.messages.append((time.monotonic(), set(data.decode().split("\n"))))
            except socket.timeout:
                pass
            except OSError:
                return

    def collect(self, seconds=None, until=None, timeout=10):
        """Waits `seconds`, or until `until()` holds (False after timeout)."""
        deadline = time.monotonic() + (seconds if seconds is not None else timeout)
        while time.monotonic() < deadline:
            if until and until():
                return True
            time.sleep(0.02)
        return until is None or until()

    def pings(self, after=0.0):
        return [t for t, lines in self.messages if "WATCHDOG=1" in lines and t > after]

    def first_kill(self, watchdog_usec, end, since=None):
        """When systemd would have killed sluice for want of a ping (None: never up to end): from READY on, each
        ping restarts the period and WATCHDOG_USEC= replaces it. since: judge only from the last ping before it
        (a test that proves one step's behaviour, not that a 1 s watchdog survives the rest of a loaded machine)."""
        last_ping, period = None, watchdog_usec / 1e6
        for t, lines in self.messages:
            if last_ping is not None and t > last_ping + period and (since is None or last_ping + period > since):
                return last_ping + period
            if "READY=1" in lines and last_ping is None:
                last_ping = t
            for line in lines:
                if line.startswith("WATCHDOG_USEC="):
                    period = int(line.split("=")[1]) / 1e6
            if "WATCHDOG=1" in lines:
                last_ping = t
        return last_ping + period if last_ping is not None and end > last_ping + period else None

    def close(self):
        self.closed = True
        self.reader.join()
        self.sock.close()


def start_notified(tmp_path, config, lcores="0@0,1@1"):
    notify = NotifySocket(tmp_path / "notify.sock")
    sluice = Sluice(tmp_path, config, lcores=lcores)
    sluice.start(env=dict(os.environ, NOTIFY_SOCKET=notify.path, WATCHDOG_USEC=str(WATCHDOG_USEC)))
    assert notify.collect(until=lambda: len(notify.pings()) >= 2), notify.messages
    return sluice, notify


IDLE_CONFIG = {
    "ports": [{"name": "a", "device": "net_null0,no-rx=1"}],
    "lcores": [{"id": 1, "roles": ["rx", "worker"]}],
    "dataplane": {"idle_sleep_us": 100},
    "firewall": {"default": "deny", "rules": [{"name": "web", "protocol": "tcp", "destination_ports": 80,
                                               "action": "allow"}]},
}


def test_a_stalled_lcore_silences_the_watchdog_within_watchdog_sec_and_pings_resume_when_it_runs(tmp_path):
    sluice, notify = start_notified(tmp_path, IDLE_CONFIG)
    stalled = None
    try:
        assert notify.first_kill(WATCHDOG_USEC, time.monotonic()) is None, notify.messages
        stalled = StoppedThread(lcore_thread(sluice.proc.pid, 1))
        stalled_at = time.monotonic()
        states = thread_states(sluice.proc.pid)
        assert states["rte-worker-1"] == "t" and sluice.proc.poll() is None, states
        assert notify.collect(seconds=2.5)
        # The last ping may come from the check that saw the lcore still move before the stall (half a period).
        late = [t - stalled_at for t in notify.pings(after=stalled_at)]
        assert all(d < WATCHDOG_USEC / 2e6 + 0.2 for d in late), late
        kill = notify.first_kill(WATCHDOG_USEC, time.monotonic())
        assert kill is not None and kill - stalled_at <= 1.5 * WATCHDOG_USEC / 1e6 + 0.2, (kill, stalled_at)
        assert "lcore 1 is stalled (its poll counter stopped); withholding the systemd watchdog ping" in sluice.log()
        # sluice itself neither exits nor stops answering: systemd's kill (WatchdogSignal) and restart do the rest.
        assert sluice.proc.poll() is None and sluice.telemetry.query("/sluice/config")["hash"]

        stalled.release()
        resumed_at = time.monotonic()
        assert notify.collect(until=lambda: len(notify.pings(after=resumed_at)) >= 2, timeout=3), notify.messages
        assert sluice.stop() == 0, sluice.log()
    finally:
        if stalled:
            stalled.release()
        sluice.kill()
        notify.close()
    assert "mbufs returned" in sluice.log() and "leaked" not in sluice.log()


def test_a_dry_run_longer_than_watchdog_sec_extends_the_watchdog_as_a_reload_does(tmp_path):
    sluice, notify = start_notified(tmp_path, IDLE_CONFIG)
    try:
        # 40k rules: rte_acl builds them in seconds on these machines, beyond WatchdogSec.
        candidate = dict(IDLE_CONFIG, eal=yaml.safe_load(sluice.config_path.read_text())["eal"], metrics={"listen": ""})
        del candidate["firewall"]
        rules = "".join(f"  - {{name: r{i}, source: 10.{i // 250 % 250}.{i % 250}.0/24, protocol: tcp, "
                        f"destination_ports: {1 + i % 60000}, action: allow}}\n" for i in range(40000))
        path = tmp_path / "candidate.yaml"  # written as text: yaml.safe_dump of 40k rules takes seconds
        path.write_text(yaml.safe_dump(candidate, sort_keys=False) + "firewall:\n default: deny\n rules:\n" + rules)
        hash_before = sluice.telemetry.query("/sluice/config")["hash"]
        began = time.monotonic()
        ctl = subprocess.Popen([SLUICECTL, "--prefix", sluice.prefix, "reload", "--dry-run", str(path)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert notify.collect(until=lambda: ctl.poll() is not None, timeout=120)
        ended = time.monotonic()
        out = ctl.stdout.read()  # every rule added is listed: the answer is cut at telemetry's 16 KiB
        assert ctl.returncode == 0 and out.startswith("rule added: "), out[:2000]
        assert sluice.telemetry.query("/sluice/config")["hash"] == hash_before
        assert ended - began > 1.2 * WATCHDOG_USEC / 1e6, "the dry run was too quick to prove anything"
        notify.collect(seconds=1.5)

        during = [(t, lines) for t, lines in notify.messages if began <= t <= ended]
        assert any(f"WATCHDOG_USEC={EXTENDED_USEC}" in lines for _, lines in during), during
        back = [lines for t, lines in notify.messages if t > began and f"WATCHDOG_USEC={WATCHDOG_USEC}" in lines]
        assert back and "WATCHDOG=1" in back[0], notify.messages[-5:]
        assert notify.first_kill(WATCHDOG_USEC, time.monotonic(), since=began) is None, notify.messages
        assert sluice.stop() == 0, sluice.log()
    finally:
        sluice.kill()
        notify.close()


STOP_BOUND_S = 5  # docs/operations/start-stop.md, "Stopping"


def looping_config(tmp_path):
    """p0 replays a pcap forever (infinite_rx) through the firewall and conntrack; two workers, one on the RX lcore."""
    flows = [Ether(src="02:aa:00:00:00:01", dst="02:bb:00:00:00:01") / IP(src=f"10.0.{i // 200}.{i % 200 + 1}",
                                                                         dst="10.1.0.1") /
             (UDP(sport=1000 + i, dport=53) if i % 2 else TCP(sport=1000 + i, dport=80, flags="S"))
             for i in range(2000)]
    wrpcap(str(tmp_path / "loop.pcap"), flows)
    return {
        "dataplane": {"idle_sleep_us": 0},
        "ports": [
            {"name": "p0", "device": f"net_pcap0,rx_pcap={tmp_path}/loop.pcap,tx_pcap={tmp_path}/unused0.pcap,"
                                     f"tx_pcap={tmp_path}/unused1.pcap,infinite_rx=1"},
            {"name": "p1", "device": "net_null0,no-rx=1"},
        ],
        "lcores": [{"id": 1, "roles": ["rx", "worker"]}, {"id": 2, "roles": ["worker"]}],
        "forward": [{"from": "p0", "to": "p1", "next_hop_mac": "02:00:00:00:00:02"},
                    {"from": "p1", "to": "p0", "next_hop_mac": "02:00:00:00:00:03"}],
        "firewall": {"default": "deny", "rules": [{"name": "looping", "source": "10.0.0.0/16", "action": "allow"}]},
    }


def wait_forwarding(sluice, packets=20000):
    tx = sluice.stats()["port/p1/tx_packets"]
    wait_until(lambda: sluice.stats()["port/p1/tx_packets"] > tx + packets, timeout=60, what="traffic to flow")


def test_stops_under_traffic_within_the_bound_with_every_mbuf_back(tmp_path):
    sluice = Sluice(tmp_path, looping_config(tmp_path), lcores="0@0,1@1,2@1")
    with sluice:
        # a stop is proven under load once a good many packets went through (ASan builds take a few seconds)
        wait_forwarding(sluice, packets=100000)
        stats = sluice.stats()
        assert stats["conn_entries"] > 0, stats
        began = time.monotonic()
        assert sluice.stop(timeout=30) == 0, sluice.log()
        took = time.monotonic() - began
    log = sluice.log()
    assert took < STOP_BOUND_S, f"stopped in {took:.1f} s:\n{log[-2000:]}"
    assert "data plane stopped in" in log and "leaked" not in log
    assert re.search(r"all \d+ mbufs returned", log), log[-1500:]


def test_a_stop_held_up_by_a_stalled_lcore_says_which_lcore_and_stage_it_waits_for(tmp_path):
    sluice = Sluice(tmp_path, looping_config(tmp_path), lcores="0@0,1@1,2@1")
    stalled = None
    with sluice:
        try:
            wait_forwarding(sluice)
            stalled = StoppedThread(lcore_thread(sluice.proc.pid, 1))  # the RX lcore
            sluice.proc.send_signal(signal.SIGTERM)
            wait_until(lambda: "waiting for lcore 1 to stop receiving" in sluice.log(), timeout=5,
                       what="the stop to say what it waits for")
            assert sluice.proc.poll() is None
            stalled.release()
            stalled = None
            assert sluice.proc.wait(timeout=STOP_BOUND_S) == 0, sluice.log()
        finally:
            if stalled:
                stalled.release()
    log = sluice.log()
    line = next(l for l in log.splitlines() if "waiting for lcore 1 to stop receiving" in l)
    assert "its poll counter is at" in line and "stopping for 1." in line, line
    assert "mbufs returned" in log and "leaked" not in log, log[-1500:]

"""Runs a real sluice process for a test: writes its config, starts it, talks to its DPDK telemetry socket, and
stops it with SIGTERM the way an operator would."""

import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
SLUICE = Path(os.environ.get("SLUICE_BIN", ROOT / "build/app/sluice/sluice"))
_counter = itertools.count()


def wait_until(predicate, timeout=10.0, interval=0.05, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what}")


class FramesLostBeforeSluice(Exception):
    """The kernel's capture ring behind a net_pcap rx_iface overflowed: frames the test sent never reached sluice.
    It holds only a few frames, so a loaded machine that leaves the RX lcore unscheduled for a few ms loses some.
    conftest.py runs a test that failed so again."""


def kernel_missed(stats):
    """Frames the kernel dropped before sluice's ports read them, summed over ports."""
    return sum(v for k, v in stats.items() if k.startswith("port/") and k.endswith("/hw_rx_missed"))


def reload_errors(answer):
    """The errors of a /sluice/config or /sluice/reload answer, whole: telemetry strings hold 127 bytes, so each error
    comes in last_error_pieces, last_error_piece_counts saying how many pieces it took (as sluicectl joins them)."""
    pieces, errors = answer.get("last_error_pieces", []), []
    for count in answer.get("last_error_piece_counts", []):
        errors.append("".join(pieces[:count]))
        pieces = pieces[count:]
    return errors


class Telemetry:
    """Client of DPDK's telemetry v2 socket (what dpdk-telemetry.py speaks)."""

    def __init__(self, prefix):
        self.path = f"/var/run/dpdk/{prefix}/dpdk_telemetry.v2"

    def query(self, command, timeout=2):
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
            s.settimeout(timeout)
            s.connect(self.path)
            greeting = json.loads(s.recv(16384))
            s.send(command.encode())
            reply = json.loads(s.recv(greeting.get("max_output_len", 16384)))
        return reply[command]


class Sluice:
    """A sluice process under test. `config` is a dict dumped to YAML; EAL gets a unique file prefix."""

    def __init__(self, tmp_path, config, lcores="0@0,1@1", netns=None):
        self.netns = netns
        self.prefix = f"sltest-{os.getpid()}-{next(_counter)}"
        eal = [f"--lcores={lcores}", f"--file-prefix={self.prefix}"]
        config = dict(config)
        config["eal"] = eal + list(config.get("eal", []))
        config.setdefault("metrics", {"listen": ""})  # tests that scrape choose a free port
        self.config_path = Path(tmp_path) / f"{self.prefix}.yaml"
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        self.log_path = Path(tmp_path) / f"{self.prefix}.log"
        self.telemetry = Telemetry(self.prefix)
        self.proc = None
        self.returncode = None
        self.tolerated_missed = 0  # kernel-side losses a test took into account (tolerate_kernel_losses)

    def start(self, expect_ready=True, env=None):
        log = open(self.log_path, "w")
        command = [str(SLUICE), "--config", str(self.config_path)]
        if self.netns:  # ip netns exec execs in place, so the pid is sluice's own
            command = self.netns.prefix() + command
        self.proc = subprocess.Popen(command, stdout=log,
                                     stderr=subprocess.STDOUT, env=env)
        log.close()
        if expect_ready:
            try:
                wait_until(lambda: "ready:" in self.log() or self.proc.poll() is not None, timeout=30,
                           what="sluice to start")
            except TimeoutError:
                self.kill()
                raise
            if self.proc.poll() is not None:
                raise RuntimeError(f"sluice exited with {self.proc.returncode} during start:\n{self.log()}")
        return self

    def log(self):
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stats(self):
        return self.telemetry.query("/sluice/stats")

    def routes(self):
        """sluicectl routes' lines, wrapped lines joined."""
        lines = []
        for line in self.telemetry.query("/sluice/routes"):
            if line.startswith(" ") and lines:
                lines[-1] += " " + line.strip()
            else:
                lines.append(line)
        return lines

    def tolerate_kernel_losses(self):
        """For a test that floods on purpose and counts what arrived: the kernel's losses so far are part of it, and
        the waits below look only at losses after this call."""
        self.tolerated_missed = kernel_missed(self.stats())

    def _check_losses(self, s, expected_rx, max_losses=0):
        """Raises FramesLostBeforeSluice once every one of expected_rx frames was read or lost in the kernel (stats s),
        more than max_losses lost since tolerate_kernel_losses. Returns how many were lost since then."""
        missed = kernel_missed(s) - self.tolerated_missed
        if missed > max_losses and s["rx_packets"] + missed >= expected_rx:
            raise FramesLostBeforeSluice(f"the kernel dropped {missed} of {expected_rx} frames before sluice read "
                                         f"them (hw_rx_missed: the RX lcore did not run for a while)")
        return missed

    def wait_received(self, expected_rx, timeout=10):
        """Waits until sluice's ports read expected_rx frames in all (or raises FramesLostBeforeSluice)."""
        def done():
            s = self.stats()
            self._check_losses(s, expected_rx)
            return s["rx_packets"] >= expected_rx
        wait_until(done, timeout=timeout, what=f"{expected_rx} frames in")

    def wait_accounted(self, expected_rx, timeout=15, max_losses=0):
        """Waits until sluice received expected_rx packets and each was sent or dropped. Raises
        FramesLostBeforeSluice if the kernel dropped more than max_losses of them before a net_pcap port read them
        (a flood test that counts what arrived may accept a few: those count as received here)."""
        last = {}

        def done():
            s = last["stats"] = self.stats()
            if s["tx_packets"] + s["drops"] < s["rx_packets"]:
                return None
            missed = self._check_losses(s, expected_rx, max_losses)
            return s if s["rx_packets"] + missed >= expected_rx else None
        try:
            wait_until(done, timeout=timeout, what=f"{expected_rx} packets accounted for")
            # Read once more: one reply sums each lcore's counters in turn, the ports' tx last, so it can show a
            # packet sent while missing a counter the lcore bumped just before sending it (seen: neighbour_replies
            # 3 of 4 with all 4 replies in tx_packets, under ASan). Every counter read now comes after that tx.
            return self.stats()
        except TimeoutError as e:
            s = last.get("stats", {})
            raise TimeoutError(f"{e}: rx {s.get('rx_packets')}, tx {s.get('tx_packets')}, drops {s.get('drops')}, "
                               f"kernel-side losses {kernel_missed(s)}") from None

    def stop(self, timeout=30):
        """SIGTERM, then waits up to timeout (systemd's TimeoutStopSec) for the exit code. A stop that overruns is
        killed, and the error names what each of sluice's threads was waiting in and the end of its log."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.returncode = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            threads = self.threads()
            self.kill()
            tail = "\n".join(self.log().splitlines()[-15:])
            raise TimeoutError(f"sluice did not stop within {timeout}s of SIGTERM; its threads:\n{threads}\n"
                               f"the end of its log:\n{tail}") from None
        self._remove_runtime_dir()
        return self.returncode

    def threads(self):
        """One line per thread of the running process: name, state, kernel wait channel, user CPU ticks."""
        lines = []
        for task in sorted(Path(f"/proc/{self.proc.pid}/task").glob("*")):
            try:
                name = (task / "comm").read_text().strip()
                fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
                wchan = (task / "wchan").read_text().strip() or "-"
            except OSError:
                continue
            lines.append(f"  {task.name} {name}: state {fields[0]}, wchan {wchan}, utime {fields[11]}")
        return "\n".join(lines) or "  (gone)"

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._remove_runtime_dir()

    def _remove_runtime_dir(self):
        # The EAL leaves /var/run/dpdk/PREFIX behind, and a killed sluice its hugepage files (PREFIXmap_N): tests
        # make many prefixes, and the machine has 512 pages. Called once the process is gone.
        shutil.rmtree(os.path.dirname(self.telemetry.path), ignore_errors=True)
        for page in Path("/dev/hugepages").glob(f"{self.prefix}map_*"):
            page.unlink(missing_ok=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.kill()


# Under ASan glibc refuses sluice's heap settings and sluice says so on stderr: no verdict on the config.
HEAP_NOTICE = "sluice: warning: glibc refused the heap settings"


def check_config(path):
    result = subprocess.run([str(SLUICE), "--check-config", str(path)], capture_output=True, text=True, timeout=30)
    result.stderr = "".join(line for line in result.stderr.splitlines(keepends=True)
                            if not line.startswith(HEAP_NOTICE))
    return result

"""dpdk-testpmd in flowgen mode as a memif server: the traffic generator of the memif end-to-end tests."""

import os
import re
import subprocess

from sluice_harness import wait_until

TESTPMD = os.environ.get("TESTPMD", "dpdk-testpmd")


class Flowgen:
    """64 UDP flows of 64-byte frames, as fast as one core makes them, into net_memif0 (role=server) at `socket`.
    Started first: the generator is the server (FIELD-NOTES: memif start order)."""

    def __init__(self, tmp_path, name):
        self.socket = f"/run/sluice-{name}-{os.getpid()}.sock"
        self.prefix = f"{name}-{os.getpid()}"
        self.log = tmp_path / f"{name}-testpmd.log"
        self.proc = subprocess.Popen(
            # stdbuf: testpmd prints its totals with stdio, block-buffered into a file otherwise.
            ["stdbuf", "-o0", TESTPMD, "--lcores=0@0,1@0", "--no-pci", "--in-memory", f"--file-prefix={self.prefix}",
             f"--vdev=net_memif0,role=server,socket={self.socket}", "--",
             "--no-mlockall", "--forward-mode=flowgen", "--flowgen-flows=64", "--txpkts=64", "--burst=32",
             "--port-topology=loop", "--nb-cores=1", "--total-num-mbufs=8192", "-i", "--auto-start"],
            stdin=subprocess.PIPE, stdout=open(self.log, "w"), stderr=subprocess.STDOUT, text=True)
        wait_until(lambda: "testpmd>" in self.text() or self.proc.poll() is not None, timeout=20,
                   what="testpmd to start")
        assert self.proc.poll() is None, self.text()[-3000:]

    def text(self):
        return self.log.read_text(errors="replace")

    def sluice_port(self):
        """The device string of sluice's port facing the generator."""
        return f"net_memif0,role=client,socket={self.socket}"

    def sluice_config(self, firewall):
        """sluice between the generator (port `in`) and net_null (`out`), one lcore, with this firewall section."""
        return {
            "dataplane": {"idle_sleep_us": 0},
            "ports": [{"name": "in", "device": self.sluice_port()}, {"name": "out", "device": "net_null0,no-rx=1"}],
            "lcores": [{"id": 1, "roles": ["rx", "worker"]}],
            "forward": [{"from": "in", "to": "out", "next_hop_mac": "02:00:00:00:00:02"},
                        {"from": "out", "to": "in", "next_hop_mac": "02:00:00:00:00:01"}],
            "firewall": firewall,
        }

    def stop(self):
        """Stops forwarding (testpmd's `stop`: it prints its totals and keeps the memif link up, so sluice can take
        what is still in the ring) and returns how many packets it handed to memif."""
        self.proc.stdin.write("stop\n")
        self.proc.stdin.flush()
        wait_until(lambda: "Forward statistics for port 0" in self.text(), timeout=20, what="testpmd to stop forwarding")
        wait_until(lambda: re.findall(r"TX-packets:\s*(\d+)", self.text().split("Forward statistics for port 0")[-1]),
                   timeout=10, what="testpmd's totals")
        return int(re.findall(r"TX-packets:\s*(\d+)", self.text().split("Forward statistics for port 0")[-1])[0])

    def kill(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        subprocess.run(["rm", "-rf", f"/var/run/dpdk/{self.prefix}"])

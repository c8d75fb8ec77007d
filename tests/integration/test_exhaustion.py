"""Exhaustion and faults (docs/security.md, "Exhaustion"): when a TX queue is full, the packet pool is empty or a
worker's input ring is full, sluice drops the new work and counts it under its reason, does not crash, keeps what it
had already accepted, forwards again by itself once the pressure goes, and gives every mbuf back when it stops
(exit 0: the daemon's leaked-mbuf check fails the exit otherwise).

- TX full: sluice transmits into a net_memif port whose peer, dpdk-testpmd (interactive, its own --file-prefix), is
  connected but not forwarding. The memif ring fills; tx_burst takes nothing more (`tx_full`), and what it refused
  is freed at once. Then testpmd `start`s, receives what sat in the ring, and new frames flow.
- Pool empty: sluice's pools are sized for everything its rings, queues and lcores can hold, so its own traffic
  cannot empty them. A second DPDK process (tests/integration/pool_hog.c, a secondary process of sluice's) takes
  every free mbuf, as a leak or a stalled zero-copy peer would; the RX PMD then cannot allocate and counts
  `rx_nombuf` (telemetry port/NAME/hw_rx_nombuf, metric sluice_port_rx_nombuf_total). The hog gives them back and
  frames flow again.
- Ring full: the RX lcore and the worker share one CPU (EAL --lcores 1@1,2@1) and the ring has 64 slots, so while
  the RX lcore runs and the worker does not, a burst read from a pcap file overflows the ring (`ring_full`) however
  the kernel slices their time. Small batches afterwards are forwarded whole.

Assertions are on counters and eventual states, never on speed: the machine may be busy. A frame libpcap loses in
the kernel on a loaded machine (hw_rx_missed) is accounted for as such.

Frames come in through a veth pair in a namespace of the test's own (net_pcap rx_iface), as in test_firewall.py."""

import logging
import os
import random
import re
import select
import shutil
import socket
import struct
import subprocess
import json
from pathlib import Path

import pytest

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import IP, UDP, Ether, Raw

from netns import Netns
from sluice_harness import SLUICE, Sluice, wait_until

PEER = "02:00:00:00:01:01"        # the host behind lan0
NEXT_HOP = "02:00:00:00:02:01"    # where sluice sends
TESTPMD = shutil.which("dpdk-testpmd")
HOG = SLUICE.parents[2] / "tests/integration/sluice_pool_hog"


@pytest.fixture
def ns():
    namespace = Netns(f"slex{os.getpid()}", ["lan0"])
    yield namespace
    namespace.delete()


def frame(i):
    return Ether(src=PEER, dst="02:00:00:00:00:aa") / IP(src="10.0.0.1", dst="10.9.0.1") / \
        UDP(sport=10000 + i % 1000, dport=7) / Raw(b"exhaustion test.")


def frames(first, count):
    return [frame(i) for i in range(first, first + count)]


def query(prefix, command):
    """DPDK telemetry v2, for any process (the harness's client keys the reply by the full command)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
        s.settimeout(5)
        s.connect(f"/var/run/dpdk/{prefix}/dpdk_telemetry.v2")
        greeting = json.loads(s.recv(16384))
        s.send(command.encode())
        reply = json.loads(s.recv(greeting.get("max_output_len", 16384)))
    return reply[command.split(",")[0]]


def port_id(sluice, name):
    return int(re.search(rf"port '{name}':.*? port id (\d+)", sluice.log()).group(1))


def inject(sluice, count, first=0):
    """Sends `count` frames (numbered from `first`) into lan0, sluice's side of the veth pair."""
    sluice.netns.inject("lan0", frames(first, count), paced=False)


def settled(sluice, arrived, port="lan", timeout=30):
    """Waits until `arrived` frames reached sluice's ports in all (`port`'s kernel-side losses, hw_rx_missed, and
    PMD-side ones, hw_rx_nombuf, included: libpcap may drop a frame on a loaded machine before sluice can see it)
    and every frame sluice received was sent or dropped. On a timeout, fails with the counters it saw."""
    def done():
        s = sluice.stats()
        seen = s["rx_packets"] + s[f"port/{port}/hw_rx_missed"] + s[f"port/{port}/hw_rx_nombuf"]
        return s if seen >= arrived and s["tx_packets"] + s["drops"] >= s["rx_packets"] else None
    try:
        return wait_until(done, timeout=timeout, what=f"{arrived} frames accounted for")
    except TimeoutError:
        stats = {k: v for k, v in sluice.stats().items() if v and k not in ("polls", "busy_polls")}
        raise AssertionError(f"{arrived} frames not accounted for in {timeout} s: {stats}") from None


def only_drops(stats, *reasons):
    """The drop reasons counted, as {reason: count}, which must be among `reasons`."""
    counted = {k[5:]: v for k, v in stats.items() if k.startswith("drop/") and v}
    assert set(counted) <= set(reasons), counted
    return counted


# --- TX queue full -----------------------------------------------------------------------------------------------

class MemifPeer:
    """dpdk-testpmd as the memif server, interactive, forwarding io memif -> net_null only once told `start`.
    stdin stays open (testpmd -i quits at EOF)."""

    def __init__(self, tmp_path, socket_path):
        self.prefix = f"sltest-pmd-{os.getpid()}-{random.randrange(1 << 20)}"
        self.log_path = Path(tmp_path) / "testpmd.log"
        log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [TESTPMD, "--lcores=0@0,1@0", "--no-pci", "--in-memory", f"--file-prefix={self.prefix}",
             f"--vdev=net_memif0,role=server,socket={socket_path},socket-abstract=no",
             "--vdev=net_null0,no-rx=1", "--", "-i", "--no-mlockall", "--forward-mode=io", "--nb-cores=1",
             "--total-num-mbufs=8192", "--burst=32"],
            stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, text=True)
        log.close()

    def log(self):
        return self.log_path.read_text(errors="replace")

    def command(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def rx_packets(self):
        return query(self.prefix, "/ethdev/stats,0")["ipackets"]

    def stop(self):
        if self.proc.poll() is None:
            try:
                self.command("quit")
                self.proc.stdin.close()
                self.proc.wait(timeout=15)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(f"/var/run/dpdk/{self.prefix}", ignore_errors=True)


@pytest.mark.skipif(TESTPMD is None, reason="dpdk-testpmd not installed (Debian package dpdk-dev)")
def test_tx_full_drops_new_packets_keeps_queued_ones_and_recovers(tmp_path, ns):
    socket_path = f"/run/sltest-{os.getpid()}-memif.sock"
    ring = 256  # memif rsize=8: the ring sluice fills
    pmd = MemifPeer(tmp_path, socket_path)
    sluice = None
    try:
        # The server listens before its client starts (FIELD-NOTES: memif start order).
        wait_until(lambda: os.path.exists(socket_path) or pmd.proc.poll() is not None, timeout=30,
                   what="testpmd's memif socket")
        assert pmd.proc.poll() is None, pmd.log()
        config = {
            "dataplane": {"idle_sleep_us": 50},
            "ports": [
                {"name": "lan", "device": f"net_pcap0,rx_iface=lan0,tx_pcap={tmp_path}/lan_out.pcap"},
                {"name": "mem", "device": f"net_memif0,role=client,socket={socket_path},socket-abstract=no,rsize=8"},
            ],
            "lcores": [{"id": 1, "roles": ["rx", "worker"]}],
            "forward": [
                {"from": "lan", "to": "mem", "next_hop_mac": NEXT_HOP},
                {"from": "mem", "to": "lan", "next_hop_mac": PEER},
            ],
        }
        sluice = Sluice(tmp_path, config, netns=ns).start()
        mem = port_id(sluice, "mem")
        wait_until(lambda: query(sluice.prefix, f"/ethdev/link_status,{mem}")["status"] == "UP", timeout=30,
                   what="the memif link to come up")

        # 1. The peer reads nothing: its ring takes `ring` frames, tx_burst refuses the rest (tx_full) and they are
        #    freed at once, not kept.
        first = 3 * ring
        inject(sluice, first)
        received = settled(sluice, first)["port/lan/rx_packets"]
        assert received > ring
        # tx_packets counts a packet when it enters the TX buffer; a refusal shows at the next flush (100 us).
        stats = wait_until(lambda: (s := sluice.stats())["drop/tx_full"] == received - ring and s, timeout=10,
                           what=f"{received - ring} tx_full")
        assert only_drops(stats, "tx_full") == {"tx_full": received - ring}
        assert stats["port/mem/tx_packets"] == ring
        wait_until(lambda: sluice.stats()["mbufs_in_use"] == 0, timeout=10, what="every mbuf back in the pool")
        assert sluice.proc.poll() is None

        # 2. The peer starts reading: the frames the ring took before it filled arrive intact, and new frames flow
        #    (fewer than the ring holds, so none can be refused however the two processes are scheduled).
        pmd.command("start")
        wait_until(lambda: pmd.rx_packets() >= ring, timeout=30, what="testpmd to receive the queued frames")
        assert pmd.rx_packets() == ring
        second = 200
        inject(sluice, second, first=first)
        stats = settled(sluice, first + second)
        more = stats["port/lan/rx_packets"] - received
        assert more > 0 and stats["drop/tx_full"] == received - ring and stats["drops"] == received - ring
        assert stats["port/mem/tx_packets"] == ring + more
        wait_until(lambda: pmd.rx_packets() == ring + more, timeout=30, what="testpmd to receive every frame sent")
        assert sluice.stop() == 0, sluice.log()
        assert re.search(r"all \d+ mbufs returned", sluice.log())
    finally:
        if sluice:
            sluice.kill()
        pmd.stop()
        if os.path.exists(socket_path):
            os.unlink(socket_path)


# --- packet pool empty -------------------------------------------------------------------------------------------

class PoolHog:
    """sluice_pool_hog: a secondary process of sluice's that holds every free mbuf of a pool until released."""

    def __init__(self, sluice, pool):
        self.args = [str(HOG), pool, f"--file-prefix={sluice.prefix}", "--proc-type=secondary", "--no-pci", "-l", "0",
                     "--log-level=lib.eal:error", "--no-telemetry"]
        self.proc = None

    def start(self, attempts=5):
        """Starts the hog; returns its first line, split ("held N"). A secondary process must map sluice's memory
        at the addresses sluice has it at, and address space randomisation can have put one of the hog's own
        mappings there first (EAL: "Cannot get a virtual area at requested address"; DPDK's multi-process guide
        names ASLR). A new process gets a new layout, so that case is tried again."""
        for attempt in range(1, attempts + 1):
            self.proc = subprocess.Popen(self.args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, text=True)
            try:
                return self.read()
            except AssertionError as e:
                if attempt == attempts or "Cannot get a virtual area" not in str(e):
                    raise
                print(f"pool hog: attempt {attempt} could not map sluice's memory at its addresses; again")

    def read(self, timeout=30):
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ""
        if not line and ready:  # end of file: the hog is exiting; wait for it so that its stderr can be shown
            self.proc.wait(timeout=15)
        assert line, f"pool hog said nothing (exit {self.proc.poll()}): {self.proc.stderr.read() if self.proc.poll() is not None else ''}"
        return line.split()

    def release(self):
        self.proc.stdin.write("release\n")
        self.proc.stdin.flush()
        return self.read()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


@pytest.mark.skipif(not HOG.exists(), reason=f"{HOG} not built")
def test_empty_pool_drops_at_rx_counts_rx_nombuf_and_recovers(tmp_path, ns):
    config = {
        "dataplane": {"idle_sleep_us": 50},
        "ports": [{"name": "lan", "device": f"net_pcap0,rx_iface=lan0,tx_pcap={tmp_path}/lan_out.pcap"}],
        "lcores": [{"id": 1, "roles": ["rx", "worker"]}],
        "forward": [{"from": "lan", "to": "lan", "next_hop_mac": NEXT_HOP}],
    }
    sluice = Sluice(tmp_path, config, netns=ns)
    with sluice:
        socket_id, size = re.search(r"mempool on socket (\d+): (\d+) mbufs", sluice.log()).groups()
        # Before any traffic, so that no lcore's cache holds a spare mbuf: the hog takes the whole pool.
        hog = PoolHog(sluice, f"sluice_pool_s{socket_id}")
        try:
            verb, held = hog.start()
            assert verb == "held" and int(held) == int(size)
            assert sluice.stats()["mbufs_in_use"] == int(size)

            # 1. No mbuf: the PMD drops each frame as it reads it and counts it (rx_nombuf); sluice never sees
            #    them, and goes on polling.
            first = 100
            inject(sluice, first)
            stats = settled(sluice, first)
            assert stats["rx_packets"] == 0
            assert stats["port/lan/hw_rx_nombuf"] > 0
            assert stats["port/lan/hw_rx_nombuf"] + stats["port/lan/hw_rx_missed"] == first
            nombuf, missed = stats["port/lan/hw_rx_nombuf"], stats["port/lan/hw_rx_missed"]
            assert sluice.proc.poll() is None

            # 2. The mbufs come back: new frames flow, no more rx_nombuf.
            verb, released = hog.release()
            assert verb == "released" and int(released) == int(size)
            second = 100
            inject(sluice, second, first=first)
            stats = settled(sluice, first + second)
            assert stats["port/lan/hw_rx_nombuf"] == nombuf
            assert stats["rx_packets"] + stats["port/lan/hw_rx_missed"] - missed == second
            assert stats["rx_packets"] > 0 and stats["tx_packets"] == stats["rx_packets"] and stats["drops"] == 0
        finally:
            hog_exit = hog.stop()
        assert hog_exit == 0, hog.proc.stderr.read()
        assert sluice.stop() == 0, sluice.log()
        assert re.search(r"all \d+ mbufs returned", sluice.log())


# --- worker ring full --------------------------------------------------------------------------------------------

def write_pcap(path, raw_frames):
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for raw in raw_frames:
            f.write(struct.pack("<IIII", 0, 0, len(raw), len(raw)) + raw)


def test_full_worker_ring_drops_at_rx_and_recovers(tmp_path, ns):
    burst = 20_000
    distinct = [bytes(f) for f in frames(0, 64)]
    write_pcap(tmp_path / "burst.pcap", (distinct[i % 64] for i in range(burst)))
    config = {
        "dataplane": {"ring_size": 64, "idle_sleep_us": 0},
        "ports": [
            {"name": "burst", "device": f"net_pcap0,rx_pcap={tmp_path}/burst.pcap,tx_pcap={tmp_path}/burst_out.pcap"},
            {"name": "lan", "device": f"net_pcap1,rx_iface=lan0,tx_pcap={tmp_path}/lan_out.pcap"},
            {"name": "out", "device": "net_null0,no-rx=1"},
        ],
        # Two lcores on one CPU: while the RX lcore has the CPU the worker does not, and the 64-slot ring (63
        # usable) overflows within a few RX bursts.
        "lcores": [{"id": 1, "roles": ["rx"]}, {"id": 2, "roles": ["worker"]}],
        "forward": [
            {"from": "burst", "to": "out", "next_hop_mac": NEXT_HOP},
            {"from": "lan", "to": "out", "next_hop_mac": NEXT_HOP},
        ],
    }
    sluice = Sluice(tmp_path, config, lcores="0@0,1@1,2@1", netns=ns)
    with sluice:
        # 1. The whole file as fast as the RX lcore reads it: the worker forwards what its ring took, the rest is
        #    ring_full. Nothing taken into the ring is lost.
        stats = settled(sluice, burst, timeout=60)
        full = only_drops(stats, "ring_full").get("ring_full", 0)
        assert full > 0, "the ring never filled"
        assert stats["tx_packets"] > 0 and stats["tx_packets"] + full == burst
        assert stats["ring_enqueued"] == stats["ring_dequeued"] == stats["tx_packets"]
        assert stats["ring_backlog"] == 0

        # 2. Afterwards, small batches (each fewer frames than the ring holds, the ring empty before each) are
        #    forwarded whole: the worker is back to keeping up, with no restart.
        arrived = burst
        for batch in range(3):
            inject(sluice, 40, first=40 * batch)
            arrived += 40
            stats = settled(sluice, arrived)
            assert stats["ring_backlog"] == 0
        assert stats["drop/ring_full"] == full and stats["drops"] == full
        assert stats["port/out/tx_packets"] == burst - full + stats["port/lan/rx_packets"]
        assert stats["port/lan/rx_packets"] + stats["port/lan/hw_rx_missed"] == 120
        assert sluice.stop() == 0, sluice.log()
        print(f"ring_full: {full} of {burst} frames of the burst; {stats['port/lan/rx_packets']} later frames "
              f"all forwarded")

"""Packet capture with dpdk-dumpcap (package dpdk-dev) against a running sluice, as docs/operations/capture.md ("Packet
capture") tells an operator to do it: dumpcap attaches as a DPDK secondary process, captures one port's received and
sent packets into pcapng, and sluice keeps forwarding whether the capture stops cleanly or is killed.

The ports are net_af_packet on veth pairs in a namespace of the test's own: a kernel interface, as in production.
(net_pcap suits captures badly: a secondary process's probe of a net_pcap port reopens its tx_pcap files, truncating
what the primary wrote, and its exit marks the primary's link down.)"""

import logging
import os
import re
import shutil
import signal
import struct
import subprocess
import tempfile
from pathlib import Path

import pytest

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import IP, UDP, Ether, Raw

from netns import Netns
from sluice_harness import SLUICE, Sluice, wait_until

DUMPCAP = "/usr/bin/dpdk-dumpcap"
CLIENT_PEER, SERVER_PEER = "02:00:00:00:01:01", "02:00:00:00:02:01"
CLIENT_MAC, SERVER_MAC = "02:00:00:00:00:0a", "02:00:00:00:00:0b"  # sluice's ports (the veth ends it opens)
CLIENT, SERVER = "10.0.0.1", "10.1.0.1"

# ASan's shadow covers the EAL's default base address, so an ASan sluice maps its hugepages wherever mmap puts them,
# often where the secondary (not sanitized) has its own libraries: "Cannot reserve ... please use '--base-virtaddr'".
# An address far above both the shadow and the usual mmap area fits both processes.
SANITIZED = "libasan" in subprocess.run(["ldd", str(SLUICE)], capture_output=True, text=True).stdout
BASE_ADDRESS = ["--base-virtaddr=0x200000000000"] if SANITIZED else []


@pytest.fixture
def ns():
    namespace = Netns(f"sldc{os.getpid()}", ["cl0", "sv0"])
    namespace.exec("ip", "link", "set", "cl0", "address", CLIENT_MAC)
    namespace.exec("ip", "link", "set", "sv0", "address", SERVER_MAC)
    yield namespace
    namespace.delete()


def config(eal=()):
    return {
        "eal": BASE_ADDRESS + list(eal),
        "dataplane": {"idle_sleep_us": 50},
        "ports": [{"name": "client", "device": "net_af_packet0,iface=cl0"},
                  {"name": "server", "device": "net_af_packet1,iface=sv0"}],
        "lcores": [{"id": 1, "roles": ["rx", "worker"]}],
        "forward": [{"from": "client", "to": "server", "next_hop_mac": SERVER_PEER},
                    {"from": "server", "to": "client", "next_hop_mac": CLIENT_PEER}],
    }


def requests(count, first_port=20000):
    return [Ether(src=CLIENT_PEER, dst=CLIENT_MAC) / IP(src=CLIENT, dst=SERVER, ttl=64) /
            UDP(sport=first_port + i, dport=7000) / Raw(b"request %05d" % i) for i in range(count)]


def replies(count):
    return [Ether(src=SERVER_PEER, dst=SERVER_MAC) / IP(src=SERVER, dst=CLIENT, ttl=64) /
            UDP(sport=7000, dport=20000 + i) / Raw(b"reply %05d" % i) for i in range(count)]


def forwarded(frame, port_mac, next_hop):
    """The frame sluice sends for a frame it forwards: MACs rewritten, TTL one less, IPv4 checksum valid."""
    inner = frame[IP].copy()
    inner.ttl -= 1
    del inner.chksum
    return bytes(Ether(src=port_mac, dst=next_hop) / inner)


INBOUND, OUTBOUND = 1, 2  # pcapng epb_flags, bits 0-1: the packet's direction on the interface


def read_pcapng(path):
    """(interface name, direction, frame bytes) of each packet of a pcapng file, in order. scapy's reader keeps
    neither the interface nor the direction, so the blocks are walked here (pcapng: IDB type 1, EPB type 6)."""
    data = path.read_bytes()
    assert data[:4] == b"\x0a\x0d\x0d\x0a", f"{path} is not pcapng"
    interfaces, packets, offset = [], [], 0

    def options(raw):
        found, at = {}, 0
        while at + 4 <= len(raw):
            code, length = struct.unpack_from("<HH", raw, at)
            if code == 0:
                break
            found[code] = raw[at + 4:at + 4 + length]
            at += 4 + (length + 3) // 4 * 4
        return found

    while offset + 12 <= len(data):
        block_type, block_length = struct.unpack_from("<II", data, offset)
        body = data[offset + 8:offset + block_length - 4]
        if block_type == 1:
            interfaces.append(options(body[8:]).get(2, b"").decode())  # if_name
        elif block_type == 6:
            interface, _, _, captured, _ = struct.unpack_from("<IIIII", body)
            flags = options(body[20 + (captured + 3) // 4 * 4:]).get(2)
            direction = struct.unpack("<I", flags)[0] & 3 if flags else 0
            packets.append((interfaces[interface], direction, body[20:20 + captured]))
        offset += block_length
    return packets


class Dumpcap:
    """One dpdk-dumpcap on one of sluice's ports. DPDK 22.11's dumpcap captures a single interface (given several -i it
    takes the last), so a capture of two ports is two processes. It runs in sluice's namespace, as an operator would
    where sluice runs in one."""

    def __init__(self, sluice, device, path, env=None, prefix=None):
        self.path = path
        self.err_path = path.with_suffix(".stderr")
        command = sluice.netns.prefix() + [DUMPCAP, f"--file-prefix={prefix or sluice.prefix}", "-i", device,
                                           "-w", str(path)]
        with open(self.err_path, "w") as err:
            self.proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=err, env=env)

    def stderr(self):
        return self.err_path.read_text(errors="replace")

    def wait_attached(self):
        # Printed once rte_pdump_enable returned: sluice's lcores copy the port's packets from then on.
        wait_until(lambda: "Packets captured" in self.stderr() or self.proc.poll() is not None, timeout=30,
                   what="dpdk-dumpcap to attach")
        assert self.proc.poll() is None, f"dpdk-dumpcap exited with {self.proc.returncode}:\n{self.stderr()}"
        return self

    def stop(self):
        """Ctrl-C, as an operator stops it: dumpcap disables the capture in sluice and closes the file."""
        self.proc.send_signal(signal.SIGINT)
        assert self.proc.wait(timeout=30) == 0, self.stderr()
        return read_pcapng(self.path)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def wait_failed(self):
        return self.proc.wait(timeout=30)


def captured_count(capture_stderr, device):
    found = re.search(rf"Packets received/dropped on interface '{device}': (\d+)/(\d+)", capture_stderr)
    assert found, capture_stderr
    return int(found.group(1)), int(found.group(2))


def test_dumpcap_captures_what_each_port_receives_and_sends(tmp_path, ns):
    sluice = Sluice(tmp_path, config(), netns=ns)
    sent_in, sent_back = requests(40), replies(10)
    with sluice:
        client = Dumpcap(sluice, "net_af_packet0", tmp_path / "client.pcapng").wait_attached()
        server = Dumpcap(sluice, "net_af_packet1", tmp_path / "server.pcapng").wait_attached()
        ns.inject("cl0", sent_in)
        sluice.wait_accounted(len(sent_in))
        ns.inject("sv0", sent_back)
        stats = sluice.wait_accounted(len(sent_in) + len(sent_back))
        assert stats["drops"] == 0 and stats["tx_packets"] == len(sent_in) + len(sent_back), stats
        on_client, on_server = client.stop(), server.stop()
        assert captured_count(client.stderr(), "net_af_packet0") == (len(sent_in) + len(sent_back), 0)
        assert captured_count(server.stderr(), "net_af_packet1") == (len(sent_in) + len(sent_back), 0)
        assert sluice.stop() == 0, sluice.log()
    log = sluice.log()
    assert re.search(r"all \d+ mbufs returned", log) and "leaked" not in log, log
    assert "Link down" not in log, log  # the secondary's exit left the ports alone

    # Each capture holds its own port's packets only (pcapng names the interface), both directions, in order, byte
    # for byte: what the peer sent as it was sent, what sluice sent as it left the port.
    assert {name for name, _, _ in on_client} == {"cl0"} and {name for name, _, _ in on_server} == {"sv0"}
    want_client = [(INBOUND, bytes(f)) for f in sent_in] + \
                  [(OUTBOUND, forwarded(f, CLIENT_MAC, CLIENT_PEER)) for f in sent_back]
    want_server = [(OUTBOUND, forwarded(f, SERVER_MAC, SERVER_PEER)) for f in sent_in] + \
                  [(INBOUND, bytes(f)) for f in sent_back]
    assert [(d, f) for _, d, f in on_client] == want_client
    assert [(d, f) for _, d, f in on_server] == want_server
    # Read back with scapy: the forwarded request is the one sent, one hop on.
    first = Ether(on_server[0][2])
    assert first[IP].src == CLIENT and first[IP].ttl == 63 and bytes(first[UDP].payload) == b"request 00000"


def test_a_killed_capture_leaves_sluice_forwarding_and_every_mbuf_returned(tmp_path, ns):
    sluice = Sluice(tmp_path, config(), netns=ns)
    with sluice:
        killed = Dumpcap(sluice, "net_af_packet1", tmp_path / "killed.pcapng").wait_attached()
        ns.inject("cl0", requests(20))
        sluice.wait_accounted(20)
        killed.kill()  # SIGKILL: no chance to disable the capture in sluice
        # More than the dead capture's ring holds (2048 by default): sluice's lcore copies into it until it is full,
        # then drops the copies, never the traffic.
        after = requests(3000, first_port=30000)
        ns.inject("cl0", after, paced=True)
        stats = sluice.wait_accounted(20 + len(after), timeout=60)
        assert stats["drops"] == 0 and stats["port/server/tx_packets"] == 20 + len(after), stats

        # The killed capture's hooks stay in sluice: that port cannot be captured again until sluice restarts,
        # while a clean capture of the other port still works (docs/operations/capture.md says both).
        again = Dumpcap(sluice, "net_af_packet1", tmp_path / "again.pcapng")
        assert again.wait_failed() != 0 and "Packet dump enable failed" in again.stderr(), again.stderr()
        other = Dumpcap(sluice, "net_af_packet0", tmp_path / "other.pcapng").wait_attached()
        ns.inject("cl0", requests(5, first_port=40000))
        sluice.wait_accounted(20 + len(after) + 5)
        assert [bytes(f) for f in requests(5, first_port=40000)] == [f for _, _, f in other.stop()]
        assert sluice.stop() == 0, sluice.log()
    log = sluice.log()
    assert re.search(r"all \d+ mbufs returned", log) and "leaked" not in log, log


def test_dumpcap_finds_sluice_in_systemds_runtime_directory(tmp_path, ns):
    """Under the unit, RuntimeDirectory=sluice puts the EAL's files in $RUNTIME_DIRECTORY/dpdk/<prefix>/: dumpcap
    needs the same RUNTIME_DIRECTORY, or it finds no primary."""
    runtime = Path(tempfile.mkdtemp(prefix="sldc", dir="/run"))  # short: unix socket paths hold 108 bytes
    env = dict(os.environ, RUNTIME_DIRECTORY=str(runtime))
    sluice = Sluice(tmp_path, config(), netns=ns)
    sluice.start(env=env)
    try:
        assert (runtime / "dpdk" / sluice.prefix / "config").exists()
        lost = Dumpcap(sluice, "net_af_packet0", tmp_path / "lost.pcapng")
        assert lost.wait_failed() != 0 and "is primary process running?" in lost.stderr(), lost.stderr()
        capture = Dumpcap(sluice, "net_af_packet0", tmp_path / "found.pcapng", env=env).wait_attached()
        ns.inject("cl0", requests(3))
        wait_until(lambda: captured_now(capture) >= 3, what="3 packets captured")
        assert [f for _, _, f in capture.stop()] == [bytes(f) for f in requests(3)]
    finally:
        sluice.proc.send_signal(signal.SIGTERM)
        assert sluice.proc.wait(timeout=30) == 0, sluice.log()
        sluice.kill()
        shutil.rmtree(runtime, ignore_errors=True)
    assert re.search(r"all \d+ mbufs returned", sluice.log())


def captured_now(capture):
    """The running count dumpcap prints on stderr."""
    counts = re.findall(r"(\d+) ", capture.stderr().split("Packets captured:")[-1])
    return int(counts[-1]) if counts else 0


@pytest.mark.parametrize("eal", [["--in-memory"], ["--no-huge", "-m", "256"]], ids=["in-memory", "no-huge"])
def test_eal_options_without_shared_memory_exclude_capture_and_sluice_says_so(tmp_path, ns, eal):
    sluice = Sluice(tmp_path, config(eal), netns=ns)
    with sluice:
        refused = Dumpcap(sluice, "net_af_packet0", tmp_path / "refused.pcapng")
        assert refused.wait_failed() != 0 and "is primary process running?" in refused.stderr(), refused.stderr()
        assert sluice.stop() == 0, sluice.log()
    assert re.search(rf"warning: packet capture: dpdk-dumpcap cannot attach \({eal[0]}", sluice.log()), sluice.log()

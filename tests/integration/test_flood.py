"""A SYN flood from random sources at a destination the firewall allows, with a few established connections
flowing through it: with dataplane.max_new_connections_per_second the worker admits what its bucket holds (burst +
rate x time) and drops the rest as new_conn_limited, and every packet of the established connections passes; without
the cap the same flood is admitted whole (so the test can fail).

Frames go in through veth pairs read by net_pcap (as in test_firewall.py), sent by a small raw-socket sender paced at
FLOOD_PPS (scapy's sendp is too slow for 20,000 frames). Established packets carry their send time (CLOCK_REALTIME,
ns) in their last 8 bytes; net_pcap stamps what it writes with the TSC since a gettimeofday() at start, so
out - in is their latency through sluice (plus the veth and libpcap hop), printed, not asserted."""

import random
import struct
import time

import pytest

from netns import Netns
from sluice_harness import Sluice, kernel_missed
from test_firewall import INSIDE, OUTSIDE, firewall_config, lan, wan

from scapy.all import IP, TCP, Raw

FLOOD = 20_000
RATE, BURST = 1000, 2000   # per worker; the test runs one
FLOOD_PPS = 7000           # about 3 s of flood: RATE x 3 s + BURST stays far below FLOOD
# A net_pcap port's kernel capture ring holds few frames: when the RX lcore is away long enough (the ASan build on
# a busy 2-core machine), the kernel drops some of the flood before sluice sees it (hw_rx_missed). Up to this many
# are taken into account below (they cannot blur the difference between the cap's ~5,000 and the flood's 20,000);
# more make the harness run the test again.
MAX_KERNEL_LOSSES = FLOOD // 10
ESTABLISHED = 4            # connections opened before the flood
EVERY = 20                 # one established packet per EVERY flood SYNs, alternately each way
MARK = b"EST!"

SENDER = r'''
import errno, socket, struct, sys, time
socks = []
for name in sys.argv[1].split(","):
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    s.bind((name, 0))
    socks.append(s)
data, pps = open(sys.argv[2], "rb").read(), float(sys.argv[3])
frames, off = [], 0
while off < len(data):
    which, length = struct.unpack_from("!BH", data, off)
    frames.append((socks[which], bytearray(data[off + 3:off + 3 + length])))
    off += 3 + length
start = time.monotonic()
for n, (sock, frame) in enumerate(frames, 1):
    if frame[-12:-8] == b"EST!":
        frame[-8:] = struct.pack("!Q", time.time_ns())
    while True:
        try:
            sock.send(frame)
            break
        except OSError as e:  # the veth's queue is full: wait, never lose a frame here
            if e.errno != errno.ENOBUFS:
                raise
            time.sleep(0.0005)
    if pps > 0 and n % 16 == 0:
        ahead = start + n / pps - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)
'''


@pytest.fixture
def ns():
    namespace = Netns(f"slfl{random.randrange(1 << 30)}", ["lan0", "wan0"])
    yield namespace
    namespace.delete()


def send(ns, tmp_path, frames, pps=0.0):
    """frames: (0 for lan0 / 1 for wan0, scapy packet or bytes), sent in order by the raw-socket sender."""
    path = tmp_path / f"frames-{time.monotonic_ns()}.bin"
    with open(path, "wb") as out:
        for which, frame in frames:
            raw = bytes(frame)
            out.write(struct.pack("!BH", which, len(raw)) + raw)
    ns.exec("/usr/bin/python3", "-c", SENDER, "lan0p,wan0p", str(path), str(pps))
    return len(frames)


def checksum(data):
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def flood_syns(count, seed):
    """SYNs from random sources (random ports) to INSIDE:80, as bytes: one scapy template, patched (fast)."""
    template = bytearray(bytes(wan(IP(src="1.1.1.1", dst=INSIDE) / TCP(sport=1, dport=80, flags="S", seq=1))))
    rng = random.Random(seed)
    frames = []
    for _ in range(count):
        frame = bytearray(template)
        src = rng.randrange(0x0B000000, 0xDF000000)  # 11.0.0.0 .. 222.255.255.255
        while src >> 24 == 127 or src >> 16 == 0xA9FE:  # martian sources (loopback, link-local) are dropped on RX
            src = rng.randrange(0x0B000000, 0xDF000000)
        frame[26:30] = struct.pack("!I", src)
        frame[34:36] = struct.pack("!H", rng.randrange(1024, 65536))
        frame[24:26] = b"\0\0"
        frame[24:26] = struct.pack("!H", checksum(bytes(frame[14:34])))
        frame[50:52] = b"\0\0"
        pseudo = bytes(frame[26:34]) + struct.pack("!BBH", 0, 6, len(frame) - 34)
        frame[50:52] = struct.pack("!H", checksum(pseudo + bytes(frame[34:])))
        frames.append((1, bytes(frame)))
    return frames


def read_pcap(path):
    """(timestamp in s, frame) of every record; microsecond or nanosecond pcap."""
    if not path.exists():
        return []
    data = path.read_bytes()
    magic = struct.unpack_from("<I", data, 0)[0]
    endian = "<" if magic in (0xA1B2C3D4, 0xA1B23C4D) else ">"
    magic = struct.unpack_from(endian + "I", data, 0)[0]
    scale = 1e-9 if magic == 0xA1B23C4D else 1e-6
    records, off = [], 24
    while off + 16 <= len(data):
        sec, frac, caplen, _ = struct.unpack_from(endian + "IIII", data, off)
        records.append((sec + frac * scale, data[off + 16:off + 16 + caplen]))
        off += 16 + caplen
    return records


def run_flood(tmp_path, ns, cap):
    config = firewall_config(tmp_path)
    config["firewall"]["rules"].insert(0, {"name": "web-in", "in_ports": ["wan"], "protocol": "tcp",
                                           "destination_ports": 80, "action": "allow"})
    if cap:
        config["dataplane"].update({"max_new_connections_per_second": RATE, "new_connection_burst": BURST})
    ports = [41000 + k for k in range(ESTABLISHED)]
    opening = [[(0, lan(IP(src=INSIDE, dst=OUTSIDE) / TCP(sport=p, dport=80, flags="S", seq=100))) for p in ports],
               [(1, wan(IP(src=OUTSIDE, dst=INSIDE) / TCP(sport=80, dport=p, flags="SA", seq=900, ack=101)))
                for p in ports],
               [(0, lan(IP(src=INSIDE, dst=OUTSIDE) / TCP(sport=p, dport=80, flags="A", seq=101, ack=901)))
                for p in ports]]
    frames = []
    for n, syn in enumerate(flood_syns(FLOOD, seed=9)):
        frames.append(syn)
        if n % EVERY == EVERY - 1:
            k = n // EVERY
            p = ports[k % ESTABLISHED]
            payload = Raw(MARK + struct.pack("!Q", 0))
            if k % 2:  # the server's data, from outside
                frames.append((1, wan(IP(src=OUTSIDE, dst=INSIDE) / TCP(sport=80, dport=p, flags="PA", seq=901 + k,
                                                                         ack=101) / payload)))
            else:
                frames.append((0, lan(IP(src=INSIDE, dst=OUTSIDE) / TCP(sport=p, dport=80, flags="PA", seq=101 + k,
                                                                         ack=901) / payload)))
    established = [bytes(f) for w, f in frames if not isinstance(f, bytes)]
    frames = [(w, bytes(f)) for w, f in frames]

    sluice = Sluice(tmp_path, config, netns=ns)
    with sluice:
        sent = 0
        for phase in opening:
            sent += send(ns, tmp_path, phase)
            sluice.wait_accounted(sent, timeout=10)
            time.sleep(0.1)
        time.sleep(ESTABLISHED / RATE + 0.2)  # the bucket refills what the handshakes took
        assert sluice.stats()["conn_entries"] == ESTABLISHED
        started = time.monotonic()
        sent += send(ns, tmp_path, frames, pps=FLOOD_PPS)
        stats = sluice.wait_accounted(sent, timeout=30, max_losses=MAX_KERNEL_LOSSES)
        elapsed = time.monotonic() - started
        missed = kernel_missed(stats)  # all in the flood: the opening phases tolerated none
        received = stats["rx_packets"] - (sent - len(frames))
        assert sluice.stop() == 0, sluice.log()

    admitted, est_out, latency = [], 0, []
    for name in ("lan_out.pcap", "wan_out.pcap"):
        for ts, frame in read_pcap(tmp_path / name):
            if len(frame) < 54 or frame[23] != 6:
                continue
            if frame[-12:-8] == MARK:
                est_out += 1
                latency.append(ts - struct.unpack("!Q", frame[-8:])[0] * 1e-9)
            elif name == "lan_out.pcap" and frame[47] == 0x02:  # a flood SYN (the handshakes' SYNs went to wan)
                admitted.append(ts)
    return stats, admitted, len(established), est_out, latency, elapsed, missed, received


def report(label, est_sent, est_out, latency, admitted, elapsed, missed):
    latency.sort()
    pick = (lambda q: f"{latency[min(len(latency) - 1, int(q * len(latency)))] * 1e6:.0f}") if latency else (lambda q: "-")
    print(f"\n{label}: {len(admitted)}/{FLOOD} new connections admitted in {elapsed:.2f} s; established packets "
          f"{est_out}/{est_sent} forwarded (loss {est_sent - est_out}), latency us p50 {pick(0.5)} p99 {pick(0.99)} "
          f"max {pick(1.0)}; {missed} frames lost in the kernel before sluice")


def assert_every_received_packet_accounted(stats, admitted, est_out, received):
    """What sluice read of the flood phase: each admitted SYN and established packet went out, the rest of the SYNs
    were limited, and nothing else was dropped."""
    assert stats["drops"] == stats["drop/new_conn_limited"], stats
    assert len(admitted) + est_out + stats["drop/new_conn_limited"] == received


def test_syn_flood_is_capped_and_established_connections_keep_flowing(tmp_path, ns):
    stats, admitted, est_sent, est_out, latency, elapsed, missed, received = run_flood(tmp_path, ns, cap=True)
    report("capped", est_sent, est_out, latency, admitted, elapsed, missed)
    assert est_out >= est_sent - missed  # not one established packet lost in sluice
    assert_every_received_packet_accounted(stats, admitted, est_out, received)
    # The bucket starts full (BURST) and refills at RATE/s; elapsed (from before the first flood frame was sent to
    # after the last was accounted for) bounds the refill time from above; +1: a fractional token left over.
    assert BURST <= len(admitted) <= BURST + RATE * elapsed + 1, (len(admitted), elapsed)
    # Tighter: the flood (7 SYNs per token) empties the bucket at once and takes each token as it comes, so the
    # admitted SYNs are BURST plus RATE x the time between the first and the last of them, as net_pcap stamped
    # them (the same TSC the bucket reads). Tolerance: 2% of the refill plus 10 tokens for the TX drain timer and
    # the sender's stalls (a stall long enough to fill the bucket back up would need BURST / RATE = 2 s).
    span = max(admitted) - min(admitted)
    expected = BURST + RATE * span
    print(f"capped: first to last admitted SYN {span:.3f} s, so burst + rate x span = {expected:.0f}")
    assert abs(len(admitted) - expected) <= 0.02 * RATE * span + 10, (len(admitted), expected, span)
    assert FLOOD - missed <= stats["drop/new_conn_limited"] + len(admitted) <= FLOOD
    assert stats["conn_entries"] == len(admitted) + ESTABLISHED
    assert stats["conn_inserts"] == len(admitted) + ESTABLISHED
    assert stats["drop/rule_deny"] == 0 and stats["drop/ct_table_full"] == 0


def test_without_the_cap_the_same_flood_is_admitted_whole(tmp_path, ns):
    stats, admitted, est_sent, est_out, latency, elapsed, missed, received = run_flood(tmp_path, ns, cap=False)
    report("uncapped", est_sent, est_out, latency, admitted, elapsed, missed)
    assert len(admitted) >= FLOOD - missed  # every SYN that reached sluice
    assert est_out >= est_sent - missed
    assert stats["drop/new_conn_limited"] == 0
    assert_every_received_packet_accounted(stats, admitted, est_out, received)
    assert stats["conn_entries"] == len(admitted) + ESTABLISHED

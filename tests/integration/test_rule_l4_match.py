"""Rules that test the ICMP type and code and the TCP flags of a connection's first packet, on live packets through
net_pcap (as test_firewall.py): pings to the inside host are allowed, echo replies that answer nothing are not; a web
server is reachable only by a SYN without ACK (loose_pickup cannot adopt an ACK there); sluicectl explain takes the
flags and the ICMP type and names the rule's tests."""

import subprocess

from scapy.all import ICMP, IP, TCP, rdpcap

from sluice_harness import ROOT, Sluice
from test_firewall import INSIDE, OUTSIDE, firewall_config, lan, ns, run, wan  # noqa: F401 (ns: a fixture)


def l4_config(tmp_path):
    config = firewall_config(tmp_path, loose_pickup=True)
    config["firewall"]["rules"][:0] = [
        {"name": "ping-in", "in_ports": ["wan"], "destination": INSIDE, "protocol": "icmp",
         "icmp_type": "echo-request", "action": "allow"},
        {"name": "web-syn", "in_ports": ["wan"], "destination": INSIDE, "protocol": "tcp", "destination_ports": 80,
         "tcp_flags": "syn/syn,ack", "action": "allow"},
    ]
    return config


def test_icmp_type_and_tcp_flags_decide_new_connections(tmp_path, ns):
    frames = [
        wan(IP(src=OUTSIDE, dst=INSIDE) / ICMP(type=8, id=7, seq=1)),                  # allowed
        wan(IP(src=OUTSIDE, dst=INSIDE) / ICMP(type=0, id=8, seq=1)),                  # an echo reply: denied
        wan(IP(src=OUTSIDE, dst=INSIDE) / ICMP(type=13, id=9)),                        # timestamp: denied
        wan(IP(src=OUTSIDE, dst=INSIDE) / TCP(sport=41000, dport=80, flags="S")),      # allowed
        wan(IP(src=OUTSIDE, dst=INSIDE) / TCP(sport=41001, dport=80, flags="A")),      # no pickup: denied
        wan(IP(src=OUTSIDE, dst=INSIDE) / TCP(sport=41002, dport=80, flags="SE")),     # ECE is outside the mask
    ]
    sluice = Sluice(tmp_path, l4_config(tmp_path), netns=ns)
    with sluice:
        stats = run(sluice, [("wan0", frames, 0)])
    passed = rdpcap(str(tmp_path / "lan_out.pcap"))
    icmp_types = sorted(p[ICMP].type for p in passed if ICMP in p)
    tcp_ports = sorted(p[TCP].sport for p in passed if TCP in p)
    assert icmp_types == [8]
    assert tcp_ports == [41000, 41002]
    assert stats["drop/rule_deny"] == 3


def test_sluicectl_explain_takes_flags_and_icmp_type(tmp_path, ns):
    sluice = Sluice(tmp_path, l4_config(tmp_path), netns=ns)
    explain = lambda *args: subprocess.run([str(ROOT / "app/sluicectl/sluicectl"), "--prefix", sluice.prefix,
                                            "explain", *args], capture_output=True, text=True, timeout=30)
    with sluice:
        ping = explain("icmp", f"{OUTSIDE}:7", f"{INSIDE}:7", "--port", "wan")
        pong = explain("icmp", f"{OUTSIDE}:7", f"{INSIDE}:7", "--port", "wan", "--icmp-type", "echo-reply")
        syn = explain("tcp", f"{OUTSIDE}:41000", f"{INSIDE}:80", "--port", "wan")
        ack = explain("tcp", f"{OUTSIDE}:41000", f"{INSIDE}:80", "--port", "wan", "--flags", "ack")
        bad = explain("tcp", f"{OUTSIDE}:41000", f"{INSIDE}:80", "--flags", "sny")
        assert sluice.stop() == 0
    assert "type echo-request code 0" in ping.stdout
    assert "rule #1 'ping-in' (icmp_type echo-request) matches: allow" in ping.stdout, ping.stdout
    assert "type echo-reply code 0" in pong.stdout and "no rule matches: the default, deny" in pong.stdout
    assert "flags syn" in syn.stdout
    assert "rule #2 'web-syn' (tcp_flags syn/syn,ack) matches: allow" in syn.stdout, syn.stdout
    assert "no rule matches: the default, deny" in ack.stdout
    assert bad.returncode == 1 and "'sny' is not a TCP flag" in bad.stdout

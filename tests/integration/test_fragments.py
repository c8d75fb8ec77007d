"""Fragmented datagrams under connection tracking (lib/pipeline/fragments.hpp): the first fragment teaches the RX
lcore the datagram's ports, later fragments carry them, so every fragment reaches its flow's worker, is judged as
part of its connection and, through a NAT service, is translated with it. Real fragments (scapy's fragment() and
fragment6()) through sluice with two workers; the output is reassembled and checked field by field."""

import logging

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import IP, UDP, IPv6, IPv6ExtHdrFragment, Raw, defragment, defragment6, fragment, fragment6

from test_lb import (B4, B6, POOL4, POOL6, VIP4, VIP6, Lab, backend, from_client, from_server, ns, service,  # noqa: F401
                     norm)

PAYLOAD = bytes(range(256)) * 11  # 2816 bytes: three fragments of a 1500-byte link
# wait_out parses every pcap again on each poll (scapy), and the pcaps grow round by round: on a loaded machine
# that alone has taken longer than wait_out's default 15 s (seen once, while a sanitizer build ran alongside).
FRAMES_OUT_TIMEOUT = 45
# The NAT round's service port. Not 53: scapy dissects UDP port 53 as DNS, PAYLOAD as such a message takes seconds
# to build and read back for each IPv6 first fragment, and a round slower than udp_unreplied (30 s) sends its
# replies to connections that have expired.
SERVICE_PORT = 5300


def udp_checksum_ok(ip_layer):
    udp = ip_layer[UDP]
    given = udp.chksum
    del udp.chksum
    return given == ip_layer.__class__(bytes(ip_layer))[UDP].chksum


def fragments_of(datagram):
    if datagram.haslayer(IPv6):
        return fragment6(datagram, 1280)
    return fragment(datagram, fragsize=1200)


def reassemble(frames, family):
    """The IP datagrams in frames (scapy Ether frames), fragments put back together."""
    layers = [f[IPv6] if family == 6 else f[IP] for f in frames]
    if family == 6:
        whole, by_id = [], {}
        for p in layers:
            if p.haslayer(IPv6ExtHdrFragment):
                by_id.setdefault((p.src, p.dst, p[IPv6ExtHdrFragment].id), []).append(p)
            else:
                whole.append(p)
        return whole + [IPv6(bytes(defragment6(group))) for group in by_id.values()]
    return [p for p in defragment(layers) if not (p.flags.MF or p.frag)]


def test_fragmented_udp_through_a_nat_service_both_ways_on_two_workers(tmp_path, ns):
    services = [service("dns4", VIP4, SERVICE_PORT, "udp", "nat", [backend(b) for b in B4[:3]]),
                service("dns6", VIP6, SERVICE_PORT, "udp", "nat", [backend(b) for b in B6[:3]])]
    with Lab(tmp_path, ns, services, workers=2) as lab:
        for family, vip, client_net, pool in ((4, VIP4, "203.0.113.", POOL4), (6, VIP6, "2001:db8:f::", POOL6)):
            # Each client first sends a small datagram (it opens the connection), then a big one, fragmented.
            clients = [f"{client_net}{10 + i}" for i in range(12)]
            ip = IP if family == 4 else IPv6
            small = [from_client(ip(src=c, dst=vip) / UDP(sport=40000 + i, dport=SERVICE_PORT) / Raw(b"hello"))
                     for i, c in enumerate(clients)]
            big = []
            for i, c in enumerate(clients):
                datagram = (IP(src=c, dst=vip, id=7000 + i) if family == 4 else IPv6(src=c, dst=vip) / IPv6ExtHdrFragment(id=7000 + i))
                udp = UDP(sport=40000 + i, dport=SERVICE_PORT)
                big += [from_client(f) for f in fragments_of(datagram / udp / Raw(PAYLOAD))]
            already = len(lab.out("server"))
            lab.send("cl0", small)
            lab.send("cl0", big)
            # (the output is one pcap per worker: select this round's frames by family, not by position)
            out = [(q, f) for q, f in lab.wait_out("server", already + len(small) + len(big), timeout=FRAMES_OUT_TIMEOUT) if f.haslayer(ip)]
            # Every fragment left through the worker its flow's first packet went through.
            worker_of = {}
            for queue, frame in out:
                layer = frame[IP] if family == 4 else frame[IPv6]
                key = (norm(layer.src), frame[UDP].sport) if frame.haslayer(UDP) else None
                if key and frame.haslayer(Raw) and frame[Raw].load == b"hello":
                    worker_of[norm(layer.dst), key] = queue
            assert len(worker_of) == len(clients)
            datagrams = reassemble([f for _, f in out], family)
            hello = {(norm(d.dst), d[UDP].sport): d for d in datagrams if bytes(d[UDP].payload) == b"hello"}
            whole = [d for d in datagrams if bytes(d[UDP].payload) == PAYLOAD]
            assert len(whole) == len(clients), f"{len(whole)} of {len(clients)} fragmented datagrams came out whole"
            for d in whole:
                assert norm(d.src) == norm(pool)
                assert (norm(d.dst), d[UDP].sport) in hello, "the fragments went to another backend or NAT port"
                assert d[UDP].dport == SERVICE_PORT and udp_checksum_ok(d), d.summary()
            queues_per_datagram = {}  # fragment id -> the TX queues (workers) its fragments left by
            for queue, frame in out:
                if family == 4 and (frame[IP].flags.MF or frame[IP].frag):
                    queues_per_datagram.setdefault(frame[IP].id, set()).add(queue)
                elif family == 6 and frame.haslayer(IPv6ExtHdrFragment):
                    queues_per_datagram.setdefault(frame[IPv6ExtHdrFragment].id, set()).add(queue)
            assert len(queues_per_datagram) == len(clients)
            assert all(len(q) == 1 for q in queues_per_datagram.values()), "one datagram's fragments left by two workers"

            # The backends answer with big datagrams, fragmented, to the pool address and port: back to the clients.
            replies = []
            for n, (backend_address, port) in enumerate(hello):
                datagram = (IP(src=backend_address, dst=pool, id=9000 + n) if family == 4
                            else IPv6(src=backend_address, dst=pool) / IPv6ExtHdrFragment(id=9000 + n))
                udp = UDP(sport=SERVICE_PORT, dport=port)
                replies += [from_server(f) for f in fragments_of(datagram / udp / Raw(PAYLOAD))]
            already = len(lab.out("client"))
            lab.send("sv0", replies)
            back = reassemble([f for _, f in lab.wait_out("client", already + len(replies), timeout=FRAMES_OUT_TIMEOUT) if f.haslayer(ip)], family)
            assert len(back) == len(clients)
            assert {(norm(d.dst), d[UDP].dport) for d in back} == {(norm(c), 40000 + i) for i, c in enumerate(clients)}
            for d in back:
                assert norm(d.src) == norm(vip) and d[UDP].sport == SERVICE_PORT and bytes(d[UDP].payload) == PAYLOAD
                assert udp_checksum_ok(d), d.summary()
        stats = lab.sluice.stats()
        assert stats["drops"] == 0, {k: v for k, v in stats.items() if k.startswith("drop/") and v}


def test_firewall_judges_fragments_with_their_connection(tmp_path, ns):
    firewall = {"default": "deny", "rules": [
        {"name": "clients-to-servers", "in_ports": "client", "destination": "10.1.0.0/24", "protocol": "udp",
         "destination_ports": 53, "action": "allow"}]}
    with Lab(tmp_path, ns, [], workers=2, firewall=firewall) as lab:
        allowed = IP(src="203.0.113.5", dst="10.1.0.50", id=100) / UDP(sport=5353, dport=53) / Raw(PAYLOAD)
        denied = IP(src="203.0.113.5", dst="10.1.0.50", id=101) / UDP(sport=5353, dport=54) / Raw(PAYLOAD)
        orphan = fragment(IP(src="203.0.113.6", dst="10.1.0.50", id=102) / UDP(sport=5353, dport=53) / Raw(PAYLOAD),
                          fragsize=1200)[1:]  # its first fragment never comes
        frames = [from_client(f) for f in fragment(allowed, fragsize=1200) + fragment(denied, fragsize=1200) + orphan]
        lab.send("cl0", frames)
        out = lab.wait_out("server", 3)
        whole = reassemble([f for _, f in out], 4)
        assert len(whole) == 1 and whole[0][UDP].dport == 53 and bytes(whole[0][UDP].payload) == PAYLOAD
        stats = lab.sluice.stats()
        assert stats["drop/rule_deny"] == 1  # the denied datagram's first fragment, by its port
        assert stats["drop/fragment_unmatched"] == 2 + 2  # its two later ones (no connection), the orphan's two
        assert stats["conn_inserts"] == 1  # one connection, with its real ports, for the three allowed fragments

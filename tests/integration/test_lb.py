"""The L4 load balancer on live packets: frames are injected into veth pairs inside a namespace of the test's own,
sluice reads them with net_pcap (rx_iface) and writes what it sends to pcap files (one per TX queue, so one per
worker), which scapy checks field by field.

Topology: port `client` (cl0) faces the clients' router, port `server` (sv0) the backends. Clients live in
203.0.113.0/24 and 2001:db8:f::/64, the VIPs are 192.0.2.100 and 2001:db8:100::1, the backends 10.1.0.11.. and
2001:db8:1::11.., the NAT pool 10.1.0.100 / 2001:db8:1::100."""

import ipaddress
import logging
import os
import re
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import ICMP, IP, TCP, UDP, Ether, ICMPv6DestUnreach, ICMPv6PacketTooBig, IPv6, NoPayload, Raw, rdpcap
from scapy.utils import checksum

from netns import Netns
from sluice_harness import Sluice, wait_until

CLIENT_PEER = "02:00:00:00:01:01"   # next hop out of the client port (the clients' router)
SERVER_PEER = "02:00:00:00:02:01"   # next hop out of the server port (towards the backends)
SLUICE_MAC = "02:00:00:00:00:aa"    # what injected frames are addressed to (ports are promiscuous)
VIP4, VIP6 = "192.0.2.100", "2001:db8:100::1"
POOL4, POOL6 = "10.1.0.100", "2001:db8:1::100"
TUN4, TUN6 = "10.1.0.1", "2001:db8:1::1"
B4 = [f"10.1.0.{11 + i}" for i in range(4)]
B6 = [f"2001:db8:1::{11 + i}" for i in range(4)]
BMAC4 = [f"02:00:00:00:03:{11 + i}" for i in range(4)]
BMAC6 = [f"02:00:00:00:06:{11 + i}" for i in range(4)]

LAYOUTS = {  # workers -> (EAL --lcores, config lcores)
    1: ("0@0,1@1", [{"id": 1, "roles": ["rx", "worker"]}]),
    2: ("0@0,1@1,2@1,3@1", [{"id": 1, "roles": ["rx"]}, {"id": 2, "roles": ["worker"]}, {"id": 3, "roles": ["worker"]}]),
}


def ip_eq(a, b):
    return ipaddress.ip_address(a) == ipaddress.ip_address(b)


def norm(address):
    return str(ipaddress.ip_address(address))


def from_client(ip_layer):
    return Ether(bytes(Ether(src=CLIENT_PEER, dst=SLUICE_MAC) / ip_layer))  # parsed back: every field concrete


def from_server(ip_layer, mac=SERVER_PEER):
    return Ether(bytes(Ether(src=mac, dst=SLUICE_MAC) / ip_layer))


def l3(p):
    return p[IP] if IP in p else p[IPv6]


def l4(p):
    return p[TCP] if TCP in p else p[UDP]


def differences(got, want):
    """Field-by-field differences of two frames, for assertion messages."""
    g, w = Ether(bytes(got)), Ether(bytes(want))
    diffs = []
    while not isinstance(g, NoPayload) or not isinstance(w, NoPayload):
        if type(g) is not type(w):
            diffs.append(f"layer {g.name} where {w.name} was expected")
            break
        for field in g.fields_desc:
            gv, wv = g.getfieldval(field.name), w.getfieldval(field.name)
            if gv != wv:
                diffs.append(f"{g.name}.{field.name}: got {gv!r}, want {wv!r}")
        g, w = g.payload, w.payload
    return "; ".join(diffs) or f"bytes differ:\n got  {bytes(got).hex()}\n want {bytes(want).hex()}"


def assert_frame(got, want, what):
    assert bytes(got) == bytes(want), f"{what}: {differences(got, want)}"


def translated(frame, eth_src, eth_dst, src, dst, sport, dport, hop=1):
    """What a NAT rewrite of `frame` must look like: addresses and ports replaced, TTL / hop limit decremented by
    `hop`, IPv4 header and L4 checksums recomputed, every other byte unchanged."""
    ip = l3(frame).copy()
    ip.src, ip.dst = src, dst
    if isinstance(ip, IP):
        ip.ttl -= hop
        del ip.chksum
    else:
        ip.hlim -= hop
    seg = l4(ip)
    payload = bytes(seg.payload)  # as on the wire, whatever scapy dissected it as (DNS on port 53, ...)
    seg.remove_payload()
    if payload:
        seg.add_payload(Raw(payload))
    seg.sport, seg.dport = sport, dport
    del seg.chksum
    return Ether(src=eth_src, dst=eth_dst) / ip


def backend(address, port=None, weight=None, mac=None):
    b = {"address": address}
    if port is not None:
        b["port"] = port
    if weight is not None:
        b["weight"] = weight
    if mac is not None:
        b["mac"] = mac
    return b


def service(name, vip, port, protocol, mode, backends, **extra):
    return dict({"name": name, "vip": vip, "port": port, "protocol": protocol, "mode": mode, "backends": backends},
                **extra)


class Lab:
    """One sluice between the client and server veths, its config, what was sent and what came out."""

    def __init__(self, tmp_path, ns, services, workers=2, nat_ports=None, firewall=None):
        self.tmp = tmp_path
        self.ns = ns
        self.workers = workers
        lb = {"nat_pool": [POOL4, POOL6], "tunnel_source": [TUN4, TUN6]}
        if nat_ports:
            lb["nat_ports"] = nat_ports
        txs = lambda port: ",".join(f"tx_pcap={tmp_path}/{port}_q{q}.pcap" for q in range(workers))
        self.config = {
            "dataplane": {"idle_sleep_us": 50},
            "ports": [
                {"name": "client", "device": f"net_pcap0,rx_iface=cl0,{txs('client')}"},
                {"name": "server", "device": f"net_pcap1,rx_iface=sv0,{txs('server')}"},
            ],
            "lcores": LAYOUTS[workers][1],
            "forward": [
                {"from": "client", "to": "server", "next_hop_mac": SERVER_PEER},
                {"from": "server", "to": "client", "next_hop_mac": CLIENT_PEER},
            ],
            "load_balancer": lb,
            "services": services,
        }
        if firewall:
            self.config["firewall"] = firewall
        self.sluice = None
        self.sent = 0
        self.mac = {}

    def __enter__(self):
        self.sluice = Sluice(self.tmp, self.config, lcores=LAYOUTS[self.workers][0], netns=self.ns).start()
        self.mac = dict(re.findall(r"port '(\w+)':.*? mac ([0-9a-f:]{17})", self.sluice.log()))
        if set(self.mac) != {"client", "server"}:
            self.sluice.kill()
            raise AssertionError(f"no port MACs in the log:\n{self.sluice.log()}")
        return self

    def __exit__(self, *exc):
        self.sluice.kill()

    def send(self, ifname, frames, chunk=100):
        """Injects frames and waits until sluice has read them all, in chunks small enough for the kernel's capture
        ring: net_pcap's rx_iface opens libpcap with a 16 KiB snap length, so its default 2 MiB ring holds in the
        order of a hundred frames, and a bigger burst overflows it whenever the RX lcore is slow to run (ASan, a
        loaded machine): the lost frames never come (two such timeouts in CI runs, 300 frames at once)."""
        for start in range(0, len(frames), chunk):
            part = frames[start:start + chunk]
            self.ns.inject(ifname, part, self.tmp)
            self.sent += len(part)
            self.sluice.wait_received(self.sent, timeout=45)

    def out(self, port):
        """Everything sluice sent on `port` so far, as (TX queue = worker index, frame)."""
        frames = []
        for q in range(self.workers):
            path = self.tmp / f"{port}_q{q}.pcap"
            if path.exists() and path.stat().st_size > 24:
                frames += [(q, p) for p in rdpcap(str(path))]
        return frames

    def wait_out(self, port, total, timeout=15):
        """Waits until `total` frames left on `port` in all, then checks that no more come."""
        try:
            wait_until(lambda: len(self._out_safe(port)) >= total, timeout=timeout, what="frames out")
        except TimeoutError:
            raise AssertionError(f"{len(self._out_safe(port))} frames out on {port} after {timeout}s, expected "
                                 f"{total}; drops: {self._drops()}") from None
        self.sluice.wait_accounted(self.sent)  # every frame read was sent or dropped: nothing more is on its way
        frames = self.out(port)
        assert len(frames) == total, f"{len(frames)} frames out on {port}, expected {total}; drops: {self._drops()}"
        return frames

    def _out_safe(self, port):
        try:
            return self.out(port)
        except Exception:  # a record being written while we read
            return []

    def _drops(self):
        return {k: v for k, v in self.sluice.stats().items() if k.startswith("drop/") and v}

    def reload(self, services):
        """Rewrites the config file with new services (atomically, as editors do) and reloads it now."""
        config = yaml.safe_load(self.sluice.config_path.read_text())
        before = self.sluice.telemetry.query("/sluice/config")["hash"]
        config["services"] = services
        tmp = self.sluice.config_path.with_suffix(".tmp")
        tmp.write_text(yaml.safe_dump(config, sort_keys=False))
        os.replace(tmp, self.sluice.config_path)
        outcome = self.sluice.telemetry.query("/sluice/reload")
        assert outcome["last_reload_ok"] == 1, outcome
        assert outcome["hash"] != before
        time.sleep(0.2)  # every lcore has loaded the new snapshot long before the next frames arrive

    def finish(self):
        """Waits until every frame sent was forwarded or dropped, stops sluice (exit 0: no leaked mbuf)."""
        stats = self.sluice.wait_accounted(self.sent)
        assert self.sluice.stop() == 0, self.sluice.log()
        return stats


def drops_of(stats):
    return {k[len("drop/"):]: v for k, v in stats.items() if k.startswith("drop/") and v}


@pytest.fixture
def ns():
    namespace = Netns(f"sllb{os.getpid()}", ["cl0", "sv0"])
    yield namespace
    namespace.delete()


# ---------------------------------------------------------------------------------------------------------------
# NAT


def test_nat_ipv4_tcp_both_directions_with_two_workers(tmp_path, ns):
    ports = {B4[0]: 8080, B4[1]: 8080, B4[2]: 80}          # B4[2] has no port: the packet's own is kept
    macs = {B4[0]: SERVER_PEER, B4[1]: SERVER_PEER, B4[2]: BMAC4[2]}  # only B4[2] has a MAC of its own
    web = service("web", VIP4, 80, "tcp", "nat",
                  [backend(B4[0], port=8080), backend(B4[1], port=8080), backend(B4[2], mac=BMAC4[2])])
    lab = Lab(tmp_path, ns, [web], workers=2, nat_ports="20000-29999")
    flows = 64
    clients = [(f"203.0.113.{1 + i % 50}", 40000 + i) for i in range(flows)]
    syns = [from_client(IP(src=c, dst=VIP4, ttl=64 - i % 8, id=100 + i) /
                        TCP(sport=p, dport=80, flags="S", seq=1000 * i + 1, window=29200, options=[("MSS", 1460)]))
            for i, (c, p) in enumerate(clients)]
    other = from_client(IP(src="203.0.113.200", dst="198.51.100.9", ttl=20) / UDP(sport=5000, dport=53) / Raw(b"not lb"))

    with lab:
        lab.send("cl0", syns + [other])
        conn = {}  # flow -> (worker, backend, backend port, NAT port)
        for q, got in lab.wait_out("server", flows + 1):
            if ip_eq(got[IP].dst, "198.51.100.9"):  # not VIP traffic: forwarded as before
                want = translated(other, lab.mac["server"], SERVER_PEER, "203.0.113.200", "198.51.100.9", 5000, 53)
                assert_frame(got, want, "non-VIP packet")
                continue
            i = (got[TCP].seq - 1) // 1000
            b, nat_port = got[IP].dst, got[TCP].sport
            assert b in ports, f"flow {i}: to {b}, not a backend"
            assert 20000 <= nat_port <= 29999, f"flow {i}: NAT port {nat_port} outside nat_ports"
            assert nat_port % 2 == q, f"flow {i}: NAT port {nat_port} sent by worker {q} (port % 2 must be it)"
            assert_frame(got, translated(syns[i], lab.mac["server"], macs[b], POOL4, b, nat_port, ports[b]),
                         f"SYN of flow {i} to the backend")
            assert i not in conn, f"flow {i} came out twice"
            conn[i] = (q, b, ports[b], nat_port)
        assert len(conn) == flows
        assert {q for q, _, _, _ in conn.values()} == {0, 1}, "both workers must own connections"
        assert len({(b, bp, p) for _, b, bp, p in conn.values()}) == flows, "two connections share a NAT tuple"
        assert len({b for _, b, _, _ in conn.values()}) == 3, "64 flows over 3 backends reach all of them"

        # The backends answer (SYN-ACK) to pool:P; sluice rewrites back to VIP:80 -> client:port.
        synacks = [from_server(IP(src=b, dst=POOL4, ttl=64, id=3000 + i) /
                               TCP(sport=bp, dport=p, flags="SA", seq=7000 * i + 5, ack=1000 * i + 2, window=65160,
                                   options=[("MSS", 1400)]), mac=macs[b])
                   for i, (_, b, bp, p) in sorted(conn.items())]
        lab.send("sv0", synacks)
        replies = lab.wait_out("client", flows)
        for q, got in replies:
            i = got[TCP].dport - 40000
            assert 0 <= i < flows, got.summary()
            assert q == conn[i][3] % 2, f"flow {i}: the reply left through worker {q}, not the owner {conn[i][3] % 2}"
            assert_frame(got, translated(synacks[i], lab.mac["client"], CLIENT_PEER, VIP4, clients[i][0], 80,
                                         clients[i][1]), f"SYN-ACK of flow {i} to the client")

        # The handshake completes and data flows both ways on the same translation.
        acks = [from_client(IP(src=c, dst=VIP4, ttl=50, id=500 + i) /
                            TCP(sport=p, dport=80, flags="PA", seq=1000 * i + 2, ack=7000 * i + 6) /
                            Raw(f"GET /{i} HTTP/1.0\r\n\r\n".encode())) for i, (c, p) in enumerate(clients)]
        lab.send("cl0", acks)
        seen = 0
        for q, got in lab.wait_out("server", 2 * flows + 1):
            if TCP not in got or got[TCP].flags != "PA":
                continue
            i = (got[TCP].seq - 2) // 1000
            _, b, bp, p = conn[i]
            assert (q, got[IP].dst, got[TCP].sport) == (conn[i][0], b, p), f"flow {i} changed backend or NAT port"
            assert_frame(got, translated(acks[i], lab.mac["server"], macs[b], POOL4, b, p, bp), f"data of flow {i}")
            seen += 1
        assert seen == flows
        answers = [from_server(IP(src=b, dst=POOL4, ttl=64) /
                               TCP(sport=bp, dport=p, flags="PA", seq=7000 * i + 6,
                                   ack=1000 * i + 2 + len(acks[i][Raw].load)) /
                               Raw(f"HTTP/1.0 200 OK {i}\r\n".encode()), mac=macs[b])
                   for i, (_, b, bp, p) in sorted(conn.items())]
        lab.send("sv0", answers)
        seen = 0
        for q, got in lab.wait_out("client", 2 * flows):
            if got[TCP].flags != "PA":
                continue
            i = got[TCP].dport - 40000
            assert_frame(got, translated(answers[i], lab.mac["client"], CLIENT_PEER, VIP4, clients[i][0], 80,
                                         clients[i][1]), f"answer of flow {i} to the client")
            seen += 1
        assert seen == flows
        stats = lab.finish()
    assert drops_of(stats) == {}


def test_nat_ipv6_udp_both_directions(tmp_path, ns):
    dns = service("dns6", VIP6, 53, "udp", "nat", [backend(B6[0], port=5353), backend(B6[1], port=5353)])
    lab = Lab(tmp_path, ns, [dns], workers=2, nat_ports="30000-39999")
    flows = 48
    clients = [(f"2001:db8:f::{1 + i % 20:x}", 30000 + i) for i in range(flows)]
    queries = [from_client(IPv6(src=c, dst=VIP6, hlim=64 - i % 5, fl=i) / UDP(sport=p, dport=53) / Raw(b"query %03d" % i))
               for i, (c, p) in enumerate(clients)]
    with lab:
        lab.send("cl0", queries)
        conn = {}
        for q, got in lab.wait_out("server", flows):
            i = int(bytes(got[UDP].payload)[6:9])
            b, p = norm(got[IPv6].dst), got[UDP].sport
            assert b in (norm(B6[0]), norm(B6[1])), f"query {i} to {b}, not a backend"
            assert 30000 <= p <= 39999 and p % 2 == q, f"query {i}: NAT port {p} from worker {q}"
            assert_frame(got, translated(queries[i], lab.mac["server"], SERVER_PEER, POOL6, b, p, 5353),
                         f"query {i} to the backend")
            conn[i] = (q, b, p)
        assert len(conn) == flows and {q for q, _, _ in conn.values()} == {0, 1}
        assert len({(b, p) for _, b, p in conn.values()}) == flows
        answers = [from_server(IPv6(src=b, dst=POOL6, hlim=64) / UDP(sport=5353, dport=p) / Raw(b"answer %03d" % i))
                   for i, (_, b, p) in sorted(conn.items())]
        lab.send("sv0", answers)
        for q, got in lab.wait_out("client", flows):
            i = int(bytes(got[UDP].payload)[7:10])
            assert q == conn[i][2] % 2
            assert_frame(got, translated(answers[i], lab.mac["client"], CLIENT_PEER, VIP6, clients[i][0], 53,
                                         clients[i][1]), f"answer {i} to the client")
        stats = lab.finish()
    assert drops_of(stats) == {}


@pytest.mark.parametrize("family,protocol", [("ipv4", "udp"), ("ipv6", "udp"), ("ipv4", "tcp"), ("ipv6", "tcp")])
def test_nat_icmp_errors_are_translated_both_ways(tmp_path, ns, family, protocol):
    """ICMP errors about a nat connection's packets (RFC 5508 4.2): a router on the backends' side that cannot
    forward sluice's packet (pool:port -> backend) tells the pool address, and the client must hear it about its own
    packet to the VIP (path MTU discovery); a client that refuses a reply (VIP -> client) tells the VIP, and the
    backend must hear it about its own reply to pool:port. Two workers: an error quoting the pool address must reach
    the worker that owns its NAT port, or it finds no connection (icmp_unrelated). UDP quotes hold 8 bytes of the
    segment; TCP quotes the whole header, so its checksum must be translated too."""
    v4 = family == "ipv4"
    vip, pool, backends = (VIP4, POOL4, B4) if v4 else (VIP6, POOL6, B6)
    Ip = IP if v4 else IPv6
    router = "10.1.0.254" if v4 else "2001:db8:1::fe"
    tcp = protocol == "tcp"
    L4 = TCP if tcp else UDP
    opening, answering = ({"flags": "S", "seq": 100}, {"flags": "SA", "seq": 900, "ack": 101}) if tcp else ({}, {})
    dns = service("dns", vip, 53, protocol, "nat", [backend(backends[0], port=5353)])
    lab = Lab(tmp_path, ns, [dns], workers=2, nat_ports="30000-39999")
    flows = 24  # the worker of each is the keyed hash's: with 8, all on one worker was 1 run in 128
    clients = [(f"203.0.113.{1 + i}" if v4 else f"2001:db8:f::{1 + i:x}", 41000 + i) for i in range(flows)]

    def too_big(quote):  # from a router: fragmentation needed (IPv4) / packet too big (IPv6), MTU 1400
        return ICMP(type=3, code=4, nexthopmtu=1400) / Raw(quote) if v4 else ICMPv6PacketTooBig(mtu=1400) / Raw(quote)

    def unreachable(quote):  # from the client: port unreachable
        return ICMP(type=3, code=3) / Raw(quote) if v4 else ICMPv6DestUnreach(code=4) / Raw(quote)

    def quote(packet, hop=0):
        """What an error quotes of `packet` (its IP layer, TTL / hop limit less `hop`): the IP header and 8 bytes
        (UDP) or 20 (TCP: the whole header, checksum included)."""
        ip = l3(packet).copy()
        if v4:
            ip.ttl -= hop
            del ip.chksum
        else:
            ip.hlim -= hop
        raw = bytes(ip)
        return raw[:(20 if v4 else 40) + (20 if tcp else 8)]

    queries = [from_client(Ip(src=c, dst=vip) / L4(sport=p, dport=53, **opening) / Raw(b"query %03d" % i))
               for i, (c, p) in enumerate(clients)]
    with lab:
        lab.send("cl0", queries)
        nat = {}  # flow -> (NAT port, the query as it left for the backend)
        for q, got in lab.wait_out("server", flows):
            nat[int(bytes(l4(got).payload)[6:9])] = (l4(got).sport, got)
        assert {port % 2 for port, _ in nat.values()} == {0, 1}, "both workers own some of the connections"
        answers = [from_server(Ip(src=backends[0], dst=pool) / L4(sport=5353, dport=nat[i][0], **answering) /
                               Raw(b"answer %03d" % i))
                   for i in range(flows)]
        lab.send("sv0", answers)
        answered = {int(bytes(l4(got).payload)[7:10]): got for _, got in lab.wait_out("client", flows)}

        errors = [from_server(Ip(src=router, dst=pool) / too_big(quote(nat[i][1]))) for i in range(flows)]
        lab.send("sv0", errors)
        is_icmp = lambda frame: (frame[IP].proto == 1) if v4 else (frame[IPv6].nh == 58)
        to_clients = [f for f in lab.wait_out("client", 2 * flows) if is_icmp(f[1])]
        refusals = [from_client(Ip(src=c, dst=vip) / unreachable(quote(answered[i]))) for i, (c, _) in enumerate(clients)]
        lab.send("cl0", refusals)
        to_backend = [f for f in lab.wait_out("server", 2 * flows) if is_icmp(f[1])]
        stats = lab.finish()

    # To the client: the router's error, about the client's own query as it left sluice (TTL one less), with every
    # checksum as if written from scratch (scapy computes them below).
    forwarded = {"ttl": 63} if v4 else {"hlim": 63}  # the errors were sent with 64
    want = {norm(c): Ether(src=lab.mac["client"], dst=CLIENT_PEER) /
            Ip(src=router, dst=c, **forwarded) / too_big(quote(queries[i], hop=1)) for i, (c, _) in enumerate(clients)}
    assert len(to_clients) == flows
    for _, got in to_clients:
        assert_frame(got, want.pop(norm(l3(got).dst)), "a router's error to the client")
    assert not want
    # To the backend: the client's refusal, about the backend's own answer to the pool address (found by the NAT
    # port it quotes as the destination).
    want = {nat[i][0]: Ether(src=lab.mac["server"], dst=SERVER_PEER) /
            Ip(src=c, dst=backends[0], **forwarded) / unreachable(quote(answers[i], hop=1))
            for i, (c, _) in enumerate(clients)}
    assert len(to_backend) == flows
    for _, got in to_backend:
        quoted = bytes(l3(got).payload)[8 + (20 if v4 else 40):]
        assert_frame(got, want.pop(int.from_bytes(quoted[2:4], "big")), "a client's error to the backend")
    assert not want
    assert drops_of(stats) == {}


def test_nat_no_connection_and_no_backend(tmp_path, ns):
    web = service("web", VIP4, 80, "tcp", "nat", [backend(B4[0], port=8080)])
    empty = service("empty", VIP4, 53, "udp", "nat", [backend(B4[1], weight=0), backend(B4[2], weight=0)])
    lab = Lab(tmp_path, ns, [web, empty], workers=2)
    syn = from_client(IP(src="203.0.113.7", dst=VIP4) / TCP(sport=45678, dport=80, flags="S", seq=99))
    with lab:
        lab.send("cl0", [syn])
        [(q, out)] = lab.wait_out("server", 1)
        p = out[TCP].sport
        assert 1024 <= p <= 65535 and p % 2 == q  # the default nat_ports
        good = from_server(IP(src=B4[0], dst=POOL4) / TCP(sport=8080, dport=p, flags="SA", seq=5, ack=100))
        strays = [
            from_server(IP(src=B4[0], dst=POOL4) / TCP(sport=8081, dport=p, flags="SA", seq=5, ack=100)),  # wrong sport
            from_server(IP(src=B4[1], dst=POOL4) / TCP(sport=8080, dport=p, flags="SA", seq=5, ack=100)),  # wrong source
            from_server(IP(src=B4[0], dst=POOL4) / TCP(sport=8080, dport=p + 2, flags="SA", seq=5, ack=100)),  # free port
            from_server(IP(src=B4[0], dst=POOL4) / UDP(sport=8080, dport=p) / Raw(b"x")),  # other protocol
            from_server(IPv6(src=B6[0], dst=POOL6) / UDP(sport=53, dport=40000) / Raw(b"x")),
        ]
        lab.send("sv0", strays + [good])
        [(_, back)] = lab.wait_out("client", 1)
        assert back[IP].src == VIP4 and back[IP].dst == "203.0.113.7" and back[TCP].dport == 45678
        no_backend = [from_client(IP(src=f"203.0.113.{i + 1}", dst=VIP4) / UDP(sport=3000 + i, dport=53) / Raw(b"q"))
                      for i in range(5)]
        lab.send("cl0", no_backend)
        stats = lab.finish()
    assert drops_of(stats) == {"nat_no_connection": 5, "lb_no_backend": 5}
    assert len(lab.out("server")) == 1


def test_pings_of_vips_and_pool_addresses_are_answered_without_a_firewall(tmp_path, ns):
    """A VIP and a pool address are sluice's: a ping of one is answered from it (as Katran answers pings of its
    VIPs), not forwarded towards the backends or dropped as nat_no_connection. A ping of a backend passes."""
    from scapy.all import ICMPv6EchoReply, ICMPv6EchoRequest
    web = service("web", VIP4, 80, "tcp", "nat", [backend(B4[0], port=8080)])
    web6 = service("web6", VIP6, 80, "tcp", "nat", [backend(B6[0], port=8080)])
    lab = Lab(tmp_path, ns, [web, web6], workers=2)
    pings = [from_client(IP(src="203.0.113.7", dst=VIP4) / ICMP(type=8, id=1, seq=1) / Raw(b"vip")),
             from_client(IPv6(src="2001:db8:f::7", dst=VIP6) / ICMPv6EchoRequest(id=2, seq=1, data=b"vip6")),
             from_server(IP(src=B4[1], dst=POOL4) / ICMP(type=8, id=3, seq=1))]
    with lab:
        lab.send("cl0", pings[:2] + [from_client(IP(src="203.0.113.7", dst=B4[0]) / ICMP(type=8, id=4))])
        lab.send("sv0", pings[2:])
        replies = sorted((p for _, p in lab.wait_out("client", 2)), key=lambda p: IP not in p)
        [(_, pool_reply), (_, passed)] = sorted(lab.wait_out("server", 2), key=lambda qp: qp[1][ICMP].type)
        stats = lab.finish()
    assert stats["echo_replies"] == 3 and drops_of(stats) == {}
    v4, v6 = replies
    assert (v4[IP].src, v4[IP].dst, v4[ICMP].type, v4[ICMP].id, bytes(v4[ICMP].payload)) == (VIP4, "203.0.113.7", 0, 1, b"vip")
    assert v4.dst == CLIENT_PEER and v4.src == lab.mac["client"]
    assert ip_eq(v6[IPv6].src, VIP6) and v6[ICMPv6EchoReply].data == b"vip6"
    for reply, layer, field in ((v4, ICMP, "chksum"), (v6, ICMPv6EchoReply, "cksum")):
        fresh = reply.copy()
        delattr(fresh[layer], field)  # scapy computes it again
        assert bytes(Ether(bytes(fresh))) == bytes(reply)
    assert pool_reply[IP].src == POOL4 and pool_reply[IP].dst == B4[1] and pool_reply[ICMP].type == 0
    assert pool_reply.dst == SERVER_PEER and pool_reply.src == lab.mac["server"]
    assert passed[IP].dst == B4[0] and passed[ICMP].type == 8


def test_a_vip_on_a_port_or_protocol_no_service_serves_is_dropped_not_forwarded(tmp_path, ns):
    """Without a firewall, a packet to a VIP that matches no service (another port, another protocol) was forwarded
    to the next hop, which may route the announced VIP straight back. It is dropped as to_own_address; the service's
    own port is balanced, and other hosts' traffic passes untracked as before. The client port's addresses are the
    IPv4 VIP itself (a one-address set-up: its service is still served) and another one (nothing served there). A
    service on any UDP port of the IPv6 VIP takes every UDP port there, and no TCP."""
    web = service("web", VIP4, 80, "tcp", "nat", [backend(B4[0], port=8080)])
    web6 = service("web6", VIP6, 80, "tcp", "nat", [backend(B6[0], port=8080)])
    udp6 = service("udp6", VIP6, "any", "udp", "nat", [backend(B6[1])])
    lab = Lab(tmp_path, ns, [web, web6, udp6], workers=2)
    lab.config["ports"][0]["addresses"] = [f"{VIP4}/24", "198.51.100.1/24"]
    unserved = [from_client(IP(src="203.0.113.7", dst=VIP4) / TCP(sport=40000, dport=22, flags="S")),
                from_client(IP(src="203.0.113.7", dst=VIP4) / UDP(sport=40000, dport=80)),
                from_client(IPv6(src="2001:db8:f::7", dst=VIP6) / TCP(sport=40000, dport=443, flags="S")),
                from_client(IP(src="203.0.113.7", dst="198.51.100.1") / TCP(sport=40000, dport=80, flags="S"))]
    served = [from_client(IP(src="203.0.113.7", dst=VIP4) / TCP(sport=40001, dport=80, flags="S")),
              from_client(IPv6(src="2001:db8:f::7", dst=VIP6) / UDP(sport=40001, dport=5353))]
    other = from_client(IP(src="203.0.113.7", dst=B4[1]) / TCP(sport=40002, dport=22, flags="S"))
    with lab:
        lab.send("cl0", unserved + served + [other])
        out = lab.wait_out("server", 3)
        stats = lab.finish()
    assert drops_of(stats) == {"to_own_address": len(unserved)}
    went = sorted((norm((p[IP] if IP in p else p[IPv6]).dst), (p[TCP] if TCP in p else p[UDP]).dport) for _, p in out)
    assert went == sorted([(B4[1], 22), (B4[0], 8080), (norm(B6[1]), 5353)])
    assert stats["conn_inserts"] == 2


# ---------------------------------------------------------------------------------------------------------------
# DSR and tunnels


def test_dsr_rewrites_only_ethernet(tmp_path, ns):
    web4 = service("web4", VIP4, 80, "tcp", "dsr", [backend(B4[i], mac=BMAC4[i]) for i in range(3)])
    web6 = service("web6", VIP6, 80, "tcp", "dsr", [backend(B6[i], mac=BMAC6[i]) for i in range(3)])
    lab = Lab(tmp_path, ns, [web4, web6], workers=1)
    flows = 24
    ips = [IP(src=f"203.0.113.{i + 1}", dst=VIP4, ttl=33, id=i) if i % 2 else
           IPv6(src=f"2001:db8:f::{i + 1:x}", dst=VIP6, hlim=33) for i in range(flows)]
    sent = [from_client(ip / TCP(sport=50000 + i, dport=80, flags="S", seq=1000 * i)) for i, ip in enumerate(ips)]
    # The backends answer the clients directly: sluice sees only the clients' side of each connection.
    later = [from_client(ip / TCP(sport=50000 + i, dport=80, flags="PA", seq=1000 * i + 1, ack=77) / Raw(b"data %d" % i))
             for i, ip in enumerate(ips)]
    with lab:
        lab.send("cl0", sent)
        picked = {}
        for _, got in lab.wait_out("server", flows):
            i = got[TCP].sport - 50000
            macs = BMAC4 if i % 2 else BMAC6
            assert got.dst in macs[:3], f"flow {i}: to MAC {got.dst}, not a backend's"
            assert got.src == lab.mac["server"]
            assert bytes(got)[12:] == bytes(sent[i])[12:], f"SYN of flow {i}: the IP packet changed"
            picked[i] = got.dst
        assert len(picked) == flows
        assert len(set(picked.values())) >= 4, "24 flows over 2 x 3 backends reach most of them"
        lab.send("cl0", later)
        seen = 0
        for _, got in lab.wait_out("server", 2 * flows):
            if got[TCP].flags != "PA":
                continue
            i = got[TCP].sport - 50000
            assert got.dst == picked[i], f"flow {i}: data went to {got.dst}, its SYN to {picked[i]}"
            assert got.src == lab.mac["server"]
            assert bytes(got)[12:] == bytes(later[i])[12:], f"data of flow {i}: the IP packet changed"
            seen += 1
        assert seen == flows
        stats = lab.finish()
    assert drops_of(stats) == {}


@pytest.mark.parametrize("family", ["ipv4", "ipv6"])
def test_a_packet_the_tunnel_header_would_push_over_the_mtu_gets_a_too_big_error(tmp_path, ns, family):
    """The server port's MTU is 1500. A client's packet that fits it, but not with the tunnel's outer header, is
    dropped (tunnel_too_big) and the client is told the MTU that leaves room for that header: 1480 under IPv4 (ICMP
    fragmentation needed, the packet has DF), 1460 under IPv6 (packet too big), from the VIP, out of the client port;
    a packet of exactly that size goes through, encapsulated to 1500."""
    v4 = family == "ipv4"
    vip, Ip = (VIP4, IP) if v4 else (VIP6, IPv6)
    client = "203.0.113.9" if v4 else "2001:db8:f::9"
    room = 1480 if v4 else 1460
    tun = service("tun", vip, 80, "tcp", "tunnel", [backend(B4[0] if v4 else B6[0])])
    lab = Lab(tmp_path, ns, [tun], workers=1)
    df = {"flags": "DF"} if v4 else {}
    header = (20 if v4 else 40) + 20  # IP + TCP

    def segment(size, seq):
        return from_client(Ip(src=client, dst=vip, **df) / TCP(sport=20000, dport=80, flags="A", seq=seq, ack=5) /
                           Raw(b"x" * (size - header)))
    syn = from_client(Ip(src=client, dst=vip, **df) / TCP(sport=20000, dport=80, flags="S", seq=1))
    big, fits = segment(room + 1, 2), segment(room, 2)
    with lab:
        lab.send("cl0", [syn])
        lab.wait_out("server", 1)
        lab.send("cl0", [big, fits])
        (_, error), = lab.wait_out("client", 1)
        tunneled = lab.wait_out("server", 2)
        stats = lab.finish()
    too_big = ICMP(type=3, code=4, nexthopmtu=room) if v4 else ICMPv6PacketTooBig(mtu=room)
    quote = bytes(l3(big))[:(20 + 8) if v4 else 1280 - 48]
    fresh = {"ttl": 64, "id": 0} if v4 else {"hlim": 64}
    want = Ether(src=lab.mac["client"], dst=CLIENT_PEER) / Ip(src=vip, dst=client, **fresh) / too_big / Raw(quote)
    assert_frame(error, want, "the error to the client")
    outer = 20 if v4 else 40
    assert sorted(len(bytes(f)) - 14 for _, f in tunneled) == [outer + header, 1500]  # the SYN, the packet that fits
    assert drops_of(stats) == {"tunnel_too_big": 1} and stats["too_big_sent"] == 1


def test_tunnel_ipip_and_ip6ip6(tmp_path, ns):
    tun4 = service("tun4", VIP4, 80, "tcp", "tunnel", [backend(B4[0]), backend(B4[1], mac=BMAC4[1])])
    tun6 = service("tun6", VIP6, "any", "tcp", "tunnel", [backend(B6[0]), backend(B6[1])])
    lab = Lab(tmp_path, ns, [tun4, tun6], workers=1)
    flows = 32
    frames = []  # SYN of flow i at 2i, its data at 2i + 1
    for i in range(flows):
        if i % 2:
            ip = IP(src=f"203.0.113.{i + 1}", dst=VIP4, ttl=40, id=i, flags="DF")
            dport = 80
        else:
            ip = IPv6(src=f"2001:db8:f::{i + 1:x}", dst=VIP6, hlim=40)
            dport = (443, 8443)[i % 4 // 2]  # port `any`
        frames.append(from_client(ip / TCP(sport=20000 + i, dport=dport, flags="S", seq=1000 * i)))
        frames.append(from_client(ip / TCP(sport=20000 + i, dport=dport, flags="A", seq=1000 * i + 1, ack=5) /
                                  Raw(b"payload %d" % i)))
    with lab:
        # The backends answer directly: the data comes a round trip after the SYN (see the last test for less).
        lab.send("cl0", frames[0::2])
        lab.wait_out("server", flows)
        lab.send("cl0", frames[1::2])
        picked = {}
        for _, got in lab.wait_out("server", 2 * flows):
            raw = bytes(got)
            assert got.src == lab.mac["server"]
            if got.type == 0x0800:
                outer = IP(raw[14:34])
                inner = raw[34:]
                inner_tcp = IP(inner)[TCP]
                i = inner_tcp.sport - 20000
                assert i % 2 == 1, f"flow {i} (IPv6 VIP) in an IPv4 tunnel"
                assert (outer.version, outer.ihl, outer.proto, outer.ttl) == (4, 5, 4, 64), outer.show2(dump=True)
                assert outer.src == TUN4 and outer.dst in B4[:2], f"flow {i}: outer {outer.src} -> {outer.dst}"
                assert outer.len == 20 + len(inner) and outer.frag == 0 and not outer.flags.MF
                assert checksum(raw[14:34]) == 0, f"flow {i}: outer IPv4 checksum {outer.chksum:#x} is wrong"
                assert got.dst == (BMAC4[1] if outer.dst == B4[1] else SERVER_PEER), f"flow {i}: MAC {got.dst}"
                b = outer.dst
            else:
                assert got.type == 0x86DD, got.summary()
                outer = IPv6(raw[14:54])
                inner = raw[54:]
                inner_tcp = IPv6(inner)[TCP]
                i = inner_tcp.sport - 20000
                assert i % 2 == 0, f"flow {i} (IPv4 VIP) in an IPv6 tunnel"
                assert (outer.version, outer.nh, outer.hlim) == (6, 41, 64), outer.show2(dump=True)
                assert ip_eq(outer.src, TUN6) and norm(outer.dst) in map(norm, B6[:2]), f"flow {i}: {outer.src} -> {outer.dst}"
                assert outer.plen == len(inner)
                assert got.dst == SERVER_PEER
                b = norm(outer.dst)
            kind = "SYN" if inner_tcp.flags == "S" else "data"
            expected_inner = bytes(l3(frames[2 * i + (kind == "data")]))
            assert inner == expected_inner, f"{kind} of flow {i}: the inner packet changed\n got  {inner.hex()}\n want {expected_inner.hex()}"
            assert picked.setdefault(i, b) == b, f"flow {i}: SYN and data went to different backends"
        assert len(picked) == flows
        assert len({b for i, b in picked.items() if i % 2}) == 2 and len({b for i, b in picked.items() if i % 2 == 0}) == 2
        stats = lab.finish()
    assert drops_of(stats) == {}


# ---------------------------------------------------------------------------------------------------------------
# Maglev, stickiness, draining, removal


def udp_flows(count, first, vip=VIP4, dport=53):
    """count UDP flows (one packet each), numbered from `first`; the payload names the flow and the packet."""
    return [(f"203.0.113.{1 + n % 250}", 1024 + n, vip, dport) for n in range(first, first + count)]


def udp_packets(flows, packet):
    return [from_client(IP(src=c, dst=v) / UDP(sport=p, dport=d) / Raw(b"flow %06d packet %d" % (p - 1024, packet)))
            for c, p, v, d in flows]


def destinations(frames, packet=None):
    """flow number -> (backend address, NAT port) of the UDP frames out on the server port (of one packet number)."""
    result = {}
    for _, got in frames:
        payload = bytes(got[UDP].payload)
        if packet is not None and not payload.endswith(b"packet %d" % packet):
            continue
        result[int(payload[5:11])] = (got[IP].dst, got[UDP].sport)
    return result


def test_maglev_is_deterministic_across_restarts_and_follows_weights(tmp_path, ns):
    web = service("web", VIP4, 80, "tcp", "nat",
                  [backend(B4[0], weight=1), backend(B4[1], weight=1), backend(B4[2], weight=2)], table_size=65537)
    flows = 2000
    syns = [from_client(IP(src=f"203.0.113.{1 + i % 250}", dst=VIP4) / TCP(sport=10000 + i, dport=80, flags="S", seq=i))
            for i in range(flows)]
    runs = []
    for _ in range(2):
        lab = Lab(tmp_path, ns, [web], workers=2)
        with lab:
            lab.send("cl0", syns)
            out = lab.wait_out("server", flows, timeout=30)
            stats = lab.finish()
        assert drops_of(stats) == {}
        for q, got in out:
            assert 1024 <= got[TCP].sport <= 65535 and got[TCP].sport % 2 == q
        runs.append({got[TCP].seq: got[IP].dst for _, got in out})
        assert len(runs[-1]) == flows
    moved = [i for i in range(flows) if runs[0][i] != runs[1][i]]
    assert not moved, f"{len(moved)} flows changed backend across a restart, e.g. flow {moved[0]}: " \
                      f"{runs[0][moved[0]]} then {runs[1][moved[0]]}"
    share = Counter(runs[0].values())
    for b, weight in zip(B4, (1, 1, 2)):
        assert abs(share[b] / flows - weight / 4) <= 0.05, f"{b} got {share[b]} of {flows} flows, weight {weight}/4"


def lb_service(backends, **extra):
    return service("dns", VIP4, 53, "udp", "nat", backends, **extra)


def test_reload_adding_a_backend_keeps_connections_where_they_are(tmp_path, ns):
    before = [backend(b) for b in B4[:3]]
    after = [backend(b) for b in B4[:4]]
    old, new = udp_flows(300, 0), udp_flows(300, 1000)
    lab = Lab(tmp_path, ns, [lb_service(before)], workers=2)
    with lab:
        lab.send("cl0", udp_packets(old, 1))
        first = destinations(lab.wait_out("server", 300))
        assert set(b for b, _ in first.values()) == set(B4[:3])
        lab.reload([lb_service(after)])
        lab.send("cl0", udp_packets(old, 2) + udp_packets(new, 1))
        out = lab.wait_out("server", 900)
        stats = lab.finish()
    assert drops_of(stats) == {}
    second = destinations(out, packet=2)
    moved = {n: (first[n], second[n]) for n in first if first[n] != second[n]}
    assert len(second) == 300 and not moved, f"{len(moved)} established flows moved (backend, NAT port): {dict(list(moved.items())[:3])}"
    fresh = Counter(b for n, (b, _) in destinations(out, packet=1).items() if n >= 1000)
    assert 0.10 <= fresh[B4[3]] / 300 <= 0.40, f"new flows after the reload: {fresh}"

    # Without stickiness some of the old flows would have gone to the new backend: a fresh start with the new
    # config sends them there.
    lab = Lab(tmp_path, ns, [lb_service(after)], workers=2)
    with lab:
        lab.send("cl0", udp_packets(old, 1))
        replay = destinations(lab.wait_out("server", 300))
        lab.finish()
    assert sum(1 for b, _ in replay.values() if b == B4[3]) >= 30


def test_weight_zero_drains_a_backend(tmp_path, ns):
    old, new = udp_flows(300, 0), udp_flows(300, 1000)
    lab = Lab(tmp_path, ns, [lb_service([backend(b) for b in B4[:3]])], workers=2)
    with lab:
        lab.send("cl0", udp_packets(old, 1))
        first = destinations(lab.wait_out("server", 300))
        on_drained = [n for n, (b, _) in first.items() if b == B4[1]]
        assert len(on_drained) >= 30, Counter(b for b, _ in first.values())
        lab.reload([lb_service([backend(B4[0]), backend(B4[1], weight=0), backend(B4[2])])])
        lab.send("cl0", udp_packets(old, 2) + udp_packets(new, 1))
        out = lab.wait_out("server", 900)
        stats = lab.finish()
    assert drops_of(stats) == {}
    second = destinations(out, packet=2)
    assert second == first, "established flows must stay, including those of the draining backend"
    fresh = Counter(b for n, (b, _) in destinations(out, packet=1).items() if n >= 1000)
    assert fresh[B4[1]] == 0, f"new flows went to the draining backend: {fresh}"
    assert fresh[B4[0]] > 60 and fresh[B4[2]] > 60, fresh


@pytest.mark.parametrize("policy", ["drop", "keep"])
def test_removed_backend_drop_or_keep(tmp_path, ns, policy):
    old, new = udp_flows(300, 0), udp_flows(300, 1000)
    lab = Lab(tmp_path, ns, [lb_service([backend(b) for b in B4[:3]], removed_backends=policy)], workers=2)
    with lab:
        lab.send("cl0", udp_packets(old, 1))
        first = destinations(lab.wait_out("server", 300))
        on_removed = [n for n, (b, _) in first.items() if b == B4[2]]
        assert len(on_removed) >= 30, Counter(b for b, _ in first.values())
        lab.reload([lb_service([backend(b) for b in B4[:2]], removed_backends=policy)])
        lab.send("cl0", udp_packets(old, 2) + udp_packets(new, 1))
        expected = 900 - (len(on_removed) if policy == "drop" else 0)
        out = lab.wait_out("server", expected)
        stats = lab.finish()
    second = destinations(out, packet=2)
    if policy == "drop":
        assert drops_of(stats) == {"lb_backend_removed": len(on_removed)}
        assert second == {n: d for n, d in first.items() if n not in on_removed}
    else:
        assert drops_of(stats) == {}
        assert second == first, "with keep, connections to the removed backend go on"
    fresh = Counter(b for n, (b, _) in destinations(out, packet=1).items() if n >= 1000)
    assert fresh[B4[2]] == 0 and sum(fresh.values()) == 300, fresh


# ---------------------------------------------------------------------------------------------------------------
# With the firewall


def test_firewall_rules_apply_to_vip_traffic_first(tmp_path, ns):
    services = [service("web", VIP4, 80, "tcp", "nat", [backend(B4[0], port=8080)]),
                service("admin", VIP4, 81, "tcp", "nat", [backend(B4[1], port=8081)])]
    firewall = {"default": "deny", "rules": [
        {"name": "web-in", "in_ports": ["client"], "protocol": "tcp", "destination": VIP4, "destination_ports": 80,
         "action": "allow"}]}
    lab = Lab(tmp_path, ns, services, workers=2, firewall=firewall)
    web = from_client(IP(src="203.0.113.9", dst=VIP4) / TCP(sport=33000, dport=80, flags="S", seq=1))
    admin = from_client(IP(src="203.0.113.9", dst=VIP4) / TCP(sport=33001, dport=81, flags="S", seq=1))
    with lab:
        lab.send("cl0", [web, admin])
        [(_, out)] = lab.wait_out("server", 1)
        assert (out[IP].src, out[IP].dst, out[TCP].dport) == (POOL4, B4[0], 8080)
        reply = from_server(IP(src=B4[0], dst=POOL4) / TCP(sport=8080, dport=out[TCP].sport, flags="SA", seq=9, ack=2))
        lab.send("sv0", [reply])
        [(_, back)] = lab.wait_out("client", 1)
        assert (back[IP].src, back[IP].dst, back[TCP].sport, back[TCP].dport) == (VIP4, "203.0.113.9", 80, 33000)
        stats = lab.finish()
    assert drops_of(stats) == {"rule_deny": 1}


# ---------------------------------------------------------------------------------------------------------------
# Bursts


def test_one_way_packets_right_behind_their_syn_are_kept(tmp_path, ns):
    """dsr and tunnel connections are seen from the client's side only: the client's ACK may reach sluice right behind
    its SYN (a short round trip, or a worker that fell behind), in the same burst. It belongs to the connection the
    SYN opened and must reach the same backend, not be dropped as a packet without a connection."""
    dsr = service("dsr", VIP4, 80, "tcp", "dsr", [backend(B4[i], mac=BMAC4[i]) for i in range(3)])
    tun = service("tun", VIP6, 80, "tcp", "tunnel", [backend(B6[0]), backend(B6[1])])
    lab = Lab(tmp_path, ns, [dsr, tun], workers=1)
    flows = 32
    frames = []
    for i in range(flows):
        ip = IP(src=f"203.0.113.{i + 1}", dst=VIP4) if i % 2 else IPv6(src=f"2001:db8:f::{i + 1:x}", dst=VIP6)
        frames.append(from_client(ip / TCP(sport=20000 + i, dport=80, flags="S", seq=1000 * i)))
        frames.append(from_client(ip / TCP(sport=20000 + i, dport=80, flags="A", seq=1000 * i + 1, ack=5) /
                                  Raw(b"payload %d" % i)))
    with lab:
        lab.send("cl0", frames)  # each SYN immediately followed by its ACK
        stats = lab.sluice.wait_accounted(lab.sent)
        out = lab.out("server")
        lost = drops_of(stats)
        if lost:
            kept = {p[TCP].sport - 20000 for _, p in out if p[TCP].flags == "A"}  # scapy finds the tunnelled TCP too
            missing = sorted(set(range(flows)) - kept)
            pytest.fail(f"{sum(lost.values())} of {2 * flows} frames dropped ({lost}); the ACKs of flows {missing} "
                        f"(sent right behind their SYNs) did not come out")
        lab.finish()
    assert len(out) == 2 * flows
    backend_of = {}
    for _, p in out:
        if p.type == 0x0800:  # dsr: the frame itself
            tcp, b = p[TCP], p.dst
        else:  # IPv6 tunnel
            tcp, b = IPv6(bytes(p)[54:])[TCP], IPv6(bytes(p)[14:54]).dst
        assert backend_of.setdefault(tcp.sport, b) == b, f"flow {tcp.sport - 20000}: SYN and ACK to different backends"
    assert len(backend_of) == flows


def test_explain_names_the_backend_the_data_path_picks(tmp_path, ns):
    """sluicectl explain runs the live snapshot's Maglev lookup: for each flow it names the backend a real SYN of that
    flow then goes to."""
    web = service("web", VIP4, 80, "tcp", "nat", [backend(B4[0], port=8080), backend(B4[1], port=8080), backend(B4[2], port=8080)])
    flows = [(f"203.0.113.{1 + i}", 40000 + i) for i in range(12)]
    sluicectl = str(Path(__file__).resolve().parents[2] / "app/sluicectl/sluicectl")
    lab = Lab(tmp_path, ns, [web], workers=1)
    with lab:
        said = {}
        for client, port in flows:
            answer = subprocess.run([sluicectl, "--prefix", lab.sluice.prefix, "explain", "tcp", f"{client}:{port}",
                                     f"{VIP4}:80", "--port", "client"], capture_output=True, text=True, timeout=10)
            assert answer.returncode == 0, answer.stdout + answer.stderr
            assert "service 'web' (nat)" in answer.stdout, answer.stdout
            said[port] = re.search(r"goes to backend ([0-9.]+):8080", answer.stdout).group(1)
        unserved = subprocess.run([sluicectl, "--prefix", lab.sluice.prefix, "explain", "udp", "203.0.113.1:4000",
                                   f"{VIP4}:80", "--port", "client"], capture_output=True, text=True, timeout=10)
        assert f"own address: {VIP4} is sluice's" in unserved.stdout and "(to_own_address)" in unserved.stdout, unserved.stdout
        # A line longer than a telemetry string (127 characters) comes whole, over several lines.
        pool = subprocess.run([sluicectl, "--prefix", lab.sluice.prefix, "explain", "tcp", f"{B4[0]}:8080",
                               f"{POOL4}:20000", "--port", "server"], capture_output=True, text=True, timeout=10)
        said_of_pool = " ".join(line.strip() for line in pool.stdout.splitlines())
        assert f"load balancer: {POOL4} is a NAT pool address: a reply of the NAT connection holding port 20000 (worker 0), " \
               "rewritten to VIP -> client; with no such connection: dropped (nat_no_connection)" in said_of_pool, pool.stdout
        assert all(len(line) <= 127 for line in pool.stdout.splitlines())
        lab.send("cl0", [from_client(IP(src=c, dst=VIP4) / TCP(sport=p, dport=80, flags="S")) for c, p in flows])
        out = lab.wait_out("server", len(flows))
        lab.finish()
    went = {}
    for _, got in out:  # the NAT rewrote the client port; the SYN's position in the burst follows the send order
        went[len(went)] = got[IP].dst
    assert [said[p] for _, p in flows] == [went[i] for i in range(len(flows))]
    assert len(set(said.values())) > 1  # 12 flows over 3 backends: the check is not vacuous


def test_nat_port_exhaustion_drops_new_connections_and_recovers_when_a_port_is_freed(tmp_path, ns):
    """A worker out of NAT ports refuses new connections (nat_ports_exhausted) and keeps the old ones; a connection
    that ends (RST, then its short close timeout) gives its port back, and the next new connection gets it."""
    web = service("web", VIP4, 80, "tcp", "nat", [backend(B4[0], port=8080)])
    firewall = {"default": "allow", "table_size": 1024, "timeouts": {"tcp_close": 1}}
    lab = Lab(tmp_path, ns, [web], workers=1, nat_ports="20000-20003", firewall=firewall)  # 4 ports, one worker
    syns = [from_client(IP(src="203.0.113.7", dst=VIP4) / TCP(sport=46000 + i, dport=80, flags="S", seq=i)) for i in range(6)]
    with lab:
        lab.send("cl0", syns)
        out = lab.wait_out("server", 4)
        ports = sorted(p[TCP].sport for _, p in out)
        assert ports == [20000, 20001, 20002, 20003]
        assert drops_of(lab.sluice.stats()) == {"nat_ports_exhausted": 2}
        # The backend's port space shows full: telemetry, sluicectl backends and services.
        wait_until(lambda: lab.sluice.telemetry.query("/sluice/backends")["nat_ports_in_use"] == [4],
                   what="the backend's NAT ports in use")
        assert lab.sluice.telemetry.query("/sluice/backends")["nat_ports_capacity"] == [4]
        sluicectl = str(Path(__file__).resolve().parents[2] / "app/sluicectl/sluicectl")
        for command in ("backends", "services"):
            shown = subprocess.run([sluicectl, "--prefix", lab.sluice.prefix, command], capture_output=True, text=True,
                                   timeout=10, check=True).stdout
            assert "4/4 (100%)" in shown, shown
        # An old connection still works: its backend's SYN+ACK comes back to the client.
        first = next(p for _, p in out if p[TCP].seq == 0)
        lab.send("sv0", [from_server(IP(src=B4[0], dst=POOL4) / TCP(sport=8080, dport=first[TCP].sport, flags="SA", seq=7, ack=1))])
        lab.wait_out("client", 1)
        # The client resets the first connection: its port is free again, and a new connection takes it.
        lab.send("cl0", [from_client(IP(src="203.0.113.7", dst=VIP4) / TCP(sport=46000, dport=80, flags="R", seq=1))])
        lab.wait_out("server", 5)
        time.sleep(2.5)  # tcp_close: 1 s, then the incremental expiry reaches it and the port goes back to the pool
        lab.send("cl0", [from_client(IP(src="203.0.113.8", dst=VIP4) / TCP(sport=47000, dport=80, flags="S", seq=100))])
        out = lab.wait_out("server", 6)
        stats = lab.finish()
    reused = [p for _, p in out if p[IP].dst == B4[0] and p[TCP].seq == 100]
    assert len(reused) == 1 and reused[0][TCP].sport == first[TCP].sport
    assert drops_of(stats) == {"nat_ports_exhausted": 2}

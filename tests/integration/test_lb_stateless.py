"""Connections that reach sluice mid-stream (scale-out): behind ECMP, when an instance dies or ECMP
rehashes, the packets of an established TCP connection arrive at an instance that never saw its SYN.

- dsr and tunnel services send such a packet to the backend their Maglev table gives for its 5-tuple (the one an
  instance that saw the SYN picked: every instance fills the same table) and adopt the connection (an ACK opens an
  established one-way entry), so it stays on that backend when the backend set changes later;
- a FIN or RST without a connection goes to the Maglev backend too, but opens no entry;
- nat services cannot (the backend knows the connection by another instance's pool address and port): dropped as
  lb_nat_no_state;
- the firewall's rules judge these packets first, like SYNs.

Same topology and helpers as test_lb.py."""

from collections import Counter

import pytest
from scapy.all import IP, TCP, IPv6, Raw

from test_lb import (B4, B6, BMAC4, BMAC6, POOL4, VIP4, VIP6, Lab, backend, drops_of, from_client, norm,  # noqa: F401
                     service, ns)


METRICS_PORT = 9469  # inside the test's own namespace


def scrape_sum(ns, name):
    """The sum of every sample of a counter family (one per worker), scraped inside the namespace sluice runs in."""
    text = ns.exec("/usr/bin/python3", "-c", "import urllib.request, sys; sys.stdout.write(urllib.request.urlopen("
                   f"'http://127.0.0.1:{METRICS_PORT}/metrics', timeout=5).read().decode())").stdout
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
              if line.startswith(name + "{") or line.startswith(name + " ")]
    assert values, f"{name} is not exported"
    return sum(values)


class MetricsLab(Lab):
    """A Lab whose sluice also serves Prometheus metrics."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.config["metrics"] = {"listen": f"127.0.0.1:{METRICS_PORT}"}
        self.ns.exec("ip", "link", "set", "lo", "up")

    def metric(self, name):
        return scrape_sum(self.ns, name)


def flow_ip(i):
    """Flow i: IPv4 for odd i, IPv6 for even i, each from its own client address and port."""
    if i % 2:
        return IP(src=f"203.0.113.{1 + i % 250}", dst=VIP4, ttl=50, id=i)
    return IPv6(src=f"2001:db8:f::{1 + i:x}", dst=VIP6, hlim=50)


def sport(i):
    return 30000 + i


def syn(i):
    return from_client(flow_ip(i) / TCP(sport=sport(i), dport=80, flags="S", seq=1000 * i))


def mid_stream(i, n, flags="A"):
    """The n-th packet (n >= 1) of flow i after its handshake, as the client sends it."""
    seg = TCP(sport=sport(i), dport=80, flags=flags, seq=1000 * i + 1 + 100 * n, ack=4242)
    return from_client(flow_ip(i) / (seg / Raw(b"data %d/%d" % (i, n)) if "P" in flags else seg))


def services_of(mode, count):
    """A service on each VIP, `count` backends each."""
    if mode == "dsr":
        b4 = [backend(B4[k], mac=BMAC4[k]) for k in range(count)]
        b6 = [backend(B6[k], mac=BMAC6[k]) for k in range(count)]
    else:
        b4 = [backend(B4[k]) for k in range(count)]
        b6 = [backend(B6[k]) for k in range(count)]
    return [service(f"{mode}4", VIP4, 80, "tcp", mode, b4), service(f"{mode}6", VIP6, 80, "tcp", mode, b6)]


def where(mode, frame):
    """(flow, backend, TCP flags, payload) of a frame out on the server port: a dsr backend by its MAC, a tunnel
    backend by the outer destination."""
    raw = bytes(frame)
    if mode == "dsr":
        inner = raw[14:]
        tcp = (IP(inner) if frame.type == 0x0800 else IPv6(inner))[TCP]
        b = frame.dst
    elif frame.type == 0x0800:
        outer = IP(raw[14:34])
        assert outer.proto == 4, frame.summary()
        tcp, b = IP(raw[34:])[TCP], outer.dst
    else:
        outer = IPv6(raw[14:54])
        assert outer.nh == 41, frame.summary()
        tcp, b = IPv6(raw[54:])[TCP], norm(outer.dst)
    return tcp.sport - 30000, b, str(tcp.flags), bytes(tcp.payload)


def backends_by_flow(mode, frames, packet=None):
    """flow -> backend of the frames (of the packet number `packet` only, when given)."""
    result = {}
    for _, got in frames:
        i, b, _, payload = where(mode, got)
        if packet is None or payload.endswith(b"/%d" % packet):
            assert result.setdefault(i, b) == b, f"flow {i}: packets to two backends, {result[i]} and {b}"
    return result


FLOWS = 200


@pytest.mark.parametrize("mode", ["dsr", "tunnel"])
def test_mid_stream_packets_go_to_the_syn_backend_and_stay_there_across_a_reload(tmp_path, ns, mode):
    flows = range(FLOWS)
    # What an instance that saw the handshakes picked: a fresh sluice, the SYNs.
    lab = MetricsLab(tmp_path, ns, services_of(mode, 3), workers=2)
    with lab:
        lab.send("cl0", [syn(i) for i in flows])
        picked = backends_by_flow(mode, lab.wait_out("server", FLOWS))
        stats = lab.finish()
    assert drops_of(stats) == {}
    assert len(picked) == FLOWS and len(set(picked.values())) == 6, Counter(picked.values())

    # Another fresh instance gets the same connections mid-stream: two packets each, never a SYN.
    lab = MetricsLab(tmp_path, ns, services_of(mode, 3), workers=2)
    with lab:
        lab.send("cl0", [mid_stream(i, 1, "A") for i in flows] + [mid_stream(i, 2, "PA") for i in flows])
        adopted = lab.wait_out("server", 2 * FLOWS)
        first = backends_by_flow(mode, adopted)
        wrong = {i: (first[i], picked[i]) for i in flows if first[i] != picked[i]}
        assert not wrong, f"{len(wrong)} flows went elsewhere than their SYN would have (got, SYN's): " \
                          f"{dict(list(wrong.items())[:5])}"
        assert lab.metric("sluice_lb_stateless_adoptions_total") == FLOWS  # one entry per flow, not per packet
        assert lab.metric("sluice_conntrack_inserts_total") == FLOWS
        assert lab.metric("sluice_lb_stateless_forwards_total") == 0
        assert drops_of(lab.sluice.stats()) == {}

        # A fourth backend: Maglev moves about a quarter of the flows' slots, but adopted connections stay.
        lab.reload(services_of(mode, 4))
        lab.send("cl0", [mid_stream(i, 3, "PA") for i in flows])
        out = lab.wait_out("server", 3 * FLOWS)
        after = backends_by_flow(mode, out, packet=3)
        moved = {i: (picked[i], after[i]) for i in flows if after[i] != picked[i]}
        assert len(after) == FLOWS and not moved, f"{len(moved)} adopted flows moved after the reload: " \
                                                  f"{dict(list(moved.items())[:5])}"
        assert lab.metric("sluice_lb_stateless_adoptions_total") == FLOWS
        stats = lab.finish()
    assert drops_of(stats) == {}

    # Without the adopted entries those flows would have moved: a fresh instance with four backends sends some of
    # them to the new one.
    lab = MetricsLab(tmp_path, ns, services_of(mode, 4), workers=1)
    with lab:
        lab.send("cl0", [mid_stream(i, 3, "PA") for i in flows])
        fresh = backends_by_flow(mode, lab.wait_out("server", FLOWS))
        lab.finish()
    new = {BMAC4[3], BMAC6[3]} if mode == "dsr" else {B4[3], norm(B6[3])}
    to_new = [i for i in flows if fresh[i] in new]
    assert len(to_new) >= FLOWS // 10, f"only {len(to_new)} flows move to a fourth backend: the check is vacuous"


def test_nat_mid_stream_packets_are_dropped_with_their_own_reason(tmp_path, ns):
    """No instance can pick up a NAT connection another one opened: dropped, counted as lb_nat_no_state, even with
    loose_pickup (which would otherwise open a translation the backend knows nothing of)."""
    web = service("web", VIP4, 80, "tcp", "nat", [backend(B4[0], port=8080), backend(B4[1], port=8080)])
    web6 = service("web6", VIP6, 80, "tcp", "nat", [backend(B6[0], port=8080)])
    lab = MetricsLab(tmp_path, ns, [web, web6], workers=2, firewall={"default": "allow", "loose_pickup": True})
    flows = range(40)
    kinds = ["A", "PA", "FA", "R", "RA"]
    strays = [mid_stream(i, 1, kinds[i % len(kinds)]) for i in flows]
    synack = from_client(IP(src="203.0.113.77", dst=VIP4) / TCP(sport=5555, dport=80, flags="SA", seq=1, ack=1))
    with lab:
        lab.send("cl0", strays + [synack])
        stats = lab.sluice.wait_accounted(lab.sent)
        assert lab.metric("sluice_lb_stateless_adoptions_total") == 0
        assert lab.metric("sluice_conntrack_inserts_total") == 0
        # A SYN still opens a connection normally.
        lab.send("cl0", [syn(1)])
        [(_, out)] = lab.wait_out("server", 1)
        assert out[IP].src == POOL4 and out[IP].dst in B4[:2]
        stats = lab.finish()
    assert drops_of(stats) == {"lb_nat_no_state": len(strays), "ct_no_connection": 1}


def test_firewall_judges_mid_stream_packets_first(tmp_path, ns):
    """A denied source gets nothing through by skipping the SYN: its ACKs, FINs and RSTs meet the rules like SYNs."""
    dsr = services_of("dsr", 3)
    firewall = {"default": "allow", "rules": [
        {"name": "banned", "source": "203.0.113.0/25", "protocol": "tcp", "destination": VIP4, "action": "deny"}]}
    lab = MetricsLab(tmp_path, ns, dsr, workers=2, firewall=firewall)
    denied = [i for i in range(1, 200, 2) if 1 + i % 250 < 128]   # IPv4 flows from 203.0.113.0/25
    allowed = [i for i in range(1, 200, 2) if 1 + i % 250 >= 128]
    assert len(denied) >= 20 and len(allowed) >= 20
    with lab:
        frames = [mid_stream(i, 1, "A") for i in denied + allowed] + [mid_stream(i, 2, "R") for i in denied[:10]]
        lab.send("cl0", frames)
        out = lab.wait_out("server", len(allowed))
        got = backends_by_flow("dsr", out)
        assert sorted(got) == allowed, f"denied flows forwarded: {sorted(set(got) - set(allowed))}"
        assert lab.metric("sluice_lb_stateless_adoptions_total") == len(allowed)
        assert lab.metric("sluice_lb_stateless_forwards_total") == 0
        stats = lab.finish()
    assert drops_of(stats) == {"rule_deny": len(denied) + 10}


def test_bare_rst_and_fin_go_to_the_maglev_backend_without_an_entry(tmp_path, ns):
    """A FIN or RST of a connection sluice does not know is sent to the flow's Maglev backend (so the backend lets
    go of its side, as Katran does) but opens no connection: the next ACK of the flow is still adopted."""
    flows = range(60)
    ending = [mid_stream(i, 1, "R" if i % 3 == 0 else "RA" if i % 3 == 1 else "FA") for i in flows]
    # What a SYN of each flow gets, for reference.
    lab = MetricsLab(tmp_path, ns, services_of("dsr", 3), workers=2)
    with lab:
        lab.send("cl0", [syn(i) for i in flows])
        picked = backends_by_flow("dsr", lab.wait_out("server", len(flows)))
        lab.finish()

    lab = MetricsLab(tmp_path, ns, services_of("dsr", 3), workers=2)
    with lab:
        lab.send("cl0", ending)
        out = lab.wait_out("server", len(flows))
        sent_to = backends_by_flow("dsr", out)
        assert sent_to == picked, "a FIN or RST went elsewhere than its flow's SYN would have"
        for _, got in out:
            i = where("dsr", got)[0]
            assert bytes(got)[12:] == bytes(ending[i])[12:], f"flow {i}: the IP packet changed"
        assert lab.metric("sluice_lb_stateless_forwards_total") == len(flows)
        assert lab.metric("sluice_conntrack_inserts_total") == 0, "a FIN or RST without a connection opened one"
        assert lab.metric("sluice_lb_stateless_adoptions_total") == 0
        # No entry was made: the flows' next ACKs are adopted, to the same backends.
        lab.send("cl0", [mid_stream(i, 2, "A") for i in flows])
        out = lab.wait_out("server", 2 * len(flows))
        assert backends_by_flow("dsr", out) == picked
        assert lab.metric("sluice_lb_stateless_adoptions_total") == len(flows)
        stats = lab.finish()
    assert drops_of(stats) == {}

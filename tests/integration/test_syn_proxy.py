"""The SYN proxy (a `syn_proxy: true` nat service) on live packets, through the same veth + net_pcap set-up as
test_lb.py: sluice answers a SYN with a SYN cookie and keeps nothing; only an ACK that brings a valid cookie back
opens the connection, whose SYN sluice sends to the backend; the backend's SYN+ACK is answered by sluice, and from
then on every packet's sequence (to the client) or acknowledgment (to the backend) number is translated between the
cookie's sequence space and the backend's. Every frame is checked field by field, checksums included."""

import os
import random
import time

import pytest
from scapy.all import IP, TCP, Ether, IPv6, Raw

from netns import Netns
from sluice_harness import wait_until
from test_lb import (B4, B6, BMAC4, CLIENT_PEER, POOL4, POOL6, SERVER_PEER, VIP4, VIP6, Lab, assert_frame, backend,
                     drops_of, from_client, from_server, service, translated)


@pytest.fixture
def ns():
    namespace = Netns(f"slsp{os.getpid()}", ["cl0", "sv0"])
    yield namespace
    namespace.delete()


def settled(read, quiet=2.0, timeout=90):
    """The value of read() once it has not changed for `quiet` seconds."""
    last, since, deadline = read(), time.monotonic(), time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(0.2)
        value = read()
        if value != last:
            last, since = value, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return value
    raise TimeoutError(f"still changing after {timeout}s: {last}")


def with_flags(frames, flags):
    """The frames of lab.out() (worker, frame) whose TCP flags are exactly `flags` (the pcaps are per worker, so
    their concatenation is not in sending order)."""
    return [f for _, f in frames if f[TCP].flags == flags]


def own_segment(eth_src, eth_dst, src, dst, sport, dport, seq, ack, flags, window, mss=None, v6=False):
    """A segment sluice writes itself: plain header, no IP options, TTL / hop limit 64 (IPv4: DF, id 0)."""
    ip = IPv6(src=src, dst=dst, hlim=64) if v6 else IP(src=src, dst=dst, ttl=64, id=0, flags="DF")
    options = [("MSS", mss)] if mss else []
    return Ether(bytes(Ether(src=eth_src, dst=eth_dst) / ip /
                       TCP(sport=sport, dport=dport, seq=seq, ack=ack, flags=flags, window=window, options=options)))


def hop(frame, n=1):
    """The frame as the forward stage leaves it: TTL / hop limit one lower (checksums recomputed)."""
    f = Ether(bytes(frame))
    if IP in f:
        f[IP].ttl -= n
        del f[IP].chksum
    else:
        f[IPv6].hlim -= n
    del f[TCP].chksum
    return Ether(bytes(f))


@pytest.mark.parametrize("v6", [False, True], ids=["ipv4", "ipv6"])
def test_handshake_translation_and_data_both_ways(tmp_path, ns, v6):
    vip, pool, backends = (VIP6, POOL6, B6[:2]) if v6 else (VIP4, POOL4, B4[:2])
    ip = (lambda s, d: IPv6(src=s, dst=d, hlim=60)) if v6 else (lambda s, d: IP(src=s, dst=d, ttl=60))
    web = service("web", vip, 80, "tcp", "nat", [backend(b, port=8080) for b in backends], syn_proxy=True)
    lab = Lab(tmp_path, ns, [web], workers=2, nat_ports="20000-29999")
    flows = 24
    clients = [(f"2001:db8:f::{1 + i:x}" if v6 else f"203.0.113.{1 + i}", 41000 + i) for i in range(flows)]
    isn = [random.randrange(2**32) for _ in range(flows)]
    client_mss = [1460, 1400, 1220, None]  # the cookie keeps 1460, 1220, 1220, 536
    kept_mss = [1460, 1220, 1220, 536]
    our_mss = 1440 if v6 else 1460  # net_pcap ports: MTU 1500
    syns = [from_client(ip(c, vip) / TCP(sport=p, dport=80, flags="S", seq=isn[i], window=29200,
                                         options=[("MSS", client_mss[i % 4])] if client_mss[i % 4] else []))
            for i, (c, p) in enumerate(clients)]
    with lab:
        # 1. Each SYN is answered from the VIP with a cookie; nothing reaches the backends, nothing is tracked.
        lab.send("cl0", syns)
        cookie = {}
        for _, got in lab.wait_out("client", flows):
            i = got[TCP].dport - 41000
            cookie[i] = got[TCP].seq
            want = own_segment(lab.mac["client"], CLIENT_PEER, vip, clients[i][0], 80, clients[i][1], cookie[i],
                               (isn[i] + 1) % 2**32, "SA", 65535, our_mss, v6)
            assert_frame(got, want, f"SYN+ACK of flow {i}")
        assert len(cookie) == flows and len(set(cookie.values())) == flows
        stats = lab.sluice.stats()
        assert stats["conn_entries"] == 0 and stats["syn_cookies_sent"] == flows
        assert not lab.out("server")

        # 2. The client's ACK brings the cookie back: the connection opens and sluice sends the backend a SYN with
        # the client's ISN, window and (the cookie's) MSS, from a pool address and port.
        acks = [from_client(ip(c, vip) / TCP(sport=p, dport=80, flags="A", seq=(isn[i] + 1) % 2**32,
                                             ack=(cookie[i] + 1) % 2**32, window=501 + i))
                for i, (c, p) in enumerate(clients)]
        lab.send("cl0", acks)
        conn = {}
        for q, got in lab.wait_out("server", flows):
            i = isn.index(got[TCP].seq)
            b, nat_port = got[IPv6 if v6 else IP].dst, got[TCP].sport
            assert b in backends, got.summary()
            want = hop(own_segment(lab.mac["server"], SERVER_PEER, pool, b, nat_port, 8080, isn[i], 0, "S", 501 + i,
                                   kept_mss[i % 4], v6))
            assert_frame(got, want, f"SYN of flow {i} to its backend")
            conn[i] = (b, nat_port)
        assert len(conn) == flows
        stats = lab.sluice.stats()
        assert stats["conn_entries"] == flows and stats["syn_cookies_accepted"] == flows

        # 3. The backends answer; sluice completes their handshake itself (the client saw its SYN+ACK long ago).
        backend_isn = [random.randrange(2**32) for _ in range(flows)]
        synacks = [from_server(ip(b, pool) / TCP(sport=8080, dport=p, flags="SA", seq=backend_isn[i],
                                                 ack=(isn[i] + 1) % 2**32, window=65160, options=[("MSS", 1400)]))
                   for i, (b, p) in sorted(conn.items())]
        lab.send("sv0", synacks)
        handshakes = with_flags(lab.wait_out("server", 2 * flows), "A")
        assert len(handshakes) == flows
        for got in handshakes:
            i = isn.index((got[TCP].seq - 1) % 2**32)
            b, nat_port = conn[i]
            want = own_segment(lab.mac["server"], SERVER_PEER, pool, b, nat_port, 8080, (isn[i] + 1) % 2**32,
                               (backend_isn[i] + 1) % 2**32, "A", 501 + i, None, v6)
            assert_frame(got, want, f"ACK of flow {i} to its backend")
        assert len(lab.out("client")) == flows  # nothing more to the clients

        # 4. Data both ways: the client's acknowledgments move into the backend's space, the backend's sequence
        # numbers into the cookie's.
        requests = [from_client(ip(c, vip) / TCP(sport=p, dport=80, flags="PA", seq=(isn[i] + 1) % 2**32,
                                                 ack=(cookie[i] + 1) % 2**32, window=501) / Raw(b"GET /%d\r\n" % i))
                    for i, (c, p) in enumerate(clients)]
        lab.send("cl0", requests)
        forwarded = with_flags(lab.wait_out("server", 3 * flows), "PA")
        assert len(forwarded) == flows
        for got in forwarded:
            i = isn.index((got[TCP].seq - 1) % 2**32)
            b, nat_port = conn[i]
            want = Ether(bytes(requests[i]))
            want[TCP].ack = (backend_isn[i] + 1) % 2**32
            assert_frame(got, translated(want, lab.mac["server"], SERVER_PEER, pool, b, nat_port, 8080),
                         f"request of flow {i}")
        answers = [from_server(ip(b, pool) / TCP(sport=8080, dport=p, flags="PA", seq=(backend_isn[i] + 1) % 2**32,
                                                 ack=(isn[i] + 1 + len(b"GET /%d\r\n" % i)) % 2**32, window=501) /
                               Raw(b"200 OK %d" % i))
                   for i, (b, p) in sorted(conn.items())]
        lab.send("sv0", answers)
        returned = with_flags(lab.wait_out("client", 2 * flows), "PA")
        assert len(returned) == flows
        for got in returned:
            i = got[TCP].dport - 41000
            want = Ether(bytes(answers[i]))
            want[TCP].seq = (cookie[i] + 1) % 2**32
            assert_frame(got, translated(want, lab.mac["client"], CLIENT_PEER, vip, clients[i][0], 80, clients[i][1]),
                         f"answer of flow {i}")
        stats = lab.finish()
    assert drops_of(stats) == {}


def test_bad_cookies_pending_packets_resets_retransmissions_and_no_backend(tmp_path, ns):
    web = service("web", VIP4, 80, "tcp", "nat", [backend(B4[0], port=8080, mac=BMAC4[0])], syn_proxy=True)
    closed = service("closed", VIP4, 81, "tcp", "nat", [backend(B4[1], weight=0)], syn_proxy=True)
    lab = Lab(tmp_path, ns, [web, closed], workers=1, nat_ports="20000-29999")
    c = "203.0.113.7"
    to_vip = lambda sport, **tcp: from_client(IP(src=c, dst=VIP4) / TCP(sport=sport, dport=80, **tcp))
    from_backend = lambda dport, **tcp: from_server(IP(src=B4[0], dst=POOL4) / TCP(sport=8080, dport=dport, **tcp),
                                                    mac=BMAC4[0])

    def handshake(sport, isn):
        """SYN -> cookie; ACK -> the backend's SYN. Returns (cookie, the SYN sent to the backend)."""
        syns_before = len(with_flags(lab.out("server"), "S"))
        lab.send("cl0", [to_vip(sport, flags="S", seq=isn)])
        synack = wait_until(lambda: [f for _, f in lab.out("client") if f[TCP].dport == sport and f[TCP].flags == "SA"],
                            timeout=15, what="the SYN+ACK")[0]
        lab.send("cl0", [to_vip(sport, flags="A", seq=isn + 1, ack=synack[TCP].seq + 1)])
        syn = wait_until(lambda: len(with_flags(lab.out("server"), "S")) > syns_before and
                         with_flags(lab.out("server"), "S")[-1], timeout=15, what="the SYN to the backend")
        assert syn[TCP].seq == isn and syn[IP].dst == B4[0]
        return synack[TCP].seq, syn

    with lab:
        # An ACK nobody was given a cookie for, and one whose cookie is off: no state, dropped.
        lab.send("cl0", [to_vip(5000, flags="A", seq=1, ack=12345),
                         from_client(IP(src="203.0.113.8", dst=VIP4) / TCP(sport=5001, dport=80, flags="PA", seq=9,
                                                                           ack=777) / Raw(b"x"))])
        # A service with no usable backend: the SYN gets no SYN+ACK (the client must not think it connected).
        lab.send("cl0", [from_client(IP(src=c, dst=VIP4) / TCP(sport=5002, dport=81, flags="S", seq=1))])

        # Pending: the client's retransmission from ISN + 1 sends the backend the SYN again (the first may be
        # lost); a later segment waits (dropped); the backend's RST reaches the client in the cookie's space.
        cookie, syn = handshake(5003, 100)
        lab.send("cl0", [to_vip(5003, flags="PA", seq=101, ack=cookie + 1) / Raw(b"early"),
                         to_vip(5003, flags="PA", seq=106, ack=cookie + 1) / Raw(b"later")])
        again = wait_until(lambda: len(with_flags(lab.out("server"), "S")) == 2 and with_flags(lab.out("server"), "S")[1],
                           timeout=15, what="the SYN sent again")
        assert (again[TCP].seq, again[TCP].sport, dict(again[TCP].options)["MSS"]) == (100, syn[TCP].sport, 536)
        assert len(again[TCP].payload) == 0
        lab.send("sv0", [from_backend(syn[TCP].sport, flags="RA", seq=0, ack=101)])
        rst = wait_until(lambda: with_flags(lab.out("client"), "RA"), timeout=15, what="the RST")[0]
        assert rst[TCP].seq == (cookie + 1) % 2**32 and rst[TCP].ack == 101
        assert (rst[IP].src, rst[TCP].sport, rst[IP].dst, rst[TCP].dport) == (VIP4, 80, c, 5003)

        # A client RST while pending removes the connection: the backend's late SYN+ACK finds none.
        cookie, syn = handshake(5004, 200)
        lab.send("cl0", [to_vip(5004, flags="R", seq=201)])
        wait_until(lambda: lab.sluice.stats()["conn_entries"] == 1, timeout=15, what="the connection removed")
        lab.send("sv0", [from_backend(syn[TCP].sport, flags="SA", seq=9000, ack=201)])

        # Established, then the backend retransmits its SYN+ACK (sluice's ACK was lost): answered again, the client
        # sees nothing of it.
        cookie, syn = handshake(5005, 300)
        lab.send("sv0", [from_backend(syn[TCP].sport, flags="SA", seq=7000, ack=301),
                         from_backend(syn[TCP].sport, flags="SA", seq=7000, ack=301)])
        acks = wait_until(lambda: len(with_flags(lab.out("server"), "A")) == 2 and with_flags(lab.out("server"), "A"),
                          timeout=15, what="two ACKs to the backend")
        assert all((a[TCP].seq, a[TCP].ack) == (301, 7001) for a in acks)
        lab.send("cl0", [to_vip(5005, flags="FA", seq=301, ack=cookie + 1)])
        fin = wait_until(lambda: with_flags(lab.out("server"), "FA"), timeout=15, what="the FIN")[0]
        assert (fin[TCP].seq, fin[TCP].ack) == (301, 7001)
        assert not [f for _, f in lab.out("client") if f[TCP].dport == 5005 and f[TCP].flags != "SA"]
        stats = lab.finish()
    assert stats["syn_cookies_sent"] == 3 and stats["syn_cookies_accepted"] == 3
    assert drops_of(stats) == {"syn_proxy_bad_cookie": 2, "lb_no_backend": 1, "syn_proxy_pending": 2,
                               "nat_no_connection": 1}


def test_a_syn_flood_creates_no_state_and_a_real_client_still_connects(tmp_path, ns):
    web = service("web", VIP4, 80, "tcp", "nat", [backend(B4[0], port=8080)], syn_proxy=True)
    lab = Lab(tmp_path, ns, [web], workers=2, nat_ports="20000-29999")
    rng = random.Random(7)
    unicast = [octet for octet in range(1, 224) if octet not in (127, 169)]  # martian sources are dropped on RX
    flood = [from_client(IP(src=f"{rng.choice(unicast)}.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(1, 255)}",
                            dst=VIP4) / TCP(sport=rng.randrange(1024, 65536), dport=80, flags="S",
                                            seq=rng.randrange(2**32)))
             for _ in range(3000)]
    with lab:
        # A flood is not paced to the capture ring: the kernel may lose some of it before sluice sees it (net_pcap's
        # rx_iface), which is not what this test is about. What sluice received is what it must answer.
        for start in range(0, len(flood), 100):
            ns.inject("cl0", flood[start:start + 100], tmp_path)
        received = settled(lambda: lab.sluice.stats()["rx_packets"])
        assert received >= len(flood) // 2, f"only {received} of {len(flood)} SYNs reached sluice"
        lab.sluice.tolerate_kernel_losses()
        lab.sent = received
        lab.wait_out("client", received, timeout=60)
        stats = lab.sluice.stats()
        assert stats["conn_entries"] == 0 and stats["syn_cookies_sent"] == received
        c = "198.51.100.5"
        lab.send("cl0", [from_client(IP(src=c, dst=VIP4) / TCP(sport=6000, dport=80, flags="S", seq=1))])
        got = lab.wait_out("client", received + 1, timeout=60)
        synack = next(f for _, f in got if f[IP].dst == c)
        lab.send("cl0", [from_client(IP(src=c, dst=VIP4) / TCP(sport=6000, dport=80, flags="A", seq=2,
                                                              ack=(synack[TCP].seq + 1) % 2**32))])
        (_, syn), = lab.wait_out("server", 1)
        assert syn[TCP].flags == "S" and syn[TCP].seq == 1 and syn[IP].dst == B4[0]
        assert lab.sluice.stats()["conn_entries"] == 1
        stats = lab.finish()
    assert drops_of(stats) == {}

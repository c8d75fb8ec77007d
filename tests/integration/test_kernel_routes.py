"""routing.kernel_table: sluice mirrors a kernel routing table of the namespace it runs in. Routes added with
`ip route ... table N` (as BIRD or FRR install them) appear in its route table within a second and go when deleted:
a table read at start, multipath routes as ECMP next hops with weights, blackhole and prohibit kinds, IPv6, a route
whose next hop is on no link of sluice's left out; packets follow a route that changes under traffic, none lost;
routes a router announces over BGP to the gateway's BIRD come and go in sluice as they do in BIRD; and notifications
lost to a full socket buffer are made good by reading the table again."""

import logging
import os
import re
import shutil
import signal
import subprocess
import threading
import time

import pytest

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import ARP, IP, UDP, Ether, rdpcap

from netns import Netns
from sluice_harness import Sluice, wait_until

TABLE = "100"
CLIENT_PEER = "02:00:00:00:01:01"
HOP_MACS = {"192.0.2.11": "02:00:00:00:02:11", "192.0.2.12": "02:00:00:00:02:12"}


@pytest.fixture
def ns():
    namespace = Netns(f"slkr{os.getpid()}", ["cl0", "sv0"])
    # The kernel's own leg on the routed link, as a gateway's routing daemon has: routes name their next hops there.
    # (a veth pair: this kernel has no dummy interfaces).
    namespace.exec("ip", "link", "add", "gw0", "type", "veth", "peer", "name", "gw0p")
    namespace.exec("sysctl", "-qw", "net.ipv6.conf.gw0.disable_ipv6=0")
    for end in ("gw0", "gw0p"):
        namespace.exec("ip", "link", "set", end, "up")
    namespace.exec("ip", "addr", "add", "192.0.2.254/24", "dev", "gw0")
    namespace.exec("ip", "-6", "addr", "add", "2001:db8:1::fe/64", "dev", "gw0", "nodad")
    yield namespace
    namespace.delete()


def config(tmp_path):
    return {
        "dataplane": {"idle_sleep_us": 50},
        "ports": [
            {"name": "client", "device": f"net_pcap0,rx_iface=cl0,tx_pcap={tmp_path}/client_out.pcap",
             "addresses": ["203.0.113.1/24"]},
            {"name": "server", "device": f"net_pcap1,rx_iface=sv0,tx_pcap={tmp_path}/server_out.pcap",
             "addresses": ["192.0.2.1/24", "2001:db8:1::1/64"]},
        ],
        "lcores": [{"id": 1, "roles": ["rx", "worker"]}],
        "routing": {"kernel_table": int(TABLE)},
    }


def ip_route(ns, verb, *args, family="-4"):
    """ip route VERB ... with "table N" after the prefix (a multipath route's nexthops come last)."""
    at = next(i for i, a in enumerate(args) if "/" in a) + 1
    ns.exec("ip", family, "route", verb, *args[:at], "table", TABLE, *args[at:])


def port_mac(sluice, name):
    return re.search(rf"port '{name}':.*? mac ([0-9a-f:]{{17}})", sluice.log()).group(1)


def appears(sluice, line, present=True, within=1.0):
    """Waits (at most `within` seconds) for line to be in the route table (or gone); returns the seconds it took."""
    started = time.monotonic()
    wait_until(lambda: (line in sluice.routes()) == present, timeout=within, interval=0.02,
               what=f"{line!r} {'in' if present else 'out of'} the route table: {sluice.routes()}")
    return time.monotonic() - started


def test_kernel_routes_appear_and_go_within_a_second(tmp_path, ns):
    ip_route(ns, "add", "198.51.100.0/24", "via", "192.0.2.11")  # before sluice starts
    sluice = Sluice(tmp_path, config(tmp_path), netns=ns)
    with sluice:
        assert "198.51.100.0/24 kernel via 192.0.2.11 on server (unresolved)" in sluice.routes()
        assert "192.0.2.0/24 connected on server" in sluice.routes()

        ip_route(ns, "add", "100.64.0.0/16", "nexthop", "via", "192.0.2.11",
                 "nexthop", "via", "192.0.2.12", "weight", "2")
        appears(sluice, "100.64.0.0/16 kernel via 192.0.2.11 on server (unresolved), "
                        "192.0.2.12 on server weight 2 (unresolved)")
        ip_route(ns, "add", "blackhole", "100.65.0.0/16")
        appears(sluice, "100.65.0.0/16 kernel blackhole")
        ip_route(ns, "add", "prohibit", "100.66.0.0/16")
        appears(sluice, "100.66.0.0/16 kernel reject")
        ip_route(ns, "add", "2001:db8:5::/48", "via", "2001:db8:1::11", family="-6")
        appears(sluice, "2001:db8:5::/48 kernel via 2001:db8:1::11 on server (unresolved)")
        # A next hop on no link of sluice's: left out (the kernel's device is not one of sluice's ports).
        ip_route(ns, "add", "100.67.0.0/16", "via", "10.9.9.9", "dev", "gw0", "onlink")
        ip_route(ns, "del", "198.51.100.0/24")
        appears(sluice, "198.51.100.0/24 kernel via 192.0.2.11 on server (unresolved)", present=False)
        assert not any(line.startswith("100.67.0.0/16") for line in sluice.routes())
        # A route of another table is not sluice's business.
        ns.exec("ip", "route", "add", "100.68.0.0/16", "table", "101", "via", "192.0.2.11")
        ip_route(ns, "del", "100.65.0.0/16")
        appears(sluice, "100.65.0.0/16 kernel blackhole", present=False)
        assert not any(line.startswith("100.68.0.0/16") for line in sluice.routes())
        assert sluice.stop() == 0, sluice.log()


def test_packets_follow_a_kernel_route_that_changes_under_traffic(tmp_path, ns):
    # Both next hops are in use (a multipath route), so both are resolved before the route under test moves.
    ip_route(ns, "add", "100.64.0.0/16", "nexthop", "via", "192.0.2.11",
             "nexthop", "via", "192.0.2.12")
    ip_route(ns, "add", "198.51.100.0/24", "via", "192.0.2.11")
    sluice = Sluice(tmp_path, config(tmp_path), netns=ns)
    with sluice:
        answers = [Ether(src=mac, dst="ff:ff:ff:ff:ff:ff") / ARP(op=2, hwsrc=mac, psrc=address, pdst="192.0.2.1")
                   for address, mac in HOP_MACS.items()]
        sluice.netns.inject("sv0", answers)
        appears(sluice, "198.51.100.0/24 kernel via 192.0.2.11 on server (02:00:00:00:02:11)", within=5)
        appears(sluice, "100.64.0.0/16 kernel via 192.0.2.11 on server (02:00:00:00:02:11), "
                        "192.0.2.12 on server (02:00:00:00:02:12)", within=5)
        count = 1500
        client_mac = port_mac(sluice, "client")
        frames = [Ether(src=CLIENT_PEER, dst=client_mac) / IP(src="203.0.113.9", dst="198.51.100.5", ttl=64) /
                  UDP(sport=1024 + i, dport=53) for i in range(count)]
        sender = threading.Thread(target=sluice.netns.inject, args=("cl0", frames))
        sender.start()
        time.sleep(0.15)
        ip_route(ns, "replace", "198.51.100.0/24", "via", "192.0.2.12")
        sender.join()
        stats = sluice.wait_accounted(len(answers) + count)
        assert stats.get("drop/no_route", 0) == 0 and stats.get("drop/neighbour_unresolved", 0) == 0, stats
        assert "198.51.100.0/24 kernel via 192.0.2.12 on server (02:00:00:00:02:12)" in sluice.routes()
        assert sluice.stop() == 0, sluice.log()
    sent = [p for p in rdpcap(str(tmp_path / "server_out.pcap")) if UDP in p and p[IP].dst == "198.51.100.5"]
    assert len(sent) == count  # none lost
    hops = [p[Ether].dst for p in sent]
    switched = hops.index(HOP_MACS["192.0.2.12"])
    # One switch, in order: every packet before it to the old next hop, every one after it to the new one.
    assert 0 < switched < count, "the route changed before or after the traffic"
    assert set(hops[:switched]) == {HOP_MACS["192.0.2.11"]} and set(hops[switched:]) == {HOP_MACS["192.0.2.12"]}
    assert [p[UDP].sport for p in sent] == sorted(p[UDP].sport for p in sent)


METRICS_PORT = 9469  # inside the test's own namespace


def scrape(ns, name):
    """One unlabelled sample, scraped inside the namespace sluice runs in."""
    text = ns.exec("/usr/bin/python3", "-c", "import urllib.request, sys; sys.stdout.write(urllib.request.urlopen("
                   f"'http://127.0.0.1:{METRICS_PORT}/metrics', timeout=5).read().decode())").stdout
    return float(next(line.split()[1] for line in text.splitlines() if line.startswith(name + " ")))


def kernel_table_as_sluice_lists_it(ns):
    """`ip route show table N` in sluicectl routes' words (the test's routes: /24s via one gateway, or blackhole)."""
    lines = set()
    for line in ns.exec("ip", "-4", "route", "show", "table", TABLE).stdout.splitlines():
        words = line.split()
        if words[0] == "blackhole":
            lines.add(f"{words[1]} kernel blackhole")
        else:
            assert words[1] == "via", line
            lines.add(f"{words[0]} kernel via {words[2]} on server (unresolved)")
    return lines


def test_lost_notifications_are_made_good_by_reading_the_table_again(tmp_path, ns):
    """The control thread stalls (SIGSTOP: as a reload compiling a large rule set does) while the routing daemon
    rewrites the table: thousands of notifications for a socket buffer of about 150 (64 KiB). sluice hears ENOBUFS,
    says so, reads the table whole again, and ends with exactly the kernel's table: routes deleted, changed and added
    during the stall included."""
    ns.exec("ip", "link", "set", "lo", "up")
    cfg = config(tmp_path)
    cfg["routing"]["kernel_socket_buffer_kib"] = 64
    cfg["metrics"] = {"listen": f"127.0.0.1:{METRICS_PORT}"}

    def batch(lines):
        subprocess.run(ns.prefix() + ["ip", "-batch", "-"], input="".join(f"{line}\n" for line in lines), text=True,
                       check=True, capture_output=True, timeout=60)

    batch(f"route add 100.64.{i}.0/24 table {TABLE} via 192.0.2.11" for i in range(40))
    sluice = Sluice(tmp_path, cfg, netns=ns)
    with sluice:
        wait_until(lambda: {r for r in sluice.routes() if " kernel " in r} == kernel_table_as_sluice_lists_it(ns),
                   timeout=5, what="the first dump in sluice")
        assert len(kernel_table_as_sluice_lists_it(ns)) == 40
        resyncs = scrape(ns, "sluice_kernel_routes_resyncs_total")
        os.kill(sluice.proc.pid, signal.SIGSTOP)
        try:
            churn = [f"100.96.{i // 256}.{i % 256}/32" for i in range(1500)]
            batch([f"route add {p} table {TABLE} via 192.0.2.12" for p in churn] +
                  [f"route del {p} table {TABLE}" for p in churn] +
                  [f"route del 100.64.{i}.0/24 table {TABLE}" for i in range(15)] +
                  [f"route replace 100.64.{i}.0/24 table {TABLE} via 192.0.2.12" for i in range(15, 30)] +
                  [f"route add 100.65.{i}.0/24 table {TABLE} via 192.0.2.12" for i in range(10)] +
                  [f"route add blackhole 100.66.{i}.0/24 table {TABLE}" for i in range(5)])
        finally:
            os.kill(sluice.proc.pid, signal.SIGCONT)
        expected = kernel_table_as_sluice_lists_it(ns)
        assert len(expected) == 40 - 15 + 10 + 5
        wait_until(lambda: {r for r in sluice.routes() if " kernel " in r} == expected, timeout=10,
                   what=f"sluice's kernel routes to be the kernel's table: {sorted(expected)}")
        assert scrape(ns, "sluice_kernel_routes_resyncs_total") > resyncs
        assert re.search(r"kernel route notifications lost: the socket's 64 KiB buffer was full .*reading kernel "
                         f"table {TABLE} again", sluice.log()), sluice.log()
        assert sluice.stop() == 0, sluice.log()


ROUTER_BIRD = """router id 192.0.2.11;
protocol device {{ scan time 1; }}
protocol static announced {{
    ipv4;
{routes}
}}
protocol bgp to_gateway {{
    local 192.0.2.11 as 65010;
    neighbor 192.0.2.254 as 65000;
    hold time 3; keepalive time 1; connect delay time 1; connect retry time 1; error wait time 1, 2;
    ipv4 {{ import none; export all; next hop self; }};
}}
"""

GATEWAY_BIRD = f"""router id 192.0.2.254;
protocol device {{ scan time 1; }}
protocol kernel {{
    kernel table {TABLE};
    ipv4 {{ import none; export all; }};
}}
protocol bgp router1 {{
    local 192.0.2.254 as 65000;
    neighbor 192.0.2.11 as 65010;
    hold time 3; keepalive time 1; connect delay time 1; connect retry time 1; error wait time 1, 2;
    ipv4 {{ import all; export none; }};
}}
"""


@pytest.mark.skipif(shutil.which("bird") is None, reason="bird2 not installed (deploy/install-deps.sh)")
def test_routes_a_router_announces_over_bgp_reach_sluice_through_the_gateways_bird(tmp_path, ns):
    """A router (its own namespace, BIRD) announces prefixes over BGP to the gateway's BIRD, which exports them into
    kernel table 100 of sluice's namespace: they appear in sluice, and go when the router withdraws them."""
    router = Netns(f"slkrr{os.getpid()}", [])
    birds = []
    try:
        ns.exec("ip", "link", "add", "rt0", "type", "veth", "peer", "name", "rt0p", "netns", router.name)
        router.exec("ip", "addr", "add", "192.0.2.11/24", "dev", "rt0p")
        router.exec("ip", "link", "set", "rt0p", "up")
        # The gateway's kernel leg towards the router is rt0 (gw0 of the fixture holds 192.0.2.254 already).
        ns.exec("ip", "addr", "del", "192.0.2.254/24", "dev", "gw0")
        ns.exec("ip", "addr", "add", "192.0.2.254/24", "dev", "rt0")
        ns.exec("ip", "link", "set", "rt0", "up")
        router_conf = tmp_path / "router.conf"

        def announce(prefixes):
            router_conf.write_text(ROUTER_BIRD.format(routes="\n".join(f"    route {p} blackhole;" for p in prefixes)))

        announce(["198.51.100.0/24", "100.70.0.0/16"])
        (tmp_path / "gateway.conf").write_text(GATEWAY_BIRD)
        for where, name in ((router, "router"), (ns, "gateway")):
            birds.append(subprocess.Popen(where.prefix() + ["bird", "-f", "-c", str(tmp_path / f"{name}.conf"), "-s",
                                                            str(tmp_path / f"{name}.ctl")],
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        sluice = Sluice(tmp_path, config(tmp_path), netns=ns)
        with sluice:
            appears(sluice, "198.51.100.0/24 kernel via 192.0.2.11 on server (unresolved)", within=30)
            appears(sluice, "100.70.0.0/16 kernel via 192.0.2.11 on server (unresolved)", within=5)
            announce(["198.51.100.0/24"])
            subprocess.run(["birdc", "-s", str(tmp_path / "router.ctl"), "configure"], check=True,
                           capture_output=True, timeout=10)
            appears(sluice, "100.70.0.0/16 kernel via 192.0.2.11 on server (unresolved)", present=False, within=10)
            assert "198.51.100.0/24 kernel via 192.0.2.11 on server (unresolved)" in sluice.routes()
            assert sluice.stop() == 0, sluice.log()
    finally:
        for bird in birds:
            bird.terminate()
            bird.wait(timeout=10)
        router.delete()

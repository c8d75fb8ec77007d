"""Routes with real Linux hosts as next hops: sluice's server port (net_af_packet on a veth) sits on a bridge with
three router namespaces, whose own kernels answer sluice's ARP. A route to 203.0.113.0/24 via all three spreads
flows over them (each flow on one), a reload that moves the route under traffic loses no packet, and a router that
goes silent (it stops answering ARP) leaves the group within the neighbour timers, with only its own flows moving.

Each router counts what reaches it on a packet socket in its namespace; nothing leaves the test's namespaces."""

import logging
import os
import re
import struct
import threading
import time
from collections import Counter

import pytest
import yaml

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import IP, UDP, Ether, Raw

from netns import Netns
from sluice_harness import Sluice, wait_until

CLIENT_PEER = "02:00:00:00:01:01"
ROUTERS = ["10.2.0.11", "10.2.0.12", "10.2.0.13"]
DESTINATION = "203.0.113.7"


@pytest.fixture
def lab():
    """The gateway's namespace (client veth cl0, server veth sv0 on bridge br0) and one namespace per router, each
    joined to br0 by a veth (nhN in the gateway's namespace, nhNp in the router's)."""
    tag = os.getpid()
    gateway = Netns(f"srt{tag}", ["cl0", "sv0"])
    routers = []
    try:
        gateway.exec("ip", "link", "set", "lo", "up")
        gateway.exec("ip", "link", "add", "br0", "type", "bridge")
        gateway.exec("ip", "link", "set", "br0", "up")
        gateway.exec("ip", "link", "set", "sv0p", "master", "br0")
        for index, address in enumerate(ROUTERS, 1):
            router = Netns(f"srt{tag}r{index}", [])
            routers.append(router)
            gateway.exec("ip", "link", "add", f"nh{index}", "type", "veth", "peer", "name", f"nh{index}p")
            gateway.exec("ip", "link", "set", f"nh{index}p", "netns", router.name)
            gateway.exec("ip", "link", "set", f"nh{index}", "master", "br0")
            gateway.exec("ip", "link", "set", f"nh{index}", "up")
            router.exec("ip", "addr", "add", f"{address}/24", "dev", f"nh{index}p")
            router.exec("ip", "link", "set", f"nh{index}p", "up")
        yield gateway, routers
    finally:
        for router in routers:
            router.delete()
        gateway.delete()


def config(route_via):
    return {
        "dataplane": {"idle_sleep_us": 50},
        "ports": [
            {"name": "client", "device": "net_af_packet0,iface=cl0", "addresses": ["198.51.100.1/24"]},
            {"name": "server", "device": "net_af_packet1,iface=sv0", "addresses": ["10.2.0.1/24"]},
        ],
        "lcores": [{"id": 1, "roles": ["rx", "worker"]}],
        "routes": [{"prefix": "203.0.113.0/24", "next_hops": list(route_via)}],
    }


def client_mac(sluice):
    return re.search(r"port 'client':.*? mac ([0-9a-fA-F:]{17})", sluice.log()).group(1)


def datagram(mac, flow, sequence):
    """A UDP datagram of flow number `flow` (its source address and port), carrying (flow, sequence)."""
    source = f"198.51.100.{2 + flow % 200}"
    return (Ether(src=CLIENT_PEER, dst=mac) / IP(src=source, dst=DESTINATION) /
            UDP(sport=10000 + flow // 200, dport=5000) / Raw(struct.pack("!II", flow, sequence)))


def arrivals(router_sockets):
    """(router index, flow, sequence) of every datagram to DESTINATION the routers hold now."""
    seen = []
    for index, sock in enumerate(router_sockets):
        for frame in Netns.received(sock):
            packet = Ether(frame)
            if IP in packet and packet[IP].dst == DESTINATION and UDP in packet and Raw in packet:
                flow, sequence = struct.unpack("!II", bytes(packet[Raw])[:8])
                seen.append((index, flow, sequence))
    return seen


def wait_resolved(sluice, addresses):
    for address in addresses:
        wait_until(lambda: re.search(rf"neighbour {re.escape(address)} is at", sluice.log()), timeout=15,
                   what=f"sluice to resolve {address} by ARP")


def collect(router_sockets, expected, timeout=20):
    got = []
    wait_until(lambda: got.extend(arrivals(router_sockets)) or len(got) >= expected, timeout=timeout,
               what=f"{expected} datagrams at the routers")
    time.sleep(0.3)
    got.extend(arrivals(router_sockets))
    return got


def test_ecmp_spreads_flows_over_three_linux_routers_and_keeps_each_flow_on_one(tmp_path, lab):
    gateway, routers = lab
    sluice = Sluice(tmp_path, config(ROUTERS), netns=gateway)
    with sluice:
        sockets = [router.listen(f"nh{index}") for index, router in enumerate(routers, 1)]
        wait_resolved(sluice, ROUTERS)
        mac = client_mac(sluice)
        flows = 3000
        gateway.inject("cl0", [datagram(mac, flow, sequence) for sequence in range(2) for flow in range(flows)])
        got = collect(sockets, 2 * flows)
        assert sluice.stop() == 0, sluice.log()
    assert len(got) == 2 * flows, f"{2 * flows - len(got)} datagrams lost"
    hops_of_flow = {}
    for index, flow, _ in got:
        hops_of_flow.setdefault(flow, set()).add(index)
    assert all(len(hops) == 1 for hops in hops_of_flow.values()), "a flow reached two routers"
    share = Counter(next(iter(hops)) for hops in hops_of_flow.values())
    for index in range(len(ROUTERS)):  # Maglev gives 83-84 of 251 slots each; the flows' hash does the rest
        assert abs(share[index] - flows / 3) <= flows / 3 * 0.10, share


def test_a_route_moved_by_a_reload_under_traffic_loses_no_datagram(tmp_path, lab):
    gateway, routers = lab
    # The second router carries an unused route from the start, so sluice has resolved it when the reload hands it
    # the busy one.
    spare = {"prefix": "192.0.2.0/24", "next_hops": [ROUTERS[1]]}
    first = config(ROUTERS[:1])
    first["routes"].append(spare)
    sluice = Sluice(tmp_path, first, netns=gateway)
    with sluice:
        sockets = [router.listen(f"nh{index}") for index, router in enumerate(routers, 1)]
        wait_resolved(sluice, ROUTERS[:2])
        mac = client_mac(sluice)
        moved = yaml.safe_load(sluice.config_path.read_text())
        moved["routes"] = [{"prefix": "203.0.113.0/24", "next_hops": [ROUTERS[1]]}, spare]
        flows, per_flow = 4, 600
        stream = [datagram(mac, flow, sequence) for sequence in range(per_flow) for flow in range(flows)]
        sender = threading.Thread(target=gateway.inject, args=("cl0", stream))
        sender.start()
        time.sleep(0.25)  # the stream takes about 0.6 s: the reload lands in its middle
        sluice.config_path.write_text(yaml.safe_dump(moved, sort_keys=False))
        outcome = sluice.telemetry.query("/sluice/reload", timeout=30)
        sender.join()
        assert outcome["last_reload_ok"] == 1, outcome
        got = collect(sockets, flows * per_flow)
        assert sluice.stop() == 0, sluice.log()
    assert len(got) == flows * per_flow, f"{flows * per_flow - len(got)} datagrams lost"
    assert {(flow, sequence) for _, flow, sequence in got} == {(f, s) for s in range(per_flow) for f in range(flows)}
    by_router = Counter(index for index, _, _ in got)
    assert by_router[0] > 0 and by_router[1] > 0 and by_router[2] == 0, f"not moved under traffic: {by_router}"
    for flow in range(flows):  # one switch per flow: every datagram the old route took came before the new one's
        old = [sequence for index, f, sequence in got if f == flow and index == 0]
        new = [sequence for index, f, sequence in got if f == flow and index == 1]
        assert not old or not new or max(old) < min(new), (flow, max(old), min(new))


def test_a_router_that_stops_answering_arp_leaves_the_group_and_only_its_flows_move(tmp_path, lab):
    gateway, routers = lab
    timers = {"reachable_ms": 1000, "retransmit_ms": 300, "probes": 3}
    forgotten_within = (timers["reachable_ms"] + timers["probes"] * timers["retransmit_ms"]) / 1000
    cfg = config(ROUTERS)
    cfg["neighbours"] = timers
    cfg["metrics"] = {"listen": "127.0.0.1:9473"}  # in the gateway's namespace

    def unresolved():
        text = gateway.exec("curl", "-s", "-m", "5", f"http://{cfg['metrics']['listen']}/metrics", check=False).stdout
        found = re.search(r"^sluice_next_hops_unresolved (\S+)$", text, re.M)
        return float(found.group(1)) if found else None

    sluice = Sluice(tmp_path, cfg, netns=gateway)
    with sluice:
        sockets = [router.listen(f"nh{index}") for index, router in enumerate(routers, 1)]
        wait_resolved(sluice, ROUTERS)
        mac = client_mac(sluice)
        flows = 1500
        gateway.inject("cl0", [datagram(mac, flow, 0) for flow in range(flows)])
        before = {flow: index for index, flow, _ in collect(sockets, flows)}
        assert len(before) == flows and set(before.values()) == {0, 1, 2}, Counter(before.values())
        # Still probed every second, all three answer: none leaves the group.
        time.sleep(2 * forgotten_within)
        assert unresolved() == 0 and "unresolved" not in "".join(sluice.routes())
        # The third router's kernel stops answering ARP; it still receives (and counts) what is sent to its MAC.
        routers[2].exec("nft", "add table arp silent { chain in { type filter hook input priority 0; drop; }; "
                        "chain out { type filter hook output priority 0; drop; }; }")
        silenced = time.monotonic()
        wait_until(lambda: unresolved() == 1, timeout=forgotten_within + 5, interval=0.1,
                   what="the silent router to count as an unresolved next hop")
        took = time.monotonic() - silenced
        # Its last answer came at most reachable_ms before it went silent; the control loop and a scrape add little.
        assert took <= forgotten_within + 1.0, f"left the group after {took:.1f} s"
        line = next(line for line in sluice.routes() if line.startswith("203.0.113.0/24"))
        assert f"{ROUTERS[2]} on server (unresolved)" in line and line.count("(unresolved)") == 1, line
        arrivals(sockets)  # nothing in flight is counted below
        gateway.inject("cl0", [datagram(mac, flow, 1) for flow in range(flows)])
        after = {flow: index for index, flow, sequence in collect(sockets, flows) if sequence == 1}
        assert sluice.stop() == 0, sluice.log()
    assert "a neighbour stopped answering" in sluice.log()
    assert len(after) == flows, f"{flows - len(after)} flows lost"
    assert 2 not in after.values(), "a flow still went to the silent router"
    moved = [flow for flow in range(flows) if before[flow] != after[flow]]
    assert all(before[flow] == 2 for flow in moved), "a flow of a router that still answers moved"
    assert len(moved) == Counter(before.values())[2]
    share = Counter(after[flow] for flow in moved)
    assert share[0] > len(moved) / 4 and share[1] > len(moved) / 4, share  # Maglev hands its slots to both

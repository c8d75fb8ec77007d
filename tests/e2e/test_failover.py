"""Failover of a pair of sluice instances that sync their connection state (docs/operations/ha.md, "State sync"), on
real topologies in namespaces of this test's own (names carry the pid; nothing of deploy/lab is used):

active/active: a router namespace running BIRD spreads the NAT VIP over two instances (BGP + BFD from each
instance's own BIRD, fed by sluice's bgp include file; `merge paths` makes one ECMP route), and takes the NAT pool's
replies from the backends the same way on the LAN side. Long-lived TCP connections through the VIP echo data both
ways; one instance and its BIRD are killed with SIGKILL (the host dies): BFD drops it, the survivor carries every
connection with the state it learned. The killed instance restarts and is announced again only once its resync
from the survivor is done.

active/standby: keepalived (VRRP, unicast adverts between the instances' kernels) holds the client-side and the
backend-side gateway addresses on the master's kernel; the client routes the VIP, the backend the NAT pool, through
them; sluice's XDP steering (services) takes what comes for the VIP and the pool. The master dies; the backup's
keepalived takes both addresses with gratuitous ARPs, and its sluice carries the connections it learned.

Runs as root with bird2 and keepalived installed (deploy/install-deps.sh). SLUICE_BIN selects the binary."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests/integration"))
from netns import Netns  # noqa: E402
from sluice_harness import SLUICE, Sluice, wait_until  # noqa: E402

PYTHON = "/usr/bin/python3"
# Connections held open through the VIP. The 500 open, echo and fail over in about 10 s on 2 CPUs.
CONNECTIONS = int(os.environ.get("SLUICE_FAILOVER_CONNECTIONS", "500"))
ECHO_TIMEOUT = 12  # seconds one round's echo may take: TCP's retransmissions across the failover included

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (namespaces, XDP)"),
    pytest.mark.skipif(shutil.which("bird") is None, reason="bird2 not installed (deploy/install-deps.sh)"),
    pytest.mark.skipif(not Path(SLUICE).exists(), reason=f"no sluice binary at {SLUICE}"),
]

# The backend: echoes every line back on the same connection.
SERVER = r'''
import asyncio, sys
async def echo(reader, writer):
    try:
        while line := await reader.readline():
            writer.write(line)
            await writer.drain()
    except Exception:
        pass
    writer.close()
async def main():
    server = await asyncio.start_server(echo, sys.argv[1], int(sys.argv[2]), backlog=1024)
    print("listening", flush=True)
    await server.serve_forever()
asyncio.run(main())
'''

# The client: opens N connections to the VIP, then for each number read on stdin sends a line on every connection
# and reads its echo, printing one JSON line per round (ok, failed connections, the longest wait). A connection that
# fails once stays failed: it is never reopened.
CLIENT = r'''
import asyncio, json, sys
vip, port, n, timeout = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
async def main():
    loop = asyncio.get_running_loop()
    async def connect():
        return await asyncio.wait_for(asyncio.open_connection(vip, port), 15)
    conns = await asyncio.gather(*(connect() for _ in range(n)), return_exceptions=True)
    broken = {i: repr(c) for i, c in enumerate(conns) if isinstance(c, BaseException)}
    print(json.dumps({"open": n - len(broken), "errors": list(broken.values())[:5]}), flush=True)
    stdin = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
    while (line := await stdin.readline()) and line.strip() != b"quit":
        round_ = int(line)
        async def one(i):
            if i in broken:
                return 0.0
            reader, writer = conns[i]
            message = f"{i} {round_} {'x' * 64}\n".encode()
            started = loop.time()
            try:
                writer.write(message)
                await writer.drain()
                if await asyncio.wait_for(reader.readline(), timeout) != message:
                    broken[i] = "wrong echo"
            except Exception as e:
                broken[i] = repr(e)
            return loop.time() - started
        waits = await asyncio.gather(*(one(i) for i in range(n)))
        print(json.dumps({"round": round_, "ok": n - len(broken), "broken": sorted(broken)[:10],
                          "why": sorted(set(broken.values()))[:3], "stall": max(waits)}), flush=True)
asyncio.run(main())
'''


def ns_exec(ns, *args, check=True):
    return subprocess.run(ns.prefix() + list(args), check=check, capture_output=True, text=True, timeout=30)


def link(a, dev_a, b, dev_b, mac_a=None, mac_b=None):
    """A veth pair from namespace a (dev_a) to namespace b (dev_b), made inside a so no end is ever in the root
    namespace; up, with the offloads AF_XDP must not meet (partial checksums, GRO) off on both ends."""
    ns_exec(a, "ip", "link", "add", dev_a, "type", "veth", "peer", "name", dev_b, "netns", b.name)
    for ns, dev, mac in ((a, dev_a, mac_a), (b, dev_b, mac_b)):
        if mac:
            ns_exec(ns, "ip", "link", "set", "dev", dev, "address", mac)
        ns_exec(ns, "ethtool", "-K", dev, "rx", "off", "tx", "off", "sg", "off", "tso", "off", "gso", "off", "gro",
                "off", check=False)
        ns_exec(ns, "ip", "link", "set", "dev", dev, "up")


def address(ns, dev, cidr):
    ns_exec(ns, "ip", "addr", "add", cidr, "dev", dev)


class Daemon:
    """A process in a namespace (BIRD, keepalived, a python helper), killed with the test."""

    def __init__(self, ns, args, log_path, **popen):
        self.log_path = log_path
        with open(log_path, "w") as log:
            self.proc = subprocess.Popen(ns.prefix() + args, stdout=popen.pop("stdout", log), stderr=subprocess.STDOUT,
                                         **popen)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class Client:
    """The CLIENT program in its namespace."""

    def __init__(self, ns, vip, port, connections, log_path):
        self.daemon = Daemon(ns, [PYTHON, "-c", CLIENT, vip, str(port), str(connections), str(ECHO_TIMEOUT)], log_path,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.proc = self.daemon.proc
        self.rounds = 0
        self.opened = self._answer()

    def _answer(self):
        line = self.proc.stdout.readline()
        assert line, f"the client stopped: {self.daemon.log_path.read_text()}"
        return json.loads(line)

    def echo_round(self):
        """Every connection sends a line and reads it back; returns the round's JSON answer."""
        self.rounds += 1
        self.proc.stdin.write(f"{self.rounds}\n")
        self.proc.stdin.flush()
        return self._answer()

    def kill(self):
        self.daemon.kill()


def stat(instance, name):
    return instance.stats().get(name, 0)


def no_state_drops(instance):
    """Packets of a connection the instance had no state for: a NAT reply or a mid-stream segment to the VIP."""
    return stat(instance, "drop/lb_nat_no_state") + stat(instance, "drop/nat_no_connection")


def start_backend(ns, address, state):
    backend = Daemon(ns, [PYTHON, "-c", SERVER, address, "8080"], state / "backend.log")
    wait_until(lambda: "listening" in (state / "backend.log").read_text(), timeout=10, what="the backend")
    return backend


def tear_down(processes, spaces, state):
    for p in processes:
        p.kill()
    for ns in spaces.values():
        ns.delete()
    shutil.rmtree(state, ignore_errors=True)


def key_file(directory):
    path = Path(directory) / "sync.key"
    path.write_text("failover-test-key-of-at-least-32-bytes-long\n")
    path.chmod(0o600)
    return str(path)


# ---------------------------------------------------------------------------------------------------------------
# active/active: ECMP over BGP with BFD

AA = {"client": "10.71.1.2", "router_client": "10.71.1.1", "vip": "10.71.100.1", "pool": "10.71.200.1",
      "backend": "10.71.2.11", "router_lan": "10.71.2.1", "sync": "10.71.9"}
AA_MAC = {"backend": "02:71:00:02:00:11", "router_up": {1: "02:71:00:11:00:01", 2: "02:71:00:12:00:01"}}


def uplink(n):
    return f"10.71.1{n}.2", f"10.71.1{n}.1"  # the instance's kernel address on its uplink, the router's


def lan_address(n):
    return f"10.71.2.2{n}"


BFD = "protocol bfd { interface \"*\" { min rx interval 100 ms; min tx interval 100 ms; multiplier 3; }; }"
BGP_TIMERS = ("hold time 3; keepalive time 1; connect delay time 1; connect retry time 1; error wait time 1, 2; "
              "graceful restart off; bfd on;")


def instance_bird_conf(n, state):
    """An instance's BIRD: sluice's include file (deploy/bird/bird.conf's scheme), the VIP to the router over the
    uplink and the NAT pool over the LAN, each session watched by BFD."""
    me, router = uplink(n)
    return f"""log "{state}/bird-{n}.log" all;
router id {me};
protocol device {{ scan time 2; }}
include "{state}/vips-{n}.con[f]";
{BFD}
filter vip_only {{ if proto = "sluice_vips4" && net = {AA['vip']}/32 then accept; reject; }}
filter pool_only {{ if proto = "sluice_vips4" && net = {AA['pool']}/32 then accept; reject; }}
protocol bgp up {{ local {me} as 65010; neighbor {router} as 65000; {BGP_TIMERS}
    ipv4 {{ import none; export filter vip_only; next hop self; }}; }}
protocol bgp lan {{ local {lan_address(n)} as 65010; neighbor {AA['router_lan']} as 65000; {BGP_TIMERS}
    ipv4 {{ import none; export filter pool_only; next hop self; }}; }}
"""


def router_bird_conf(state):
    sessions = "\n".join(
        f"protocol bgp up{n} from lb {{ neighbor {uplink(n)[0]} as 65010; source address {uplink(n)[1]}; }}\n"
        f"protocol bgp lan{n} from lb {{ neighbor {lan_address(n)} as 65010; source address {AA['router_lan']}; }}"
        for n in (1, 2))
    return f"""log "{state}/bird-router.log" all;
router id {AA['router_client']};
protocol device {{ scan time 2; }}
protocol kernel {{ ipv4 {{ export all; }}; merge paths on; }}
{BFD}
template bgp lb {{ local as 65000; {BGP_TIMERS} ipv4 {{ import all; export none; }}; }}
{sessions}
"""


def instance_config(n, key, net, addresses, macs, window_check="strict"):
    """Instance n of a pair: AF_XDP on `uplink` (towards the clients) and `lan` (the backend), XDP steering
    `services` (the kernel keeps BGP, BFD, VRRP and ARP for its own addresses), a NAT service echo:80 -> backend:8080,
    and sync with the other instance over their `sy` link."""
    return {
        "dataplane": {"idle_sleep_us": 50, "ring_size": 1024},
        "ports": [{"name": "up", "device": "net_af_xdp0,iface=uplink", "xdp_steering": "services",
                   "rx_descriptors": 512, "tx_descriptors": 512},
                  {"name": "lan", "device": "net_af_xdp1,iface=lan", "xdp_steering": "services",
                   "rx_descriptors": 512, "tx_descriptors": 512}],
        "lcores": [{"id": 1, "roles": ["rx", "worker"]}],
        "forward": [{"from": "up", "to": "lan", "next_hop_mac": macs["backend"]},
                    {"from": "lan", "to": "up", "next_hop_mac": macs["client_side"]}],
        "firewall": {"default": "allow", "table_size": 16384},
        "load_balancer": {"nat_pool": addresses["pool"]},
        "services": [{"name": "echo", "vip": addresses["vip"], "port": 80, "protocol": "tcp", "mode": "nat",
                      "tcp_window_check": window_check,
                      "backends": [{"address": addresses["backend"], "port": 8080, "mac": macs["backend"]}]}],
        "sync": {"listen": f"{net}.{n}:7900", "peers": [f"{net}.{3 - n}:7900"], "key_file": key},
    }


def aa_config(n, state, key):
    # ECMP hashes a NAT connection's two directions apart: an instance may see one of them only, for a while or for
    # good (the paths move when an instance leaves or comes back), so the window is learned, not enforced.
    config = instance_config(n, key, AA["sync"], AA, {"backend": AA_MAC["backend"],
                                                      "client_side": AA_MAC["router_up"][n]}, "liberal")
    config["bgp"] = {"bird_socket": f"{state}/bird-{n}.ctl", "include_file": f"{state}/vips-{n}.conf",
                     "drain_on_sigterm": False, "timeout_ms": 1000}
    return config


def next_hops(router, destination):
    out = ns_exec(router, "ip", "route", "show", destination).stdout.split()
    return {out[i + 1] for i, word in enumerate(out) if word == "via"}


@pytest.fixture
def active_active():
    tag = os.getpid()
    state = Path(tempfile.mkdtemp(prefix="sl-fo-", dir="/tmp"))  # short: BIRD's sockets live here
    names = {role: f"fo{tag}{role}" for role in ("c", "r", "k", "1", "2")}
    spaces, processes = {}, []
    try:
        for role, name in names.items():
            spaces[role] = Netns(name, [])
            ns_exec(spaces[role], "ip", "link", "set", "lo", "up")
        client, router, lan = spaces["c"], spaces["r"], spaces["k"]
        link(router, "rc", client, "c0")
        link(router, "rl", lan, "kr")
        ns_exec(lan, "ip", "link", "add", "br0", "address", AA_MAC["backend"], "type", "bridge")
        for n in (1, 2):
            link(router, f"r{n}", spaces[str(n)], "uplink", mac_a=AA_MAC["router_up"][n])
            link(lan, f"k{n}", spaces[str(n)], "lan")
        link(spaces["1"], "sy", spaces["2"], "sy")
        for dev in ("kr", "k1", "k2"):
            ns_exec(lan, "ip", "link", "set", dev, "master", "br0")
        ns_exec(lan, "ip", "link", "set", "br0", "up")
        address(lan, "br0", f"{AA['backend']}/24")
        ns_exec(lan, "ip", "route", "add", "default", "via", AA["router_lan"])
        ns_exec(lan, "sysctl", "-qw", "net.ipv4.conf.all.accept_redirects=0")
        address(client, "c0", f"{AA['client']}/24")
        ns_exec(client, "ip", "route", "add", "default", "via", AA["router_client"])
        # The router: forwards, hashes flows on ports, takes the replies (source: the VIP) it routes towards the
        # instances, and hands the backends' replies to the pool on to an instance on the same LAN without
        # redirecting the backend there (that would pin every reply to one instance past ECMP and BFD).
        ns_exec(router, "sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv4.fib_multipath_hash_policy=1",
                "net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.default.rp_filter=0",
                "net.ipv4.conf.all.send_redirects=0", "net.ipv4.conf.default.send_redirects=0")
        for dev in ("rc", "rl", "r1", "r2"):
            ns_exec(router, "sysctl", "-qw", f"net.ipv4.conf.{dev}.rp_filter=0",
                    f"net.ipv4.conf.{dev}.send_redirects=0")
        address(router, "rc", f"{AA['router_client']}/24")
        address(router, "rl", f"{AA['router_lan']}/24")
        for n in (1, 2):
            me, theirs = uplink(n)
            address(router, f"r{n}", f"{theirs}/24")
            address(spaces[str(n)], "uplink", f"{me}/24")
            address(spaces[str(n)], "lan", f"{lan_address(n)}/24")
            address(spaces[str(n)], "sy", f"{AA['sync']}.{n}/24")
            (state / f"bird-{n}.conf").write_text(instance_bird_conf(n, state))
        (state / "bird-router.conf").write_text(router_bird_conf(state))
        processes.append(start_backend(lan, AA["backend"], state))
        processes.append(Daemon(router, ["bird", "-f", "-c", str(state / "bird-router.conf"), "-s",
                                         str(state / "bird-router.ctl")], state / "bird-router.out"))
        yield {"spaces": spaces, "state": state, "processes": processes, "key": key_file(state)}
    finally:
        tear_down(processes, spaces, state)


def start_bird(lab, n):
    state = lab["state"]
    bird = Daemon(lab["spaces"][str(n)], ["bird", "-f", "-c", str(state / f"bird-{n}.conf"), "-s",
                                          str(state / f"bird-{n}.ctl")], state / f"bird-{n}.out")
    lab["processes"].append(bird)
    return bird


def test_active_active_keeps_nat_connections_when_an_instance_dies_and_announces_a_restart_after_resync(
        tmp_path, active_active):
    lab = active_active
    spaces, state, router = lab["spaces"], lab["state"], lab["spaces"]["r"]
    birds = {n: start_bird(lab, n) for n in (1, 2)}
    sluices = {n: Sluice(tmp_path, aa_config(n, state, lab["key"]), netns=spaces[str(n)]) for n in (1, 2)}
    client = None
    try:
        for s in sluices.values():
            s.start()
        both = {uplink(1)[0], uplink(2)[0]}
        wait_until(lambda: next_hops(router, AA["vip"]) == both, timeout=20, what="the VIP over both instances")
        wait_until(lambda: next_hops(router, AA["pool"]) == {lan_address(1), lan_address(2)}, timeout=10,
                   what="the NAT pool over both instances")

        started = time.monotonic()
        client = Client(spaces["c"], AA["vip"], 80, CONNECTIONS, tmp_path / "client.log")
        assert client.opened["open"] == CONNECTIONS, client.opened
        first = client.echo_round()
        print(f"\n{CONNECTIONS} connections opened and echoed in {time.monotonic() - started:.2f} s; "
              f"no-state drops while opening (a backend's SYN-ACK that beat the sync to the other instance): "
              f"{no_state_drops(sluices[1])} + {no_state_drops(sluices[2])}")
        assert first["ok"] == CONNECTIONS, first
        through = {n: stat(s, "port/up/rx_packets") for n, s in sluices.items()}
        assert all(through.values()), f"ECMP sent every connection to one instance: {through}"
        wait_until(lambda: stat(sluices[2], "sync_installed") >= CONNECTIONS // 4, timeout=10,
                   what="instance 2 to learn instance 1's connections")

        # The host of instance 1 dies: sluice killed, its BIRD frozen (a dead host closes no BGP session: only BFD
        # tells the router), then killed too.
        survivor = sluices[2]
        drops_before = no_state_drops(survivor)
        killed = time.monotonic()
        birds[1].proc.send_signal(signal.SIGSTOP)
        sluices[1].kill()
        wait_until(lambda: next_hops(router, AA["vip"]) == {uplink(2)[0]}, timeout=5, interval=0.01,
                   what="BFD to drop instance 1's next hop")
        dropped_after = time.monotonic() - killed
        session = subprocess.run(["birdc", "-s", str(state / "bird-router.ctl"), "show", "protocols", "up1"],
                                 capture_output=True, text=True, timeout=10).stdout
        birds[1].kill()  # after the look: its exit resets the TCP session, which would overwrite BFD's reason
        assert "BFD session down" in session, session
        after = client.echo_round()
        print(f"instance 1 killed: its next hop gone after {dropped_after:.2f} s; echo round after the kill: "
              f"{after['ok']}/{CONNECTIONS} ok, longest wait {after['stall']:.2f} s")
        assert dropped_after < 1.5, "BFD did not drop the dead instance within a second or so"
        assert after["ok"] == CONNECTIONS, after
        assert no_state_drops(survivor) == drops_before, "the survivor dropped packets of connections it lacked"

        # Instance 1 comes back: what its unit's ExecStopPost does (the include file emptied), then BIRD, then
        # sluice, which asks the survivor for every connection and is announced only once it has them.
        withdrawn = subprocess.run([str(SLUICE), "--withdraw-vips", str(sluices[1].config_path)], capture_output=True,
                                   text=True, timeout=30)
        assert "route" not in (state / "vips-1.conf").read_text(), withdrawn.stdout + withdrawn.stderr
        birds[1] = start_bird(lab, 1)
        restarted = Sluice(tmp_path, aa_config(1, state, lab["key"]), netns=spaces["1"])
        sluices[1] = restarted
        restarted.start()
        wait_until(lambda: uplink(1)[0] in next_hops(router, AA["vip"]), timeout=20, interval=0.01,
                   what="the restarted instance announced again")
        sync = restarted.telemetry.query("/sluice/sync")
        installed = stat(restarted, "sync_installed")
        print(f"restarted instance announced after its resync: {installed} connections installed, "
              f"resyncs completed {sync['resyncs_completed']}, timed out {sync['resyncs_timed_out']}")
        assert sync["resync_pending"] == 0 and sync["resyncs_completed"] >= 1, sync
        assert installed >= CONNECTIONS, "announced before it held the survivor's connections"
        log = restarted.log()
        assert log.index("resync from") < log.index("sync resync over: VIPs may be announced"), log
        wait_until(lambda: next_hops(router, AA["pool"]) == {lan_address(1), lan_address(2)}, timeout=10,
                   what="the pool over both instances again")
        back = client.echo_round()
        print(f"echo round with both instances again: {back['ok']}/{CONNECTIONS} ok, longest wait {back['stall']:.2f} "
              f"s; through the restarted one: {stat(restarted, 'port/up/rx_packets')} packets, no-state drops "
              f"{no_state_drops(restarted)}")
        assert back["ok"] == CONNECTIONS, back
        assert stat(restarted, "port/up/rx_packets") > 0, "ECMP sent nothing to the restarted instance"
        assert no_state_drops(restarted) == 0
    finally:
        if client:
            client.kill()
        for s in sluices.values():
            s.kill()


# ---------------------------------------------------------------------------------------------------------------
# active/standby: keepalived moves the gateway addresses

AS = {"client": "10.72.1.2", "gateway": "10.72.1.1", "vip": "10.72.100.1", "pool": "10.72.200.1",
      "backend": "10.72.2.11", "lan_gateway": "10.72.2.1", "sync": "10.72.9"}
AS_MAC = {"client": "02:72:00:01:00:02", "backend": "02:72:00:02:00:11"}


def keepalived_conf(n):
    """VRRP v3 with unicast adverts between the instances' kernel addresses (multicast would do in mode
    `services`; unicast also works in `all`), both gateway addresses in one sync group: they move together."""
    other = 3 - n

    def instance(name, dev, vrid, subnet, gateway):
        return f"""vrrp_instance {name} {{
    state BACKUP
    interface {dev}
    virtual_router_id {vrid}
    priority {200 - 50 * n}
    advert_int 0.2
    unicast_src_ip {subnet}.2{n}
    unicast_peer {{ {subnet}.2{other} }}
    virtual_ipaddress {{ {gateway}/24 dev {dev} }}
}}
"""
    return (f"global_defs {{\n    router_id sluice{n}\n    vrrp_version 3\n    vrrp_garp_master_delay 1\n}}\n"
            "vrrp_sync_group gateways {\n    group {\n        outside\n        inside\n    }\n}\n" +
            instance("outside", "uplink", 72, "10.72.1", AS["gateway"]) +
            instance("inside", "lan", 73, "10.72.2", AS["lan_gateway"]))


def as_config(n, key):
    return instance_config(n, key, AS["sync"], AS, {"backend": AS_MAC["backend"], "client_side": AS_MAC["client"]})


def holds(ns, dev, gateway):
    return f" {gateway}/" in ns_exec(ns, "ip", "-4", "addr", "show", "dev", dev).stdout


@pytest.fixture
def active_standby():
    tag = os.getpid()
    state = Path(tempfile.mkdtemp(prefix="sl-fo-", dir="/tmp"))
    names = {role: f"fo{tag}{role}" for role in ("s", "t", "3", "4")}
    spaces, processes = {}, []
    try:
        for role, name in names.items():
            spaces[role] = Netns(name, [])
            ns_exec(spaces[role], "ip", "link", "set", "lo", "up")
        clients, backends = spaces["s"], spaces["t"]
        for ns, mac in ((clients, AS_MAC["client"]), (backends, AS_MAC["backend"])):
            ns_exec(ns, "ip", "link", "add", "br0", "address", mac, "type", "bridge")
        for n, role in ((1, "3"), (2, "4")):
            link(clients, f"u{n}", spaces[role], "uplink")
            link(backends, f"l{n}", spaces[role], "lan")
            ns_exec(clients, "ip", "link", "set", f"u{n}", "master", "br0")
            ns_exec(backends, "ip", "link", "set", f"l{n}", "master", "br0")
            address(spaces[role], "uplink", f"10.72.1.2{n}/24")
            address(spaces[role], "lan", f"10.72.2.2{n}/24")
        link(spaces["3"], "sy", spaces["4"], "sy")
        address(spaces["3"], "sy", f"{AS['sync']}.1/24")
        address(spaces["4"], "sy", f"{AS['sync']}.2/24")
        for ns, cidr in ((clients, f"{AS['client']}/24"), (backends, f"{AS['backend']}/24")):
            ns_exec(ns, "ip", "link", "set", "br0", "up")
            address(ns, "br0", cidr)
        ns_exec(clients, "ip", "route", "add", AS["vip"], "via", AS["gateway"])
        ns_exec(backends, "ip", "route", "add", AS["pool"], "via", AS["lan_gateway"])
        processes.append(start_backend(backends, AS["backend"], state))
        yield {"spaces": spaces, "state": state, "processes": processes, "key": key_file(state),
               "instances": {1: spaces["3"], 2: spaces["4"]}}
    finally:
        tear_down(processes, spaces, state)


@pytest.mark.skipif(shutil.which("keepalived") is None, reason="keepalived not installed (deploy/install-deps.sh)")
def test_active_standby_keeps_nat_connections_when_keepalived_moves_the_gateway(tmp_path, active_standby):
    lab = active_standby
    state, spaces = lab["state"], lab["instances"]
    sluices = {n: Sluice(tmp_path, as_config(n, lab["key"]), netns=spaces[n]) for n in (1, 2)}
    vrrp = {}
    client = None
    try:
        for s in sluices.values():
            s.start()
        for n in (1, 2):
            (state / f"keepalived-{n}.conf").write_text(keepalived_conf(n))
            vrrp[n] = Daemon(spaces[n], ["keepalived", "-n", "-l", "-P", "-f", str(state / f"keepalived-{n}.conf"),
                                         "-p", str(state / f"keepalived-{n}.pid"), "-r",
                                         str(state / f"vrrp-{n}.pid")], state / f"keepalived-{n}.log")
            lab["processes"].append(vrrp[n])
        wait_until(lambda: holds(spaces[1], "uplink", AS["gateway"]) and holds(spaces[1], "lan", AS["lan_gateway"]),
                   timeout=15, what="instance 1 to be the VRRP master")
        assert not holds(spaces[2], "uplink", AS["gateway"])
        wait_until(lambda: all(s.telemetry.query("/sluice/sync")["resync_pending"] == 0 for s in sluices.values()),
                   timeout=10, what="both resyncs")

        client = Client(lab["spaces"]["s"], AS["vip"], 80, CONNECTIONS, tmp_path / "client.log")
        assert client.opened["open"] == CONNECTIONS, client.opened
        first = client.echo_round()
        assert first["ok"] == CONNECTIONS, first
        assert stat(sluices[2], "port/up/rx_packets") < 10, "the backup carried traffic while the master ran"
        wait_until(lambda: stat(sluices[2], "sync_installed") >= CONNECTIONS, timeout=10,
                   what="the backup to learn every connection")

        standby = sluices[2]
        drops_before = no_state_drops(standby)
        killed = time.monotonic()
        vrrp[1].kill()
        sluices[1].kill()
        wait_until(lambda: holds(spaces[2], "uplink", AS["gateway"]) and holds(spaces[2], "lan", AS["lan_gateway"]),
                   timeout=10, interval=0.01, what="the backup to take the gateway addresses")
        moved = time.monotonic() - killed
        after = client.echo_round()
        print(f"\nmaster killed: the backup holds both gateway addresses after {moved:.2f} s; echo round: "
              f"{after['ok']}/{CONNECTIONS} ok, longest wait {after['stall']:.2f} s, through the backup "
              f"{stat(standby, 'port/up/rx_packets')} packets")
        assert after["ok"] == CONNECTIONS, after
        assert stat(standby, "port/up/rx_packets") > 0
        assert no_state_drops(standby) == drops_before, "the backup dropped packets of connections it lacked"
    finally:
        if client:
            client.kill()
        for s in sluices.values():
            s.kill()

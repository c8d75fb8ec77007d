"""Spoofed TCP segments against real Linux TCP through the lab (sluice's sequence and window tracking):

- a large HTTP download, through plain forwarding and through a NAT VIP, while blind spoofers flood both of its ends
  with RSTs and data segments at guessed sequence numbers: the download completes intact, every spoofed frame is
  dropped under its reason, nothing else is, and no end saw a reset;
- the same blind RSTs at an idle connection opened under `tcp_window_check: off` tear sluice's state down, and the
  connection dies once its close timeout has passed; its twin opened under `strict` lives on;
- a RST at the sequence an on-path attacker sniffed closes the connection;
- in-window RSTs in bulk are answered with challenge ACKs that do not stall a lossy download.

The spoofers (tcp_spoofer.py) write frames onto the lab's links with the MAC of the host they impersonate: toward the
server from the client's side (sl-client's client0, where an attacker on the Internet stands) and toward the client
from the server LAN (sl-server's uplink to sluice): a segment "from the server" crosses sluice only from the server's
side. Linux negotiates window scaling, SACK and timestamps by default; the client's nftables drops 1 in 150
full-sized segments it receives, so its ACKs carry SACK blocks and the servers recover by them, through sluice. Each
test needs about 5 s (the idle one 17 s: the close timeout)."""

import hashlib
import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from conftest import ROOT
from sluice_harness import Telemetry, wait_until

HERE = Path(__file__).resolve().parent
PYTHON = "/usr/bin/python3"
telemetry = Telemetry("sluice-lab")
CLIENT, SERVER, NAT_VIP, NAT_POOL = "10.77.1.2", "10.77.2.2", "10.77.100.1", "10.77.3.100"
SERVERS = ("sl-server", "sl-backend1", "sl-backend2", "sl-backend3")  # namespaces: the plain server, the backends
GW_CLIENT_MAC, GW_SERVER_MAC = "02:77:00:00:01:01", "02:77:00:00:02:01"  # sluice's two ports
CLIENT_MAC, SERVER_MAC = "02:77:00:00:01:02", "02:77:00:00:02:02"
BACKEND_MACS = {"10.77.2.11": "02:77:00:00:03:01", "10.77.2.12": "02:77:00:00:03:02", "10.77.2.13": "02:77:00:00:03:03"}
SIZE = 48 << 20
LIMIT_RATE = "20M"  # curl's: the downloads last about 2.5 s, long enough for the spoofers to work on them
# What backend.py serves at /bytes/SIZE: SHAKE-128 of its BLOB_SEED.
EXPECTED_SHA256 = hashlib.sha256(hashlib.shake_128(b"sluice lab").digest(SIZE)).hexdigest()
WINDOW_DROPS = ("drop/tcp_out_of_window", "drop/tcp_rst_out_of_window", "drop/tcp_rst_challenged",
                "drop/tcp_syn_challenged")
LOSS = """table ip sluice_test_loss {
    chain prerouting {
        type filter hook prerouting priority raw;
        tcp sport 80 ip length > 1000 numgen random mod 150 == 0 counter drop;
    }
}"""

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (the lab's namespaces)")


def netns(ns, *command, check=True, timeout=30):
    return subprocess.run(["ip", "netns", "exec", ns, *command], capture_output=True, text=True, timeout=timeout,
                          check=check)


def kernel_counters(ns, table, group):
    """A group of a namespace's kernel counters: /proc/net/snmp "Tcp" or /proc/net/netstat "TcpExt"."""
    rows = [line.split() for line in netns(ns, "cat", f"/proc/net/{table}").stdout.splitlines()
            if line.startswith(group + ":")]
    return dict(zip(rows[0][1:], map(int, rows[1][1:])))


def sack_recoveries():
    """Loss recoveries the servers' TCP made from SACK blocks (they reach them only through sluice)."""
    return sum(kernel_counters(ns, "netstat", "TcpExt")["TCPSackRecovery"] for ns in SERVERS)


def stats():
    return telemetry.query("/sluice/stats")


def settled_stats():
    """Sluice's counters once the workers' latest figures are in (they are published every 250 ms)."""
    time.sleep(0.6)
    return stats()


def delta(after, before, *keys):
    return sum(after[k] - before[k] for k in keys)


def sockets(ns, port, local=True, state="established"):
    """(local, peer) address:port pairs of the namespace's TCP sockets in `state` on `port` (local or peer)."""
    which = "sport" if local else "dport"
    out = netns(ns, "ss", "-Htn", "state", state, f"( {which} = :{port} )").stdout
    return [tuple(line.split()[-2:]) for line in out.splitlines()]


class Flood:
    """Blind spoofers (tcp_spoofer.py blind) at both ends of a connection: as the client toward the server from the
    client's side, as the server toward the client from the server LAN. They start once and are aimed at one
    connection after another, so that a flood begins the moment a connection's ports are known."""

    def __init__(self):
        self.spoofers = [subprocess.Popen(["ip", "netns", "exec", ns, PYTHON, str(HERE / "tcp_spoofer.py"), "blind",
                                           iface, mac], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True)
                         for ns, iface, mac in (("sl-client", "client0", GW_CLIENT_MAC),
                                                ("sl-server", "uplink", GW_SERVER_MAC))]
        for spoofer in self.spoofers:
            assert "ready" in spoofer.stdout.readline(), spoofer.stderr.read()

    def close(self):
        for spoofer in self.spoofers:
            if spoofer.poll() is None:
                spoofer.kill()
            spoofer.wait()

    def aim(self, client_tuple, server_tuple, server_mac=SERVER_MAC):
        for spoofer, target in zip(self.spoofers, (f"{CLIENT_MAC} {client_tuple}", f"{server_mac} {server_tuple}")):
            spoofer.stdin.write(target + "\n")
            spoofer.stdin.flush()

    def hold(self):
        """Stops the flood. Returns the frames sent since aim(): {"rst": N, "data": N}."""
        sent = []
        for spoofer in self.spoofers:
            spoofer.stdin.write("\n")
            spoofer.stdin.flush()
            sent.append(json.loads(spoofer.stdout.readline()))
        return {"rst": sum(s["rst"] for s in sent), "data": sum(s["data"] for s in sent)}


def connection(port, server):
    """The 4-tuples of the client's connection from `port` to server:80 as sent by each end."""
    return f"{CLIENT}:{port}>{server}:80", f"{server}:80>{CLIENT}:{port}"


def idle_client(url, stopfile):
    """lab_client.py idle: one connection, a GET, idle until stopfile exists, a GET. Returns (process, local port)."""
    proc = subprocess.Popen(["ip", "netns", "exec", "sl-client", PYTHON, str(HERE / "lab_client.py"), "idle", url,
                             str(stopfile)], stdout=subprocess.PIPE, text=True)
    first = json.loads(proc.stdout.readline())
    assert "port" in first, first
    return proc, first["port"]


def idle_result(proc):
    return json.loads(proc.communicate(timeout=30)[0].strip().splitlines()[-1])


def reload_with(lab_env, change):
    """Rewrites the lab's config (a copy of config/lab.yaml) with change(config) and waits for sluice to apply it."""
    config = yaml.safe_load(lab_env["original"])
    change(config)
    write_config(lab_env, yaml.safe_dump(config, sort_keys=False))


def write_config(lab_env, text):
    before = telemetry.query("/sluice/config")["reloads_ok"]
    tmp = lab_env["config"].with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(lab_env["config"])
    wait_until(lambda: telemetry.query("/sluice/config")["reloads_ok"] > before, timeout=10, what="the reload")
    assert telemetry.query("/sluice/config")["last_reload_ok"] == 1


@pytest.fixture(scope="module")
def server_host(lab_env):
    """backend.py on sl-server's own address (10.77.2.2), the server the firewall forwards to without a VIP."""
    server = subprocess.Popen(["ip", "netns", "exec", "sl-server", PYTHON, str(ROOT / "deploy/lab/backend.py"),
                               "server"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: sockets("sl-server", 80, state="listening"), timeout=10, what="backend.py in sl-server")
        yield
    finally:
        server.terminate()
        server.wait(timeout=10)


@pytest.fixture(scope="module")
def flood(lab_env):
    spoofers = Flood()
    yield spoofers
    spoofers.close()


@pytest.fixture(scope="module")
def lossy_client(lab_env):
    subprocess.run(["ip", "netns", "exec", "sl-client", "nft", "-f", "-"], input=LOSS, text=True, check=True)
    yield
    netns("sl-client", "nft", "delete", "table", "ip", "sluice_test_loss", check=False)


@pytest.mark.parametrize("path", ["forward", "nat"])
def test_large_download_survives_blind_rsts_and_data_at_both_ends(server_host, lossy_client, flood, tmp_path, path):
    server = SERVER if path == "forward" else NAT_VIP
    capture_file = tmp_path / "syns.pcap"
    capture = subprocess.Popen(["ip", "netns", "exec", "sl-client", "tcpdump", "-i", "client0", "-n", "-U", "-w",
                                str(capture_file), f"host {server} and tcp[tcpflags] & tcp-syn != 0"],
                               stderr=subprocess.PIPE, text=True)
    assert "listening on" in capture.stderr.readline()
    before, client_before, recoveries_before = stats(), kernel_counters("sl-client", "snmp", "Tcp"), sack_recoveries()
    output = tmp_path / "download"

    def client_side():  # curl's connection: other tests of the session may leave connections of their own
        return {pair for pair in sockets("sl-client", 80, local=False) if pair[1] == f"{server}:80"}

    def nat_side():  # the backend's side of a NAT connection: backend:80 <-> the pool address and the port sluice chose
        return {pair for ns in SERVERS[1:] for pair in sockets(ns, 80) if pair[1].startswith(NAT_POOL)}

    client_known, nat_known = client_side(), nat_side()
    started = time.monotonic()
    curl = subprocess.Popen(["ip", "netns", "exec", "sl-client", "curl", "--noproxy", "*", "-sS", "--max-time", "45",
                             "--limit-rate", LIMIT_RATE, "-o", str(output), f"http://{server}/bytes/{SIZE}"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    aimed = False
    try:
        (local, _), = wait_until(lambda: client_side() - client_known, timeout=5, what="curl's connection")
        client_port = local.rsplit(":", 1)[1]
        server_mac = SERVER_MAC
        if path == "forward":
            server_tuple = f"{SERVER}:80>{CLIENT}:{client_port}"
        else:
            (backend, pool), = wait_until(lambda: nat_side() - nat_known, timeout=5,
                                          what="the backend's side of the connection")
            server_tuple, server_mac = f"{backend}>{pool}", BACKEND_MACS[backend.split(":")[0]]
        flood.aim(f"{CLIENT}:{client_port}>{server}:80", server_tuple, server_mac)
        aimed = True
        _, err = curl.communicate(timeout=60)
        seconds = time.monotonic() - started
    finally:
        sent = flood.hold() if aimed else None
        if curl.poll() is None:
            curl.kill()
        capture.terminate()
        capture.wait(timeout=10)
    assert curl.returncode == 0, err
    assert hashlib.sha256(output.read_bytes()).hexdigest() == EXPECTED_SHA256
    assert sent["rst"] >= 3000 and sent["data"] >= 1500, sent  # the flood ran through the download

    # Every spoofed frame dropped by its reason, and not one frame of the real connection: its retransmissions, SACKs
    # and window updates all passed the window check.
    after = wait_until(lambda: (s := settled_stats()) and
                       delta(s, before, *WINDOW_DROPS) >= sent["rst"] + sent["data"] and s, timeout=5,
                       what="sluice to count every spoofed frame")
    print(f"{path}: {SIZE >> 20} MiB in {seconds:.1f} s under {sent['rst']} spoofed RSTs and {sent['data']} data"
          f" segments; sluice dropped {[(k, after[k] - before[k]) for k in WINDOW_DROPS]}, sent"
          f" {delta(after, before, 'tcp_challenge_acks_sent')} challenge ACKs; the servers made"
          f" {sack_recoveries() - recoveries_before} SACK recoveries")
    assert delta(after, before, "drop/tcp_out_of_window") == sent["data"]
    assert delta(after, before, "drop/tcp_rst_out_of_window", "drop/tcp_rst_challenged") == sent["rst"]
    assert delta(after, before, "drop/tcp_rst_out_of_window") > 0.9 * sent["rst"]  # a window is ~1e-3 of 2^32
    assert delta(after, before, "drop/tcp_syn_challenged") == 0
    assert kernel_counters("sl-client", "snmp", "Tcp")["EstabResets"] == client_before["EstabResets"]
    assert sack_recoveries() > recoveries_before, "the server never recovered a loss by SACK"

    # Both SYNs carried window scaling and SACK-permitted (what sluice's window tracking scales by), as they crossed it.
    syns = subprocess.run(["tcpdump", "-r", str(capture_file), "-n", "-v"], capture_output=True, text=True).stdout
    handshake = [line for line in syns.splitlines() if "Flags [S" in line]
    assert any("Flags [S]" in line for line in handshake) and any("Flags [S.]" in line for line in handshake), syns
    assert all("wscale" in line and "sackOK" in line for line in handshake), handshake


def test_blind_rsts_cut_an_idle_connection_only_with_the_window_check_off(lab_env, server_host, flood, tmp_path):
    """Two idle keep-alive connections to the same server, one opened under `tcp_window_check: strict` (the
    default), one under `off` (a connection keeps the check it opened with). Blind RSTs at the `off` one pass, are
    counted nowhere, and move sluice's entry to the close state, which expires after tcp_close (10 s) although both
    ends still hold the connection: its next request is dropped as ct_no_connection. The `strict` one's RSTs are
    dropped by reason, and its next request is answered."""
    wake = tmp_path / "wake"
    url = f"http://{SERVER}/"
    guarded, guarded_port = idle_client(url, wake)
    try:
        reload_with(lab_env, lambda config: config["firewall"].update(tcp_window_check="off"))
        exposed, exposed_port = idle_client(url, wake)
    finally:
        write_config(lab_env, lab_env["original"])
    try:
        before = stats()
        flood.aim(*connection(exposed_port, SERVER))
        time.sleep(1.0)
        sent = flood.hold()
        exposed_flooded = time.monotonic()
        middle = settled_stats()
        flood.aim(*connection(guarded_port, SERVER))
        time.sleep(1.0)
        guarded_sent = flood.hold()
        after = settled_stats()
        assert delta(middle, before, *WINDOW_DROPS) == 0, "tcp_window_check: off judges nothing"
        assert delta(after, middle, "drop/tcp_out_of_window") == guarded_sent["data"]
        assert delta(after, middle, "drop/tcp_rst_out_of_window", "drop/tcp_rst_challenged") == guarded_sent["rst"]
        time.sleep(max(0.0, exposed_flooded + 11.0 - time.monotonic()))  # the close timeout (10 s) runs out
        no_connection = stats()["drop/ct_no_connection"]
    finally:
        wake.touch()
    guarded_result, exposed_result = idle_result(guarded), idle_result(exposed)
    assert sent["rst"] > 1000
    assert guarded_result["error_count"] == 0 and sum(guarded_result["answers"].values()) == 2, guarded_result
    assert exposed_result["error_count"] == 1 and "timed out" in exposed_result["errors"][0], exposed_result
    assert stats()["drop/ct_no_connection"] > no_connection  # the request and its retransmissions


@pytest.mark.parametrize("path", ["forward", "nat"])
def test_a_rst_at_the_sniffed_sequence_closes_the_connection(lab_env, server_host, tmp_path, path):
    """An on-path attacker on the server LAN sniffs the server's segments to the client (the NAT pool address behind
    a VIP) and, once the connection idles, sends a RST at the server's next sequence: sluice lets it through (it is
    what a real RST looks like) and the client's next request finds its connection reset."""
    wake = tmp_path / "wake"
    sniffer = subprocess.Popen(["ip", "netns", "exec", "sl-server", PYTHON, str(HERE / "tcp_spoofer.py"), "exact",
                                "uplink", GW_SERVER_MAC, "80", CLIENT if path == "forward" else NAT_POOL, "0.5"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert "listening" in sniffer.stdout.readline()
    before, client_before = stats(), kernel_counters("sl-client", "snmp", "Tcp")
    client, client_port = idle_client(f"http://{SERVER if path == 'forward' else NAT_VIP}/", wake)
    try:
        out, err = sniffer.communicate(timeout=30)
        assert sniffer.returncode == 0, err
        shot = json.loads(out.strip().splitlines()[-1])
        if path == "forward":
            assert shot["tuple"] == f"{SERVER}:80>{CLIENT}:{client_port}", shot
        time.sleep(0.3)
    finally:
        wake.touch()
    result = idle_result(client)
    assert result["error_count"] == 1 and "ConnectionResetError" in result["errors"][0], result
    assert kernel_counters("sl-client", "snmp", "Tcp")["EstabResets"] == client_before["EstabResets"] + 1
    assert delta(settled_stats(), before, *WINDOW_DROPS) == 0


def test_challenge_acks_for_in_window_rsts_leave_a_lossy_download_intact(lab_env, server_host, lossy_client, tmp_path):
    """A RST in the window but not at the next sequence gets a challenge ACK (RFC 5961 3.2) that sluice writes in
    the name of the RST's receiver. It must acknowledge no more than that receiver did: an ACK for data still in
    flight makes the sender forget it, and a segment lost on the way is never sent again (the download stalls). A
    sniffing spoofer on the server LAN stands in for a blind attacker's lucky guesses (about 1 in 1,000 lands in a
    scaled window), in bulk: RSTs one below the server's next sequence, every few milliseconds of a download that
    loses 1 in 150 of its segments."""
    stopfile = tmp_path / "stop"
    near = subprocess.Popen(["ip", "netns", "exec", "sl-server", PYTHON, str(HERE / "tcp_spoofer.py"), "near",
                             "uplink", GW_SERVER_MAC, "80", CLIENT, str(stopfile)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert "listening" in near.stdout.readline()
        before = stats()
        output = tmp_path / "download"
        curl = subprocess.run(["ip", "netns", "exec", "sl-client", "curl", "--noproxy", "*", "-sS", "--max-time", "20",
                               "--limit-rate", LIMIT_RATE, "-o", str(output), f"http://{SERVER}/bytes/{SIZE}"],
                              capture_output=True, text=True, timeout=30)
    finally:
        stopfile.touch()
        out, err = near.communicate(timeout=10)
    assert near.returncode == 0, err
    sent = json.loads(out.strip().splitlines()[-1])["rst"]
    after = settled_stats()
    print(f"{sent} in-window RSTs; challenged {delta(after, before, 'drop/tcp_rst_challenged')}, challenge ACKs"
          f" {delta(after, before, 'tcp_challenge_acks_sent')}")
    assert curl.returncode == 0, curl.stderr
    assert hashlib.sha256(output.read_bytes()).hexdigest() == EXPECTED_SHA256
    assert delta(after, before, "drop/tcp_rst_challenged") > 100
    assert delta(after, before, "tcp_challenge_acks_sent") > 100


def test_a_syn_from_a_host_beside_the_server_does_not_give_the_sequence_away(lab_env, server_host, tmp_path):
    """A SYN on an established connection is answered with a challenge ACK to its claimed sender (RFC 5961 4.2). A
    host on the server LAN with a MAC of its own sends one in the server's name: the answer must reach the server,
    not that host, or the host reads the connection's numbers from it and resets it with an exact RST."""
    wake = tmp_path / "wake"
    client, client_port = idle_client(f"http://{SERVER}/", wake)
    try:
        out = subprocess.run(["ip", "netns", "exec", "sl-server", PYTHON, str(HERE / "tcp_spoofer.py"), "synleak",
                              "uplink", GW_SERVER_MAC, f"{SERVER}:80>{CLIENT}:{client_port}"], capture_output=True,
                             text=True, timeout=30, check=True).stdout
        time.sleep(0.3)
    finally:
        wake.touch()
    result = idle_result(client)
    assert json.loads(out.splitlines()[0])["challenge"] is None, out
    assert result["error_count"] == 0, result

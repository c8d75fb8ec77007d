"""`sluice --withdraw-vips FILE` against a real BIRD: what the systemd unit runs after any exit (ExecStopPost), so a
sluice killed with SIGKILL or crashed does not leave BIRD announcing VIPs nobody serves."""

import os
import shutil
import subprocess
import time

import pytest
import yaml

from netns import Netns
from sluice_harness import SLUICE

pytestmark = pytest.mark.skipif(shutil.which("bird") is None, reason="bird2 not installed (deploy/install-deps.sh)")

LEFT_BEHIND = """# Written by sluice (bgp.include_file): the VIPs it can serve now. Do not edit; sluice rewrites it.
protocol static sluice_vips4 {
    ipv4;
    route 10.9.9.9/32 blackhole;
}
protocol static sluice_vips6 {
    ipv6;
    route 2001:db8:9::9/128 blackhole;
}
"""


def config(tmp_path, bgp):
    c = {
        "ports": [{"name": "a", "device": "net_null0"}, {"name": "b", "device": "net_null1"}],
        "lcores": [{"id": 1, "roles": ["rx", "worker"]}],
        "load_balancer": {"nat_pool": ["10.0.3.100"]},
        "services": [{"name": "web", "vip": "10.9.9.9", "port": 80, "protocol": "tcp", "mode": "nat",
                      "backends": [{"address": "10.0.2.11"}]}],
    }
    if bgp:
        c["bgp"] = {"bird_socket": str(tmp_path / "bird.ctl"), "include_file": str(tmp_path / "sluice-vips.conf")}
    path = tmp_path / ("with-bgp.yaml" if bgp else "without-bgp.yaml")
    path.write_text(yaml.safe_dump(c, sort_keys=False))
    return path


def test_withdraw_vips_empties_the_include_file_and_bird_drops_the_routes(tmp_path):
    ns = Netns(f"slbgp{os.getpid()}", [])  # BIRD's device scan stays inside a namespace of the test's own
    bird = None
    try:
        (tmp_path / "sluice-vips.conf").write_text(LEFT_BEHIND)  # what a SIGKILLed sluice left
        (tmp_path / "bird.conf").write_text(f'router id 10.255.0.1;\nprotocol device {{}}\n'
                                            f'include "{tmp_path}/sluice-vips.con[f]";\n')
        bird = subprocess.Popen(ns.prefix() + ["bird", "-f", "-c", str(tmp_path / "bird.conf"), "-s",
                                               str(tmp_path / "bird.ctl")], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)

        def routes():
            out = subprocess.run(["birdc", "-s", str(tmp_path / "bird.ctl"), "show", "route"], capture_output=True,
                                 text=True, timeout=10)
            return out.stdout

        deadline = time.monotonic() + 10
        while "10.9.9.9/32" not in routes():
            assert time.monotonic() < deadline and bird.poll() is None, "BIRD did not start with the stale routes"
            time.sleep(0.1)
        assert "2001:db8:9::9/128" in routes()

        done = subprocess.run([str(SLUICE), "--withdraw-vips", str(config(tmp_path, bgp=True))], capture_output=True,
                              text=True, timeout=30)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "every VIP withdrawn" in done.stdout
        left = (tmp_path / "sluice-vips.conf").read_text()
        assert "route" not in left and "protocol static sluice_vips4" in left  # the names export filters use stay
        shown = routes()
        assert "10.9.9.9/32" not in shown and "2001:db8:9::9/128" not in shown, shown

        # Without BIRD listening it fails, and says so; without a bgp section there is nothing to do.
        bird.terminate()
        bird.wait(timeout=10)
        bird = None
        failed = subprocess.run([str(SLUICE), "--withdraw-vips", str(config(tmp_path, bgp=True))], capture_output=True,
                                text=True, timeout=30)
        assert failed.returncode == 1 and "could not withdraw" in failed.stderr, failed.stdout + failed.stderr
        plain = subprocess.run([str(SLUICE), "--withdraw-vips", str(config(tmp_path, bgp=False))], capture_output=True,
                               text=True, timeout=30)
        assert plain.returncode == 0 and "nothing announced" in plain.stdout
    finally:
        if bird:
            bird.kill()
        ns.delete()

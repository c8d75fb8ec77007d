"""dpdk-testpmd in flowgen mode feeds sluice over net_memif for a few seconds; every packet testpmd handed to memif is
counted by sluice as received, and every received packet as sent or dropped for a named reason."""

import os
import re
import signal
import subprocess
import time

from sluice_harness import Sluice, wait_until

TESTPMD = os.environ.get("TESTPMD", "dpdk-testpmd")


def test_testpmd_flowgen_over_memif_is_all_accounted_for(tmp_path):
    sock = f"/run/sluice-flowgen-{os.getpid()}.sock"
    prefix = f"flowgen-{os.getpid()}"
    log = tmp_path / "testpmd.log"
    # The generator is the memif server and starts first (docs: FIELD-NOTES, memif start order).
    gen = subprocess.Popen([TESTPMD, "--lcores=0@0,1@0", "--no-pci", "--in-memory", f"--file-prefix={prefix}",
                            f"--vdev=net_memif0,role=server,socket={sock}", "--",
                            "--no-mlockall", "--forward-mode=flowgen", "--flowgen-flows=64", "--txpkts=64",
                            "--burst=32", "--port-topology=loop", "--nb-cores=1", "--total-num-mbufs=8192",
                            "--stats-period=1"], stdin=subprocess.DEVNULL, stdout=open(log, "w"),
                           stderr=subprocess.STDOUT)
    sluice = None
    try:
        wait_until(lambda: "Port statistics" in log.read_text(errors="replace") or gen.poll() is not None, timeout=20,
                   what="testpmd to start")
        assert gen.poll() is None, log.read_text(errors="replace")[-3000:]
        config = {
            "dataplane": {"idle_sleep_us": 0},
            "ports": [{"name": "in", "device": f"net_memif0,role=client,socket={sock}"},
                      {"name": "out", "device": "net_null0,no-rx=1"}],
            "lcores": [{"id": 1, "roles": ["rx", "worker"]}],
            "forward": [{"from": "in", "to": "out", "next_hop_mac": "02:00:00:00:00:02"},
                        {"from": "out", "to": "in", "next_hop_mac": "02:00:00:00:00:01"}],
            "firewall": {"default": "allow", "table_size": 65536},  # every flow tracked on the way
        }
        sluice = Sluice(tmp_path, config).start()
        wait_until(lambda: sluice.stats()["rx_packets"] > 100000, timeout=20, what="traffic from testpmd")
        time.sleep(3)
        gen.send_signal(signal.SIGINT)  # the generator stops first: sluice then sees no more packets
        gen.wait(timeout=20)
        out = log.read_text(errors="replace")
        sent = re.findall(r"TX-packets:\s*(\d+)", out.split("Forward statistics for port 0")[-1])
        assert sent, out[-3000:]
        sent = int(sent[0])
        stats = sluice.wait_accounted(sent, timeout=20)
        assert stats["rx_packets"] == sent, (stats["rx_packets"], sent)
        assert stats["tx_packets"] + stats["drops"] == stats["rx_packets"]
        drops = {k: v for k, v in stats.items() if k.startswith("drop/") and v}
        assert drops == {}, drops  # flowgen's packets are valid UDP: nothing to drop
        assert sent > 100000
        assert sluice.stop() == 0, sluice.log()
    finally:
        if gen.poll() is None:
            gen.kill()
            gen.wait()
        if sluice:
            sluice.kill()
        subprocess.run(["rm", "-rf", f"/var/run/dpdk/{prefix}"])

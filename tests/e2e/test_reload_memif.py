"""100 reloads alternating two rule sets while dpdk-testpmd (flowgen) feeds sluice over net_memif without pause:
every packet sluice received was forwarded or dropped by a rule, none for any other reason, and no mbuf leaked."""

import os
from pathlib import Path

import yaml

from flowgen import Flowgen
from sluice_harness import Sluice, wait_until


def rule_set(deny_first):
    """flowgen's flows go to 198.18.0.2 .. 198.18.0.65 (one per destination): each set denies one half."""
    deny = "198.18.0.0/27" if deny_first else "198.18.0.32/27"
    return {"default": "allow", "table_size": 65536,
            "rules": [{"name": "half", "destination": deny, "action": "deny"}]}


def test_hundred_reloads_of_alternating_rule_sets_under_memif_traffic_account_for_every_packet(tmp_path):
    gen = Flowgen(tmp_path, "reloadgen")
    sluice = None
    try:
        config = gen.sluice_config(rule_set(True))
        sluice = Sluice(tmp_path, config).start()
        eal = yaml.safe_load(sluice.config_path.read_text())["eal"]
        wait_until(lambda: sluice.stats()["rx_packets"] > 10000, timeout=20, what="traffic from testpmd")
        hashes = set()
        for i in range(100):
            candidate = dict(config, eal=eal, metrics={"listen": ""}, firewall=rule_set(i % 2 == 1))
            tmp = Path(str(sluice.config_path) + ".tmp")
            tmp.write_text(yaml.safe_dump(candidate, sort_keys=False))
            os.replace(tmp, sluice.config_path)
            outcome = sluice.telemetry.query("/sluice/reload")
            assert outcome["last_reload_ok"] == 1, outcome
            hashes.add(outcome["hash"])
        assert len(hashes) == 2
        during = sluice.stats()
        sent = gen.stop()  # the generator stops first: then nothing is in flight
        try:
            stats = sluice.wait_accounted(sent, timeout=20)
        except TimeoutError:
            raise AssertionError(f"testpmd sent {sent}; sluice: {sluice.stats()}; testpmd said: {gen.text()[-1500:]}")
        assert stats["rx_packets"] == sent
        drops = {k: v for k, v in stats.items() if k.startswith("drop/") and v}
        assert set(drops) <= {"drop/rule_deny"}, drops  # nothing lost to the swaps
        assert stats["tx_packets"] + drops.get("drop/rule_deny", 0) == stats["rx_packets"]
        assert during["rx_packets"] > 10000 and stats["tx_packets"] > 0
        assert sluice.stop() == 0, sluice.log()  # every mbuf back in its pool
    finally:
        gen.kill()
        if sluice:
            sluice.kill()

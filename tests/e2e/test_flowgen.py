"""dpdk-testpmd in flowgen mode feeds sluice over net_memif for a few seconds; every packet testpmd handed to memif is
counted by sluice as received, and every received packet as sent or dropped for a named reason."""

import time

from flowgen import Flowgen
from sluice_harness import Sluice, wait_until


def test_testpmd_flowgen_over_memif_is_all_accounted_for(tmp_path):
    gen = Flowgen(tmp_path, "flowgen")
    sluice = None
    try:
        config = gen.sluice_config({"default": "allow", "table_size": 65536})  # every flow tracked on the way
        sluice = Sluice(tmp_path, config).start()
        wait_until(lambda: sluice.stats()["rx_packets"] > 100000, timeout=20, what="traffic from testpmd")
        time.sleep(3)
        sent = gen.stop()  # the generator stops first: sluice then sees no more packets
        stats = sluice.wait_accounted(sent, timeout=20)
        assert stats["rx_packets"] == sent, (stats["rx_packets"], sent)
        assert stats["tx_packets"] + stats["drops"] == stats["rx_packets"]
        drops = {k: v for k, v in stats.items() if k.startswith("drop/") and v}
        assert drops == {}, drops  # flowgen's packets are valid UDP: nothing to drop
        assert sent > 100000
        assert sluice.stop() == 0, sluice.log()
    finally:
        gen.kill()
        if sluice:
            sluice.kill()

"""Guards for the packet tests: frames are built offline only."""

import scapy.layers.l2


def _refuse_lookup(*args, **kwargs):
    raise AssertionError("an Ether() without dst made scapy resolve a MAC on the host's network; give src and dst")


# scapy resolves a missing destination MAC by sending ARP on the host's interfaces; tests must never do that.
scapy.layers.l2.getmacbyip = _refuse_lookup

"""Guards for the packet tests: frames are built offline only; a test whose frames the kernel lost before sluice
read them runs again."""

import scapy.layers.l2
from _pytest.runner import runtestprotocol

ATTEMPTS = 3


def _refuse_lookup(*args, **kwargs):
    raise AssertionError("an Ether() without dst made scapy resolve a MAC on the host's network; give src and dst")


# scapy resolves a missing destination MAC by sending ARP on the host's interfaces; tests must never do that.
scapy.layers.l2.getmacbyip = _refuse_lookup


def pytest_configure(config):
    config.addinivalue_line("markers", "release_pass_only: what the sanitizers cannot change (the project's docs and "
                            "deploy/ files; the systemd watchdog's timing, whose code test_systemd also runs): "
                            "tests/run.sh runs these in the release pass, not again under ASan")


def pytest_runtest_protocol(item, nextitem):
    """A test that failed with FramesLostBeforeSluice (the kernel's capture ring in front of a net_pcap port
    overflowed while the machine left sluice's RX lcore unscheduled: the test's premise, not sluice, failed) runs
    again, up to ATTEMPTS times in all. Any other outcome is reported as it is."""
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    for attempt in range(1, ATTEMPTS + 1):
        reports = runtestprotocol(item, nextitem=nextitem, log=False)
        lost = [r for r in reports if r.failed and "FramesLostBeforeSluice" in str(r.longrepr)]
        if not lost or attempt == ATTEMPTS:
            break
        crash = getattr(lost[0].longrepr, "reprcrash", None)
        print(f"\n{item.nodeid}: attempt {attempt}: {crash.message if crash else 'FramesLostBeforeSluice'}; running it again")
    for report in reports:
        item.ihook.pytest_runtest_logreport(report=report)
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True

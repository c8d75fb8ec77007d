#!/usr/bin/env bash
# sluice's reload against nftables loading the same rules (`nft -f`), side by side in one invocation.
#
#   tests/bench/reload_vs_nft.sh        (as root; about 3 minutes at the defaults, most of it the 100k case)
#
# Random IPv4 rules (source and destination prefixes, tcp/udp with port ranges or any protocol, allow or deny),
# written once as a sluice config (firewall.rules) and once as an nft file (flush ruleset + an inet table with a
# forward chain, one nft rule per sluice rule). Cases, each run REPS times with the order of the two alternating:
#   all-10k    RULES rules, every one different from the running set        target sluice/nft <= 1.0
#   one-10k    the running set with one rule's destination port changed,    target <= 0.25
#              each repetition in another place of the file (the first edit in its part of the rules)
#   again-10k  the rule one-10k changed last, changed again                   target <= 0.25
#   all-100k   BIG_RULES rules, every one different; also peak memory       target <= 1.0 in time and in memory
# sluice: a running daemon (net_null port, --no-huge so that DPDK's memory is the process's own, its rx+worker lcore
# on CPU 1 and its control thread on CPU 0) has its config file replaced and gets SIGHUP; the time is its log's, from
# "reload (SIGHUP): reading" to "reload applied"; the memory its VmHWM over the reload (reset just before). nft: the
# command's wall time and maximum RSS (/usr/bin/time), in a network namespace of its own, on CPU 0.
# The reload's phases as the daemon logs them (read, YAML, decoding, tables with their rte_acl share, the memory with
# both rule sets built, publication) are printed under each run. Nothing asserts a speed: the table says which targets
# were met.
#
# Environment: SLUICE (default build/app/sluice/sluice), RULES (10000), BIG_RULES (100000), REPS (3), FILES (20:
# the sluice rules in that many firewall.include files; 0: inline in firewall.rules), CASES
# (default "all-10k one-10k again-10k all-100k"), KEEP=1 keeps the work directory (configs, nft files, the daemons'
# logs).
set -euo pipefail

readonly REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
log() { printf '[reload_vs_nft.sh] %s\n' "$*" >&2; }
die() { log "FAIL: $*"; exit 1; }

case "${1:-}" in
    "") ;;
    -h|--help) sed -n '2,25p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "usage: $0" >&2; exit 2 ;;
esac
[[ $EUID -eq 0 ]] || die "run as root (network namespaces, nft)"
export SLUICE="${SLUICE:-$REPO/build/app/sluice/sluice}"
[[ -x $SLUICE ]] || die "no sluice binary at $SLUICE (ninja -C build app/sluice/sluice, or set SLUICE)"
command -v nft >/dev/null || die "nft is missing (deploy/install-deps.sh installs nftables)"
[[ -x /usr/bin/time ]] || die "/usr/bin/time not found (Debian package time)"
command -v taskset >/dev/null || die "taskset not found (Debian package util-linux)"
exec python3 "$REPO/tests/bench/reload_vs_nft.py"

#!/usr/bin/env bash
# Capacity benchmark: connection tables of 1M and 10M connections side by side in one sluice_bench
# process (its `capacity` section): DPDK memory per connection, the established path's cycles per packet at 10M
# against 1M, and new connections into a full 10M table against a full 1M one. Not part of tests/run.sh.
#
#   tests/bench/capacity.sh            (as root; about 2-4 minutes per round)
#
# The 10M table needs about 2 GiB of hugepages: the script reserves NEED_PAGES (1400) more 2 MiB pages than are
# free when it starts, if fewer are free, and gives the reservation back to what it was when it ends (also on
# failure). Environment: ROUNDS (3: one sluice_bench run each; the figures of a shared machine move between
# runs, compare the ratios within a run), REPS (5), SIZES (1000000,10000000), SLUICE_BENCH (the binary; default
# build/tests/bench/sluice_bench), LCORE (the CPU to run on, default the idlest of the first two).
set -euo pipefail

readonly REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
readonly ROUNDS="${ROUNDS:-3}" REPS="${REPS:-5}" SIZES="${SIZES:-1000000,10000000}" NEED_PAGES="${NEED_PAGES:-1400}"
SLUICE_BENCH="${SLUICE_BENCH:-$REPO/build/tests/bench/sluice_bench}"

log() { printf '[capacity.sh] %s\n' "$*" >&2; }
die() { log "FAIL: $*"; exit 1; }
case "${1:-}" in
    "") ;;
    -h|--help) sed -n '2,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "usage: $0" >&2; exit 2 ;;
esac
[[ $EUID -eq 0 ]] || die "run as root (hugepages)"
[[ -x $SLUICE_BENCH ]] || die "no $SLUICE_BENCH (ninja -C build tests/bench/sluice_bench)"

# shellcheck source=tests/bench/hugepages_lib.sh
source "$REPO/tests/bench/hugepages_lib.sh"
trap restore_hugepages EXIT
reserve_hugepages "$NEED_PAGES"
log "$(cat "$HUGEPAGES/free_hugepages") hugepages free"

for ((round = 1; round <= ROUNDS; ++round)); do
    lcore="${LCORE:-$(python3 "$REPO/tests/bench/bench_table.py" idlest_cpu)}"
    log "round $round of $ROUNDS on CPU $lcore"
    "$SLUICE_BENCH" --only capacity --capacity-conns "$SIZES" --reps "$REPS" --lcore "$lcore"
done

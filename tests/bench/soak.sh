#!/usr/bin/env bash
# Soak: sluice under steady mixed traffic with a reload every 3 s for SECONDS (default 1800 = 30 min), sampled
# every 5 s; exits 0 when RSS, mbufs in use and tracked connections stayed flat (tests/bench/soak.py says how).
#   tests/bench/soak.sh [SECONDS]        (as root; SLUICE_BIN selects the binary; tests/run.sh runs 120 s)
set -euo pipefail
case "${1:-}" in
    -h|--help) sed -n '2,4p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    ""|[0-9]*) ;;
    *) echo "usage: $0 [SECONDS]" >&2; exit 2 ;;
esac
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export SLUICE_BIN=${SLUICE_BIN:-$root/build/app/sluice/sluice}
exec /usr/bin/python3 "$root/tests/bench/soak.py" "${1:-1800}"

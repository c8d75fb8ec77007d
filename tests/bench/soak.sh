#!/usr/bin/env bash
# Soak: sluice under steady mixed traffic with a reload every 3 s for SECONDS (default 1800 = 30 min), sampled
# every 5 s; exits 0 when RSS, mbufs in use and tracked connections stayed flat (tests/bench/soak.py says how).
#   tests/bench/soak.sh [SECONDS]        (as root; SLUICE_BIN selects the binary; tests/run.sh runs 120 s)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export SLUICE_BIN=${SLUICE_BIN:-$root/build/app/sluice/sluice}
exec /usr/bin/python3 "$root/tests/bench/soak.py" "${1:-1800}"

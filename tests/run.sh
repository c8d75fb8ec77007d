#!/usr/bin/env bash
# Runs every test of sluice: installs what is missing, builds (release, and ASan+UBSan in build-asan), runs the
# unit tests (Catch2), the packet integration tests (pytest + scapy on net_pcap ports), a 1-minute soak, the lab
# demo, the end-to-end tests (tests/e2e), the Debian package (built, installed with apt, upgraded, purged) and the
# fuzzers, and ends with the single line "N passed, N failed".
#   tests/run.sh --fast   the fast tier alone: install, release build, unit tests and the in-process golden tables,
#                         the layout check (a few minutes on 2 CPUs). The whole run starts with the same tier (and
#                         clang-tidy), so a change that breaks it fails early.
#   SLUICE_SANITIZE=0 skips the sanitizer build.
#   SLUICE_PACKAGE=0 skips the Debian package (tests/package/test_package.sh installs it on this machine, then purges).
#   SLUICE_FUZZ=0 skips the fuzzers (tests/fuzz, built with clang in build-fuzz); SLUICE_FUZZ_SECONDS (15) per target.
set -uo pipefail
fast=0
case "${1:-}" in
    --fast) fast=1 ;;
    "") ;;
    *) echo "usage: tests/run.sh [--fast]" >&2; exit 2 ;;
esac
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
results="$root/build/test-results"
python=/usr/bin/python3  # Debian's, which has scapy and pytest (a pyenv python3 may shadow it on PATH)

# Each stage line carries the time so far, to keep the whole run inside its budget (about 30 min on 2 CPUs).
step() { printf '\n=== %s  (at %d:%02d)\n' "$*" $((SECONDS / 60)) $((SECONDS % 60)); }

# A suite that crashes before writing its results still counts as a failure.
record_failure() {
    local name=$1 message=$2
    cat > "$results/$name.xml" <<XML
<testsuite name="$name"><testcase classname="$name" name="$name"><failure message="$message"/></testcase></testsuite>
XML
}

step "install dependencies"
"$root/deploy/install-deps.sh" || { echo "install-deps failed"; echo "0 passed, 1 failed"; exit 1; }

build() {  # build DIR "TARGETS" [meson options...]   (TARGETS "": everything)
    local dir=$1 targets=$2; shift 2
    # -Dunity=on: one compilation per target instead of one per file saves about a quarter of the CPU time of a
    # build from scratch (the DPDK, yaml-cpp, spdlog and Catch2 headers are parsed once); a developer's own build
    # directory keeps per-file compiles for quick rebuilds.
    if [ ! -f "$dir/build.ninja" ]; then meson setup "$dir" -Dunity=on "$@" >/dev/null || return 1; fi
    # shellcheck disable=SC2086  # targets is a list
    ninja -C "$dir" $targets
}

step "build (release)"
mkdir -p "$root/build"
if ! build build ""; then echo "0 passed, 1 failed"; exit 1; fi
rm -rf "$results"; mkdir -p "$results"

run_unit() {  # run_unit NAME BUILD_DIR
    run_catch "$1" "$2/tests/unit/unit_tests"
    run_catch "$1-dpdk" "$2/tests/unit/dpdk_unit_tests"  # tests that need the EAL (rte_acl, rte_hash)
}

run_catch() {  # run_catch NAME BINARY
    step "unit tests ($1)"
    "$2" --reporter junit --out "$results/$1.xml" || true
    [ -s "$results/$1.xml" ] || record_failure "$1" "unit test binary crashed"
    "$python" - "$results/$1.xml" <<'PY'
import sys, xml.etree.ElementTree as ET
r = ET.parse(sys.argv[1]).getroot()
cases = list(r.iter("testcase"))
failed = [c for c in cases if c.find("failure") is not None or c.find("error") is not None]
print(f"{len(cases)} test cases, {len(failed)} failed")
for c in r.iter("testcase"):
    for f in list(c.findall("failure")) + list(c.findall("error")):
        print("FAILED:", c.get("name"), (f.text or "").strip()[:2000])
PY
}

run_integration() {  # run_integration NAME SLUICE_BINARY [PYTEST_OPTIONS...]
    step "packet integration tests ($1)"
    local name=$1 binary=$2; shift 2
    SLUICE_BIN=$binary "$python" -m pytest -q -p no:cacheprovider "$root/tests/integration" \
        --junitxml="$results/$name.xml" -o junit_suite_name="$name" "$@" || true
    [ -s "$results/$name.xml" ] || record_failure "$name" "pytest did not run"
}

# The layout (clang-format) in every tier; clang-tidy, a few minutes on 2 CPUs, in the whole run.
run_lint() {  # run_lint TIDY(0|1)
    step "lint (tests/lint.sh: clang-format$([ "$1" = 1 ] && echo ', clang-tidy on lib/ and app/'))"
    if LINT_TIDY=$1 "$root/tests/lint.sh" > "$results/lint.log" 2>&1; then
        echo '<testsuite name="lint"><testcase classname="lint" name="lint.sh"/></testsuite>' > "$results/lint.xml"
    else
        record_failure lint "tests/lint.sh: layout or clang-tidy findings (see build/test-results/lint.log)"
    fi
    tail -n 25 "$results/lint.log"
}

run_unit unit build
run_lint $((1 - fast))
if [ "$fast" = 1 ]; then
    step "summary (fast tier)"
    "$python" "$root/tests/summarize.py" "$results"
    exit
fi

run_integration integration "$root/build/app/sluice/sluice"

step "soak, 1 minute (tests/bench/soak.sh: 30 minutes)"
if SLUICE_BIN="$root/build/app/sluice/sluice" "$root/tests/bench/soak.sh" 60 > "$results/soak.log" 2>&1; then
    echo '<testsuite name="soak"><testcase classname="soak" name="soak.sh 60"/></testsuite>' > "$results/soak.xml"
else
    record_failure soak "tests/bench/soak.sh 60: not flat or failed (see build/test-results/soak.log)"
fi
tail -n 1 "$results/soak.log"

step "lab end-to-end (the README's main command)"
if "$root/deploy/lab/demo.sh" --once > "$results/lab.log" 2>&1; then
    echo '<testsuite name="lab"><testcase classname="lab" name="demo.sh --once"/></testsuite>' > "$results/lab.xml"
    tail -n 15 "$results/lab.log"
else
    tail -n 60 "$results/lab.log"
    record_failure lab "deploy/lab/demo.sh --once failed (see build/test-results/lab.log)"
fi

step "end-to-end tests (tests/e2e: the lab with real clients and servers, testpmd flowgen over memif)"
SLUICE_BIN="$root/build/app/sluice/sluice" "$python" -m pytest -q -p no:cacheprovider "$root/tests/e2e" \
    --junitxml="$results/e2e.xml" -o junit_suite_name=e2e || true
[ -s "$results/e2e.xml" ] || record_failure e2e "pytest did not run"
"$root/deploy/lab/lab.sh" down >/dev/null 2>&1 || true  # whatever a failed test left behind

if [ "${SLUICE_PACKAGE:-1}" != 0 ]; then
    step "Debian package (tests/package/test_package.sh: build, lintian, apt install, upgrade, purge)"
    if "$root/tests/package/test_package.sh" > "$results/package.log" 2>&1; then
        echo '<testsuite name="package"><testcase classname="package" name="test_package.sh"/></testsuite>' \
            > "$results/package.xml"
    else
        record_failure package "tests/package/test_package.sh failed (see build/test-results/package.log)"
    fi
    grep -E '^(FAIL|package:)' "$results/package.log" | tail -n 15
fi

if [ "${SLUICE_SANITIZE:-1}" != 0 ]; then
    step "build (address + undefined sanitizers)"
    # -Dwerror=false: GCC 12 warns falsely under sanitizers; the release build keeps -Werror. -Og: optimised enough
    # for the packet tests' pace, and UBSan's checks compile far quicker than at -O1 (this build is the longest step
    # of the run on 2 CPUs). -g1: the line tables the sanitizers' reports need, a third less compile time than -g
    # (no variables: debug in a build of your own). Only what runs below is built (the
    # benchmark is not: the release build compiled it already); deploy/sluice.yaml and the man pages are what
    # test_systemd's `meson install --no-rebuild` of this build directory stages besides the binaries.
    asan_targets="app/sluice/sluice tests/unit/unit_tests tests/unit/dpdk_unit_tests tests/integration/sluice_pool_hog"
    asan_targets+=" deploy/sluice.yaml docs/man/sluice.8 docs/man/sluicectl.8 docs/man/sluice.yaml.5"
    if build build-asan "$asan_targets" -Doptimization=g -Ddebug=false -Db_ndebug=false -Dc_args=-g1 -Dcpp_args=-g1 \
        -Db_sanitize=address,undefined -Db_lundef=false -Dwerror=false; then
        # DPDK keeps some allocations until exit by design; leaks are checked by the mbuf accounting instead.
        export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
        run_unit unit-asan build-asan
        # What the sanitizers cannot change (marker release_pass_only: conftest.py) ran in the release pass.
        run_integration integration-asan "$root/build-asan/app/sluice/sluice" -m "not release_pass_only"
    else
        record_failure build-asan "the sanitizer build failed"
    fi
fi

if [ "${SLUICE_FUZZ:-1}" != 0 ]; then
    # libFuzzer (clang, build-fuzz): each target replays tests/fuzz/regressions/TARGET, then fuzzes from its seed
    # corpus for SLUICE_FUZZ_SECONDS (15: a smoke run; long runs: tests/fuzz/run_fuzzers.sh DIR SECONDS); one
    # pass/fail per target (fuzz-TARGET.xml). See docs/security.md.
    step "fuzzing (parse, icmp_error, config, stateful, fragments, neighbour: ${SLUICE_FUZZ_SECONDS:-15} s each)"
    "$root/tests/fuzz/run_fuzzers.sh" "$results" "${SLUICE_FUZZ_SECONDS:-15}" || true
fi

step "summary"
"$python" "$root/tests/summarize.py" "$results"

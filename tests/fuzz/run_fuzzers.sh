#!/usr/bin/env bash
# Builds sluice's libFuzzer targets (clang, in build-fuzz) and, for each target, replays its regression inputs
# (tests/fuzz/regressions/TARGET: every input that ever crashed it) and then fuzzes it for SECONDS from its seed
# corpus. Each target is one JUnit test case, written to RESULTS/fuzz-TARGET.xml (tests/run.sh's results style).
#   tests/fuzz/run_fuzzers.sh [RESULTS_DIR] [SECONDS]      defaults: build-fuzz/fuzz-results, 60
# New corpus entries accumulate in build-fuzz/fuzz-work/TARGET/corpus (kept between runs: later runs start deeper;
# not for the slow stateful target);
# crashes are saved as build-fuzz/fuzz-work/TARGET/crash-* (see docs/security.md, "Fuzzing", for what to do with one).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build="$root/build-fuzz"
results=${1:-$build/fuzz-results}
seconds=${2:-60}
python=/usr/bin/python3
targets=(parse icmp_error config stateful fragments neighbour)
mkdir -p "$results"

# write_result TARGET STATUS(pass|fail) MESSAGE LOG
write_result() {
    "$python" - "$results/fuzz-$1.xml" "$1" "$2" "$3" "${4:-}" <<'PY'
import sys
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr
out, target, status, message, log = sys.argv[1:]
name = f"fuzz-{target}"
tail = ""
if log and Path(log).exists():
    tail = "\n".join(Path(log).read_text(errors="replace").splitlines()[-60:])
case = f'<testcase classname="fuzz" name={quoteattr(name)}>'
if status == "fail":
    case += f"<failure message={quoteattr(message)}>{escape(tail)}</failure>"
case += f"<system-out>{escape(message)}</system-out></testcase>"
Path(out).write_text(f'<testsuite name={quoteattr(name)}>{case}</testsuite>\n')
PY
}

echo "fuzz: building in $build"
if [ ! -f "$build/build.ninja" ]; then
    # -Dunity=on: one compilation per fuzzer instead of one per library source it carries.
    CC=clang CXX=clang++ meson setup "$build" -Dfuzz=true -Dtests=false -Dbuildtype=debugoptimized -Dunity=on >/dev/null
elif ! grep -q '^build fuzzers:' "$build/build.ninja"; then
    meson configure "$build" -Dfuzz=true >/dev/null  # a build-fuzz set up without the option
fi
if ! ninja -C "$build" fuzzers; then
    for t in "${targets[@]}"; do write_result "$t" fail "the fuzzers did not build (ninja -C build-fuzz fuzzers)"; done
    exit 1
fi

# Leaks are checked per input by libFuzzer; UBSan findings are fatal (-fno-sanitize-recover).
export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
failed=0
for t in "${targets[@]}"; do
    bin="$build/tests/fuzz/fuzz_$t"
    work="$build/fuzz-work/$t"
    log="$work/fuzz.log"
    mkdir -p "$work/corpus"
    rm -f "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-*
    seeds=("$root/tests/fuzz/corpus/$t")
    flags=(-timeout=10 -rss_limit_mb=2048 -print_final_stats=1)
    cwd=$work
    if [ "$t" = config ]; then
        # Prefix-set files are read relative to the working directory: tests/fuzz/config-files has a few.
        seeds+=("$root/config" "$root/config/invalid")
        flags+=(-dict="$root/tests/fuzz/config.dict" -max_len=8192)
        cwd="$root/tests/fuzz/config-files"
    elif [ "$t" = stateful ]; then
        # Programs of up to 64 steps from the start: short ones reach little state, longer ones run too few. At a
        # few dozen programs a second, replaying a corpus kept from earlier runs would eat the run's time (libFuzzer
        # replays it before its clock starts): each run starts from the seeds.
        flags+=(-max_len=128 -len_control=0)
        rm -rf "$work/corpus" && mkdir -p "$work/corpus"
    elif [ "$t" = fragments ]; then
        flags+=(-max_len=1536)
    elif [ "$t" = neighbour ]; then
        flags+=(-max_len=2048)
    fi
    echo "fuzz: $t"

    # Replay: each regression input once, no fuzzing (files, not a directory, on the command line).
    regressions=("$root/tests/fuzz/regressions/$t"/*)
    if [ -e "${regressions[0]}" ]; then
        if ! (cd "$cwd" && "$bin" "${flags[@]}" "${regressions[@]}") > "$log" 2>&1; then
            grep -m1 -A2 -E 'FUZZ_CHECK failed|ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error' "$log"
            write_result "$t" fail "a regression input of tests/fuzz/regressions/$t fails again" "$log"
            failed=$((failed + 1))
            continue
        fi
        echo "  ${#regressions[@]} regression input(s) pass"
    fi

    (cd "$cwd" && "$bin" "${flags[@]}" -max_total_time="$seconds" -artifact_prefix="$work/" "$work/corpus" "${seeds[@]}") \
        > "$log" 2>&1
    status=$?
    # The last status line: "#N DONE cov: C ft: F corp: ..." and the final stats.
    runs=$(grep -oP 'stat::number_of_executed_units:\s*\K[0-9]+' "$log" | tail -1)
    rate=$(grep -oP 'stat::average_exec_per_sec:\s*\K[0-9]+' "$log" | tail -1)
    cov=$(grep -oP '^#[0-9]+\s+\S+\s+cov: \K[0-9]+ ft: [0-9]+' "$log" | tail -1)
    corpus=$(find "$work/corpus" -type f | wc -l)
    summary="${runs:-?} runs in ${seconds} s (${rate:-?}/s), cov ${cov:-?}, corpus ${corpus} inputs"
    if [ "$status" -eq 0 ]; then
        echo "  $summary"
        write_result "$t" pass "$summary" "$log"
    else
        crash=$(ls "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-* 2>/dev/null | head -1)
        grep -m1 -A2 -E 'FUZZ_CHECK failed|ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error' "$log"
        echo "  FAILED: ${crash:-no input saved} ($summary)"
        write_result "$t" fail "fuzz_$t crashed: ${crash:-see the log} (replay: $bin ${crash:-INPUT}; keep it in tests/fuzz/regressions/$t)" "$log"
        failed=$((failed + 1))
    fi
done
exit $((failed > 0))

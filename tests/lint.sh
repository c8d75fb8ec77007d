#!/bin/bash
# Checks the layout of every tracked C/C++ file against .clang-format and runs clang-tidy (.clang-tidy) on the
# translation units of lib/ and app/. Prints one summary line; exits 1 on any finding, 2 when it cannot run.
# Usage: tests/lint.sh [BUILD_DIR]  (a meson build directory, default build-lint, set up here without unity files
# and never compiled: clang-tidy reads its compile_commands.json). LINT_JOBS (default 2) clang-tidy processes run at
# once; LINT_TIDY=0 checks the layout only.
set -u
cd "$(dirname "$0")/.." || exit 2
build=${1:-build-lint}
jobs=${LINT_JOBS:-2}
started=$SECONDS
for tool in clang-format clang-tidy; do
    command -v "$tool" > /dev/null || { echo "lint: $tool not found"; exit 2; }
done

mapfile -t sources < <(git ls-files '*.cpp' '*.hpp' '*.c' '*.h')
misformatted=$(clang-format --dry-run -Werror "${sources[@]}" 2>&1 |
               sed -nE 's/^([^:]+):[0-9]+:[0-9]+: error: code should be clang-formatted.*/\1/p' | sort -u)
format_count=$(printf '%s' "$misformatted" | grep -c .)
[ "$format_count" -eq 0 ] || printf 'lint: not formatted (clang-format -i FILE): %s\n' $misformatted

tidy_count=0
tidy_summary="skipped"
if [ "${LINT_TIDY:-1}" != 0 ]; then
    # A unity build's compile commands name its generated unity files, not the sources: clang-tidy needs the latter.
    if [ ! -f "$build/compile_commands.json" ]; then
        meson setup "$build" -Dunity=off > /dev/null || { echo "lint: meson setup $build failed"; exit 2; }
    fi
    # Only the units this build compiles (an optional dependency may leave some out).
    mapfile -t units < <(git ls-files 'lib/*.cpp' 'app/*.cpp' | grep -F -f <(
        sed -nE 's/^ *"file": "(\.\.\/)?(.*)",?$/\2/p' "$build/compile_commands.json"))
    [ "${#units[@]}" -gt 0 ] || { echo "lint: $build compiles none of lib/ and app/ (a unity build?)"; exit 2; }
    out=$(mktemp -d)
    trap 'rm -rf "$out"' EXIT
    # The compile commands carry GCC-only warning flags that clang does not know.
    printf '%s\n' "${units[@]}" | xargs -P "$jobs" -I{} sh -c \
        'clang-tidy -p "$1" --quiet --extra-arg=-Wno-unknown-warning-option "$2" > "$3/$(echo "$2" | tr / _).log" 2>&1' \
        _ "$build" {} "$out"
    # A header's finding shows in every unit that includes it: count it once, with its path from the top.
    sed -E 's/\x1b\[[0-9;]*m//g' "$out"/*.log |
        grep -E '^[^ ]+:[0-9]+:[0-9]+: (warning|error): ' |
        sed -E "s#^(.*/)?\.\./##; s#^$PWD/##" | sort -u > "$out/findings"
    tidy_count=$(grep -c . "$out/findings")
    if [ "$tidy_count" -ne 0 ]; then
        cat "$out/findings"
        tidy_summary="$tidy_count finding(s): $(grep -oE '\[[A-Za-z0-9.,-]+\]$' "$out/findings" | sort | uniq -c |
            sort -rn | awk '{printf "%s%s %s", sep, $2, $1; sep=", "}')"
    else
        tidy_summary="clean"
    fi
    tidy_summary="$tidy_summary (${#units[@]} units)"
fi

echo "lint: clang-format: $format_count file(s) to reformat (of ${#sources[@]}); clang-tidy: $tidy_summary;" \
     "$((SECONDS - started)) s"
[ "$format_count" -eq 0 ] && [ "$tidy_count" -eq 0 ]

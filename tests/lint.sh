#!/bin/bash
# Checks the layout of every tracked C/C++ file against .clang-format and runs clang-tidy (.clang-tidy) on the
# sources of lib/ and app/. Prints one summary line; exits 1 on any finding, 2 when it cannot run.
# Usage: tests/lint.sh [BUILD_DIR]  (a meson build directory, default build-lint, set up here with unity files and
# never compiled: clang-tidy reads its compile_commands.json). LINT_JOBS (default 2) clang-tidy processes run at
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
    # clang-tidy reads the unity files of a unity build, each a handful of sources: the checks walk the DPDK, STL and
    # yaml-cpp headers' AST once per unit, and that walk, not sluice's own code, is most of the time (over half of
    # it saved this way). The sources are then "headers" of their unit, so HeaderFilterRegex names .cpp files too.
    if [ ! -f "$build/compile_commands.json" ]; then
        meson setup "$build" -Dunity=on > /dev/null || { echo "lint: meson setup $build failed"; exit 2; }
    elif ! grep -q -- '-unity[0-9]*\.cpp"' "$build/compile_commands.json"; then
        meson configure "$build" -Dunity=on > /dev/null && ninja -C "$build" build.ninja > /dev/null ||
            { echo "lint: could not turn unity files on in $build"; exit 2; }
    fi
    # The units that compile lib/ and app/ (an optional dependency may leave some out), and the sources they carry.
    mapfile -t units < <(sed -nE 's/^ *"file": "(.*)",?$/\1/p' "$build/compile_commands.json" |
                         grep -E '^(\.\./)?(lib|app)/' | sort -u)
    [ "${#units[@]}" -gt 0 ] || { echo "lint: $build compiles none of lib/ and app/"; exit 2; }
    carried=$(cd "$build" && cat "${units[@]}" | grep -cE '^#include *[<"].*/(lib|app)/[^>"]*\.cpp[>"]$')
    sources_checked=$((carried + $(printf '%s\n' "${units[@]}" | grep -vcE -- '-unity[0-9]+\.cpp$')))
    out=$(mktemp -d)
    trap 'rm -rf "$out"' EXIT
    # The compile commands carry GCC-only warning flags that clang does not know.
    printf '%s\n' "${units[@]}" | xargs -P "$jobs" -I{} sh -c \
        'cd "$1" && clang-tidy -p . --config-file="$4" --quiet --extra-arg=-Wno-unknown-warning-option "$2" \
            > "$3/$(echo "$2" | tr / _).log" 2>&1' _ "$build" {} "$out" "$PWD/.clang-tidy"
    # A header's finding shows in every unit that includes it: count it once, with its path from the top.
    sed -E 's/\x1b\[[0-9;]*m//g' "$out"/*.log |
        grep -E '^[^ ]+:[0-9]+:[0-9]+: (warning|error): ' |
        sed -E "s#^(.*/)?\.\./##; s#^$PWD/##" |
        grep -vE '^[^ ]*-unity[0-9]+\.cpp:[0-9]+:[0-9]+: warning: suspicious #include of' | sort -u > "$out/findings"
    tidy_count=$(grep -c . "$out/findings")
    if [ "$tidy_count" -ne 0 ]; then
        cat "$out/findings"
        tidy_summary="$tidy_count finding(s): $(grep -oE '\[[A-Za-z0-9.,-]+\]$' "$out/findings" | sort | uniq -c |
            sort -rn | awk '{printf "%s%s %s", sep, $2, $1; sep=", "}')"
    else
        tidy_summary="clean"
    fi
    tidy_summary="$tidy_summary (${sources_checked} sources in ${#units[@]} units)"
fi

echo "lint: clang-format: $format_count file(s) to reformat (of ${#sources[@]}); clang-tidy: $tidy_summary;" \
     "$((SECONDS - started)) s"
[ "$format_count" -eq 0 ] && [ "$tidy_count" -eq 0 ]

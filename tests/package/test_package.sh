#!/usr/bin/env bash
# The Debian package as an operator meets it. Builds it with dpkg-buildpackage in a copy of the tree, runs lintian,
# installs it with apt on this machine, checks the installed files, the units (systemd-analyze verify), the example
# config (sluice --check-config), that the units are enabled and nothing was started, what the postinst does on an
# upgrade while sluice runs (against a stand-in systemctl: restart only when the new binary accepts the running
# config), that an operator's edited conffile survives an upgrade to a newer version whose conffile changed (that
# version's .deb rebuilt from the same built tree), then removes and purges the package and checks what is left.
# Restores the machine: the packages apt added are purged again and an /etc/sluice present before is put back.
# Usage (as root): tests/package/test_package.sh   prints ok:/FAIL: per check, the seconds of each step, exits 1 on a
# failure and 2 when it cannot run. SLUICE_PACKAGE_KEEP=1 keeps the work directory (the .debs, the build log).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
failures=0
started=$SECONDS
timings=()

say() { printf 'package: %s\n' "$*"; }
check() {  # check DESCRIPTION COMMAND...: one check, its outcome printed
    local what=$1; shift
    if "$@" > "$work/check.out" 2>&1; then
        echo "ok: $what"
    else
        echo "FAIL: $what"; sed 's/^/    /' "$work/check.out" | tail -n 20; failures=$((failures + 1))
    fi
}
children_cpu() {  # cpu_seconds=user + system seconds of this shell's finished children (`times`, in this shell)
    times > "$work/times"
    cpu_seconds=$(awk 'NR == 2 { gsub(/s/, ""); split($1, u, "m"); split($2, k, "m");
                                 print int(u[1] * 60 + u[2] + k[1] * 60 + k[2]) }' "$work/times")
}
timed() {  # timed NAME COMMAND...: run, record the seconds it took and the CPU seconds it used (load-independent)
    local name=$1 t0=$SECONDS cpu0 rc; shift
    children_cpu; cpu0=$cpu_seconds
    "$@"; rc=$?
    children_cpu
    timings+=("$name $((SECONDS - t0)) s ($((cpu_seconds - cpu0)) s CPU)")
    return $rc
}
status_of() { dpkg-query -W -f='${Status}' sluice 2>/dev/null; }
known_to_dpkg() { local status; status=$(status_of); [ -n "$status" ] && [ "$status" != "unknown ok not-installed" ]; }
installed_packages() { dpkg-query -W -f='${db:Status-Abbrev} ${Package}\n' | awk '$1 ~ /^ii/ {print $2}' | sort; }

[ "$(id -u)" -eq 0 ] || { say "must run as root (apt-get install)"; exit 2; }
for tool in dpkg-buildpackage dh lintian scdoc systemd-analyze git; do
    command -v "$tool" > /dev/null || { say "$tool not found: run deploy/install-deps.sh"; exit 2; }
done
if known_to_dpkg; then
    say "a sluice package is on this machine already ($(status_of)): not replacing it"; exit 2
fi

work=$(mktemp -d /tmp/sluice-package.XXXXXX)
added_packages=()
cleanup() {
    if known_to_dpkg; then
        DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq sluice > /dev/null 2>&1 || dpkg --purge sluice
    fi
    if ((${#added_packages[@]})); then
        say "purging what the install added: ${added_packages[*]}"
        DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq "${added_packages[@]}" > /dev/null 2>&1
    fi
    if [ -d "$work/etc-sluice-before" ]; then rm -rf /etc/sluice && mv "$work/etc-sluice-before" /etc/sluice; fi
    if [ "${SLUICE_PACKAGE_KEEP:-0}" = 1 ]; then say "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
# An /etc/sluice of someone's (a `meson install` into /) would be taken for the operator's files: set aside.
if [ -e /etc/sluice ]; then mv /etc/sluice "$work/etc-sluice-before"; say "set /etc/sluice aside until the end"; fi

# --- build -----------------------------------------------------------------------------------------------------
src=$work/sluice
mkdir -p "$src"
(cd "$root" && git ls-files -z --cached --others --exclude-standard |
    tar -c --null --ignore-failed-read -T - 2> /dev/null) | tar -x -C "$src"
# nocheck: no tests in the package build (debian/rules: -Dtests=false); noautodbgsym: no -dbgsym .deb to compress;
# noopt: -O0, a quicker build; what is tested here is the packaging (the release build's binary is what
# the other suites test).
export DEB_BUILD_OPTIONS="nocheck noopt parallel=$(nproc) noautodbgsym"
build_deb() { (cd "$src" && dpkg-buildpackage -b -us -uc "$@") >> "$work/build.log" 2>&1; }
if ! timed build build_deb; then
    tail -n 40 "$work/build.log"; echo "FAIL: dpkg-buildpackage -b -us -uc"; exit 1
fi
version=$(cd "$src" && dpkg-parsechangelog -SVersion)
arch=$(dpkg-architecture -qDEB_HOST_ARCH)
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
deb=$work/sluice_${version}_${arch}.deb
project_version=$(meson introspect --projectinfo "$src/meson.build" |
                  python3 -c 'import json, sys; print(json.load(sys.stdin)["version"])')
check "the package's version is meson.build's ($project_version)" test "$version" = "$project_version"
check "lintian: no error or warning (overrides in debian/sluice.lintian-overrides)" \
    timed lintian lintian --fail-on error,warning --no-tag-display-limit "$deb"
depends=$(dpkg-deb -f "$deb" Depends)
check "Depends computed by dpkg-shlibdeps: DPDK, yaml-cpp, spdlog, libbpf ($depends)" \
    bash -c '[[ $1 == *"librte-eal23 (>= "* && $1 == *libyaml-cpp* && $1 == *libspdlog* && $1 == *libbpf1* ]]' _ \
    "$depends"
check "conffiles: /etc/sluice/sluice.yaml and hugepages.conf" bash -c \
    'dpkg-deb --ctrl-tarfile "$1" | tar -xO ./conffiles | sort | tr "\n" " " |
     grep -qx "/etc/sluice/hugepages.conf /etc/sluice/sluice.yaml "' _ "$deb"

# --- install ---------------------------------------------------------------------------------------------------
installed_packages > "$work/packages-before"
apt_install() { DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >> "$work/apt.log" 2>&1; }
if ! timed install apt_install "$deb"; then
    tail -n 30 "$work/apt.log"; echo "FAIL: apt-get install $deb"; exit 1
fi
mapfile -t added_packages < <(installed_packages | comm -13 "$work/packages-before" - | grep -vx sluice)
echo "ok: apt-get install ./$(basename "$deb") (added besides sluice: ${added_packages[*]:-nothing})"

for path in /usr/bin/sluice /usr/bin/sluicectl "/usr/lib/$multiarch/sluice/steer.bpf.o" \
            /lib/systemd/system/sluice.service /lib/systemd/system/sluice-hugepages.service \
            /etc/sluice/sluice.yaml /etc/sluice/hugepages.conf \
            /usr/share/sluice/prometheus/sluice-alerts.yml /usr/share/sluice/prometheus/prometheus.yml \
            /usr/share/sluice/grafana/sluice.json /usr/share/sluice/bird/bird.conf \
            /usr/share/man/man8/sluice.8.gz /usr/share/man/man8/sluicectl.8.gz /usr/share/man/man5/sluice.yaml.5.gz \
            /usr/share/doc/sluice/operations/install.md.gz /usr/share/doc/sluice/config.md.gz; do
    check "installed: $path" test -s "$path"
done
check "the unit runs the installed binary on /etc/sluice/sluice.yaml" grep -qxF \
    'ExecStart=/usr/bin/sluice --config ${SLUICE_CONFIG}' /lib/systemd/system/sluice.service
check "the unit's config is /etc/sluice/sluice.yaml" grep -qxF \
    'Environment=SLUICE_CONFIG=/etc/sluice/sluice.yaml' /lib/systemd/system/sluice.service
check "systemd-analyze verify: both units, no warning" bash -c \
    'out=$(systemd-analyze verify /lib/systemd/system/sluice.service /lib/systemd/system/sluice-hugepages.service 2>&1)
     rc=$?; echo "$out"; [ $rc -eq 0 ] && [ -z "$out" ]'
check "sluice --check-config /etc/sluice/sluice.yaml" /usr/bin/sluice --check-config /etc/sluice/sluice.yaml
check "sluice --version says $project_version" bash -c '[ "$(/usr/bin/sluice --version)" = "sluice $1" ]' _ \
    "$project_version"
check "sluicectl runs (its Python dependency is there)" /usr/bin/sluicectl --help
check "man sluice.yaml finds the installed page" \
    test "$(man -w sluice.yaml 2>&1)" = /usr/share/man/man5/sluice.yaml.5.gz
for unit in sluice.service sluice-hugepages.service; do
    check "enabled on install: $unit" test "$(readlink "/etc/systemd/system/multi-user.target.wants/$unit")" = \
        "/lib/systemd/system/$unit"
done
not_running_installed_sluice() {
    local exe
    for exe in /proc/[0-9]*/exe; do
        [ "$(readlink "$exe" 2> /dev/null)" != /usr/bin/sluice ] || { echo "running: $exe"; return 1; }
    done
}
check "not started on install: no /usr/bin/sluice process" not_running_installed_sluice
if [ -d /run/systemd/system ]; then
    check "not started on install: sluice.service inactive" bash -c '! systemctl is-active --quiet sluice.service'
else
    echo "note: systemd is not PID 1 here: the units' enablement is checked by their symlinks only"
fi

# --- the postinst on an upgrade, against a stand-in systemctl ----------------------------------------------------
# The stand-in says sluice.service is active (or not) with SLUICE_CONFIG=$STANDIN_CONFIG and logs every call.
# DPKG_ROOT points deb-systemd-invoke at an empty root, so that no policy-rc.d (a container's denies everything)
# stands between it and the stand-in.
mkdir -p "$work/standin" "$work/dpkg-root"
cat > "$work/standin/systemctl" <<'SH'
#!/bin/sh
echo "$*" >> "$STANDIN_LOG"
case "$*" in
    *is-active*) [ "$STANDIN_ACTIVE" = yes ] ;;
    *is-enabled*) echo enabled ;;
    *show*Environment*) echo "SLUICE_CONFIG=$STANDIN_CONFIG" ;;
esac
SH
chmod +x "$work/standin/systemctl"
postinst_upgrade() {  # postinst_upgrade ACTIVE CONFIG: the installed postinst as dpkg runs it for an upgrade
    : > "$work/standin.log"
    PATH="$work/standin:$PATH" DPKG_ROOT="$work/dpkg-root" STANDIN_LOG="$work/standin.log" STANDIN_ACTIVE=$1 \
        STANDIN_CONFIG=$2 /var/lib/dpkg/info/sluice.postinst configure 0.0.1 > "$work/postinst.out" 2>&1
    local rc=$?
    cat "$work/postinst.out"; sed 's/^/systemctl /' "$work/standin.log"
    return $rc
}
restarted_when_the_config_validates() {
    postinst_upgrade yes /etc/sluice/sluice.yaml &&
        grep -q 'restarting sluice.service' "$work/postinst.out" &&
        grep -qx -- '--system daemon-reload' "$work/standin.log" &&
        grep -q 'restart sluice.service' "$work/standin.log"
}
kept_running_when_the_config_fails() {
    cp /etc/sluice/sluice.yaml "$work/broken.yaml"
    echo "not_a_section: 1" >> "$work/broken.yaml"
    postinst_upgrade yes "$work/broken.yaml" &&
        grep -q 'NOT restarted' "$work/postinst.out" &&
        grep -q 'broken.yaml:[0-9]*:[0-9]*: .*not_a_section' "$work/postinst.out" &&
        ! grep -q restart "$work/standin.log"
}
left_alone_when_not_running() {
    postinst_upgrade no /etc/sluice/sluice.yaml && ! grep -q 'restart' "$work/standin.log"
}
check "upgrade while sluice runs, the new binary accepts its config: restarted (daemon-reload, restart)" \
    restarted_when_the_config_validates
check "upgrade while sluice runs, the new binary refuses its config: not restarted, and says why" \
    kept_running_when_the_config_fails
check "upgrade while sluice is stopped: nothing started" left_alone_when_not_running

# --- an edited conffile across an upgrade -------------------------------------------------------------------------
# The operator edits the config; the newer version ships a changed example. dpkg keeps the operator's file and puts
# the package's beside it (.dpkg-dist); --force-confold answers the question apt would ask on a terminal.
sed -i 's/^  level: info /  level: warn /' /etc/sluice/sluice.yaml
echo "# the operator's edit" >> /etc/sluice/sluice.yaml
cp /etc/sluice/sluice.yaml "$work/operator.yaml"
newer=$version+pkgtest1
{ printf 'sluice (%s) bookworm; urgency=medium\n\n  * A newer version for tests/package/test_package.sh.\n\n' "$newer"
  printf ' -- sluice test <test@localhost>  %s\n\n' "$(date -R)"; cat "$src/debian/changelog"; } > "$work/changelog"
mv "$work/changelog" "$src/debian/changelog"
echo "# changed in $newer" >> "$src/config/sluice.yaml"
# -nc: no clean, so dh finds the build done and only installs and packs again (the config's copy is rebuilt).
if ! timed rebuild build_deb -nc; then
    tail -n 40 "$work/build.log"; echo "FAIL: dpkg-buildpackage -b -nc for $newer"; exit 1
fi
check "upgrade to $newer with apt" timed upgrade apt_install -o Dpkg::Options::=--force-confdef \
    -o Dpkg::Options::=--force-confold "$work/sluice_${newer}_${arch}.deb"
check "dpkg says $newer is installed" test "$(dpkg-query -W -f='${Version}' sluice)" = "$newer"
check "the operator's /etc/sluice/sluice.yaml survived the upgrade" cmp /etc/sluice/sluice.yaml "$work/operator.yaml"
check "the newer example beside it as sluice.yaml.dpkg-dist" grep -qx "# changed in $newer" \
    /etc/sluice/sluice.yaml.dpkg-dist
check "the operator's config still validates" /usr/bin/sluice --check-config /etc/sluice/sluice.yaml

# --- remove, purge ------------------------------------------------------------------------------------------------
check "apt-get remove sluice" bash -c 'DEBIAN_FRONTEND=noninteractive apt-get remove -y -q sluice'
check "removed: no /usr/bin/sluice, no units" bash -c \
    '! [ -e /usr/bin/sluice ] && ! [ -e /lib/systemd/system/sluice.service ]'
check "removed: the config stays until purge" test -s /etc/sluice/sluice.yaml
check "apt-get purge sluice" bash -c 'DEBIAN_FRONTEND=noninteractive apt-get purge -y -q sluice'
forgotten_by_dpkg() { ! known_to_dpkg; }
check "purged: dpkg knows no sluice" forgotten_by_dpkg
check "purged: /etc/sluice is gone" test ! -e /etc/sluice
check "purged: the units' enablement is gone" bash -c \
    '! ls /etc/systemd/system/*/sluice*.service /var/lib/systemd/deb-systemd-helper-enabled/*sluice* 2> /dev/null |
     grep .'

say "steps: $(IFS=,; echo "${timings[*]}" | sed 's/,/, /g'); total $((SECONDS - started)) s"
say "$failures check(s) failed"
[ "$failures" -eq 0 ]

#!/usr/bin/env bash
# Installs every Debian package sluice's build, tests and lab need, reserves 2 MiB hugepages and mounts hugetlbfs.
# Idempotent: run it as often as you like. Hugepage count: SLUICE_HUGEPAGES (default 512 = 1 GiB).
#
#   deploy/install-deps.sh [--bench-extras]
#
# --bench-extras (or SLUICE_BENCH_EXTRAS=1) also installs the peers the benchmarks compare sluice with and that the
# product never needs: OVS-DPDK for tests/bench/peer_ovs.sh. The daemon the package would start is stopped and
# disabled again (peer_ovs.sh runs its own, with its own database and run directories).
set -euo pipefail

hugepages=${SLUICE_HUGEPAGES:-512}
bench_extras=${SLUICE_BENCH_EXTRAS:-0}
for arg in "$@"; do
  case "$arg" in
    --bench-extras) bench_extras=1 ;;
    *) echo "usage: $0 [--bench-extras]" >&2; exit 2 ;;
  esac
done
packages=(
  build-essential pkg-config meson ninja-build python3
  libdpdk-dev dpdk dpdk-dev
  libbpf-dev libxdp-dev xdp-tools clang llvm
  clang-format clang-tidy  # tests/lint.sh: the layout (.clang-format) and the linter (.clang-tidy)
  libclang-rt-14-dev  # libFuzzer and the sanitizer runtimes for clang (tests/fuzz); only recommended by clang, so not pulled in
  libyaml-cpp-dev libspdlog-dev libfmt-dev catch2 prometheus-cpp-dev libsystemd-dev libpcap-dev
  libssl-dev  # libcrypto: the sync channel's HMAC-SHA256 (lib/sync)
  python3-scapy python3-pytest python3-yaml systemd iproute2 iputils-ping ethtool tcpdump curl procps
  bird2  # BGP for the scale-out lab (deploy/lab/ecmp.sh) and the example in deploy/bird/
  keepalived  # VRRP for the active/standby pair of tests/e2e/test_failover.py (it runs its own, per namespace)
  nftables iperf3  # tests/bench/kernel_compare.sh: the kernel doing sluice's job, side by side
  prometheus  # promtool: tests/integration/test_deploy_files.py checks the alert rules and the dashboard's queries
  debhelper dh-python lintian scdoc  # the Debian package (debian/, dpkg-buildpackage) and its man pages (docs/man)
)
bench_packages=(
  openvswitch-switch-dpdk  # tests/bench/peer_ovs.sh: OVS-DPDK on the same DPDK 22.11, doing sluice's four jobs
)
if [[ $bench_extras == 1 ]]; then packages+=("${bench_packages[@]}"); fi

say() { printf 'install-deps: %s\n' "$*"; }

if [ "$(id -u)" -ne 0 ]; then
  say "must run as root (apt-get and hugepages)"; exit 1
fi

ovs_was_installed=0
dpkg-query -W -f='${Status}' openvswitch-switch 2>/dev/null | grep -q 'install ok installed' && ovs_was_installed=1
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  say "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # Only promtool is wanted: the server Debian's package enables and starts is stopped and disabled again, unless
  # it was here before this run (then it is someone's, and left alone).
  if [[ " ${missing[*]} " == *" prometheus "* ]]; then
    if [ -d /run/systemd/system ]; then
      systemctl disable --now prometheus.service >/dev/null 2>&1 || say "WARNING: could not stop the prometheus server the package started"
    else
      # sysvinit, or a container whose policy-rc.d kept it from starting (then stop refuses: nothing runs)
      update-rc.d prometheus disable >/dev/null 2>&1 || true
      invoke-rc.d prometheus stop >/dev/null 2>&1 || true
    fi
  fi
  # keepalived likewise: the tests run their own in namespaces; a system one would move addresses on this host.
  if [[ " ${missing[*]} " == *" keepalived "* ]]; then
    if [ -d /run/systemd/system ]; then
      systemctl disable --now keepalived.service >/dev/null 2>&1 || say "WARNING: could not stop the keepalived the package started"
    else
      update-rc.d keepalived disable >/dev/null 2>&1 || true
      invoke-rc.d keepalived stop >/dev/null 2>&1 || true
    fi
  fi
  # The same for Open vSwitch's daemon (openvswitch-switch, pulled in by -dpdk): a system OVS on a benchmark
  # machine would busy-poll a CPU once given DPDK ports.
  if [[ " ${missing[*]} " == *" openvswitch-switch-dpdk "* && $ovs_was_installed == 0 ]]; then
    if [ -d /run/systemd/system ]; then
      systemctl disable --now openvswitch-switch.service ovs-vswitchd.service ovsdb-server.service >/dev/null 2>&1 \
        || say "WARNING: could not stop the Open vSwitch daemons the package started"
    else
      update-rc.d openvswitch-switch disable >/dev/null 2>&1 || true
      invoke-rc.d openvswitch-switch stop >/dev/null 2>&1 || true
    fi
  fi
else
  say "all ${#packages[@]} packages already installed"
fi

nr=/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages
have=$(cat "$nr")
if [ "$have" -lt "$hugepages" ]; then
  echo "$hugepages" > "$nr"
  have=$(cat "$nr")
  say "reserved 2 MiB hugepages: $have (wanted $hugepages)"
  [ "$have" -ge "$hugepages" ] || say "WARNING: the kernel gave only $have hugepages; free memory or reboot"
else
  say "2 MiB hugepages already reserved: $have"
fi

if ! grep -qs ' /dev/hugepages hugetlbfs ' /proc/mounts; then
  mkdir -p /dev/hugepages
  mount -t hugetlbfs nodev /dev/hugepages
  say "mounted hugetlbfs on /dev/hugepages"
else
  say "hugetlbfs already mounted on /dev/hugepages"
fi

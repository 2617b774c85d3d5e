#!/usr/bin/env bash
# Installs everything dtrun's build, tests, benchmarks and demos need on a fresh Debian bookworm
# machine. Idempotent and apt only: packages already present are not fetched again.
# Usage: scripts/setup.sh [all (default) | build | core | test]
#   build: what every build, the format check and clang-tidy need; core: the same without
#   libtorch, which only the release tree's dtrun::ddp and DDP demos use (a sanitizer tree never
#   looks for it); test: the rest (the servers and tools the tests start). scripts/test.sh
#   installs `core`, then the rest while the ASan tree builds.
set -euo pipefail

build_packages=(
  build-essential cmake ninja-build pkg-config
  clang clang-format clang-tidy libclang-rt-dev  # libclang-rt: libFuzzer, for scripts/fuzz.sh
  lld  # the sanitizer trees link with it (CMakePresets.json): a fifth of ld.bfd's CPU there
  libssl-dev libboost-dev libspdlog-dev libfmt-dev libcli11-dev nlohmann-json3-dev catch2 libgloo-dev
  dpkg-dev file git  # the Debian package (cpack: dpkg-shlibdeps, file); the commit in --version
)
torch_packages=(libtorch-dev)  # most of a fresh machine's install time, with its dependencies
test_packages=(
  python3-torch
  iproute2 procps gnuplot-nox
  openmpi-bin  # tests/integration/mpirun_test.sh: mpirun starting dtrun per node
  elfutils gdb python3-jsonschema
  chromium-headless-shell  # tests/integration/report_html_test.sh opens dtrun report --html
  openssh-client openssh-server  # dtrun --hostfile, and its test's sshd in each namespace
  python3-build python3-venv python3-setuptools python3-wheel  # scripts/build_wheel.sh; tests/integration/wheel_test.sh
  etcd-server etcd-client  # --rdzv_backend=etcd: tests/integration/etcd_rdzv_test.sh starts a 3-member cluster
  groff-base man-db  # tests/integration/man_completion_test.sh renders and lints dtrun(1)
  prometheus curl  # tests/integration/live_status_test.sh: a real Prometheus scrapes --status_port
)
case ${1:-all} in
  all) packages=("${build_packages[@]}" "${torch_packages[@]}" "${test_packages[@]}") ;;
  build) packages=("${build_packages[@]}" "${torch_packages[@]}") ;;
  core) packages=("${build_packages[@]}") ;;
  test) packages=("${test_packages[@]}") ;;
  *) echo "setup: unknown set '$1' (expected all, build, core or test)" >&2; exit 2 ;;
esac

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "setup: all ${#packages[@]} packages already installed"
  exit 0
fi

sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "setup: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo_cmd=(sudo)
fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
# Debian's packages (openssh-server, ...) start their daemons on install unless a policy-rc.d
# says 101: one is added for the install when the machine has none, so nothing starts.
made_policy=0
if [[ ! -e /usr/sbin/policy-rc.d ]]; then
  printf '#!/bin/sh\nexit 101\n' | "${sudo_cmd[@]}" tee /usr/sbin/policy-rc.d >/dev/null
  "${sudo_cmd[@]}" chmod 755 /usr/sbin/policy-rc.d
  made_policy=1
fi
rc=0
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" || rc=$?
((made_policy == 0)) || "${sudo_cmd[@]}" rm -f /usr/sbin/policy-rc.d
exit "$rc"

#!/usr/bin/env bash
# glbd bootstrap: installs everything glbd and its lab need on a Debian machine, then runs a job.
#
#   ./bootstrap.sh demo    install, then run the lab demo on built-in defaults (the main job)
#   ./bootstrap.sh test    install, then run the whole test suite
#   ./bootstrap.sh install install only
#
# Must run as root (network namespaces, nexthop objects, FRR). Idempotent: steps that are already
# done are skipped, so a second run starts the job within seconds.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$here"
job=${1:-}
shift || true

die() { echo "bootstrap: $*" >&2; exit 1; }
step() { printf '\n== %s\n' "$*"; }

case "$job" in demo|test|install) ;; *) die "usage: $0 {demo|test|install} [args for the job]";; esac
[ "$(id -u)" = 0 ] || die "must run as root (network namespaces and the kernel FIB need it): sudo $0 $job"
[ -r /etc/debian_version ] || die "this script supports Debian (bookworm or newer) only"

export DEBIAN_FRONTEND=noninteractive
APT_PACKAGES=(iproute2 nftables debootstrap tcpdump iperf3 procps psmisc kmod
              python3 python3-venv python3-dev gcc systemd ca-certificates
              build-essential dpkg-dev debhelper dh-virtualenv groff-base
              clang libbpf-dev bpftool)
# Services the tests run themselves, never as host services: their start is blocked while
# they install (FRR 8.4 for the legacy interop test; Prometheus: promtool checks the alert
# rules and a test scrapes a lab glbd).
SERVICE_PACKAGES=(frr prometheus)

updated=0
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  step "apt: installing ${missing[*]}"
  apt-get update -q; updated=1
  apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

svc_missing=()
for p in "${SERVICE_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || svc_missing+=("$p")
done
if [ ${#svc_missing[@]} -gt 0 ]; then
  step "apt: installing ${svc_missing[*]} (services not started)"
  [ $updated = 1 ] || apt-get update -q
  prc=/usr/sbin/policy-rc.d; had_prc=0; [ -e $prc ] && had_prc=1
  [ $had_prc = 1 ] || { printf '#!/bin/sh\nexit 101\n' > $prc; chmod +x $prc; }
  apt-get install -y -q --no-install-recommends "${svc_missing[@]}" || { [ $had_prc = 1 ] || rm -f $prc; die "apt-get install ${svc_missing[*]} failed"; }
  [ $had_prc = 1 ] || rm -f $prc
fi

# name glbd's route/nexthop protocol number for iproute2 ("proto glbd" instead of "proto 200")
if [ -d /etc/iproute2 ] && [ ! -e /etc/iproute2/rt_protos.d/glbd.conf ]; then
  mkdir -p /etc/iproute2/rt_protos.d
  printf '200\tglbd\n' > /etc/iproute2/rt_protos.d/glbd.conf
fi

PY=${GLBD_PYTHON:-}
if [ -z "$PY" ]; then
  for c in python3.13 python3.12 python3.11 python3; do
    if command -v "$c" >/dev/null && "$c" -c 'import sys, venv; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
      PY=$(command -v "$c"); break
    fi
  done
fi
[ -n "$PY" ] || die "no Python >= 3.11 with venv found (install python3 and python3-venv)"

if [ ! -x .venv/bin/python ] || [ pyproject.toml -nt .venv/.installed ] || [ lab/pyproject.toml -nt .venv/.installed ]; then
  step "venv: .venv with glbd, its lab and its test tools ($PY)"
  [ -x .venv/bin/python ] || "$PY" -m venv .venv
  .venv/bin/pip install -q --upgrade pip >/dev/null
  .venv/bin/pip install -q -e '.[test,bench]' -e ./lab
  touch .venv/.installed
fi

# glbd's tc BPF programs (flowlet switching, foreign-load counting), each compiled from its
# .bpf.c next to its source by the one build script
for src in glbd/flowlet/bpf/flowlet.bpf.c glbd/quality/bpf/foreign.bpf.c; do
  obj=${src%.c}.o
  if [ ! -e "$obj" ] || [ "$src" -nt "$obj" ]; then
    step "bpf: $obj (clang -target bpf)"
    glbd/flowlet/bpf/build.sh "$src"
  fi
done

step "lab: FRR 10.x chroot (Debian sid, cached)"
.venv/bin/glbd-lab provision

case "$job" in
  install)
    step "installed: .venv/bin/glbd, .venv/bin/glbctl, .venv/bin/glbd-lab";;
  demo)
    step "lab demo"
    exec .venv/bin/glbd-lab demo "$@";;
  test)
    step "test suite"
    set +e
    # a skip here means something this script should have installed: it fails (tests/conftest.py)
    GLBD_NO_SKIP=${GLBD_NO_SKIP:-1} .venv/bin/python -m pytest "$@"
    rc=$?
    set -e
    if [ $rc = 5 ]; then echo "bootstrap: pytest collected no tests: that is a failure" >&2; exit 1; fi
    exit $rc;;
esac

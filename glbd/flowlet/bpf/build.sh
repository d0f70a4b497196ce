#!/bin/sh
# Compile one of glbd's tc BPF programs: SRC.bpf.c -> SRC.bpf.o (next to it, or OUT).
#
#   glbd/flowlet/bpf/build.sh [OUT]             glbd/flowlet/bpf/flowlet.bpf.c
#   glbd/flowlet/bpf/build.sh SRC.bpf.c [OUT]   any other, e.g. glbd/quality/bpf/foreign.bpf.c
#
# Needs clang (the bpf target) and libbpf-dev (bpf_helpers.h); bootstrap.sh and the Debian
# package build run it. -g keeps BTF, which bpftool and the kernel use to show the maps' types.
# BPF_DEFINES (e.g. "-DRATE_BPS=10000000") sets a program's compile-time constants.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
case ${1:-} in
  *.bpf.c) src=$1; shift;;
  *) src=$here/flowlet.bpf.c;;
esac
out=${1:-${src%.c}.o}
command -v clang >/dev/null || { echo "build.sh: clang is missing: apt-get install clang" >&2; exit 1; }
[ -r /usr/include/bpf/bpf_helpers.h ] || { echo "build.sh: bpf_helpers.h is missing: apt-get install libbpf-dev" >&2; exit 1; }
[ -r "$src" ] || { echo "build.sh: $src: no such source" >&2; exit 1; }
# linux/types.h needs asm/types.h from the multiarch include directory
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -dumpmachine)
# shellcheck disable=SC2086 # BPF_DEFINES is a list of words
clang -O2 -g -Wall -Werror -target bpf -I"/usr/include/$multiarch" ${BPF_DEFINES:-} \
  -c "$src" -o "$out.tmp"
mv "$out.tmp" "$out"

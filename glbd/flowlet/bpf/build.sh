#!/bin/sh
# Compile glbd's tc BPF program: glbd/flowlet/bpf/flowlet.bpf.c -> flowlet.bpf.o (next to it, or OUT).
#
#   glbd/flowlet/bpf/build.sh [OUT]
#
# Needs clang (the bpf target) and libbpf-dev (bpf_helpers.h); bootstrap.sh and the Debian
# package build run it. -g keeps BTF, which bpftool and the kernel use to show the maps' types.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/flowlet.bpf.o}
command -v clang >/dev/null || { echo "build.sh: clang is missing: apt-get install clang" >&2; exit 1; }
[ -r /usr/include/bpf/bpf_helpers.h ] || { echo "build.sh: bpf_helpers.h is missing: apt-get install libbpf-dev" >&2; exit 1; }
# linux/types.h needs asm/types.h from the multiarch include directory
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -dumpmachine)
clang -O2 -g -Wall -Werror -target bpf -I"/usr/include/$multiarch" \
  -c "$here/flowlet.bpf.c" -o "$out.tmp"
mv "$out.tmp" "$out"

#!/bin/sh
# Run perf_analyzer (tritonclient 2.41.0's binary, in .venv-perf) with the libraries it loads on a machine without CUDA:
# libcudart.so.12 from the venv's nvidia-cuda-runtime-cu12 wheel, libb64.so.0d from Debian's libb64-0d (make sys-libs).
# Usage: tests/servers/perf_analyzer.sh [perf_analyzer arguments...]     (PERF_VENV=DIR picks another venv)
# Exit 2 when the venv or a library is missing; otherwise perf_analyzer's own exit status.
set -eu

root=$(CDPATH='' cd -- "$(dirname -- "$0")/../.." && pwd)
venv=${PERF_VENV:-$root/.venv-perf}
binary=$venv/bin/perf_analyzer
if [ ! -x "$binary" ]; then
	echo "perf_analyzer.sh: $binary not found: make .venv-perf/.done builds it (make bench does)" >&2
	exit 2
fi

cudart=""
for dir in "$venv"/lib/python3*/site-packages/nvidia/cuda_runtime/lib; do
	if [ -e "$dir/libcudart.so.12" ]; then
		cudart=$dir
		break
	fi
done
if [ -z "$cudart" ]; then
	echo "perf_analyzer.sh: libcudart.so.12 not found under $venv: pip install nvidia-cuda-runtime-cu12 there" >&2
	exit 2
fi

# libb64 is a system library: say how to get it rather than let the loader fail (only when ldconfig can tell).
if libs=$( (ldconfig -p || /sbin/ldconfig -p) 2>/dev/null) && [ -n "$libs" ]; then
	case $libs in
	*libb64.so.0d*) ;;
	*)
		echo "perf_analyzer.sh: libb64.so.0d not installed: apt-get install libb64-0d (make sys-libs, as root)" >&2
		exit 2
		;;
	esac
fi

LD_LIBRARY_PATH=$cudart${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export LD_LIBRARY_PATH
exec "$binary" "$@"

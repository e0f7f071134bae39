#!/usr/bin/env bash
# make test-arm64: the board side on aarch64, under QEMU user-mode emulation (not part of `make test`; needs root).
#
# Builds (once, then reuses) a Debian bookworm arm64 root with debootstrap in .arm64/root, installs the project there
# from PyPI's aarch64 wheels (numpy, psutil, onnxruntime, openvino, ai-edge-litert), then runs, as a board would:
# `edge-runtime info`, `run` on every reference model with every backend that reads it, `bench`, `thermal`,
# `tune show`, the busybox tuning scripts, and the core tests; then, as a board with no network, installs the aarch64
# wheelhouse (make wheelhouse) with pip --no-index and runs `info` and `run` from it. Timings under emulation mean nothing: this lane checks
# behaviour. Facts it relies on (measured here): qemu 7.2 shows the host's /proc/cpuinfo, so an ARM one (a two-core
# Cortex-A72) is bind-mounted over it; pip in the root needs the host's CA bundle; numerical results follow the
# emulated CPU, so QEMU_CPU=cortex-a72 (the default `max` CPU has instructions the wheels take other paths for).
#
# Environment: ARM64_DIR (default .arm64), DEBIAN_MIRROR (default http://deb.debian.org/debian),
# ARM64_TESTS (the pytest arguments; default: the core suite below).
set -euo pipefail

REPO=$(cd "$(dirname "$0")/../.." && pwd)
LANE=${ARM64_DIR:-$REPO/.arm64}
RFS=$LANE/root
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
CPUINFO=$REPO/tests/arm64/cpuinfo-cortex-a72
START=$(date +%s)

say() { printf '[arm64 %4ss] %s\n' "$(($(date +%s) - START))" "$*"; }
die() { printf 'make test-arm64: %s\n' "$*" >&2; exit 2; }

[ "$(id -u)" = 0 ] || die "needs root (debootstrap, chroot, mounts); run it as root"
for tool in debootstrap qemu-aarch64-static update-binfmts; do
    command -v "$tool" >/dev/null || die "$tool not found: apt-get install debootstrap qemu-user-static binfmt-support"
done

# --- binfmt: the kernel hands aarch64 binaries to qemu (F: the interpreter is opened now, so chroots need no copy).
if [ ! -e /proc/sys/fs/binfmt_misc/status ]; then
    mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc || die "cannot mount binfmt_misc"
fi
update-binfmts --enable qemu-aarch64 >/dev/null 2>&1 || true
grep -q '^enabled' /proc/sys/fs/binfmt_misc/qemu-aarch64 2>/dev/null || die "binfmt for qemu-aarch64 is not enabled"

# --- the root, once: a minimal Debian with Python, procps (ps), busybox (the tuning scripts' shell) and CA certificates.
if [ ! -f "$RFS/.debootstrap-done" ]; then
    say "debootstrap bookworm arm64 into $RFS (once; ~5 min)"
    rm -rf "$RFS"
    mkdir -p "$LANE"
    debootstrap --arch=arm64 --variant=minbase --include=python3,python3-venv,procps,busybox,ca-certificates \
        bookworm "$RFS" "$MIRROR" >"$LANE/debootstrap.log" 2>&1 || die "debootstrap failed: see $LANE/debootstrap.log"
    touch "$RFS/.debootstrap-done"
fi

# --- mounts, undone on every exit (in reverse order).
MOUNTED=()
cleanup() {
    local i
    for ((i = ${#MOUNTED[@]} - 1; i >= 0; i--)); do
        umount -l "${MOUNTED[i]}" 2>/dev/null || true
    done
}
trap cleanup EXIT
bind() {  # bind SRC DEST
    mount --bind "$1" "$2"
    MOUNTED+=("$2")
}
mount -t proc proc "$RFS/proc" && MOUNTED+=("$RFS/proc")
bind /sys "$RFS/sys"
bind /dev "$RFS/dev"
bind "$CPUINFO" "$RFS/proc/cpuinfo"  # qemu-user shows the host's: an x86 cpuinfo is what crashed ONNX Runtime's import
cp /etc/ssl/certs/ca-certificates.crt "$RFS/etc/ssl/certs/host-ca.crt"
cp /etc/resolv.conf "$RFS/etc/resolv.conf" 2>/dev/null || true

# --- the project: the tracked files, copied afresh (the root never sees untracked or ignored files).
say "copying the checkout's tracked files to /src"
rm -rf "$RFS/src"
mkdir -p "$RFS/src"
(cd "$REPO" && git ls-files -z | tar --null -T - -cf -) | tar -C "$RFS/src" -xf -

in_root() {
    chroot "$RFS" /usr/bin/env -i HOME=/root PATH=/opt/venv/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
        QEMU_CPU=cortex-a72 PIP_CERT=/etc/ssl/certs/host-ca.crt PIP_DISABLE_PIP_VERSION_CHECK=1 \
        PIP_DEFAULT_TIMEOUT=180 "$@"
}

# --- the environment, reused while pyproject.toml and constraints.txt stay the same.
stamp=$(cat "$REPO/pyproject.toml" "$REPO/constraints.txt" | sha256sum | cut -c1-16)
if [ ! -f "$RFS/opt/venv/.done-$stamp" ]; then
    say "installing the project with its backends from PyPI's aarch64 wheels (once per pyproject/constraints; ~5 min)"
    rm -rf "$RFS/opt/venv"
    in_root python3 -m venv /opt/venv
    # The board side only: onnxruntime, openvino, tflite (ai-edge-litert), the agent; pytest and onnx for the tests.
    # Not [all]: its host extras are not for a board, and hdrhistogram has no aarch64 wheel (it needs a compiler).
    in_root pip install -q -c /src/constraints.txt -e '/src[onnxruntime,openvino,tflite,agent]' pytest onnx \
        || die "pip install in the arm64 root failed"
    touch "$RFS/opt/venv/.done-$stamp"
fi

FAILED=0
run_check() {  # run_check RUNNER DIR WHAT CMD...: CMD in DIR through RUNNER (in_root, offline), count a failure, go on
    local runner=$1 dir=$2 what=$3
    shift 3
    if "$runner" /bin/sh -c "cd $dir && $*" >"$LANE/last.log" 2>&1; then
        say "ok    $what"
    else
        say "FAIL  $what"
        sed 's/^/        /' "$LANE/last.log" | tail -20
        FAILED=$((FAILED + 1))
    fi
}
check() { run_check in_root /src "$@"; }  # check WHAT CMD...: in the root, from the copied checkout

say "machine in the root: $(in_root uname -m), python $(in_root python3 -c 'import platform; print(platform.python_version())')"
check "edge-runtime info (every backend usable, the Cortex-A72 named)" \
    "edge-runtime info --json - > /tmp/info.json && python3 -c \"import json; d = json.load(open('/tmp/info.json')); \
b = d['backends']; bad = [n for n, v in b.items() if not v['installed']]; assert not bad, b; print(d['cpu_model'])\""

# Every reference model with every backend that reads its format (the manifest says the formats).
readers() {
    case $1 in
        *.onnx) echo onnxruntime openvino ;;
        *.xml) echo openvino ;;
        *.tflite) echo tflite openvino ;;
    esac
}
for model in $(cd "$REPO" && git ls-files 'models/*.onnx' 'models/*.xml' 'models/*.tflite'); do
    for backend in $(readers "$model"); do
        check "run $model on $backend" "edge-runtime run $model --backend $backend > /dev/null"
    done
done
check "bench (pinned to CPU 1, 200 iterations, JSON)" \
    "edge-runtime bench models/resnet8/resnet8_int8.onnx --cpus 1 --iterations 200 --json - > /tmp/b.json \
&& python3 -c \"import json; d = json.load(open('/tmp/b.json')); assert d['latency_us']['count'] == 200; \
assert d['pinning']['all_threads_pinned'], d['pinning']\""
check "bench --stress cpu:0 (the co-runner seen on CPU 0 while CPU 1 measures)" \
    "edge-runtime bench models/digits_cnn/digits_cnn_int8.tflite --cpus 1 --duration 4 --stress cpu:0 --json - \
> /tmp/s.json && python3 -c \"import json; d = json.load(open('/tmp/s.json')); assert d['config']['stress'], d['config']\""
check "a bad model is one line on stderr, exit 2 (no MIDR_EL1 line from OpenVINO)" \
    "head -c 300 /dev/urandom > /tmp/bad.xml; edge-runtime run /tmp/bad.xml --backend openvino 2> /tmp/err; \
test \$? = 2 && test \$(wc -l < /tmp/err) = 1 && ! grep -q MIDR_EL1 /tmp/err"
check "thermal (no sensors under emulation: said, exit 0)" "edge-runtime thermal > /dev/null"
check "tune show --cpus 1 (exit 1: this root's CPU 1 is not isolated, and it says so)" \
    "edge-runtime tune show --cpus 1 > /tmp/tune.txt; test \$? -le 1 && grep -q 'tuning for CPU 1' /tmp/tune.txt"
check "the tuning scripts under busybox sh (dry run)" \
    "busybox sh system_tuning/isolate_cpus.sh --dry-run --cpus 1 > /dev/null"

# The co-runner tests too: they once waited a fixed second for a bench that takes ten to start under emulation.
TESTS=${ARM64_TESTS:-tests/system/test_cpulist.py tests/measure/test_stats.py tests/test_results.py tests/runtime/test_models.py \
tests/runtime/test_backend_crash.py tests/measure/test_interference.py tests/cli/test_cli_errors.py \
tests/measure/test_bench.py::test_stress_co_runner_runs_and_is_stopped tests/measure/test_bench.py::test_stress_is_stopped_when_the_run_fails \
tests/measure/test_bench.py::test_stress_is_stopped_on_ctrl_c_and_sigterm}
check "pytest (core)" "python3 -m pytest -q -p no:cacheprovider $TESTS > /tmp/pytest.log 2>&1; \
rc=\$?; tail -3 /tmp/pytest.log; exit \$rc"
in_root /bin/sh -c "tail -1 /tmp/pytest.log" 2>/dev/null | sed 's/^/        /' || true

# --- a board with no network: the aarch64 wheelhouse (make wheelhouse, built here on the host, which has the network)
# installed into a fresh venv by pip --no-index, inside a network namespace of its own (no interface up), then run.
say "building the aarch64 wheelhouse on the host (tools/wheelhouse.py)"
PYV=$(in_root python3 -c 'import sys; print("{}.{}".format(*sys.version_info[:2]))')
if "$REPO/.venv/bin/python" "$REPO/tools/wheelhouse.py" --platform aarch64 --python "$PYV" --out "$LANE/wheelhouse" \
    >"$LANE/wheelhouse.log" 2>&1; then
    rm -rf "$RFS/opt/wheelhouse" "$RFS/opt/board"
    cp -r "$LANE/wheelhouse" "$RFS/opt/wheelhouse"
    offline() {  # offline CMD...: in the root, with no network at all
        unshare --net chroot "$RFS" /usr/bin/env -i HOME=/root PATH=/opt/board/bin:/usr/sbin:/usr/bin:/sbin:/bin \
            LANG=C.UTF-8 QEMU_CPU=cortex-a72 PIP_DISABLE_PIP_VERSION_CHECK=1 "$@"
    }
    offline_check() { run_check offline /tmp "$@"; }  # offline_check WHAT CMD...: as a board with no network
    offline_check "no network in the board's namespace (a connection fails)" \
        "! python3 -c 'import socket; socket.create_connection((\"deb.debian.org\", 80), timeout=5)' 2>/dev/null"
    offline_check "pip install --no-index from the wheelhouse ($(find "$LANE/wheelhouse" -name '*.whl' | wc -l) wheels)" \
        "python3 -m venv /opt/board && /opt/board/bin/pip install -q --no-index --find-links /opt/wheelhouse \
'edge-runtime[onnxruntime,openvino,tflite,agent]'"
    offline_check "info from the wheel (every backend usable, the Cortex-A72 named, its files in the venv)" \
        "edge-runtime info --json - > i.json && python3 -c \"import json; d = json.load(open('i.json')); \
b = d['backends']; assert all(v['installed'] for v in b.values()), b; assert 'Cortex-A72' in d['cpu_model'], d\" \
&& edge-runtime tune files | grep -q '^/opt/board/'"
    for model in resnet8/resnet8_int8.onnx resnet8/resnet8_int8.xml resnet8/resnet8_int8.tflite; do
        offline_check "run $model from the wheel" "cp /src/models/${model%.*}.* /tmp/ && edge-runtime run /tmp/${model#*/} > /dev/null"
    done
else
    say "FAIL  the aarch64 wheelhouse did not build"
    sed 's/^/        /' "$LANE/wheelhouse.log" | tail -5
    FAILED=$((FAILED + 1))
fi

say "done: $FAILED failed"
[ "$FAILED" = 0 ]

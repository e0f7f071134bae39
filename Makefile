# make demo   set up, then load one reference model on every backend and compare; a pinned bench; a board's agent
#             driven by the host over a software serial cable
# make test   set up, then lint and run the tests (both TFLite flavours; perf_analyzer against edge-runtime serve)
# make bench  the project's own benchmarks (pytest-benchmark; not part of make test)
# make gpu-check  on a machine with an NVIDIA GPU: the GPU targets and NVML (tests/gpu; skips elsewhere)
# make models rebuild the reference models in their own environment (TensorFlow; ~1.5 GB)
# make wheelhouse  every wheel a board needs, for installing with no network (PLATFORM=aarch64 PYTHON=3.11 EXTRAS=...)
# make test-pythons  the suite on Python 3.10, 3.11 and 3.13 (the ones found; a missing one is said and skipped)
# make test-arm64  as root: the board side on aarch64 under QEMU user-mode (a Debian arm64 root; ~25 min, ~1.5 GB)
PYTHON ?= python3
# make wheelhouse PLATFORM=aarch64 PYTHON=3.11: a bare version names the board's Python, not this machine's interpreter.
ifneq ($(shell echo '$(PYTHON)' | grep -E '^3\.[0-9]+$$'),)
WHEEL_PYTHON := $(PYTHON)
override PYTHON := python3
endif
PLATFORM ?= $(shell uname -m)
EXTRAS ?= onnxruntime,openvino,tflite,agent
GLIBC ?= 2.35
VENV := .venv
TFLRT := .venv-tflite-runtime
BUILD := .venv-build
# Real KServe v2 servers and the perf_analyzer anchor, each in its own environment (PyTriton needs numpy 1); the tests
# start them through tests/serverkit.py and skip, saying which target builds them, when one is missing.
TRITON := .venv-triton
MLSERVER := .venv-mlserver
PERF := .venv-perf
# labgrid for the labgrid:// target: its own environment (its pyserial fork would replace the harness's pyserial); the
# target runs its labgrid-client, tests/labgridkit.py its coordinator and exporter (bench/targets/labgrid_client.py).
LABGRID := .venv-labgrid
# make gpu-check, on a machine with an NVIDIA GPU: onnxruntime-gpu instead of the CPU wheel
GPU := .venv-gpu
PIP_FLAGS := -q --disable-pip-version-check

.PHONY: demo test test-pythons wheelhouse lint bench models models-speedup test-arm64 clean sys-tools sys-libs gpu-check

$(VENV)/.done: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install $(PIP_FLAGS) -c constraints.txt -e '.[all,dev]'
	touch $@

$(TFLRT)/.done: tests/requirements-tflite-runtime.txt pyproject.toml
	$(PYTHON) -m venv $(TFLRT)
	$(TFLRT)/bin/pip install $(PIP_FLAGS) -r tests/requirements-tflite-runtime.txt
	$(TFLRT)/bin/pip install $(PIP_FLAGS) --no-deps -e .
	touch $@

$(TRITON)/.done: tests/servers/requirements-triton.txt
	$(PYTHON) -m venv $(TRITON)
	$(TRITON)/bin/pip install $(PIP_FLAGS) -r tests/servers/requirements-triton.txt
	touch $@

$(MLSERVER)/.done: tests/servers/requirements-mlserver.txt
	$(PYTHON) -m venv $(MLSERVER)
	$(MLSERVER)/bin/pip install $(PIP_FLAGS) -r tests/servers/requirements-mlserver.txt
	touch $@

$(PERF)/.done: tests/servers/requirements-perf.txt
	$(PYTHON) -m venv $(PERF)
	$(PERF)/bin/pip install $(PIP_FLAGS) -r tests/servers/requirements-perf.txt
	touch $@

$(LABGRID)/.done: tests/requirements-labgrid.txt
	$(PYTHON) -m venv $(LABGRID)
	$(LABGRID)/bin/pip install $(PIP_FLAGS) -r tests/requirements-labgrid.txt
	touch $@

$(GPU)/.done: tests/gpu/requirements-gpu.txt pyproject.toml
	$(PYTHON) -m venv $(GPU)
	$(GPU)/bin/pip install $(PIP_FLAGS) -r tests/gpu/requirements-gpu.txt
	$(GPU)/bin/pip install $(PIP_FLAGS) --no-deps -e .
	touch $@

$(BUILD)/.done: models/requirements-build.txt
	$(PYTHON) -m venv $(BUILD)
	$(BUILD)/bin/pip install $(PIP_FLAGS) -r models/requirements-build.txt
	touch $@

demo: $(VENV)/.done $(TRITON)/.done sys-tools
	$(VENV)/bin/edge-runtime info
	@echo
	$(VENV)/bin/python -m bench.demo
	@echo
	@echo "A pinned run on CPU 1 while stress loads CPU 0, with its histogram (cyclictest layout) and interference:"
	$(VENV)/bin/edge-runtime bench models/digits_cnn/digits_cnn_int8.tflite --cpus 1 --iterations 20000 \
		--stress cpu:0 --histogram 25
	@echo
	$(VENV)/bin/python -m bench.demo_link

lint: $(VENV)/.done sys-tools
	$(VENV)/bin/ruff check .
	@if command -v shellcheck >/dev/null; then \
		echo "shellcheck -x -s sh system_tuning/*.sh system_tuning/*.init tests/servers/*.sh; shellcheck tests/arm64/*.sh tests/pythons/*.sh"; \
		shellcheck -x -s sh system_tuning/*.sh system_tuning/*.init tests/servers/*.sh && shellcheck tests/arm64/*.sh tests/pythons/*.sh; \
	else echo "shellcheck not installed: scripts not linted (apt-get install shellcheck)"; fi

# Tools some tests drive (stress-ng, cyclictest, busybox and dash for the scripts, shellcheck, chromium to open the
# HTML report, curl for the README's serving quick start, ser2net: a serial server for the remote eembc targets and
# the labgrid exporter, PostgreSQL for the shared store's tests: tests/pgkit.py starts a throwaway cluster with
# Debian's initdb and pg_ctl, never Debian's own cluster): installed when running as root with apt, else those tests
# skip and say how to enable them.
SYS_TOOLS := stress-ng:stress-ng cyclictest:rt-tests busybox:busybox shellcheck:shellcheck dash:dash chromium:chromium \
	curl:curl ser2net:ser2net pg_ctlcluster:postgresql
sys-tools:
	@missing=""; for t in $(SYS_TOOLS); do command -v $${t%%:*} >/dev/null || missing="$$missing $${t#*:}"; done; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing$$missing"; \
		(apt-get install -y -qq$$missing >/dev/null 2>&1 || \
		 (apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq$$missing >/dev/null 2>&1)) || \
		echo "could not install$$missing: the tests that need them will skip"; \
	else echo "not root: tests that need$$missing will skip (sudo apt-get install$$missing to run them)"; fi

# Libraries the bench's tools load, installed like SYS_TOOLS (as root with apt): perf_analyzer (tritonclient 2.41.0's
# binary, run by tests/servers/perf_analyzer.sh) needs Debian's libb64. Checked by soname with ldconfig.
SYS_LIBS := libb64.so.0d:libb64-0d
sys-libs:
	@missing=""; libs=$$( (ldconfig -p || /sbin/ldconfig -p) 2>/dev/null); \
	for l in $(SYS_LIBS); do case "$$libs" in *"$${l%%:*}"*) ;; *) missing="$$missing $${l#*:}";; esac; done; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing$$missing"; \
		(apt-get install -y -qq$$missing >/dev/null 2>&1 || \
		 (apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq$$missing >/dev/null 2>&1)) || \
		echo "could not install$$missing: perf_analyzer will not start"; \
	else echo "not root: perf_analyzer needs$$missing (sudo apt-get install$$missing)"; fi

test: $(VENV)/.done $(TFLRT)/.done $(TRITON)/.done $(MLSERVER)/.done $(PERF)/.done $(LABGRID)/.done sys-tools sys-libs \
	lint
	$(VENV)/bin/pytest -q -p no:cacheprovider --durations=30 tests --ignore=tests/benchmarks
	EDGE_RUNTIME_TFLITE_IMPL=tflite-runtime $(TFLRT)/bin/pytest -q -p no:cacheprovider -m tflite_runtime \
		tests/runtime/test_tflite_runtime.py tests/runtime/test_ops_litert.py

# dist/wheelhouse-PLATFORM-pyVERSION/ and its .tar.gz (tools/wheelhouse.py; docs/board.md: deploying to a board).
wheelhouse: $(VENV)/.done
	$(VENV)/bin/python tools/wheelhouse.py --platform $(PLATFORM) --python $(or $(WHEEL_PYTHON),$$($(VENV)/bin/python \
		-c 'import sys; print("%d.%d" % sys.version_info[:2])')) --extras $(EXTRAS) --glibc $(GLIBC) --tar

# Each version in its own .venv-pyX.Y (make test's .venv where it is that version); the server venvs are shared.
PYTHONS ?= 3.10 3.11 3.13
test-pythons: $(VENV)/.done $(TFLRT)/.done $(TRITON)/.done $(MLSERVER)/.done sys-tools
	sh tests/pythons/run.sh $(PYTHONS)

bench: $(VENV)/.done $(TRITON)/.done $(PERF)/.done sys-libs
	$(VENV)/bin/pytest -q -p no:cacheprovider tests/benchmarks --benchmark-only \
		--benchmark-columns=min,median,mean,stddev,rounds --benchmark-sort=name

# On an NVIDIA machine: NVML, the local:?device=cuda target, the edge-versus-GPU report (kept in GPU_CHECK_OUT when set).
# Everywhere else every check skips, saying why.
# Without an NVIDIA driver the GPU environment (onnxruntime-gpu, gigabytes) is not built: the checks skip in .venv.
gpu-check: $(VENV)/.done
	@if (ldconfig -p 2>/dev/null || /sbin/ldconfig -p 2>/dev/null) | grep -q 'libnvidia-ml\.so\.1' || \
		[ -e /proc/driver/nvidia/version ]; then \
		$(MAKE) --no-print-directory $(GPU)/.done && $(GPU)/bin/pytest -q -p no:cacheprovider -rs -s tests/gpu; \
	else echo "gpu-check: no NVIDIA driver here (no libnvidia-ml.so.1): the checks run and skip, saying why"; \
		$(VENV)/bin/pytest -q -p no:cacheprovider -rs tests/gpu; fi

models: $(BUILD)/.done
	$(BUILD)/bin/python models/build.py

models-speedup: $(BUILD)/.done
	$(BUILD)/bin/python models/build.py --speedup

# Not part of make test: needs root (debootstrap, chroot, binfmt) and ~25 min; the root in .arm64/ is reused.
test-arm64: $(VENV)/.done
	@if [ "$$(id -u)" = 0 ]; then \
		missing=""; for t in debootstrap qemu-aarch64-static update-binfmts; do \
			command -v $$t >/dev/null || missing=1; done; \
		[ -z "$$missing" ] || (apt-get update -qq >/dev/null 2>&1 && \
			apt-get install -y -qq debootstrap qemu-user-static binfmt-support >/dev/null 2>&1); fi
	tests/arm64/lane.sh

clean:
	rm -rf $(VENV) .venv-py3.* $(TFLRT) $(BUILD) $(TRITON) $(MLSERVER) $(PERF) $(GPU) $(LABGRID) .pytest_cache .ruff_cache .benchmarks

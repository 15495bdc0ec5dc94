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

.PHONY: demo test test-pooler lint bench crd clean

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

test: $(STAMP) $(CHECKOV)
	$(PY) -m pytest $(PYTEST_ARGS)
	$(MAKE) test-pooler

# The PostgreSQL integration and chaos tests again, coordinators and handler processes through
# PgBouncer in transaction mode (tests/pooler.py; Debian's pgbouncer), the server restart of
# tests/chaos/test_outage.py included. test_pooler brings its own PgBouncer: first pass only.
POOLER_TESTS ?= tests/integration tests/chaos --ignore=tests/integration/test_pooler.py
test-pooler: $(STAMP)
	DBWORKER_TEST_POOLER=pgbouncer $(PY) -m pytest -k postgresql $(POOLER_TESTS)

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

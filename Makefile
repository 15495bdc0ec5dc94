# One entry point for humans and CI. `make demo` and `make test` set up their own
# environment (.venv) on a fresh machine that has only Python 3.11+.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
OPERATOR_PYPROJECT := $(wildcard operator/pyproject.toml)

.PHONY: demo test lint bench crd clean

$(STAMP): pyproject.toml $(OPERATOR_PYPROJECT)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	if [ -f operator/pyproject.toml ]; then $(PY) -m pip install --quiet -e ./operator; fi
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m examples.imagededup.demo

test: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

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

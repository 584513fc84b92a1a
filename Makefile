# mlb — every target sets itself up; `make test` and `make demo` work on a fresh clone.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
MLB := $(VENV)/bin/mlb
STAMP := $(VENV)/.installed-stamp
BENCH ?= all

.PHONY: install test lint format demo bench gpu-check clean docs figures

install: $(STAMP)

# Re-run only when the project's dependencies change; torch comes from the local wheel cache.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check torch==2.14.1 torchvision==0.29.1
	$(PY) -m pip install -q --disable-pip-version-check -e '.[test,lint]'
	touch $(STAMP)

test: install
	$(PY) -m pytest -q

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: install
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

demo: install
	$(MLB) run --force --ignore-env -o mlb-results/demo

bench: install
	$(PY) -m pip install -q --disable-pip-version-check -e '.[bench]'
	$(PY) bench/run.py --only $(BENCH)

gpu-check: install
	bash bench/gpu_check.sh

clean:
	rm -rf mlb-results .pytest_cache

# docs/figures/*.png: each report figure drawn from the demo-like results the tests use (seconds)
figures: install
	$(PY) scripts/make_figures.py

docs: install
	$(PY) scripts/update_docs.py

# Two commands set everything up on a fresh clone:
#   make demo   create .venv, install geomjax[dev], run the showcase
#   make test   same environment (created if missing), lint + format check, pytest
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
STAMP := $(VENV)/.geomjax-installed

.PHONY: demo test lint format bench bench-gpu clean docs

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/geomjax demo

test: $(STAMP) lint
	$(PY) -m pytest --durations=25

# the long tier (CI runs it after `make test`): the checks marked slow at full size, and those
# marked long (end-to-end runs, the notebooks, checks that compile for ~10 s or more)
.PHONY: test-full
test-full: $(STAMP)
	GEOMJAX_FULL=1 $(PY) -m pytest -m "slow or long"

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

bench: $(STAMP)
	$(VENV)/bin/geomjax bench all

# the scale suite at GPU-sized batches on whatever JAX backend is installed; for NVIDIA GPUs first:
#   $(PY) -m pip install -e '.[cuda]'
bench-gpu: $(STAMP)
	$(VENV)/bin/geomjax bench gpu

# the documentation site into site/ (strict: a broken link or reference fails); the notebook
# gallery reuses the copies executed by `make test` (build/notebooks/) and executes the others;
# then every page is opened in a headless Chromium (skipped when none is installed: Debian's
# `apt-get install -y chromium`) to check the console, the formulas and the images
docs: $(STAMP)
	$(PY) docs/_generate.py
	$(VENV)/bin/mkdocs build --strict
	$(PY) docs/_check_api.py site
	$(PY) docs/_check_browser.py site

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis demo_output benchmarks/results site build docs/gallery docs/results

# long-horizon soak (minutes; not part of `make test`): prints a table, JSON in benchmarks/results
.PHONY: soak
soak: $(STAMP)
	$(PY) benchmarks/soak.py

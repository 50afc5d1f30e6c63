# The two commands a new user runs (see README.md):
#   make demo   JupyterLab on notebooks/quickstart.ipynb, after a headless demo in the terminal
#   make test   every test: Python (pytest, real TensorFlow, kernels, JupyterLab in Chromium) and js/
# Both install what they need first: Debian packages, a virtualenv in .venv, TensorFlow.
# While working: make check (ruff and the fast tests, under 2 minutes); make soak (ten minutes of
# the live dashboard in a kernel); make coverage (the whole suite, with line coverage).

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install demo lab test check soak coverage docs bench lint

install: $(STAMP)

$(STAMP): pyproject.toml scripts/install-system.sh
	bash scripts/install-system.sh
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[tensorflow,test]"
	touch $(STAMP)

demo: install
	$(PY) -m leakwidget.demo
	$(MAKE) lab

lab: install
	$(VENV)/bin/jupyter lab notebooks/quickstart.ipynb --ServerApp.ip=127.0.0.1 \
		$$( [ "$$(id -u)" = 0 ] && echo --allow-root )

# Five tests at a time: much of the suite waits on kernels, workers, browsers and time-boxed
# watches (tests/conftest.py says how tests are grouped and ordered; docs/development.md has
# the runs that chose five).
PYTEST_PARALLEL := -n 5 --dist loadgroup
FAST := not (slow or kernel or browser or tf or soak)

test: install
	node --test js/tests/
	$(PY) -m pytest -ra --durations=40 $(PYTEST_PARALLEL)

check: install
	$(VENV)/bin/ruff check leakwidget tests bench
	node --test js/tests/
	LEAKWIDGET_FAST_ONLY=1 $(PY) -m pytest -q -n 2 -m "$(FAST)"

soak: install
	LEAKWIDGET_SOAK=1 $(PY) -m pytest -ra -m soak -s tests/test_live_kernel.py tests/test_calm.py

coverage: install
	$(PY) -m pytest -q $(PYTEST_PARALLEL) --cov=leakwidget --cov-report=term --cov-report=html:test-results/coverage

bench: install
	$(PY) -m pip install --quiet -e ".[bench]"
	$(PY) bench/bench_overhead.py
	$(PY) bench/bench_overhead.py --tf
	$(PY) bench/bench_detection.py
	$(PY) bench/bench_peers.py

# The documentation site (docs/, Sphinx + MyST + myst-nb): docs/_build/html/index.html.
# -n: every cross-reference must resolve; -W: any warning fails the build.
docs: install
	$(PY) -m sphinx -b html -n -W --keep-going docs docs/_build/html

lint: install
	$(VENV)/bin/ruff check leakwidget tests bench

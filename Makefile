# The two commands a new user runs (see README.md):
#   make demo   JupyterLab on notebooks/quickstart.ipynb, after a headless demo in the terminal
#   make test   every test: Python (pytest, real TensorFlow, kernels, JupyterLab in Chromium) and js/
# Both install what they need first: Debian packages, a virtualenv in .venv, TensorFlow.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install demo lab test test-python test-js bench lint docs

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

test: install
	node --test js/tests/
	$(PY) -m pytest -ra

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

# `make demo` and `make test` are all a newcomer needs: each builds .venv first.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: setup demo demo-run demo-gate test bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	# pip >= 25 writes console-script wrappers that do not import `re` (FINDINGS: start-up cost)
	$(PY) -m pip install -q --upgrade 'pip==25.3'
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

setup: $(STAMP)

demo: setup
	$(PY) examples/demo.py

test: setup
	$(PY) -m pytest -q

bench: setup
	$(PY) bench/run.py

clean:
	rm -rf $(VENV) .cache build src/*.egg-info

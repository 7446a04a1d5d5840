# `make demo` and `make test` do all set-up on a fresh machine.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.lbhash-installed
TORCH  := torch==2.13.0

.PHONY: install demo test bench clean

# Re-installs only when the package metadata or the constraints change.
$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check $(TORCH)
	$(PY) -m pip install -q --disable-pip-version-check -c constraints.txt -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(VENV)/bin/lbhash demo

test: install
	$(PY) -m pytest -q

bench: install
	$(PY) benchmarks/bench_evaluate.py

clean:
	rm -rf $(VENV) src/*.egg-info .pytest_cache

# `make demo` and `make test` do all set-up on a fresh machine.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.lbhash-installed
TORCH  := torch==2.13.0
# pytest caches each test module with its asserts rewritten (about 9 s of every worker's collection) only
# where bytecode may be written: PYTHONDONTWRITEBYTECODE, set on some machines, would turn that cache off
PYTEST := PYTHONDONTWRITEBYTECODE= $(PY) -m pytest

.PHONY: install docs demo test test-slow test-milvus test-browser test-serve-env bench bench-search bench-service clean

# Re-installs only when the package metadata or the constraints change.
$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check $(TORCH)
	$(PY) -m pip install -q --disable-pip-version-check -c constraints.txt -e '.[test,pretrained]'
	$(PY) -m lbhash.evaluate.report  # the metrics' numba kernels, compiled once into numba's cache
	$(PY) -m lbhash.index.precompile  # the searches' (about a minute, once; a first search then waits for none)
	$(PY) -m compileall -q src/lbhash  # bytecode read even where PYTHONDONTWRITEBYTECODE stops writing it
	$(PYTEST) --collect-only -q -p no:cacheprovider >/dev/null || true  # (a cache: the test run reports any error)
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(VENV)/bin/lbhash demo

# the documentation site into site/, strict: a broken link, anchor or API reference fails the build
DOCS_STAMP := $(VENV)/.lbhash-docs-installed
$(DOCS_STAMP): $(STAMP)
	$(PY) -m pip install -q --disable-pip-version-check -c constraints.txt -e '.[docs]'
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --clean

# the fast suite, in two worker processes of one thread each (a file's tests stay in one worker);
# the browser, slow and Milvus suites are below (CI runs them too)
test: install
	OMP_NUM_THREADS=1 $(PYTEST) -q -n 2 --dist loadfile -m "not slow and not milvus and not browser"

# the long suites (end-to-end trainings), and everything else once more
# the tests make test leaves out (end-to-end trainings, the whole README, several processes)
test-slow: install
	$(PYTEST) -q -m "slow and not milvus and not browser" --timeout 900 $(PYTEST_ARGS)

# a real Milvus store (the server inside the `milvus-lite` wheel; versions pinned in constraints.txt),
# started and stopped by the tests on 127.0.0.1; LBHASH_MILVUS_REQUIRED=1: a store that cannot be
# installed or started fails the run (CI runs it)
test-milvus: install
	$(PY) -m pip install -q --disable-pip-version-check -c constraints.txt -e '.[test,milvus]' milvus-lite
	LBHASH_MILVUS_REQUIRED=1 $(PYTEST) -q -rs -m milvus tests/index/test_milvus.py

# the search page in headless Chromium (Debian's chromium and chromium-driver: .ci/run installs them;
# without them the test skips, saying why); screenshots in test-artifacts/browser
test-browser: install
	$(PYTEST) -q -rs -m browser tests/service/test_page_browser.py tests/service/test_duplicates_browser.py

# an environment with only what `lbhash serve --encoder` needs (requirements-serve.txt; no torch), built
# afresh in $(SERVE_VENV); the full one trains, exports and indexes a digits run for it (docs/export.md);
# the test runs without conftest.py, so PYTHONPATH gives it the shared helpers of tests/
SERVE_VENV := .venv-serve
SERVE_FIXTURE := build/serve-env
test-serve-env: install
	rm -rf $(SERVE_VENV) $(SERVE_FIXTURE)
	$(PYTHON) -m venv $(SERVE_VENV)
	$(SERVE_VENV)/bin/python -m pip install -q --disable-pip-version-check -c constraints.txt -r requirements-serve.txt pytest pytest-timeout
	$(SERVE_VENV)/bin/python -m pip install -q --disable-pip-version-check --no-deps -e .
	$(PY) tests/serve_env_fixture.py $(SERVE_FIXTURE)
	PYTHONPATH=tests LBHASH_SERVE_ENV_FIXTURE=$(SERVE_FIXTURE) $(SERVE_VENV)/bin/python -m pytest -q -s --noconftest \
		-p no:cacheprovider -o addopts="" tests/service/test_serve_env.py

bench: install
	$(PY) benchmarks/bench_evaluate.py

bench-search: install
	$(PY) benchmarks/bench_search.py

bench-service: install
	$(PY) -m pip install -q --disable-pip-version-check -c constraints.txt -e '.[serve]'
	$(PY) benchmarks/bench_service.py

clean:
	rm -rf $(VENV) $(SERVE_VENV) build src/*.egg-info .pytest_cache

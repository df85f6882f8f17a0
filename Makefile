# Two entry points for a newcomer: `make run` and `make test`. CI runs `make check`.
# Both create .venv on first use and install bmoe-top (editable) with its test extras.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(abspath $(VENV)/bin)
STAMP := $(VENV)/.bmoe-installed
# The installed layout (bmoe_top.parsers = parsers/, ...) as a tree of links, for the type and layer checks,
# which read packages from disk rather than through the editable install's import hook.
VIEW := build/pkgview

# Test processes (pytest-xdist): one per core by default; JOBS=0 runs the tests in one process.
JOBS ?= auto
XDIST := -n $(JOBS) --dist loadfile

.PHONY: run test fuzz check lint types layers view bench llama-server clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/bmoe-top $(ARGS)

# llama-server is built (with progress) before the tests that drive it, once per machine; without
# cmake or a compiler those tests skip. Hypothesis runs its "gate" profile: the same examples every run.
test: $(STAMP)
	$(PY) tools/llama_server.py build --optional
	$(PY) -m pytest $(XDIST) $(PYTEST_ARGS)

# Hypothesis explores: random seeds and ten times the examples (tests/conftest.py); every case it
# finds becomes an @example of its test, with the fix.
fuzz: $(STAMP)
	$(PY) -m pytest $(XDIST) -m hypothesis --hypothesis-profile=fuzz --hypothesis-show-statistics $(PYTEST_ARGS)

check: lint types layers test

lint: $(STAMP)
	$(BIN)/ruff check .

view:
	rm -rf $(VIEW)
	mkdir -p $(VIEW)/bmoe_top
	for f in $(CURDIR)/bmoe_top/*.py; do ln -sfn $$f $(VIEW)/bmoe_top/; done
	ln -sfn $(CURDIR)/bmoe_top/data $(VIEW)/bmoe_top/data
	for d in parsers runtime tui; do ln -sfn $(CURDIR)/$$d $(VIEW)/bmoe_top/$$d; done

types: $(STAMP) view
	cd $(VIEW) && $(BIN)/mypy --config-file $(CURDIR)/pyproject.toml -p bmoe_top

layers: $(STAMP) view
	cd $(VIEW) && PYTHONPATH=. $(BIN)/lint-imports --config $(CURDIR)/pyproject.toml --no-cache

bench: $(STAMP)
	$(PY) -m pip install -q pyarrow
	for b in benchmarks/*.py; do $(PY) $$b || exit 1; done

# A stock llama-server built once from the llama.cpp that llama-cpp-python vendors (CPU only), into the
# user cache (~/.cache/bmoe-top/llama-server-VERSION/); a few minutes the first time, nothing after.
llama-server: $(STAMP)
	$(PY) tools/llama_server.py build

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis

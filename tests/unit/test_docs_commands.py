"""Every example command of the documentation runs, or names the tests that run it.

Blocks without a `doc-commands` note are run here on a simulated node of four
H100s (the fake pynvml of tests/fakes, at NVML's boundary): a workload command
as `--dry-run` (every option parsed and checked against the GPUs, nothing run
or changed), the others as written, against crafted results where they read
results. Blocks that need a GPU node, Slurm, Apptainer or a registry name the
tests that run their commands (tests/doc_commands.py says how)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import FAKES, ROOT
from doc_commands import NEEDS, all_blocks, launcher_args
from fakes import fake_gpu_state
from report_docs import crafted_set

NOT_WORKLOADS = {"list", "info", "power", "report", "check", "jobs", "site", "images", "data",
                 "selftest", "slurm-node", "slurm-aggregate", "results", "fleet", "plan"}
BLOCKS = all_blocks()
RUN_HERE = [(b.where, c) for b in BLOCKS if not b.needs for c in b.commands]


def test_the_docs_have_commands_both_kinds():
    # The scan itself could silently find nothing (a changed fence style): it must not.
    assert len(RUN_HERE) >= 30, RUN_HERE
    assert sum(1 for b in BLOCKS if b.needs) >= 8


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.needs], ids=lambda b: b.where)
def test_a_block_that_cannot_run_here_names_what_it_needs_and_tests_that_exist(block):
    assert block.needs <= NEEDS, f"{block.where}: needs {block.needs - NEEDS}; known: {sorted(NEEDS)}"
    assert block.tested_by, f"{block.where}: needs={','.join(block.needs)} but names no test (tested-by=...)"
    for test in block.tested_by:
        path, _, name = test.partition("::")
        assert (ROOT / path).is_file(), f"{block.where}: {path} does not exist"
        if name:
            source = (ROOT / path).read_text()
            assert re.search(rf"^def {re.escape(name)}\(", source, re.M), f"{block.where}: no test {test}"


@pytest.mark.parametrize("block", [b for b in BLOCKS if not b.needs], ids=lambda b: b.where)
def test_a_block_run_here_holds_only_launcher_commands(block):
    others = [c for c in block.commands if not c.startswith("hpcai-launch ")]
    assert not others, (f"{block.where}: {others} cannot be run by this test: mark the block "
                        "<!-- doc-commands: needs=...; tested-by=... -->")


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    """A 4 x H100 node with results to report on, in a scratch working folder."""
    base = tmp_path_factory.mktemp("docs-node")
    state = base / "fake-gpus.json"
    fake_gpu_state.write_state(state, fake_gpu_state.make_devices(4))
    crafted_set(base / "results")
    crafted_set(base / "other-centre" / "results")
    shutil.copytree(ROOT / "examples", base / "examples")  # the plan's mix and prices files
    env = dict(os.environ, HPCAI_FAKE_GPU_STATE=str(state), HPCAI_STATE_DIR=str(base / "state"),
               PYTHONPATH=os.pathsep.join([str(FAKES), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    env.pop("HPCAI_SITE", None)
    return base, env, state


def launch(base, env, args, timeout=300):
    return subprocess.run([sys.executable, "-m", "hpcai.launcher.cli", *args], cwd=base, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("where,command", RUN_HERE, ids=[f"{w}:{c[13:60]}" for w, c in RUN_HERE])
def test_a_documented_command_runs_on_a_simulated_gpu_node(node, where, command):
    base, env, state = node
    args = launcher_args(command)
    workload_run = args[0] not in NOT_WORKLOADS
    if workload_run and "--dry-run" not in args:
        # Before `--`: what follows it is `exec`'s command, not the launcher's options.
        args.insert(args.index("--") if "--" in args else len(args), "--dry-run")
    done = launch(base, env, args)
    assert done.returncode == 0, f"{where}: `{command}` exited {done.returncode}: {done.stderr[-1500:]}"
    if workload_run:
        assert "command" in done.stdout, done.stdout[-500:]
    # Nothing the docs show outside a real run changes a GPU or leaves a journal.
    limits = [d["current_limit_w"] for d in fake_gpu_state.read_state(state)["devices"]]
    assert limits == [700.0] * 4, f"{where}: `{command}` changed the limits: {limits}"
    assert not list((base / "state").glob("*journal*")), f"{where}: `{command}` left a journal"


def test_make_run_is_the_documented_default_run(tmp_path):
    """`make run` is `hpcai-launch resnet50` (README, Getting started), and on a machine
    without GPUs that picks the CPU-sized `short` preset the docs promise."""
    # Under `make test` this runs inside make: a sub-make would print its directory,
    # and `make test ARGS=...` would hand its ARGS down (command-line variables are exported).
    quiet = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")}
    made = subprocess.run(["make", "--no-print-directory", "-n", "run", "ARGS="], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env=quiet)
    assert made.returncode == 0, made.stderr
    assert made.stdout.strip().splitlines()[-1].strip() == ".venv/bin/hpcai-launch resnet50", made.stdout
    env = dict(os.environ, HPCAI_STATE_DIR=str(tmp_path / "state"),
               PYTHONPATH=os.pathsep.join([str(FAKES / "no_gpu"), os.environ.get("PYTHONPATH", "")]))
    done = launch(tmp_path, env, ["resnet50", "--dry-run", "--json"])
    assert done.returncode == 0, done.stderr[-1500:]
    assert re.search(r'"preset": "short"', done.stdout), done.stdout[:800]


def test_what_the_documented_commands_write_in_the_checkout_is_ignored_by_git():
    written = ["results/20260101T000000-node-resnet50-short/result.json", "report/report.html",
               "hpcai-selftest-node1.json", "build/docs-site/index.html"]
    done = subprocess.run(["git", "check-ignore", "--no-index", *written], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert sorted(done.stdout.split()) == sorted(written), done.stdout + done.stderr


def test_the_suite_deletes_its_temporary_folders_unless_a_test_failed(request):
    # About 6 GB per `make test` otherwise stays under /tmp/pytest-of-$USER (3 runs' worth by default).
    assert request.config.getini("tmp_path_retention_policy") == "failed"
    assert int(request.config.getini("tmp_path_retention_count")) == 1

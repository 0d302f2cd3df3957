"""`report` over a packed bundle (.tar) leaves no unpack folder behind (issue 41,
item 6): the report is made in a forked worker that ends with os._exit, which runs
no atexit handler, so the worker removes the folders it made itself."""
from __future__ import annotations

import os
import subprocess

from conftest import LAUNCHER, ROOT
from hpcai.launcher.bundles import keys
from hpcai.launcher.bundles.bundle import make
from hpcai.launcher.bundles.temp import remove_own, scratch
from report_docs import make_result, write_result


def _packed_bundle(tmp_path):
    private, public, _ = keys.generate(tmp_path / "alpha.key")
    run = write_result(tmp_path / "runs", make_result(site="alpha"), samples=True).parent
    made = make([str(run)], str(tmp_path / "b"), {"name": "alpha", "results": {"sign_key": str(private)}},
                None, True)
    site = tmp_path / "verifier.toml"
    site.write_text(f'name = "verifier"\n[results]\ntrusted_keys = [{{ site = "alpha", key = "{public}" }}]\n')
    return made["tar"], site


def test_report_over_a_tar_leaves_nothing_in_the_temporary_folder(tmp_path):
    tar, site = _packed_bundle(tmp_path)
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    env = {**os.environ, "TMPDIR": str(temporary), "HPCAI_SITE": str(site),
           "HPCAI_STATE_DIR": str(tmp_path / "state")}
    done = subprocess.run([*LAUNCHER, "report", str(tar), "-o", str(tmp_path / "rep")], capture_output=True,
                          text=True, cwd=ROOT, env=env, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "report of 1 run(s) (1 complete and valid)" in done.stdout
    assert sorted(p.name for p in temporary.iterdir() if p.name.startswith("hpcai-report-bundles-")) == []


def test_a_process_removes_only_its_own_scratch_folders(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # TMPDIR read again
    mine = scratch("hpcai-test-")
    parents = tmp_path / "parents"
    parents.mkdir()
    from hpcai.launcher.bundles import temp

    monkeypatch.setattr(temp, "_MADE", [(os.getpid() + 1, parents), (os.getpid(), mine)])
    remove_own()
    assert not mine.exists() and parents.exists()  # a forked child leaves its parent's alone

"""The Apptainer runtime's command and environment, and the image store's
names and digests: pure functions, no Apptainer needed."""
from __future__ import annotations

import hashlib
import os

import pytest

from hpcai.errors import UsageError
from hpcai.launcher.run import container
from hpcai.launcher.run import runtime
from hpcai.launcher.images import store
from hpcai.launcher.images.build import export_source
from hpcai.launcher.site.config import DEFAULTS
from hpcai.spec import RunSpec


def site(**sections) -> dict:
    import copy

    doc = copy.deepcopy(DEFAULTS)
    doc.update(name="t", path="")
    for name, values in sections.items():
        doc[name].update(values)
    return doc


def spec(tmp_path, nproc=2, vendor="auto", gpu_flag=None, params=None) -> RunSpec:
    return RunSpec.from_json({
        "run_id": "run1", "workload": "resnet50", "preset": "tiny",
        "protocol": {"warmup_epochs": 0, "epochs": 1, "steps_per_epoch": 1,
                     "sample_interval_s": 0.1},
        "power": {"cap_w": None, "method": "auto", "node_overhead_w": 0.0},
        "output_dir": str(tmp_path / "results" / "run1"),
        "params": params or {},
        "devices": {"type": "cpu", "vendor": vendor, "nproc": nproc, "gpu_indices": None},
        "runtime": {"kind": "apptainer",
                    "image": {"path": "/images/hpcai-cpu-cv.sif", "sha256": "0" * 64, "labels": {}},
                    "apptainer": {"executable": "/usr/bin/apptainer", "version": "1.4.5",
                                  "gpu_flag": gpu_flag}},
    })


def test_several_processes_run_torchrun_inside_the_image(tmp_path):
    doc = spec(tmp_path)
    cmd = runtime.command(doc, site(), str(tmp_path / "results/run1/spec.json"))
    image = cmd.index("/images/hpcai-cpu-cv.sif")
    assert cmd[:3] == ["/usr/bin/apptainer", "exec", "--cleanenv"]
    assert cmd[image + 1:image + 4] == ["python3", "-m", "torch.distributed.run"]
    assert "--nproc-per-node=2" in cmd
    results = str(tmp_path / "results")
    assert cmd[cmd.index(f"{results}:{results}") - 1] == "--bind"


def test_one_process_uses_the_images_runscript(tmp_path):
    cmd = runtime.command(spec(tmp_path, nproc=1), site(), "/r/spec.json")
    assert cmd[1] == "run"
    assert cmd[-4:] == ["/images/hpcai-cpu-cv.sif", "run", "--spec", "/r/spec.json"]


def test_gpu_flag_site_binds_options_and_path_options(tmp_path):
    weights = tmp_path / "weights"
    weights.mkdir()
    (tmp_path / "data").mkdir()
    s = site(binds={"data": str(tmp_path / "data"), "models": "", "scratch": ""},
             apptainer={"options": ["--contain"]})
    cmd = runtime.command(spec(tmp_path, gpu_flag="--nv", params={"weights": str(weights),
                                                                  "data": "synthetic"}), s, "/r/s.json")
    assert "--nv" in cmd and "--contain" in cmd
    assert f"{tmp_path / 'data'}:/data:ro" in cmd
    assert f"{weights}:{weights}:ro" in cmd  # an absolute host path option stays valid inside
    assert not any(b.startswith("synthetic") for b in cmd)
    assert cmd.index("--contain") < cmd.index("/images/hpcai-cpu-cv.sif")


def test_environment_forwards_what_the_run_needs_and_nothing_else():
    host = {"PATH": "/usr/bin", "LD_LIBRARY_PATH": "/host/lib", "SLURM_JOB_ID": "42",
            "CUDA_VISIBLE_DEVICES": "0,1", "MASTER_ADDR": "n1", "MY_TUNING": "x",
            "HPCAI_MODELS_DIR": "/lustre/models", "APPTAINERENV_STALE": "1"}
    s = site(apptainer={"env": {"NCCL_DEBUG": "WARN"}, "forward_env": ["MY_*"]})
    env = container.environment(host, s)
    inside = {k[len("APPTAINERENV_"):]: v for k, v in env.items() if k.startswith("APPTAINERENV_")}
    assert inside["SLURM_JOB_ID"] == "42" and inside["MASTER_ADDR"] == "n1"
    assert inside["CUDA_VISIBLE_DEVICES"] == "0,1"  # a comma survives (unlike --env)
    assert inside["MY_TUNING"] == "x" and inside["NCCL_DEBUG"] == "WARN"
    assert inside["HPCAI_MODELS_DIR"] == "/models"  # the host folder is bound there
    assert "LD_LIBRARY_PATH" not in inside and "STALE" not in inside
    assert env["PATH"] == "/usr/bin"  # apptainer itself still runs with the host's


def test_unbound_folder_variables_are_not_passed_in():
    env = container.environment({"PATH": "/bin"}, site())
    assert "APPTAINERENV_HPCAI_DATA_DIR" not in env


def test_host_runtime_with_image_is_a_usage_error():
    with pytest.raises(UsageError, match="--image needs the apptainer runtime"):
        runtime.select("host", site(), None, "cv", image="/x.sif")


def test_auto_runs_a_plugin_workload_on_the_host_though_an_image_is_there(monkeypatch):
    """hpcai's images carry hpcai's workloads, not a centre's installed package."""
    monkeypatch.setattr(container, "auto_available", lambda *a: True)
    monkeypatch.setattr(container, "runtime_entry", lambda *a, **k: {"kind": "apptainer"})
    said = []
    assert runtime.select("auto", site(), "nvidia", "cv", log=said.append)["kind"] == "apptainer"
    assert runtime.select("auto", site(), "nvidia", "cv", log=said.append,
                          plugin="mlp-example") == runtime.HOST
    assert "mlp-example comes from an installed package" in said[-1]
    # Asked for by name, an image (one built with the package) still runs it.
    assert runtime.select("apptainer", site(), "nvidia", "cv", plugin="mlp-example") == {"kind": "apptainer"}


def test_image_names_flavours_and_registry_addresses(monkeypatch, tmp_path):
    monkeypatch.delenv("HPCAI_IMAGES_DIR", raising=False)
    assert store.flavour_for("nvidia") == "cuda" and store.flavour_for("amd") == "rocm"
    assert store.flavour_for(None) == "cpu"
    s = site(images={"dir": str(tmp_path), "registry": "oras://reg.example.org/hpcai/"})
    assert store.image_path(s, "cuda", "llm-train") == tmp_path / "hpcai-cuda-llm-train.sif"
    assert store.registry_uri(s, "rocm", "cv", "v1") == "oras://reg.example.org/hpcai/hpcai-rocm-cv:v1"
    assert store.registry_uri(site(), "rocm", "cv") is None
    monkeypatch.setenv("HPCAI_IMAGES_DIR", str(tmp_path / "env"))
    assert store.images_dir(s) == tmp_path / "env"


def test_digest_is_cached_until_the_file_changes(tmp_path):
    image = tmp_path / "x.sif"
    image.write_bytes(b"one")
    assert store.sha256(image) == hashlib.sha256(b"one").hexdigest()
    image.write_bytes(b"other")
    os.utime(image, ns=(1, 1))
    assert store.sha256(image) == hashlib.sha256(b"other").hexdigest()


def test_build_source_is_what_git_would_commit(tmp_path):
    import subprocess

    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / ".gitignore").write_text(".venv/\nresults/\n")
    for name in ("pyproject.toml", "new_untracked.py", ".venv/lib.py", "results/r.json"):
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text("x")
    subprocess.run(["git", "-C", str(repo), "add", "pyproject.toml", ".gitignore"], check=True)
    export_source(repo, tmp_path / "out")
    copied = sorted(str(p.relative_to(tmp_path / "out")) for p in (tmp_path / "out").rglob("*") if p.is_file())
    assert copied == [".gitignore", "new_untracked.py", "pyproject.toml"]


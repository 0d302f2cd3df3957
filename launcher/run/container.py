"""The Apptainer runtime: the same entrypoint, started inside the image.

`apptainer run IMAGE run --spec SPEC` (the image's %runscript) for one
process, `apptainer exec IMAGE python3 -m torch.distributed.run ...` for
several. `--cleanenv` keeps the host's Python and library paths out; what the
run needs inside is forwarded explicitly as APPTAINERENV_* variables, which
survive --cleanenv and, unlike --env, allow commas in values. Caps stay on the
host: the container only measures.
"""
from __future__ import annotations

import fnmatch
import os
from pathlib import Path

from hpcai.errors import ImageError, RuntimeNotFoundError
from hpcai.launcher.images import store
from hpcai.launcher.images.apptainer import Apptainer
from hpcai.spec import RunSpec

# Host variables a run needs inside: device visibility, the scheduler's view of
# the job, rendezvous, communication libraries' tuning, hpcai's own settings.
FORWARDED = ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES",
             "CUDA_DEVICE_ORDER", "OMP_NUM_THREADS", "PYTHONUNBUFFERED", "SLURM_*",
             "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "NODE_RANK",
             "LOCAL_WORLD_SIZE", "TORCHELASTIC_*", "NCCL_*", "GLOO_*", "RCCL_*", "UCX_*",
             "FI_*", "HPCAI_*", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "TZ")
# Site folders, bound at fixed places inside, and the variables that point there.
MOUNTS = {"data": ("/data", "HPCAI_DATA_DIR"), "models": ("/models", "HPCAI_MODELS_DIR"),
          "scratch": ("/scratch", "HPCAI_SCRATCH_DIR")}
SITE_FILE_INSIDE = "/etc/hpcai/site.toml"
GPU_FLAGS = {"nvidia": "--nv", "amd": "--rocm"}


def resolve_image(site: dict, flavour: str, family: str, *, explicit: str | None = None,
                  pull: bool = True, apptainer: Apptainer, log=lambda message: None) -> Path:
    """The image to run: --image, else the images folder, else pulled from the
    site's registry; a one-line error that says how to get it otherwise."""
    if explicit:
        path = Path(explicit).expanduser().absolute()
        if not path.is_file():
            raise RuntimeNotFoundError(f"image {path} does not exist",
                                       "check the path given to --image")
        return path
    path = store.image_path(site, flavour, family)
    if path.is_file():
        return path
    uri = store.registry_uri(site, flavour, family)
    if uri and pull:
        log(f"image {path.name} not found in {path.parent}; pulling {uri}")
        return store.pull_verified(apptainer, site, uri, path, log)
    how = (f"pull it with `hpcai-launch images pull --family {family}`" if uri else
           f"build it with `make images FLAVOUR={flavour}` on a build host, or set "
           "[images] registry in the site config to pull it")
    raise RuntimeNotFoundError(f"image {path.name} is not in {path.parent}",
                               f"{how}, or use --runtime host")


def runtime_entry(site: dict, vendor: str | None, family: str, *, requested: str,
                  image: str | None, log=lambda message: None) -> dict:
    """The spec's runtime for --runtime apptainer (or auto with the image present)."""
    apptainer = Apptainer(site["apptainer"]["executable"])
    flavour = store.flavour_for(vendor)
    path = resolve_image(site, flavour, family, explicit=image, pull=requested == "apptainer",
                         apptainer=apptainer, log=log)
    labels = apptainer.labels(path)
    ours = store.hpcai_labels(labels)
    if not ours.get("family"):
        raise ImageError(f"{path} carries no org.hpcai.* labels: it was not built from "
                         "hpcai's definitions", "build it with `make images`, or pull it")
    if ours["family"] != family:
        raise ImageError(f"image {path.name} carries the {ours['family']!r} family, "
                         f"and this workload needs {family!r}",
                         f"use the hpcai-{flavour}-{family}.sif image")
    key = site["images"].get("verify_key")
    if key:
        apptainer.verify(path, Path(key))
    return {"kind": "apptainer", "image": store.describe(path, labels),
            "apptainer": {"executable": apptainer.executable, "version": apptainer.version(),
                          "gpu_flag": GPU_FLAGS.get(vendor or "")}}


def auto_available(site: dict, vendor: str | None, family: str) -> bool:
    """--runtime auto picks Apptainer when it is installed and the image is here."""
    return (store.image_path(site, store.flavour_for(vendor), family).is_file()
            and Apptainer.find(site["apptainer"]["executable"]) is not None)


def _path_params(params: dict) -> list[str]:
    """Absolute host paths among the workload's options (weights, data,
    tokenizer): bound read-only at the same path so the spec stays valid."""
    found = []
    for value in params.values():
        if isinstance(value, str) and value.startswith("/") and os.path.exists(value):
            found.append(value)
    return found


def command(spec: RunSpec, site: dict, spec_path: str, inner: list[str]) -> list[str]:
    """`inner` is the host runtime's command; its Python becomes the image's."""
    rt = spec.runtime
    run_dir = Path(spec.output_dir)
    args = [rt["apptainer"]["executable"]]
    single = inner[1:3] != ["-m", "torch.distributed.run"]
    args += ["run"] if single else ["exec"]
    args.append("--cleanenv")
    if rt["apptainer"].get("gpu_flag"):
        args.append(rt["apptainer"]["gpu_flag"])
    binds = [f"{run_dir.parent}:{run_dir.parent}"]
    site_path = site.get("path")
    if site_path and Path(site_path).is_file():
        binds.append(f"{site_path}:{SITE_FILE_INSIDE}:ro")
    for name, (inside, _var) in MOUNTS.items():
        source = _mount_source(site, name)
        if source:
            binds.append(f"{source}:{inside}" + ("" if name == "scratch" else ":ro"))
    binds += [f"{p}:{p}:ro" for p in _path_params(spec.params)]
    for bind in binds:
        args += ["--bind", bind]
    args += list(site["apptainer"].get("options", []))
    args.append(rt["image"]["path"])
    if single:
        return args + inner[inner.index("run"):]  # the image's %runscript is the entrypoint
    return args + ["python3", *inner[1:]]


def _mount_source(site: dict, name: str, env=os.environ) -> str | None:
    """The site's folder, else the one the host's HPCAI_*_DIR names."""
    _inside, var = MOUNTS[name]
    return site.get("binds", {}).get(name) or env.get(var) or None


def environment(host_env: dict[str, str], site: dict) -> dict[str, str]:
    """The apptainer process's environment: the host's, plus APPTAINERENV_* for
    what the run sees inside."""
    inside = {}
    patterns = FORWARDED + tuple(site["apptainer"].get("forward_env", []))
    for name, value in host_env.items():
        if any(fnmatch.fnmatchcase(name, p) for p in patterns):
            inside[name] = value
    for name, (mount, var) in MOUNTS.items():
        if _mount_source(site, name, host_env):
            inside[var] = mount
        else:
            inside.pop(var, None)
    if site.get("path") and Path(site["path"]).is_file():
        inside["HPCAI_SITE"] = SITE_FILE_INSIDE
    inside.update({k: str(v) for k, v in site["apptainer"].get("env", {}).items()})
    env = {k: v for k, v in host_env.items() if not k.startswith("APPTAINERENV_")}
    env.update({f"APPTAINERENV_{k}": v for k, v in inside.items()})
    return env

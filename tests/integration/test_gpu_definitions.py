# SPDX-License-Identifier: Apache-2.0
"""The CUDA and ROCm definitions' %post and %test, run for real on STAND-IN bases.

No GPU base image can be pulled here (NGC and Docker Hub are out of reach), so
each test builds what the definition's base holds, as far as the install
script can tell, and runs the real `definitions/common/install-hpcai.sh` on
it (only its prefix moved from /opt/hpcai), then the definition's %test
(`python3 -m hpcai.workloads check --family F`) in the venv it made.

A stand-in base is:
- a clean Python prefix (this machine's interpreter, no site-packages of its
  own; Python 3.11, where the bases run 3.12: the real torch borrowed below is
  a cp311 build), as NGC's and SGLang's system python3; for rocm/pytorch, a
  venv on it, as its /opt/venv;
- every line of the base's list (`requirements/base/*.txt`) at its exact
  version: installed for real (numpy, safetensors, tokenizers, ...), except
  the vendor builds (lock.py's STUB: torch, torchvision, triton, sglang, ...),
  which are distributions with metadata only, local labels included;
- the modules of those (torch, torchvision, triton and what they import)
  BORROWED from this test's environment through a .pth file in the base's
  site folder: the metadata says NGC's `2.8.0a0+5228986c39.nv25.5`, the
  module is PyPI's torch. For the SGLang bases the `sglang` module is the
  STAND-IN in tests/standins;
- NGC's `/etc/pip/constraint.txt`, the base list as pins, exported as
  PIP_CONSTRAINT as NGC's image config does;
- for ROCm, `$ROCM_PATH/share/amd_smi` holding the FAKE amdsmi
  (tests/fakes/amdsmi.py) as a package source, as ROCm ships its own.

The pins come from the package index through a wheel folder kept between
runs (HPCAI_TEST_WHEELS, default ~/.cache/hpcai-tests/wheels): the install
itself runs offline from it. AMD's tensorflow-rocm is not on the index:
tensorflow-cpu at the same version, renamed, stands in for it (the lock
resolves it the same way). A pin that has no release for Python 3.11
(tifffile 2026.11.8 needs 3.12) is installed at its newest version that
has, and the test says so.
"""
from __future__ import annotations

import importlib.metadata as md
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from hpcai.install import DISTRIBUTION
from hpcai.workloads.catalog import IMAGE_FAMILIES

# make test runs a module on one pytest-xdist worker (--dist loadfile): its tests download into one shared wheel folder.
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
REQS = REPO / "definitions" / "requirements"
INSTALL = REPO / "definitions" / "common" / "install-hpcai.sh"
FAKES = REPO / "tests" / "fakes"
SGLANG_STANDIN = REPO / "tests" / "standins" / "sglang"
GPU_DEFINITIONS = [(flavour, family) for flavour in ("cuda", "rocm") for family in IMAGE_FAMILIES]

def _load_lock():
    """definitions/requirements/lock.py: its vendor-build list and pin reader, one source."""
    spec = importlib.util.spec_from_file_location("hpcai_lock", REQS / "lock.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


LOCK = _load_lock()
# Vendor builds: lock.py's STUB list (metadata-only stand-ins here, modules borrowed).
STUB = LOCK.STUB
normalise, pin_lines = LOCK.normalise, LOCK.pins
ALIASES = {"pytorch-triton": "triton", "pytorch-triton-rocm": "triton"}
RENAMED = {"tensorflow-rocm": "tensorflow-cpu"}  # not on the index -> its same-module twin


def lock_base(reqs: Path) -> Path:
    match = re.search(r"^# lock:.*\bbase=(\S+?\.txt)", reqs.read_text(), re.M)
    return REQS / match[1]


def wheel_folder() -> Path:
    folder = Path(os.environ.get("HPCAI_TEST_WHEELS") or Path.home() / ".cache" / "hpcai-tests" / "wheels")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def have_wheel(folder: Path, name: str, version: str) -> bool:
    stem = f"{normalise(name).replace('-', '_')}-{version}-"
    return any(p.name.lower().startswith(stem) for p in folder.glob("*.whl"))


def newest_for_this_python(name: str, version: str) -> str:
    """The newest release of name up to version that this Python can install."""
    with_report = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--ignore-installed", "--no-deps",
         "--only-binary=:all:", "--report", "-", f"{name}<={version}"], capture_output=True, text=True, check=True)
    return json.loads(with_report.stdout)["install"][0]["metadata"]["version"]


def fetch_wheels(folder: Path, pins: dict[str, str]) -> dict[str, str]:
    """Every pin as a wheel in folder, downloaded once (pip's own cache too).
    Returns the pins this Python cannot have, with the version it gets instead."""
    substitutes = {}
    for _ in range(5):
        wanted = {n: v for n, v in pins.items() if not have_wheel(folder, RENAMED.get(n, n), v)
                  and not (n in RENAMED and have_wheel(folder, n, v))}
        if not wanted:
            break
        listing = folder / ".wanted.txt"
        listing.write_text("".join(f"{RENAMED.get(n, n)}=={v}\n" for n, v in wanted.items()))
        done = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                               "--only-binary=:all:", "-d", str(folder), "-r", str(listing)],
                              capture_output=True, text=True)
        if done.returncode == 0:
            break
        missing = re.search(r"No matching distribution found for (\S+?)==(\S+)", done.stderr)
        assert missing and "Requires-Python" in done.stderr, done.stderr[-2000:]
        name = normalise(missing[1])
        substitutes[name] = newest_for_this_python(name, missing[2])
        pins = {**pins, name: substitutes[name]}
    for name, twin in RENAMED.items():
        if name in pins and not have_wheel(folder, name, pins[name]):
            rename_wheel(folder, twin, name, pins[name])
    return substitutes


def rename_wheel(folder: Path, twin: str, name: str, version: str) -> None:
    """A copy of twin's wheel published as name (same files, dist-info renamed)."""
    old, new = f"{twin.replace('-', '_')}-{version}", f"{name.replace('-', '_')}-{version}"
    source = next(p for p in folder.glob("*.whl") if p.name.lower().startswith(old + "-"))
    target = folder / source.name.replace(source.name[:len(old)], new)
    partial = target.with_suffix(".partial")
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as dst:
        for item in src.infolist():
            data = src.read(item)
            arcname = item.filename.replace(f"{old}.dist-info/", f"{new}.dist-info/")
            if arcname.startswith(f"{new}.dist-info/"):
                text = data.decode("utf-8")
                if arcname.endswith("/METADATA"):
                    text = re.sub(r"^Name: .*$", f"Name: {name}", text, count=1, flags=re.M)
                text = text.replace(f"{old}.dist-info/", f"{new}.dist-info/")
                data = text.encode("utf-8")
            dst.writestr(arcname, data, compress_type=zipfile.ZIP_STORED
                         if arcname.endswith(".so") else zipfile.ZIP_DEFLATED)
    partial.rename(target)


def clean_python(folder: Path) -> Path:
    """This interpreter with no site-packages of its own: a base's bare python3."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    real = Path(sys._base_executable).resolve()
    stdlib = Path(sysconfig.get_paths(vars={"base": sys.base_prefix, "installed_base": sys.base_prefix})["stdlib"])
    (folder / "bin").mkdir(parents=True)
    lib = folder / "lib" / version
    lib.mkdir(parents=True)
    shutil.copy2(real, folder / "bin" / version)  # a copy: Python finds its prefix from here
    (folder / "bin" / "python3").symlink_to(version)
    for entry in stdlib.iterdir():
        if entry.name not in ("site-packages", "dist-packages"):
            (lib / entry.name).symlink_to(entry)
    return folder / "bin" / "python3"


def site_folder(python: Path) -> Path:
    out = subprocess.run([str(python), "-c", "import site; print(site.getsitepackages()[0])"],
                         capture_output=True, text=True, check=True).stdout.strip()
    Path(out).mkdir(parents=True, exist_ok=True)
    return Path(out)


def write_dist(site: Path, name: str, version: str) -> None:
    """An installed distribution with metadata only (what pip and importlib see)."""
    info = site / f"{normalise(name).replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "INSTALLER").write_text("hpcai-test-standin\n")
    (info / "RECORD").write_text("")


def import_closure(names: list[str]) -> set[str]:
    """Distributions of this environment that importing names needs (Requires-Dist)."""
    seen, todo = {"setuptools", "pip"}, [normalise(n) for n in names]  # build tools: the base's own
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            continue
        seen.add(name)
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(normalise(req.name))
    return seen


def borrow_modules(folder: Path, dists: set[str]) -> None:
    """Symlinks to the top-level modules of dists (no metadata: the base list has that)."""
    folder.mkdir()
    for name in dists:
        dist = md.distribution(name)
        tops = {str(f).split("/")[0] for f in dist.files or []
                if not str(f).startswith("..") and not str(f).split("/")[0].endswith((".dist-info", ".pth"))
                and str(f).split("/")[0] != "__pycache__"}
        for top in tops:
            target = Path(dist.locate_file(top))
            if target.exists() and not (folder / top).exists():
                (folder / top).symlink_to(target)


def make_base(root: Path, flavour: str, base_list: Path, wheels: Path) -> dict:
    """The stand-in base; returns the environment its %post would run in."""
    pins = pin_lines(base_list)
    real = {n: v for n, v in pins.items() if n not in STUB}
    fetch_wheels(wheels, real)
    python = clean_python(root / "python")
    env = {"PATH": f"{python.parent}:/usr/bin:/bin", "HOME": str(root), "LANG": "C.UTF-8"}
    if base_list.name.startswith("rocm-pytorch"):  # rocm/pytorch: python3 is the /opt/venv venv
        subprocess.run([str(python), "-m", "venv", "--without-pip", str(root / "venv")], check=True)
        python = root / "venv" / "bin" / "python3"
        env["PATH"] = f"{python.parent}:{env['PATH']}"
    site = site_folder(python)
    if real:
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
                        "--find-links", str(wheels), "--target", str(site),
                        *[f"{n}=={v}" for n, v in real.items()]], check=True)
    for name in pins.keys() - real.keys():
        write_dist(site, name, pins[name])
    borrowed = root / "borrowed"
    borrow_modules(borrowed, import_closure([ALIASES.get(n, n) for n in pins.keys() - real.keys()]) - real.keys())
    if "sglang" in pins:
        (borrowed / "sglang").symlink_to(SGLANG_STANDIN)
    (site / "hpcai-test-borrowed.pth").write_text(f"{borrowed}\n")
    if base_list.name.startswith("ngc-"):  # NGC's image config: PIP_CONSTRAINT=/etc/pip/constraint.txt
        constraint = root / "etc" / "pip" / "constraint.txt"
        constraint.parent.mkdir(parents=True)
        constraint.write_text("".join(f"{n}=={v}\n" for n, v in pins.items()))
        env["PIP_CONSTRAINT"] = str(constraint)
    if flavour == "rocm":  # ROCm ships amdsmi's source; here the FAKE amdsmi is that source
        source = root / "rocm" / "share" / "amd_smi"
        source.mkdir(parents=True)
        for module in ("amdsmi.py", "fake_gpu_state.py"):
            shutil.copy(FAKES / module, source / module)
        (source / "pyproject.toml").write_text(
            '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
            '[project]\nname = "amdsmi"\nversion = "25.3.0"\n'
            '[tool.setuptools]\npy-modules = ["amdsmi", "fake_gpu_state"]\n')
        env["ROCM_PATH"] = str(root / "rocm")
    return env


def copy_source(target: Path) -> None:
    """The working tree's files as a clean copy (what HPCAI_SRC is)."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        source = REPO / rel
        if source.is_file():
            (target / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / rel)


def venv_versions(python: Path) -> dict[str, str]:
    code = ("import importlib.metadata as md, json, re\n"
            "seen = {}\n"
            "for d in md.distributions():\n"
            "    seen.setdefault(re.sub(r'[-_.]+', '-', d.metadata['Name']).lower(), d.version)\n"
            "print(json.dumps(seen))")
    return json.loads(subprocess.run([str(python), "-c", code], capture_output=True, text=True,
                                     check=True).stdout)


@pytest.mark.parametrize("flavour,family", GPU_DEFINITIONS, ids=[f"{f}/{g}" for f, g in GPU_DEFINITIONS])
def test_install_and_test_sections_pass_on_the_stand_in_base(flavour, family, tmp_path):
    reqs = REQS / f"{flavour}-{family}.txt"
    base_list = lock_base(reqs)
    base, pins = pin_lines(base_list), pin_lines(reqs)
    keep = set(re.search(r'^KEEP="([^"]+)"', INSTALL.read_text(), re.M)[1].split())
    wheels = wheel_folder()
    substitutes = fetch_wheels(wheels, {n: v for n, v in pins.items() if n not in keep})  # KEEP: the base's
    env = make_base(tmp_path / "base", flavour, base_list, wheels)
    prefix = tmp_path / "opt-hpcai"
    copy_source(prefix / "src")
    if substitutes:
        print(f"pins with no release for Python {sys.version_info.major}.{sys.version_info.minor}, "
              f"installed at: {substitutes}")
        copied = prefix / "src" / reqs.relative_to(REPO)
        copied.write_text("".join(f"{re.split('==', ln)[0]}=={substitutes[normalise(ln.split('==')[0])]}\n"
                                  if "==" in ln and not ln.startswith("#")
                                  and normalise(ln.split("==")[0]) in substitutes else ln + "\n"
                                  for ln in copied.read_text().splitlines()))
        pins.update(substitutes)
    env.update({"HPCAI_PREFIX": str(prefix), "HPCAI_FLAVOUR": flavour, "HPCAI_FAMILY": family,
                "HPCAI_VERSION": "test", "HPCAI_COMMIT": "test", "HPCAI_WORKLOADS": "",
                "HPCAI_BASE_IMAGE": f"stand-in for {base_list.name}",
                # Offline, from the wheel folder only (a build passes its site's index here).
                "PIP_FIND_LINKS": str(wheels), "PIP_NO_INDEX": "1", "PIP_CONFIG_FILE": os.devnull})
    post = subprocess.run(["bash", str(INSTALL)], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=900)
    assert post.returncode == 0, post.stdout[-3000:] + post.stderr[-3000:]

    # %test, in the image's %environment.
    venv = prefix / "venv" / "bin"
    test_env = {**env, "PATH": f"{venv}:{env['PATH']}", "PYTHONSAFEPATH": "1"}
    check = subprocess.run([str(venv / "python3"), "-m", "hpcai.workloads", "check", "--family", family],
                           env=test_env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert check.returncode == 0, check.stdout + check.stderr

    # The base's builds are the ones measured: every KEEP package the base has is its copy.
    seen = venv_versions(venv / "python3")
    for name in keep & base.keys():
        assert seen[name] == base[name], (name, seen[name], base[name])
    info = json.loads((prefix / "build-info.json").read_text())
    assert info["torch"] == base["torch"]
    # Every pin is what the venv sees, or the base's copy was kept (and said so).
    kept = {entry.split()[0] for entry in info["kept_from_base"]}
    for name, version in pins.items():
        if name in keep:  # an assertion of the base's version (sglang), public part
            assert seen[name].split("+")[0] == version
        else:
            assert seen.get(name) == version or name in kept, (name, seen.get(name), version)
    assert DISTRIBUTION in seen
    if "PIP_CONSTRAINT" in env:
        assert info["base_pip_constraint"] == env["PIP_CONSTRAINT"]
        assert (prefix / "base-pip-constraint.txt").read_text() == Path(env["PIP_CONSTRAINT"]).read_text()

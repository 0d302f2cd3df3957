# SPDX-License-Identifier: Apache-2.0
"""The Apptainer definitions, their requirements files and the shared install
script, checked as text: no Apptainer, no GPU, no network."""
from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hpcai.workloads import selfcheck
from hpcai.workloads.catalog import IMAGE_FAMILIES, WORKLOADS, family_workloads

DEFS = Path(__file__).resolve().parents[2] / "definitions"
FLAVOURS = ("cuda", "rocm", "cpu")
INSTALL = "definitions/common/install-hpcai.sh"
SECTIONS = {"arguments", "files", "post", "environment", "runscript", "test", "labels", "help"}
# The build arguments `hpcai-launch images build` passes: each must be declared and
# used, because Apptainer refuses a passed argument the definition does not use.
CONTRACT = {"HPCAI_SRC", "HPCAI_VERSION", "HPCAI_COMMIT", "HPCAI_WORKLOADS", "BASE_IMAGE",
            "PIP_CERT", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL"}
LABELS = {"org.hpcai.version", "org.hpcai.commit", "org.hpcai.flavour", "org.hpcai.family",
          "org.hpcai.workloads", "org.hpcai.base-image"}
PIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9][A-Za-z0-9.+!_-]*$")
PLACEHOLDER = re.compile(r"{{\s*([A-Za-z_][A-Za-z0-9_]*)\s*}}")


def parse_def(path: Path) -> tuple[dict[str, str], dict[str, str]]:
    """(header keywords, section name -> body) of an Apptainer definition file."""
    header, sections, current = {}, {}, None
    for line in path.read_text().splitlines():
        match = re.match(r"^%(\w+)\s*$", line)
        if match:
            current = match.group(1)
            assert current not in sections, f"{path}: %{current} twice"
            sections[current] = ""
        elif current is not None:
            sections[current] += line + "\n"
        elif line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition(":")
            header[key.strip()] = value.strip()
    return header, sections


def arguments(sections: dict[str, str]) -> dict[str, str]:
    out = {}
    for line in sections["arguments"].splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, sep, value = line.partition("=")
            assert sep, f"%arguments line {line!r} is not NAME=default"
            out[name] = value
    return out


def labels(sections: dict[str, str]) -> dict[str, str]:
    return dict(line.strip().split(None, 1) for line in sections["labels"].splitlines() if line.strip())


def pins(path: Path) -> list[str]:
    return [ln.strip() for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")]


ALL = [(flavour, family) for flavour in FLAVOURS for family in IMAGE_FAMILIES]


@pytest.fixture(params=ALL, ids=[f"{f}/{g}" for f, g in ALL])
def definition(request):
    flavour, family = request.param
    path = DEFS / flavour / f"{family}.def"
    assert path.is_file(), f"missing {path}"
    header, sections = parse_def(path)
    return flavour, family, path, header, sections


def test_every_section_is_there(definition):
    _, _, path, _, sections = definition
    assert SECTIONS <= sections.keys(), f"{path.name}: missing {SECTIONS - sections.keys()}"
    assert path.read_text().startswith("# SPDX-License-Identifier: Apache-2.0\n")


def test_bootstrap_and_pinned_base(definition):
    flavour, _, _, header, sections = definition
    args = arguments(sections)
    base = args["BASE_IMAGE"]
    assert base and "latest" not in base and ":" in base, f"BASE_IMAGE default {base!r} is not a pinned tag"
    if flavour == "cpu":
        assert header["Bootstrap"] == "debootstrap" and header["OSVersion"] == "trixie"
        assert args["DEBIAN_MIRROR"] == "http://deb.debian.org/debian"
        assert header["MirrorURL"] == "{{ DEBIAN_MIRROR }}"
    else:
        assert header["Bootstrap"] == "docker" and header["From"] == "{{ BASE_IMAGE }}"
    defaults = {"cuda": "nvcr.io/nvidia/pytorch:25.05-py3",
                "rocm": "rocm/pytorch:rocm7.1.1_ubuntu24.04_py3.12_pytorch_release_2.9.1"}
    if flavour in defaults and "serve" not in definition[1]:
        assert base == defaults[flavour]


def test_placeholders_are_declared_and_the_contract_is_used(definition):
    _, family, path, _, sections = definition
    args = arguments(sections)
    text = path.read_text()
    used = set(PLACEHOLDER.findall(text))
    assert used <= args.keys(), f"{path.name}: {used - args.keys()} used but not in %arguments"
    assert CONTRACT <= args.keys(), f"{path.name}: {CONTRACT - args.keys()} not declared"
    outside = text.replace(sections["arguments"], "")
    unused = {name for name in args if not re.search(r"{{\s*%s\s*}}" % name, outside)}
    assert not unused, f"{path.name}: {unused} declared but never used"
    assert args["PIP_CERT"] == "", "a CA bundle is a build-time setting, never a default"
    # No definition lists workloads: the catalog's family does (the launcher's build passes it).
    assert args["HPCAI_WORKLOADS"] == "all"
    assert "{{ HPCAI_SRC }} /opt/hpcai/src" in sections["files"]


def test_post_runs_the_shared_install_script(definition):
    flavour, family, _, _, sections = definition
    post = sections["post"]
    assert f"bash /opt/hpcai/src/{INSTALL}" in post
    assert f"HPCAI_FLAVOUR={flavour} HPCAI_FAMILY={family}" in post
    for name in ("PIP_CERT", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "HPCAI_VERSION", "HPCAI_COMMIT",
                 "HPCAI_WORKLOADS"):
        assert f"{name}='{{{{ {name} }}}}'" in post
    assert "pip install" not in post, "installs go through the shared script"


def test_debian_packages_are_pinned(definition):
    flavour, _, path, _, sections = definition
    if flavour != "cpu":  # GPU flavours take the base's system packages as they are
        assert not re.search(r"\bapt(-get|_get)? +install", sections["post"])
        return
    command = re.search(r"install -y --no-install-recommends(.*?)\n\s*apt_get clean",
                        sections["post"], re.S).group(1)
    packages = command.replace("\\", " ").split()
    # Trust roots follow the archive, which keeps only the newest point release
    # (20250419 became 20250419+deb13u1): pinning them only breaks fresh builds.
    unpinned = [p for p in packages if "=" not in p]
    assert unpinned == ["ca-certificates"], unpinned
    pinned = [p for p in packages if "=" in p]
    assert pinned and all(re.fullmatch(r"[a-z0-9.+-]+=[A-Za-z0-9.+:~-]+", p) for p in pinned), pinned
    assert {p.split("=")[0] for p in pinned} >= {"python3", "python3-venv"}


def test_labels_environment_runscript_test_and_help(definition):
    flavour, family, _, _, sections = definition
    found = labels(sections)
    assert found.keys() == LABELS
    assert found["org.hpcai.flavour"] == flavour and found["org.hpcai.family"] == family
    assert found["org.hpcai.version"] == "{{ HPCAI_VERSION }}"
    assert found["org.hpcai.base-image"] == "{{ BASE_IMAGE }}"
    assert "export PATH=/opt/hpcai/venv/bin:$PATH" in sections["environment"]
    assert sections["runscript"].strip() == 'exec python3 -m hpcai.workloads "$@"'
    assert sections["test"].strip() == f"python3 -m hpcai.workloads check --family {family}"
    assert "hpcai-launch" in sections["help"] and "apptainer run" in sections["help"]


@pytest.mark.parametrize("flavour,family", ALL)
def test_requirements_are_exact_pins(flavour, family):
    path = DEFS / "requirements" / f"{flavour}-{family}.txt"
    lines = pins(path)
    assert lines and all(PIN.match(ln) for ln in lines), [ln for ln in lines if not PIN.match(ln)]
    names = [re.sub(r"[-_.]+", "-", ln.split("==")[0]).lower() for ln in lines]
    assert len(names) == len(set(names)), "a package pinned twice"
    # The base's torch (and its numpy) are what the image measures: never pinned.
    assert not {"torch", "torchvision", "torchaudio", "numpy"} & set(names)
    # hpcai's own runtime dependencies, and setuptools to build it without isolation.
    assert {"click", "jsonschema", "setuptools"} <= set(names)
    if flavour == "cuda":
        assert "nvidia-ml-py" in names
    assert any(ln.startswith("# lock: top=") for ln in path.read_text().splitlines())


def test_base_lists_are_exact_pins():
    for path in (DEFS / "requirements" / "base").glob("*.txt"):
        assert all(PIN.match(ln) for ln in pins(path)), path


def test_install_script_parses_and_never_resolves():
    script = DEFS / "common" / "install-hpcai.sh"
    subprocess.run(["bash", "-n", str(script)], check=True)
    text = script.read_text()
    assert text.startswith("#!/usr/bin/env bash\n# SPDX-License-Identifier: Apache-2.0\n")
    assert "install --no-deps" in text and "--system-site-packages" in text
    assert "/opt/hpcai/build-info.json" in text and "/opt/hpcai/pip-freeze.txt" in text


def test_check_names_each_module_a_family_needs():
    cv = selfcheck.needed_modules(family_workloads("cv"), "cuda")
    assert {"torch", "torchvision", "tensorflow", "keras", "diffusers", "transformers", "pynvml"} <= cv.keys()
    assert "resnet50 --impl tensorflow" in cv["tensorflow"]
    assert "amdsmi" in selfcheck.needed_modules(family_workloads("llm-train"), "rocm")


def test_check_fails_with_one_line_when_a_framework_is_missing(capsys, monkeypatch):
    # The workload's declaration names the libraries it needs (Impl.libraries).
    serve = WORKLOADS["llama3-8b-inference"]
    impl = dataclasses.replace(serve.impls["sglang"], libraries=("no_such_module_hpcai",))
    monkeypatch.setitem(WORKLOADS, serve.name, dataclasses.replace(serve, impls={"sglang": impl}))
    assert selfcheck.run("llm-serve") == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "cannot import" in err and "no_such_module_hpcai" in err
    assert selfcheck.run("no-such-family") == 2


def test_torch_compat_turns_libuv_off_only_where_nobody_asked(tmp_path):
    """What the CPU images' .pth does for Debian's torch (no libuv): torchrun's
    rendezvous stores stop asking for libuv; an explicit request still wins."""
    pytest.importorskip("torch.distributed")
    code = """
import sys
import hpcai.workloads.torch_compat as compat
compat.install()
import torch.distributed as dist
from torch.distributed.elastic.rendezvous import c10d_rendezvous_backend as c10d
assert c10d.TCPStore is dist.TCPStore and issubclass(dist.TCPStore, sys.modules["torch._C._distributed_c10d"].TCPStore)
assert not dist.TCPStore("127.0.0.1", 0, is_master=True).libuvBackend
assert dist.TCPStore("127.0.0.1", 0, is_master=True, use_libuv=True).libuvBackend
print("ok")
"""
    env = {k: v for k, v in os.environ.items() if k != "USE_LIBUV"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env=env, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


def _keep_list() -> set[str]:
    text = (DEFS / "common" / "install-hpcai.sh").read_text()
    return set(re.search(r'^KEEP="([^"]+)"', text, re.M)[1].split())


def _lock_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("hpcai_lock", DEFS / "requirements" / "lock.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_lock_and_install_script_keep_the_same_packages():
    assert _lock_module().KEEP == _keep_list()


@pytest.mark.parametrize("flavour,family", [(f, g) for f, g in ALL if f != "cpu"])
def test_pins_agree_with_their_base_list(flavour, family):
    """No file pins a KEEP package at another version than its base's (the build
    would stop), and no ROCm file carries CUDA wheels (lock.py's torch leak)."""
    lock = _lock_module()
    path = DEFS / "requirements" / f"{flavour}-{family}.txt"
    header = dict(kv.strip().partition("=")[::2] for line in path.read_text().splitlines()
                  if line.startswith("# lock:") for kv in line[len("# lock:"):].split(";"))
    base = lock.pins(DEFS / "requirements" / header["base"])
    pinned = lock.pins(path)
    for name in _keep_list() & pinned.keys():
        assert name in base and lock.public(base[name]) == lock.public(pinned[name]), (name, pinned[name])
    if flavour == "rocm":
        assert not [n for n in pinned if n.startswith("nvidia-") and n != "nvidia-ml-py"]
        assert "nvidia-ml-py" not in pinned


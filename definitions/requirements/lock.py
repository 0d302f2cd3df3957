# SPDX-License-Identifier: Apache-2.0
"""Re-resolve the pins of a requirements file from the `# lock:` lines at its top.

    python definitions/requirements/lock.py definitions/requirements/cuda-cv.txt

Each file names the top-level packages, the base it lands on (base/*.txt:
what the base image's Python already has, at its exact versions, local
labels included; NGC's own /etc/pip/constraint.txt is such a list) and the
base's Python and glibc. pip resolves the closure for that target without
installing anything; the base's torch (and the other STUB packages) are
offered as empty stand-in wheels, so their own dependencies stay the base's
business. The stand-ins carry the target's most specific wheel tag and the
base's exact version, so the index's torch can never win over them (it did:
its CUDA libraries leaked into a ROCm file); a STUB resolved from anywhere
else is an error. The KEEP packages (STUB and numpy: install-hpcai.sh never
replaces them) are held at the base's versions; other base packages may
resolve newer (the image's venv then shadows the base's copy where the
stack needs it) and are left out of the output where they resolve to the
base's version. A top-level pin of a base KEEP package (sglang==...) is kept
as an assertion that install-hpcai.sh checks; `rename=a:b` resolves `a` (on the
index) for `b` (a vendor build that is not). The result replaces the pin
lines below the header. Needs network to the index.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

HERE = Path(__file__).parent
# Builds that come with the base image and are never on the index at that version.
STUB = {"torch", "torchvision", "torchaudio", "triton", "pytorch-triton", "pytorch-triton-rocm",
        "sglang", "sgl-kernel", "sglang-kernel", "flashinfer-python"}
# What install-hpcai.sh never replaces (its KEEP): held at the base's versions.
KEEP = STUB | {"numpy"}


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            out[normalise(name)] = version
    return out


def public(version: str) -> str:
    return version.split("+", 1)[0]


def stub_wheel(folder: Path, name: str, version: str, tag: str) -> None:
    """An empty wheel: the base's build, tagged for the target as specifically as can be."""
    dist = f"{name.replace('-', '_')}-{version}"
    with zipfile.ZipFile(folder / f"{dist}-{tag}.whl", "w") as whl:
        whl.writestr(f"{dist}.dist-info/METADATA",
                     f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        whl.writestr(f"{dist}.dist-info/WHEEL",
                     f"Wheel-Version: 1.0\nGenerator: lock.py\nRoot-Is-Purelib: false\nTag: {tag}\n")
        whl.writestr(f"{dist}.dist-info/RECORD", "")


def resolve(lock: dict[str, str]) -> list[str]:
    base = pins(HERE / lock["base"])
    major, minor = lock.get("glibc", "2.39").split(".")
    platforms = [f"manylinux_2_{m}_x86_64" for m in range(int(minor), 16, -1)]
    platforms += ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]
    py = lock["python"].replace(".", "")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "stubs").mkdir()
        for name, version in base.items():
            if name in STUB:
                stub_wheel(tmp / "stubs", name, version, f"cp{py}-cp{py}-{platforms[0]}")
        (tmp / "constraints.txt").write_text("".join(f"{n}=={v}\n" for n, v in base.items() if n in KEEP))
        # A top-level pin of a base KEEP package asserts the base's version: kept as is, not resolved.
        top = lock["top"].split()
        asserted = [t for t in top if normalise(t.split("==")[0]) in base.keys() & KEEP]
        (tmp / "top.txt").write_text("\n".join(t for t in top if t not in asserted) + "\n")
        cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
               "--report", str(tmp / "report.json"), "--only-binary=:all:",
               "--python-version", lock["python"], "--implementation", "cp",
               *[arg for p in platforms for arg in ("--platform", p)],
               "--find-links", str(tmp / "stubs"), "-c", str(tmp / "constraints.txt"),
               "-r", str(tmp / "top.txt")]
        subprocess.run(cmd, check=True)
        report = json.loads((tmp / "report.json").read_text())
        stubs_url = (tmp / "stubs").as_uri()
    resolved = {normalise(item["metadata"]["name"]): item["metadata"]["version"]
                for item in report["install"]}
    for item in report["install"]:
        name, url = normalise(item["metadata"]["name"]), item["download_info"]["url"]
        if name in STUB and not url.startswith(stubs_url):
            raise SystemExit(f"lock.py: {name} resolved from {url}, not the base's stand-in: "
                             f"give base/{Path(lock['base']).name} its exact version (local label included)")
    # A build that is not on the index resolves as its twin that is, then takes its name.
    renames = dict(pair.split(":") for pair in lock.get("rename", "").split())
    return sorted([f"{renames.get(n, n)}=={v}" for n, v in resolved.items()
                   if n not in base or public(base[n]) != public(v)]
                  + asserted)


def main(paths: list[str]) -> int:
    for path in map(Path, paths):
        lines = path.read_text().splitlines()
        header = lines[:next((i for i, ln in enumerate(lines) if ln.strip() and not ln.startswith("#")),
                             len(lines))]
        lock = {}
        for line in header:
            if line.startswith("# lock:"):
                for field in line[len("# lock:"):].split(";"):
                    key, _, value = field.strip().partition("=")
                    lock[key] = f"{lock.get(key, '')} {value}".strip()
        if not {"python", "base", "top"} <= lock.keys():
            print(f"{path}: needs '# lock: python=X.Y; base=base/NAME.txt; top=PKG==V ...'", file=sys.stderr)
            return 2
        path.write_text("\n".join(header + resolve(lock)) + "\n")
        print(f"{path}: {len(pins(path))} pins")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

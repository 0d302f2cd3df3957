"""Fixtures for the image tests: a real Apptainer (tools/apptainer-sid on
Debian 12 hosts, set up by `make setup-system`), a tiny real SIF image, and a
real OCI registry (Debian's docker-registry) on a loopback port."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

HPCAI_LABELS = {"org.hpcai.version": "0.1.0", "org.hpcai.commit": "0" * 40,
                "org.hpcai.flavour": "cpu", "org.hpcai.family": "cv",
                "org.hpcai.workloads": "resnet50,vit-l16,sd2", "org.hpcai.base-image": "tiny"}


@pytest.fixture(scope="session")
def apptainer_exe() -> str:
    path = shutil.which("apptainer")
    if path is None:
        pytest.fail("apptainer is not on PATH: run `make setup-system` as root "
                    "(tools/apptainer-sid/setup.sh), or install Apptainer 1.2+")
    return path


def _copy_with_libraries(binary: str, root: Path) -> None:
    """A dynamic binary and the shared libraries ldd names, at the same paths."""
    out = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
    paths = [binary] + [part for line in out.splitlines() for part in line.split()
                        if part.startswith("/")]
    for path in paths:
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(os.path.realpath(path), target)


def build_tiny_image(apptainer: str, folder: Path, name: str, labels: dict[str, str]) -> Path:
    """A real SIF of a few MB (sh and cat with their libraries) carrying labels."""
    rootfs = folder / f"{name}-rootfs"
    for binary in ("/bin/sh", "/bin/cat"):
        _copy_with_libraries(binary, rootfs)
    base = folder / f"{name}-base.sif"
    subprocess.run([apptainer, "build", "--force", str(base), str(rootfs)], check=True,
                   capture_output=True)
    definition = folder / f"{name}.def"
    label_lines = "\n".join(f"    {k} {v}" for k, v in labels.items())
    definition.write_text(f"Bootstrap: localimage\nFrom: {base}\n\n%labels\n{label_lines}\n\n"
                          "%runscript\n    echo tiny-image \"$@\"\n")
    image = folder / f"{name}.sif"
    subprocess.run([apptainer, "build", "--fakeroot", "--force", str(image), str(definition)],
                   check=True, capture_output=True)
    return image


@pytest.fixture(scope="session")
def tiny_image(apptainer_exe, tmp_path_factory) -> Path:
    return build_tiny_image(apptainer_exe, tmp_path_factory.mktemp("tiny-image"), "tiny",
                            HPCAI_LABELS)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def registry(tmp_path):
    """A real OCI registry (Debian's docker-registry, distribution v2) over http."""
    exe = shutil.which("docker-registry")
    if exe is None:
        pytest.fail("docker-registry is not installed: run `make setup-system` as root "
                    "(apt-get install docker-registry)")
    port = _free_port()
    config = tmp_path / "registry.yml"
    config.write_text(f"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {tmp_path / 'blobs'}\n"
                      f"http:\n  addr: 127.0.0.1:{port}\n")
    log = open(tmp_path / "registry.log", "w")
    proc = subprocess.Popen([exe, "serve", str(config)], stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.1)
    else:
        proc.kill()
        pytest.fail(f"docker-registry did not listen on port {port}: {(tmp_path / 'registry.log').read_text()}")
    yield f"oras://127.0.0.1:{port}/hpcai"
    proc.terminate()
    proc.wait(timeout=10)
    log.close()


@pytest.fixture(scope="session")
def signing_keys(tmp_path_factory) -> tuple[Path, Path]:
    """A PEM key pair for `apptainer sign --key` / `verify --key`."""
    folder = tmp_path_factory.mktemp("keys")
    private, public = folder / "sign.pem", folder / "sign.pub.pem"
    subprocess.run(["openssl", "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048",
                    "-out", str(private)], check=True, capture_output=True)
    subprocess.run(["openssl", "pkey", "-in", str(private), "-pubout", "-out", str(public)],
                   check=True, capture_output=True)
    return private, public


HOST_CERTS = Path("/etc/ssl/certs/ca-certificates.crt")
# For tests that use cpu_cv_image: pytest-timeout counts its build as theirs.
IMAGE_BUILD_TIMEOUT_S = 2700


def ci_site(folder: Path, images: Path) -> Path:
    """A site for this machine: pip inside the build trusts the host's CA bundle
    (a build-time setting, never baked into the image)."""
    # gzip at level 1, not mksquashfs's 9: the suite builds the cv image each session.
    lines = ['name = "ci"', "[images]", f'dir = "{images}"',
             'mksquashfs_args = ["-Xcompression-level", "1"]']
    if HOST_CERTS.exists():
        lines += ['build_binds = ["/etc/ssl/certs:/mnt/host-certs"]',
                  'build_args = {PIP_CERT = "/mnt/host-certs/ca-certificates.crt"}']
    path = folder / "ci-site.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="session")
def cpu_cv_image(apptainer_exe, tmp_path_factory) -> dict:
    """The CPU `cv` image built from definitions/cpu/ by `hpcai-launch images build`
    (minutes), once per session. HPCAI_TEST_IMAGES_DIR keeps it between sessions."""
    keep = os.environ.get("HPCAI_TEST_IMAGES_DIR")
    images = Path(keep) if keep else tmp_path_factory.mktemp("images")
    site = ci_site(tmp_path_factory.mktemp("ci-site"), images)
    env = {k: v for k, v in os.environ.items() if k != "HPCAI_IMAGES_DIR"}
    env["PYTHONUNBUFFERED"] = "1"
    proc = subprocess.run([sys.executable, "-m", "hpcai.launcher.cli", "images", "build",
                           "--site", str(site), "--flavour", "cpu", "--family", "cv"],
                          capture_output=True, text=True, env=env, timeout=IMAGE_BUILD_TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr[-4000:]
    image = images / "hpcai-cpu-cv.sif"
    assert image.is_file()
    return {"image": image, "site": site, "build_output": proc.stderr}

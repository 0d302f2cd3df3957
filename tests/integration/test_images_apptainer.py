"""The image commands and the Apptainer runtime against a real Apptainer, a
tiny real SIF and a real OCI registry. (The CPU `cv` image itself is built
and run in test_cpu_image.py.)"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from hpcai.errors import ImageError, RuntimeNotFoundError
from hpcai.launcher.images import store
from hpcai.launcher.images.apptainer import Apptainer

LAUNCHER = [sys.executable, "-m", "hpcai.launcher.cli"]


def write_site(folder: Path, images: Path, **image_keys) -> Path:
    lines = ['name = "imgtest"', "[images]", f'dir = "{images}"']
    lines += [f"{k} = {json.dumps(v)}" for k, v in image_keys.items()]
    path = folder / "imgtest.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def launch(*args, env=None, **kwargs) -> subprocess.CompletedProcess:
    env = {**os.environ, "HPCAI_STATE_DIR": "/tmp/hpcai-test-state", **(env or {})}
    env.pop("HPCAI_IMAGES_DIR", None)
    return subprocess.run([*LAUNCHER, *args], capture_output=True, text=True, env=env,
                          timeout=600, **kwargs)


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    """The error line; unlike conftest's, image commands may log progress on stderr too."""
    assert proc.returncode != 0, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("hpcai-launch: error:")]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def test_labels_through_spython_with_only_an_apptainer_executable(tiny_image, apptainer_exe,
                                                                   tmp_path, monkeypatch):
    # Sites need not keep the `singularity` link that spython would run.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "apptainer").symlink_to(apptainer_exe)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin:/usr/sbin:/sbin")
    assert shutil.which("singularity") is None
    labels = Apptainer("apptainer").labels(tiny_image)
    assert store.hpcai_labels(labels)["family"] == "cv"
    assert labels["org.hpcai.commit"] == "0" * 40


def test_failed_build_is_an_error_and_leaves_the_old_image_alone(apptainer_exe, tiny_image, tmp_path):
    definition = tmp_path / "broken.def"
    definition.write_text(f"Bootstrap: localimage\nFrom: {tiny_image}\n\n%post\n    exit 3\n")
    target = tmp_path / "out.sif"
    target.write_bytes(b"an earlier image")
    log = tmp_path / "build.log"
    with pytest.raises(ImageError) as err:
        Apptainer().build(definition, target, build_args={}, log_path=log)
    assert "failed" in err.value.one_line() and str(log) in err.value.one_line()
    assert target.read_bytes() == b"an earlier image"
    assert log.read_text().strip()
    assert not list(tmp_path.glob(".out.sif.*"))  # no partial file left behind


@pytest.mark.parametrize("uri", ["oras://127.0.0.1:9/hpcai/nothing:1", "ftp://example.org/x.sif"])
def test_failed_pull_is_one_error_and_leaves_nothing(apptainer_exe, tmp_path, uri):
    target = tmp_path / "pulled.sif"
    with pytest.raises(ImageError) as err:
        Apptainer().pull(uri, target, https=False)
    assert "\n" not in err.value.one_line() and uri.split("//")[0] in err.value.one_line()
    assert not target.exists() and not list(tmp_path.iterdir())


def test_push_signs_and_pull_verifies_through_a_real_registry(tiny_image, registry, signing_keys,
                                                              tmp_path):
    private, public = signing_keys
    source_dir, dest_dir = tmp_path / "build-host", tmp_path / "node"
    source_dir.mkdir()
    shutil.copy(tiny_image, source_dir / "hpcai-cpu-cv.sif")
    site = write_site(tmp_path, source_dir, registry=registry, registry_https=False,
                      sign_key=str(private))
    pushed = launch("images", "push", "--site", str(site), "--flavour", "cpu", "--family", "cv",
                    "--tag", "t1")
    assert pushed.returncode == 0, pushed.stderr
    assert "signed" in pushed.stderr and f"{registry}/hpcai-cpu-cv:t1" in pushed.stderr

    (tmp_path / "n").mkdir()
    node_site = write_site(tmp_path / "n", dest_dir, registry=registry, registry_https=False,
                           verify_key=str(public))
    pulled = launch("images", "pull", "--site", str(node_site), "--flavour", "cpu",
                    "--family", "cv", "--tag", "t1")
    assert pulled.returncode == 0, pulled.stderr
    image = dest_dir / "hpcai-cpu-cv.sif"
    assert "verified" in pulled.stderr
    # The pulled file is the signed one that was pushed, byte for byte.
    assert store.sha256(image) == store.sha256(source_dir / "hpcai-cpu-cv.sif")
    verified = launch("images", "verify", "--site", str(node_site), "--flavour", "cpu",
                      "--family", "cv")
    assert verified.returncode == 0 and "verified" in verified.stdout


def push_unsigned_to_a_verifying_node(tiny_image, registry, signing_keys, tmp_path,
                                      *tag: str) -> tuple[Path, Path]:
    """An unsigned image pushed from a build host, and a node whose site verifies."""
    _private, public = signing_keys
    images = tmp_path / "build"
    images.mkdir()
    shutil.copy(tiny_image, images / "hpcai-cpu-cv.sif")
    site = write_site(tmp_path, images, registry=registry, registry_https=False)
    assert launch("images", "push", "--site", str(site), "--flavour", "cpu", "--family", "cv",
                  *tag).returncode == 0
    node = tmp_path / "node"
    node.mkdir()
    return node, write_site(node, node / "images", registry=registry, registry_https=False,
                            verify_key=str(public))


def test_pull_that_does_not_verify_leaves_no_image(tiny_image, registry, signing_keys, tmp_path):
    node, node_site = push_unsigned_to_a_verifying_node(tiny_image, registry, signing_keys,
                                                        tmp_path, "--tag", "unsigned")
    proc = launch("images", "pull", "--site", str(node_site), "--flavour", "cpu", "--family", "cv",
                  "--tag", "unsigned")
    assert "does not verify" in one_line_error(proc)
    assert not (node / "images" / "hpcai-cpu-cv.sif").exists()


def test_runtime_apptainer_pulls_a_missing_image_and_records_its_digest(tiny_image, registry, tmp_path):
    images = tmp_path / "build"
    images.mkdir()
    shutil.copy(tiny_image, images / "hpcai-cpu-cv.sif")
    site = write_site(tmp_path, images, registry=registry, registry_https=False)
    assert launch("images", "push", "--site", str(site), "--flavour", "cpu", "--family", "cv").returncode == 0
    node = tmp_path / "node"
    node.mkdir()
    node_site = write_site(node, node / "images", registry=registry, registry_https=False)
    proc = launch("resnet50", "--preset", "tiny", "--runtime", "apptainer", "--site", str(node_site),
                  "-o", str(tmp_path / "results"), "--dry-run", "--json")
    assert proc.returncode == 0, proc.stderr
    assert "pulling" in proc.stderr
    spec = json.loads(proc.stdout[:proc.stdout.rindex("command:")])
    image = node / "images" / "hpcai-cpu-cv.sif"
    assert spec["runtime"]["kind"] == "apptainer"
    assert spec["runtime"]["image"]["sha256"] == store.sha256(image)
    assert spec["runtime"]["image"]["labels"]["org.hpcai.family"] == "cv"
    command = proc.stdout[proc.stdout.rindex("command:"):]
    assert " exec --cleanenv " in command and str(image) in command
    assert f"--bind {tmp_path / 'results'}:{tmp_path / 'results'}" in command


def test_missing_image_says_how_to_get_it(apptainer_exe, tmp_path):
    site = write_site(tmp_path, tmp_path / "empty")
    line = one_line_error(launch("resnet50", "--preset", "tiny", "--runtime", "apptainer",
                                 "--site", str(site), "--dry-run", "--json"))
    assert "hpcai-cpu-cv.sif is not in" in line and "make images" in line


def test_auto_runtime_uses_the_host_when_the_image_is_absent(apptainer_exe, tmp_path):
    site = write_site(tmp_path, tmp_path / "empty")
    proc = launch("resnet50", "--preset", "tiny", "--site", str(site), "--dry-run", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout[:proc.stdout.rindex("command:")])["runtime"]["kind"] == "host"


def test_auto_runtime_uses_the_image_when_present(tiny_image, tmp_path):
    images = tmp_path / "images"
    images.mkdir()
    shutil.copy(tiny_image, images / "hpcai-cpu-cv.sif")
    site = write_site(tmp_path, images)
    proc = launch("resnet50", "--preset", "tiny", "--nproc", "1", "--site", str(site), "--dry-run", "--json")
    assert proc.returncode == 0, proc.stderr
    command = proc.stdout[proc.stdout.rindex("command:"):]
    # One process: the image's %runscript is the entrypoint.
    assert " run --cleanenv " in command and command.rstrip().endswith("spec.json")
    assert f"{images / 'hpcai-cpu-cv.sif'} run --spec " in command


def test_image_of_another_family_is_refused(apptainer_exe, tiny_image, tmp_path):
    line = one_line_error(launch("llama3-8b-pretrain", "--preset", "tiny", "--image", str(tiny_image),
                                 "--dry-run", "--json"))
    assert "carries the 'cv' family" in line and "llm-train" in line


def test_apptainer_not_installed(tmp_path):
    env = {"PATH": "/usr/bin:/bin"}  # the shim lives in /usr/local/bin
    if shutil.which("apptainer", path=env["PATH"]):
        pytest.fail("this test needs apptainer outside /usr/bin")
    line = one_line_error(launch("resnet50", "--preset", "tiny", "--runtime", "apptainer",
                                 "--dry-run", "--json", env=env))
    assert "Apptainer is not installed" in line and "--runtime host" in line
    line = one_line_error(launch("images", "build", "--flavour", "cpu", env=env))
    assert "Apptainer is not installed" in line


def test_unsigned_image_fails_verify_with_a_key(tiny_image, signing_keys, tmp_path):
    _private, public = signing_keys
    line = one_line_error(launch("images", "verify", "--key", str(public), str(tiny_image)))
    assert "does not verify" in line


def test_registryless_site_cannot_push(tiny_image, tmp_path):
    images = tmp_path / "images"
    images.mkdir()
    shutil.copy(tiny_image, images / "hpcai-cpu-cv.sif")
    line = one_line_error(launch("images", "push", "--site", str(write_site(tmp_path, images)),
                                 "--flavour", "cpu", "--family", "cv"))
    assert "names no image registry" in line


def test_images_list_shows_labels_and_digest(tiny_image, tmp_path):
    images = tmp_path / "images"
    images.mkdir()
    shutil.copy(tiny_image, images / "hpcai-cpu-cv.sif")
    proc = launch("images", "list", "--json", "--site", str(write_site(tmp_path, images)))
    assert proc.returncode == 0, proc.stderr
    rows = {(r["flavour"], r["family"]): r for r in json.loads(proc.stdout)["images"]}
    row = rows[("cpu", "cv")]
    assert row["present"] and row["sha256"] == store.sha256(images / "hpcai-cpu-cv.sif")
    assert row["labels"]["family"] == "cv"
    assert not rows[("cuda", "cv")]["present"]


def test_missing_executable_error_is_typed(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(RuntimeNotFoundError):
        Apptainer("apptainer")


def test_runtime_pull_that_does_not_verify_leaves_no_image(tiny_image, registry, signing_keys, tmp_path):
    node, node_site = push_unsigned_to_a_verifying_node(tiny_image, registry, signing_keys,
                                                        tmp_path)
    line = one_line_error(launch("resnet50", "--preset", "tiny", "--runtime", "apptainer",
                                 "--site", str(node_site), "--dry-run", "--json"))
    assert "does not verify" in line
    assert not (node / "images" / "hpcai-cpu-cv.sif").exists()


def _sid_shim_root(apptainer_exe: str) -> str | None:
    """The sid root of the tools/apptainer-sid shim installed as `apptainer`, if it is one."""
    text = Path(apptainer_exe).read_text(errors="replace")
    if "Runs Debian sid's Apptainer" not in text:
        return None
    return next(line.split("=", 1)[1] for line in text.splitlines()
                if line.startswith("ROOT_DEFAULT="))


def test_sid_shim_sees_the_working_folder_on_every_call(apptainer_exe, tiny_image, tmp_path):
    # CI checks the repository out outside the shim's bound folders (/check/...).
    # The first call leaves its mount point behind in the sid root; later calls
    # must still bind the working folder, not find an empty folder there.
    root = _sid_shim_root(apptainer_exe)
    if root is None:
        pytest.skip("this host's apptainer is its own, not the tools/apptainer-sid shim")
    shim = Path(__file__).resolve().parents[2] / "tools" / "apptainer-sid" / "shim.sh"
    work = tmp_path / "checkout"
    work.mkdir()
    shutil.copy(tiny_image, work / "tiny.sif")
    env = {**os.environ, "HPCAI_APPTAINER_ROOT": root, "HPCAI_APPTAINER_BINDS": "/var/tmp"}
    for call in (1, 2):
        proc = subprocess.run(["bash", str(shim), "run", "tiny.sif", f"call-{call}"], cwd=work,
                              env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, f"call {call}: {proc.stderr}"
        assert f"tiny-image call-{call}" in proc.stdout


def test_build_needs_only_its_source_copy_visible_to_apptainer(apptainer_exe, tiny_image,
                                                               tmp_path, monkeypatch):
    # A checkout Apptainer cannot see (the sid shim here binds only /var/tmp):
    # the build must read the definition from the source copy beside the image.
    from hpcai.launcher.images import build
    from hpcai.launcher.site.config import DEFAULTS

    checkout = tmp_path / "checkout"
    (checkout / "definitions" / "cpu").mkdir(parents=True)
    (checkout / "pyproject.toml").write_text("")
    visible = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="hpcai-build-test-"))
    try:
        base = visible / "base.sif"  # the tiny image's unlabelled base: labels come from here
        shutil.copy(tiny_image.with_name("tiny-base.sif"), base)
        (checkout / "definitions" / "cpu" / "cv.def").write_text(
            f"Bootstrap: localimage\nFrom: {base}\n\n%arguments\n    HPCAI_COMMIT=unknown\n\n"
            "%labels\n    org.hpcai.flavour cpu\n    org.hpcai.family cv\n"
            "    org.hpcai.commit {{ HPCAI_COMMIT }}\n")
        monkeypatch.setattr(build, "repository_root", lambda: checkout)
        monkeypatch.setenv("HPCAI_APPTAINER_BINDS", "/var/tmp")
        monkeypatch.setenv("HPCAI_IMAGES_DIR", str(visible / "images"))
        site = {**DEFAULTS, "name": "t", "path": ""}
        image = build.build_one(site, "cpu", "cv", extra_args={}, extra_binds=[],
                                fakeroot=True, force=True, apptainer=Apptainer(apptainer_exe),
                                echo=lambda line: None)
        assert image == visible / "images" / "hpcai-cpu-cv.sif" and image.is_file()
        assert store.hpcai_labels(Apptainer(apptainer_exe).labels(image))["family"] == "cv"
    finally:
        shutil.rmtree(visible, ignore_errors=True)

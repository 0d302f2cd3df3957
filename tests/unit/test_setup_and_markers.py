"""Set-up as a newcomer meets it: packaging without setuptools warnings, a
`make test-fast` that needs neither root nor system services, and system
packages installed lean, with no test service left enabled at boot."""
import re
import subprocess
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]


def test_every_folder_of_package_data_is_a_listed_package():
    # setuptools warns ("Package 'hpcai.schema' is absent from the `packages`
    # configuration") for data folders that are not listed packages.
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages = set(config["packages"])
    for folder in (ROOT / "hpcai").rglob("*"):
        if folder.is_dir() and folder.name != "__pycache__" and any(folder.iterdir()):
            name = "hpcai." + ".".join(folder.relative_to(ROOT / "hpcai").parts)
            assert name in packages, f"{folder} holds files but {name} is not in packages"
    for package, patterns in config["package-data"].items():
        assert package in packages and patterns


def test_every_python_package_folder_is_installed():
    """A package folder missing from pyproject works in an editable checkout but is
    absent from a real install (a GPU node's `pip install .`, an image)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {Path(path): name for name, path in config["package-dir"].items()}
    for top, name in list(folders.items()):
        for init in (ROOT / top).rglob("__init__.py"):
            if "__pycache__" in init.parts:
                continue
            package = ".".join([name, *init.parent.relative_to(ROOT / top).parts])
            assert package in config["packages"], f"{init.parent} is a package but {package} is not in packages"
            if init.parent != ROOT / top:
                assert package in config["package-dir"] or any(
                    package.startswith(p + ".") for p in config["package-dir"]), package


def _recipe(target: str) -> tuple[str, str]:
    text = (ROOT / "Makefile").read_text()
    match = re.search(rf"^{re.escape(target)}:(.*)\n((?:\t.*\n|#.*\n)*)", text, re.M)
    assert match, target
    return match.group(1), match.group(2)


def test_test_fast_needs_no_system_setup_and_deselects_system_tests():
    prerequisites, recipe = _recipe("test-fast")
    assert "setup-system" not in prerequisites
    assert '-m "not system"' in recipe
    # `make test` runs everything in one session: the service tests as one unit of
    # work (tests/service_scheduling.py), which needs --dist loadfile.
    prerequisites, recipe = _recipe("test")
    assert "setup-system" in prerequisites
    assert "system" not in recipe and "--dist loadfile" in recipe


def test_system_packages_come_without_recommends_and_services_stay_off_at_boot():
    text = (ROOT / "Makefile").read_text() + (ROOT / "tools/apptainer-sid/setup.sh").read_text()
    installs = re.findall(r"apt-get install -y[^;\n]*", text)
    assert installs and all("--no-install-recommends" in line for line in installs), installs
    _, recipe = _recipe("setup-system")
    assert "tools/disable-test-services.sh" in recipe
    script = (ROOT / "tools/disable-test-services.sh").read_text()
    for service in ("docker-registry", "munge", "slurmctld", "slurmd", "openipmi", "prometheus"):
        assert service in script


def test_system_marker_follows_the_service_fixtures():
    # Collect only: which tests `make test-fast` keeps and which it leaves to `make test`.
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "-m", "system", "tests/integration"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    system = {line.split("::")[0] for line in done.stdout.splitlines() if "::" in line}
    assert {"tests/integration/test_report_html_browser.py", "tests/integration/test_slurm_cluster.py",
            "tests/integration/test_cpu_image.py"} <= system
    names = [line for line in done.stdout.splitlines() if "::" in line]
    assert any("test_push_signs_and_pull_verifies" in n for n in names)
    # Tests that need no service stay in the fast set.
    assert not any("test_apptainer_not_installed" in n for n in names)
    assert "tests/integration/test_launch.py" not in system
    assert "tests/integration/test_power_signals.py" not in system


def test_the_disable_script_turns_off_exactly_the_test_services_at_boot(tmp_path):
    """Real systemctl, on a scratch root (systemctl --root): the host is untouched."""
    import shutil

    import pytest

    if shutil.which("systemctl") is None:
        pytest.skip("no systemctl on this machine: the script does nothing there (by design)")
    units, wants = tmp_path / "lib/systemd/system", tmp_path / "etc/systemd/system/multi-user.target.wants"
    units.mkdir(parents=True)
    wants.mkdir(parents=True)
    names = ["docker-registry", "munge", "slurmctld", "slurmd", "openipmi", "prometheus", "avahi-daemon"]
    for name in names:
        (units / f"{name}.service").write_text(
            f"[Unit]\nDescription={name}\n[Service]\nExecStart=/bin/true\n"
            "[Install]\nWantedBy=multi-user.target\n")
        (wants / f"{name}.service").symlink_to(f"/lib/systemd/system/{name}.service")
    done = subprocess.run([str(ROOT / "tools/disable-test-services.sh"), "--root", str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in wants.iterdir()) == ["avahi-daemon.service"]  # not ours: kept
    assert done.stderr.count("disabled") == 6
    again = subprocess.run([str(ROOT / "tools/disable-test-services.sh"), "--root", str(tmp_path)],
                           capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and again.stderr == ""  # safe to rerun

"""The one place that talks to Apptainer, through spython.

spython has sharp edges (shared/notes/facts.md), each handled here so no
other module sees them:
- it always runs an executable named `singularity`: the command it builds
  gets the configured Apptainer executable instead;
- `build` prepends sudo unless told not to, and reports failure by returning
  None, so a stale file at the target looks like success: builds and pulls go
  to a fresh file in a private folder (hpcai/safe_files.py written_by_a_tool)
  that replaces the target only after a clean exit;
- results come back as a string, a list or a dict with `return_code`
  depending on the outcome: `_result` turns them into (code, text);
- a bad URI or bind path ends in `SystemExit`: caught and turned into our
  ImageError;
- streaming with the default stream type can stall on a full stderr pipe:
  builds stream stdout and stderr together.
"""
from __future__ import annotations

import contextlib
import io
import json
import shutil
import subprocess
from pathlib import Path
from typing import Callable, Iterable

from hpcai.errors import ImageError, RuntimeNotFoundError


def _client(executable: str):
    from spython.main import get_client

    client = get_client(quiet=True)
    build_command = client._init_command

    def init_command(action, flags=None):
        cmd = build_command(action, flags)
        cmd[0] = executable
        return cmd

    client._init_command = init_command
    return client


def _result(raw) -> tuple[int, str]:
    """spython's str | list | dict outcomes as (exit code, text)."""
    if isinstance(raw, dict):
        message = raw.get("message", "")
        text = "".join(message) if isinstance(message, list) else str(message or "")
        return int(raw.get("return_code", 1)), text
    if isinstance(raw, list):
        return 0, "".join(str(x) for x in raw)
    return 0, "" if raw is None else str(raw)


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    # Apptainer's own verdict is its FATAL/ERROR line; else the last thing it said.
    for line in reversed(lines):
        if line.startswith(("FATAL", "ERROR")) or "\x1b[91mERROR" in line:
            return line.replace("\x1b[91m", "").replace("\x1b[0m", "")
    return lines[-1] if lines else "no output"


@contextlib.contextmanager
def _spython_exits(what: str, hint: str):
    """spython calls sys.exit on some bad input; that must not end the launcher."""
    try:
        with contextlib.redirect_stdout(io.StringIO()) as quiet:
            yield
    except SystemExit:
        said = _last_line(quiet.getvalue()) if quiet.getvalue() else "spython refused it"
        raise ImageError(f"{what}: {said}", hint) from None


class Apptainer:
    """An Apptainer installation: build, inspect, pull, push, sign, verify."""

    def __init__(self, executable: str = "apptainer"):
        path = shutil.which(executable)
        if path is None:
            raise RuntimeNotFoundError(
                f"Apptainer is not installed (no {executable!r} on PATH)",
                "install Apptainer 1.2+ (apptainer.org), set [apptainer] executable in the "
                "site config, or use --runtime host")
        self.executable = path
        self.client = _client(path)

    @classmethod
    def find(cls, executable: str = "apptainer") -> "Apptainer | None":
        try:
            return cls(executable)
        except RuntimeNotFoundError:
            return None

    def version(self) -> str:
        out = subprocess.run([self.executable, "--version"], capture_output=True, text=True,
                             timeout=60)
        return out.stdout.strip().rsplit(" ", 1)[-1] if out.returncode == 0 else "unknown"

    # ---- build -------------------------------------------------------------------------
    def build(self, definition: Path, image: Path, *, build_args: dict[str, str],
              binds: Iterable[str] = (), fakeroot: bool = True,
              mksquashfs_args: Iterable[str] = (),
              on_line: Callable[[str], None] = lambda line: None, log_path: Path | None = None,
              ) -> Path:
        """Build DEFINITION into IMAGE; every output line goes to on_line and the log."""
        from hpcai.safe_files import written_by_a_tool

        image = Path(image)
        image.parent.mkdir(parents=True, exist_ok=True)
        # Apptainer writes it in a private folder; only a clean exit moves it into place.
        with written_by_a_tool(image) as partial:
            options = ["--fakeroot"] if fakeroot else []
            # A file, not --build-arg: that flag splits values on commas (HPCAI_WORKLOADS has them).
            args_file = partial.with_name(f"{partial.name}.args")
            args_file.write_text("".join(f"{k}={v}\n" for k, v in sorted(build_args.items())))
            # A site may pass arguments some definitions do not use: warn, do not fail.
            options += ["--build-arg-file", str(args_file), "--warn-unused-build-args"]
            for bind in binds:
                options += ["--bind", bind]
            if mksquashfs_args:  # one string: Apptainer splits it at spaces
                options += ["--mksquashfs-args", " ".join(mksquashfs_args)]
            cmd = self.client._init_command("build") + options + [str(partial), str(definition)]
            self._stream_build(cmd, image, definition, on_line, log_path)
            if not partial.is_file():
                raise ImageError(f"apptainer build reported success but wrote no {image.name}",
                                 "check free space and the build log")
        return image

    def _stream_build(self, cmd: list[str], image: Path, definition: Path,
                      on_line: Callable[[str], None], log_path: Path | None) -> None:
        from spython.utils import stream_command

        log = open(log_path, "w") if log_path else None
        try:
            for line in stream_command(cmd, output_type="both"):
                if log:
                    log.write(line)
                    log.flush()
                on_line(line.rstrip("\n"))
        except subprocess.CalledProcessError as exc:
            where = f"; the build log is {log_path}" if log_path else ""
            raise ImageError(f"building {image.name} from {definition} failed "
                             f"(apptainer exited with {exc.returncode}){where}",
                             "fix the error in the log, then run the build again") from None
        finally:
            if log:
                log.close()

    # ---- inspect -----------------------------------------------------------------------
    def labels(self, image: Path) -> dict[str, str]:
        with _spython_exits(f"cannot inspect {image}", "check that it is a SIF image"):
            raw = self.client.inspect(str(image), quiet=True)
        if isinstance(raw, dict) and "return_code" in raw:
            code, text = _result(raw)
            raise ImageError(f"cannot inspect {image}: {_last_line(text)}",
                             "check that it is a SIF image (rebuild or pull it again)")
        attributes = raw.get("attributes", raw) if isinstance(raw, dict) else {}
        labels = attributes.get("labels") or {}
        if isinstance(labels, str):
            labels = json.loads(labels)
        return {str(k): str(v) for k, v in labels.items()}

    # ---- registry ----------------------------------------------------------------------
    def pull(self, uri: str, image: Path, *, https: bool = True) -> Path:
        from hpcai.safe_files import written_by_a_tool

        image = Path(image)
        image.parent.mkdir(parents=True, exist_ok=True)
        flags = [] if https else ["--no-https"]
        with written_by_a_tool(image) as partial:
            with _spython_exits(f"cannot pull {uri}", "check the registry address in the site config"):
                cmd = self.client._init_command("pull") + flags + [str(partial), uri]
                code, text = self._run(cmd)
            if code != 0 or not partial.is_file():
                raise ImageError(f"pulling {uri} failed: {_last_line(text)}",
                                 "check the registry and tag (`hpcai-launch images list`), "
                                 "or build it with `make images`")
        return image

    def push(self, image: Path, uri: str, *, https: bool = True) -> None:
        flags = [] if https else ["--no-https"]
        code, text = self._run(self.client._init_command("push") + flags + [str(image), uri])
        if code != 0:
            raise ImageError(f"pushing {Path(image).name} to {uri} failed: {_last_line(text)}",
                             "check the registry address and your login (`apptainer registry login`)")

    def sign(self, image: Path, key: Path) -> None:
        code, text = self._run(self.client._init_command("sign") + ["--key", str(key), str(image)])
        if code != 0:
            raise ImageError(f"signing {Path(image).name} failed: {_last_line(text)}",
                             "check [images] sign_key in the site config (a PEM private key)")

    def verify(self, image: Path, key: Path) -> None:
        code, text = self._run(self.client._init_command("verify") + ["--key", str(key), str(image)])
        if code != 0:
            raise ImageError(f"{Path(image).name} does not verify against {key}: {_last_line(text)}",
                             "pull or build it again from a trusted source; do not run it")

    def _run(self, cmd: list[str]) -> tuple[int, str]:
        from spython.utils import run_command

        return _result(run_command(cmd, quiet=True))

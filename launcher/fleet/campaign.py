"""A campaign folder: one workload and cap list measured on many GPUs.

    CAMPAIGN/campaign.json                  what is measured (workload, preset, caps)
    CAMPAIGN/nodes/NODE/gpuINDEX/unit.json  one GPU: its identity and state
                                 selftest.json   its selftest (before any measurement)
                                 runs/           its sweep's results (hpcai-launch -o)
                                 launcher.log    the sweep's console output

Units are written by the launcher measuring them, as they finish; a campaign
folder may be shared by many nodes, so nothing here follows a symbolic link
and every file read is checked for its kind before it is believed.
"""
from __future__ import annotations

import json
import os
import re
import socket
from dataclasses import dataclass
from pathlib import Path

from hpcai.timestamps import now_iso
from hpcai.errors import ConfigError, UsageError

CAMPAIGN_KIND = "hpcai.fleet.campaign"
UNIT_KIND = "hpcai.fleet.unit"
FORMAT = 1
# States of a unit. Final ones are not measured again on resume.
FINAL_STATES = ("done", "selftest_failed")
STATES = ("pending", "selftest", "running", "done", "failed", "selftest_failed", "interrupted")
# A JSON file bigger than this is not one hpcai wrote.
MAX_JSON_BYTES = 64 * 1024 * 1024
_SAFE_NODE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def read_json(path: Path) -> dict | None:
    """A JSON object from a regular file that is not a symbolic link; None otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not (st.st_mode & 0o170000 == 0o100000) or st.st_size > MAX_JSON_BYTES:
            return None
        with os.fdopen(fd, "rb") as fh:
            fd = -1
            doc = json.loads(fh.read())
    except (OSError, ValueError):
        return None
    finally:
        if fd >= 0:
            os.close(fd)
    return doc if isinstance(doc, dict) else None


def write_json(path: Path, doc: dict) -> None:
    from hpcai.result_document import write_json_atomic

    write_json_atomic(path, doc)


def safe_dir(path: Path, what: str) -> Path:
    """Make a folder (and its parents); refuse one that is a symbolic link."""
    if path.is_symlink():
        raise ConfigError(f"{what} {path} is a symbolic link",
                          "give the real folder: the launcher does not follow links it "
                          "did not make")
    path.mkdir(parents=True, exist_ok=True)
    if path.is_symlink() or not path.is_dir():
        raise ConfigError(f"{what} {path} is not a folder", "give another -o")
    return path


def node_name(name: str | None = None) -> str:
    """This node's name: Slurm's (SLURMD_NODENAME) inside a job, else the hostname."""
    name = (name or os.environ.get("SLURMD_NODENAME") or socket.gethostname()).split(".")[0]
    if not _SAFE_NODE.match(name):
        raise ConfigError(f"node name {name!r} cannot name a folder",
                          "set a plain hostname on this node")
    return name


@dataclass
class Campaign:
    folder: Path
    doc: dict

    @property
    def workload(self) -> str:
        return self.doc["workload"]

    @property
    def caps(self) -> list[float]:
        return list(self.doc["caps_w"])

    def unit_dir(self, node: str, index: int) -> Path:
        return self.folder / "nodes" / node_name(node) / f"gpu{int(index)}"

    def units(self) -> list["Unit"]:
        """Every unit on disk, by node and index."""
        found = []
        nodes = self.folder / "nodes"
        if not nodes.is_dir() or nodes.is_symlink():
            return found
        for node in sorted(nodes.iterdir()):
            if node.is_symlink() or not node.is_dir():
                continue
            for gpu in sorted(node.iterdir()):
                if gpu.is_symlink() or not gpu.is_dir() or not gpu.name.startswith("gpu"):
                    continue
                doc = read_json(gpu / "unit.json")
                if doc and doc.get("kind") == UNIT_KIND:
                    found.append(Unit(gpu, doc))
        return sorted(found, key=lambda u: (u.node, u.index))


@dataclass
class Unit:
    folder: Path
    doc: dict

    @property
    def node(self) -> str:
        return str(self.doc.get("node"))

    @property
    def index(self) -> int:
        return int(self.doc.get("index", -1))

    @property
    def uuid(self) -> str | None:
        return self.doc.get("uuid")

    @property
    def state(self) -> str:
        return str(self.doc.get("state"))

    def save(self, **changes) -> None:
        self.doc.update(changes, updated=now_iso())
        write_json(self.folder / "unit.json", self.doc)


def campaign_doc(workload: str, preset: str | None, caps: list[float], mode: str,
                 command: list[str], run: dict | None = None) -> dict:
    """`run`: how each GPU is measured (passed-on options, selftest), for the nodes
    of a Slurm campaign, which read it here."""
    return {"kind": CAMPAIGN_KIND, "format": FORMAT, "workload": workload, "preset": preset,
            "caps_w": [float(c) for c in caps], "mode": mode, "created": now_iso(),
            "command": command, "run": run or {}}


def open_campaign(folder: str | Path) -> Campaign:
    """An existing campaign folder; a one-line error for anything else."""
    folder = Path(folder)
    if folder.is_symlink():
        raise ConfigError(f"campaign folder {folder} is a symbolic link",
                          "give the real folder")
    doc = read_json(folder / "campaign.json")
    if doc is None or doc.get("kind") != CAMPAIGN_KIND:
        raise UsageError(f"{folder} is not a fleet campaign (no readable campaign.json)",
                         "give a folder written by `hpcai-launch fleet run`")
    if doc.get("format") != FORMAT:
        raise ConfigError(f"campaign {folder} has format {doc.get('format')!r}, this hpcai "
                          f"reads format {FORMAT}", "report it with the hpcai that wrote it")
    return Campaign(folder, doc)


def check_resumable(folder: str | Path, fresh: dict) -> Campaign | None:
    """The campaign at folder if it measures the same thing (to resume), None where
    there is none yet; another workload, preset or cap list there is a one-line
    error, before anything runs."""
    folder = Path(folder)
    if (folder / "campaign.json").exists() or (folder / "campaign.json").is_symlink():
        campaign = open_campaign(folder)
        for key, flag in (("workload", "WORKLOAD"), ("preset", "--preset"), ("caps_w", "--cap")):
            if campaign.doc.get(key) != fresh[key]:
                theirs = campaign.doc.get(key)
                raise UsageError(
                    f"campaign {folder} measures {key.replace('_w', '')} {_shown(theirs)}, "
                    f"not {_shown(fresh[key])}",
                    f"resume it with {flag} {_shown(theirs, flag)}, or give a new -o folder")
        return campaign
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        raise UsageError(f"{folder} is not a folder", "give a new -o folder")
    if folder.exists() and any(folder.iterdir()):
        raise UsageError(f"{folder} exists and is not a fleet campaign",
                         "give an empty or new -o folder")
    return None


def create_or_resume(folder: str | Path, fresh: dict) -> tuple[Campaign, bool]:
    """The campaign at folder, resumed (True) or new, written from `fresh`."""
    folder = Path(folder)
    existing = check_resumable(folder, fresh)
    if existing is not None:
        return existing, True
    safe_dir(folder, "campaign folder")
    write_json(folder / "campaign.json", fresh)
    return Campaign(folder, fresh), False


def _shown(value, flag: str | None = None) -> str:
    if isinstance(value, list):
        return ",".join(f"{v:g}" for v in value)
    return str(value)

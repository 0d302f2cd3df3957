"""hpcai/safe_files.py's one atomic write, in its two forms: replacing a name, and
creating one that must be new (Folder.creating: what a power journal uses)."""
from __future__ import annotations

import os

import pytest

from hpcai.safe_files import Folder


def test_creating_publishes_a_whole_new_file_with_its_mode_and_leaves_no_temporary(tmp_path):
    with Folder.open(tmp_path) as folder, folder.creating("new.json", mode=0o600, durable=True) as fh:
        fh.write(b"{}\n")
    assert (tmp_path / "new.json").read_bytes() == b"{}\n"
    assert os.stat(tmp_path / "new.json").st_mode & 0o777 == 0o600
    assert os.listdir(tmp_path) == ["new.json"]


@pytest.mark.parametrize("planted", ["a file", "a link"])
def test_creating_never_replaces_nor_writes_through_what_is_there(tmp_path, planted):
    target = tmp_path / "elsewhere"
    target.write_text("theirs")
    if planted == "a link":
        (tmp_path / "new.json").symlink_to(target)
    else:
        (tmp_path / "new.json").write_text("theirs")
    with Folder.open(tmp_path) as folder, pytest.raises(FileExistsError):
        with folder.creating("new.json") as fh:
            fh.write(b"ours")
    assert (tmp_path / "new.json").read_text() == "theirs" and target.read_text() == "theirs"
    assert sorted(os.listdir(tmp_path)) == ["elsewhere", "new.json"]  # the temporary file went


def test_replacing_replaces_a_planted_link_instead_of_writing_through_it(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text("theirs")
    (tmp_path / "out.json").symlink_to(target)
    with Folder.open(tmp_path) as folder, folder.replacing("out.json") as fh:
        fh.write(b"ours")
    assert not (tmp_path / "out.json").is_symlink() and (tmp_path / "out.json").read_text() == "ours"
    assert target.read_text() == "theirs"


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    (tmp_path / "out.json").write_text("old")
    with Folder.open(tmp_path) as folder, pytest.raises(RuntimeError):
        with folder.replacing("out.json") as fh:
            fh.write(b"half")
            raise RuntimeError("disk full")
    assert os.listdir(tmp_path) == ["out.json"] and (tmp_path / "out.json").read_text() == "old"

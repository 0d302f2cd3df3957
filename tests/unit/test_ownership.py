"""The one trust check (hpcai/ownership.py): each parameter changes the verdict.

These tests run as root (the CI container), so "another user" is uid 65534
(nobody), made the owner with os.chown."""
from __future__ import annotations

import os

import pytest

from hpcai.ownership import ALL_ABOVE, OTHERS_ANY, path_problem, stat_problem, written_by_us

OTHER_UID = 65534


@pytest.fixture
def tree(tmp_path):
    """tmp_path/a/b/file.txt, every part 0755 (file 0644) and ours."""
    folder = tmp_path / "a" / "b"
    folder.mkdir(parents=True, mode=0o755)
    (tmp_path / "a").chmod(0o755)
    folder.chmod(0o755)
    file = folder / "file.txt"
    file.write_text("x")
    file.chmod(0o644)
    return file


def test_a_file_of_ours_writable_by_no_one_else_is_trusted(tree):
    assert path_problem(tree, kind="file", above=2) is None


def test_the_owner_set_decides(tree):
    os.chown(tree, OTHER_UID, OTHER_UID)
    assert "belongs to uid 65534, not to you" in path_problem(tree)
    assert path_problem(tree, owners={OTHER_UID}) is None
    assert "not to uid 65534" in path_problem(tree.parent, owners={OTHER_UID})


def test_the_forbidden_bits_decide(tree):
    assert path_problem(tree) is None  # 0644: others may read
    assert "can be read or written by other users (mode 0644)" in path_problem(tree, forbidden=OTHERS_ANY)
    tree.chmod(0o664)
    assert "can be written by other users (group- or world-writable, mode 0664)" in path_problem(tree)
    assert path_problem(tree, forbidden=0o002) is None


def test_a_link_is_never_followed(tree):
    link = tree.with_name("link.txt")
    link.symlink_to(tree)
    assert path_problem(link) == f"{link} is a symbolic link"
    assert path_problem(tree.parent, kind="file") == f"{tree.parent} is not a regular file"
    assert path_problem(tree, kind="folder") == f"{tree} is not a folder"


def test_a_folder_another_user_can_write_is_checked_only_when_asked(tree):
    tree.parent.chmod(0o777)
    assert path_problem(tree) is None  # the file alone
    assert path_problem(tree, above=1) == (f"{tree.parent} can be written by other users "
                                           "(group- or world-writable, mode 0777)")
    tree.parent.chmod(0o1777)  # sticky: others may add entries, not replace ours
    assert path_problem(tree, above=1) is None


def test_the_chain_reaches_as_high_as_asked(tree):
    top = tree.parent.parent
    os.chown(top, OTHER_UID, OTHER_UID)
    assert path_problem(tree, above=1) is None
    assert path_problem(tree, above=2) == f"{top} belongs to uid 65534, not to you (owned by nobody)"
    assert path_problem(tree, above=ALL_ABOVE) == path_problem(tree, above=2)


def test_stat_problem_names_the_subject_and_written_by_us_allows_sticky_folders(tree):
    st = os.lstat(tree)
    assert stat_problem(st, "it") is None and written_by_us(st)
    tree.parent.chmod(0o1777)
    folder = os.lstat(tree.parent)
    assert written_by_us(folder, folder=True) and not written_by_us(folder)
    assert stat_problem(folder, "it", owners={OTHER_UID}).startswith("it belongs to uid 0, not to uid 65534")


def test_a_missing_path_is_a_reason_not_an_exception(tmp_path):
    assert path_problem(tmp_path / "gone") == f"{tmp_path / 'gone'} cannot be read (No such file or directory)"

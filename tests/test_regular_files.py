"""regular_files.read_regular: the one read of a file another party controls (a repository's
policy file, a `.pth` or METADATA in a `.venv` a command could write, a program found on PATH).
Each case as its callers meet it: a FIFO returns at once (no writer ever comes: a blocking open
hung the reader), a directory or a link to a device is refused without being opened, a last
symlink is followed only when asked (ELOOP otherwise, as O_NOFOLLOW says it), more than the
bound is refused whole or cut for a head. The callers' own words for each are pinned in
tests/test_repository_files.py, tests/audit/test_audit_relative_path_entries.py and
tests/cage/test_hook_python.py."""

from __future__ import annotations

import errno
import os

import pytest

from sandboy.regular_files import NotRegularFile, read_regular


@pytest.fixture
def tree(tmp_path):
    (tmp_path / "file").write_bytes(b"#!/bin/sh\nbody\n")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    os.symlink("file", tmp_path / "link")
    os.symlink("fifo", tmp_path / "fifolink")
    os.symlink("/dev/null", tmp_path / "devlink")
    return tmp_path


def test_a_regular_file_whole_or_refused_over_the_bound(tree):
    assert read_regular(str(tree / "file"), 15) == b"#!/bin/sh\nbody\n"
    assert read_regular(str(tree / "file"), 14) is None  # never cut
    assert read_regular(str(tree / "file"), 9, head=True) == b"#!/bin/sh"  # a head is cut
    assert read_regular(str(tree / "file"), 100, head=True) == b"#!/bin/sh\nbody\n"


@pytest.mark.parametrize("follow_link", [False, True])
def test_what_is_not_a_regular_file_is_refused_at_once(tree, follow_link):
    for name in ("fifo", "dir"):
        with pytest.raises(NotRegularFile):
            read_regular(str(tree / name), 100, follow_link=follow_link)
    with pytest.raises(FileNotFoundError):
        read_regular(str(tree / "missing"), 100, follow_link=follow_link)


def test_a_last_symlink_is_followed_only_when_asked(tree):
    for name in ("link", "fifolink", "devlink"):
        with pytest.raises(OSError) as caught:
            read_regular(str(tree / name), 100)
        assert caught.value.errno == errno.ELOOP and not isinstance(caught.value, NotRegularFile)
    assert read_regular(str(tree / "link"), 100, follow_link=True) == b"#!/bin/sh\nbody\n"
    for name in ("fifolink", "devlink"):  # followed, and still no regular file
        with pytest.raises(NotRegularFile):
            read_regular(str(tree / name), 100, follow_link=True)

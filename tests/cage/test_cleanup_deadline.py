"""Removing what a step left in its {tmp} is bounded in time when the operator stopped the gate
(issue 8, item 1: the gate stops within a second of ^C/SIGTERM). Checked on the filesystem."""

from __future__ import annotations

import os
import time

from sandboy.confine.cleanup import empty_dir, remove_tree


def _fill(path, n: int) -> None:
    path.mkdir()
    (path / "sub").mkdir()
    for i in range(n):
        (path / ("sub" if i % 2 else ".") / f"f{i}").touch()


def test_a_passed_deadline_stops_the_removal_and_says_so(tmp_path):
    tree = tmp_path / "tmp"
    _fill(tree, 5_000)
    started = time.monotonic()
    assert remove_tree(str(tree), deadline=time.monotonic()) is False
    assert time.monotonic() - started < 1
    assert tree.exists() and len(os.listdir(tree)) > 1000  # left, partly emptied, named by the caller
    assert empty_dir(str(tree), deadline=time.monotonic()) is False
    # no fd of the abandoned walk is left open
    fds = len(os.listdir("/proc/self/fd"))
    for _ in range(50):
        empty_dir(str(tree), deadline=time.monotonic())
    assert len(os.listdir("/proc/self/fd")) == fds


def test_twin_without_deadline_removes_everything(tmp_path):
    tree = tmp_path / "tmp"
    _fill(tree, 5_000)
    assert remove_tree(str(tree)) is True
    assert not tree.exists()

"""The C executor is not used when it was built from another `_native.c` than the one beside it
(`_libc._built_from_its_source`, session 10). A checkout moved on without `make compile` ran
today's plans with yesterday's executor: an init built before END_RUN_SIGNAL existed discarded
it, and every timed-out run under the tier waited the whole 1 s grace and lost its relayed output
(one bench run of session 9: 12 of 12 rounds; reproduced with the build of 4c897d4^).

Real files: a copy of the installed package whose `_native.c` changed after the build (one line
added), imported in a fresh interpreter. Twin: the unchanged copy uses the C executor."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

import sandboy
from sandboy.confine import _libc

PACKAGE = os.path.dirname(sandboy.__file__)
pytestmark = pytest.mark.skipif(_libc.IMPLEMENTATION != "native", reason="no C executor built here")


def _implementation(tmp_path, change_source: bool):
    shutil.copytree(PACKAGE, tmp_path / "sandboy", ignore=shutil.ignore_patterns("__pycache__"))
    if change_source:
        with open(tmp_path / "sandboy" / "confine" / "_native.c", "a") as fh:
            fh.write("/* a change made after the build */\n")
    env = {k: v for k, v in os.environ.items() if k != "SANDBOY_NATIVE"}
    env["PYTHONPATH"] = str(tmp_path)
    done = subprocess.run([sys.executable, "-c", "import sandboy.confine._libc as l; print(l.__file__, l.IMPLEMENTATION)"],
                          capture_output=True, text=True, env=env, timeout=60, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    where, implementation = done.stdout.split()
    assert where.startswith(str(tmp_path)), where  # the copy was imported, not the checkout
    return implementation, done.stderr


def test_an_executor_built_from_another_source_is_not_used(tmp_path):
    implementation, stderr = _implementation(tmp_path, change_source=True)
    assert implementation == "python"
    assert "run `make compile`" in stderr, stderr


def test_twin_an_executor_built_from_its_source_is_used_silently(tmp_path):
    implementation, stderr = _implementation(tmp_path, change_source=False)
    assert (implementation, stderr) == ("native", "")

"""The presets' questions to the machine, recorded and asked again (policy/lookups.py; ADR 0028,
session 12): what lets a plan cache hit run a kept plan of an `include` policy. The end-to-end
probes (a program appearing on PATH, a symlink retargeted, a venv's `home` edited) are in
tests/cage/test_plan_cache_presets.py; here: that the presets look at the machine through
`lookups.ask` only, and that the record is asked again exactly.
"""

import ast
import os
import shutil
import sys
from pathlib import Path

import pytest

from sandboy.policy import lookups, presets
from sandboy.policy.model import Policy
from sandboy.policy.resolve import plan_may_keep

PRESETS_SOURCE = Path(presets.__file__).read_text()
# os.path functions that compute on strings only (no system call)
PURE_OS = {"os.path.join", "os.path.dirname", "os.path.normpath", "os.sep", "os.sep.join"}


@pytest.fixture
def fresh(monkeypatch):
    """This process's record emptied (another test's questions, or its `unsure`, stay out)."""
    monkeypatch.setattr(lookups, "_answers", {})
    monkeypatch.setattr(lookups, "_unsure", False)


def _dotted(node) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def test_the_presets_look_at_the_machine_only_through_ask():
    """What a hit asks again is what was recorded: a question the presets asked another way
    (os.path.exists, open, sys.prefix, os.getcwd, the environment) would be an input no entry
    holds. Only string functions of os.path, `ask`, and `os.environ` where it is handed to
    `_variable` (which asks it) or stands for the default mapping."""
    tree = ast.parse(PRESETS_SOURCE)
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    assert imported == {"os"}
    sources = {(node.module, alias.name) for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
               for alias in node.names}
    assert sources <= {("sandboy.policy.lookups", "ask"), ("sandboy.policy.lookups", "real_path"),
                       ("sandboy.policy.lookups", "unsure"), ("sandboy.confine._libc", "path_candidates"),
                       ("sandboy.paths", "is_within"), ("sandboy.paths", "is_within_any")}, sources
    environ_in = set()
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef):
            continue
        for node in ast.walk(function):
            name = _dotted(node) if isinstance(node, ast.Attribute) else ""
            if name == "os.environ":
                environ_in.add(function.name)
            elif name.startswith(("os.", "sys.")):
                assert name == "os.path" or name in PURE_OS, (function.name, name)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                assert node.func.id not in ("open", "__import__", "eval", "exec"), (function.name, node.func.id)
    assert environ_in == {"_variable", "expand"}


def test_a_record_is_asked_again_answer_for_answer(fresh, tmp_path):
    """The record of a real expansion is unchanged while nothing changes; one answer changed
    (a path made since, a kept answer altered, a kind no longer known, a question that now
    raises) is a change."""
    presets.expand(["system", "python", "git", "node"])
    record = lookups.recorded()
    assert record and lookups.unchanged(record)
    kinds = {kind for kind, _, _ in record}
    assert {"exists", "program", "env", "sys", "cwd", "islink", "readlink"} <= kinds
    for i, (kind, argument, answer) in enumerate(record):
        if kind in ("exists", "program", "islink", "isdir", "isfile"):
            flipped = record[:i] + ((kind, argument, not answer),) + record[i + 1:]
            assert not lookups.unchanged(flipped), (kind, argument)
    assert not lookups.unchanged(record + (("no such kind", "x", None),))
    assert not lookups.unchanged(record + (("readlink", str(tmp_path / "missing"), "x"),))  # OSError
    made = tmp_path / "made"
    assert lookups.unchanged((("exists", str(made), False),))
    made.mkdir()
    assert not lookups.unchanged((("exists", str(made), False),))


def test_environment_values_and_file_contents_are_kept_as_digests(fresh, tmp_path, monkeypatch):
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / "pyvenv.cfg").write_text("home = /nowhere/bin\n")
    monkeypatch.setenv("VIRTUAL_ENV", str(venv))
    presets.expand(["python"])
    record = {(kind, argument): answer for kind, argument, answer in lookups.recorded()}
    assert record[("env", "PATH")] != os.environ["PATH"] and isinstance(record[("env", "PATH")], bytes)
    assert record[("venv_home", str(venv))] not in ("/nowhere/bin", None)
    assert lookups.unchanged(lookups.recorded())
    (venv / "pyvenv.cfg").write_text("home = /elsewhere/bin\n")
    assert not lookups.unchanged(lookups.recorded())


def test_a_question_that_fails_or_another_environment_keeps_nothing(fresh, tmp_path, monkeypatch):
    """`unsure`: a question that raised (the load failed or went on without it), two answers to
    one question, or presets resolved from a mapping that is not this process's environment —
    no plan of this process may be kept (`plan_may_keep`)."""
    policy = Policy.from_mapping({"version": 1, "include": ["system"]})
    assert lookups.recorded() and plan_may_keep(policy)
    presets.expand(["python"], dict(os.environ))
    assert lookups.recorded() is None and not plan_may_keep(policy)
    monkeypatch.setattr(lookups, "_answers", {})
    monkeypatch.setattr(lookups, "_unsure", False)
    with pytest.raises(OSError):
        lookups.ask("readlink", str(tmp_path / "missing"))
    assert lookups.recorded() is None
    monkeypatch.setattr(lookups, "_answers", {})
    monkeypatch.setattr(lookups, "_unsure", False)
    lookups.ask("exists", str(tmp_path / "later"))
    (tmp_path / "later").mkdir()
    lookups.ask("exists", str(tmp_path / "later"))
    assert lookups.recorded() is None


def test_real_path_walks_as_posixpath_does(fresh, tmp_path):
    """`lookups.real_path` is os.path.realpath's walk with each lstat and readlink recorded: the
    same answer for this machine's interpreters and prefixes, and for links that are relative,
    absolute, chained, dangling, through `..`, in a loop, and on the way to a directory."""
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "f").write_text("")
    links = {"rel": "a/b/f", "abs": str(tmp_path / "a" / "b"), "chain": "rel", "dangling": "nowhere/x",
             "up": "a/b/../../abs", "loop1": "loop2", "loop2": "loop1", "dir": "a"}
    for name, target in links.items():
        (tmp_path / name).symlink_to(target)
    paths = [str(tmp_path / name) for name in links] + [
        str(tmp_path / "dir" / "b" / "f"), str(tmp_path / "abs" / ".." / "b" / "f"), str(tmp_path / "chain" / "x"),
        str(tmp_path / "loop1" / "y"), str(tmp_path / "missing" / ".." / "a"), "//usr//bin/./python3", "/",
        "/..", os.path.realpath(os.__file__), os.path.dirname(os.__file__)]
    paths += [sys.executable, sys.prefix, sys.base_prefix, shutil.which("python3") or "/usr/bin/python3",
              "/bin/sh", "/lib64/ld-linux-x86-64.so.2", "/proc/self/exe", "/proc/self/cwd/x"]
    for path in paths:
        assert lookups.real_path(path) == os.path.realpath(path), path
    kinds = {kind for kind, _, _ in lookups.recorded()}
    assert kinds == {"islink", "readlink"}, kinds  # (no `realpath` asked whole for an absolute path)
    assert lookups.unchanged(lookups.recorded())
    (tmp_path / "rel").unlink()
    (tmp_path / "rel").symlink_to("a/b")
    assert not lookups.unchanged(lookups.recorded())


def test_without_implied_drops_only_the_exists_a_hits_fingerprint_proves():
    """A hit stats the fingerprint's present paths before it asks the record again (and fails
    unless each still exists): an `exists` answered True for one of them is implied and dropped.
    Kept: `exists` answered False (the path may have been made since), `exists` True of a path
    the fingerprint does not hold, and every other kind about a present path (a file is not a
    directory, a program's mode may change)."""
    record = (("exists", "/a", True), ("exists", "/b", False), ("exists", "/c", True), ("isdir", "/a", True),
              ("program", "/a", True), ("islink", "/a", False))
    assert lookups.without_implied(record, frozenset(("/a", "/b"))) == record[1:]
    assert lookups.without_implied(record, frozenset()) == record

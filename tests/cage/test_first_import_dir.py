"""`python -m sandboy` started from a directory inside a write root (ADR 0024, session 7).

Python puts the working directory first on `sys.path` for `-m` (and `-c`, and a script's own
directory), before the standard library and the installation: a `sandboy/` package — or a module
named like a standard one (`keyword.py`, imported by `collections` before runpy even starts) —
that the command leaves there runs at the operator's next `python -m sandboy` from that
directory, before any Sandboy code. `-P` / `PYTHONSAFEPATH=1` (3.11+, Sandboy's minimum) and the
`sandboy` command do not put it there.

Decision: neither protected nor judged after the run (it is the run's working directory, and any
new `.py` named like one of the ~300 standard modules would be a finding); the launch warns where
the running Sandboy imports from such a directory, naming the fix. The probe shows host side
what the warning is about: the planted package and the shadowing module run on `python -m
sandboy` there, not on `python -P -m sandboy` nor the `sandboy` command.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from cagekit import SANDBOY, to_toml

PYTHON = sys.executable


def _policy(tmp_path) -> str:
    path = tmp_path / "policy.toml"
    path.write_text(to_toml({"version": 1, "fs": {"read": ["/usr", "/etc", "/proc/self"], "exec": ["/usr/bin", "/bin"],
                                                   "write": ["."]}}))
    return str(path)


def _run(argv, cwd, tmp_path):
    env = dict(os.environ, SANDBOY_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("PYTHONSAFEPATH", None)
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


WARNING = "is where the Python running Sandboy imports from first"


@pytest.mark.needs_kernel
def test_python_m_sandboy_from_inside_a_write_root_warns_and_the_plant_is_what_the_warning_says(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    policy = _policy(tmp_path)
    marker_pkg, marker_std = tmp_path / "PWNED-PACKAGE", tmp_path / "PWNED-STDLIB"
    plant = (f"mkdir -p sandboy && printf 'open(\"{marker_pkg}\", \"w\").close()\\n' > sandboy/__init__.py "
             f"&& printf 'from keyword import *\\n' > sandboy/__main__.py && echo PLANTED")
    result = _run([PYTHON, "-m", "sandboy", "run", "--policy", policy, "--", "/bin/sh", "-c", plant], work, tmp_path)
    assert result.returncode == 0 and "PLANTED" in result.stdout, result
    assert WARNING in result.stderr and "python -P -m sandboy" in result.stderr, result.stderr
    assert f"{os.path.realpath(work)} is where" in result.stderr
    # what the warning is about, host side: the next `python -m sandboy` there runs the plant
    _run([PYTHON, "-m", "sandboy", "--version"], work, tmp_path)
    assert marker_pkg.exists(), "the attack is not real: python -m sandboy did not import the planted package"
    marker_pkg.unlink()
    # ... and a module named like a standard one, without any `sandboy/` there
    subprocess.run(["rm", "-rf", str(work / "sandboy")], check=True)
    (work / "keyword.py").write_text(f"open({str(marker_std)!r}, 'w').close()\nfrom _keyword_gone import *\n")
    _run([PYTHON, "-m", "sandboy", "--version"], work, tmp_path)
    assert marker_std.exists(), "the attack is not real: python -m sandboy did not import the planted keyword.py"
    marker_std.unlink()
    # the fixes the warning names: `-P` and the console script import nothing from there
    for argv in ([PYTHON, "-P", "-m", "sandboy", "--version"], [SANDBOY, "--version"]):
        done = _run(argv, work, tmp_path)
        assert done.returncode == 0 and "sandboy" in done.stdout, (argv, done)
        assert not marker_std.exists(), f"{argv} imported the planted keyword.py"


@pytest.mark.needs_kernel
@pytest.mark.parametrize("how", ["python -P -m sandboy", "the sandboy command", "python -m sandboy elsewhere"])
def test_no_warning_where_nothing_is_imported_from_a_write_root(tmp_path, how):
    """The twins: started with -P, as the console script (its sys.path[0] is its installation's
    bin/), or from a directory outside every write root: no warning, the run works."""
    work = tmp_path / "work"
    work.mkdir()
    policy = _policy(tmp_path)  # write = ["."]: the working directory
    cwd = work
    if how == "python -m sandboy elsewhere":  # started from a directory that only holds the write root
        (tmp_path / "policy.toml").write_text(to_toml({"version": 1, "fs": {
            "read": ["/usr", "/etc", "/proc/self"], "exec": ["/usr/bin", "/bin"], "write": [str(work)]}}))
        cwd = tmp_path
    argv = {"python -P -m sandboy": [PYTHON, "-P", "-m", "sandboy"], "the sandboy command": [SANDBOY],
            "python -m sandboy elsewhere": [PYTHON, "-m", "sandboy"]}[how]
    result = _run([*argv, "run", "--policy", policy, "--", "/bin/sh", "-c", f"echo ok > '{work}/f' && echo DONE"],
                  cwd, tmp_path)
    assert result.returncode == 0 and "DONE" in result.stdout, result
    assert WARNING not in result.stderr, result.stderr

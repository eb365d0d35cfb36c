"""A write root of `/` is refused before the command runs (exit 2 naming fs.write and the fix).

The post-run git check (ADR 0019) walks every write root for a repository the command may have
planted. `/` (with /proc, /sys and every mount) is beyond its bounds: `sandboy run` with
`write = ["/"]` ran the command, walked for 2 min 16 s here, then failed the run closed (125)
after the command had done its work. Now the decision is made up front. A whole home or another
huge tree cannot be told by its path, but the walk at launch (the census of where each git
directory is, ADR 0019 session 6) counts what the check after the run would count: where it reaches
the bound, the run is refused at launch (125, naming the write root and what to grant instead);
the bound after the run stays as the backstop for a tree the command makes grow
(`gitcheck.GitSnapshot.verify`).

The bound is 2,000,000 entries; the probes lower it (`WALK_BUDGET`) in the process that runs the
real CLI, so that a tree of a few hundred directories stands for a home of millions."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

import sandboy
from sandboy.confine import gitcheck
from sandboy.errors import PolicyError

SANDBOY = os.path.join(os.path.dirname(sys.executable), "sandboy")
EXEC = '["/usr/bin", "/bin", "/usr/lib", "/lib", "/lib64"]'


def _policy(tmp_path, write: str, extra: str = "") -> str:
    path = tmp_path / "p.toml"
    path.write_text(f'version = 1\n[fs]\nread = ["/"]\nexec = {EXEC}\nwrite = {write}\n{extra}')
    return str(path)


def _run(policy: str, marker) -> subprocess.CompletedProcess:
    return subprocess.run([SANDBOY, "run", "--policy", policy, "--", "/bin/sh", "-c", f"echo ran > {marker}"],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("root", ['["/"]', '["/usr/.."]', '["{tmp}", "/"]'])
def test_a_whole_file_system_write_root_is_refused_before_the_command_runs(tmp_path, root) -> None:
    marker = tmp_path / "marker"
    started = time.monotonic()
    done = _run(_policy(tmp_path, root), marker)
    assert done.returncode == 2, done.stderr
    assert time.monotonic() - started < 20  # not a walk of the machine
    assert "p.toml: fs.write: " in done.stderr and "is the whole file system" in done.stderr
    assert "fs.protect_defaults = false" in done.stderr and "Traceback" not in done.stderr
    assert not marker.exists()  # host side: the command never ran


def test_the_api_refuses_it_too(tmp_path) -> None:
    marker = tmp_path / "marker"
    policy = sandboy.Policy.from_mapping({"version": 1, "fs": {"read": ["/"], "exec": ["/usr/bin", "/bin", "/lib", "/usr/lib"],
                                                               "write": ["/"]}})
    with pytest.raises(PolicyError, match="is the whole file system"):
        sandboy.run(["/bin/sh", "-c", f"echo ran > {marker}"], policy)
    assert not marker.exists()


def test_twins_without_the_check_or_with_a_project_directory_the_command_runs(tmp_path) -> None:
    marker = tmp_path / "marker"
    done = _run(_policy(tmp_path, '["/"]', "protect_defaults = false\n"), marker)
    assert done.returncode == 0, done.stderr
    assert marker.read_text() == "ran\n"
    marker.unlink()
    done = _run(_policy(tmp_path, f'["{tmp_path}"]'), marker)
    assert done.returncode == 0, done.stderr
    assert marker.read_text() == "ran\n"


def test_the_walk_bound_says_what_to_do(tmp_path) -> None:
    """A tree too big to walk is found only by walking it: the finding fails the run closed and
    says how to grant less (or go without the check)."""
    for i in range(30):
        (tmp_path / f"d{i}").mkdir()
    snap = gitcheck.snapshot([str(tmp_path)])
    findings = snap.verify(budget=10)
    why = findings[-1].why
    assert findings[-1].path is None and "more than 10 entries" in why and "not checked to the end" in why
    assert "grant a narrower fs.write" in why and "fs.protect_defaults = false" in why


def _cli_with_bound(bound: int, argv: list, **kw) -> subprocess.CompletedProcess:
    """The real CLI (`sandboy.cli.main`) in a fresh interpreter whose walk bound is `bound`."""
    code = ("import sys\nimport sandboy.confine.gitcheck as g\n"
            f"g.WALK_BUDGET = {bound}\n"
            "from sandboy.cli import finish, main\nsys.exit(finish(main, sys.argv[1:]))\n")
    return subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120, **kw)


def _home(tmp_path, directories: int):
    """A stand-in for a whole home: `directories` directories, each holding one more (not leaves:
    the walk lists them)."""
    home = tmp_path / "home"
    for i in range(directories):
        (home / f"d{i}" / "sub").mkdir(parents=True)
    return home


def test_a_write_root_beyond_the_bound_is_refused_at_launch(tmp_path) -> None:
    home = _home(tmp_path, 300)  # 600+ entries to walk
    marker = home / "marker"
    policy = _policy(tmp_path, f'["{home}"]')
    started = time.monotonic()
    done = _cli_with_bound(500, ["run", "--policy", policy, "--", "/bin/sh", "-c", f"echo ran > {marker}"])
    assert done.returncode == 125, done.stderr
    assert time.monotonic() - started < 20
    assert f"fs.write: {home} holds more than 500 entries" in done.stderr
    assert "grant the project's directory" in done.stderr and "fs.protect_defaults = false" in done.stderr
    assert "Traceback" not in done.stderr
    assert not marker.exists()  # host side: the command never ran (the old way: it ran, then 125)


def test_several_write_roots_are_counted_together(tmp_path) -> None:
    home = _home(tmp_path, 150)
    other = tmp_path / "other"
    for i in range(150):
        (other / f"d{i}" / "sub").mkdir(parents=True)
    policy = _policy(tmp_path, f'["{home}", "{other}"]')
    done = _cli_with_bound(500, ["run", "--policy", policy, "--", "/bin/true"])
    assert done.returncode == 125, done.stderr
    assert "the 2 write roots hold more than 500 entries together" in done.stderr


def test_twins_within_the_bound_or_without_the_check_the_command_runs(tmp_path) -> None:
    home = _home(tmp_path, 300)
    marker = home / "marker"
    done = _cli_with_bound(5000, ["run", "--policy", _policy(tmp_path, f'["{home}"]'), "--", "/bin/sh", "-c",
                                  f"echo ran > {marker}"])
    assert done.returncode == 0, done.stderr
    assert marker.read_text() == "ran\n"
    marker.unlink()
    done = _cli_with_bound(500, ["run", "--policy", _policy(tmp_path, f'["{home}"]', "protect_defaults = false\n"),
                                 "--", "/bin/sh", "-c", f"echo ran > {marker}"])
    assert done.returncode == 0, done.stderr
    assert marker.read_text() == "ran\n"


def test_the_bound_after_the_run_stays_the_backstop(tmp_path) -> None:
    """A tree within the bound at launch that the command makes grow past it: the check after the
    run cannot finish, so the run fails closed (the command did run)."""
    home = _home(tmp_path, 10)
    marker = home / "marker"
    grow = f"mkdir -p {home}/grown && cd {home}/grown && for i in $(seq 1 300); do mkdir -p g$i/x; done; echo ran > {marker}"
    done = _cli_with_bound(500, ["run", "--policy", _policy(tmp_path, f'["{home}"]'), "--", "/bin/sh", "-c", grow])
    assert done.returncode == 125, done.stderr
    assert marker.read_text() == "ran\n"
    assert "more than 500 entries to look through for repositories; not checked to the end" in done.stderr

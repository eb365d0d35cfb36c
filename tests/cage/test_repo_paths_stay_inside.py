"""`{repo}/x` in a policy means "x in the repository" (session 7, ADR 0026): a grant spelled so
whose lookup leaves the repository through a symlink in it is refused when the cage is built
(exit 2 naming file, key and link), where a plain `x` follows the link as before. The capability
compiler writes `.sandboy/agent.toml`'s paths this way (they come from the repository); a
checkout shipping `src -> ~/work` had made its write root the operator's ~/work. Probes run the
real CLI and look at the host; twins: a link that stays inside, and a plain path."""

from __future__ import annotations

import subprocess
import sys

import pytest

SANDBOY = [sys.executable, "-m", "sandboy"]


def _run(repo, policy: str, script: str):
    (repo / "p.toml").write_text(policy)
    return subprocess.run([*SANDBOY, "run", "--policy", "p.toml", "--", "/bin/sh", "-c", script], cwd=repo,
                          capture_output=True, text=True, timeout=60)


@pytest.fixture
def world(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "notes.txt").write_text("mine\n")
    repo = tmp_path / "repo"
    repo.mkdir()
    return repo, outside


SYSTEM = 'version = 1\ninclude = ["system"]\n[fs]\n'


@pytest.mark.parametrize("field", ["write", "read", "exec"])
@pytest.mark.parametrize("link", ["direct", "parent", "chained"])
def test_a_repo_path_through_a_link_out_is_refused(world, field, link):
    repo, outside = world
    if link == "direct":
        (repo / "w").symlink_to(outside)
        path = "{repo}/w"
    elif link == "parent":
        (repo / "d").symlink_to(outside.parent)
        path = "{repo}/d/outside"
    else:
        (repo / "a").symlink_to("b")
        (repo / "b").symlink_to(outside)
        path = "{repo}/a"
    run = _run(repo, SYSTEM + f'{field} = ["{path}"]\n', f"echo OWNED > {outside}/notes.txt; cat {outside}/notes.txt")
    assert (outside / "notes.txt").read_text() == "mine\n"  # host side
    assert run.returncode == 2 and f"p.toml: fs.{field}[" in run.stderr and f"]: '{path}'" in run.stderr, run.stderr
    assert "mine" not in run.stdout and "Traceback" not in run.stderr


def test_twins_a_link_inside_and_a_plain_path_still_work(world):
    repo, outside = world
    (repo / "real").mkdir()
    (repo / "w").symlink_to("real")
    run = _run(repo, SYSTEM + 'write = ["{repo}/w"]\n', "echo fine > w/new.txt")
    assert run.returncode == 0, run.stderr
    assert (repo / "real/new.txt").read_text() == "fine\n"
    # a plain relative path is the operator's own words: it follows the link, as documented
    (repo / "out").symlink_to(outside)
    run = _run(repo, SYSTEM + 'write = ["out"]\n', "echo theirs > out/notes.txt")
    assert run.returncode == 0, run.stderr
    assert (outside / "notes.txt").read_text() == "theirs\n"
    # `{repo}` itself
    run = _run(repo, SYSTEM + 'read = ["{repo}"]\n', "cat real/new.txt")
    assert run.returncode == 0 and run.stdout == "fine\n", run.stderr

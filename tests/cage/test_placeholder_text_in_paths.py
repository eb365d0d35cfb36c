"""A directory whose name is placeholder text (`{home}`, `{repo}`, `{tmp}`) is a directory, not a
placeholder: granted literally, nothing else.

`policy.resolve.expand` replaced the placeholders one after the other, so a value holding
placeholder text — a working directory literally named `/w/{home}` — had it replaced again:
`{cwd}` became `/w/` + the operator's home (session 7 found, session 8 fixed: one pass). And the
gate (and `audit run`) resolve a policy once themselves, then the cage resolves what they made
again: a repository cloned into `/w/{home}` had its `{repo}` grant turn into `/w/<home>` at the
second pass — the step lost its repository and was granted a path nobody wrote. A path is
resolved once: an absolute one is taken as written (normalised only).

Checked from the host side: what the command wrote where, the working directory writable, the
path the second replacement named not."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from sandboy.policy.resolve import Context, expand, expand_value

pytestmark = pytest.mark.needs_kernel

SANDBOY = [sys.executable, "-m", "sandboy"]
FS = ('read = ["/usr", "/lib", "/lib64", "/bin", "/etc", "{cwd}"]\n'
      'exec = ["/usr/bin", "/bin", "/usr/lib", "/lib", "/lib64"]\n')


def test_one_pass_over_the_text_as_written(tmp_path):
    ctx = Context(cwd=str(tmp_path / "{home}"), home="/h", repo=str(tmp_path / "{cwd}"), tmp="/t")
    assert expand("{cwd}", ctx) == str(tmp_path / "{home}")
    assert expand("{repo}/x", ctx) == str(tmp_path / "{cwd}" / "x")
    assert expand("sub", ctx) == str(tmp_path / "{home}" / "sub")
    assert expand("{home}/{tmp}", ctx) == "/h/t"  # both written: both replaced, each once
    assert expand_value("{cwd}:{home}", ctx) == f"{tmp_path}/{{home}}:/h"
    kept = Context(cwd=str(tmp_path / "{tmp}"), home="/h", tmp=None)
    assert expand("{cwd}/x", kept) == str(tmp_path / "{tmp}" / "x")  # not a {tmp} to keep
    assert expand("{tmp}/x", kept) == "{tmp}/x"
    # resolved again (the gate's policy in the cage): the same path
    assert expand(expand("{cwd}/x", kept), ctx) == str(tmp_path / "{tmp}" / "x")
    # audit run's places: one pass too
    from sandboy.audit.pipeline import expand as audit_expand

    assert audit_expand("{repo}/x {home}", {"{repo}": "/w/{home}", "{home}": "/h"}) == "/w/{home}/x /h"


def _home_again(work: str, home: str) -> str:
    """Where the second replacement sent `work` (= .../{home}): `.../` + the home."""
    return os.path.normpath(work.replace("{home}", home))


@pytest.mark.parametrize("tier", ["tier", "no-tier"])
@pytest.mark.parametrize("name", ["{home}", "{repo}"])
def test_a_working_directory_named_like_a_placeholder_is_granted_literally(tmp_path, tier, name):
    home = tmp_path / "home"
    home.mkdir()
    work = tmp_path / name
    work.mkdir()
    elsewhere = _home_again(str(work), str(home)) if name == "{home}" else os.path.normpath(
        str(work).replace("{repo}", str(work)))
    os.makedirs(elsewhere)
    policy = tmp_path / "p.toml"
    policy.write_text(f'version = 1\n[fs]\n{FS}write = ["{{cwd}}"]\n')
    env = {**os.environ, "HOME": str(home)}
    if tier == "no-tier":
        env["SANDBOY_NAMESPACES"] = "0"
    script = f"echo in > inside; echo out > '{elsewhere}/outside'; echo done"
    done = subprocess.run([*SANDBOY, "run", "--policy", str(policy), "--", "/bin/sh", "-c", script],
                          cwd=work, env=env, capture_output=True, text=True, timeout=60)
    assert not os.path.exists(os.path.join(elsewhere, "outside")), f"{elsewhere} was granted: {done}"
    assert (work / "inside").read_text() == "in\n", done  # the working directory is what was granted
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("tier", ["tier", "no-tier"])
def test_a_gate_on_a_repository_in_a_directory_named_home(tmp_path, tier):
    """The gate resolves the step's policy, the cage resolves it again: the repository
    `.../{home}` must stay the repository (the built-in ceiling's `{repo}`) at both."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "gate"))
    from gatekit import run_gate

    home = tmp_path / "home"
    home.mkdir()
    repo = tmp_path / "{home}"
    (repo / ".007").mkdir(parents=True)
    elsewhere = _home_again(str(repo), str(home))
    os.makedirs(elsewhere)
    (repo / ".007" / "gate.toml").write_text(
        '[[step]]\nname = "s"\npolicy = "p"\n'
        f"run = \"echo in > inside; echo out > '{elsewhere}/outside'; echo done\"\n"
        f'[policy.p]\nversion = 1\nfs.read = ["/usr", "/lib", "/lib64", "/bin", "/etc", "{{repo}}"]\n'
        'fs.exec = ["/usr/bin", "/bin", "/usr/lib", "/lib", "/lib64"]\nfs.write = ["{repo}", "{tmp}"]\n')
    done = run_gate(repo, home=home, env={"SANDBOY_NAMESPACES": "0"} if tier == "no-tier" else {})
    assert not os.path.exists(os.path.join(elsewhere, "outside")), f"{elsewhere} was granted: {done.stdout}"
    assert (repo / "inside").read_text() == "in\n", done.stdout + done.stderr
    assert "Traceback" not in done.stderr

"""The post-run git check loads its judgement (`confine/gitjudge.py`) only when there is something
to judge (`GitSnapshot.verify`): a run whose write roots hold no repository, with a global git
config that leads nowhere, walks and never imports it; a repository made during the run, a
repository at launch or a global config with an include or core.hooksPath loads it — and the
planted repository is still found. Each case in a fresh interpreter (sys.modules is the probe)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

PROBE = r"""
import json, os, sys
import sandboy
policy = sandboy.Policy.from_mapping({"version": 1, "fs": {"read": ["/usr", "/lib", "/lib64", "/etc", "."],
    "exec": ["/usr/bin", "/bin"], "write": ["."]}, "env": {"pass": ["HOME", "PATH"]}}, "<test>")
r = sandboy.run(["/bin/sh", "-c", sys.argv[1]], policy, cwd=sys.argv[2])
print(json.dumps({"returncode": r.returncode, "error": r.error or "",
                  "judge": "sandboy.confine.gitjudge" in sys.modules, "check": "sandboy.confine.gitcheck" in sys.modules}))
"""


def _run(tmp_path, script, gitconfig=None, repo=False):
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1",
           "SANDBOY_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    if gitconfig is not None:
        (home / ".gitconfig").write_text(gitconfig)
    if repo:
        subprocess.run(["git", "init", "-q", str(work)], check=True, env=env)
    out = subprocess.run([sys.executable, "-c", PROBE, script, str(work)], capture_output=True, text=True,
                         env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(autouse=True)
def _git():
    if not shutil.which("git"):
        pytest.skip("needs git")


def test_a_run_without_a_repository_never_loads_the_judgement(tmp_path):
    r = _run(tmp_path, "echo built > out.txt", gitconfig="[user]\n\tname = someone\n")
    assert r == {"returncode": 0, "error": "", "judge": False, "check": True}


def test_a_repository_made_during_the_run_is_judged_all_the_same(tmp_path):
    r = _run(tmp_path, "git init -q r && printf '[core]\\n\\tfsmonitor = \"touch x\"\\n' >> r/.git/config")
    assert r["judge"] and r["returncode"] == 125 and "core.fsmonitor" in r["error"], r


@pytest.mark.parametrize("case", ["a global include", "a global core.hooksPath"])
def test_what_needs_judging_from_the_start_loads_it(tmp_path, case):
    gitconfig = {"a global include": "[include]\n\tpath = ~/more.gitconfig\n",
                 "a global core.hooksPath": "[core]\n\thooksPath = ~/hooks\n"}.get(case)
    r = _run(tmp_path, "true", gitconfig=gitconfig)
    assert r == {"returncode": 0, "error": "", "judge": True, "check": True}


@pytest.mark.parametrize("script", ["echo built > out.txt", "echo x > f && git add f && git -c user.name=a -c user.email=a@example.org commit -qm work"])
def test_a_repository_the_run_left_alone_is_judged_by_its_stats_without_loading_it(tmp_path, script):
    """Session 10: a repository at launch whose configs and hooks the run did not touch — its
    stats say so (`gitcheck._Walk.unchanged`, ADR 0019 "Session 10"), a commit or not — needs no
    judgement: the module is not loaded (before, a repository at launch always loaded it)."""
    r = _run(tmp_path, script, repo=True)
    assert r == {"returncode": 0, "error": "", "judge": False, "check": True}


def test_a_repository_whose_config_the_run_made_loads_it_and_is_judged(tmp_path):
    """The same repository, a `config.worktree` (absent at launch) made by the run: judged as
    before, the alias (not on SAFE_KEYS) found."""
    r = _run(tmp_path, "printf '[alias]\\n\\tst = status\\n' > .git/config.worktree", repo=True)
    assert r["judge"] and r["returncode"] == 125 and "alias.st" in r["error"], r


UNLOADABLE = r"""
import json, subprocess, sys
from sandboy.confine import gitcheck
root = sys.argv[1]
snap = gitcheck.snapshot([root])
subprocess.run(["/bin/sh", "-ec", "git init -q r && printf '[core]\\n\\tfsmonitor = x\\n' >> r/.git/config"],
               cwd=root, check=True)
sys.modules["sandboy.confine.gitjudge"] = None  # the judgement cannot be imported now (as with no fd left)
print(json.dumps([[f.path, f.why] for f in snap.verify()]))
"""


def test_a_judgement_that_cannot_load_after_the_run_fails_the_check_closed(tmp_path):
    """Where nothing needed judging at launch the judgement is imported only once the walk finds
    a git directory; if that import fails (no file descriptor left in the parent, say) the check
    fails closed instead of raising or passing."""
    root, home = tmp_path / "root", tmp_path / "home"
    root.mkdir()
    home.mkdir()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1",
           "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, "-c", UNLOADABLE, str(root)], capture_output=True, text=True, env=env,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    findings = json.loads(out.stdout)
    assert findings and findings[0][0] is None and "could not be judged" in findings[0][1], findings

"""The post-run git check's shortcuts of session 10 (ADR 0019 "Session 10"), each probed from the
attacker's side with a mutant that takes it out.

- A git directory the walk reaches is passed by its stats (`gitcheck._Walk.unchanged`) — no
  judgement loaded, no config read again — where nothing the judgement looks at could have been
  changed by the run: no `commondir`, `modules` or `worktrees` directory, each config the very
  file read at launch with a ctime before the snapshot, the hooks directory holding samples only;
  and only where nothing at launch leads the check elsewhere (`GitSnapshot.by_stats`: the
  operator's global configs, PATH directories, includes and `core.hooksPath` of the launch configs).
- After the run a directory the census listed is not listed again where its ctime is before the
  snapshot (creating, removing, renaming or linking an entry updates it; the command cannot set
  it back), found by its (st_dev, st_ino): a directory moved keeps its entries.

Each scenario sets a repository up, takes the snapshot, runs a hostile script with the host's
shell and git (the check does not care who wrote the files: it reads ctimes and bytes) and the
check after it (`after_run`: the verdict and the quarantine), in a fresh interpreter that imports
`sandboy` from the tree given — this checkout, or a copy with one shortcut mutated. Host side,
where the plant is a `core.fsmonitor`: the operator's next `git status` there runs it when the
check misses it (the mutant) and not after the quarantine (intact). Twins: ordinary work in the
repository passes unflagged, and without loading the judgement where the run left git's files alone.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from gitkit import GIT_ENV, scratch_env

from sandboy.confine import gitcheck

PROBE = r"""
import json, os, subprocess, sys
from sandboy.confine import gitcheck
spec = json.loads(sys.argv[1])
for name, value in spec["constants"].items():
    setattr(gitcheck, name, value)
snap = gitcheck.GitSnapshot.at_launch(gitcheck.Scope(spec["roots"], home=spec["home"], path_dirs=spec["path_dirs"]))
subprocess.run(["/bin/sh", "-ec", spec["script"]], cwd=spec["cwd"], check=True, env=spec["env"])
message = gitcheck.after_run(snap)
print(json.dumps({"message": message, "judge": "sandboy.confine.gitjudge" in sys.modules}))
"""

FSM = "[core]\\n\\tfsmonitor = \"touch {marker}; false\"\\n"


def _hook(path: str) -> str:
    return f"printf '#!/bin/sh\\ntouch {{marker}}\\n' > {path} && chmod +x {path}"


# name -> (set-up before the snapshot, the command's script, what the check must name, where the
# operator's `git status` runs the plant (None: not a config git status runs), extras)
# Paths are relative to the work directory `w`; the write root is its repository `repo` (an
# agent's `write = ["{cwd}"]`) unless `roots` says otherwise; `{marker}` is the file the plant touches.
SCENARIOS = {
    "a commondir made": (
        "", "mkdir -p repo/evil/hooks && echo ../evil > repo/.git/commondir", "repo/.git/commondir", None, {}),
    "a submodule git directory planted under .git/modules": (
        "", f"git init -q --bare repo/.git/modules/lib && printf '{FSM}' >> repo/.git/modules/lib/config",
        "repo/.git/modules/lib/config", None, {}),
    "a worktree's admin directory planted under .git/worktrees": (
        "", f"mkdir -p repo/.git/worktrees/w && printf '{FSM}' > repo/.git/worktrees/w/config",
        "repo/.git/worktrees/w/config", None, {}),
    "the config rewritten in place, same size and inode": (
        # the launch config ends with a comment the plant overwrites byte for byte (dd conv=notrunc)
        "_same_size_plant",
        "size=$(wc -c < repo/.git/config) && dd if=plant of=repo/.git/config bs=1 "
        "seek=$((size - $(wc -c < plant))) conv=notrunc status=none && test $(wc -c < repo/.git/config) = $size",
        "repo/.git/config", "repo", {}),
    "the hooks directory swapped for a symlink to an empty one": (
        "", "mkdir repo/h && rm -rf repo/.git/hooks && ln -s ../h repo/.git/hooks", "repo/.git/hooks", None, {}),
    "a hook made": ("", _hook("repo/.git/hooks/pre-commit"), "repo/.git/hooks/pre-commit", None, {}),
    "more config than the parse budget": (
        "", "true", "(run)", None, {"constants": {"CONFIG_PARSE_BUDGET": 20}, "words": "MiB of git config"}),
    "a file the launch config includes, changed": (
        "printf '[include]\\n\\tpath = ../inc.gitconfig\\n' >> repo/.git/config && touch repo/inc.gitconfig",
        f"printf '{FSM}' >> repo/inc.gitconfig", "repo/inc.gitconfig", "repo", {}),
    "a file the operator's global config includes, changed": (
        "printf '[include]\\n\\tpath = {w}/repo/inc.gitconfig\\n' > home/.gitconfig && touch repo/inc.gitconfig",
        f"printf '{FSM}' >> repo/inc.gitconfig", "repo/inc.gitconfig", "repo", {}),
    "the operator's global config in the write root, changed": (
        "", f"printf '{FSM}' >> repo/.gitconfig", "repo/.gitconfig", None, {"home": "repo"}),
    "a program planted in a PATH directory": (
        "mkdir repo/bin", _hook("repo/bin/git"), "repo/bin/git", None, {"path_dirs": ["repo/bin"]}),
    "a nested repository made in a directory the census listed": (
        "", f"git init -q repo/sub && printf '{FSM}' >> repo/sub/.git/config", "repo/sub/.git/config", "repo/sub", {}),
    "a nested repository made with every time set back (touch -d)": (
        "", f"git init -q repo/sub && printf '{FSM}' >> repo/sub/.git/config && "
            "touch -h -d 2001-01-01 repo repo/sub repo/sub/.git repo/sub/.git/config",
        "repo/sub/.git/config", "repo/sub", {}),
    # b/c/evil (a repository with a planted config, shipped as tracked files) moves to a/c/evil
    # with b: the census listed a/c (holding d) and b/c (holding d and evil); after the swap a/c is
    # b's c, its ctime older than the snapshot — its entries are b/c's, not those listed at a/c
    "a directory swapped in, whose census listing is another's": (
        "mkdir -p repo/a/c/d repo/b/c/d && git init -q repo/b/c/evil && "
        f"printf '{FSM}' >> repo/b/c/evil/.git/config",
        "mv repo/a repo/a.old && mv repo/b repo/a", "repo/a/c/evil/.git/config", "repo/a/c/evil", {}),
    # from another write root (`other`): the moved directory's own ctime changes, not its children's
    "a subtree renamed into the write root": (
        f"mkdir -p other/x/y && git init -q other/x/y/evil && printf '{FSM}' >> other/x/y/evil/.git/config",
        "mv other/x repo/x", "repo/x/y/evil/.git/config", "repo/x/y/evil", {"roots": ["repo", "other"]}),
    "a config replaced by a hard link to an older file": (
        f"printf '[core]\\n\\trepositoryformatversion = 0\\n{FSM}' > repo/evil.gitconfig",
        "rm repo/.git/config && ln repo/evil.gitconfig repo/.git/config", "repo/.git/config", "repo", {}),
}

# what the run does in the twins: nothing git runs changed (the judgement stays unloaded where
# `loads` is False), or git's files changed in ways the judgement accepts
NESTED = "git init -q repo/lib && git -C repo/lib commit -q --allow-empty -m a"
TWINS = {
    "a build writing the worktree": ("", "mkdir -p repo/out/a && echo x > repo/out/a/f && echo y > repo/README", False),
    "a commit": ("", "cd repo && echo x > f && git add f && git commit -qm work", False),
    "plain directories renamed and moved in": (
        "mkdir -p other/plain/d", "mkdir -p repo/p/q && mv repo/p repo/r && mv other/plain repo/plain", False),
    # (a repository whose configs the launch did not read: judged, nothing found)
    "a nested repository of the operator's, used": (NESTED, "cd repo/lib && echo x > f && git add f && git commit -qm w",
                                                    True),
    "a new repository made and committed in": (
        "", "git init -q repo/new && cd repo/new && git commit -q --allow-empty -m a", True),
    "user.name set in the repository's config": ("", "git -C repo config user.name someone", True),
}

# the shortcut's condition, taken out: (file, text, replacement, the scenario that must then miss)
MUTANTS = {
    "no commondir": ("gitcheck.py", 'for name in ("commondir", "modules", "worktrees"):',
                     'for name in ("modules", "worktrees"):', "a commondir made"),
    "no modules directory": ("gitcheck.py", 'for name in ("commondir", "modules", "worktrees"):',
                             'for name in ("commondir", "worktrees"):',
                             "a submodule git directory planted under .git/modules"),
    "no worktrees directory": ("gitcheck.py", 'for name in ("commondir", "modules", "worktrees"):',
                               'for name in ("commondir", "modules"):',
                               "a worktree's admin directory planted under .git/worktrees"),
    "a config's ctime": ("gitcheck.py", "if snap._new(st) or snap.config_stats", "if snap.config_stats",
                         "the config rewritten in place, same size and inode"),
    "the hooks directory a directory": ("gitcheck.py", "        if not stat.S_ISDIR(st.st_mode):\n            return False\n"
                                        "        try:\n            if not all(",
                                        "        try:\n            if not all(",
                                        "the hooks directory swapped for a symlink to an empty one"),
    "samples only in the hooks directory": ("gitcheck.py", 'if not all(name.endswith(".sample")', "if not all(True",
                                            "a hook made"),
    "the parse budget": ("gitcheck.py", "        if charge > self.parse_left:\n            return False",
                         "        if False:\n            return False", "more config than the parse budget"),
    "launch configs that follow nothing": ("gitcheck.py", ") and self._launch_configs_follow_nothing()", ")",
                                           "a file the launch config includes, changed"),
    "global configs that follow nothing": (
        "gitcheck.py", "self.path_dirs or any(\n            value and followed(name)",
        "self.path_dirs or False and any(\n            value and followed(name)",
        "a file the operator's global config includes, changed"),
    "no global config in a write root": ("gitcheck.py", "self.by_stats = not (self.global_inside or ",
                                         "self.by_stats = not (", "the operator's global config in the write root, changed"),
    "no PATH directory": ("gitcheck.py", "self.by_stats = not (self.global_inside or self.path_dirs or ",
                          "self.by_stats = not (self.global_inside or ", "a program planted in a PATH directory"),
    "a listed directory's ctime": ("gitcheck.py", "elif st.st_ctime_ns < since and tracked:", "else:",
                                   "a nested repository made in a directory the census listed"),
    "ctime, not mtime": ("gitcheck.py", "elif st.st_ctime_ns < since and tracked:", "elif st.st_mtime_ns < since and tracked:",
                         "a nested repository made with every time set back (touch -d)"),
    "listings by identity, not path": (
        "gitcheck.py", ("listings[(st.st_dev, st.st_ino)] = ", "listings.get((st.st_dev, st.st_ino))"),
        ("listings[directory] = ", "listings.get(directory)"), "a directory swapped in, whose census listing is another's"),
}


def _work(tmp_path: Path) -> tuple:
    w = tmp_path / "w"
    w.mkdir()
    env = {**scratch_env(w / "home"), "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(["git", "init", "-q", str(w / "repo")], check=True, env=env)
    subprocess.run(["git", "-C", str(w / "repo"), "commit", "-q", "--allow-empty", "-m", "init"], check=True, env=env)
    (w / "other").mkdir()
    return w, env


def _same_size_plant(w: Path, marker: Path) -> None:
    """A comment at the end of the launch config, and `plant`: as many bytes, a fsmonitor first."""
    pad = "# " + "x" * 300 + "\n"
    line = f'[core]\n\tfsmonitor = "touch {marker}; false"\n'
    plant = line + "#" + "y" * (len(pad) - len(line) - 2) + "\n"
    assert len(plant) == len(pad)
    with open(w / "repo" / ".git" / "config", "a") as fh:
        fh.write(pad)
    (w / "plant").write_text(plant)


def _check(tree, w: Path, env: dict, setup: str, script: str, extras: dict) -> dict:
    marker = w / "PWNED"
    fill = {"marker": marker, "w": w}
    if setup == "_same_size_plant":
        _same_size_plant(w, marker)
    elif setup:
        subprocess.run(["/bin/sh", "-ec", setup.format(**fill)], cwd=w, check=True, env=env, capture_output=True)
    time.sleep(0.03)  # the set-up's ctimes before the snapshot's clock reading (one coarse tick)
    home = str(w / extras.get("home", "home"))
    spec = {"roots": [str(w / r) for r in extras.get("roots", ["repo"])], "home": home, "cwd": str(w),
            "path_dirs": [str(w / p) for p in extras.get("path_dirs", ())], "constants": extras.get("constants", {}),
            "script": script.format(**fill), "env": {**env, "HOME": home}}
    out = subprocess.run([sys.executable, "-c", PROBE, json.dumps(spec)], capture_output=True, text=True, timeout=60,
                         env={**env, "PYTHONPATH": str(tree)})
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


def _caught(w: Path, result: dict, expected: str, extras: dict) -> bool:
    if expected == "(run)":
        return extras["words"] in result["message"]
    return f"{os.path.realpath(w / expected)}:" in result["message"]


def _operators_git_runs_it(w: Path, env: dict, where) -> bool:
    marker = w / "PWNED"
    if marker.exists():
        marker.unlink()
    subprocess.run(["git", "-c", "safe.directory=*", "-C", str(w / where), "status"], capture_output=True,
                   env={**env, **GIT_ENV}, timeout=30)
    return marker.exists()


SRC = Path(gitcheck.__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _git():
    if not shutil.which("git"):
        pytest.skip("needs git")


@pytest.mark.parametrize("name", SCENARIOS)
def test_a_plant_the_shortcuts_could_hide_is_found(tmp_path, name):
    setup, script, expected, runs_in, extras = SCENARIOS[name]
    w, env = _work(tmp_path)
    result = _check(SRC, w, env, setup, script, extras)
    assert _caught(w, result, expected, extras), result["message"]
    if runs_in is not None:  # host side: quarantined (a config put back at its launch bytes)
        assert not _operators_git_runs_it(w, env, runs_in), "the operator's git ran the plant after the check"


@pytest.mark.parametrize("name", TWINS)
def test_ordinary_work_passes_and_untouched_repositories_need_no_judgement(tmp_path, name):
    setup, script, loads = TWINS[name]
    w, env = _work(tmp_path)
    result = _check(SRC, w, env, setup, script, {"roots": ["repo", "other"]})
    assert result["message"] == "", result["message"]
    assert result["judge"] == loads, result


@pytest.mark.parametrize("mutant", MUTANTS)
def test_each_shortcut_has_a_probe_that_fails_without_it(tmp_path, mutant):
    """The mutated copy misses its scenario's plant — and the operator's next git command runs it
    where it is a config git status reads."""
    filename, texts, replacements, scenario = MUTANTS[mutant]
    tree = tmp_path / "tree"
    shutil.copytree(SRC / "sandboy", tree / "sandboy", ignore=shutil.ignore_patterns("__pycache__"))
    source = tree / "sandboy" / "confine" / filename
    text = source.read_text()
    for old, new in zip(*((texts, replacements) if isinstance(texts, tuple) else ((texts,), (replacements,)))):
        assert text.count(old) == 1, (mutant, old)
        text = text.replace(old, new)
    source.write_text(text)
    setup, script, expected, runs_in, extras = SCENARIOS[scenario]
    w, env = _work(tmp_path)
    # (the Python walk, where the mutant is: the C walk makes its decisions the same way and is held
    # to it by tests/cage/test_gitcheck_native_walk.py)
    env = {**env, "SANDBOY_NATIVE": "0"}
    result = _check(tree, w, env, setup, script, extras)
    assert not _caught(w, result, expected, extras), f"{mutant}: still caught ({result['message']})"
    if runs_in is not None:
        assert _operators_git_runs_it(w, env, runs_in), f"{mutant}: the plant was not live"

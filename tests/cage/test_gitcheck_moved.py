"""A git directory that was already there at launch, made to appear where the host's git will use
it (ADR 0019, session 6). A rename keeps the ctime of everything below what it moves, so a git
directory the project ships as tracked files (`tests/fixtures/evil`: HEAD, objects/, refs/, a
config with `core.fsmonitor`, hooks/pre-commit — all checked out before the launch) moved into
place by the run held nothing "changed during the run". The check now knows where every git
directory in reach was at launch (st_dev, st_ino -> path): one found after the run anywhere else,
or that was none, is judged whole.

Each probe plays the command's part on the host (real files, real git) and judges from the host
side: the operator's next git command really runs the planted program when the check is not
there (the attack is real), and runs nothing once the findings are in quarantine. Each way has
a legitimate twin that must not be flagged: a nested repository or a submodule used during the
run, a pre-existing nested repository with the operator's own hooks, the fixture left in place.
The same through a real cage and a gate: test_git_planted.py, tests/gate/test_redteam_gate.py.
"""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from sandboy.confine import gitcheck

from gitkit import git_repo, scratch_env, sh, snapshot

GITLINK = "git update-index --add --cacheinfo 160000,$(git rev-parse HEAD),{path}"


@pytest.fixture
def env(tmp_path):
    return scratch_env(tmp_path / "home")


def host_git(env, where, *args):
    """The operator's next git command, as the host runs it (no cage, no check)."""
    return subprocess.run(["git", "-c", "safe.directory=*", *args], cwd=where, capture_output=True, env=env,
                          timeout=30)


def shipped(tmp_path, env, marker, worktree=None):
    """A repository whose checkout holds `tests/fixtures/evil`, a git directory as plain tracked
    files: HEAD, objects/ and refs/ (kept by a `.keep`), a config with `core.fsmonitor` (and
    `core.worktree` where given) and an executable hooks/pre-commit. Every file is older than
    the snapshot the probe takes next."""
    repo = git_repo(tmp_path / "repo", env)
    sh("git init -q --bare tests/fixtures/evil && touch tests/fixtures/evil/objects/.keep "
       "tests/fixtures/evil/refs/.keep", repo, env)
    config = f'[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tfsmonitor = "touch {marker}; false"\n'
    if worktree:
        config += f"\tworktree = {worktree}\n"
    (repo / "tests/fixtures/evil/config").write_text(config)
    (repo / "tests/fixtures/evil/hooks/pre-commit").write_text(f"#!/bin/sh\ntouch {marker}\n")
    os.chmod(repo / "tests/fixtures/evil/hooks/pre-commit", 0o755)
    sh("git add -A && git commit -qm fixtures", repo, env)
    return repo


def a_submodule(repo, env, name="lib"):
    """A declared submodule `name` (a local repository added with `git submodule add`,
    committed): `.gitmodules`, `<name>/.git` a git file, its git directory in `.git/modules`."""
    upstream = git_repo(repo.parent / f"{name}-upstream", env)
    sh(f"git -c protocol.file.allow=always submodule add -q '{upstream}' {name} && git commit -qm sub", repo, env)


# --- the ways: each a script the command runs, where the operator's git then runs, and what the
# --- check must name (relative to the repository) --------------------------------------------

WAYS = {
    # the git directory itself renamed into a NEW nested `.git`, registered as a gitlink: the
    # operator's `git status` at the top recurses into it (the strict-xfail hole of session 5)
    "renamed behind a gitlink": (
        "mkdir -p vendor/x && mv tests/fixtures/evil vendor/x/.git && " + GITLINK.format(path="vendor/x"),
        ".", "status", {"vendor/x/.git/config", "vendor/x/.git/hooks/pre-commit"}),
    # a directory that is not the git directory renamed: its new name is `.git`'s parent's...
    # the fixture first becomes `tests/fixtures/.git` (a rename of its own), then an ANCESTOR
    # holding it is renamed behind a gitlink
    "ancestor renamed": (
        "mv tests/fixtures/evil tests/fixtures/.git && mkdir vendor && mv tests/fixtures vendor/x && "
        + GITLINK.format(path="vendor/x"),
        ".", "status", {"vendor/x/.git/config", "vendor/x/.git/hooks/pre-commit"}),
    # its files hard-linked into a new `.git` (link() gives each inode a new ctime, so both
    # names are found and moved; the new directory was no git directory at launch either)
    "hard links": (
        "mkdir -p vendor/x/.git/objects vendor/x/.git/refs vendor/x/.git/hooks && "
        "ln tests/fixtures/evil/HEAD tests/fixtures/evil/config vendor/x/.git/ && "
        "ln tests/fixtures/evil/hooks/pre-commit vendor/x/.git/hooks/ && " + GITLINK.format(path="vendor/x"),
        ".", "status", {"vendor/x/.git/config", "vendor/x/.git/hooks/pre-commit", "tests/fixtures/evil/config",
                        "tests/fixtures/evil/hooks/pre-commit"}),
    # a `.git` file leading to the old git directory where it is (nothing of it moved)
    "git file": (
        "mkdir -p vendor/x && printf 'gitdir: ../../tests/fixtures/evil\\n' > vendor/x/.git && "
        + GITLINK.format(path="vendor/x"),
        ".", "status", {"tests/fixtures/evil/config", "tests/fixtures/evil/hooks/pre-commit"}),
    # a `.git` symlink to it
    "git symlink": (
        "mkdir -p vendor/x && ln -s ../../tests/fixtures/evil vendor/x/.git && " + GITLINK.format(path="vendor/x"),
        ".", "status", {"tests/fixtures/evil/config", "tests/fixtures/evil/hooks/pre-commit"}),
    # renamed into `.git/modules/x`, the absorbed layout (its shipped `core.worktree` names the
    # worktree, a git file there leads back): what `git submodule absorbgitdirs` leaves
    "absorbed, core.worktree": (
        "mv tests/fixtures/evil .git/modules-x && mkdir -p .git/modules vendor/x && mv .git/modules-x .git/modules/x "
        "&& printf 'gitdir: ../../.git/modules/x\\n' > vendor/x/.git && " + GITLINK.format(path="vendor/x"),
        ".", "status", {".git/modules/x/config", ".git/modules/x/hooks/pre-commit"}),
    # a declared submodule's git directory swapped: `lib/.git` (old) still leads to
    # `.git/modules/lib`, which is now the fixture; under the tier `.git/modules` is not bound
    "declared submodule's git directory": (
        "mv .git/modules/lib .git/modules/lib.old && mv tests/fixtures/evil .git/modules/lib",
        ".", "status", {".git/modules/lib/config", ".git/modules/lib/hooks/pre-commit"}),
    # renamed to a bare-layout directory the operator works in (`core.worktree = ..` shipped:
    # git run in `build` takes `build` itself for its git directory)
    "bare directory the operator enters": (
        "mv tests/fixtures/evil build", "build", "status", {"build/config", "build/hooks/pre-commit"}),
    # the same git directory moved in by its own rename, and the operator's COMMIT (its hook)
    "renamed, the operator commits in it": (
        "mkdir -p vendor/x && mv tests/fixtures/evil vendor/x/.git && cd vendor/x && git commit -q --allow-empty "
        "--no-verify -m x",
        "vendor/x", "commit", {"vendor/x/.git/config", "vendor/x/.git/hooks/pre-commit"}),
}

WORKTREE = {"absorbed, core.worktree": "../../../vendor/x", "declared submodule's git directory": "../../../lib",
            "bare directory the operator enters": ".."}


@pytest.mark.parametrize("way", WAYS)
def test_a_git_directory_moved_where_the_hosts_git_uses_it_is_judged_whole(tmp_path, env, way):
    script, where, command, expected = WAYS[way]
    marker = tmp_path / "PWNED"
    repo = shipped(tmp_path, env, marker, WORKTREE.get(way))
    if way == "declared submodule's git directory":
        a_submodule(repo, env)
    snap = snapshot(repo, env)
    sh(script, repo, env)
    findings = snap.verify()
    args = ("commit", "-q", "--allow-empty", "-m", "operator") if command == "commit" else ("status",)
    host_git(env, repo / where, *args)
    assert marker.exists(), f"the attack is not real: the host's git {command} in {where} ran nothing"
    marker.unlink()
    assert {os.path.relpath(f.path, repo) for f in findings if f.path} == expected, findings
    moved, failed = gitcheck.quarantine(findings, snap.writable)
    assert not failed, failed
    host_git(env, repo / where, *args)
    assert not marker.exists(), f"the host's git {command} in {where} ran the planted program after the quarantine"


def test_an_ancestor_rename_keeps_the_git_directorys_own_ctime(tmp_path, env):
    """Why the git directory's own ctime is no signal (session 6, evaluated): a nested
    repository present at launch whose ANCESTOR the run renames keeps its ctime (only the
    renamed directory gets a new one), while a nested repository merely used gets one (a commit
    makes and removes `index.lock` in it) — the cheap rule would miss the first and flag the
    second. Its launch path, not its ctime, decides. Host side: the top's `git status` ran the
    nested repository's fsmonitor once the rename put it behind a gitlink."""
    marker = tmp_path / "PWNED"
    repo = git_repo(tmp_path / "repo", env)
    # a nested repository present at launch, not a gitlink: the top's git never enters it
    sh("mkdir attic && git init -q attic/x && git -C attic/x commit -q --allow-empty -m x", repo, env)
    sh(f"git -C attic/x config core.fsmonitor 'touch {marker}; false'", repo, env)
    snap = snapshot(repo, env)
    host_git(env, repo, "status")
    assert not marker.exists(), "the set-up is wrong: the top's git ran the nested repository's config already"
    sh("mv attic vendor && " + GITLINK.format(path="vendor/x"), repo, env)
    assert os.lstat(repo / "vendor/x/.git").st_ctime_ns < snap.since_ns, "the ancestor's rename changed .git's ctime"
    findings = snap.verify()
    host_git(env, repo, "status")
    assert marker.exists(), "the attack is not real: the top's git status did not recurse into vendor/x"
    assert [os.path.relpath(f.path, repo) for f in findings if f.path] == ["vendor/x/.git/config"], findings


# --- the twins: legitimate work with git directories that were there at launch ------------------


def _operators_nested_repository(repo, env, marker):
    """`tools/helper`: a nested repository the operator made before the run, with their own
    pre-commit hook (touching `marker`) and keys the check would flag in anything new (an alias,
    a pager)."""
    sh("mkdir tools && git init -q tools/helper && git -C tools/helper commit -q --allow-empty -m h "
       "&& git -C tools/helper config alias.st status && git -C tools/helper config core.pager cat", repo, env)
    hook = repo / "tools/helper/.git/hooks/pre-commit"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
    os.chmod(hook, 0o755)


TWINS = {
    # the operator's nested repository, used: a commit runs their hook, a status, a branch
    "nested repository used": "cd tools/helper && git commit -q --allow-empty -m run && git status >/dev/null "
                              "&& git branch -q feature && git gc -q",
    # a declared submodule used: update, a commit inside it, the new commit recorded at the top
    "submodule used": "git -c protocol.file.allow=always submodule -q update --init && "
                      "git -C lib commit -q --allow-empty -m in-lib && git add lib && git commit -qm bump",
    # the shipped fixture left where it is while the run works around it, and read
    "fixture read in place": "cat tests/fixtures/evil/config >/dev/null && touch tests/fixtures/notes.txt && "
                             "git add -A && git commit -qm notes",
    # directories renamed that hold no git directory
    "plain directories renamed": "mkdir -p src/a && touch src/a/f && mv src build && mv build/a build/b",
    # a new nested repository and a new submodule made by the run (all new, judged whole, clean)
    "new repositories": "git init -q fresh && git -C fresh commit -q --allow-empty -m f && "
                        "git -c protocol.file.allow=always submodule add -q \"$PWD/tools/helper\" vendored",
}


@pytest.mark.parametrize("twin", TWINS)
def test_git_directories_there_at_launch_and_used_are_not_flagged(tmp_path, env, twin):
    marker = tmp_path / "HOOK-RAN"
    repo = shipped(tmp_path, env, tmp_path / "PWNED")
    _operators_nested_repository(repo, env, marker)
    a_submodule(repo, env)
    snap = snapshot(repo, env)
    sh(TWINS[twin], repo, env)
    assert snap.verify() == []
    if twin == "nested repository used":
        assert marker.exists(), "the twin is not real: the operator's own hook did not run in the cage's commit"
        # the cheap rule "a git directory whose own ctime is the run's is judged whole" would
        # have flagged this repository's hook and keys (session 6: why it was not taken)
        assert os.lstat(repo / "tools/helper/.git").st_ctime_ns >= snap.since_ns


def test_a_worktree_of_a_repository_outside_the_write_roots_is_not_flagged(tmp_path, env):
    """A write root holding a linked worktree (a leaf: its `.git` is a file) of the operator's
    repository elsewhere, with their own hook and keys. The launch walk does not look into
    leaves, so that repository is not in the launch record and is judged whole — yet nothing
    in it lies in a write root, and what the run cannot write is never flagged. The run commits
    in the worktree."""
    marker = tmp_path / "HOOK-RAN"
    outside = git_repo(tmp_path / "outside", env)
    sh("git config alias.st status && git config core.pager cat", outside, env)
    (outside / ".git/hooks/pre-commit").write_text(f"#!/bin/sh\ntouch {marker}\n")
    os.chmod(outside / ".git/hooks/pre-commit", 0o755)
    (tmp_path / "work").mkdir()
    sh(f"git worktree add -q '{tmp_path}/work/wt' && echo x > '{tmp_path}/work/wt/f'", outside, env)
    time.sleep(0.02)
    snap = gitcheck.snapshot([str(tmp_path / "work")], home=env["HOME"])
    sh("git add f && git commit -qm in-worktree", tmp_path / "work" / "wt", env)
    assert marker.exists(), "the twin is not real: the operator's hook did not run"
    assert snap.verify() == []


# --- a launch record carried from one check to the next (a gate's steps) --------------------------


def _step(scope, record, script, cwd, env):
    """One gate step as the check sees it: the launch (carried record or a walk), the command,
    the check, the quarantine, the record handed on (GitCheck.start/stop do the same)."""
    snap = gitcheck.GitSnapshot.at_launch(scope, record.take())
    sh(script, cwd, env)
    findings = snap.verify()
    gitcheck.quarantine(findings, snap.writable)
    record.dirs = snap.after
    return snap, findings


def test_the_next_step_takes_the_previous_checks_record_and_walks_nothing_more(tmp_path, env, monkeypatch):
    """Step 1 runs clean; step 2 moves the shipped fixture behind a gitlink. Step 2's launch
    walks nothing (the census of step 1's check is carried) yet knows the fixture's launch
    path, so it is found; the operator's nested repository, used in both steps, is not."""
    marker = tmp_path / "PWNED"
    repo = shipped(tmp_path, env, marker)
    _operators_nested_repository(repo, env, tmp_path / "HOOK-RAN")
    scope = gitcheck.Scope([str(repo)], home=env["HOME"])
    record = gitcheck.LaunchRecord()
    time.sleep(0.02)
    _, findings = _step(scope, record, "git -C tools/helper commit -q --allow-empty -m one", repo, env)
    assert findings == [] and record.dirs is not None
    walks = []
    real_walk = gitcheck._Walk.walk  # (the census and the check both walk through it)
    monkeypatch.setattr(gitcheck._Walk, "walk", lambda self, root, left: (walks.append(self.census),
                                                                              real_walk(self, root, left))[1])
    _, findings = _step(scope, record, "git -C tools/helper commit -q --allow-empty -m two && mkdir -p vendor/x && "
                        "mv tests/fixtures/evil vendor/x/.git && " + GITLINK.format(path="vendor/x"), repo, env)
    assert walks == [False], "step 2 walked at launch although step 1's check was carried"
    assert {os.path.relpath(f.path, repo) for f in findings} == {"vendor/x/.git/config",
                                                                "vendor/x/.git/hooks/pre-commit"}, findings
    host_git(env, repo, "status")
    assert not marker.exists(), "the host's git ran the moved fixture's program after the quarantine"


def test_a_root_the_carried_record_does_not_cover_is_walked_at_launch(tmp_path, env):
    """Step 1 writes `repo/build` only; step 2 writes all of `repo`. The carried record covers
    `build` alone, so step 2 walks `repo` at launch: the operator's nested repository (with its
    own hook and keys, there since before step 1) is not judged whole — and the fixture, moved
    by step 2, is."""
    repo = shipped(tmp_path, env, tmp_path / "PWNED")
    _operators_nested_repository(repo, env, tmp_path / "HOOK-RAN")
    (repo / "build").mkdir()
    record = gitcheck.LaunchRecord()
    time.sleep(0.02)
    _step(gitcheck.Scope([str(repo / "build")], home=env["HOME"]), record, "touch build/out", repo, env)
    assert record.dirs is not None and not record.dirs.covers(str(repo))
    _, findings = _step(gitcheck.Scope([str(repo)], home=env["HOME"]), record,
                        "git -C tools/helper commit -q --allow-empty -m two && mv tests/fixtures/evil build/.git",
                        repo, env)
    assert {os.path.relpath(f.path, repo) for f in findings} == {"build/.git/config", "build/.git/hooks/pre-commit"}


def test_a_check_that_did_not_end_leaves_no_record(tmp_path, env):
    """A record is taken at launch: a run whose check never ran (abandoned, an error) leaves
    the next launch to walk again rather than trust a record older than that run."""
    repo = shipped(tmp_path, env, tmp_path / "PWNED")
    record = gitcheck.LaunchRecord()
    time.sleep(0.02)
    snap = gitcheck.GitSnapshot.at_launch(gitcheck.Scope([str(repo)], home=env["HOME"]), record.take())
    snap.verify()
    record.dirs = snap.after
    gitcheck.GitSnapshot.at_launch(gitcheck.Scope([str(repo)], home=env["HOME"]), record.take())
    assert record.take() is None


@pytest.mark.needs_kernel
def test_a_step_without_the_check_drops_the_carried_record(tmp_path, env):
    """A gate step the check does not apply to (`fs.protect_defaults = false`, where the ceiling
    allows it) may still write: after it, the record no longer says where the git directories
    are, so `hooks_for` empties it and the next checked step walks at launch. A checked step
    takes the record into its hook instead."""
    import sandboy
    from sandboy.confine.cage import build
    from sandboy.confine.exec_mode import hooks_for

    repo = shipped(tmp_path, env, tmp_path / "PWNED")
    record = gitcheck.LaunchRecord()
    for defaults, expect_check in ((False, False), (True, True)):
        record.dirs = gitcheck.GitDirs([str(repo)], [], {})
        policy = sandboy.Policy.from_mapping({"version": 1, "fs": {"read": ["/usr"], "write": [str(repo)],
                                                                   "protect_defaults": defaults}}, "<test>")
        cage = build(policy, cwd=str(repo))
        try:
            checks = [h for h in hooks_for(cage, None, record) if isinstance(h, gitcheck.GitCheck)]
        finally:
            cage.close()
        assert bool(checks) == expect_check
        if expect_check:
            assert checks[0].record is record and record.dirs is not None  # taken at the step's start
        else:
            assert record.dirs is None, "a step without the check left the record to the next one"


# --- the worktree top swapped around a git directory that stays where it was (rvgit6) ---------------

TOP_SWAPS = {
    # no swap of the top: a directory ABOVE a nested hooks directory renamed away and a tracked
    # one put in its place (`core.hooksPath = scripts/git-hooks`): the hooks directory and its
    # hooks keep their ctimes
    "ancestor of a nested core.hooksPath": ("git config core.hooksPath scripts/git-hooks && mkdir -p scripts/git-hooks",
                                            "tests/fx/scripts/git-hooks/pre-commit",
                                            "scripts/git-hooks/pre-commit"),
    # the operator's hooks directory is relative to the top (`core.hooksPath = .githooks`): a
    # tracked directory shaped like a worktree becomes the top, `.git` moved into it keeps its
    # path and identity; `.githooks/pre-commit` in it is the project's tracked file (old ctime)
    "relative core.hooksPath": ("git config core.hooksPath .githooks && mkdir -p .githooks",
                                "tests/fx/.githooks/pre-commit", ".githooks/pre-commit"),
}


@pytest.mark.parametrize("swap", TOP_SWAPS)
def test_a_worktree_top_swapped_around_its_git_directory_is_judged_whole(tmp_path, env, swap):
    setup, hook, planted = TOP_SWAPS[swap]
    marker = tmp_path / "PWNED"
    ws = tmp_path / "ws"
    ws.mkdir()
    repo = git_repo(ws / "repo", env)
    sh(setup, repo, env)
    (repo / hook).parent.mkdir(parents=True)
    (repo / hook).write_text(f"#!/bin/sh\ntouch {marker}\n")
    os.chmod(repo / hook, 0o755)
    sh("git add -A && git commit -qm fixture", repo, env)
    time.sleep(0.02)
    # (the ancestor case with the repository itself as the write root, the usual `{repo}`)
    snap = gitcheck.snapshot([str(ws / "repo" if swap == "ancestor of a nested core.hooksPath" else ws)],
                             home=env["HOME"])
    # the command: the top renamed away, the tracked fixture made the top, `.git` moved into it
    if swap == "ancestor of a nested core.hooksPath":
        sh("mv scripts scripts-old && mv tests/fx/scripts scripts", ws / "repo", env)
    else:
        sh("mv repo old && mv old/tests/fx repo && mv old/.git repo/.git", ws, env)
    findings = snap.verify()
    host_git(env, ws / "repo", "commit", "-q", "--allow-empty", "-m", "operator")
    assert marker.exists(), "the attack is not real: the operator's commit did not run the fixture's hook"
    marker.unlink()
    assert planted in {os.path.relpath(f.path, ws / "repo") for f in findings if f.path}, findings
    moved, failed = gitcheck.quarantine(findings, snap.writable)
    assert not failed, failed
    host_git(env, ws / "repo", "commit", "-q", "--allow-empty", "-m", "after")
    assert not marker.exists(), "the operator's commit ran the fixture's hook after the quarantine"


def test_work_at_the_top_of_a_repository_in_a_write_root_above_it_is_not_flagged(tmp_path, env):
    """The twin: the write root holds the repository (its top can be renamed), the operator's
    hooks directory is relative to the top; the run makes and renames things at the top and
    commits (the top's ctime changes, its identity does not): nothing flagged, their hook ran."""
    marker = tmp_path / "HOOK-RAN"
    ws = tmp_path / "ws"
    ws.mkdir()
    repo = git_repo(ws / "repo", env)
    sh("git config core.hooksPath .githooks && mkdir .githooks", repo, env)
    (repo / ".githooks/pre-commit").write_text(f"#!/bin/sh\ntouch {marker}\n")
    os.chmod(repo / ".githooks/pre-commit", 0o755)
    sh("git add -A && git commit -qm hooks", repo, env)
    marker.unlink()
    time.sleep(0.02)
    snap = gitcheck.snapshot([str(ws)], home=env["HOME"])
    sh("mkdir -p build/a && touch out.txt && mv build dist && git add -A && git commit -qm work", repo, env)
    assert marker.exists(), "the twin is not real: the operator's hook did not run"
    assert snap.verify() == []

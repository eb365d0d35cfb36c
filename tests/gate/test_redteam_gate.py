"""Red-team: a hostile repository's gate steps planting code for the operator's next git
command, through doors the protected set did not name. Checked from the host: the operator's
own `git status` after the gate runs nothing the steps wrote. Open holes are
`xfail(strict=True)` with the reason (see tests/cage/test_redteam_tier.py).
"""

from __future__ import annotations

import os
import subprocess

import pytest

from gatekit import by_name, make_repo, run_json

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.org"}

ATTACKS = {
    # only .git/config and .git/hooks were mount points: their directory could be renamed away
    "rename-git-dir": "mv .git .git.old; mkdir -p .git && cp -r .git.old/. .git/ && printf 'FSMONITOR' >> .git/config",
    # .git/commondir does not exist at launch: git reads config and hooks where it points
    "commondir": "mkdir evil && cp -r .git/objects .git/refs evil/ && printf 'FSMONITOR' > evil/config "
                 "&& echo ../evil > .git/commondir",
    # a nested repository registered as a gitlink: the host's git status runs git status in it
    "submodule": "git init -q sub && git -C sub -c user.name=t -c user.email=t@x commit -q --allow-empty -m s "
                 "&& printf 'FSMONITOR' >> sub/.git/config "
                 "&& git update-index --add --cacheinfo 160000,$(git -C sub rev-parse HEAD),sub",
}
OPEN: dict = {}  # name -> reason, for holes not closed yet (xfail strict)
# stopped by the mount namespace; the others are found by the post-run git check (ADR 0019)
PREVENTED = {"rename-git-dir"}


def _tier_available() -> bool:
    from sandboy.confine import namespaces

    return namespaces.availability()[0]


@pytest.mark.parametrize("attack", [pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=OPEN[name]))
                                    if name in OPEN else name for name in ATTACKS])
def test_step_cannot_plant_code_for_the_operators_next_git_command(tmp_path, fake_home, attack):
    if not _tier_available():
        pytest.skip("without the namespace tier the default protected set is reported degraded")
    marker = tmp_path / "PWNED"
    fsmonitor = f'[core]\\n\\tfsmonitor = "touch {marker}; false"\\n'
    script = ATTACKS[attack].replace("FSMONITOR", fsmonitor) + "; echo ATTEMPTED; exit 0"
    gate = f"""
        [[step]]
        name = "plant"
        run = '''{script}'''
    """
    repo = make_repo(tmp_path, gate, files={"notes.txt": "one\n"})
    subprocess.run(["git", "-C", str(repo), "init", "-q"], check=True)
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(repo), "commit", "-qm", "first"], check=True, env={**os.environ, **GIT_ENV})
    proc, report = run_json(repo, tmp_path, home=fake_home, env=GIT_ENV)
    step = by_name(report)["plant"]
    assert "ATTEMPTED" in step["output_tail"], report
    if attack in PREVENTED:
        assert step["status"] == "passed" and proc.returncode == 0, report
    else:  # found by the post-run check: quarantined, the step and the gate fail closed (ADR 0019)
        assert step["status"] == "cage_error" and proc.returncode == 125, report
        assert "left code for the host's next git command" in step["error"], report
        assert (repo / ".sandboy-quarantine").is_dir()
    # the operator, after the gate: their next git command in the repository
    subprocess.run(["git", "-c", "safe.directory=*", "-C", str(repo), "status"], capture_output=True, timeout=30,
                   env={**os.environ, **GIT_ENV})
    assert not marker.exists(), f"{attack}: the operator's git ran a command a gate step planted"


def test_legitimate_git_work_in_a_step_is_not_flagged(tmp_path, fake_home):
    """The twin of the post-run git check (ADR 0019) in a gate: a step that clones, adds a
    submodule and a worktree and commits passes, and nothing is quarantined. (`submodule add`
    cannot record the submodule in the protected `.git/config` and says so; it still succeeds.)"""
    gate = """
        [[step]]
        name = "git-work"
        run = '''set -e; git clone -q "$PWD/libsrc" cloned; git -c protocol.file.allow=always submodule add -q "$PWD/libsrc" sub; g="git -c user.name=t -c user.email=t@x"; $g commit -qm sub; git worktree add -q wt; $g -C wt commit -q --allow-empty -m in-wt; echo DONE'''
    """
    repo = make_repo(tmp_path, gate, files={"notes.txt": "one\n"})
    env = {**os.environ, **GIT_ENV}
    subprocess.run(["git", "init", "-q", str(repo / "libsrc")], check=True)
    subprocess.run(["git", "-C", str(repo / "libsrc"), "commit", "-q", "--allow-empty", "-m", "lib"], check=True, env=env)
    subprocess.run(["git", "-C", str(repo), "init", "-q"], check=True)
    (repo / ".gitignore").write_text("libsrc/\ncloned/\nwt/\n")
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(repo), "commit", "-qm", "first"], check=True, env=env)
    proc, report = run_json(repo, tmp_path, home=fake_home, env=GIT_ENV)
    step = by_name(report)["git-work"]
    assert step["status"] == "passed" and "DONE" in step["output_tail"], step["output_tail"]
    assert proc.returncode == 0 and not (repo / ".sandboy-quarantine").exists()


@pytest.mark.parametrize("hostile", [True, False], ids=["planted", "twin: init and commit"])
def test_a_step_in_a_directory_without_a_repository_cannot_plant_one(tmp_path, fake_home, hostile):
    """The gate run on a directory that is no git repository (an unpacked tarball): before
    session 5 the post-run check did not look at such a write root, and a step that `git init`s
    with a planted `core.fsmonitor` passed; the operator's next `git status` there ran it."""
    marker = tmp_path / "PWNED"
    plant = f"printf '[core]\\n\\tfsmonitor = \"touch {marker}; false\"\\n' >> .git/config; " if hostile else ""
    gate = f"""
        [[step]]
        name = "init"
        run = '''set -e; git init -q .; git -c user.name=t -c user.email=t@x commit -q --allow-empty -m one; {plant}echo DONE'''
    """
    repo = make_repo(tmp_path, gate, files={"notes.txt": "one\n"})
    proc, report = run_json(repo, tmp_path, home=fake_home, env=GIT_ENV)
    step = by_name(report)["init"]
    assert "DONE" in step["output_tail"], report
    if hostile:
        assert step["status"] == "cage_error" and proc.returncode == 125, report
        assert "left code for the host's next git command" in step["error"], report
        subprocess.run(["git", "-c", "safe.directory=*", "-C", str(repo), "status"], capture_output=True, timeout=30,
                       env={**os.environ, **GIT_ENV})
        assert not marker.exists(), "the operator's git ran a command a gate step planted"
    else:
        assert step["status"] == "passed" and proc.returncode == 0, report
        assert not (repo / ".sandboy-quarantine").exists()


def test_no_process_of_a_step_is_left_to_plant_after_the_check(tmp_path, fake_home):
    """A step leaves a detached, setsid'd, signal-ignoring process that plants a repository
    two seconds later — after the post-run check, had it survived. The gate reaps every
    process of a step before the check: a second after the gate nothing was planted, and the
    operator's git runs nothing. (The same script waited for does plant and is caught:
    tests/cage/test_git_planted.py::test_no_process_of_the_run_is_left_to_plant_after_the_check.)"""
    import time

    marker = tmp_path / "PWNED"
    gate = """
        [[step]]
        name = "leave"
        run = '''setsid sh late.sh </dev/null >/dev/null 2>&1 & echo LEFT'''
    """
    late = ("trap '' HUP TERM INT\nsleep 2\ngit init -q late && "
            f"printf '[core]\\n\\tfsmonitor = \"touch {marker}; false\"\\n' >> late/.git/config\ntouch LATE\n")
    repo = make_repo(tmp_path, gate, files={"late.sh": late})
    subprocess.run(["git", "-C", str(repo), "init", "-q"], check=True)
    proc, report = run_json(repo, tmp_path, home=fake_home, env=GIT_ENV)
    step = by_name(report)["leave"]
    assert "LEFT" in step["output_tail"] and step["status"] == "passed" and proc.returncode == 0, report
    time.sleep(2.5)
    assert not (repo / "LATE").exists() and not (repo / "late").exists(), "a process of the step outlived the gate"
    subprocess.run(["git", "-c", "safe.directory=*", "-C", str(repo), "status"], capture_output=True, timeout=30,
                   env={**os.environ, **GIT_ENV})
    assert not marker.exists(), "the operator's git ran a command a leftover process planted"


def test_a_step_cannot_rewrite_the_husky_script_the_operators_commit_runs(tmp_path, fake_home):
    """The repository uses husky (`core.hooksPath = .husky/_`, set by the operator's `npm
    install`): the operator's next commit runs the tracked `.husky/pre-commit`. A step rewrites
    it; under the tier the write is refused (bound read-only), without it the step fails closed
    (125, quarantined). Host side: the operator's commit runs their own script, never the step's."""
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "cage"))
    from gitkit import husky_install

    marker = tmp_path / "PWNED"
    gate = f"""
        [[step]]
        name = "husky"
        run = '''printf 'touch {marker}\\\\n' > .husky/pre-commit; echo ATTEMPTED'''
    """
    repo = make_repo(tmp_path, gate, files={".husky/pre-commit": f"touch {tmp_path}/OPERATORS\n"})
    env = {**os.environ, **GIT_ENV}
    subprocess.run(["git", "-C", str(repo), "init", "-q"], check=True)
    husky_install(repo)
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(repo), "commit", "-qm", "first"], check=True, env=env)
    os.unlink(tmp_path / "OPERATORS")
    proc, report = run_json(repo, tmp_path, home=fake_home, env=GIT_ENV)
    step = by_name(report)["husky"]
    assert "ATTEMPTED" in step["output_tail"], report
    if _tier_available():
        assert step["status"] == "passed" and proc.returncode == 0, report
        assert "Read-only file system" in step["output_tail"], step["output_tail"]
    else:
        assert step["status"] == "cage_error" and proc.returncode == 125, report
    subprocess.run(["git", "-C", str(repo), "commit", "-q", "--allow-empty", "-m", "operator"], capture_output=True,
                   timeout=30, env=env)
    assert not marker.exists(), "the operator's commit ran a husky script a gate step wrote"
    assert (tmp_path / "OPERATORS").exists() == _tier_available()


@pytest.mark.parametrize("hostile", [True, False], ids=["step 2 moves the fixture", "twin: both steps use a nested repo"])
def test_a_later_step_cannot_move_a_shipped_git_directory_behind_a_gitlink(tmp_path, fake_home, hostile):
    """The repository ships a git directory as tracked files (`tests/fixtures/evil`, config with
    `core.fsmonitor`). Step 1 works in the operator's nested repository (their own hook and an
    alias, there since before the gate); step 2 renames the fixture into a new `vendor/x/.git`
    behind a gitlink — every file keeps its ctime. Step 2 takes step 1's post-run record as its
    launch record (no walk of its own, ADR 0019 session 6), which knows the fixture's launch
    path: the step fails closed (125). Host side: the operator's git status runs nothing. The
    twin (step 2 uses the nested repository again) passes: the carried record knows it there."""
    marker = tmp_path / "PWNED"
    second = ("mkdir -p vendor/x && mv tests/fixtures/evil vendor/x/.git && git update-index --add --cacheinfo "
              "160000,$(git rev-parse HEAD),vendor/x" if hostile else
              "git -C tools/helper -c user.name=t -c user.email=t@x commit -q --allow-empty --no-verify -m two")
    gate = f"""
        [[step]]
        name = "one"
        run = '''git -C tools/helper -c user.name=t -c user.email=t@x commit -q --allow-empty --no-verify -m one && echo ONE'''
        [[step]]
        name = "two"
        run = '''{second} && echo TWO'''
    """
    repo = make_repo(tmp_path, gate, files={"notes.txt": "one\n"})
    env = {**os.environ, **GIT_ENV}
    setup = ("git init -q . && git init -q --bare tests/fixtures/evil && touch tests/fixtures/evil/objects/.keep "
             "tests/fixtures/evil/refs/.keep && mkdir tools && git init -q tools/helper && git -C tools/helper "
             "commit -q --allow-empty -m h && git -C tools/helper config alias.st status && echo tools/ >> "
             ".git/info/exclude && printf '#!/bin/sh\\nexit 0\\n' > tools/helper/.git/hooks/pre-commit && "
             f"printf '[core]\\n\\tfsmonitor = \"touch {marker}; false\"\\n' >> tests/fixtures/evil/config && "
             "git add -A && git commit -qm shipped")
    subprocess.run(setup, shell=True, cwd=repo, check=True, capture_output=True, env=env)
    proc, report = run_json(repo, tmp_path, home=fake_home, env=GIT_ENV)
    steps = by_name(report)
    assert steps["one"]["status"] == "passed" and "ONE" in steps["one"]["output_tail"], report
    assert "TWO" in steps["two"]["output_tail"], report
    if not hostile:
        assert steps["two"]["status"] == "passed" and proc.returncode == 0, report
        assert not (repo / ".sandboy-quarantine").exists()
        return
    assert steps["two"]["status"] == "cage_error" and proc.returncode == 125, report
    assert "vendor/x/.git/config" in steps["two"]["error"], report
    subprocess.run(["git", "-c", "safe.directory=*", "-C", str(repo), "status"], capture_output=True, timeout=30, env=env)
    assert not marker.exists(), "the operator's git status ran the fixture a gate step moved behind a gitlink"

"""Code planted for the host's next git command, through a real cage (issue #7 item 5, ADR 0019):
what no mount can protect (a `.git/commondir`, a nested repository behind a gitlink) is found
by the parent after the run, moved into a quarantine directory, and the run fails closed with
125 (outcome `planted`). Through the API and the CLI (exec mode under the tier; supervised
without it), with the namespace tier and forced off; checked from the host side: the
operator's `git status` runs nothing. Twins: submodule add, worktree add, clone, commit.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from gitkit import GIT_ENV
from gitkit import fsmonitor as _fsmonitor
from gitkit import host_git_status as _host_git_status
from gitkit import host_repo as _host_repo

pytestmark = pytest.mark.needs_kernel

QUARANTINE = ".sandboy-quarantine"


@pytest.fixture(params=["tier", "no-tier"])
def tier(request, monkeypatch):
    if request.param == "no-tier":
        monkeypatch.setenv("SANDBOY_NAMESPACES", "0")
    else:
        from sandboy.confine import namespaces

        ok, why = namespaces.availability()
        if not ok:
            pytest.skip(f"namespace tier unavailable here ({why})")
    return request.param


def _policy(cage, read=()):
    return cage.policy(fs={"read": ["/etc", "/proc/self", *read], "exec": ["/usr/bin", "/bin", "/usr/lib/git-core"],
                           "write": ["."]},
                       env={"pass": [], "set": {"PATH": "/usr/bin:/bin", "HOME": str(cage.work), **GIT_ENV}})


ATTACKS = {
    "commondir": "mkdir evil && cp -r .git/objects .git/refs evil/ && printf 'FSM' > evil/config "
                 "&& echo ../evil > .git/commondir",
    "submodule": "git init -q sub && git -C sub commit -q --allow-empty -m s && printf 'FSM' >> sub/.git/config "
                 "&& git update-index --add --cacheinfo 160000,$(git -C sub rev-parse HEAD),sub",
}


@pytest.mark.parametrize("via", ["api", "cli"])
@pytest.mark.parametrize("attack", ATTACKS)
def test_planted_git_config_fails_the_run_and_is_quarantined(cage, tmp_path, tier, via, attack):
    _host_repo(cage.work)
    marker = tmp_path / "PWNED"
    script = ATTACKS[attack].replace("FSM", _fsmonitor(marker)) + " && echo PLANTED"
    result = cage.run(argv=["/bin/sh", "-c", script], policy=_policy(cage), via=via)
    assert "PLANTED" in result.out, result
    assert result.rc == 125, result
    assert "left code for the host's next git command" in result.err, result
    _host_git_status(cage.work)
    assert not marker.exists(), f"{attack}: the host's git ran a command the cage planted"
    boxes = os.listdir(cage.work / QUARANTINE)
    assert len(boxes) == 1
    manifest = (cage.work / QUARANTINE / boxes[0] / "MANIFEST").read_text()
    planted = {"commondir": ".git/commondir", "submodule": "sub/.git/config"}[attack]
    assert f"{os.path.realpath(cage.work)}/{planted}" in manifest
    assert not (cage.work / planted).exists()
    log = subprocess.run(["git", "-C", str(cage.work), "log", "--format=%s"], capture_output=True, text=True)
    assert log.stdout.split() == ["init"], log


def test_the_status_report_says_planted(cage, tmp_path, tier):
    _host_repo(cage.work)
    status = tmp_path / "status.json"
    script = ATTACKS["commondir"].replace("FSM", "[core]\\n\\tpager = x\\n")
    result = cage.cli(["--status-json", str(status), "--", "/bin/sh", "-c", script], _policy(cage))
    assert result.rc == 125, result
    doc = json.loads(status.read_text())
    assert doc["outcome"] == "planted" and doc["returncode"] == 125, doc
    assert "commondir" in doc["error"], doc


def test_without_the_tier_a_planted_repository_config_is_caught_after_the_run(cage, tmp_path, monkeypatch):
    """Forced off, nothing binds `.git/config` (the defaults are reported degraded): the
    planted key is written during the run, found after it, and the launch content put back."""
    monkeypatch.setenv("SANDBOY_NAMESPACES", "0")
    _host_repo(cage.work)
    before = (cage.work / ".git" / "config").read_bytes()
    marker = tmp_path / "PWNED"
    script = (f"printf '{_fsmonitor(marker)}' >> .git/config && grep -q fsmonitor .git/config && echo WRITTEN; "
              f"printf '#!/bin/sh\\ntouch {marker}\\n' > .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit")
    result = cage.run(argv=["/bin/sh", "-c", script], policy=_policy(cage), via="cli")
    assert "WRITTEN" in result.out, result  # the twin: without the mount the write went through
    assert result.rc == 125 and "degraded" in result.err, result
    assert (cage.work / ".git" / "config").read_bytes() == before
    assert not (cage.work / ".git" / "hooks" / "pre-commit").exists()
    _host_git_status(cage.work)
    subprocess.run(["git", "-C", str(cage.work), "commit", "-q", "--allow-empty", "-m", "host"], check=True,
                   env={**os.environ, **GIT_ENV})
    assert not marker.exists()


TWINS = {
    "submodule add": "git -c protocol.file.allow=always submodule add -q LIB sub && git commit -qm sub",
    "worktree add": "git worktree add -q wt && git -C wt commit -q --allow-empty -m in-wt",
    "clone": "git clone -q LIB cloned && git -C cloned config user.name me",
    "commit": "echo x > f && git add f && git commit -qm two && git checkout -qb topic",
}


@pytest.mark.parametrize("via", ["api", "cli"])
@pytest.mark.parametrize("twin", TWINS)
def test_legitimate_git_work_in_the_cage_is_not_flagged(cage, tmp_path, tier, via, twin):
    _host_repo(cage.work)
    lib = tmp_path / "lib"
    _host_repo(lib)
    result = cage.run(argv=["/bin/sh", "-c", TWINS[twin].replace("LIB", str(lib)) + " && echo DONE"],
                      policy=_policy(cage, read=[str(lib)]), via=via)
    assert result.rc == 0 and "DONE" in result.out, result
    assert not (cage.work / QUARANTINE).exists()


PLAIN_ATTACKS = {
    # the write root holds no repository at launch: the command makes one, with a planted key
    "init": "git init -q . && printf 'FSM' >> .git/config",
    "init below": "mkdir -p a/b && git init -q a/b/r && printf 'FSM' >> a/b/r/.git/config",
}
PLAIN_WHERE = {"init": ".", "init below": "a/b/r"}


@pytest.mark.parametrize("via", ["api", "cli"])
@pytest.mark.parametrize("attack", PLAIN_ATTACKS)
def test_a_repository_planted_in_a_write_root_without_one_fails_the_run(cage, tmp_path, tier, via, attack):
    """Before session 5 a write root holding no repository at launch was not checked: the run
    passed and the operator's next `git status` there ran the planted command."""
    (cage.work / "notes.txt").write_text("no repository here\n")
    marker = tmp_path / "PWNED"
    script = PLAIN_ATTACKS[attack].replace("FSM", _fsmonitor(marker)) + " && echo PLANTED"
    result = cage.run(argv=["/bin/sh", "-c", script], policy=_policy(cage), via=via)
    assert "PLANTED" in result.out, result
    assert result.rc == 125 and "left code for the host's next git command" in result.err, result
    where = cage.work / PLAIN_WHERE[attack]
    _host_git_status(where)
    assert not marker.exists(), f"{attack}: the host's git ran a command the cage planted"
    boxes = os.listdir(cage.work / QUARANTINE)
    manifest = (cage.work / QUARANTINE / boxes[0] / "MANIFEST").read_text()
    assert f"{os.path.realpath(where)}/.git/config" in manifest, manifest


PLAIN_TWINS = {
    "init and commit": "git init -q . && echo x > f && git add f && git commit -qm one && git checkout -qb topic",
    "clone": "git clone -q LIB cloned && git -C cloned commit -q --allow-empty -m mine",
}


@pytest.mark.parametrize("via", ["api", "cli"])
@pytest.mark.parametrize("twin", PLAIN_TWINS)
def test_git_init_and_clone_in_a_write_root_without_a_repository_pass(cage, tmp_path, tier, via, twin):
    lib = tmp_path / "lib"
    _host_repo(lib)
    result = cage.run(argv=["/bin/sh", "-c", PLAIN_TWINS[twin].replace("LIB", str(lib)) + " && echo DONE"],
                      policy=_policy(cage, read=[str(lib)]), via=via)
    assert result.rc == 0 and "DONE" in result.out, result
    assert not (cage.work / QUARANTINE).exists()


def test_without_the_tier_every_write_root_but_tmp_is_supervised(cage, monkeypatch):
    """Without a PID namespace only a supervisor knows when the whole tree is gone, and every
    write root is checked now (a repository may be made in any): exec mode stays for a run
    that writes nowhere (its private {tmp} needs the supervisor anyway, to be removed)."""
    monkeypatch.setenv("SANDBOY_NAMESPACES", "0")
    dry = cage.cli(["--dry-run", "--json", "--", "/bin/true"], _policy(cage))
    assert json.loads(dry.out)["supervised"] is True, dry
    read_only = _policy(cage)
    read_only["fs"]["write"] = []
    dry = cage.cli(["--dry-run", "--json", "--", "/bin/true"], read_only)
    assert json.loads(dry.out)["supervised"] is False, dry


@pytest.mark.parametrize("via", ["api", "cli"])
def test_a_husky_script_cannot_be_planted(cage, tmp_path, tier, via):
    """`core.hooksPath = .husky/_` (what `npx husky` sets): the operator's next commit runs the
    tracked `.husky/pre-commit`. Under the tier it is bound read-only (the write fails); without
    it the write goes through and the post-run check quarantines it (125). Host side: the
    operator's commit runs nothing planted; their own script is still what runs."""
    from gitkit import husky_install

    _host_repo(cage.work)
    (cage.work / ".husky").mkdir()
    (cage.work / ".husky" / "pre-commit").write_text(f"touch {tmp_path}/OPERATORS\n")
    husky_install(cage.work)
    marker = tmp_path / "PWNED"
    script = f"printf 'touch {marker}\\n' > .husky/pre-commit && echo PLANTED; echo x > work.txt; echo DONE"
    result = cage.run(argv=["/bin/sh", "-c", script], policy=_policy(cage), via=via)
    assert "DONE" in result.out, result  # the twin: the rest of the worktree stays writable
    assert (cage.work / "work.txt").read_text() == "x\n"
    if tier == "tier":
        assert "PLANTED" not in result.out and result.rc == 0, result
    else:
        assert "PLANTED" in result.out and result.rc == 125, result
        assert "husky script" in result.err, result
    subprocess.run(["git", "-C", str(cage.work), "commit", "-q", "--allow-empty", "-m", "host"], capture_output=True,
                   env={**os.environ, **GIT_ENV}, timeout=30)
    assert not marker.exists(), "the operator's commit ran a husky script the cage planted"
    assert (tmp_path / "OPERATORS").exists() == (tier == "tier")  # quarantined without the tier


@pytest.mark.parametrize("hostile", [True, False], ids=["planted", "twin: clone in tmp"])
def test_a_kept_cages_tmp_is_checked_without_the_tier(tmp_path, monkeypatch, hostile):
    """Without the tier `{tmp}` is a host directory that lives as long as the cage (the API
    reusing one cage for many runs). It was never walked: a repository planted there plus a
    symlink to it in the write root, and the operator's `git status` in that link ran the
    planted command while the cage was kept — the run passed. Now {tmp} is walked where it is
    not the tier's private tmpfs; the twin (a clone and a commit in {tmp}) passes."""
    import tempfile

    import sandboy
    from sandboy.confine.cage import build

    monkeypatch.setenv("SANDBOY_NAMESPACES", "0")
    work = tmp_path / "work"
    work.mkdir()
    lib = tmp_path / "lib"
    _host_repo(lib)
    marker = tmp_path / "PWNED"
    policy = sandboy.Policy.from_mapping({
        "version": 1,
        "fs": {"read": ["/usr", "/etc", "/proc/self", str(lib)], "exec": ["/usr/bin", "/bin", "/usr/lib/git-core"],
               "write": [str(work), "{tmp}"]},
        "env": {"pass": [], "set": {"PATH": "/usr/bin:/bin", "HOME": "{tmp}", **GIT_ENV}}}, "<test>")
    if hostile:
        script = (f"git init -q \"$TMPDIR/evil\" && printf '{_fsmonitor(marker)}' >> \"$TMPDIR/evil/.git/config\" "
                  "&& ln -s \"$TMPDIR/evil\" link && echo PLANTED")
    else:
        script = f"git clone -q {lib} \"$TMPDIR/c\" && git -C \"$TMPDIR/c\" commit -q --allow-empty -m x && echo PLANTED"
    cage = build(policy, cwd=str(work))
    try:
        with tempfile.TemporaryFile() as out, open(os.devnull) as null:
            result = sandboy.run(["/bin/sh", "-c", script], cage, cwd=str(work), stdout=out.fileno(),
                                 stderr=out.fileno(), stdin=null.fileno())
            out.seek(0)
            text = out.read().decode()
        assert "PLANTED" in text, text
        if not hostile:
            assert result.returncode == 0, (result, text)
            return
        assert result.returncode == 125 and result.outcome == "planted", (result, text)
        subprocess.run(["git", "-c", "safe.directory=*", "status"], cwd=work / "link", capture_output=True, timeout=30)
        assert not marker.exists(), "the operator's git ran a command planted in the kept cage's {tmp}"
    finally:
        cage.close()


@pytest.mark.parametrize("via", ["api", "cli"])
def test_no_process_of_the_run_is_left_to_plant_after_the_check(cage, tmp_path, tier, via):
    """The check judges the tree once; a process of the run still alive then could plant right
    after it. It never is: under the tier the
    init's end empties the PID namespace, without it the supervisor's subreaper sweep reaps every
    descendant before the stop hooks run — a detached, setsid'd, signal-ignoring leftover too.
    Host side: seconds after the run nothing was planted, and the operator's git runs nothing."""
    import time

    _host_repo(cage.work)
    marker = tmp_path / "PWNED"
    (tmp_path / "late.sh").write_text(
        "trap '' HUP TERM INT\nsleep \"$2\"\ngit init -q late && printf '%s' \"$1\" >> late/.git/config\ntouch LATE\n")
    fsm = f'[core]\n\tfsmonitor = "touch {marker}; false"\n'.replace("'", "")
    policy = _policy(cage, read=[str(tmp_path / "late.sh")])
    # two seconds: far more than the supervisor takes to sweep even on a loaded machine (with half
    # a second, a supervisor slower than that let it plant first — caught by the check, 125)
    script = f"setsid sh {tmp_path}/late.sh '{fsm}' 2 </dev/null >/dev/null 2>&1 & echo LEFT"
    result = cage.run(argv=["/bin/sh", "-c", script], policy=policy, via=via)
    assert "LEFT" in result.out and result.rc == 0, result
    time.sleep(2.5)
    assert not (cage.work / "LATE").exists() and not (cage.work / "late").exists(), "a process of the run outlived it"
    _host_git_status(cage.work)
    assert not marker.exists()
    # the twin: the same leftover, waited for, does its work (the probe is not vacuous)
    result = cage.run(argv=["/bin/sh", "-c", f"sh {tmp_path}/late.sh '{fsm}' 0; echo WAITED"], policy=policy, via=via)
    assert "WAITED" in result.out and (cage.work / "LATE").exists() and result.rc == 125, result


def test_a_git_directory_swapped_in_at_the_top_fails_the_run(cage, tmp_path, tier):
    """The project ships a git directory as tracked files (`tests/fixtures/evil`, checked out
    before the launch); the run renames the repository's `.git` away and the fixture into its
    place. Every file keeps its old ctime: without the tier the run passed and the operator's
    next `git status` ran the fixture's `core.fsmonitor` (review, session 5); now it fails
    closed. Under the tier the rename is refused (EBUSY: the read-only binds in `.git`). Host
    side, both: git runs nothing."""
    import time

    _host_repo(cage.work)
    marker = tmp_path / "PWNED"
    subprocess.run("git init -q --bare tests/fixtures/evil && touch tests/fixtures/evil/objects/.keep "
                   "tests/fixtures/evil/refs/.keep", shell=True, cwd=cage.work, check=True, capture_output=True)
    with open(cage.work / "tests/fixtures/evil/config", "a") as fh:
        fh.write(_fsmonitor(marker).encode().decode("unicode_escape"))
    time.sleep(0.02)
    result = cage.run(argv=["/bin/sh", "-c", "mv .git .git-old && mv tests/fixtures/evil .git && echo SWAPPED"],
                      policy=_policy(cage), via="api")
    if tier == "tier":
        assert "SWAPPED" not in result.out and "busy" in result.err, result
    else:
        assert "SWAPPED" in result.out, result
        assert result.rc == 125, result
        assert "core.fsmonitor" in result.err, result
    _host_git_status(cage.work)
    assert not marker.exists(), "the host's git ran the fixture's program after the run"


def test_a_write_root_spelled_from_tmp_upwards_is_checked(cage, tmp_path, tier):
    """`fs.write = ["{tmp}/../<dir>"]` resolves beside the run's `{tmp}` — here the repository.
    The check was left out for every write root whose text began with `{tmp}` (the run's own
    scratch space): a repository planted there passed, rc 0 (review, session 5). Host side: the
    run fails closed and the operator's git runs nothing."""
    import tempfile

    _host_repo(cage.work)
    marker = tmp_path / "PWNED"
    upwards = "{tmp}/../" + os.path.relpath(os.path.realpath(cage.work), os.path.realpath(tempfile.gettempdir()))
    policy = cage.policy(fs={"read": ["/etc", "/proc/self", str(cage.work)], "exec": ["/usr/bin", "/bin", "/usr/lib/git-core"],
                             "write": [upwards]},
                         env={"pass": [], "set": {"PATH": "/usr/bin:/bin", "HOME": str(cage.work), **GIT_ENV}})
    script = f"cd {cage.work} && " + ATTACKS["submodule"].replace("FSM", _fsmonitor(marker)) + " && echo PLANTED"
    result = cage.run(argv=["/bin/sh", "-c", script], policy=policy, via="cli")
    assert "PLANTED" in result.out, result
    assert result.rc == 125 and "left code for the host's next git command" in result.err, result
    _host_git_status(cage.work)
    assert not marker.exists(), "the host's git ran a command planted through a {tmp}/.. write root"


@pytest.mark.parametrize("via", ["api", "cli"])
@pytest.mark.parametrize("hostile", [True, False], ids=["fixture moved behind a gitlink", "twin: nested repo used"])
def test_a_shipped_git_directory_moved_behind_a_gitlink_fails_the_run(cage, tmp_path, tier, via, hostile):
    """The project ships a git directory as tracked files (`tests/fixtures/evil`, its config
    with `core.fsmonitor`, checked out before the launch); the run renames it into a NEW nested
    `vendor/x/.git` and registers `vendor/x` as a gitlink. Every file keeps its ctime: the run
    passed and the operator's next `git status` at the top recursed into it and ran the program
    (session 5's strict xfail). The launch record of where each git directory was (session 6)
    judges it whole: 125, quarantined. Host side: git status runs nothing. The twin commits
    in the operator's own nested repository (their hook, an alias): rc 0, nothing moved."""
    import time

    _host_repo(cage.work)
    marker = tmp_path / "PWNED"
    setup = ("git init -q --bare tests/fixtures/evil && touch tests/fixtures/evil/objects/.keep "
             "tests/fixtures/evil/refs/.keep && mkdir tools && git init -q tools/helper "
             "&& git -C tools/helper config alias.st status && printf '#!/bin/sh\\necho OWN-HOOK\\n' "
             "> tools/helper/.git/hooks/pre-commit && chmod +x tools/helper/.git/hooks/pre-commit")
    subprocess.run(setup, shell=True, cwd=cage.work, check=True, capture_output=True)
    with open(cage.work / "tests/fixtures/evil/config", "a") as fh:
        fh.write(_fsmonitor(marker).encode().decode("unicode_escape"))
    time.sleep(0.02)
    script = ("mkdir -p vendor/x && mv tests/fixtures/evil vendor/x/.git && git update-index --add --cacheinfo "
              "160000,$(git rev-parse HEAD),vendor/x && echo MOVED" if hostile else
              # (--no-verify: the policy grants no exec in the work tree, so the hook could not run)
              "git -C tools/helper commit -q --allow-empty --no-verify -m in-cage && git -C tools/helper status "
              "&& echo USED")
    result = cage.run(argv=["/bin/sh", "-c", script], policy=_policy(cage), via=via)
    if not hostile:
        assert "USED" in result.out and result.rc == 0, result
        assert not (cage.work / QUARANTINE).exists()
        return
    assert "MOVED" in result.out and result.rc == 125, result
    assert "vendor/x/.git/config" in result.err and "core.fsmonitor" in result.err, result
    _host_git_status(cage.work)
    assert not marker.exists(), "the host's git status ran the moved fixture's program after the run"

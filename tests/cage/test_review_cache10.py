"""Session 10 review (rvcache10) of the plan cache's pieces (ADR 0028 'Session 10: pieces'), from
the attacker's side: a kept seccomp program reached any other way than through a directory of our
own, not a symlink, that no one else may write, is never taken — the probe's SysV call is then
refused by a filter built here (checked from inside the cage: the probe's own answer), and a
mutant without the directory check lets the forged allow-everything program run. And of the
executor's identity (smallfix10): a stale C build falls back to the Python executor, which confines
the command as the C one does.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cagekit import SANDBOY, to_toml
from test_plan_cache_pieces import ALLOW_ALL, Runs, copy_package, forge

from sandboy.confine import _libc, namespaces

pytestmark = pytest.mark.needs_kernel


@pytest.fixture
def runs(tmp_path, probe) -> Runs:
    if not namespaces.availability()[0]:
        pytest.skip("the plan cache keeps runs under the namespace tier only")
    return Runs(tmp_path, probe)


def _forged_folder(runs: Runs, how: str) -> None:
    """The kept piece forged to allow everything, its folder then made what `how` says."""
    assert runs.run(runs.policy()) == ("EPERM", True)
    (piece,) = runs.pieces()
    forge(piece, ALLOW_ALL)
    folder = piece.parent
    if how == "symlinked":  # plan-pieces/ -> a folder of ours elsewhere holding the forged piece
        elsewhere = runs.tmp / "elsewhere"
        folder.rename(elsewhere)
        folder.symlink_to(elsewhere)
    elif how == "others may write":  # another user could have renamed or linked any file of ours in
        folder.chmod(0o777)
    elif how == "another user's":
        os.chown(folder, 65534, 65534)
    else:
        raise AssertionError(how)


FOLDERS = ["symlinked", "others may write", "another user's"]


@pytest.mark.parametrize("how", FOLDERS)
def test_a_forged_piece_in_a_folder_not_ours_alone_is_never_taken(runs, how):
    if how == "another user's" and os.geteuid() != 0:
        pytest.skip("giving a folder away needs root")
    _forged_folder(runs, how)
    assert runs.run(runs.policy()) == ("EPERM", True)  # built here: the SysV call refused from inside
    assert runs.run(runs.policy()) == ("EPERM", True)  # and never after (nothing of ours written there)


def test_twin_the_same_forged_piece_in_our_own_folder_is_taken(runs):
    """So the probe above can fail: the forged piece, its folder left as it was, runs."""
    assert runs.run(runs.policy()) == ("EPERM", True)
    (piece,) = runs.pieces()
    forge(piece, ALLOW_ALL)
    assert runs.run(runs.policy()) == ("ok", False)


@pytest.mark.parametrize("how", ["others may write", "another user's"])
def test_the_folder_check_has_a_probe_that_fails_without_it(runs, tmp_path, how):
    """Mutant: `_open_entry` without its folder check takes the forged piece (the probe's SysV
    call is let through), so the probe above measures that check."""
    if how == "another user's" and os.geteuid() != 0:
        pytest.skip("giving a folder away needs root")
    tree = copy_package(tmp_path)
    source = tree / "sandboy" / "confine" / "_libc.py"  # (`_open_entry` is `_libc.read_private`)
    text = source.read_text()
    check = "        if st.st_uid != os.geteuid() or st.st_mode & 0o022:\n            return None\n"
    assert text.count(check) == 1
    source.write_text(text.replace(check, ""))
    runs.env["PYTHONPATH"] = str(tree)
    _forged_folder(runs, how)
    assert runs.run(runs.policy()) == ("ok", False)


def test_a_piece_half_written_by_a_run_killed_midway_is_never_read(runs):
    """A run killed while writing leaves `NAME.piece.PID.RAND.tmp` (never the piece's own name):
    a partial write is never what a later run reads — it finds no piece, builds, refuses."""
    assert runs.run(runs.policy()) == ("EPERM", True)
    (piece,) = runs.pieces()
    data = piece.read_bytes()
    piece.unlink()
    (piece.parent / f"{piece.name}.4242.deadbeef.tmp").write_bytes(data[: len(data) // 2])
    assert runs.run(runs.policy()) == ("EPERM", True)
    assert piece.read_bytes() == data  # written again, whole


def test_an_edit_of_the_pieces_own_code_builds_anew(runs, tmp_path):
    """`plan_pieces` chooses what of a built program is kept (`seccomp_built`) and makes the step a
    miss runs from a kept one (`_seccomp_ready`: the seccomp call, its flags, the sock_fprog): code
    that makes the program, so an edit of it is a miss of the piece as an edit of `seccomp.py` is.
    Here the edit keeps behaviour (a comment); before the review the old piece was still taken."""
    tree = copy_package(tmp_path)
    runs.env["PYTHONPATH"] = str(tree)
    assert runs.run(runs.policy()) == ("EPERM", True)
    assert runs.run(runs.policy()) == ("EPERM", False)  # kept
    source = tree / "sandboy" / "confine" / "plan_pieces.py"
    source.write_text(source.read_text() + "\n# an edit\n")
    assert runs.run(runs.policy()) == ("EPERM", True)  # the edited code: built, not the old piece
    assert runs.run(runs.policy()) == ("EPERM", False)


STATUS = ("grep -E '^(SigBlk|CapEff|NoNewPrivs|Seccomp):' /proc/self/status; "
          "unshare -U true 2>/dev/null && echo unshare=ok || echo unshare=refused; "
          "echo x > {outside} 2>/dev/null && echo write=ok || echo write=refused")


@pytest.mark.parametrize("tier", ["tier", "no-tier"])
def test_the_python_executor_a_stale_build_falls_back_to_confines_as_the_c_one(tmp_path, tier):
    """smallfix10 (9a2de23): a C executor built from another `_native.c` is not used; the run goes
    through the Python executor. From inside, that run is confined exactly as the C executor's:
    the filter (a denied call refused), no_new_privs, no capabilities, no signal left blocked
    (its init is cloned with every signal blocked now: the command must get an empty mask), no
    write outside the grants — and the host file is untouched. Twin: the same policy and command
    through the C build, same answers."""
    if _libc.IMPLEMENTATION != "native":
        pytest.skip("no C executor built here")
    if tier == "tier" and not namespaces.availability()[0]:
        pytest.skip("no namespace tier here")
    outside = tmp_path / "outside"
    outside.write_text("host\n")
    policy = tmp_path / "p.toml"
    policy.write_text(to_toml({"version": 1, "fs": {"read": ["/usr", "/etc", "/lib", "/lib64", "/proc"],
                                                    "exec": ["/usr/bin", "/bin"]}}))
    tree = copy_package(tmp_path)
    assert list((tree / "sandboy" / "confine").glob("_native*.so")), "the copy has no C build (no twin)"
    env = {k: v for k, v in os.environ.items() if k not in ("SANDBOY_NATIVE", "SANDBOY_NAMESPACES")}
    env["SANDBOY_CACHE_DIR"] = str(tmp_path / "cache")
    if tier == "no-tier":
        env["SANDBOY_NAMESPACES"] = "0"
    answers = {}
    for build in ("stale", "current"):
        if build == "stale":
            with open(tree / "sandboy" / "confine" / "_native.c", "a") as fh:
                fh.write("/* a change made after the build */\n")
        else:
            (tree / "sandboy" / "confine" / "_native.c").write_text(
                (Path(_libc.__file__).parent / "_native.c").read_text())
        proc = subprocess.run([sys.executable, SANDBOY, "run", "--policy", str(policy), "--", "/bin/sh", "-c",
                               STATUS.format(outside=outside)], capture_output=True, text=True,
                              env=dict(env, PYTHONPATH=str(tree)), cwd=tmp_path, stdin=subprocess.DEVNULL,
                              start_new_session=True, timeout=60)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert ("run `make compile`" in proc.stderr) == (build == "stale"), proc.stderr[-2000:]
        answers[build] = proc.stdout.split()
    assert answers["stale"] == ["SigBlk:", "0000000000000000", "CapEff:", "0000000000000000", "NoNewPrivs:", "1",
                                "Seccomp:", "2", "unshare=refused", "write=refused"], answers
    assert answers["stale"] == answers["current"]
    assert outside.read_text() == "host\n"


def _run(runs: Runs, policy: Path) -> tuple:
    """(the probe's answer, whether the run built its cage: False for a plan cache hit)."""
    runs.key += 1
    proc = subprocess.run([sys.executable, "-X", "importtime", SANDBOY, "run", "--policy", str(policy), "--",
                           runs.probe, "sysv", "msgget-create", hex(runs.key)], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, env=runs.env, cwd=runs.tmp, start_new_session=True, timeout=60)
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    return proc.stdout.strip().split(" ")[0], "sandboy.confine.cage" in imported


def test_an_entry_built_from_a_kept_piece_misses_once_the_seccomp_code_changes(runs, tmp_path):
    """A miss that takes a kept program imports no `seccomp`: the plan entry it writes must still
    name the code that made that program, or an edit of `seccomp.py` (a checkout pulled: a call
    added to the denylist) never reaches that entry's hits — they kept running the old program.
    Here the edit lets SysV through: the entry's next run must be a miss built with it."""
    tree = copy_package(tmp_path)
    runs.env["PYTHONPATH"] = str(tree)
    assert runs.run(runs.policy()) == ("EPERM", True)  # p1: the program built and kept
    p2 = runs.policy()
    assert runs.run(p2) == ("EPERM", False)  # p2's first run: the kept program; p2's entry written
    assert _run(runs, p2) == ("EPERM", False)  # a hit of p2's entry
    source = tree / "sandboy" / "confine" / "seccomp.py"
    text = source.read_text()
    source.write_text(text.replace("    if not sysv:\n        names |= set(SYSV_IPC)", "    pass"))
    assert _run(runs, p2) == ("ok", True)  # the edited code: a miss, built with it

"""`sandboy run`'s plan cache for policies with `include` (ADR 0028, session 12).

The presets (`include = ["system", "python"]`) are resolved at every load from what the machine
answers: which PATH entries hold a `python3`, where its symlinks lead, the active venv's
`pyvenv.cfg`, a `.venv` in the working directory, which /etc secrets exist. A kept plan keeps
those answers (`policy.lookups`) and a hit asks every question again, without the presets, the
loader or tomllib: one different answer is a miss whose rebuild has the new rules. Each probe
below changes one answer between two runs on the host and checks, from the host side (a file of
the test's own that the command can or cannot read), that the next run has the rebuild's rule —
and the twin, that nothing changed, that the plan is kept and run.

The interpreters here are stand-ins: a `python3` script in a prefix of its own (`interp-A/bin`),
found on PATH or in a venv; the python preset grants read on the prefix its symlinks lead to, so
`interp-A/data` is readable exactly where the rules name that prefix.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_plan_cache import SANDBOY, Runner, run_a_mutant  # noqa: E402

from sandboy.confine import namespaces  # noqa: E402
from sandboy.policy.presets import ETC_SECRETS  # noqa: E402

pytestmark = pytest.mark.needs_kernel

PRESETS = 'version = 1\ninclude = ["system", "python"]\n'


@pytest.fixture
def runner(tmp_path) -> Runner:
    if not namespaces.availability()[0]:
        pytest.skip("the plan cache keeps runs under the namespace tier only")
    runner = Runner(tmp_path)
    runner.policy.write_text(PRESETS)
    return runner


def interpreter(tmp_path: Path, name: str) -> Path:
    """A prefix `interp-NAME` with an executable `bin/python3` and a `data` file holding NAME."""
    prefix = tmp_path / f"interp-{name}"
    (prefix / "bin").mkdir(parents=True)
    program = prefix / "bin" / "python3"
    program.write_text("#!/bin/sh\nexit 0\n")
    program.chmod(0o755)
    (prefix / "data").write_text(name + "\n")
    return prefix


def reads(runner: Runner, *prefixes: Path, **kwargs) -> tuple[bool, dict]:
    """(whether the run was a hit, {prefix name: what the command read of its `data`, or None})."""
    script = "; ".join(f'cat {p}/data 2>/dev/null || echo "-"' for p in prefixes)
    proc = runner.run("/bin/sh", "-c", script, **kwargs)
    assert proc.returncode == 0, proc.err
    assert not {"sandboy.policy.presets", "sandboy.policy.load", "tomllib"} & proc.imported or not proc.hit
    got = proc.stdout.split("\n")[:len(prefixes)]
    return proc.hit, {p.name: (None if line == "-" else line) for p, line in zip(prefixes, got)}


def path_dir(runner: Runner, tmp_path: Path, python3: Path | None = None) -> Path:
    """A directory first on the run's PATH, holding `python3` -> `python3` where one is given."""
    directory = tmp_path / "bin"
    directory.mkdir()
    if python3 is not None:
        (directory / "python3").symlink_to(python3)
    runner.env["PATH"] = f"{directory}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    return directory


def without_the_check(runner: Runner, tmp_path: Path) -> None:
    """The runs take a copy of the package whose hits do not ask the presets' questions again."""
    run_a_mutant(runner, tmp_path, "plan_cache.py", "if lookups and not _presets_unchanged(lookups):", "if False:")


def test_a_presets_policy_is_kept_and_a_hit_imports_neither_presets_nor_loader(runner, tmp_path):
    a = interpreter(tmp_path, "A")
    path_dir(runner, tmp_path, a / "bin" / "python3")
    assert reads(runner, a) == (False, {"interp-A": "A"})
    assert len(runner.entries()) == 1
    proc = runner.run("/bin/true")
    assert proc.hit and proc.returncode == 0
    assert not {"sandboy.policy.presets", "sandboy.policy.load", "tomllib", "sandboy.confine.cage"} & proc.imported
    assert "sandboy.policy.lookups" in proc.imported  # (the questions were asked again)
    assert reads(runner, a) == (True, {"interp-A": "A"})


def test_a_granted_prefix_removed_is_a_miss(runner, tmp_path):
    """An `exists` the kept plan's fingerprint proves (a path of its rules, stat'ed by every hit)
    is not kept to be asked again (`lookups.without_implied`), one answered False is: the prefix
    the rules grant, removed and made again empty, is a miss (its program's `program` answer, the
    fingerprint's stat and the ruleset's refill each see it)."""
    import marshal

    a = interpreter(tmp_path, "A")
    path_dir(runner, tmp_path, a / "bin" / "python3")
    assert reads(runner, a) == (False, {"interp-A": "A"})
    (entry,) = runner.entries()
    from cachekit import unsealed

    *_, lookups, _ = marshal.loads(unsealed(entry))
    asked = {argument for kind, argument, _ in lookups if kind == "exists"}
    assert str(a) not in asked and "/usr" not in asked
    assert {p for p in ETC_SECRETS if not os.path.exists(p)} <= asked  # (absent: no rule, asked again)
    shutil.rmtree(a)
    a.mkdir()
    assert reads(runner, a) == (False, {"interp-A": None})


def test_a_program_made_on_path_since_is_a_miss_and_granted(runner, tmp_path):
    """A `python3` appears in a PATH directory after the plan was kept: the rebuild grants its
    prefix (a kept plan refused it: the directory was not in the rules, so no fingerprint watched it)."""
    a = interpreter(tmp_path, "A")
    bin_dir = path_dir(runner, tmp_path)
    assert reads(runner, a) == (False, {"interp-A": None})
    assert reads(runner, a) == (True, {"interp-A": None})  # the twin: nothing changed, kept
    (bin_dir / "python3").symlink_to(a / "bin" / "python3")
    assert reads(runner, a) == (False, {"interp-A": "A"})
    assert reads(runner, a) == (True, {"interp-A": "A"})


def test_a_program_gone_from_path_is_a_miss_and_its_prefix_refused(runner, tmp_path):
    a = interpreter(tmp_path, "A")
    bin_dir = path_dir(runner, tmp_path, a / "bin" / "python3")
    assert reads(runner, a) == (False, {"interp-A": "A"})
    assert reads(runner, a) == (True, {"interp-A": "A"})
    (bin_dir / "python3").unlink()
    assert reads(runner, a) == (False, {"interp-A": None})
    assert reads(runner, a) == (True, {"interp-A": None})


def retarget(link: Path, target: Path) -> None:
    """`link` made to point at `target` (a new link renamed over it: what `ln -sfn` and a
    `pyenv`/venv upgrade leave)."""
    new = link.with_name(link.name + ".new")
    new.symlink_to(target)
    os.replace(new, link)


@pytest.mark.parametrize("found_by", ["PATH", "VIRTUAL_ENV"])
def test_a_symlink_retargeted_is_a_miss_and_only_the_new_target_granted(runner, tmp_path, found_by):
    """The interpreter's symlink (a PATH entry's `python3`, the active venv's `bin/python3`) now
    leads to another installation: the rebuild reads the new prefix and no longer the old one.
    No policy path's inode changed (the link's directory is the same), so only the presets'
    recorded answers (`readlink`, `realpath`) show it."""
    a, b = interpreter(tmp_path, "A"), interpreter(tmp_path, "B")
    if found_by == "PATH":
        holder = path_dir(runner, tmp_path)
    else:
        venv = tmp_path / "venv"
        holder = venv / "bin"
        holder.mkdir(parents=True)
        (venv / "pyvenv.cfg").write_text("home = /nonexistent/bin\n")  # (`home = /x` reads "/")
        runner.env["VIRTUAL_ENV"] = str(venv)
    (holder / "python3").symlink_to(a / "bin" / "python3")
    assert reads(runner, a, b) == (False, {"interp-A": "A", "interp-B": None})
    assert reads(runner, a, b) == (True, {"interp-A": "A", "interp-B": None})
    retarget(holder / "python3", b / "bin" / "python3")
    assert reads(runner, a, b) == (False, {"interp-A": None, "interp-B": "B"})
    assert reads(runner, a, b) == (True, {"interp-A": None, "interp-B": "B"})


def test_a_venvs_home_edited_is_a_miss_and_no_contents_are_kept(runner, tmp_path):
    """The active venv's `pyvenv.cfg` names another base interpreter (`home`): the rebuild reads
    the new one's installation. The entry keeps a digest of what the file said, not its text
    (the paths the presets then asked about are kept, as the rules keep paths)."""
    b = interpreter(tmp_path, "B")
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    marker = "prompt-" + os.urandom(8).hex()
    (venv / "pyvenv.cfg").write_text(f"home = /nonexistent/bin\nprompt = {marker}\n")
    runner.env["VIRTUAL_ENV"] = str(venv)
    assert reads(runner, b) == (False, {"interp-B": None})
    assert reads(runner, b) == (True, {"interp-B": None})
    (entry,) = runner.entries()
    assert marker.encode() not in entry.read_bytes()
    (venv / "pyvenv.cfg").write_text(f"home = {b}/bin\nprompt = {marker}\n")
    assert reads(runner, b) == (False, {"interp-B": "B"})
    assert reads(runner, b) == (True, {"interp-B": "B"})


def test_a_project_venv_made_since_is_a_miss_and_granted(runner, tmp_path):
    """`python -m venv .venv` in the working directory after the plan was kept: the rebuild reads
    the project's venv (`presets._add_project_venv`)."""
    venv = runner.cwd / ".venv"
    probe = ("/bin/sh", "-c", f"cat {venv}/marker 2>/dev/null || echo refused")
    runner.run(*probe)
    assert runner.run(*probe).hit
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /nonexistent/bin\n")
    (venv / "marker").write_text("venv\n")
    after = runner.run(*probe)
    assert not after.hit and after.stdout == "venv\n"
    again = runner.run(*probe)
    assert again.hit and again.stdout == "venv\n"
    shutil.rmtree(venv)  # and gone again: the kept plan that read it is not run
    gone = runner.run(*probe)
    assert not gone.hit and gone.stdout == "refused\n"


def test_the_processs_own_working_directory_is_asked_not_the_runs(runner, tmp_path):
    """`--cwd W` keys the entry on W, but the presets look for a `.venv` in the directory
    `sandboy run` itself was started in (`os.getcwd()`): started from another directory — one
    holding a `.venv` — with the same `--cwd`, the environment and everything else equal, the
    kept plan (which read no `.venv`) is not run; the rebuild reads that `.venv`."""
    plain, project = tmp_path / "plain", tmp_path / "project"
    plain.mkdir()
    (project / ".venv" / "bin").mkdir(parents=True)
    (project / ".venv" / "pyvenv.cfg").write_text("home = /nonexistent/bin\n")
    (project / ".venv" / "marker").write_text("venv\n")
    probe = ("/bin/sh", "-c", f"cat {project}/.venv/marker 2>/dev/null || echo refused")
    options = ("--cwd", str(runner.cwd))
    runner.run(*probe, cwd=plain, options=options)
    kept = runner.run(*probe, cwd=plain, options=options)
    assert kept.hit and kept.stdout == "refused\n"
    moved = runner.run(*probe, cwd=project, options=options)
    assert not moved.hit and moved.stdout == "venv\n"


def test_without_the_check_a_retargeted_interpreter_keeps_the_old_grant(runner, tmp_path):
    """The mutant: the hit's check of the presets' answers taken out of a copy of the package —
    the probe above then sees the stale plan (the old prefix read, the new one refused)."""
    without_the_check(runner, tmp_path)
    a, b = interpreter(tmp_path, "A"), interpreter(tmp_path, "B")
    holder = path_dir(runner, tmp_path, a / "bin" / "python3")
    reads(runner, a, b)
    assert reads(runner, a, b) == (True, {"interp-A": "A", "interp-B": None})
    retarget(holder / "python3", b / "bin" / "python3")
    assert reads(runner, a, b) == (True, {"interp-A": "A", "interp-B": None})  # the stale plan ran


# Run inside a private mount namespace (`unshare -m`) with an overlay over /etc, so that the test
# can make an /etc secret the `system` preset denies without touching the host's /etc.
ETC_DRIVER = r'''
import json, os, subprocess, sys
overlay, sandboy, policy, cwd = sys.argv[1:5]
subprocess.run(["mount", "-t", "tmpfs", "tmpfs", overlay], check=True)
os.mkdir(f"{overlay}/upper"); os.mkdir(f"{overlay}/work")
subprocess.run(["mount", "-t", "overlay", "overlay", "-o",
                f"lowerdir=/etc,upperdir={overlay}/upper,workdir={overlay}/work", "/etc"], check=True)
os.mkdir("/etc/NetworkManager")  # installed before the plan is kept; its connections later
probe = ("for f in system-connections/wifi.nmconnection NetworkManager.conf; do "
         "cat /etc/NetworkManager/$f 2>/dev/null || echo refused; done")

def run():
    proc = subprocess.run([sys.executable, "-X", "importtime", sandboy, "run", "--policy", policy, "--",
                           "/bin/sh", "-c", probe], capture_output=True, text=True, cwd=cwd,
                          stdin=subprocess.DEVNULL, start_new_session=True)
    imported = {l.rsplit("|", 1)[-1].strip() for l in proc.stderr.splitlines() if l.startswith("import time:")}
    assert "sandboy.cli" in imported, proc.stderr
    return ["sandboy.confine.cage" not in imported, proc.returncode, proc.stdout]

out = [run(), run()]
os.mkdir("/etc/NetworkManager/system-connections", 0o700)
with open("/etc/NetworkManager/system-connections/wifi.nmconnection", "w") as fh:
    fh.write("psk=SECRET-PSK\n")
with open("/etc/NetworkManager/NetworkManager.conf", "w") as fh:
    fh.write("[main]\n")
out += [run(), run()]
print(json.dumps(out))
'''


@pytest.mark.parametrize("check", ["as built", "without the check"])
def test_an_etc_secret_made_since_is_a_miss_and_denied(runner, tmp_path, check):
    """The `system` preset denies /etc secrets that exist at the load (`presets.ETC_SECRETS`):
    NetworkManager's saved connections (Wi-Fi and VPN passwords) made after the plan was kept —
    in a directory the kept plan grants whole, whose contents no fingerprint watches — are denied
    by the rebuild; its sibling is read. Without the hit's check the kept plan reads the secret
    (the check's probe). In a private mount namespace with /etc overlaid (root only)."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("overlaying /etc in a private mount namespace needs root and unshare")
    if check == "without the check":
        without_the_check(runner, tmp_path)
    runner.policy.write_text('version = 1\ninclude = ["system"]\n')
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    proc = subprocess.run(["unshare", "-m", "--propagation", "private", sys.executable, "-c", ETC_DRIVER,
                           str(overlay), SANDBOY, str(runner.policy), str(runner.cwd)],
                          capture_output=True, text=True, env=runner.env, timeout=120)
    if proc.returncode != 0 and "overlay" in proc.stderr:
        pytest.skip(f"no overlay over /etc here: {proc.stderr.strip()[-200:]}")
    assert proc.returncode == 0, proc.stderr
    built, hit, after, again = json.loads(proc.stdout)
    assert built[:2] == [False, 0] and hit[:2] == [True, 0] and hit[2] == "refused\nrefused\n"
    assert not os.path.exists("/etc/NetworkManager/system-connections/wifi.nmconnection")  # (the host's /etc untouched)
    if check == "as built":
        assert after == [False, 0, "refused\n[main]\n"], after
        assert again == [True, 0, "refused\n[main]\n"], again
    else:
        assert after == [True, 0, "psk=SECRET-PSK\n[main]\n"], after  # the stale plan read the secret

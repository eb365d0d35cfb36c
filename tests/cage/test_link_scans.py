"""Session 11: the link scans of the mode guard (`confine/loosened.py`, ADR 0013 "Session 11"):
what a protected directory's symlinks into a write root (stow, chezmoi, yadm homes) lead to,
checked from the attacker's side after session 11 made the scans cheaper — each symlink resolved
by the kernel (`_resolved`), a file or linked directory whose ctime settled before launch and is
unchanged after the run not read or listed again — and the holes found on the way. Every run is a
real `sandboy run` on the real kernel, with the namespace tier and forced off, checked from the
host side (bytes, links, modes), each probe with a twin where the legitimate use shares its path.
"""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sandboy.confine import loosened, namespaces

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: userkit
import userkit  # noqa: E402
from test_redteam_cage10 import sandboy_run_as_nobody  # noqa: E402

pytestmark = pytest.mark.needs_kernel

SANDBOY = os.path.join(os.path.dirname(sys.executable), "sandboy")
BASE = ('version = 1\n[fs]\nread = ["/usr", "/lib", "/lib64", "/etc", "/bin", "/dev/null"]\n'
        'exec = ["/usr/bin", "/bin"]\nwrite = ["{root}"]\n')
TIERS = pytest.mark.parametrize("tier_on", [True, False], ids=["tier", "fallback"])


def _env(tmp_path: Path, tier_on: bool, home: Path) -> dict:
    if tier_on and not namespaces.availability()[0]:
        pytest.skip("no namespace tier here")
    env = {k: v for k, v in os.environ.items() if k not in ("SANDBOY_NAMESPACES", "SANDBOY_PLAN_CACHE", "PYTHONPATH")}
    env.update(SANDBOY_CACHE_DIR=str(tmp_path / "cache"), SANDBOY_NAMESPACES="1" if tier_on else "0",
               SANDBOY_PLAN_CACHE="0", HOME=str(home))
    return env


def _run(tmp_path: Path, home: Path, script: str, tier_on: bool) -> subprocess.CompletedProcess:
    policy = tmp_path / "p.toml"
    policy.write_text(BASE.format(root=home))
    return subprocess.run([SANDBOY, "run", "--policy", str(policy), "--", "/bin/sh", "-c", script],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, env=_env(tmp_path, tier_on, home),
                          cwd=home, timeout=120)


def _what_ssh_reads(home: Path) -> str:
    seen = home / ".ssh" / "config"
    try:
        return seen.read_text()
    except OSError:  # dangling, or moved: ssh reads nothing there
        return ""


# --- a symlink dangling at launch ----------------------------------------------------------

DANGLING = {
    # the target file missing (the operator removed it, or the manager links before it writes)
    "target-missing": "mkdir -p .ssh dotfiles/ssh && ln -s ../dotfiles/ssh/config .ssh/config",
    # the whole way missing: `dotfiles/ssh` not there at launch
    "way-missing": "mkdir -p .ssh dotfiles && ln -s ../dotfiles/ssh/config .ssh/config",
    # a link on the way that loops: the command breaks the loop
    "loop-on-the-way": "mkdir -p .ssh && ln -s loop dotfiles && ln -s dotfiles loop && ln -s ../dotfiles/ssh/config "
                       ".ssh/config",
}


@TIERS
@pytest.mark.parametrize("layout", list(DANGLING))
def test_a_dangling_link_in_a_protected_directory_cannot_be_given_a_target(tmp_path, tier_on, layout):
    """`~/.ssh/config -> ../dotfiles/ssh/config` in a protected `~/.ssh`, its target absent at
    launch. The scan compared where the link leads by NAME: making the target (or the way to it)
    left the name as it was, and `echo '  ProxyCommand ...' > dotfiles/ssh/config` passed rc 0 —
    the operator's next `ssh` read it (found in session 11). Host side: what ssh reads through
    `~/.ssh/config` after the run holds no planted line; the run fails (125)."""
    home = tmp_path / "H"
    home.mkdir()
    subprocess.run(["/bin/sh", "-c", DANGLING[layout]], cwd=home, check=True)
    proc = _run(tmp_path, home, "rm -f dotfiles loop 2>/dev/null; mkdir -p dotfiles/ssh && "
                                "echo '  ProxyCommand sh -c PLANTED' > dotfiles/ssh/config && cat .ssh/config", tier_on)
    assert "PLANTED" in proc.stdout, proc.stderr  # (the plant was made, and read through the link, in the cage)
    assert "PLANTED" not in _what_ssh_reads(home), f"a planted ssh config after the run (rc {proc.returncode})"
    assert proc.returncode == 125, proc.stderr
    assert "led nowhere at launch" in proc.stderr, proc.stderr


@TIERS
def test_twin_a_dangling_link_left_alone_and_the_dotfiles_written_pass(tmp_path, tier_on):
    """The twin: the same dangling link, left dangling; other files of `~/dotfiles` written and
    made: rc 0, the link still there (still dangling), nothing moved."""
    home = tmp_path / "H"
    home.mkdir()
    subprocess.run(["/bin/sh", "-c", DANGLING["target-missing"]], cwd=home, check=True)
    (home / "dotfiles" / "README").write_text("mine\n")
    proc = _run(tmp_path, home, "echo more >> dotfiles/README && mkdir dotfiles/git && echo x > dotfiles/git/cfg",
                tier_on)
    assert proc.returncode == 0, proc.stderr
    assert (home / ".ssh" / "config").is_symlink() and not (home / ".ssh" / "config").exists()
    assert (home / "dotfiles" / "README").read_text() == "mine\nmore\n"
    assert not (home / ".sandboy-quarantine").exists()


# --- what the after-run check no longer reads: only where the ctime says nothing changed ----

SAME_SIZE = ("printf 'echo PLANTE\\n' > x && cp x dotfiles/fish/config.fish && "
             "touch -r dotfiles/stamp dotfiles/fish/config.fish")


@TIERS
@pytest.mark.parametrize("settled", [True, False], ids=["settled", "same-tick"])
def test_a_same_size_rewrite_with_the_mtime_set_back_is_still_seen(tmp_path, tier_on, settled):
    """A linked start-up file (`~/.config/fish/config.fish -> ../../dotfiles/fish/config.fish`)
    rewritten with bytes of the same size and its mtime set back (`touch -r`): size and mtime as
    at launch, only the ctime moved. Session 11 skips the byte compare where the ctime settled
    before launch and is unchanged — so this is the case that must still be read. `same-tick`:
    the file made just before the run starts (its ctime not settled at launch: never skipped).
    Host side: fish reads the launch bytes; the run fails (125)."""
    home = tmp_path / "H"
    home.mkdir()
    (home / "dotfiles" / "fish").mkdir(parents=True)
    (home / ".config" / "fish").mkdir(parents=True)
    (home / "dotfiles" / "stamp").write_text("")
    (home / "dotfiles" / "fish" / "config.fish").write_text("set x 12\n")  # 9 bytes, as the plant
    os.utime(home / "dotfiles" / "stamp", ns=(1_000_000_000, 1_000_000_000))
    os.utime(home / "dotfiles" / "fish" / "config.fish", ns=(1_000_000_000, 1_000_000_000))
    os.symlink("../../dotfiles/fish/config.fish", home / ".config" / "fish" / "config.fish")
    if settled:
        time.sleep(0.2)
    proc = _run(tmp_path, home, SAME_SIZE, tier_on)
    assert (home / ".config" / "fish" / "config.fish").read_text() == "set x 12\n", proc.stderr
    assert proc.returncode == 125, proc.stderr


def test_an_untouched_linked_home_is_judged_by_its_ctimes_and_a_changed_file_still_read(tmp_path, monkeypatch):
    """The shortcut itself, in process: a home of 40 stowed links whose files settled before the
    guard was made is judged without reading one file or listing one linked directory again;
    one file of them written since (through a hard link's other name, same size, its mtime set
    back: only the ctime tells) is read and found, and only it."""
    home = tmp_path / "H"
    (home / "dotfiles" / "nvim" / "after").mkdir(parents=True)
    (home / ".config" / "nvim").mkdir(parents=True)
    for i in range(40):
        (home / "dotfiles" / "nvim" / f"f{i}.lua").write_text(f"-- {i}\n")
        os.symlink(f"../../dotfiles/nvim/f{i}.lua", home / ".config" / "nvim" / f"f{i}.lua")
    os.symlink("../../dotfiles/nvim/after", home / ".config" / "nvim" / "after")
    os.link(home / "dotfiles" / "nvim" / "f7.lua", home / "f7-other-name")
    time.sleep(0.2)
    protected = (str(home / ".config" / "nvim"),)
    guard = loosened.ModeGuard(loosened.guarded_paths([str(home)], protected), protected, [str(home)])
    assert len(guard.linked) == 40 * 2 + 2, sorted(guard.linked)
    reads, listings = [], []
    real_read, real_listdir = loosened._read, os.listdir
    monkeypatch.setattr(loosened, "_read", lambda path, size=1 << 16: reads.append(path) or real_read(path, size))
    monkeypatch.setattr(loosened.os, "listdir", lambda path: listings.append(path) or real_listdir(path))
    assert guard.written_through_links() == [] and reads == [] and listings == []
    launch = os.stat(home / "f7-other-name")
    with open(home / "f7-other-name", "r+") as fh:  # the same size, through the other name, the mtime set back
        fh.write("-- X\n")
    os.utime(home / "f7-other-name", ns=(launch.st_atime_ns, launch.st_mtime_ns))
    (home / "dotfiles" / "nvim" / "after" / "new.lua").write_text("x\n")
    found = guard.written_through_links()
    assert sorted(path for path, _data, _why in found) == [
        str(home / "dotfiles" / "nvim" / "after" / "new.lua"), str(home / "dotfiles" / "nvim" / "f7.lua")], found
    assert reads == [str(home / "dotfiles" / "nvim" / "f7.lua")], reads
    assert listings == [str(home / "dotfiles" / "nvim" / "after")], listings


# --- as an ordinary user -------------------------------------------------------------------


def test_as_an_ordinary_user_their_dangling_ssh_link_takes_no_planted_config():
    """As uid 65534, a granted home of theirs whose `~/.ssh/config` links into `~/dotfiles` where
    nothing is yet: the command makes the target with a ProxyCommand. The run fails (125) and
    what their ssh reads holds no planted line; a file of `~/dotfiles` written (twin)."""
    userkit.skip_unless_nobody_can_run()
    if not namespaces.availability()[0]:
        pytest.skip("no namespace tier here")
    with userkit.world_readable_tmp("sandboy-links11-") as base:
        home = base / "home"
        home.mkdir()
        subprocess.run(["/bin/sh", "-c", DANGLING["target-missing"]], cwd=home, check=True)
        (home / "dotfiles" / "notes").write_text("n\n")
        policy = base / "p.toml"
        policy.write_text(BASE.format(root=home))
        proc = sandboy_run_as_nobody(base, home, policy, "echo '  ProxyCommand sh -c PLANTED' > dotfiles/ssh/config; "
                                     "echo twin >> dotfiles/notes")
        assert "PLANTED" not in _what_ssh_reads(home), proc.stderr
        assert proc.returncode == 125, proc.stderr
        assert (home / "dotfiles" / "notes").read_text() == "n\ntwin\n"


# --- past the scan's bound: refused, not run half-checked ----------------------------------


def _crowded_fish(home: Path, subdirs: int, files: int) -> None:
    """`~/.config/fish` (protected) of `subdirs` directories of `files` files each, and the
    operator's stowed `functions/x.fish -> ../../../dotfiles/x.fish` among them."""
    fish = home / ".config" / "fish"
    for d in range(subdirs):
        (fish / f"c{d:02d}").mkdir(parents=True)
        for f in range(files):
            (fish / f"c{d:02d}" / f"f{f}.fish").write_text("")
    (fish / "functions").mkdir()
    (home / "dotfiles").mkdir()
    (home / "dotfiles" / "x.fish").write_text("function x; end\n")
    os.symlink("../../../dotfiles/x.fish", fish / "functions" / "x.fish")


@TIERS
def test_a_start_up_directory_past_the_scan_bound_is_refused_before_the_command_runs(tmp_path, tier_on):
    """A protected `~/.config/fish` holding 2,100 entries (30 directories of 70) and a stowed
    function link among them. The scan looked at 256 entries of it and nothing past them: a
    write through a link it did not reach passed rc 0 (the bound failed open, session 10's
    documented gap). Now a start-up path holding more than the bound refuses the run before it
    starts (125), naming the path, the bound and the keys. Host side: the command never ran (its
    marker absent), the function file holds its bytes."""
    home = tmp_path / "H"
    home.mkdir()
    _crowded_fish(home, 30, 70)
    proc = _run(tmp_path, home, "touch ran; echo 'echo PLANTED' >> dotfiles/x.fish", tier_on)
    assert proc.returncode == 125, proc.stderr
    assert not (home / "ran").exists(), "the command ran"
    assert (home / "dotfiles" / "x.fish").read_text() == "function x; end\n"
    assert f"{home}/.config/fish (protected) holds more than {loosened.MAX_LINKED_SCAN:,} entries" in proc.stderr
    assert "fs.protect_defaults = false" in proc.stderr


@TIERS
def test_twin_under_the_bound_the_same_home_runs_and_the_link_is_checked(tmp_path, tier_on):
    """The twin: the same home with 1,800 entries (30 of 60) runs: a legitimate command rc 0;
    the same write through the link is found after the run (125, the launch bytes put back)."""
    home = tmp_path / "H"
    home.mkdir()
    _crowded_fish(home, 30, 60)
    proc = _run(tmp_path, home, "echo ok > dotfiles/notes", tier_on)
    assert proc.returncode == 0, proc.stderr
    proc = _run(tmp_path, home, "echo 'echo PLANTED' >> dotfiles/x.fish", tier_on)
    assert proc.returncode == 125, proc.stderr
    assert (home / ".config" / "fish" / "functions" / "x.fish").read_text() == "function x; end\n"


def test_an_installations_code_past_the_bound_is_looked_at_best_effort_and_runs():
    """In process: an installation's code (`installed`: a version manager's root bound whole,
    thousands of files) past PER_PATH_SCAN is not a refusal — best-effort, said in ADR 0013 —
    while the same directory as a start-up path is."""
    import tempfile

    with tempfile.TemporaryDirectory() as base:
        root = os.path.join(base, "pyenv")
        os.makedirs(os.path.join(root, "lib"))
        for i in range(loosened.PER_PATH_SCAN + 50):
            open(os.path.join(root, "lib", f"m{i}.py"), "w").close()
        as_install = loosened.ModeGuard([], (root,), (base,), installed=(root,))
        assert as_install.cut is None
        for i in range(loosened.MAX_LINKED_SCAN):
            open(os.path.join(root, f"n{i}"), "w").close()
        as_start_up = loosened.ModeGuard([], (root,), (base,))
        assert as_start_up.cut == (root, base)


# --- fs.protect_defaults = false: the policy's own fs.protect entries are still checked -----

FISH_LINKED = ("mkdir -p dotfiles/fish .config/fish && echo 'set x 1' > dotfiles/fish/config.fish && "
               "ln -s ../../dotfiles/fish/config.fish .config/fish/config.fish")


def _run_defaults_off(tmp_path: Path, home: Path, script: str, tier_on: bool, protect: bool):
    policy = tmp_path / "p.toml"
    policy.write_text(BASE.format(root=home).replace(
        "write = ", "protect_defaults = false\n" + (f'protect = ["{home}/.config/fish"]\n' if protect else "")
        + "write = "))
    return subprocess.run([SANDBOY, "run", "--policy", str(policy), "--", "/bin/sh", "-c", script],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, env=_env(tmp_path, tier_on, home),
                          cwd=home, timeout=120)


@TIERS
@pytest.mark.parametrize("how", ["written", "loosened"])
def test_with_the_defaults_off_an_explicitly_protected_directorys_link_is_still_checked(tmp_path, tier_on, how):
    """`fs.protect_defaults = false` and `fs.protect = ["~/.config/fish"]`, its `config.fish` a
    stow link into `~/dotfiles`. With the defaults off no check ran at all: the protected file
    was written through its link (`written`), or made writable by every user through it
    (`loosened`: `chmod 0666`), rc 0. `fs.protect` promises "never writable", so its entries
    keep the link and mode checks (the git check stays off). Host side: bytes and mode."""
    home = tmp_path / "H"
    home.mkdir()
    subprocess.run(["/bin/sh", "-c", FISH_LINKED], cwd=home, check=True)
    time.sleep(0.15)
    attack = "echo 'echo PLANTED' >> dotfiles/fish/config.fish" if how == "written" else "chmod 0666 dotfiles/fish/config.fish"
    proc = _run_defaults_off(tmp_path, home, attack, tier_on, protect=True)
    target = home / "dotfiles" / "fish" / "config.fish"
    assert target.read_text() == "set x 1\n", proc.stderr
    assert target.stat().st_mode & 0o777 == 0o644, oct(target.stat().st_mode)
    assert proc.returncode == 125, proc.stderr


@TIERS
def test_twin_with_the_defaults_off_and_nothing_protected_no_check_runs(tmp_path, tier_on):
    """The twins: the same layout with the defaults off — and the directory protected, a
    legitimate write elsewhere in `~/dotfiles` and a `.git/config` edit (no git check: opted
    out) run rc 0; and with nothing in `fs.protect`, the write through the link goes through
    (the opt-out the key promises)."""
    home = tmp_path / "H"
    home.mkdir()
    subprocess.run(["/bin/sh", "-c", FISH_LINKED + " && mkdir -p .git && echo '[core]' > .git/config"], cwd=home,
                   check=True)
    proc = _run_defaults_off(tmp_path, home, "echo n > dotfiles/notes && echo '  fsmonitor = x' >> .git/config",
                             tier_on, protect=True)
    assert proc.returncode == 0, proc.stderr
    proc = _run_defaults_off(tmp_path, home, "echo 'echo mine' >> dotfiles/fish/config.fish", tier_on, protect=False)
    assert proc.returncode == 0, proc.stderr
    assert (home / "dotfiles" / "fish" / "config.fish").read_text() == "set x 1\necho mine\n"


def test_as_an_ordinary_user_a_crowded_start_up_directory_is_refused_and_an_explicit_protect_checked():
    """As uid 65534: their home's protected `~/.config/fish` past the bound refuses the run
    (125, the command never ran); with the defaults off and `fs.protect` naming it, under the
    bound, a write through its stow link fails the run and the bytes are put back."""
    userkit.skip_unless_nobody_can_run()
    if not namespaces.availability()[0]:
        pytest.skip("no namespace tier here")
    with userkit.world_readable_tmp("sandboy-links11-") as base:
        crowded, linked = base / "crowded", base / "linked"
        crowded.mkdir()
        _crowded_fish(crowded, 30, 70)
        linked.mkdir()
        subprocess.run(["/bin/sh", "-c", FISH_LINKED], cwd=linked, check=True)
        (base / "p1.toml").write_text(BASE.format(root=crowded))
        (base / "p2.toml").write_text(BASE.format(root=linked).replace(
            "write = ", f'protect_defaults = false\nprotect = ["{linked}/.config/fish"]\nwrite = '))
        outcomes = [sandboy_run_as_nobody(base, home, base / policy, script) for home, policy, script in (
            (crowded, "p1.toml", "touch ran"), (linked, "p2.toml", "echo 'echo PLANTED' >> dotfiles/fish/config.fish"))]
        assert outcomes[0].returncode == 125 and not (crowded / "ran").exists(), outcomes[0].stderr
        assert (linked / "dotfiles" / "fish" / "config.fish").read_text() == "set x 1\n", outcomes[1].stderr
        assert outcomes[1].returncode == 125, outcomes[1].stderr


# --- the same from a kept plan (ADR 0028): a hit runs the same checks ----------------------


def _hit_env(tmp_path: Path, home: Path) -> dict:
    env = _env(tmp_path, True, home)
    for name in ("SANDBOY_PLAN_CACHE", "SANDBOY_NATIVE"):  # (the C executor keeps plans)
        env.pop(name, None)
    return env


def _runs_kept(policy: Path, scripts, env: dict, cwd: Path) -> list:
    """Each of `scripts` run in turn with the plan cache on, `-X importtime` telling a hit (a run
    from a kept plan imports no compiler) from a build: [(proc, was a hit)]."""
    argv = [sys.executable, "-X", "importtime", SANDBOY, "run", "--policy", str(policy), "--", "/bin/sh", "-c"]
    done = []
    for script in scripts:
        time.sleep(0.15)  # (past fingerprint.TICK_NS: an entry is kept only where the root's stats settled)
        proc = subprocess.run([*argv, script], stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env,
                              cwd=cwd, timeout=120)
        imported = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines()
                    if line.startswith("import time:")}
        proc.stderr = "\n".join(line for line in proc.stderr.splitlines() if not line.startswith("import time:"))
        done.append((proc, "sandboy.confine.cage" not in imported))
    return done


def test_from_a_kept_plan_a_start_up_directory_grown_past_the_bound_is_refused(tmp_path):
    """A plan kept for a home under the bound; `~/.config/fish` then grows past it (the operator's
    own files): the next run is refused before the command runs (125, named), whether it is
    served from the kept plan or rebuilt."""
    home = tmp_path / "H"
    home.mkdir()
    _crowded_fish(home, 30, 60)
    policy = tmp_path / "p.toml"
    policy.write_text(BASE.format(root=home))
    env = _hit_env(tmp_path, home)
    runs = _runs_kept(policy, ["true", "true"], env, home)
    assert all(proc.returncode == 0 for proc, _hit in runs) and runs[1][1], runs[1][0].stderr[-2000:]
    for f in range(60, 70):
        for d in range(30):
            (home / ".config" / "fish" / f"c{d:02d}" / f"f{f}.fish").write_text("")
    ((proc, _hit),) = _runs_kept(policy, ["touch ran"], env, home)
    assert proc.returncode == 125, proc.stderr
    assert not (home / "ran").exists(), "the command ran"
    assert f"holds more than {loosened.MAX_LINKED_SCAN:,} entries" in proc.stderr, proc.stderr


def test_a_linked_file_changed_in_the_launch_tick_is_always_read(tmp_path, monkeypatch):
    """The shortcut's other half, in process: a linked file written just before the guard is made
    (its ctime not settled: a change in the same clock tick keeps the ctime) is read after the
    run even though every stat is as at launch — the stats cannot tell it unchanged. A mutant
    trusting any unchanged ctime reads nothing here."""
    home = tmp_path / "H"
    (home / "dotfiles").mkdir(parents=True)
    (home / ".ssh").mkdir()
    os.symlink("../dotfiles/ssh_config", home / ".ssh" / "config")
    (home / "dotfiles" / "ssh_config").write_text("Host *\n")  # just now: unsettled at the guard's launch
    protected = (str(home / ".ssh"),)
    guard = loosened.ModeGuard(loosened.guarded_paths([str(home)], protected), protected, [str(home)])
    record = guard.linked[str(home / "dotfiles" / "ssh_config")]
    assert record[0] == "file" and record[6] is False, record[:7]
    reads = []
    real_read = loosened._read
    monkeypatch.setattr(loosened, "_read", lambda path, size=1 << 16: reads.append(path) or real_read(path, size))
    assert guard.written_through_links() == []
    assert reads == [str(home / "dotfiles" / "ssh_config")], reads

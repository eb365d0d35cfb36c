"""Session 11 review of the cage's new shortcuts, from the attacker's side (rvsec11).

links11 (84e8934, mended by redcage11 in 579e948) passes a stowed symlink after the run with
one stat where it still reaches the inode it reached at launch AND that inode is still at the
path it reached it by (the file record there then judges its bytes). The siblings of redcage11's
break, each a real `sandboy run` of a granted home `~/.ssh/config -> ../.dotfiles/ssh/config`,
`.dotfiles -> src/dotfiles`, judged from the host side by what `ssh` would read afterwards:
- the directory holding the file renamed and a symlink to it put in its place (the launch path
  still resolves to the launch inode, through a link the command made), the file then written;
- a second hard link of the file made where the stow link is repointed to, and written through it
  (the launch path still holds the launch inode; the link reaches it by another way);
and their legitimate twins (the same moves, nothing written: the run passes). Tier and fallback,
root and an ordinary user (uid 65534).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: userkit
import userkit  # noqa: E402
import test_redteam_cage10 as cage10  # noqa: E402

pytestmark = pytest.mark.needs_kernel

TIERS = pytest.mark.parametrize("tier_on", [True, False], ids=["tier", "fallback"])
LAUNCH = "Host example\n  User me\n"
STOWED = ("mkdir -p .ssh src/dotfiles/ssh && printf 'Host example\\n  User me\\n' > src/dotfiles/ssh/config && "
          "ln -s src/dotfiles .dotfiles && ln -s ../.dotfiles/ssh/config .ssh/config")
PLANT = "printf 'Host *\\n  ProxyCommand sh -c \"touch PWNED\"\\n' >> "
# the directory renamed, a link to it where it was: the launch path reaches the launch inode
RENAMED_DIR = "mv src/dotfiles src/v3 && ln -s v3 src/dotfiles"
# a second name of the file, the stow link repointed to it: both ways reach the launch inode
HARD_LINKED = ("mkdir -p src/v3/ssh && ln src/dotfiles/ssh/config src/v3/ssh/config && "
               "ln -s src/v3 .dotfiles.new && mv -T .dotfiles.new .dotfiles")
MOVES = {"renamed-dir": (RENAMED_DIR, "src/v3/ssh/config"), "hard-link": (HARD_LINKED, "src/v3/ssh/config")}
# legitimate work sharing those paths: a restow by renaming the directory (the file untouched), a
# backup of the file by hard link (`cp -al`; the stow link left alone). (A hard link made AND the
# stow link repointed to it is refused even with nothing written: the link leads elsewhere and the
# inode changed — as before 84e8934's shortcut.)
TWINS = {"renamed-dir": RENAMED_DIR, "hard-link": "mkdir -p src/backup && ln src/dotfiles/ssh/config src/backup/config"}


def _what_ssh_reads(home: Path) -> str:
    config = home / ".ssh" / "config"
    try:
        return config.read_text()
    except OSError:
        return ""


def _run(tmp_path: Path, tier_on: bool, script: str):
    """(home, the run of `script` as root in a granted home laid out by STOWED)."""
    env, home, policy = cage10._granted_home(tmp_path, STOWED)
    env.update(cage10._tier_env(tier_on))
    # (the layout's ctimes settled before launch: `loosened._settled`; a file changed in the launch
    # tick has no short way, and a twin's restow would then be refused as leading elsewhere)
    time.sleep(0.15)
    return home, cage10._sandboy_run(policy, script, env, home)


@TIERS
@pytest.mark.parametrize("move", sorted(MOVES))
def test_a_stowed_file_reached_by_a_way_the_run_made_and_written_is_judged(tmp_path, tier_on, move):
    script, written = MOVES[move]
    home, done = _run(tmp_path, tier_on, f"{script} && {PLANT}{written}")
    assert "ProxyCommand" not in _what_ssh_reads(home), (done.returncode, done.stderr[-1500:])
    assert done.returncode == 125, done.stderr[-1500:]


@TIERS
@pytest.mark.parametrize("move", sorted(TWINS))
def test_twin_the_same_moves_writing_nothing_pass(tmp_path, tier_on, move):
    home, done = _run(tmp_path, tier_on, TWINS[move])
    assert done.returncode == 0, done.stderr[-1500:]
    assert _what_ssh_reads(home) == LAUNCH


@TIERS
@pytest.mark.parametrize("write", [True, False], ids=["written", "twin"])
def test_as_an_ordinary_user_a_renamed_stow_directory_written_is_judged(tier_on, write):
    userkit.skip_unless_nobody_can_run()
    if tier_on:
        cage10._tier_env(True)
    import subprocess

    with userkit.world_readable_tmp("sandboy-rvsec11-") as base:
        base = Path(base)
        home = base / "H"
        home.mkdir()
        subprocess.run(["/bin/sh", "-c", STOWED], cwd=home, check=True)
        policy = base / "p.toml"
        policy.write_text(cage10.BASE.format(root=home))
        script = RENAMED_DIR + (f" && {PLANT}src/v3/ssh/config" if write else "")
        done = _nobody(base, home, policy, script, tier_on)
        if write:
            assert "ProxyCommand" not in _what_ssh_reads(home), (done.returncode, done.stderr[-1500:])
            assert done.returncode == 125, done.stderr[-1500:]
        else:
            assert done.returncode == 0, done.stderr[-1500:]
            assert _what_ssh_reads(home) == LAUNCH


def _nobody(base: Path, home: Path, policy: Path, script: str, tier_on: bool):
    """cage10.sandboy_run_as_nobody with the tier chosen (its environment is built there)."""
    import os
    import subprocess
    import time

    from sandboy.confine import namespaces

    subprocess.run(["chown", "-R", "65534:65534", str(base)], check=True)
    time.sleep(0.15)
    package = Path(namespaces.__file__).resolve().parents[2]
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(package), "HOME": str(home),
           "SANDBOY_CACHE_DIR": str(base / "cache"), "SANDBOY_PLAN_CACHE": "0",
           "SANDBOY_NAMESPACES": "1" if tier_on else "0"}
    if "SANDBOY_NATIVE" in os.environ:
        env["SANDBOY_NATIVE"] = os.environ["SANDBOY_NATIVE"]
    return subprocess.run(userkit.as_user(["/usr/bin/python3", "-m", "sandboy", "run", "--policy", str(policy), "--",
                                           "/bin/sh", "-c", script]),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120, env=env, cwd=home)


def test_from_a_kept_plan_a_stowed_file_hard_linked_where_the_link_is_repointed_and_written_is_judged(tmp_path):
    """The same hard-link probe as a plan-cache hit (ADR 0028): the hit's check is the same guard."""
    env, home, policy = cage10._granted_home(tmp_path, STOWED)
    done = cage10._hit_run(policy, f"{HARD_LINKED} && {PLANT}src/v3/ssh/config", env, home)
    assert "ProxyCommand" not in _what_ssh_reads(home), (done.returncode, done.stderr[-1500:])
    assert done.returncode == 125, done.stderr[-1500:]


# --- a core.hooksPath the operator's git config INCLUDES (not in the config itself) ----------

# Pre-existing (8179c54 too): git follows include.path / includeIf.*.path of the operator's global
# and system configs. The after-run check follows them too, but judged each included file ONCE for
# the whole check (gitjudge: `included` keyed by the file alone) — first for no repository, where a
# relative `core.hooksPath = .githooks` names nothing — so the repository's own `.githooks` was
# never judged: a planted pre-commit passed, rc 0, and the operator's next commit ran it (tier and
# fallback). Now once per repository top: 125, the plant moved. The launch protection still reads
# no include (protected._config_hooks_path), so this is caught after the run, not refused in the cage.


def _included_hooks_path(tmp_path, tier_on, where):
    import test_git_system_config as system

    repo, env, prefix, policy = system._setup(tmp_path, "GIT_CONFIG_SYSTEM")
    env.update(cage10._tier_env(tier_on))
    included = tmp_path / "gitconfig.local"
    included.write_text(system.HOOKS_PATH)
    Path(env["GIT_CONFIG_SYSTEM"]).write_text("")
    config = tmp_path / "including.gitconfig"
    config.write_text(f"[include]\n\tpath = {included.name}\n")  # (relative: to the including file's directory)
    env[where] = str(config)
    assert system._origin(env, repo) == f"file:{included}\t.githooks"  # what the operator's git reads
    return system, repo, env, prefix, policy


@TIERS
@pytest.mark.parametrize("where", ["GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM"])
def test_a_hooks_path_an_operator_config_includes_is_judged_after_the_run(tmp_path, tier_on, where):
    import os
    import subprocess

    system, repo, env, prefix, policy = _included_hooks_path(tmp_path, tier_on, where)
    mark, status = tmp_path / "RAN", tmp_path / "status.json"
    proc = system._run(prefix, policy, system.PLANT.format(mark=mark), env, repo, status)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=o", "-c", "user.email=o@x", "commit", "-q",
                    "--allow-empty", "-m", "x"], capture_output=True, timeout=60, env=env)
    assert not mark.exists(), (proc.returncode, proc.stdout, proc.stderr[-1500:])  # the next commit ran nothing
    # (moved with the rest of the directory: one whose entries changed has every file judged)
    assert "pre-commit" not in os.listdir(repo / ".githooks"), (proc.returncode, proc.stdout, proc.stderr[-1500:])
    assert proc.returncode == 125, proc.stderr[-1500:]


@TIERS
def test_twin_under_an_included_hooks_path_other_work_in_the_repository_passes(tmp_path, tier_on):
    system, repo, env, prefix, policy = _included_hooks_path(tmp_path, tier_on, "GIT_CONFIG_GLOBAL")
    proc = system._run(prefix, policy, "echo ok > notes.txt && cat .githooks/README", env, repo, tmp_path / "s.json")
    assert proc.returncode == 0, proc.stderr[-1500:]
    assert (repo / "notes.txt").read_text() == "ok\n"


def test_twin_a_hooks_path_in_the_operator_config_itself_is_kept_from_the_run(tmp_path):
    """The same layout without the include (the value in the global config itself): protected at launch."""
    import os

    import test_git_system_config as system

    repo, env, prefix, policy = system._setup(tmp_path, "GIT_CONFIG_SYSTEM")
    Path(env["GIT_CONFIG_SYSTEM"]).write_text("")
    config = tmp_path / "global.gitconfig"
    config.write_text(system.HOOKS_PATH)
    env["GIT_CONFIG_GLOBAL"] = str(config)
    mark, status = tmp_path / "RAN", tmp_path / "status.json"
    proc = system._run(prefix, policy, system.PLANT.format(mark=mark), env, repo, status)
    assert (proc.returncode, proc.stdout) == (0, "REFUSED\n"), (proc.returncode, proc.stdout, proc.stderr[-1500:])
    assert sorted(os.listdir(repo / ".githooks")) == ["README"]

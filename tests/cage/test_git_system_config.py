"""The SYSTEM git config at launch (session 11): `core.hooksPath` set in `/etc/gitconfig` (or the
file `$GIT_CONFIG_SYSTEM` names; neither where `$GIT_CONFIG_NOSYSTEM` is true) is read by the
operator's git in every repository, as a global one is. `protected.hooks_paths` read only the
repository's config, `~/.gitconfig` and `$XDG_CONFIG_HOME/git/config`, so a hooks directory the
system config points into a write root was writable in the cage: the plant was caught only by
the after-run check (125, quarantined). Now the build protects it as it does the global
config's (ADR 0013 "Session 11"): the write fails inside the cage.

Each attack is a real `sandboy run`; what git itself reads is asked of git (`git config
--show-origin`), and the host's `/etc/gitconfig` is never written: the `/etc/gitconfig` case
binds a file over it in a private mount namespace of its own (propagation private first)."""

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_redteam_cage10 import BASE, SANDBOY, _env, _tier_env  # noqa: E402

pytestmark = pytest.mark.needs_kernel

PLANT = ("printf '#!/bin/sh\\ntouch {mark}\\n' > .githooks/pre-commit 2>/dev/null"
         " && chmod +x .githooks/pre-commit && echo PLANTED || echo REFUSED")
HOOKS_PATH = "[core]\n\thooksPath = .githooks\n"


def _repo(tmp_path: Path) -> Path:
    """A repository with a tracked `.githooks/` (husky-like), no hook in it yet."""
    repo = tmp_path / "W"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / ".githooks").mkdir()
    (repo / ".githooks" / "README").write_text("hooks of this project\n")
    time.sleep(1.1)  # (settled before the run: a file made in its launch second is judged as made by it)
    return repo


def _run(argv_prefix, policy, script, env, cwd, status):
    return subprocess.run([*argv_prefix, SANDBOY, "run", "--policy", str(policy), "--status-json", str(status),
                           "--", "/bin/sh", "-c", script],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env, cwd=cwd, timeout=120)


def _origin(env, repo) -> str:
    """Where the operator's git takes core.hooksPath from (`git config --show-origin`), '' if nowhere."""
    got = subprocess.run(["git", "-C", str(repo), "config", "--show-origin", "core.hooksPath"],
                         capture_output=True, text=True, env=env)
    return got.stdout.strip()


def _in_private_mount_ns(config: Path) -> list:
    """argv prefix: a private mount namespace (propagation private on / before anything is
    mounted) where `config` is bound over /etc/gitconfig, then the rest of the argv."""
    return ["unshare", "--mount", "--propagation", "private", "/bin/sh", "-c",
            f'mount --bind "{config}" /etc/gitconfig && exec "$@"', "sh"]


def _setup(tmp_path, how):
    repo = _repo(tmp_path)
    config = tmp_path / "system.gitconfig"
    config.write_text(HOOKS_PATH)
    env = _env(tmp_path, **_tier_env(True), SANDBOY_PLAN_CACHE="0", HOME=str(tmp_path / "home"),
               GIT_CONFIG_GLOBAL="/dev/null")
    env.pop("GIT_CONFIG_NOSYSTEM", None)
    env.pop("XDG_CONFIG_HOME", None)
    prefix = []
    if how == "GIT_CONFIG_SYSTEM":
        env["GIT_CONFIG_SYSTEM"] = str(config)
        assert _origin(env, repo) == f"file:{config}\t.githooks"
    else:
        if not os.path.isfile("/etc/gitconfig"):
            pytest.skip("no /etc/gitconfig to bind over here")
        env.pop("GIT_CONFIG_SYSTEM", None)
        prefix = _in_private_mount_ns(config)
        seen = subprocess.run([*prefix, "git", "-C", str(repo), "config", "--system", "--show-origin",
                               "core.hooksPath"], capture_output=True, text=True, env=env)
        assert seen.stdout.strip() == "file:/etc/gitconfig\t.githooks", seen
    policy = tmp_path / "p.toml"
    policy.write_text(BASE.format(root=repo))
    return repo, env, prefix, policy


@pytest.mark.parametrize("how", ["GIT_CONFIG_SYSTEM", "/etc/gitconfig"])
def test_a_hooks_path_the_system_config_points_into_the_write_root_is_protected_at_launch(tmp_path, how):
    etc_before = hashlib.sha256(Path("/etc/gitconfig").read_bytes()).hexdigest() if os.path.isfile("/etc/gitconfig") else None
    repo, env, prefix, policy = _setup(tmp_path, how)
    mark, status = tmp_path / "RAN", tmp_path / "status.json"
    proc = _run(prefix, policy, PLANT.format(mark=mark), env, repo, status)
    # host side: the hooks directory is as at launch — nothing planted, nothing quarantined
    assert sorted(os.listdir(repo / ".githooks")) == ["README"], proc.stderr
    assert not (repo / ".sandboy-quarantine").exists() and "quarantine" not in proc.stderr, proc.stderr
    # refused by the cage (read-only bind), not caught afterwards (which ends 125)
    assert (proc.returncode, proc.stdout) == (0, "REFUSED\n"), (proc.returncode, proc.stdout, proc.stderr)
    protected = json.loads(status.read_text())["enforced"]["landlock"]["fs_protected"]
    assert os.path.realpath(repo / ".githooks") in protected
    # the operator's next commit runs nothing
    subprocess.run([*prefix, "git", "-C", str(repo), "-c", "user.name=o", "-c", "user.email=o@x", "commit", "-q",
                    "--allow-empty", "-m", "x"], capture_output=True, timeout=60, env=env)
    assert not mark.exists()
    if etc_before is not None:  # the host's own file was never touched
        assert hashlib.sha256(Path("/etc/gitconfig").read_bytes()).hexdigest() == etc_before


def test_twin_with_git_config_nosystem_the_system_hooks_path_is_not_protected(tmp_path):
    """The twin: with `$GIT_CONFIG_NOSYSTEM=1` git reads no system config (asked of git), so its
    hooksPath names nothing git runs: the run writes `.githooks/pre-commit` (a project's tracked
    hooks are ordinary files to edit), rc 0, nothing moved."""
    repo, env, prefix, policy = _setup(tmp_path, "GIT_CONFIG_SYSTEM")
    env["GIT_CONFIG_NOSYSTEM"] = "1"
    assert _origin(env, repo) == ""
    status = tmp_path / "status.json"
    proc = _run(prefix, policy, PLANT.format(mark=tmp_path / "RAN"), env, repo, status)
    assert (proc.returncode, proc.stdout) == (0, "PLANTED\n"), proc.stderr
    assert sorted(os.listdir(repo / ".githooks")) == ["README", "pre-commit"]
    protected = json.loads(status.read_text())["enforced"]["landlock"]["fs_protected"]
    assert os.path.realpath(repo / ".githooks") not in protected


def test_twin_the_rest_of_the_repository_stays_writable_under_a_system_hooks_path(tmp_path):
    """The twin: the system config's hooksPath protected, the repository's other files are written
    and git commits inside the cage: rc 0."""
    repo, env, prefix, policy = _setup(tmp_path, "GIT_CONFIG_SYSTEM")
    text = policy.read_text().replace('"/dev/null"]', f'"/dev/null", "{env["GIT_CONFIG_SYSTEM"]}"]', 1)
    policy.write_text(text.replace('pass = ["GIT_CONFIG_GLOBAL"]', 'pass = ["GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM"]'))
    script = ("echo work > src.txt && git add src.txt && git -c user.name=c -c user.email=c@x commit -q -m w"
              " && cat .githooks/README")
    proc = _run(prefix, policy, script, env, repo, tmp_path / "status.json")
    assert (proc.returncode, proc.stdout) == (0, "hooks of this project\n"), proc.stderr
    assert (repo / "src.txt").read_text() == "work\n"


def test_a_system_hooks_path_set_after_a_plan_was_kept_is_protected_on_the_next_run(tmp_path):
    """The plan cache (ADR 0028): an entry kept while the system config named no hooksPath, then
    the same file (same `$GIT_CONFIG_SYSTEM`, so the same environment digest) given one. The
    entry's watch holds that file's stats (`protected.launch_reads`), so the next run resolves
    the protected paths anew: the plant is refused in the cage. The C executor (it keeps plans)."""
    repo, env, prefix, policy = _setup(tmp_path, "GIT_CONFIG_SYSTEM")
    config = Path(env["GIT_CONFIG_SYSTEM"])
    config.write_text("[user]\n\tname = o\n")
    env = {k: v for k, v in env.items() if k not in ("SANDBOY_PLAN_CACHE", "SANDBOY_NATIVE")}
    for _ in range(2):
        time.sleep(0.15)  # (past fingerprint.TICK_NS: an entry is kept only where the stats settled)
        assert _run(prefix, policy, "true", env, repo, tmp_path / "status.json").returncode == 0
    assert any((tmp_path / "cache").rglob("*")), "no plan was kept"
    config.write_text(HOOKS_PATH)
    proc = _run(prefix, policy, PLANT.format(mark=tmp_path / "RAN"), env, repo, tmp_path / "status.json")
    assert sorted(os.listdir(repo / ".githooks")) == ["README"], proc.stderr
    assert (proc.returncode, proc.stdout) == (0, "REFUSED\n"), (proc.returncode, proc.stdout, proc.stderr)

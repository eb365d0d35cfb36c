"""Session 10 final review (rvsec10) of the write-root shortcuts from the attacker's side: gitfast's
by-stats judgement and census-listing reuse (gitcheck), writehit's protected-path watch and settled
put_back, redcage10's `loosened._reached_elsewhere` records. Each probe is a real `sandboy run` on
the real kernel, checked from the host side (bytes, where files are); see docs/threat-model.md
("Session 10 review of the cage")."""

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_redteam_cage10 import BASE, _env, _granted_home, _sandboy_run, _tier_env  # noqa: E402

pytestmark = pytest.mark.needs_kernel


def test_a_big_hard_linked_start_up_file_rewritten_with_its_mtime_set_back_is_found(tmp_path):
    """A protected file with another hard link in the write root and more than
    loosened.MAX_LINKED_BYTES (no launch bytes kept): the guard compared size and MTIME — which the
    file's owner sets back at will (`touch -r`). Rewritten in place through its other name, same
    size, mtime put back: passed rc 0, the operator's `.bashrc` carried the plant. The ctime, which
    no process sets back, must tell."""
    env, home, policy = _granted_home(tmp_path, "mkdir dotfiles")
    body = "# " + "x" * (2 << 20) + "\necho operator\n"
    (home / "dotfiles" / "bashrc").write_text(body)
    os.link(home / "dotfiles" / "bashrc", home / ".bashrc")
    script = ("touch -r dotfiles/bashrc ref && printf 'echo PLANTED #' | dd of=dotfiles/bashrc conv=notrunc "
              "status=none && touch -r ref dotfiles/bashrc")
    proc = _sandboy_run(policy, script, env, home)
    where = home / ".bashrc"
    planted = where.exists() and where.read_bytes().startswith(b"echo PLANTED")
    assert not (planted and proc.returncode == 0), "written through the hard link, mtime set back: rc 0"
    assert proc.returncode == 125 and "hard link" in proc.stderr, proc.stderr
    assert not planted  # (moved: its launch bytes were not kept, so nothing put back)


def test_twin_a_big_hard_linked_start_up_file_read_and_its_neighbours_written_pass(tmp_path):
    """The twin: the same big hard-linked `.bashrc` read (its atime may move), the other dotfiles
    written: rc 0, nothing moved."""
    env, home, policy = _granted_home(tmp_path, "mkdir dotfiles && echo 'set nu' > dotfiles/vimrc")
    (home / "dotfiles" / "bashrc").write_text("# " + "x" * (2 << 20) + "\necho operator\n")
    os.link(home / "dotfiles" / "bashrc", home / ".bashrc")
    proc = _sandboy_run(policy, "tail -n 1 dotfiles/bashrc && echo twin >> dotfiles/vimrc", env, home)
    assert proc.returncode == 0 and proc.stdout == "echo operator\n", proc.stderr
    assert (home / "dotfiles" / "vimrc").read_text() == "set nu\ntwin\n"
    assert not (home / ".sandboy-quarantine").exists()


STOWED_NVIM = ("mkdir -p dotfiles/nvim/lua .config/nvim/lua && for i in $(seq 1 {count}); do "
               "echo \"-- $i\" > dotfiles/nvim/lua/m$i.lua; ln -s ../../../dotfiles/nvim/lua/m$i.lua "
               ".config/nvim/lua/m$i.lua; done")


@pytest.mark.parametrize("count", [3, 40, 70])
def test_many_stowed_links_in_one_protected_directory_leave_the_ssh_config_guarded(tmp_path, count):
    """The scan's MAX_LINKED_FILES was ONE bound for all protected paths, checked before each
    entry: a home whose `~/.config/nvim` holds 40 per-file links into `~/dotfiles` (stow, a
    plugin manager's lua tree: a link and its file are two records) filled it before `.ssh` —
    later in the defaults — was looked at. `echo ProxyCommand >> ~/.ssh/config` through the
    operator's per-file link then passed rc 0 (with 3 links: 125). Host side: the ssh config."""
    env, home, policy = _granted_home(tmp_path, STOWED_NVIM.format(count=count), "mkdir -p dotfiles/ssh .ssh && "
                                      "echo 'Host *' > dotfiles/ssh/config && ln -s ../dotfiles/ssh/config .ssh/config")
    proc = _sandboy_run(policy, "echo '  ProxyCommand sh -c \"echo PLANTED\"' >> .ssh/config", env, home)
    seen = home / ".ssh" / "config"
    text = seen.read_text() if seen.exists() else ""
    assert "PLANTED" not in text, f"~/.ssh/config planted through its link (rc {proc.returncode})"
    assert proc.returncode == 125, proc.stderr
    # its bytes kept (the 41st file) and put back; past MAX_LINKED_FILES kept (70 links), moved only
    assert text == ("Host *\n" if count < 64 else ""), text


@pytest.mark.parametrize("which", ["global", "system"])
def test_a_relative_hooks_path_in_the_operators_git_config_takes_no_hook_from_the_run(tmp_path, which):
    """The operator's git config names a RELATIVE `core.hooksPath = .githooks` (every repository's
    own `.githooks/`, a tracked directory of the worktree): a run planting
    `.githooks/pre-commit` in the granted repository must fail (the git check follows the
    global config's hooksPath). The SYSTEM config (`/etc/gitconfig`; `$GIT_CONFIG_SYSTEM` here, so
    the host's file is untouched) is read by the operator's git just the same, but the check
    read only `~/.gitconfig`, `$XDG_CONFIG_HOME/git/config` or `$GIT_CONFIG_GLOBAL`
    (`gitcheck.global_configs`): the plant passed rc 0 and the operator's next commit ran it.
    Host side: the marker the hook leaves."""
    import subprocess

    repo = tmp_path / "W"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    config = tmp_path / "operator.gitconfig"
    config.write_text("[core]\n\thooksPath = .githooks\n[user]\n\tname = o\n\temail = o@x\n")
    names = {"global": ("GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM"), "system": ("GIT_CONFIG_SYSTEM", "GIT_CONFIG_GLOBAL")}
    ours, other = names[which]
    git_env = {ours: str(config), other: "/dev/null", "HOME": str(tmp_path)}
    env = _env(tmp_path, **_tier_env(True), SANDBOY_PLAN_CACHE="0", **git_env)
    policy = tmp_path / "p.toml"
    policy.write_text(BASE.format(root=repo).replace('pass = ["GIT_CONFIG_GLOBAL"]',
                                                    'pass = ["GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM"]'))
    mark = tmp_path / "RAN"
    proc = _sandboy_run(policy, f"mkdir -p .githooks && printf '#!/bin/sh\\ntouch {mark}\\n' > .githooks/pre-commit"
                                " && chmod +x .githooks/pre-commit", env, repo)
    subprocess.run(["git", "-C", str(repo), "commit", "-q", "--allow-empty", "-m", "x"], capture_output=True,
                   timeout=60, env=dict(os.environ, **git_env))
    assert not mark.exists(), f"the operator's commit ran a hook the run planted (rc {proc.returncode})"
    assert proc.returncode == 125, proc.stderr


FILLED = (".config/fish", ".config/nvim", ".config/autostart", ".config/systemd/user", ".config/git", ".ssh", ".pip",
          ".config/pip", ".gnupg")


@pytest.mark.parametrize("order", ["repository-first", "home-first"])
def test_a_repositorys_crowded_protected_directories_leave_the_homes_links_guarded(tmp_path, order):
    """Two write roots, a cloned repository and the home. The repository (its content is the
    attacker's) carries the default-protected names as directories of 256 files each — 2,304
    entries, past the scan's 2,000 for ALL protected paths: listed first, the home's `~/.ssh`
    got no entry of the scan, and its per-file link `~/.ssh/config -> ../dotfiles/ssh/config`
    was not followed. Host side: the ssh config."""
    import subprocess

    env = _env(tmp_path, **_tier_env(True), SANDBOY_PLAN_CACHE="0")
    home, repo = tmp_path / "H", tmp_path / "R"
    home.mkdir()
    subprocess.run(["/bin/sh", "-c", "mkdir -p dotfiles/ssh .ssh && echo 'Host *' > dotfiles/ssh/config"
                    " && ln -s ../dotfiles/ssh/config .ssh/config"], cwd=home, check=True)
    for name in FILLED:
        (repo / name).mkdir(parents=True)
        for i in range(256):
            (repo / name / f"f{i}").write_text("x")
    policy = tmp_path / "p.toml"
    roots = [repo, home] if order == "repository-first" else [home, repo]
    policy.write_text(BASE.format(root=roots[0]).replace(f'write = ["{roots[0]}"]', f'write = ["{roots[0]}", "{roots[1]}"]'))
    env.update(HOME=str(home))
    proc = _sandboy_run(policy, f"echo '  ProxyCommand sh -c \"echo PLANTED\"' >> {home}/.ssh/config", env, repo)
    seen = home / ".ssh" / "config"
    text = seen.read_text() if seen.exists() else ""
    assert "PLANTED" not in text, f"~/.ssh/config planted through its link (rc {proc.returncode})"
    assert proc.returncode == 125, proc.stderr


@pytest.mark.parametrize("how", ["append", "same-size"])
def test_a_repositorys_config_hard_linked_in_the_write_root_and_written_there_is_judged(tmp_path, how):
    """gitfast's by-stats pass (`gitcheck._Walk.unchanged`: the launch config's (dev, ino, size)
    and a ctime before the snapshot) against a `.git/config` with a second name in the write root
    (`cfg`, the operator's hard link): the tier binds the PATH `.git/config` read-only, the inode
    stays writable through `cfg`. Written there — appended, or rewritten to the same size with
    its mtime set back — the inode's ctime is the one compared: judged, 125, and the operator's
    `git status` runs no planted fsmonitor. Host side: the marker."""
    import subprocess

    repo = tmp_path / "W"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    config = repo / ".git" / "config"
    # room for the same-size plant whatever the temp path's length (it names the marker): a
    # plant cut short is an unreadable config, judged too, but not as the fsmonitor it is
    with open(config, "a") as f:
        f.write("# " + "-" * 510 + "\n")
    os.link(config, repo / "cfg")
    mark = tmp_path / "RAN"
    git_env = {"GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(tmp_path)}
    env = _env(tmp_path, **_tier_env(True), SANDBOY_PLAN_CACHE="0", **git_env)
    policy = tmp_path / "p.toml"
    policy.write_text(BASE.format(root=repo))
    plant = f'[core]\\n\\tfsmonitor = "touch {mark}; false"\\n'
    if how == "append":
        script = f"printf '{plant}' >> cfg"
    else:  # the same size: the plant over the launch bytes' start, padded with a comment; mtime back
        size = config.stat().st_size
        script = (f"touch -r cfg ref && {{ printf '{plant}'; head -c {size} /dev/zero | tr '\\000' '#'; }} | "
                  f"head -c {size} > new && dd if=new of=cfg conv=notrunc status=none && touch -r ref cfg")
    import time
    time.sleep(0.15)  # (the set-up's clock tick past)
    proc = _sandboy_run(policy, script, env, repo)
    subprocess.run(["git", "-C", str(repo), "status"], capture_output=True, timeout=60, env=dict(os.environ, **git_env))
    assert not mark.exists(), f"the operator's git status ran a fsmonitor planted through the hard link (rc {proc.returncode})"
    assert proc.returncode == 125, proc.stderr
    # (the git check's own judgement, not only the hard-link record of the mode guard)
    assert "git config keys that run programs" in proc.stderr and "core.fsmonitor" in proc.stderr, proc.stderr


@pytest.mark.parametrize("cache", ["0", "1"], ids=["build", "kept"])
def test_the_operators_interrupt_during_a_write_root_run_still_gets_the_git_check(tmp_path, cache):
    """writehit's `exec_mode._check_in_namespace` (a write-root build checked without a
    Supervision) and a plan-cache run: the command plants a nested repository's config, then the
    operator interrupts `sandboy run` (SIGINT to it, as a terminal's ^C to its group). The signal is
    forwarded, the init waited for, the check runs: the run fails (not rc 0, the plant moved), and
    the operator's `git status` runs no fsmonitor. Host side: the marker and the config.

    The interrupt is sent once the command's `sleep` has exec'd (interruptkit): sent as soon as
    "planted" was read it raced dash, which defers a SIGINT reaching it while it starts `sleep`
    until `sleep` ends (session 10's intermittent "held until the command ends"; the same without
    Sandboy; ADR 0011 "Session 11")."""
    import signal
    import subprocess
    import time

    from interruptkit import signal_once_running

    repo = tmp_path / "W"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "vendor" / "x" / "y").mkdir(parents=True)
    mark = tmp_path / "RAN"
    git_env = {"GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(tmp_path)}
    env = _env(tmp_path, **_tier_env(True), SANDBOY_PLAN_CACHE=cache, **git_env)
    policy = tmp_path / "p.toml"
    policy.write_text(BASE.format(root=repo))
    argv = [os.path.join(os.path.dirname(sys.executable), "sandboy"), "run", "--policy", str(policy), "--",
            "/bin/sh", "-c"]
    if cache == "1":
        for _ in range(2):
            time.sleep(0.15)
            subprocess.run([*argv, "true"], env=env, cwd=repo, capture_output=True, timeout=60)
    time.sleep(0.15)
    script = (f"git init -q vendor/x && printf '[core]\\n\\tfsmonitor = \"touch {mark}; false\"\\n' >> "
              "vendor/x/.git/config && echo planted && sleep 30")
    # (stdin: never a terminal here, which would make the run supervised, not the path named above)
    proc = subprocess.Popen([*argv, script], env=env, cwd=repo, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "planted\n"
        signal_once_running(proc, "sleep", signal.SIGINT)
        out, err = proc.communicate(timeout=20)  # (held: the 30 s sleep would end first)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    subprocess.run(["git", "-C", str(repo / "vendor" / "x"), "status"], capture_output=True, timeout=60,
                   env=dict(os.environ, **git_env))
    assert not mark.exists(), f"the plant survived an interrupted run (rc {proc.returncode}): {err}"
    assert proc.returncode != 0 and "fsmonitor" in err, (proc.returncode, err)

"""Session 10 review of the cage from the attacker's side: what session 9 added — the plan cache
keeping write roots (ADR 0028), the mode guard (`confine/loosened.py`, ADR 0019 "Session 9"),
denied paths inside write roots bound read-only — and what session 10 changes there. Every run
is a real `sandboy run` on the real kernel; each probe checks from the host side what the command
reached (bytes, modes, a marker a host program would leave), and has a twin where the legitimate
use shares its path. What held is listed in docs/threat-model.md ("Session 10 review of the cage").
"""

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sandboy.confine import namespaces

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: userkit
import userkit  # noqa: E402
from gitkit import whole_second_image  # noqa: E402

pytestmark = pytest.mark.needs_kernel

SANDBOY = os.path.join(os.path.dirname(sys.executable), "sandboy")
BASE = ('version = 1\n[fs]\nread = ["/usr", "/lib", "/lib64", "/etc", "/bin", "/dev/null"]\n'
        'exec = ["/usr/bin", "/bin", "/usr/lib/git-core"]\nwrite = ["{root}"]\n[env]\npass = ["GIT_CONFIG_GLOBAL"]\n')
ACCOMPLICE = userkit.as_user(["/bin/sh", "-c"])  # another ordinary user: no capabilities


def _env(tmp_path: Path, **more) -> dict:
    """A probe's environment: its own cache directory, the executor a suite pass chose."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("SANDBOY_NAMESPACES", "SANDBOY_PLAN_CACHE", "PYTHONPATH")}
    env["SANDBOY_CACHE_DIR"] = str(tmp_path / "cache")
    env.update(more)
    return env


def _tier_env(tier_on: bool) -> dict:
    if tier_on and not namespaces.availability()[0]:
        pytest.skip("no namespace tier here")
    return {"SANDBOY_NAMESPACES": "1" if tier_on else "0"}


def _granted_home(tmp_path: Path, *makes: str) -> tuple[dict, Path, Path]:
    """(env, home, policy): a home granted whole (`write = [home]`, HOME pointing there) under the
    tier with the plan cache off, laid out by the shell commands MAKES run in it."""
    env = _env(tmp_path, **_tier_env(True), SANDBOY_PLAN_CACHE="0")
    home = tmp_path / "H"
    home.mkdir()
    for make in makes:
        subprocess.run(["/bin/sh", "-c", make], cwd=home, check=True)
    policy = tmp_path / "p.toml"
    policy.write_text(BASE.format(root=home))
    env.update(HOME=str(home))
    return env, home, policy


def _sandboy_run(policy: Path, script: str, env: dict, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([SANDBOY, "run", "--policy", str(policy), "--", "/bin/sh", "-c", script],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env, cwd=cwd, timeout=120)


def _hit_run(policy: Path, script: str, env: dict, cwd) -> subprocess.CompletedProcess:
    """The same run from a kept plan (ADR 0028): two runs of `true` keep the entry (the first
    builds, the second proves it is used), then `script` runs from it — asserted a hit (a run
    from a kept plan imports no compiler: `-X importtime`). The C executor: only it keeps plans."""
    env = {k: v for k, v in env.items() if k not in ("SANDBOY_PLAN_CACHE", "SANDBOY_NATIVE")}
    argv = [sys.executable, "-X", "importtime", SANDBOY, "run", "--policy", str(policy), "--", "/bin/sh", "-c"]
    for command in ("true", "true", script):
        time.sleep(0.15)  # (past fingerprint.TICK_NS: an entry is kept only where the root's stats settled)
        proc = subprocess.run([*argv, command], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env, cwd=cwd, timeout=120)
    imported = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert "sandboy.cli" in imported and "sandboy.confine.cage" not in imported, "not a hit: " + proc.stderr[-2000:]
    proc.stderr = "\n".join(line for line in proc.stderr.splitlines() if not line.startswith("import time:"))
    return proc


def sandboy_run_as_nobody(base: Path, home: Path, policy: Path, script: str) -> subprocess.CompletedProcess:
    """`sandboy run --policy POLICY -- sh -c SCRIPT` as uid 65534 in its home HOME, everything below
    BASE (a `userkit.world_readable_tmp`) given to it first: the checkout's package, no plan cache."""
    subprocess.run(["chown", "-R", "65534:65534", str(base)], check=True)
    time.sleep(0.15)  # (the set-up's ctimes settled: `loosened._settled`)
    package = Path(namespaces.__file__).resolve().parents[2]  # src/
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(package), "HOME": str(home),
           "SANDBOY_CACHE_DIR": str(base / "cache"), "SANDBOY_PLAN_CACHE": "0"}
    return subprocess.run(userkit.as_user(["/usr/bin/python3", "-m", "sandboy", "run", "--policy", str(policy), "--",
                                           "/bin/sh", "-c", script]),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120, env=env, cwd=home)


# --- a protected file with another name in the write root -----------------------------------


@pytest.mark.parametrize("how", ["built", "hit"])
def test_a_start_up_file_hard_linked_elsewhere_in_the_write_root_is_not_changed_through_it(tmp_path, how):
    """A granted home whose `~/.bashrc` is a hard link of `~/dotfiles/bashrc` (dotfiles kept by
    `ln`, not `ln -s`). Under the tier `.bashrc` is bound read-only over itself — the PATH — but
    the inode is the same one `dotfiles/bashrc` names, inside the read-write root: `echo ... >>
    dotfiles/bashrc` rewrote the operator's start-up file, run rc 0. Host side: the operator's
    `.bashrc` still holds its bytes (or the run failed and put them back)."""
    env, home, policy = _granted_home(tmp_path, "mkdir dotfiles && echo 'echo operator' > dotfiles/bashrc && "
                                                "ln dotfiles/bashrc .bashrc && echo 'set nu' > dotfiles/vimrc")
    run = _sandboy_run if how == "built" else _hit_run
    proc = run(policy, "echo 'echo PLANTED' >> dotfiles/bashrc; echo twin >> dotfiles/vimrc", env, home)
    bashrc = (home / ".bashrc").read_text() if (home / ".bashrc").exists() else ""
    assert "PLANTED" not in bashrc, f"the operator's .bashrc was written through its hard link (rc {proc.returncode})"
    assert proc.returncode == 125, proc.stderr
    assert "hard link" in proc.stderr and ".bashrc" in proc.stderr, proc.stderr
    assert bashrc == "echo operator\n"  # the launch bytes put back in place
    assert (home / "dotfiles" / "vimrc").read_text() == "set nu\ntwin\n"


def test_twin_a_hard_linked_start_up_file_left_alone_and_other_links_written_pass(tmp_path):
    """The twin: the same home, the command writes every other file (a hard-linked one that is not
    a start-up file among them) and reads `.bashrc`: rc 0, nothing moved."""
    env, home, policy = _granted_home(tmp_path, "mkdir dotfiles && echo 'echo operator' > dotfiles/bashrc && "
                                                "ln dotfiles/bashrc .bashrc && echo a > notes && ln notes dotfiles/notes")
    proc = _sandboy_run(policy, "cat .bashrc && echo b >> dotfiles/notes && echo new > dotfiles/new", env, home)
    assert proc.returncode == 0 and proc.stdout == "echo operator\n", proc.stderr
    assert (home / "notes").read_text() == "a\nb\n" and (home / ".bashrc").read_text() == "echo operator\n"
    assert not (home / ".sandboy-quarantine").exists()


# --- the mode guard and the repositories below the top of a write root ---------------------


@pytest.mark.parametrize("tier_on", [True, False, "hit"], ids=["tier", "fallback", "tier-hit"])
@pytest.mark.parametrize("where", ["nested", "submodule"])
def test_a_nested_repositorys_config_loosened_by_the_run_takes_no_plant_from_another_user(tmp_path, tier_on, where):
    """Write root: a repository holding a nested one (a vendored checkout, or a submodule whose git
    directory is `.git/modules/sub`). The mode guard (session 9) puts back the modes of the
    chain from the write root to each git DIRECTORY; the command `chmod 0666`'d the nested
    repository's `config` (and `chmod 0777` its `hooks`) instead — both stayed, rc 0, and an
    accomplice (uid 65534) then appended `core.fsmonitor` to that config: the operator's next
    `git status` there (or the superproject's, which recurses into a submodule) ran it as root.
    Host side: modes after the run, and the marker the fsmonitor would leave."""
    userkit.skip_unless_nobody_can_run()
    with userkit.world_readable_tmp() as base:
        repo = base / "W"
        git = ["git", "-c", "protocol.file.allow=always", "-c", "user.name=o", "-c", "user.email=o@x"]
        subprocess.run(["git", "init", "-q", str(repo)], check=True)
        if where == "nested":
            subprocess.run(["git", "init", "-q", str(repo / "vendor" / "lib")], check=True)
            gitdir, status_in = repo / "vendor" / "lib" / ".git", repo / "vendor" / "lib"
        else:
            upstream = base / "up"
            subprocess.run(["git", "init", "-q", str(upstream)], check=True)
            subprocess.run([*git, "-C", str(upstream), "commit", "-q", "--allow-empty", "-m", "u"], check=True)
            subprocess.run([*git, "-C", str(repo), "submodule", "add", "-q", str(upstream), "sub"], check=True,
                           capture_output=True)
            subprocess.run([*git, "-C", str(repo), "commit", "-q", "-m", "s"], check=True)
            gitdir, status_in = repo / ".git" / "modules" / "sub", repo
        policy = base / "p.toml"
        policy.write_text(BASE.format(root=repo))
        env = _env(tmp_path, **_tier_env(bool(tier_on)), SANDBOY_PLAN_CACHE="0", GIT_CONFIG_GLOBAL="/dev/null")
        time.sleep(0.15)  # (past the clock tick of the set-up)
        proc = (_hit_run if tier_on == "hit" else _sandboy_run)(policy, f"chmod 0666 {gitdir}/config; chmod 0777 {gitdir}/hooks; "
                                    f"git -C {status_in} status >/dev/null && echo twin", env, repo)
        assert "twin" in proc.stdout, proc.stderr  # git works in the cage
        modes = (gitdir.joinpath("config").stat().st_mode & 0o777, gitdir.joinpath("hooks").stat().st_mode & 0o777)
        planted = base / "PLANTED"
        subprocess.run([*ACCOMPLICE, f"printf '[core]\\n\\tfsmonitor = \"touch {planted}; false\"\\n' >> {gitdir}/config;"
                                     f" printf '#!/bin/sh\\ntouch {planted}\\n' > {gitdir}/hooks/post-checkout"],
                       capture_output=True, timeout=30)
        subprocess.run(["git", "-C", str(status_in), "status"], capture_output=True, timeout=60,
                       env=dict(os.environ, GIT_CONFIG_GLOBAL="/dev/null"))
        assert not planted.exists(), f"another user planted a nested repository's config after the run (modes {modes})"
        assert modes == (0o644, 0o755), (modes, proc.stderr)
        assert proc.returncode == 125, proc.stderr


# --- symlinks inside a protected directory, into the write root ----------------------------

LINKED_LAYOUTS = {
    # a dotfile manager's per-file link inside a real `~/.ssh` (stow --no-folding, a hand-made
    # link): `ProxyCommand` in the ssh config runs at the operator's next `ssh`/`git push`
    "ssh-config-link": ("mkdir -p dotfiles/ssh .ssh && echo 'Host *' > dotfiles/ssh/config && "
                        "ln -s ../dotfiles/ssh/config .ssh/config",
                        "echo '  ProxyCommand sh -c \"echo PLANTED\"' >> .ssh/config", ".ssh/config"),
    # the same written by its real name, and replaced by a rename over it
    "fish-file-written": ("mkdir -p dotfiles/fish .config/fish && echo 'set x 1' > dotfiles/fish/config.fish && "
                          "ln -s ../../dotfiles/fish/config.fish .config/fish/config.fish",
                          "echo 'echo PLANTED' >> dotfiles/fish/config.fish", ".config/fish/config.fish"),
    "fish-file-renamed-over": ("mkdir -p dotfiles/fish .config/fish && echo 'set x 1' > dotfiles/fish/config.fish && "
                               "ln -s ../../dotfiles/fish/config.fish .config/fish/config.fish",
                               "echo 'echo PLANTED' > new && mv new dotfiles/fish/config.fish",
                               ".config/fish/config.fish"),
    # a linked directory: fish sources every `conf.d/*.fish` at start-up
    "fish-conf.d-dir-link": ("mkdir -p dotfiles/conf.d .config/fish && echo 'set y 1' > dotfiles/conf.d/a.fish && "
                             "ln -s ../../dotfiles/conf.d .config/fish/conf.d",
                             "echo 'echo PLANTED' > dotfiles/conf.d/zz.fish", ".config/fish/conf.d/zz.fish"),
    # the same whatever the linked directory is called (`hooks` is skipped only as a protected
    # directory itself: the git check judges those)
    "fish-conf.d-linked-to-hooks": ("mkdir -p dotfiles/hooks .config/fish && echo 'set y 1' > dotfiles/hooks/a.fish && "
                                    "ln -s ../../dotfiles/hooks .config/fish/conf.d",
                                    "echo 'echo PLANTED' >> dotfiles/hooks/a.fish", ".config/fish/conf.d/a.fish"),
}


@pytest.mark.parametrize("layout", list(LINKED_LAYOUTS))
@pytest.mark.parametrize("how", ["built", "hit"])
def test_a_file_a_protected_directory_links_to_in_the_write_root_is_not_changed_through_it(tmp_path, layout, how):
    """A granted home whose `~/.ssh` or `~/.config/fish` is a real directory (protected: bound
    read-only) holding symlinks into `~/dotfiles` (per-file links, as stow makes them where the
    directory already exists). The bind covers the directory and its links, not what they lead
    to: `echo ... >> .ssh/config` itself went through the link, rc 0, and the operator's next
    `ssh` would run the ProxyCommand (fish its conf.d). Host side: what the host program reads
    through the protected directory holds no planted line."""
    make, attack, read_as = LINKED_LAYOUTS[layout]
    env, home, policy = _granted_home(tmp_path, make)
    proc = (_sandboy_run if how == "built" else _hit_run)(policy, attack, env, home)
    seen = home / read_as
    text = seen.read_text() if seen.exists() else ""
    assert "PLANTED" not in text, f"{read_as} planted through a link in a protected directory (rc {proc.returncode})"
    assert proc.returncode == 125, proc.stderr
    if not layout.startswith("fish-conf"):  # the operator's link stays a link, its target holds the launch bytes
        assert (home / read_as).is_symlink() and text in ("Host *\n", "set x 1\n"), text


def test_twin_links_in_a_protected_directory_are_read_and_the_rest_of_the_dotfiles_written(tmp_path):
    """The twin: the same links read through, another file of `~/dotfiles` (linked from nowhere
    protected) written, a file made there: rc 0, nothing moved."""
    env, home, policy = _granted_home(tmp_path, *(LINKED_LAYOUTS[layout][0] for layout in
                                                  ("ssh-config-link", "fish-file-written", "fish-conf.d-dir-link")))
    (home / "dotfiles" / "README").write_text("mine\n")
    proc = _sandboy_run(policy, "cat .ssh/config .config/fish/config.fish .config/fish/conf.d/a.fish >/dev/null && "
                                "echo more >> dotfiles/README && echo new > dotfiles/new", env, home)
    assert proc.returncode == 0, proc.stderr
    assert (home / "dotfiles" / "README").read_text() == "mine\nmore\n"
    assert not (home / ".sandboy-quarantine").exists()


def test_a_linked_start_up_file_loosened_through_its_link_is_put_back(tmp_path):
    """`chmod 0666 .config/fish/config.fish` goes through the link to `dotfiles/fish/config.fish`
    (and `chmod 0777 dotfiles/fish`, the directory holding it): bytes unchanged, but any local
    user could then write what the operator's next fish runs. Host side: the modes after the run."""
    env, home, policy = _granted_home(tmp_path, LINKED_LAYOUTS["fish-file-written"][0])
    proc = _sandboy_run(policy, "chmod 0666 .config/fish/config.fish && chmod 0777 dotfiles/fish", env, home)
    modes = ((home / "dotfiles" / "fish" / "config.fish").stat().st_mode & 0o777,
             (home / "dotfiles" / "fish").stat().st_mode & 0o777)
    assert modes == (0o644, 0o755), f"a linked start-up file left writable by others: {modes}"
    assert proc.returncode == 125, proc.stderr


# --- a denied file with another name -------------------------------------------------------


@pytest.mark.parametrize("tier_on", [True, False], ids=["tier", "fallback"])
def test_a_denied_file_with_another_hard_link_in_a_grant_is_reported_and_strict_refuses(tmp_path, tier_on):
    """`write = [W]`, `deny = [W/secret.key]`, the secret also `W/backup/secret.key` by a hard link
    (`cp -al`, rsnapshot). Landlock denies a path; `cat W/backup/secret.key` printed the secret,
    rc 0, and nothing said so. Now `degraded` names the file (best-effort: the run goes on and the
    operator is told), `compat.landlock = "strict"` refuses before anything runs; a deny listing
    every name of the file is enforced and says nothing (twin)."""
    env = _env(tmp_path, **_tier_env(tier_on))
    work = tmp_path / "W"
    (work / "backup").mkdir(parents=True)
    secret = work / "secret.key"
    secret.write_text("S3CRET")
    os.link(secret, work / "backup" / "secret.key")
    policy = tmp_path / "p.toml"
    base = ('version = 1\n{compat}[fs]\nread = ["/usr", "/lib", "/lib64", "/etc"]\nexec = ["/usr/bin", "/bin"]\n'
            f'write = ["{work}"]\ndeny = {{deny}}\n')
    cat = f"cat {work}/backup/secret.key; echo done"
    policy.write_text(base.format(compat="", deny=f'["{secret}"]'))
    told = _sandboy_run(policy, cat, env, work)
    assert "done" in told.stdout and f"fs.deny: {secret} has 1 other hard link" in told.stderr, told.stderr
    for _ in range(2):  # and a plan-cache hit says it again (the degraded lines are kept with the plan)
        again = _sandboy_run(policy, cat, env, work)
        assert f"fs.deny: {secret} has 1 other hard link" in again.stderr, again.stderr
    policy.write_text(base.format(compat='[compat]\nlandlock = "strict"\n', deny=f'["{secret}"]'))
    strict = _sandboy_run(policy, cat, env, work)
    assert strict.returncode == 125 and "S3CRET" not in strict.stdout and "hard link" in strict.stderr, strict.stderr
    policy.write_text(base.format(compat="", deny=f'["{secret}", "{work}/backup/secret.key"]'))
    twin = _sandboy_run(policy, cat, env, work)
    assert "S3CRET" not in twin.stdout and "done" in twin.stdout and "hard link" not in twin.stderr, twin.stderr


def test_a_hard_link_made_since_a_plan_was_kept_is_reported_on_the_hit(tmp_path):
    """The plan cache keeps the build's degraded lines and says them on a hit: a hard link to a
    denied file made after the entry was kept must be said too (the fingerprint's stat of a
    policy path records whether a regular file has other links: a miss, and the rebuild says it)."""
    env = _env(tmp_path, **_tier_env(True))
    work = tmp_path / "W"
    (work / "backup").mkdir(parents=True)
    secret = work / "secret.key"
    secret.write_text("S3CRET")
    policy = tmp_path / "p.toml"
    policy.write_text('version = 1\n[fs]\nread = ["/usr", "/lib", "/lib64", "/etc"]\nexec = ["/usr/bin", "/bin"]\n'
                      f'write = ["{work}"]\ndeny = ["{secret}"]\n')
    first = _hit_run(policy, "true", env, work)
    assert "hard link" not in first.stderr, first.stderr
    os.link(secret, work / "backup" / "secret.key")
    after = _sandboy_run(policy, "true", env, work)
    assert f"fs.deny: {secret} has 1 other hard link" in after.stderr, after.stderr


# --- the post-run walk against directories that keep their ctime ---------------------------


@pytest.mark.parametrize(("how", "tier_on"), [("built", True), ("built", False), ("hit", True)],
                         ids=["built-tier", "built-fallback", "hit-tier"])  # (plans are kept under the tier only)
def test_a_nested_repository_planted_then_swapped_with_a_sibling_subtree_is_found(tmp_path, tier_on, how):
    """A shortcut of the walk after the run could take the launch listing of a directory whose
    ctime is older than the launch (no entry added, removed or renamed in IT). Swapping two
    subtrees (`mv a t; mv b a; mv t b`) gives `a` and `b` new ctimes, but `a/sub` — formerly
    `b/sub`, holding a nested repository — keeps its old one while the launch listing of the
    PATH `a/sub` is the other directory's. The command writes `core.fsmonitor` into
    `b/sub/.git/config`, then swaps: the check must still find it (125, the config moved)."""
    env = _env(tmp_path, **_tier_env(tier_on), GIT_CONFIG_GLOBAL="/dev/null")
    work = tmp_path / "W"
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    (work / "a" / "sub" / "deeper").mkdir(parents=True)
    (work / "a" / "sub" / "deeper" / "f").write_text("x")
    (work / "b" / "sub").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(work / "b" / "sub")], check=True)
    (work / "b" / "sub" / "deeper").mkdir()
    policy = tmp_path / "p.toml"
    policy.write_text(BASE.format(root=work))
    time.sleep(0.15)
    attack = ("printf '[core]\\n\\tfsmonitor = \"touch PLANTED; false\"\\n' >> b/sub/.git/config && "
              "mv a t && mv b a && mv t b && echo swapped")
    if how == "built":
        env["SANDBOY_PLAN_CACHE"] = "0"
    proc = (_sandboy_run if how == "built" else _hit_run)(policy, attack, env, work)
    assert "swapped" in proc.stdout, proc.stderr
    config = work / "a" / "sub" / ".git" / "config"
    assert "fsmonitor" not in (config.read_text() if config.exists() else ""), \
        f"a planted nested config escaped the check by a subtree swap (rc {proc.returncode}): {proc.stderr}"
    assert proc.returncode == 125, proc.stderr


@pytest.mark.parametrize("tier_on", [True, False], ids=["tier", "fallback"])
def test_the_operators_global_git_config_in_a_write_root_loosened_takes_no_plant_from_another_user(tmp_path, tier_on):
    """`write = ["~/.config"]` (an agent set to configure applications): the operator's global git
    config `~/.config/git/config` lies inside the write root, at no default name relative to it
    (the defaults bind `.config/git` only under a granted HOME), so no mount keeps it; the git
    check judges its keys after the run, but the command's `chmod 0666` stayed (clean content,
    rc 0) and another user then added `core.fsmonitor`, which every `git status` of the operator
    ran. Host side: the mode after the run, the marker."""
    userkit.skip_unless_nobody_can_run()
    with userkit.world_readable_tmp() as base:
        home = base / "H"
        (home / ".config" / "git").mkdir(parents=True)
        config = home / ".config" / "git" / "config"
        config.write_text("[user]\n\tname = operator\n")
        repo = base / "repo"
        subprocess.run(["git", "init", "-q", str(repo)], check=True)
        policy = base / "p.toml"
        policy.write_text(BASE.format(root=home / ".config").replace('[env]\npass = ["GIT_CONFIG_GLOBAL"]\n', ""))
        env = _env(tmp_path, **_tier_env(tier_on), SANDBOY_PLAN_CACHE="0", HOME=str(home))
        env.pop("GIT_CONFIG_GLOBAL", None)
        env.pop("XDG_CONFIG_HOME", None)
        time.sleep(0.15)
        proc = _sandboy_run(policy, f"chmod 0666 {config} && echo twin > {home}/.config/app.conf", env, home / ".config")
        mode = config.stat().st_mode & 0o777
        planted = base / "PLANTED"
        subprocess.run([*ACCOMPLICE, f"printf '[core]\\n\\tfsmonitor = \"touch {planted}; false\"\\n' >> {config}"],
                       capture_output=True, timeout=30)
        host_env = {k: v for k, v in os.environ.items() if k not in ("GIT_CONFIG_GLOBAL", "XDG_CONFIG_HOME")}
        subprocess.run(["git", "-C", str(repo), "status"], capture_output=True, timeout=60, env=dict(host_env, HOME=str(home)))
        assert not planted.exists(), f"another user planted the operator's global git config (mode after the run {mode:o})"
        assert mode == 0o644 and proc.returncode == 125, proc.stderr
        assert (home / ".config" / "app.conf").read_text() == "twin\n"


def test_as_an_ordinary_user_their_linked_ssh_config_and_hard_linked_bashrc_are_not_changed():
    """As uid 65534 (the tier's user namespace maps them to themselves), a granted home of
    theirs: `~/.ssh/config` a link into `~/dotfiles` and `~/.bashrc` a hard link of
    `~/dotfiles/bashrc`. The command writes both through their other names: the run fails (125)
    and their start-up file and ssh config hold their bytes; a file of `~/dotfiles` linked from
    nowhere protected is written (twin)."""
    userkit.skip_unless_nobody_can_run()
    if not namespaces.availability()[0]:
        pytest.skip("no namespace tier here")
    with userkit.world_readable_tmp("sandboy-cage10-") as base:
        home = base / "home"
        (home / "dotfiles" / "ssh").mkdir(parents=True)
        (home / ".ssh").mkdir()
        (home / "dotfiles" / "ssh" / "config").write_text("Host *\n")
        os.symlink("../dotfiles/ssh/config", home / ".ssh" / "config")
        (home / "dotfiles" / "bashrc").write_text("echo user\n")
        os.link(home / "dotfiles" / "bashrc", home / ".bashrc")
        (home / "dotfiles" / "notes").write_text("n\n")
        policy = base / "p.toml"
        policy.write_text(BASE.format(root=home))
        proc = sandboy_run_as_nobody(base, home, policy, "echo '  ProxyCommand sh -c PLANTED' >> .ssh/config; "
                                     "echo 'echo PLANTED' >> dotfiles/bashrc; echo twin >> dotfiles/notes")
        assert "PLANTED" not in (home / "dotfiles" / "ssh" / "config").read_text(), proc.stderr
        assert (home / ".bashrc").read_text() == "echo user\n", proc.stderr
        assert proc.returncode == 125, proc.stderr
        assert (home / "dotfiles" / "notes").read_text() == "n\ntwin\n"


RETARGETS = {
    # a link on the way (`dotfiles -> dotfiles-v2`, as a dotfile manager switching versions keeps
    # it) repointed at a directory the command made
    "link-on-the-way-repointed": ("mkdir -p dotfiles-v2/ssh .ssh && echo 'Host *' > dotfiles-v2/ssh/config && "
                                  "ln -s dotfiles-v2 dotfiles && ln -s ../dotfiles/ssh/config .ssh/config",
                                  "ln -sfn evil dotfiles"),
    # a real directory on the way renamed away and replaced by a link
    "directory-on-the-way-replaced": ("mkdir -p dotfiles/ssh .ssh && echo 'Host *' > dotfiles/ssh/config && "
                                      "ln -s ../dotfiles/ssh/config .ssh/config",
                                      "mv dotfiles dotfiles.old && ln -s evil dotfiles"),
}


@pytest.mark.parametrize("layout", list(RETARGETS))
def test_a_protected_directorys_link_made_to_lead_elsewhere_by_its_way_is_not_followed_after_the_run(tmp_path, layout):
    """`~/.ssh/config -> ../dotfiles/ssh/config` in a protected (read-only) `~/.ssh`: the link
    cannot be changed, but what lies on its way in the write root can — the command makes
    `evil/ssh/config` with a ProxyCommand and makes `dotfiles` lead there. Host side: what `ssh`
    would read through `~/.ssh/config` holds no planted line (the run 125)."""
    make, repoint = RETARGETS[layout]
    env, home, policy = _granted_home(tmp_path, make)
    proc = _sandboy_run(policy, "mkdir -p evil/ssh && echo '  ProxyCommand sh -c PLANTED' > evil/ssh/config && "
                                f"{repoint} && cat .ssh/config", env, home)
    assert "PLANTED" in proc.stdout, proc.stderr  # (the attack worked inside the cage)
    seen = home / ".ssh" / "config"
    text = seen.read_text() if seen.exists() else ""
    assert "PLANTED" not in text, f"~/.ssh/config leads to a planted file after the run (rc {proc.returncode})"
    assert proc.returncode == 125, proc.stderr


def test_thousands_of_files_made_in_a_linked_directory_fail_the_run_in_bounded_time(tmp_path):
    """A linked `~/.config/fish/conf.d -> ../../dotfiles/conf.d` and a command making 5,000 files
    there: one finding for the directory (moved whole), not 5,000 moves; the run fails (125)
    within seconds, and nothing made there is left where fish looks."""
    env, home, policy = _granted_home(tmp_path, LINKED_LAYOUTS["fish-conf.d-dir-link"][0])
    started = time.monotonic()
    proc = _sandboy_run(policy, "cd dotfiles/conf.d && i=0; while [ $i -lt 5000 ]; do : > f$i.fish; i=$((i+1)); done",
                        env, home)
    assert proc.returncode == 125, proc.stderr
    assert time.monotonic() - started < 60
    linked = home / ".config" / "fish" / "conf.d"
    assert not linked.exists() or not any(name.startswith("f") for name in os.listdir(linked))
    assert "5000 entries made there" in proc.stderr, proc.stderr[-500:]


# --- a file system with whole-second timestamps mounted below a write root ----------------

WHOLE_SECOND_SCRIPT = r'''
set -e
mount --make-rprivate /
mount -o loop "$IMG" "$WORK/disk"
cd "$WORK"
mkdir -p disk/x/sub && git init -q disk/nested
sleep 1.2
for try in 1 2 3; do
  rm -rf disk/x/.git
  printf '[core]\n\trepositoryformatversion = 0\n' > disk/nested/.git/config
  sleep 1.1
  set +e
  "$SANDBOY" run --policy "$POLICY" -- /bin/sh -c "$ATTACK" > "$OUT.$try" 2>&1
  echo "rc=$?" >> "$OUT.$try"
  set -e
  { grep -l fsmonitor disk/x/.git/config disk/nested/.git/config 2>/dev/null || true; } >> "$OUT.$try"
done
'''


# the same runs as plan-cache hits (session 11: a hit reads the mount table once, for the kernel
# mounts below the write roots and for the snapshot's file systems below them): stdout and stderr a
# pipe, as an entry needs; a first run keeps the entry, the first try is a hit (no compiler imported)
WHOLE_SECOND_HIT_SCRIPT = WHOLE_SECOND_SCRIPT.replace(
    'for try in 1 2 3; do',
    '"$PYTHON" -X importtime "$SANDBOY" run --policy "$POLICY" -- /bin/true 2>&1 | cat > "$OUT.kept"\n'
    'sleep 1.1\n'
    'for try in 1 2 3; do').replace(
    '  "$SANDBOY" run --policy "$POLICY" -- /bin/sh -c "$ATTACK" > "$OUT.$try" 2>&1\n  echo "rc=$?" >> "$OUT.$try"\n',
    '  { "$PYTHON" -X importtime "$SANDBOY" run --policy "$POLICY" -- /bin/sh -c "$ATTACK" 2>&1; echo "rc=$?"; } '
    '| cat > "$OUT.$try"\n')


@pytest.mark.parametrize("tier_on, hit", [(True, False), (False, False), (True, True)],
                         ids=["tier", "fallback", "tier, a plan-cache hit"])
def test_a_repository_on_a_whole_second_file_system_below_the_write_root_is_judged(tmp_path, tier_on, hit):
    """A write root (ext4, nanosecond timestamps) with another file system mounted below it whose
    timestamps are whole seconds (here a loop-mounted ext4 of 128-byte inodes; a vfat stick, an NFS
    or 9p share alike). The git check counts what changed from the launch clock, rounded down to
    its second only where a ROOT has whole-second timestamps: a nested repository's config given
    `core.fsmonitor` in the launch's second passed as older than the run, and (gitfast's listing
    reuse) a `.git` made in such a directory was not seen at all — rc 0, tier and fallback. Now the
    mounts below a root are asked too; what cannot be moved across file systems into the
    quarantine is renamed where it is. Three tries (the command writes within the launch's second
    nearly always): each must fail the run and leave no config git reads with the key. `hit`: each
    try runs the plan an earlier run kept (the mount table read once for both of a hit's questions)."""
    if os.geteuid() != 0 or not shutil.which("mkfs.ext4") or not os.path.exists("/dev/loop-control"):
        pytest.skip("needs root, mkfs.ext4 and loop devices")
    env = _env(tmp_path, **_tier_env(tier_on), GIT_CONFIG_GLOBAL="/dev/null", PYTHON=sys.executable,
               **({} if hit else {"SANDBOY_PLAN_CACHE": "0"}))
    if hit:  # (plans are kept and run by the C executor only: a SANDBOY_NATIVE=0 pass keeps none, cf. _hit_run)
        env.pop("SANDBOY_NATIVE", None)
    work = tmp_path / "W"
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    (work / "disk").mkdir()
    image = tmp_path / "img"
    whole_second_image(image)
    policy = tmp_path / "p.toml"
    policy.write_text(BASE.format(root=work))
    attack = ("git init -q disk/x && printf '[core]\\n\\tfsmonitor = \"touch PLANTED\"\\n' >> disk/x/.git/config; "
              "printf '[core]\\n\\tfsmonitor = \"touch PLANTED\"\\n' >> disk/nested/.git/config; echo attacked")
    out = tmp_path / "out"
    env.update(IMG=str(image), WORK=str(work), SANDBOY=SANDBOY, POLICY=str(policy), ATTACK=attack, OUT=str(out))
    done = subprocess.run(["unshare", "-m", "/bin/sh", "-c", WHOLE_SECOND_HIT_SCRIPT if hit else WHOLE_SECOND_SCRIPT],
                          env=env, capture_output=True, text=True, timeout=300)
    if done.returncode != 0 and "mount" in done.stderr:
        pytest.skip(f"cannot loop-mount here: {done.stderr.strip()[-200:]}")
    assert done.returncode == 0, done.stderr
    for attempt in (1, 2, 3):
        text = Path(f"{out}.{attempt}").read_text()
        assert "attacked" in text, text
        assert "disk/x/.git/config" not in text.split("rc=")[-1] and "disk/nested/.git/config" not in \
            text.split("rc=")[-1], f"try {attempt}: a planted config stays where git reads it:\n{text}"
        assert "rc=125" in text, f"try {attempt}: the run passed:\n{text}"
        if hit and attempt == 1:  # the first run kept the plan, the first try ran it (no compiler imported);
            # (a try after a quarantine may build: the box made in the root is a change of its stats)
            assert "sandboy.confine.cage" in Path(f"{out}.kept").read_text() and "sandboy.confine.cage" not in text, text

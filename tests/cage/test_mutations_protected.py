"""The mutation check for the protected paths' defaults (confine/protected.py, ADR 0013): each
entry of `DEFAULT_PROTECTED` removed in turn, and each way a default is found (the git directory
completed with the hooks and config `git init` would have left, `core.hooksPath`, included
configs, the symlinks on the way to a start-up file, the one-listing shortcut), must let a caged
command write what it could not before.

The check: a cage under the namespace tier (where the defaults are enforced: read-only binds)
with three write roots — a home directory holding every start-up file and directory a host runs
(written out below by hand, from what shells, editors, login sessions, git, ssh, package managers,
credential helpers and GnuPG read; not taken from the module), a repository with a hooks path
and an include, and a repository without hooks or config — in which one shell run tries to append to each file, create a file in each directory,
and remove the symlinked `.bashrc`. Every attempt must be refused. The mutants are set with
pytest's monkeypatch in this process only; nothing in production reads a switch.

As root only: which defaults exist is decided by the parent the same way for every identity (but
for `_complete_git_dir` handing what it makes to the repository's owner, as root), and the binds
that enforce them are mutated as root and as uid 65534 in test_mutations_tier.py. (Run as 65534
too — a forked child, as there — it killed the same 43 mutants, for 5 s more; left out for the
budget.)

Budget: 43 mutants, one cage run of /bin/sh each on a fresh copy of the bench, in a forked child
with a private mount namespace and a tmpfs for the copies: 4-5 s here; bounded at 90 s.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import shutil
import subprocess
import tempfile
import time

import pytest
from cagekit import BASE_READ
from test_mutations import _forget_built_cages
from test_mutations_tier import CLONE_NEWNS, MS_PRIVATE, MS_REC, _in_child

from sandboy.confine import namespaces, protected

pytestmark = [pytest.mark.needs_kernel, pytest.mark.mutation,
              pytest.mark.skipif(not namespaces.availability()[0],
                                 reason=f"no namespace tier here: {namespaces.availability()[1]}")]

BUDGET_SECONDS = 90
RUNS = itertools.count()

# What a host runs or trusts from a home directory or a repository, by hand. A trailing "/":
# a directory (the attempt creates a file in it); otherwise a file (the attempt appends to it).
HOME_STARTUP = [
    ".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".profile",
    ".zshrc", ".zshenv", ".zprofile", ".zlogin", ".zlogout", ".config/fish/",
    ".inputrc", ".vimrc", ".config/nvim/", ".emacs",
    ".config/autostart/", ".config/systemd/user/", ".xprofile", ".xinitrc", ".xsession", ".pam_environment",
    ".gitconfig", ".config/git/", ".ssh/",
    ".npmrc", ".yarnrc", ".yarnrc.yml", ".pypirc", ".pip/", ".config/pip/", ".cargo/config", ".cargo/config.toml",
    ".docker/config.json", ".kube/config", ".aws/config",
    ".gnupg/",
]
# A repository (a write root of its own: defaults are looked for at the top of each write root;
# repositories below one are the post-run git check's): its config and hooks, the hooks
# directory its config names (husky's), and a config it includes from the worktree.
REPO = ["repo/.git/config", "repo/.git/hooks/", "repo/.husky/_/", "repo/tools/shared.gitconfig"]
# A second write root: a repository whose .git lacks hooks/ and config (git still runs hooks
# from there, and reads a config made there).
BARE = ["bare/.git/config", "bare/.git/hooks/"]
REMOVE = ["home/.bashrc"]  # a symlink (stow, chezmoi): replacing it replaces the start-up file

SCRIPT = r"""
for p in "$@"; do
  case "$p" in
    rm:*) f="${p#rm:}"; if rm -f "$f" 2>/dev/null; then echo "ok $p"; else echo "refused $p"; fi ;;
    */) if mkdir -p "$p" 2>/dev/null && true > "${p}planted" 2>/dev/null; then echo "ok $p"; else echo "refused $p"; fi ;;
    *) if true >> "$p" 2>/dev/null; then echo "ok $p"; else echo "refused $p"; fi ;;
  esac
done
"""


def _git(*args) -> None:
    subprocess.run(["git", *args], check=True, capture_output=True,
                   env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "GIT_CONFIG_NOSYSTEM": "1"})


def _make_bench(base) -> list:
    """The write roots' contents, made by whoever runs this (their owner); the attempts' targets."""
    home, bare = base / "home", base / "bare"
    home.mkdir()
    (home / ".dotfiles").mkdir()
    (home / ".dotfiles" / "bashrc").write_text("# start-up\n")
    for name in HOME_STARTUP:
        if name == ".bashrc":
            os.symlink(".dotfiles/bashrc", home / name)
        elif name.endswith("/"):
            (home / name).mkdir(parents=True, exist_ok=True)
        else:
            (home / name).parent.mkdir(parents=True, exist_ok=True)
            (home / name).write_text("# start-up\n")
    repo = base / "repo"
    _git("init", "-q", str(repo))
    (repo / ".husky" / "_").mkdir(parents=True)
    (repo / "tools").mkdir()
    (repo / "tools" / "shared.gitconfig").write_text("[user]\n\tname = shared\n")
    _git("-C", str(repo), "config", "core.hooksPath", ".husky/_")
    _git("-C", str(repo), "config", "include.path", "../tools/shared.gitconfig")
    _git("init", "-q", str(bare))
    for made in ("hooks", "config"):
        target = bare / ".git" / made
        subprocess.run(["rm", "-rf", str(target)], check=True)
    return ([f"home/{name}" for name in HOME_STARTUP] + REPO + BARE
            + [f"rm:{name}" for name in REMOVE])


def _attempt(template, targets) -> dict:
    """One cage run of the attempts on a fresh copy of the bench: {target: "ok" | "refused"}.
    (A fresh copy: a mutant that let the command remove `.bashrc` or made `.git/hooks` must not
    decide what the next mutant meets.)"""
    from sandboy import Policy, run

    base = template.parent / f"run-{next(RUNS)}"  # (a fresh directory: removing the last copy costs more)
    shutil.copytree(template, base, symlinks=True)

    policy = {"version": 1, "fs": {"read": BASE_READ, "exec": ["/bin", "/usr/bin"],
                                   "write": [str(base / "home"), str(base / "repo"), str(base / "bare")]}}
    with tempfile.TemporaryFile() as out, open(os.devnull, "wb") as null:
        result = run(["/bin/sh", "-c", SCRIPT, "sh", *targets], Policy.from_mapping(policy, "<protected mutants>"),
                     cwd=str(base), timeout=30, stdin=null.fileno(), stdout=out.fileno(), stderr=null.fileno())
        out.seek(0)
        lines = out.read().decode().split("\n")
    answers = dict(reversed(line.split(" ", 1)) for line in lines if line)
    # a 125 from the post-run git check (a mutant let the command plant something) leaves the
    # answers standing; any other failure is the bench's
    planted = result.returncode == 125 and "git command" in (result.error or "")
    assert (result.returncode == 0 or planted) and len(answers) == len(targets), (result.returncode, result.error, lines)
    return answers


def _mutants() -> list:
    """(label, owner, attribute, value)."""
    out = [(f"default {name}", protected, "DEFAULT_PROTECTED", tuple(n for n in protected.DEFAULT_PROTECTED if n != name))
           for name in protected.DEFAULT_PROTECTED]
    out += [
        ("git directory not completed", protected, "_complete_git_dir", lambda root: None),
        ("core.hooksPath not followed", protected, "hooks_paths", lambda root: []),
        ("includes not followed", protected, "included_configs", lambda root: []),
        ("symlinks on the way not bound", protected, "symlinks_on_the_way", lambda path, limit=40: []),
        ("no default looked for", protected, "_present_defaults", lambda root: []),
    ]
    return out


def _mutation_run(base) -> dict:
    started = time.monotonic()
    template = base / "template"
    template.mkdir()
    targets = _make_bench(template)
    _forget_built_cages()
    intact = _attempt(template, targets)
    writable = sorted(t for t, answer in intact.items() if answer != "refused")
    if writable:
        return {"intact": writable}
    killed, survivors = {}, []
    for label, owner, attribute, value in _mutants():
        _forget_built_cages()
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(owner, attribute, value)
            answers = _attempt(template, targets)
        _forget_built_cages()
        written = sorted(t for t, answer in answers.items() if answer != "refused")
        if written:
            killed[label] = written
        else:
            survivors.append(label)
        if time.monotonic() - started > BUDGET_SECONDS:
            return {"over budget": label}
    intact = _attempt(template, targets)  # and the intact defaults still hold after the mutants
    if any(answer != "refused" for answer in intact.values()):
        return {"intact": sorted(t for t, answer in intact.items() if answer != "refused")}
    return {"killed": killed, "survivors": survivors, "seconds": round(time.monotonic() - started, 1)}


def _on_a_private_tmpfs(base):
    """This (forked) process gets a mount namespace of its own, private, with a tmpfs on `base`:
    the bench's ~45 copies are made and dropped in memory (on this machine's disk each mkdir and
    rmdir costs ~3 ms, more than the cage runs), and nothing is left to remove."""
    libc = ctypes.CDLL(None, use_errno=True)
    if (libc.unshare(CLONE_NEWNS) != 0 or libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None) != 0
            or libc.mount(b"tmpfs", os.fsencode(base), b"tmpfs", 0, b"size=64m,mode=0755") != 0):
        raise OSError(ctypes.get_errno(), "a private tmpfs")


def test_every_protected_default_has_a_write_that_succeeds_without_it(tmp_path_factory):
    base = tmp_path_factory.mktemp("protected-mutants")
    outcome = _in_child(lambda: _mutation_run(base), before=lambda: _on_a_private_tmpfs(base))
    assert "intact" not in outcome, f"writable with every default in force: {outcome['intact']}"
    assert "over budget" not in outcome, outcome
    for label, written in sorted(outcome["killed"].items()):
        print(f"{label:40} killed: now writable {', '.join(written)}")
    assert not outcome["survivors"], f"protected defaults no attempt depends on: {outcome['survivors']}"
    print(f"{len(outcome['killed'])} protected-path mutants killed in {outcome['seconds']} s")

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
too — a forked child, as there — it killed the same mutants, for 5 s more; left out for the
budget.)

Budget: 77 mutants, one cage run of /bin/sh each on a fresh copy of the bench, in a forked child
with a private mount namespace and a tmpfs for the copies: 8-13 s here (load 2-4); bounded at 90 s.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import tempfile

import pytest
from cagekit import BASE_READ
from mutantkit import in_child, mutant, on_a_private_tmpfs, report, run_mutants

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
    # session 12
    ".bash_aliases", ".bash_completion", ".local/share/bash-completion/", ".xsessionrc",
    ".config/environment.d/", ".config/plasma-workspace/env/",
    ".vim/vimrc", ".vim/gvimrc", ".vim/plugin/", ".vim/ftdetect/", ".vim/ftplugin/", ".vim/after/", ".emacs.el", ".emacs.d/init.el", ".emacs.d/early-init.el", ".config/emacs/init.el",
    ".config/emacs/early-init.el", ".tmux.conf", ".config/tmux/tmux.conf", ".gdbinit", ".config/gdb/gdbinit",
    ".pdbrc",
    ".ipython/profile_default/startup/", ".ipython/profile_default/ipython_config.py", ".config/direnv/direnvrc",
    ".config/direnv/lib/",
    ".docker/cli-plugins/", ".gradle/init.d/", ".gradle/init.gradle", ".gradle/gradle.properties",
    ".m2/settings.xml", ".config/uv/uv.toml", ".condarc", ".gemrc",
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
    out = [mutant(f"default {name}", protected, "DEFAULT_PROTECTED", tuple(n for n in protected.DEFAULT_PROTECTED if n != name))
           for name in protected.DEFAULT_PROTECTED]
    out += [mutant(*row) for row in [
        ("git directory not completed", protected, "_complete_git_dir", lambda root: None),
        ("core.hooksPath not followed", protected, "hooks_paths", lambda root: []),
        ("includes not followed", protected, "included_configs", lambda root: []),
        ("symlinks on the way not bound", protected, "symlinks_on_the_way", lambda path, limit=40: []),
        ("no default looked for", protected, "_present_defaults", lambda root: []),
    ]]
    return out


def _mutation_run(base) -> dict:
    template = base / "template"
    template.mkdir()
    targets = _make_bench(template)

    def judge(_mutant):
        """None if every attempt was refused, else what became writable."""
        answers = _attempt(template, targets)
        written = sorted(t for t, answer in answers.items() if answer != "refused")
        return f"now writable {', '.join(written)}" if written else None

    # the intact defaults hold before and after the mutants
    return run_mutants(_mutants(), judge, budget_seconds=BUDGET_SECONDS)


def test_every_protected_default_has_a_write_that_succeeds_without_it(tmp_path_factory):
    base = tmp_path_factory.mktemp("protected-mutants")
    # in a forked child with a private tmpfs on `base` (mutantkit.on_a_private_tmpfs says why)
    outcome = in_child(lambda: _mutation_run(base), before=lambda: on_a_private_tmpfs(base))
    report(outcome, "protected-path mutants")


# --- Sandboy's own installation (confine/own_install.py, ADR 0024) ------------------------------

# A virtual environment has no user site: that kind of the installation never has a path here
# (a user install's bench kills it: test_a_user_site_install_needs_its_user_site_protected).
# The base prefix (the Python installation under the bench's environment, the one every test
# runs on) is granted only under an overlay in the bench process's private mount namespace
# (own_install_mutants.overlay_the_base_prefix), which needs root; as another user it is
# equivalent too.
OWN_INSTALL_EQUIVALENT = ("kind user site not protected",) if os.geteuid() == 0 else \
    ("kind user site not protected", "kind base prefix not protected")


def test_every_way_sandboys_own_installation_is_protected_has_a_write_that_succeeds_without_it(tmp_path):
    """A real editable installation (installkit) runs the mutants itself (own_install_mutants.py
    says why), judged with four policies (five as root: the base prefix, under an overlay): its checkout holding `.venv`, `src/`, a PATH link to
    the console script of a second environment (the `sandboy` that runs next), a
    PYTHONPYCACHEPREFIX directory and a PYTHONPATH entry, plus its site-packages as a second
    write root; only `src/` (the import path entry as the write root: read-only whole); only
    its site-packages (a write root inside the environment); only the directory the package's
    files really live in (`src/sandboy` links there). Each under the tier and with it forced off."""
    import json
    import sys

    from installkit import Install, copy_package

    install = Install(tmp_path / "checkout", "editable", copy_package(tmp_path))
    # the package's files live outside the import path, `src/sandboy` a link to them (a source
    # tree linked into a checkout): only the package's own row covers a write root there
    # once a write root equal to the import path is protected whole
    package_home = install.base / "package-home"
    package_home.mkdir()
    shutil.move(str(install.package), str(package_home / "sandboy"))
    os.symlink(package_home / "sandboy", install.package)
    path = install.add_other_environment_on_path()
    pycache = install.add_pycache_prefix()
    # the operator's PYTHONPATH entry, inside the checkout, missing at launch (removed after
    # every run): Sandboy makes it and protects it, or the command makes it and plants there
    pylib = install.base / "pylib"
    script = install.attack_script(only=None)
    targets = install.target_paths()
    targets["pythonpath"] = str(pylib / "sitecustomize.py")
    with open(script) as fh:
        lines = fh.read().replace("\nexit 0\n", "\n")
    with open(script, "w") as fh:
        fh.write(f"{lines}(mkdir -p '{pylib}' && : > '{targets['pythonpath']}') 2>/dev/null\nexit 0\n")
    overlay = None
    if os.geteuid() == 0:  # the base prefix as a write root, under an overlay (see OWN_INSTALL_EQUIVALENT)
        targets["baseplant"] = os.path.join(sys.base_prefix, "zz_planted_by_a_mutant")
        with open(script) as fh:
            lines = fh.read().replace("\nexit 0\n", "\n")
        with open(script, "w") as fh:
            fh.write(f"{lines}(: > '{targets['baseplant']}') 2>/dev/null\nexit 0\n")
        overlay = str(tmp_path / "overlay")
        os.mkdir(overlay)
    here = os.path.dirname(os.path.abspath(__file__))
    site = next(p for p in sys.path if p.endswith("site-packages") and os.path.isdir(os.path.join(p, "pytest")))
    args = {"base": str(install.base), "tests": here, "site": site, "targets": targets, "script": script,
            "budget": BUDGET_SECONDS,
            "policies": [[[str(install.base), install.site], sorted(targets)],
                         # the import path entry as the write root: read-only whole
                         [[str(install.base / "src")], ["cli", "bundle", "importpath"]],
                         # a write root inside the environment, with nothing around it granted
                         [[install.site], ["pth"]],
                         # the package's real directory as the write root, nothing else of ours around it
                         [[str(package_home)], ["cli", "bundle"]]]
            + ([[[sys.base_prefix], ["baseplant"]]] if overlay else []),
            "overlay": overlay, "made_if_missing": True, "remove_after": [str(pylib)]}
    proc = subprocess.run([str(install.venv / "bin" / "python"), os.path.join(here, "own_install_mutants.py"),
                           json.dumps(args)], capture_output=True, text=True, timeout=BUDGET_SECONDS + 60,
                          env={"PATH": path, "PYTHONPYCACHEPREFIX": pycache, "PYTHONPATH": str(pylib), "HOME": str(tmp_path),
                               "SANDBOY_CACHE_DIR": str(tmp_path / "cache")})
    outcome = _outcome(proc)
    kinds = {kind for _path, kind in outcome.pop("installation")}
    assert {"prefix", "package", "import path", "import path (PYTHONPATH)", "pycache prefix", "console script",
            "next environment"} <= kinds, kinds
    report(outcome, "own-installation mutants", equivalent=OWN_INSTALL_EQUIVALENT)


def _outcome(proc) -> dict:
    import json

    assert proc.returncode == 0 and proc.stdout.strip(), (proc.returncode, proc.stdout[-2000:], proc.stderr[-4000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not os.path.exists("/usr/bin/python3"), reason="needs a system python3 (not a venv)")
def test_a_user_site_install_needs_its_user_site_protected(tmp_path):
    """`pip install --user sandboy` run by the system python3: the user site-packages (here
    under PYTHONUSERBASE in a throwaway home) holds the package, and a NEW `.pth` there runs at
    the next start of that interpreter. Dropping the user site kind lets a command plant one.
    And a PYTHONPYCACHEPREFIX directory that does not exist at launch (PYTHONDONTWRITEBYTECODE:
    nothing made it yet; removed after every run): not made by Sandboy, the command makes it and
    plants byte code there."""
    import json
    import sys

    from installkit import copy_package

    home = tmp_path / "home"
    user_base = home / ".local"
    pycache = home / "pycache"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "PYTHONUSERBASE": str(user_base),
           "SANDBOY_CACHE_DIR": str(tmp_path / "cache")}
    user_site = subprocess.run(["/usr/bin/python3", "-c", "import site; print(site.getusersitepackages())"],
                               capture_output=True, text=True, check=True, env=env).stdout.strip()
    assert user_site.startswith(str(user_base) + "/"), user_site
    (tmp_path / "package").mkdir()
    shutil.copytree(copy_package(tmp_path / "package", python="/usr/bin/python3"), os.path.join(user_site, "sandboy"))
    targets = {"userpth": os.path.join(user_site, "zz_planted.pth"), "usercli": os.path.join(user_site, "sandboy", "cli.py"),
               "pycplant": str(pycache / "usr" / "planted.cpython-311.pyc")}
    script = home / "attack.sh"
    # (each in a subshell: a failed redirection of `:` ends a POSIX shell)
    script.write_text(f"(: > '{targets['userpth']}') 2>/dev/null; (echo >> '{targets['usercli']}') 2>/dev/null; "
                      f"(mkdir -p '{pycache}/usr' && : > '{targets['pycplant']}') 2>/dev/null; exit 0\n")
    here = os.path.dirname(os.path.abspath(__file__))
    site = next(p for p in sys.path if p.endswith("site-packages") and os.path.isdir(os.path.join(p, "pytest")))
    args = {"base": str(home), "tests": here, "site": site, "targets": targets, "script": str(script),
            "budget": BUDGET_SECONDS, "policies": [[[str(home)], sorted(targets)]],
            "kinds": ["user site"], "structural": False, "made_if_missing": True, "remove_after": [str(pycache)]}
    proc = subprocess.run(["/usr/bin/python3", os.path.join(here, "own_install_mutants.py"), json.dumps(args)],
                          capture_output=True, text=True, timeout=BUDGET_SECONDS + 60,
                          env={**env, "PYTHONPYCACHEPREFIX": str(pycache), "PYTHONDONTWRITEBYTECODE": "1"})
    outcome = _outcome(proc)
    mine = sorted(kind for path, kind in outcome.pop("installation") if path.startswith(str(home)))
    assert mine == ["package", "pycache prefix", "user site"], f"the bench is not a user install: {mine}"
    report(outcome, "user-site mutants")

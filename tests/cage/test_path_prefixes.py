"""What the programs on the operator's PATH load, with the home writable (ADR 0013, session 8;
`confine.path_prefixes`).

The PATH directories inside a write root are read-only since session 7 (`test_path_dirs.py`);
what the programs found there load from the same home was not: a pyenv version's `os.py`
(reached through `~/.pyenv/shims`), an nvm node's `lib/node_modules`, a `.pth` in the user site
beside `~/.local/bin`, a pipx tool's environment. Each probe runs the real `sandboy run` (the
home a temporary directory, HOME and PATH set for the run) as root and as uid 65534, under the
namespace tier and with it forced off, and judges from the host side: bytes unchanged, planted
file absent. Twins: the command still writes ordinary files in that home; with
`fs.protect_defaults = false` every one of the writes goes through (the protection is what
refuses).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from userkit import as_user

from cagekit import SANDBOY, to_toml, use_tier
from sandboy.confine import path_prefixes
from sandboy.confine.protections import protected_paths

NOBODY = 65534
OS_PY = ".pyenv/versions/3.11.7/lib/python3.11/os.py"
INDEX_JS = ".nvm/versions/node/v20.11.0/lib/node_modules/x/index.js"
EVIL_PTH = ".local/lib/python3.11/site-packages/evil.pth"
PIPX_INIT = ".local/share/pipx/venvs/black/lib/python3.11/site-packages/black/__init__.py"
PYENV = ".pyenv/libexec/pyenv"  # what every shim execs
NVM_SH = ".nvm/nvm.sh"  # what the operator's .bashrc sources
VENV_TOOL = "venvs/tool/lib/python3.11/site-packages/tool.py"  # run by ~/.local/bin/tool's `#!`
ORIGINAL = {OS_PY: "# the standard library\n", INDEX_JS: "module.exports = 1\n",
            PIPX_INIT: "# black\n", PYENV: "#!/usr/bin/env bash\n", NVM_SH: "nvm() { :; }\n",
            VENV_TOOL: "# tool\n"}


def _home(home) -> str:
    """A home with a pyenv root, an nvm node, `~/.local` and a pipx tool; returns the operator's PATH."""
    for directory in (".pyenv/shims", ".pyenv/libexec", ".pyenv/versions/3.11.7/bin",
                      ".nvm/versions/node/v20.11.0/bin", ".nvm/versions/node/v20.11.0/lib/node_modules/x",
                      ".local/bin", ".local/lib/python3.11/site-packages", ".local/share/other",
                      ".local/share/pipx/venvs/black/bin", ".local/share/pipx/venvs/black/lib/python3.11/"
                      "site-packages/black", "proj"):
        (home / directory).mkdir(parents=True, exist_ok=True)
    for name, text in ORIGINAL.items():
        (home / name).parent.mkdir(parents=True, exist_ok=True)
        (home / name).write_text(text)
    (home / ".pyenv/shims/python").write_text('#!/bin/sh\nexec "$HOME/.pyenv/libexec/pyenv" exec python "$@"\n')
    (home / ".pyenv/versions/3.11.7/bin/python3.11").write_text("")
    (home / ".local/share/pipx/venvs/black/pyvenv.cfg").write_text(f"home = {home}/.pyenv/versions/3.11.7/bin\n")
    (home / ".local/share/pipx/venvs/black/bin/black").write_text("#!/usr/bin/python3\n")
    os.symlink(f"{home}/.pyenv/versions/3.11.7/bin/python3.11", home / ".local/share/pipx/venvs/black/bin/python")
    os.symlink("../share/pipx/venvs/black/bin/black", home / ".local/bin/black")
    # a script whose `#!` names a venv's python (itself a link out of the home, to /usr/bin)
    (home / "venvs/tool/bin").mkdir(parents=True)
    os.symlink("/usr/bin/python3", home / "venvs/tool/bin/python")
    (home / "venvs/tool/pyvenv.cfg").write_text("home = /usr/bin\n")
    (home / ".local/bin/tool").write_text(f"#!{home}/venvs/tool/bin/python\nimport tool\n")
    # `~/bin/node -> ~/opt/current/bin/node`, `~/opt/current -> node-v20`: the link on the way too
    (home / "opt/node-v20/bin").mkdir(parents=True)
    (home / "opt/node-v20/lib").mkdir()
    (home / "opt/node-v20/bin/node").write_text("")
    os.symlink("node-v20", home / "opt/current")
    (home / "bin").mkdir()
    os.symlink(f"{home}/opt/current/bin/node", home / "bin/node")
    (home / "notes.txt").write_text("notes\n")
    return (f"{home}/.pyenv/shims:{home}/.nvm/versions/node/v20.11.0/bin:{home}/.local/bin:{home}/bin:"
            "/usr/bin:/bin")


ATTACK = ("echo 'import evil' >> $H/{os_py}; echo 'evil()' > $H/{index_js}; "
          "echo 'import os; os.system(\"id\")' > $H/{evil_pth}; echo 'import evil' >> $H/{pipx}; "
          "echo evil >> $H/{pyenv}; echo evil >> $H/{nvm_sh}; echo 'import evil' >> $H/{venv_tool}; "
          "mkdir -p $H/opt/evil/bin; ln -sfn evil $H/opt/current; "
          "echo more >> $H/notes.txt; echo work > $H/proj/out.txt; echo data > $H/.local/share/other/data; "
          "touch $H/new-at-the-top; echo DONE").format(os_py=OS_PY, index_js=INDEX_JS, evil_pth=EVIL_PTH,
                                                       pipx=PIPX_INIT, pyenv=PYENV, nvm_sh=NVM_SH, venv_tool=VENV_TOOL)


def _run(home, base, user: str, tier: str, defaults: bool = True):
    """`sandboy run` of ATTACK with the home granted, started from `~/proj` with the operator's PATH."""
    operator_path = _home(home)
    fs = {"read": ["/usr", "/etc", "/proc/self"], "exec": ["/usr/bin", "/bin"], "write": [str(home)]}
    if not defaults:
        fs["protect_defaults"] = False
    policy = base / "policy.toml"
    policy.write_text(to_toml({"version": 1, "fs": fs,
                               "env": {"pass": [], "set": {"PATH": "/usr/bin:/bin", "HOME": str(home),
                                                           "H": str(home)}}}))
    os.chmod(policy, 0o644)
    env = {"PATH": operator_path, "HOME": str(home), "SANDBOY_CACHE_DIR": str(base / "cache")}
    if tier == "no-tier":
        env["SANDBOY_NAMESPACES"] = "0"
    argv = ["run", "--policy", str(policy), "--", "/bin/sh", "-c", ATTACK]
    if user == "root":
        argv = [SANDBOY, *argv]
    else:
        subprocess.run(["chown", "-R", f"{NOBODY}:{NOBODY}", str(base)], check=True)
        src = os.path.dirname(os.path.dirname(os.path.abspath(sys.modules["sandboy"].__file__)))
        env["PYTHONPATH"] = src
        argv = as_user(["/usr/bin/python3", "-P", "-m", "sandboy", *argv])
    return subprocess.run(argv, capture_output=True, text=True, cwd=home / "proj", env=env, timeout=60)


@pytest.fixture(params=["root", "nobody"])
def base(request, tmp_path):
    if request.param == "root":
        yield "root", tmp_path
        return
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from userkit import skip_unless_nobody_can_run, world_readable_tmp

    skip_unless_nobody_can_run()
    with world_readable_tmp("sandboy-prefixes-") as tmp:
        yield "nobody", tmp


def _tier_or_skip(tier):
    from sandboy.confine import namespaces

    if tier == "tier" and not namespaces.availability()[0]:
        pytest.skip("namespace tier unavailable here")


@pytest.mark.needs_kernel
@pytest.mark.parametrize("tier", ["tier", "no-tier"])
def test_a_run_granted_the_home_cannot_change_what_the_path_programs_load(base, tier):
    """The home granted, PATH = pyenv's shims, an nvm node's bin, ~/.local/bin: the command's
    writes to the pyenv version's `os.py`, the nvm node's `lib/node_modules/x/index.js`, a new
    `evil.pth` in the user site, the pipx tool's package (its link in ~/.local/bin), pyenv's own
    script every shim execs, the `nvm.sh` a start-up file sources and the venv module a
    `~/.local/bin` script's `#!` interpreter imports are refused — EROFS under the tier, EACCES from the Landlock split without it. Host side: the
    bytes are unchanged and no `.pth` exists. Twins in the same run: an existing file of the home,
    a new file in a directory of the home and in `~/.local/share` are written."""
    user, where = base
    _tier_or_skip(tier)
    home = where / "home"
    result = _run(home, where, user, tier)
    assert "DONE" in result.stdout and result.returncode == 0, result
    for name, text in ORIGINAL.items():
        assert (home / name).read_text() == text, name
    assert not (home / EVIL_PTH).exists()
    assert os.readlink(home / "opt/current") == "node-v20"  # the link on the way to ~/bin/node's target
    refused = "Read-only file system" if tier == "tier" else "Permission denied"
    assert result.stderr.count(refused) >= 7, result.stderr
    assert f"fs: {home}/.pyenv is the version manager" in result.stderr and "fs.protect_defaults = false" in \
        result.stderr, result.stderr
    # the twins: ordinary work in that home
    assert (home / "notes.txt").read_text() == "notes\nmore\n"
    assert (home / "proj/out.txt").read_text() == "work\n"
    assert (home / ".local/share/other/data").read_text() == "data\n"
    # the cost without the tier, said in ADR 0013: the home takes no new entry at its top
    # (a Landlock split of the home around the protected directories)
    assert (home / "new-at-the-top").exists() == (tier == "tier")


@pytest.mark.needs_kernel
@pytest.mark.parametrize("tier", ["tier", "no-tier"])
def test_opted_out_every_write_goes_through(base, tier):
    """The mutation twin: the same run with `fs.protect_defaults = false` changes all seven —
    so the protection is what refused them above, not the file modes or the policy."""
    user, where = base
    _tier_or_skip(tier)
    home = where / "home"
    result = _run(home, where, user, tier, defaults=False)
    assert "DONE" in result.stdout and result.returncode == 0, result
    for name, text in ORIGINAL.items():
        assert (home / name).read_text() != text, name
    assert (home / EVIL_PTH).exists()
    assert os.readlink(home / "opt/current") == "evil"
    assert "version manager" not in result.stderr, result.stderr


def test_which_paths_the_programs_on_path_load(tmp_path, monkeypatch):
    """The rules, without a kernel: a shims directory and a `versions/` (`installs/`,
    `candidates/` through sdkman's `current` link) tree of a dot-directory give the manager's root
    whole, and rustup's proxies `~/.rustup`; `<P>/bin` gives P's code directories that exist (not
    `share`), a Go root whole; the user base's `lib` is made when missing; a pipx link gives its
    environment, followed to the pyenv version its `bin/python` leads to (inside the pyenv root,
    taken whole); a project's own `versions/bin` is no manager."""
    home = tmp_path / "home"
    operator_path = _home(home)
    import shutil

    shutil.rmtree(home / ".local/lib")
    (home / "tools/versions/1/bin").mkdir(parents=True)  # not a dot-directory, no shims: a prefix
    (home / "tools/versions/1/lib").mkdir()
    for directory in (".cargo/bin", ".rustup/toolchains/stable/bin", ".sdkman/candidates/java/17/bin",
                      ".asdf/installs/ruby/3.3.0/bin", "sdk/go1.22/bin", "sdk/go1.22/src", "sdk/go1.22/pkg"):
        (home / directory).mkdir(parents=True)
    (home / ".cargo/bin/rustup").write_text("")  # rustup's proxies: ~/.rustup's toolchains
    (home / "sdk/go1.22/VERSION").write_text("go1.22\n")
    os.symlink("17", home / ".sdkman/candidates/java/current")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("PYTHONUSERBASE", raising=False)
    monkeypatch.delenv("RUSTUP_HOME", raising=False)
    monkeypatch.setenv("PATH", f"{operator_path}:{home}/tools/versions/1/bin:{home}/.cargo/bin:"
                               f"{home}/.sdkman/candidates/java/current/bin:{home}/.asdf/installs/ruby/3.3.0/bin:"
                               f"{home}/sdk/go1.22/bin")
    notes: list = []
    _defaults, _policy, install = protected_paths([str(home)], [], True, (str(home / "proj"), None), notes=notes)
    mine = {path: kind for path, kind, _root in install if kind in path_prefixes.KINDS}
    assert mine == {f"{home}/.pyenv": path_prefixes.MANAGER, f"{home}/.nvm": path_prefixes.MANAGER,
                    f"{home}/.local/lib": path_prefixes.USER_BASE,
                    f"{home}/.local/share/pipx/venvs/black/bin": path_prefixes.PREFIX,
                    f"{home}/.local/share/pipx/venvs/black/lib": path_prefixes.PREFIX,
                    f"{home}/.local/share/pipx/venvs/black/pyvenv.cfg": path_prefixes.PREFIX,
                    f"{home}/venvs/tool/bin": path_prefixes.PREFIX, f"{home}/venvs/tool/lib": path_prefixes.PREFIX,
                    f"{home}/venvs/tool/pyvenv.cfg": path_prefixes.PREFIX,
                    f"{home}/opt/current": path_prefixes.TARGET, f"{home}/opt/node-v20/bin": path_prefixes.PREFIX,
                    f"{home}/opt/node-v20/lib": path_prefixes.PREFIX,
                    f"{home}/tools/versions/1/lib": path_prefixes.PREFIX,
                    f"{home}/.rustup": path_prefixes.MANAGER, f"{home}/.sdkman": path_prefixes.MANAGER,
                    f"{home}/.asdf": path_prefixes.MANAGER, f"{home}/sdk/go1.22": path_prefixes.PREFIX}, mine
    assert (home / ".local/lib").is_dir(), "the user base's lib, missing at launch, is made"
    assert notes == []
    # opted out: nothing of it
    assert protected_paths([str(home)], [], False, (str(home / "proj"), None))[2] == []
    # a write root that holds no PATH directory: nothing of it (the usual run)
    assert not [row for row in protected_paths([str(home / "proj")], [], True, (str(home / "proj"), None))[2]
                if row[1] in path_prefixes.KINDS]


def test_a_prefix_holding_the_working_directory_stays_writable_with_a_note(tmp_path, monkeypatch):
    """Run from inside `~/.local/lib/mytool` (the operator works on it): that code directory is
    project work — not protected, a note says so and how to protect it."""
    home = tmp_path / "home"
    (home / ".local/bin").mkdir(parents=True)
    (home / ".local/lib/mytool").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("PATH", f"{home}/.local/bin:/usr/bin")
    monkeypatch.delenv("PYTHONUSERBASE", raising=False)
    notes: list = []
    install = protected_paths([str(home)], [], True, (str(home / ".local/lib/mytool"), None), notes=notes)[2]
    assert not [row for row in install if row[1] in path_prefixes.KINDS]
    assert len(notes) == 1 and f"{home}/.local/lib" in notes[0] and "stays writable" in notes[0], notes


# --- every rule proven necessary (tests/cage/mutantkit.py) ------------------------------------


def _attack_in_process(where) -> list:
    """ATTACK through the API in this process (where a mutant's patches apply), in a fresh home
    under `where`: the protected files the command changed (host side)."""
    from sandboy import Policy, run

    home = where / "home"
    operator_path = _home(home)
    os.environ["PATH"], os.environ["HOME"] = operator_path, str(home)
    policy = {"version": 1, "fs": {"read": ["/usr", "/etc", "/proc/self"], "exec": ["/usr/bin", "/bin"],
                                   "write": [str(home)]},
              "env": {"pass": [], "set": {"PATH": "/usr/bin:/bin", "HOME": str(home), "H": str(home)}}}
    with open(os.devnull, "wb") as null:
        result = run(["/bin/sh", "-c", ATTACK], Policy.from_mapping(policy, "<test>"), cwd=str(home / "proj"),
                     stdout=null.fileno(), stderr=null.fileno(), timeout=60)
    assert result.returncode == 0, result
    changed = [name for name, text in ORIGINAL.items() if (home / name).read_text() != text]
    return (changed + ([EVIL_PTH] if (home / EVIL_PTH).exists() else [])
            + (["opt/current"] if os.readlink(home / "opt/current") != "node-v20" else []))


@pytest.mark.needs_kernel
@pytest.mark.parametrize("tier", ["tier", "no-tier"])
def test_every_rule_has_a_write_that_succeeds_without_it(tmp_path, monkeypatch, tier):
    """Each rule of `path_prefixes` taken out in turn (monkeypatch, this process): the probe's
    attack run through the API must change a protected file for each — the version managers'
    roots (pyenv's script the shims exec, `nvm.sh`), a prefix's code directories (the pipx
    package), the links followed (the pipx environment is reached only through one), the wiring
    into the protected paths (all of it)."""
    import itertools

    from mutantkit import mutant, report, run_mutants

    use_tier(tier, monkeypatch)
    monkeypatch.setenv("SANDBOY_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", os.environ["PATH"])  # restored after the test: the attack sets both
    monkeypatch.setenv("HOME", os.environ.get("HOME", "/"))
    # the rules of `path_prefixes` alone: the mode guard's after-run look at what the protected
    # directories' links lead to (session 10, redcage10: `bin/node -> ../opt/current/...` made to
    # lead elsewhere is quarantined, 125) catches some of these mutants' writes too — a layer of
    # its own, with its own probes (test_redteam_cage10.py)
    from sandboy.confine import loosened

    monkeypatch.setattr(loosened.ModeGuard, "written_through_links", lambda self: [])
    homes = itertools.count()

    def judge(one):
        changed = _attack_in_process(tmp_path / f"h{next(homes)}")
        return f"the attack changed {changed}" if changed else None

    mutants = [
        mutant("a version manager's root", path_prefixes, "_manager_root", lambda real, root, home: None),
        mutant("a prefix's code directories", path_prefixes, "CODE_DIRS", ()),
        mutant("links and #! lines followed into other prefixes", path_prefixes, "_leads_to",
               lambda bin_dir, roots, scripts: []),
        mutant("#! lines not read", path_prefixes, "_interpreter", lambda script: None),
        mutant("not added to the protected paths", path_prefixes, "inside", lambda *args, **kwargs: []),
    ]
    # (intact, before and after: `judge(None)` — the intact code lets no write through)
    report(run_mutants(mutants, judge, budget_seconds=120), "path prefix mutants")


@pytest.mark.needs_kernel
@pytest.mark.parametrize("tier", ["tier", "no-tier"])
def test_a_user_site_missing_at_launch_cannot_be_made_with_a_pth(tmp_path, monkeypatch, tier):
    """`~/.local/bin` on PATH, no `~/.local/lib` yet: every Python on the host would read a
    `site-packages` the command makes there. Sandboy makes `~/.local/lib` at launch and protects
    it: the command's `mkdir -p ~/.local/lib/python3.11/site-packages` and `.pth` fail (host side:
    no `.pth`). Mutant: without the making (own_install._made answering False) the `.pth` is
    planted — the making is what refuses."""
    from sandboy import Policy, run
    from sandboy.confine import own_install

    use_tier(tier, monkeypatch)
    monkeypatch.setenv("SANDBOY_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("PYTHONUSERBASE", raising=False)

    def attack(home):
        (home / ".local/bin").mkdir(parents=True)
        (home / "proj").mkdir()
        monkeypatch.setenv("HOME", str(home))
        monkeypatch.setenv("PATH", f"{home}/.local/bin:/usr/bin:/bin")
        policy = {"version": 1, "fs": {"read": ["/usr", "/etc"], "exec": ["/usr/bin", "/bin"], "write": [str(home)]},
                  "env": {"pass": [], "set": {"PATH": "/usr/bin:/bin", "H": str(home)}}}
        with open(os.devnull, "wb") as null:
            result = run(["/bin/sh", "-c", "mkdir -p $H/.local/lib/python3.11/site-packages && "
                          "echo 'import os' > $H/.local/lib/python3.11/site-packages/evil.pth; exit 0"],
                         Policy.from_mapping(policy, "<test>"), cwd=str(home / "proj"), stdout=null.fileno(),
                         stderr=null.fileno(), timeout=60)
        assert result.returncode == 0, result
        return (home / ".local/lib/python3.11/site-packages/evil.pth").exists()

    from mutantkit import forget_built_cages

    forget_built_cages()
    assert not attack(tmp_path / "home"), "a .pth was planted in a user site made during the run"
    assert (tmp_path / "home/.local/lib").is_dir()
    forget_built_cages()
    monkeypatch.setattr(own_install, "_made", lambda path: False)
    assert attack(tmp_path / "mutant"), "the mutant (nothing made) should let the .pth through"
    forget_built_cages()

"""Sandboy's own installation is read-only inside the cage where a write root holds it (ADR 0024).

The attack: a caged command — a `sandboy run` or a gate step with write on `{repo}` — whose write
root holds the installation that runs Sandboy (Sandboy's own checkout after `make setup`: `.venv`
and the editable `src/` inside `{repo}`) plants code for the operator's next unconfined `sandboy`:
a `.pth` file in site-packages, an edited `sandboy/cli.py`, a replaced run-path bundle (ADR 0023),
a swapped console script or `bin/python`.

Each test builds a REAL installation of the running source tree in a temporary directory — a
virtual environment made by the real interpreter (`python -m venv`), the package copied in
editable shape (`src/sandboy` + the `.pth` setuptools writes) or wheel shape (site-packages),
its run-path bundle built by that interpreter, pip's console script — and runs Sandboy FROM IT.
Checked from the host side: the bytes of every target, no planted file, and the installation's
next `sandboy --version` run on the host does not run the payload (a marker file it would make).
The twins: with the protection opted out (`fs.protect_defaults = false`; the gate: an operator
ceiling saying so) every attack works and the payload runs — so the refusals are the
protection's; and a repository's OWN `.venv` stays writable (`pip install` in a gate step).
"""

from __future__ import annotations

import glob
import os
import subprocess
import zipfile

import pytest
from userkit import as_user
from cagekit import BASE_READ, to_toml
from installkit import ATTACKS, Install, answers, copy_package

pytestmark = pytest.mark.needs_kernel

MARK = "ADR 0024"  # in the launch warning


@pytest.fixture(params=["tier", "landlock-only"])
def enforcement(request):
    """With the namespace tier (read-only binds) and with it forced off (Landlock splits)."""
    return {} if request.param == "tier" else {"SANDBOY_NAMESPACES": "0"}


@pytest.fixture(scope="module")
def package_copy(tmp_path_factory):
    return copy_package(tmp_path_factory.mktemp("own-install-package"))


def _run_policy(install, **fs) -> str:
    path = install.base.parent / f"{install.base.name}-policy.toml"
    path.write_text(to_toml({"version": 1, "fs": {"read": [*BASE_READ, str(install.base)], "exec": ["/usr/bin", "/bin"],
                                                  "write": [str(install.base)], **fs}}))
    return str(path)


def _gate_repo(install, only=ATTACKS):
    (install.base / ".007").mkdir(exist_ok=True)
    (install.base / ".007" / "gate.toml").write_text(f'[[step]]\nname = "plant"\nrun = "sh {install.attack_script(only)}"\n')


# --- the sanity of the bench: the installation really runs Sandboy from where we think -------------------


@pytest.mark.parametrize("layout", ["editable", "wheel"])
def test_the_installation_runs_sandboy_from_its_own_files_with_its_bundle(tmp_path, package_copy, layout):
    install = Install(tmp_path / "checkout", layout, package_copy)
    proc = subprocess.run([str(install.venv / "bin" / "python"), "-c",
                           "import sandboy, sandboy.cli; f = sandboy.bundle_finder(); "
                           "print(sandboy.__file__); print(f is not None and not f.stale()); "
                           "print(type(sandboy.cli.__loader__).__name__)"], capture_output=True, text=True)
    assert proc.stdout.split() == [str(install.package / "__init__.py"), "True", "BundledSourceLoader"], proc
    assert install.payloads_run() == []


# --- the attack, refused -----------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["editable", "wheel"])
def test_sandboy_run_cannot_plant_code_in_its_own_installation(tmp_path, package_copy, layout, enforcement):
    install = Install(tmp_path / "checkout", layout, package_copy)
    script = install.attack_script()
    before = install.targets()
    proc = install.sandboy("run", "--policy", _run_policy(install), "--", "/bin/sh", script, env=enforcement,
                           cwd=str(install.base), check_rc=0)
    assert answers(proc.stdout) == {name: "refused" for name in ATTACKS}, proc.stdout
    assert install.targets() == before  # host side: bytes and links unchanged, no .pth planted
    assert install.payloads_run() == []
    # the launch warning names what is protected and why
    protected = [str(install.venv)] + ([str(install.base / "src")] if layout == "editable" else [])
    for path in protected:
        assert f"fs: {path} is " in proc.stderr and MARK in proc.stderr, proc.stderr


@pytest.mark.parametrize("layout", ["editable", "wheel"])
def test_a_gate_step_cannot_plant_code_in_the_installation_running_the_gate(tmp_path, package_copy, layout, enforcement):
    """Sandboy's own gate on its own checkout: `.venv` and `src/` inside `{repo}`."""
    install = Install(tmp_path / "checkout", layout, package_copy)
    _gate_repo(install)
    before = install.targets()
    proc = install.sandboy("gate", str(install.base), env=enforcement, check_rc=0)
    assert answers(proc.stdout) == {n: "refused" for n in ATTACKS}, proc.stdout
    assert install.targets() == before
    assert install.payloads_run() == []
    assert MARK in proc.stdout + proc.stderr, (proc.stdout, proc.stderr)


# --- the twins: opted out, each attack works (so the refusals above are the protection's) ----------------


@pytest.mark.parametrize("attack", ATTACKS)
@pytest.mark.parametrize("layout", ["editable", "wheel"])
def test_with_the_protection_opted_out_each_attack_runs_its_payload_on_the_host(tmp_path, package_copy, layout, attack):
    install = Install(tmp_path / "checkout", layout, package_copy)
    # only this attack: several would decide which payload runs first (an edited cli.py makes
    # the finder skip the bundle's code)
    script = install.attack_script(only=(attack,))
    before = install.targets()
    proc = install.sandboy("run", "--policy", _run_policy(install, protect_defaults=False), "--", "/bin/sh", script,
                           cwd=str(install.base), check_rc=0)
    assert answers(proc.stdout) == {attack: "ok"}, (proc.stdout, proc.stderr)
    assert install.targets()[attack] != before[attack]
    assert MARK not in proc.stderr
    assert install.payloads_run() == [attack]


def test_with_an_operator_ceiling_opting_out_a_gate_step_plants_a_pth_that_runs(tmp_path, package_copy):
    install = Install(tmp_path / "checkout", "editable", package_copy)
    _gate_repo(install, only=("pth",))
    before = install.targets()
    ceiling = tmp_path / "ceiling.toml"
    ceiling.write_text(to_toml({"version": 1, "fs": {"read": ["/usr", "/etc", "{repo}"], "exec": ["/usr/bin", "/bin"],
                                                     "write": ["{repo}", "{tmp}"], "protect_defaults": False}}))
    proc = install.sandboy("gate", "--ceiling", str(ceiling), str(install.base), check_rc=0)
    assert answers(proc.stdout) == {"pth": "ok"}, proc.stdout
    assert install.targets()["pth"] != before["pth"]
    assert install.payloads_run() == ["pth"]


# --- a repository's own virtual environment is not Sandboy's: pip installs into it ------------------------


def _tiny_wheel(directory) -> str:
    path = os.path.join(directory, "tinything-1.0-py3-none-any.whl")
    with zipfile.ZipFile(path, "w") as whl:
        whl.writestr("tinything/__init__.py", "VALUE = 42\n")
        whl.writestr("tinything-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: tinything\nVersion: 1.0\n")
        whl.writestr("tinything-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\n"
                     "Tag: py3-none-any\n")
        whl.writestr("tinything-1.0.dist-info/RECORD", "")
    return path


@pytest.mark.skipif(not os.path.exists("/usr/bin/python3"), reason="needs a system python3 readable in the cage")
def test_a_gate_step_pip_installs_into_the_repositorys_own_venv(tmp_path, package_copy):
    install = Install(tmp_path / "sandboy-home", "wheel", package_copy)
    repo = tmp_path / "project"
    repo.mkdir()
    # the project's own environment, with pip, from the system python the ceiling lets a step run
    subprocess.run(["/usr/bin/python3", "-m", "venv", str(repo / ".venv")], check=True, capture_output=True)
    wheel = _tiny_wheel(repo)
    (repo / ".007").mkdir()
    (repo / ".007" / "gate.toml").write_text(
        '[[step]]\nname = "deps"\n'
        f'run = ".venv/bin/python -m pip install -q --no-index --no-deps --disable-pip-version-check {os.path.basename(wheel)} '
        '&& .venv/bin/python -c \'import tinything; print(\\"imported\\", tinything.VALUE)\'"\n')
    proc = install.sandboy("gate", str(repo), check_rc=0)
    assert "imported 42" in proc.stdout, (proc.stdout, proc.stderr)
    assert glob.glob(str(repo / ".venv" / "lib" / "python3.*" / "site-packages" / "tinything" / "__init__.py"))
    assert MARK not in proc.stdout + proc.stderr  # nothing of Sandboy's own installation in that write root


# --- PYTHONPYCACHEPREFIX: the bundle stays in the package; the prefix is protected -----------------------


def test_with_a_pycache_prefix_the_bundle_is_still_read_from_the_package(tmp_path, package_copy):
    """ADR 0024: the bundle's place is fixed (the package's own `__pycache__`, protected with the
    package); PYTHONPYCACHEPREFIX moves only the byte code the interpreter writes at run time."""
    install = Install(tmp_path / "checkout", "editable", package_copy)
    prefix = install.add_pycache_prefix()
    proc = subprocess.run([str(install.venv / "bin" / "python"), "-c",
                           "import sys, sandboy, sandboy.cli; f = sandboy.bundle_finder(); "
                           "print(sys.pycache_prefix); print(f.package_dir, f.stale()); "
                           "print(type(sandboy.cli.__loader__).__name__)"],
                          capture_output=True, text=True, env={"PYTHONPYCACHEPREFIX": prefix})
    assert proc.stdout.splitlines() == [prefix, f"{install.package} []", "BundledSourceLoader"], proc
    assert not glob.glob(os.path.join(prefix, "**", "cli.*.pyc"), recursive=True)  # served, never compiled


def _payload_pyc(install, prefix, module, marker) -> tuple:
    """(where the interpreter reads `module`'s byte code under `prefix`, a .pyc of the module
    that first makes `marker`, stamped with the real source's mtime and size as Python checks)."""
    import importlib._bootstrap_external as external

    where = subprocess.run([str(install.venv / "bin" / "python"), "-c",
                            f"import importlib.util, {module}; print(importlib.util.cache_from_source({module}.__file__)); "
                            f"print({module}.__file__)"], capture_output=True, text=True, check=True,
                           env={"PYTHONPYCACHEPREFIX": prefix}).stdout.split()
    with open(where[1], "rb") as fh:
        source = fh.read()
    st = os.stat(where[1])
    code = compile(f"open({str(marker)!r}, 'w').close()\n".encode() + source, where[1], "exec", dont_inherit=True)
    return where[0], bytes(external._code_to_timestamp_pyc(code, int(st.st_mtime), st.st_size))


@pytest.mark.parametrize("opted_out", [False, True])
def test_a_pycache_prefix_inside_the_write_root_cannot_take_planted_byte_code(tmp_path, package_copy, opted_out,
                                                                              enforcement):
    install = Install(tmp_path / "checkout", "editable", package_copy)
    env = {"PYTHONPYCACHEPREFIX": install.add_pycache_prefix()}
    assert install.payloads_run(env=env) == []  # the host's first run fills the prefix (argparse's .pyc)
    target, evil = _payload_pyc(install, env["PYTHONPYCACHEPREFIX"], "argparse", install.marks / "pyc")
    assert os.path.isfile(target)
    (install.base / "evil.pyc").write_bytes(evil)
    script = install.base / "plant-pyc.sh"
    script.write_text(f"if cat '{install.base / 'evil.pyc'}' > '{target}' 2>/dev/null; then echo 'ok pyc'; "
                      "else echo 'refused pyc'; fi\n")
    before = open(target, "rb").read()
    proc = install.sandboy("run", "--policy", _run_policy(install, protect_defaults=not opted_out), "--", "/bin/sh",
                           str(script), env={**env, **enforcement}, cwd=str(install.base), check_rc=0)
    if opted_out:  # the twin: the attack works, and the host's next `sandboy` runs it
        assert answers(proc.stdout) == {"pyc": "ok"}, proc.stderr
        assert install.payloads_run(env=env) == ["pyc"]
    else:
        assert answers(proc.stdout) == {"pyc": "refused"}, proc.stderr
        assert open(target, "rb").read() == before
        assert f"fs: {env['PYTHONPYCACHEPREFIX']} is the byte code" in proc.stderr, proc.stderr
        assert install.payloads_run(env=env) == []


def test_a_symlink_to_the_console_script_on_path_cannot_be_replaced(tmp_path, package_copy, enforcement):
    """`~/bin/sandboy -> venv/bin/sandboy` inside the write root: the link is the command the
    operator runs next, protected as itself."""
    install = Install(tmp_path / "checkout", "wheel", package_copy)
    path = install.add_path_link()
    script = install.attack_script(only=("pathlink",))
    before = install.targets()
    proc = install.sandboy("run", "--policy", _run_policy(install), "--", "/bin/sh", script,
                           env={"PATH": path, **enforcement}, cwd=str(install.base), check_rc=0)
    assert answers(proc.stdout) == {"pathlink": "refused"}, proc.stderr
    assert install.targets() == before
    assert f"fs: {install.path_link} is the `sandboy` command" in proc.stderr, proc.stderr


# --- as an ordinary user: their own installation, in their own write root ---------------------------------

NOBODY = 65534


@pytest.mark.parametrize("opted_out", [False, True])
def test_as_an_ordinary_user_their_own_installation_is_protected(package_copy, opted_out, enforcement):
    """uid 65534 owns an installation made by the system python3 (no capabilities; the tier is
    then the unprivileged user-namespace one) and runs `sandboy run` with write on the checkout
    holding it: the same attacks are refused (host side: bytes, links, the user's next `sandboy
    --version`); opted out, each one works (the twin)."""
    from userkit import skip_unless_nobody_can_run, world_readable_tmp

    skip_unless_nobody_can_run()
    with world_readable_tmp("sandboy-own-install-") as tmp:
        (tmp / "package").mkdir()
        package = copy_package(tmp / "package", python="/usr/bin/python3")
        install = Install(tmp / "checkout", "editable", package, python="/usr/bin/python3")
        install.as_user = tuple(as_user())
        only = ("pth",) if opted_out else ATTACKS  # opted out: one payload, so the one that ran is known
        script = install.attack_script(only=only)
        policy = _run_policy(install, protect_defaults=not opted_out)
        subprocess.run(["chown", "-R", f"{NOBODY}:{NOBODY}", str(tmp)], check=True)
        before = install.targets()
        proc = install.sandboy("run", "--policy", policy, "--", "/bin/sh", script, env=enforcement,
                               cwd=str(install.base), check_rc=0)
        if opted_out:
            assert answers(proc.stdout) == {"pth": "ok"}, proc.stderr
            assert install.payloads_run() == ["pth"]
        else:
            assert answers(proc.stdout) == {name: "refused" for name in ATTACKS}, proc.stderr
            assert install.targets() == before
            assert install.payloads_run() == []


@pytest.mark.parametrize("opted_out", [False, True])
def test_the_environment_of_the_sandboy_first_on_path_is_protected(tmp_path, package_copy, opted_out, enforcement):
    """The `sandboy` the operator runs next may live in another environment than the running
    one (pipx: `~/.local/bin/sandboy -> ~/.local/pipx/venvs/sandboy/bin/sandboy`): its script's
    interpreter's environment is protected too; opted out, a `.pth` planted there runs at the
    operator's next `sandboy` through the PATH."""
    install = Install(tmp_path / "checkout", "wheel", package_copy)
    path = install.add_other_environment_on_path()
    script = install.attack_script(only=("nextpth",))
    before = install.targets()
    proc = install.sandboy("run", "--policy", _run_policy(install, protect_defaults=not opted_out), "--", "/bin/sh",
                           script, env={"PATH": path, **enforcement}, cwd=str(install.base), check_rc=0)
    next_run = subprocess.run([str(install.path_link), "--version"], capture_output=True, text=True,
                              env={"PATH": path, "HOME": str(tmp_path)})
    assert next_run.returncode == 0 and "sandboy" in next_run.stdout, next_run
    if opted_out:
        assert answers(proc.stdout) == {"nextpth": "ok"}, proc.stderr
        assert sorted(os.listdir(install.marks)) == ["nextpth"]
    else:
        assert answers(proc.stdout) == {"nextpth": "refused"}, proc.stderr
        assert install.targets() == before
        assert f"fs: {install.tools} is the Python environment the `sandboy` command on PATH" in proc.stderr, proc.stderr
        assert os.listdir(install.marks) == []


@pytest.mark.parametrize("opted_out", [False, True])
def test_a_pycache_prefix_missing_at_launch_is_made_and_protected(tmp_path, package_copy, opted_out, enforcement):
    """PYTHONPYCACHEPREFIX names a directory inside the write root that nothing has made yet
    (PYTHONDONTWRITEBYTECODE, as on CI machines): Sandboy makes it at launch and protects it, or
    the command would make it and plant byte code the host's next Python reads. Opted out, the
    command makes it (the twin)."""
    install = Install(tmp_path / "checkout", "editable", package_copy)
    prefix = install.base / "pycache"
    env = {"PYTHONPYCACHEPREFIX": str(prefix), "PYTHONDONTWRITEBYTECODE": "1"}
    planted = prefix / "usr" / "lib" / "planted.cpython-311.pyc"
    script = install.base / "plant-prefix.sh"
    script.write_text(f"if (mkdir -p '{planted.parent}' && : > '{planted}') 2>/dev/null; then echo 'ok prefix'; "
                      "else echo 'refused prefix'; fi\n")
    proc = install.sandboy("run", "--policy", _run_policy(install, protect_defaults=not opted_out), "--", "/bin/sh",
                           str(script), env={**env, **enforcement}, cwd=str(install.base), check_rc=0)
    if opted_out:
        assert answers(proc.stdout) == {"prefix": "ok"}, proc.stderr
        assert planted.is_file()
    else:
        assert answers(proc.stdout) == {"prefix": "refused"}, proc.stderr
        assert prefix.is_dir() and not planted.exists() and os.listdir(prefix) == []  # made empty by Sandboy
        assert f"fs: {prefix} is the byte code" in proc.stderr, proc.stderr


def _plant_script(install, planted, twin) -> str:
    """A script planting a `sitecustomize.py` that makes a marker (each line prints "ok NAME" or
    "refused NAME"), and writing a file in `twin` (a write root holding nothing of Sandboy's)."""
    script = install.base / "plant-sitecustomize.sh"  # (readable in the cage: the policy reads base)
    payload = f"open({str(install.marks / 'sitecustomize')!r}, 'w').close()"
    script.write_text(f"if (printf '%s\\n' \"{payload}\" > '{planted}') 2>/dev/null; then echo 'ok sitecustomize'; "
                      "else echo 'refused sitecustomize'; fi\n"
                      f"if (echo built > '{twin}/out') 2>/dev/null; then echo 'ok twin'; else echo 'refused twin'; fi\n")
    return str(script)


@pytest.mark.parametrize("opted_out", [False, True])
@pytest.mark.parametrize("layout", ["editable", "flat"])
def test_a_write_root_that_is_the_import_path_cannot_take_a_sitecustomize(tmp_path, package_copy, layout, opted_out,
                                                                          enforcement):
    """(rvgit6, session 6 review) The import path entry holding the package granted as the write
    root itself: an editable install's `src/` (`fs.write = ["{repo}/src"]`), or a flat layout's
    checkout granted whole. The interpreter imports `sitecustomize` (and any module) from every
    sys.path entry the `.pth` files put there, and a stdlib without one (pyenv, python.org
    builds) leaves `src/sitecustomize.py` to run at the operator's next `sandboy`. The write
    root is read-only whole (the launch warning says so), under the tier and without it; a
    second write root holding nothing of Sandboy's stays writable (the twin). Opted out, the
    plant works and runs on the host."""
    install = Install(tmp_path / "checkout", layout, package_copy)
    planted = install.import_path / "sitecustomize.py"
    twin = tmp_path / "elsewhere"
    twin.mkdir()
    script = _plant_script(install, planted, twin)
    policy = _run_policy(install, write=[str(install.import_path), str(twin)], protect_defaults=not opted_out)
    proc = install.sandboy("run", "--policy", policy, "--", "/bin/sh", script, env=enforcement, cwd=str(twin),
                           check_rc=0)
    try:
        assert (twin / "out").read_text() == "built\n", proc.stderr  # the twin: that write root works
        if opted_out:
            assert answers(proc.stdout) == {"sitecustomize": "ok", "twin": "ok"}, proc.stderr
            assert install.payloads_run() == ["sitecustomize"]
        else:
            assert answers(proc.stdout) == {"sitecustomize": "refused", "twin": "ok"}, proc.stderr
            assert not planted.exists()
            assert f"fs: {install.import_path} is the import path entry" in proc.stderr, proc.stderr
            assert f"{twin} is" not in proc.stderr and f"root {twin}:" not in proc.stderr
            assert install.payloads_run() == []
    finally:
        planted.unlink(missing_ok=True)


@pytest.mark.parametrize("missing", [False, True])
@pytest.mark.parametrize("opted_out", [False, True])
def test_a_pythonpath_entry_inside_the_write_root_cannot_take_a_sitecustomize(tmp_path, package_copy, opted_out,
                                                                              missing, enforcement):
    """(rvgit6, session 6 review) The operator's shell exports PYTHONPATH naming a directory the
    write root holds (`export PYTHONPATH=$PWD/lib`): the interpreter running `sandboy` imports
    from it, before the standard library. The entry is read-only in the cage (the launch warning
    names it); a write root not holding it stays writable (the twin). Opted out, the plant works
    and the next `sandboy` with that PYTHONPATH runs it. `missing`: the entry does not exist at
    launch (the interpreter skips it): Sandboy makes it, empty, and protects it — or the command
    would make it and plant there (the opted-out twin does)."""
    install = Install(tmp_path / "checkout", "editable", package_copy)
    pylib = install.base / "pylib"
    if not missing:
        pylib.mkdir()
    planted = pylib / "sitecustomize.py"
    twin = tmp_path / "elsewhere"
    twin.mkdir()
    script = _plant_script(install, planted, twin)
    if missing:  # the command makes the directory first
        with open(script) as fh:
            lines = fh.read()
        with open(script, "w") as fh:
            fh.write(f"mkdir -p '{pylib}' 2>/dev/null\n{lines}")
    env = {"PYTHONPATH": str(pylib)}
    policy = _run_policy(install, write=[str(install.base), str(twin)], protect_defaults=not opted_out)
    proc = install.sandboy("run", "--policy", policy, "--", "/bin/sh", script, env={**env, **enforcement},
                           cwd=str(twin), check_rc=0)
    try:
        assert (twin / "out").read_text() == "built\n", proc.stderr
        if opted_out:
            assert answers(proc.stdout) == {"sitecustomize": "ok", "twin": "ok"}, proc.stderr
            assert install.payloads_run(env=env) == ["sitecustomize"]
        else:
            assert answers(proc.stdout) == {"sitecustomize": "refused", "twin": "ok"}, proc.stderr
            assert not planted.exists()
            assert pylib.is_dir() and os.listdir(pylib) == []  # (missing: made empty by Sandboy)
            assert f"fs: {pylib} is a PYTHONPATH entry" in proc.stderr, proc.stderr
            assert f"root {twin}:" not in proc.stderr
            assert install.payloads_run(env=env) == []
    finally:
        planted.unlink(missing_ok=True)


def test_an_activated_own_environment_in_the_working_directory_is_not_called_writable(tmp_path, package_copy,
                                                                                        enforcement):
    """The quick start: Sandboy's own `.venv` in the checkout that is the working directory and
    write root, its `bin/` first on PATH. That directory is read-only like the rest of the
    installation — a `git` planted there is refused (checked on the host) — so the launch says
    so (ADR 0024) and not the PATH warning's "it stays writable" for a project venv
    (tests/cage/test_path_dirs.py holds that one for a venv that is not Sandboy's)."""
    install = Install(tmp_path / "checkout", "editable", package_copy)
    venv_bin = install.venv / "bin"
    proc = install.sandboy("run", "--policy", _run_policy(install), "--", "/bin/sh", "-c",
                           f"echo '#!/bin/sh' > {venv_bin}/git && echo planted || echo refused",
                           env={"PATH": f"{venv_bin}:/usr/bin:/bin", **enforcement}, cwd=str(install.base), check_rc=0)
    assert proc.stdout.strip() == "refused", proc
    assert not (venv_bin / "git").exists()
    assert MARK in proc.stderr, proc.stderr
    assert f"{venv_bin} is on PATH" not in proc.stderr, proc.stderr

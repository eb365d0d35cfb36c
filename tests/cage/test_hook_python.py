"""pre-commit installed from the repository's own `.venv` (ADR 0019, session 7): its stub in
`.git/hooks` execs `INSTALL_PYTHON=<repo>/.venv/bin/python -mpre_commit`, and that interpreter
runs its environment's start-up code first — `.pth` files, sitecustomize, the pre_commit
distribution and what it requires — files a caged command with write on the repository may
change. The environment stays writable (`pip install` in a step keeps working); the parent
judges after the run what of that start-up code was made or changed (`confine.hook_python`),
and the launch warns with the fix.

Each probe: the attack is real (without the check the operator's next commit — the real git,
the real stub, the real interpreter — runs the command's code), found, and after the quarantine
the operator's commit runs nothing of it. Twins: the real pip installing a plain wheel and one
with a path `.pth` (an editable install's shape) into that `.venv`, a commit in the run: nothing
flagged. The measured cost: a wheel shipping an import `.pth` (coverage 7, setuptools) IS
flagged, with the fix named. Through a real cage: tier and forced off, 125 and the warning.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import sysconfig
import time

import pytest
from cagekit import use_tier

from sandboy.confine import gitcheck, hook_python

from gitkit import GIT_ENV, git_repo, manager_env, operators_commit, sh, snapshot
from wheelkit import make_wheel, pip_install

VENV_BIN = os.path.dirname(sys.executable)
PURELIB = sysconfig.get_paths()["purelib"]
PRE_COMMIT = shutil.which("pre-commit", path=VENV_BIN)
needs_tools = pytest.mark.skipif(not (PRE_COMMIT and shutil.which("git")),
                                 reason="needs git and the test extras' pre-commit (make setup)")


@pytest.fixture
def env(tmp_path):
    return manager_env(tmp_path / "home")  # the operator's shell


def _copy_distribution(site, top_names, dist_prefix):
    """A distribution of this test interpreter copied into `site` as pip would have put it there
    (files with their times kept, so their byte code stays valid)."""
    for name in top_names:
        source = os.path.join(PURELIB, name)
        if os.path.isdir(source):
            shutil.copytree(source, os.path.join(site, name), symlinks=True)
        else:
            shutil.copy2(source, site)
    (info,) = glob.glob(os.path.join(PURELIB, f"{dist_prefix}-*.dist-info"))
    shutil.copytree(info, os.path.join(site, os.path.basename(info)), symlinks=True)


def python_repo(tmp_path, env, own, path=None):
    """The usual Python project: `.venv` in the repository (ignored) holding pre-commit and cfgv
    (the rest of pre-commit's requirements reached through a path `.pth`), setuptools'
    `distutils-precedence.pth` and `_distutils_hack` (every 3.11 venv made with pip), an
    editable install of the project's `src/`; `pre-commit install` run from that `.venv`; a
    config whose hook touches `own` (the operator's own hook)."""
    repo = git_repo(path or tmp_path / "repo", env)
    (repo / ".gitignore").write_text(".venv/\n")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(repo / ".venv")], check=True)
    (site,) = glob.glob(str(repo / ".venv" / "lib" / "python3.*" / "site-packages"))
    _copy_distribution(site, ["pre_commit"], "pre_commit")
    _copy_distribution(site, ["cfgv.py"], "cfgv")
    for name in ("distutils-precedence.pth", "_distutils_hack"):
        source = os.path.join(PURELIB, name)
        (shutil.copytree if os.path.isdir(source) else shutil.copy2)(source, os.path.join(site, name))
    with open(os.path.join(site, "dev-tools.pth"), "w") as fh:  # pre-commit's other requirements, pip
        fh.write(PURELIB + "\n")
    (repo / "src" / "proj").mkdir(parents=True)
    (repo / "src" / "proj" / "__init__.py").write_text("")
    with open(os.path.join(site, "__editable__.proj-0.1.pth"), "w") as fh:  # setuptools' src layout
        fh.write(f"{repo}/src\n")
    (repo / ".pre-commit-config.yaml").write_text(
        "repos:\n- repo: local\n  hooks:\n  - id: touch\n    name: touch\n"
        f"    entry: touch {own}\n    language: system\n    pass_filenames: false\n    always_run: true\n")
    sh(f"'{repo}/.venv/bin/python' -m pre_commit install >/dev/null && git add -A && git commit -qm managed",
       repo, env)
    assert f"INSTALL_PYTHON={repo}/.venv/bin/python\n" in (repo / ".git/hooks/pre-commit").read_text()
    own.unlink()
    return repo, site


PLANT = "open('{pwned}', 'w').close()"
ATTACKS = {
    # rvgit6's probe: a new .pth with an import line
    "a new .pth": ("printf 'import os; %s\\n' \"$PLANT\" > \"$SITE/zz_planted.pth\"", "{site}/zz_planted.pth"),
    # rvsec7: site.py execs a line starting "import\t" too
    "a new .pth, import and a tab": ("printf 'import\\tos; %s\\n' \"$PLANT\" > \"$SITE/zz_tab.pth\"", "{site}/zz_tab.pth"),
    "sitecustomize in site-packages": ("printf '%s\\n' \"$PLANT\" > \"$SITE/sitecustomize.py\"", "{site}/sitecustomize.py"),
    # the editable install's .pth (old) adds src/ to the path: a sitecustomize there runs
    "sitecustomize in an editable install's src/": ("printf '%s\\n' \"$PLANT\" > src/sitecustomize.py",
                                                    "{repo}/src/sitecustomize.py"),
    # distutils-precedence.pth (old) imports _distutils_hack at every start
    "a module an old .pth imports": ("printf '\\n%s\\n' \"$PLANT\" >> \"$SITE/_distutils_hack/__init__.py\"",
                                     "{site}/_distutils_hack/__init__.py"),
    "the pre_commit package": ("printf '\\n%s\\n' \"$PLANT\" >> \"$SITE/pre_commit/__init__.py\"",
                               "{site}/pre_commit/__init__.py"),
    "a requirement of pre_commit (cfgv)": ("printf '\\n%s\\n' \"$PLANT\" >> \"$SITE/cfgv.py\"", "{site}/cfgv.py"),
    # rvsec7: the distribution's own RECORD emptied (what the judge reads to know pre_commit's
    # files), then the package changed
    "pre_commit's RECORD emptied": ("for f in \"$SITE\"/pre_commit-*.dist-info/RECORD; do : > \"$f\"; done && "
                                    "printf '\\n%s\\n' \"$PLANT\" >> \"$SITE/pre_commit/__init__.py\"",
                                    "{site}/pre_commit/__init__.py"),
    # rvsec7: pre_commit's METADATA no longer requires cfgv, then cfgv changed
    "pre_commit's requirements dropped": ("sed -i '/^Requires-Dist/d' \"$SITE\"/pre_commit-*.dist-info/METADATA && "
                                          "printf '\\n%s\\n' \"$PLANT\" >> \"$SITE/cfgv.py\"", "{site}/cfgv.py"),
    # a path-only .pth sorting before dev-tools.pth: its directory's `identify` (a requirement of
    # pre-commit, reached through dev-tools.pth) shadows the real one
    "a path .pth shadowing a requirement": ("mkdir -p shadow/identify && printf '%s\\n' \"$PLANT\" > "
                                            "shadow/identify/__init__.py && printf '%s/shadow\\n' \"$PWD\" > "
                                            "\"$SITE/aa_shadow.pth\"", "{site}/aa_shadow.pth"),
    # the interpreter itself swapped for a script
    "the interpreter": ("rm .venv/bin/python && printf '#!/bin/sh\\ntouch {pwned}\\nexec {real} \"$@\"\\n' "
                        "> .venv/bin/python && chmod +x .venv/bin/python", "{repo}/.venv/bin/python"),
    # a tracked copy of the environment (its files older than the launch) renamed into place
    "the environment renamed into place": ("mv .venv .venv-old && mv fixtures/venv .venv",
                                           "{repo}/.venv/lib/{pyver}/site-packages/zz_planted.pth"),
}


@needs_tools
@pytest.mark.parametrize("attack", ATTACKS)
def test_what_pre_commits_interpreter_runs_at_start_is_judged_after_the_run(tmp_path, env, attack):
    script, planted = ATTACKS[attack]
    pwned, own = tmp_path / "PWNED", tmp_path / "OWN-HOOK"
    repo, site = python_repo(tmp_path, env, own)
    fill = dict(pwned=pwned, site=site, repo=repo, real=os.path.realpath(repo / ".venv/bin/python"),
                pyver=os.path.basename(os.path.dirname(site)))
    fill["plant"] = PLANT.format(**fill)
    if attack == "the environment renamed into place":
        (repo / "fixtures").mkdir()
        shutil.copytree(repo / ".venv", repo / "fixtures" / "venv", symlinks=True)
        (repo / "fixtures" / "venv" / os.path.relpath(planted.format(**fill), repo / ".venv")).write_text(
            f"import os; {fill['plant']}\n")
        time.sleep(0.05)
    env = {**env, "SITE": site, "PLANT": fill["plant"]}
    snap = snapshot(repo, env)
    sh(script.format(**fill), repo, env)
    findings = snap.verify()
    # the attack is real: without the check the operator's next commit runs the command's code
    operators_commit(repo, env, "attack")
    assert pwned.exists(), f"the attack is not real: the operator's commit did not run {attack}"
    pwned.unlink()
    assert planted.format(**fill) in [f.path for f in findings], findings
    assert all("pipx install pre-commit" in f.why for f in findings if f.path), findings
    moved, failed = gitcheck.quarantine(findings, snap.writable)
    assert moved and not failed, (moved, failed)
    operators_commit(repo, env, "after")
    assert not pwned.exists(), f"the operator's commit ran {attack} after the quarantine"


@needs_tools
@pytest.mark.parametrize("twin", ["plain wheel", "wheel with a path .pth (an editable install's shape)",
                                  "a commit in the run"])
def test_pip_install_and_commits_in_that_venv_are_not_flagged(tmp_path, env, twin):
    """The twins: the real pip installs into the repository's `.venv` during the run — a wheel
    with a console script, one whose `.pth` only adds a directory (what setuptools' src-layout
    and hatchling's editable installs write, measured: `__editable__.srcpkg-1.0.pth`,
    `_editable_impl_hpkg.pth`) — or the run commits (pre-commit's hook runs that `.venv`'s
    interpreter): nothing flagged, and the operator's own hook still runs."""
    own = tmp_path / "OWN-HOOK"
    repo, site = python_repo(tmp_path, env, own)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    snap = snapshot(repo, env)
    if twin == "a commit in the run":
        result = operators_commit(repo, env, "work")
        assert result.returncode == 0 and own.exists(), result
        own.unlink()
    else:
        (tmp_path / "extra").mkdir()
        pth = f"{tmp_path / 'extra'}\n" if twin.startswith("wheel with") else None
        done = pip_install(repo / ".venv/bin/python", make_wheel(wheels, "demo", pth=pth, script="demo-tool"))
        assert done.returncode == 0, done
        assert os.path.exists(os.path.join(site, "demo", "__init__.py"))
        assert os.path.exists(repo / ".venv/bin/demo-tool")
    assert snap.verify() == []
    assert operators_commit(repo, env, "after").returncode == 0 and own.exists()


@needs_tools
def test_a_wheel_shipping_an_import_pth_is_flagged_naming_the_fix(tmp_path, env):
    """The decided cost (ADR 0019, session 7): a wheel whose `.pth` holds an import line — as
    coverage 7 ships `a1_coverage.pth` (pulled in by `pip install pytest-cov`), setuptools
    `distutils-precedence.pth`, setuptools' flat-layout editable install its finder's `.pth`
    (measured here with pip 25.3) — installed by the run into the environment pre-commit's hook
    runs IS a finding: that line runs on the operator's next commit, and whose it is cannot be
    told. The finding names the fix that makes the environment no longer what the commit runs."""
    own = tmp_path / "OWN-HOOK"
    repo, site = python_repo(tmp_path, env, own)
    (tmp_path / "wheels").mkdir()
    snap = snapshot(repo, env)
    line = "import sys; exec('import os\\nif os.getenv(\"COVERAGE_PROCESS_START\"): pass')\n"
    assert pip_install(repo / ".venv/bin/python", make_wheel(tmp_path / "wheels", "covlike", pth=line)).returncode == 0
    findings = snap.verify()
    assert [f.path for f in findings] == [os.path.join(site, "covlike.pth")], findings
    (finding,) = findings
    assert "an import line" in finding.why and "pipx install pre-commit" in finding.why, finding.why
    assert f'fs.protect = ["{repo}/.venv"]' in finding.why, finding.why


@needs_tools
def test_without_the_stub_naming_it_a_venv_is_not_judged(tmp_path, env):
    """A repository whose pre-commit was installed from outside (pipx, the stub's INSTALL_PYTHON
    elsewhere) — the fix the warning names: the same new `.pth` in the repository's `.venv` is
    not what the next commit runs, and is not flagged; no launch warning either."""
    own = tmp_path / "OWN-HOOK"
    repo, site = python_repo(tmp_path, env, own)
    sh(f"'{sys.executable}' -m pre_commit install -f >/dev/null", repo, env)  # from outside the repository
    assert f"INSTALL_PYTHON={sys.executable}" in (repo / ".git/hooks/pre-commit").read_text()
    assert hook_python.launch_warnings([str(repo)]) == []
    snap = snapshot(repo, env)
    sh("printf 'import os\\n' > \"$SITE/zz_new.pth\"", repo, {**env, "SITE": site})
    assert snap.verify() == []


@needs_tools
def test_the_launch_warns_naming_the_fix(tmp_path, env):
    own = tmp_path / "OWN-HOOK"
    repo, _site = python_repo(tmp_path, env, own)
    (warning,) = hook_python.launch_warnings([str(repo)])
    real = os.path.realpath(repo)
    assert f"{real}/.git/hooks/pre-commit" in warning and f"runs {repo}/.venv/bin/python" in warning, warning
    assert "pipx install pre-commit" in warning and "fs.protect" in warning, warning
    # a write root elsewhere: nothing to say
    (tmp_path / "other").mkdir()
    assert hook_python.launch_warnings([str(tmp_path / "other")]) == []


@needs_tools
def test_more_start_up_files_than_the_bound_fail_closed(tmp_path, env, monkeypatch):
    """Cost bound: the walk of that environment's start-up code stops at ENTRY_BUDGET files and
    then fails the run closed (a finding without a path), rather than passing it."""
    repo, site = python_repo(tmp_path, env, tmp_path / "OWN-HOOK")
    monkeypatch.setattr(hook_python, "ENTRY_BUDGET", 10)
    snap = snapshot(repo, env)
    findings = snap.verify()
    assert [f.path for f in findings] == [None] and "not checked to the end" in findings[0].why, findings


@needs_tools
def test_doctor_says_it_in_that_repository(tmp_path, env):
    """`sandboy doctor` started in the repository (or below its top) names the stub, the
    interpreter and the fix before any run; elsewhere it says nothing of it."""
    from sandboy.confine import doctor

    repo, _site = python_repo(tmp_path, env, tmp_path / "OWN-HOOK")
    (repo / "src" / "deeper").mkdir()
    (note,) = doctor.repository_notes(str(repo / "src" / "deeper"))
    assert note.startswith(f"repository {os.path.realpath(repo)}, if a run may write it: ") and "pipx" in note, note
    assert doctor.repository_notes(str(tmp_path)) == []
    done = subprocess.run([os.path.join(VENV_BIN, "sandboy"), "doctor", "--json"], cwd=repo, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and "pipx install pre-commit" in done.stdout, done


def test_a_stub_names_its_interpreter():
    assert hook_python.stub_python(b"# start templated\nINSTALL_PYTHON=/r/.venv/bin/python\n") == "/r/.venv/bin/python"
    assert hook_python.stub_python(b"INSTALL_PYTHON='/a b/.venv/bin/python'\nARGS=(hook-impl)\n") == \
        "/a b/.venv/bin/python"
    assert hook_python.stub_python(b"INSTALL_PYTHON=''\n") is None  # the template itself
    assert hook_python.stub_python(b"#!/bin/sh\nexit 0\n") is None


# --- through a real cage ------------------------------------------------------------------------


@needs_tools
@pytest.mark.needs_kernel
@pytest.mark.parametrize("tier", ["tier", "no-tier"])
@pytest.mark.parametrize("case", ["plant a .pth", "twin: a module installed"])
def test_a_run_cannot_leave_start_up_code_for_pre_commits_interpreter(cage, tmp_path, env, monkeypatch, tier, case):
    """The caged command (write on the repository) writes a `.pth` into the `.venv` pre-commit's
    hook runs: the run ends 125 with the `.pth` in quarantine and the launch warning said why,
    under the tier and forced off; host side, the operator's commit runs nothing of it. Twin: a
    module written there (what `pip install` of a plain package does): rc 0, warning only."""
    use_tier(tier, monkeypatch)
    pwned, own = tmp_path / "PWNED", tmp_path / "OWN-HOOK"
    work = cage.work
    shutil.rmtree(work)
    repo, site = python_repo(tmp_path, env, own, path=work)
    time.sleep(0.02)
    policy = cage.policy(fs={"read": ["/etc", "/proc/self"], "exec": ["/usr/bin", "/bin"], "write": ["."]},
                         env={"pass": [], "set": {"PATH": "/usr/bin:/bin", "HOME": str(work), **GIT_ENV}})
    rel = os.path.relpath(site, work)
    target = "zz_planted.pth" if case == "plant a .pth" else "demo_module.py"
    text = f"import os; open('{pwned}', 'w').close()" if case == "plant a .pth" else "x = 1"
    result = cage.run(argv=["/bin/sh", "-c", f"printf \"{text}\\n\" > {rel}/{target} && echo WROTE"],
                      policy=policy, via="cli")
    assert "WROTE" in result.out, result
    assert "pre-commit's hook" in result.err and "pipx install pre-commit" in result.err, result  # the warning
    if case == "plant a .pth":
        assert result.rc == 125 and f"{rel}/{target}" in result.err, result
        assert not os.path.exists(os.path.join(site, target)), "the planted .pth was not moved"
    else:
        assert result.rc == 0, result
    operators_commit(work, env, "operator")
    assert not pwned.exists(), "the operator's commit ran the command's .pth"
    assert own.exists(), "the operator's own pre-commit hook did not run after the run"


@needs_tools
def test_a_plugin_registered_for_a_requirement_of_pre_commit_is_judged(tmp_path, env):
    """rvsec7: a new `.dist-info` whose entry_points.txt registers `[virtualenv.activate]`: virtualenv
    (a requirement of pre_commit) imports every such plugin when pre-commit makes a hook's
    environment (`INSTALL_PYTHON -mvirtualenv`, on the operator's commit that first needs it)."""
    pwned, own = tmp_path / "PWNED", tmp_path / "OWN-HOOK"
    repo, site = python_repo(tmp_path, env, own)
    snap = snapshot(repo, env)
    info = os.path.join(site, "evilplug-1.0.dist-info")
    os.mkdir(info)
    with open(os.path.join(info, "METADATA"), "w") as fh:
        fh.write("Metadata-Version: 2.1\nName: evilplug\nVersion: 1.0\n")
    with open(os.path.join(info, "entry_points.txt"), "w") as fh:
        fh.write("[virtualenv.activate]\nevil = evilplug:X\n")
    with open(os.path.join(site, "evilplug.py"), "w") as fh:
        fh.write(PLANT.format(pwned=pwned) + "\nclass X: pass\n")
    findings = snap.verify()

    def pre_commit_makes_an_environment():
        subprocess.run([str(repo / ".venv/bin/python"), "-mvirtualenv", "--help"], env=env, cwd=repo,
                       capture_output=True, timeout=120)

    pre_commit_makes_an_environment()
    assert pwned.exists(), "the attack is not real: virtualenv did not load the plugin"
    pwned.unlink()
    assert os.path.join(info, "entry_points.txt") in [f.path for f in findings], findings
    moved, failed = gitcheck.quarantine(findings, snap.writable)
    assert moved and not failed, (moved, failed)
    pre_commit_makes_an_environment()
    assert not pwned.exists(), "virtualenv loaded the plugin after the quarantine"


# --- the METADATA headers: what the closure follows (session 8, readfold) ----------------------


def _long_description(site, dist_prefix, size):
    """pre_commit's METADATA (or another's) grown to `size` bytes by a long description after its
    header block, as a package with a huge README has: the headers themselves unchanged."""
    # pre-commit's other requirements (dev-tools.pth) reached through links in a directory that
    # holds no second pre_commit nor cfgv: the closure knows of cfgv only from this METADATA
    devlib = os.path.join(os.path.dirname(site), "devlib")
    os.mkdir(devlib)
    for name in os.listdir(PURELIB):
        if not name.startswith(("pre_commit", "cfgv")):
            os.symlink(os.path.join(PURELIB, name), os.path.join(devlib, name))
    with open(os.path.join(site, "dev-tools.pth"), "w") as fh:
        fh.write(devlib + "\n")
    (metadata,) = glob.glob(os.path.join(site, f"{dist_prefix}-*.dist-info", "METADATA"))
    with open(metadata, "rb") as fh:
        data = fh.read()
    head, _, body = data.partition(b"\n\n")
    with open(metadata, "wb") as fh:
        fh.write(head + b"\n\n" + body + b"\n" + b"A long README line, repeated.\n" * (size // 30))
    return metadata


@needs_tools
def test_a_huge_metadata_does_not_hide_a_requirement_of_pre_commit(tmp_path, env):
    """The attacker's side: pre_commit's METADATA is over 1 MiB (a long description after its
    headers) and unchanged during the run; the command edits `cfgv.py`, a requirement named in
    those headers. The check read METADATA whole, up to 1 MiB, so a larger one gave no headers,
    cfgv was not in the closure, and the operator's next commit ran the command's code. Now the
    headers are read up to their end only: cfgv is followed and its change found."""
    pwned, own = tmp_path / "PWNED", tmp_path / "OWN-HOOK"
    repo, site = python_repo(tmp_path, env, own)
    metadata = _long_description(site, "pre_commit", 3 << 20)
    assert os.path.getsize(metadata) > 2 * hook_python.PTH_READ_LIMIT
    snap = snapshot(repo, env)
    with open(os.path.join(site, "cfgv.py"), "a") as fh:
        fh.write("\n" + PLANT.format(pwned=pwned) + "\n")
    findings = snap.verify()
    operators_commit(repo, env, "attack")
    assert pwned.exists(), "the attack is not real: the operator's commit did not run cfgv.py"
    pwned.unlink()
    assert os.path.join(site, "cfgv.py") in [f.path for f in findings], findings
    moved, failed = gitcheck.quarantine(findings, snap.writable)
    assert moved and not failed, (moved, failed)
    operators_commit(repo, env, "after")
    assert not pwned.exists(), "the operator's commit ran cfgv.py after the quarantine"


@needs_tools
def test_a_huge_metadata_left_alone_and_pip_install_are_not_flagged(tmp_path, env):
    """The twin: the same 3 MiB METADATA, unchanged, and the real pip installing a plain wheel
    into that `.venv` during the run: nothing flagged, the operator's own hook still runs."""
    own = tmp_path / "OWN-HOOK"
    repo, site = python_repo(tmp_path, env, own)
    _long_description(site, "pre_commit", 3 << 20)
    (tmp_path / "wheels").mkdir()
    snap = snapshot(repo, env)
    assert pip_install(repo / ".venv/bin/python", make_wheel(tmp_path / "wheels", "demo")).returncode == 0
    assert snap.verify() == []
    assert operators_commit(repo, env, "after").returncode == 0 and own.exists()


def test_the_headers_end_at_the_first_empty_line_only(tmp_path):
    """A header's continuation line holding only blanks (setuptools writes `License:` with the
    licence's text so, blank lines indented: Sandboy's own METADATA) does not end the headers —
    the email parser importlib.metadata uses reads on to the first EMPTY line; stopping there
    left every `Requires-Dist` after it unfollowed. Line ends as written (CRLF too)."""
    path = tmp_path / "METADATA"
    path.write_bytes(b"Metadata-Version: 2.4\r\nName: x\nLicense: MIT\n        \n        text\n"
                     b"Requires-Dist: cfgv\n\nRequires-Dist: not-a-header\n")
    assert hook_python._headers(str(path))[-1] == "Requires-Dist: cfgv"
    path.write_bytes(b"Name: x\r\nRequires-Dist: cfgv\r\n\r\nbody\n")
    assert hook_python._headers(str(path)) == ["Name: x", "Requires-Dist: cfgv"]
    path.write_bytes(b"Name: x\nRequires-Dist: cfgv\n")  # headers alone, no body
    assert hook_python._headers(str(path)) == ["Name: x", "Requires-Dist: cfgv"]
    assert hook_python._headers(str(tmp_path / "missing")) == []  # a .dist-info without one: nothing required


@needs_tools
@pytest.mark.parametrize("absurd", ["a header block over the bound", "a FIFO", "a RECORD over the bound",
                                    "more distributions than the bound"])
def test_an_absurd_header_block_in_the_closure_fails_closed(tmp_path, env, monkeypatch, absurd):
    """Where the headers cannot be read to their end — a header block larger than
    HEADER_READ_LIMIT (no empty line within it; real ones are under 10 KiB here), a METADATA that
    is no regular file — what that distribution requires is not known: the check fails closed
    (a finding without a path, naming the file), rather than leave its requirements unjudged.
    So for a RECORD it cannot read (what the distribution installed), and for a closure larger
    than MAX_DISTRIBUTIONS (the walk stopped there, silently, before)."""
    repo, site = python_repo(tmp_path, env, tmp_path / "OWN-HOOK")
    (metadata,) = glob.glob(os.path.join(site, "cfgv-*.dist-info", "METADATA"))
    if absurd == "more distributions than the bound":
        monkeypatch.setattr(hook_python, "MAX_DISTRIBUTIONS", 1)
        findings = snapshot(repo, env).verify()
        assert [f.path for f in findings] == [None] and "more than 1 distributions" in findings[0].why, findings
        return
    if absurd == "a RECORD over the bound":
        metadata = os.path.join(os.path.dirname(metadata), "RECORD")
        with open(metadata, "a") as fh:
            fh.write("cfgv_padding.py,,\n" * (hook_python.PTH_READ_LIMIT // 16))
        findings = snapshot(repo, env).verify()
        assert [f.path for f in findings] == [None], findings
        assert metadata in findings[0].why and "not checked to the end" in findings[0].why, findings[0].why
        return
    os.unlink(metadata)
    if absurd == "a FIFO":
        os.mkfifo(metadata)
    else:
        with open(metadata, "wb") as fh:
            fh.write(b"Name: cfgv\n" + b"X-Padding: " + b"x" * hook_python.HEADER_READ_LIMIT + b"\n\nbody\n")
    snap = snapshot(repo, env)
    findings = snap.verify()
    assert [f.path for f in findings] == [None], findings
    assert metadata in findings[0].why and "not checked to the end" in findings[0].why, findings[0].why

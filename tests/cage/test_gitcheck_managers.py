"""Hook managers: pre-commit and lefthook (ADR 0019, session 6). Once installed, their stub in
`.git/hooks` runs what a file of the worktree lists — `.pre-commit-config.yaml`, `lefthook.yml`
(and its `-local` override, its other names, the scripts in `.lefthook/<hook>/`) — on the
operator's next `git commit`. A run that rewrites one plants code for that commit, one
indirection away from a hook. Where the manager's stub is installed, those files are bound
read-only at launch (`protected.hook_manager_configs`) and judged after the run (made or
changed: a finding, the launch content put back).

The real tools (the test extras pin them; the operator's commit runs the real stub, which runs
the real pre-commit / lefthook), the real git; each probe judged from the host side: the
operator's commit runs the planted command without the check (the attack is real) and does not
after the quarantine — their own hook still runs. Twins: other files edited and a commit made
with the hook running; the same files rewritten where no manager is installed (a formatter); the
opt-out key. Through a real cage: the write gets EROFS under the tier; forced off, the run ends
125 with the file put back.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest
from cagekit import use_tier

from sandboy.confine import gitcheck, protected

from gitkit import GIT_ENV, git_repo, manager_env, operators_commit, sh, snapshot

VENV_BIN = os.path.dirname(sys.executable)
PRE_COMMIT = shutil.which("pre-commit", path=VENV_BIN)
LEFTHOOK = shutil.which("lefthook", path=VENV_BIN)
needs_tools = pytest.mark.skipif(not (PRE_COMMIT and LEFTHOOK and shutil.which("git")),
                                 reason="needs git and the test extras' pre-commit and lefthook (make setup)")


@pytest.fixture
def env(tmp_path):
    return manager_env(tmp_path / "home")  # the operator's shell


def pre_commit_config(marker) -> str:
    return ("repos:\n- repo: local\n  hooks:\n  - id: touch\n    name: touch\n"
            f"    entry: touch {marker}\n    language: system\n    pass_filenames: false\n    always_run: true\n")


def lefthook_config(marker) -> str:
    return f"pre-commit:\n  commands:\n    touch:\n      run: touch {marker}\n"


def managed_repo(tmp_path, env, manager, own):
    """A repository with `manager` installed (its real `install`) and a config whose hook
    touches `own` (the operator's own hook), committed."""
    repo = git_repo(tmp_path / "repo", env)
    install = f"{manager} install"
    if manager == "lefthook in core.hooksPath":
        # lefthook installs into a configured hooks directory when forced to
        sh("git config core.hooksPath .githooks", repo, env)
        manager, install = "lefthook", "lefthook install --force"
    if manager == "pre-commit":
        (repo / ".pre-commit-config.yaml").write_text(pre_commit_config(own))
    else:
        (repo / "lefthook.yml").write_text(lefthook_config(own) + "  scripts:\n    lint.sh:\n      runner: sh\n")
        (repo / ".lefthook" / "pre-commit").mkdir(parents=True)
        (repo / ".lefthook" / "pre-commit" / "lint.sh").write_text("true\n")
    sh(f"{install} && git add -A && git commit -qm managed", repo, env)
    own.unlink()  # the set-up's own commit ran the hook
    return repo


ATTACKS = {
    # the config rewritten: its local hook now runs the command's program (staged too: pre-commit
    # refuses to run a config with unstaged changes; the index is the command's to write)
    "pre-commit config rewritten": ("pre-commit", "printf '{pwned_pre_commit}' > .pre-commit-config.yaml "
                                    "&& git add .pre-commit-config.yaml", ".pre-commit-config.yaml"),
    "lefthook config rewritten": ("lefthook", "printf '{pwned_lefthook}' > lefthook.yml", "lefthook.yml"),
    # the same where lefthook's stub lives in a `core.hooksPath` directory, not `.git/hooks`
    "lefthook in core.hooksPath, config rewritten": ("lefthook in core.hooksPath",
                                                     "printf '{pwned_lefthook}' > lefthook.yml", "lefthook.yml"),
    # lefthook merges its `-local` override, made here by the run
    "lefthook-local.yml made": ("lefthook", "printf '{pwned_lefthook}' > lefthook-local.yml", "lefthook-local.yml"),
    # lefthook looks in `.config/` too (one of its names), made by the run beside the top one
    ".config/lefthook-local.yml made": ("lefthook", "mkdir -p .config && printf '{pwned_lefthook}' > "
                                        ".config/lefthook-local.yml", ".config/lefthook-local.yml"),
    # a script the config lists, rewritten (lefthook runs `.lefthook/pre-commit/lint.sh`)
    "lefthook script rewritten": ("lefthook", "printf 'touch {pwned}\\n' > .lefthook/pre-commit/lint.sh",
                                  ".lefthook/pre-commit/lint.sh"),
}


@needs_tools
@pytest.mark.parametrize("attack", ATTACKS)
def test_what_an_installed_hook_manager_runs_is_judged_after_the_run(tmp_path, env, attack):
    manager, script, planted = ATTACKS[attack]
    pwned, own = tmp_path / "PWNED", tmp_path / "OWN-HOOK"
    repo = managed_repo(tmp_path, env, manager, own)
    snap = snapshot(repo, env)
    sh(script.format(pwned=pwned, pwned_pre_commit=pre_commit_config(pwned).replace("\n", "\\n"),
                     pwned_lefthook=lefthook_config(pwned).replace("\n", "\\n")), repo, env)
    findings = snap.verify()
    assert [os.path.relpath(f.path, repo) for f in findings] == [planted], findings
    # the attack is real: without the check the operator's next commit runs the command's program
    operators_commit(repo, env, "attack")
    assert pwned.exists(), f"the attack is not real: the operator's commit did not run {planted}"
    pwned.unlink()
    own.unlink(missing_ok=True)
    moved, failed = gitcheck.quarantine(findings, snap.writable)
    assert len(moved) == 1 and not failed, (moved, failed)
    result = operators_commit(repo, env, "after")
    assert not pwned.exists(), f"the operator's commit ran the planted {planted} after the quarantine"
    if planted == "lefthook.yml":
        # the launch content is put back: the operator's own hook runs again, the commit works
        assert result.returncode == 0 and own.exists(), result
    if planted == ".pre-commit-config.yaml":
        # put back too, but the planted text is still staged: pre-commit refuses to run until
        # the operator looks (`git diff --cached` shows it), and runs nothing meanwhile
        assert result.returncode != 0 and "unstaged" in result.stdout + result.stderr, result


@needs_tools
@pytest.mark.parametrize("manager", ["pre-commit", "lefthook"])
def test_work_in_a_managed_repository_is_not_flagged(tmp_path, env, manager):
    """The twin: other files edited and committed by the run, the manager's hook running on
    that commit (the operator's own hook): nothing is flagged."""
    own = tmp_path / "OWN-HOOK"
    repo = managed_repo(tmp_path, env, manager, own)
    snap = snapshot(repo, env)
    sh("echo change > notes.txt && mkdir -p src && echo x > src/a.py && git add -A && git commit -qm work", repo, env)
    assert own.exists(), "the twin is not real: the manager's hook did not run on the run's commit"
    assert snap.verify() == []


@needs_tools
def test_without_an_installed_manager_the_files_are_ordinary(tmp_path, env):
    """The twin: the same names where no manager's stub is installed (a formatter rewriting
    every YAML file, `pre-commit autoupdate` in a checkout that never ran `pre-commit install`):
    not protected at launch, not flagged after the run."""
    repo = git_repo(tmp_path / "repo", env)
    (repo / ".pre-commit-config.yaml").write_text(pre_commit_config(tmp_path / "x"))
    (repo / "lefthook.yml").write_text(lefthook_config(tmp_path / "x"))
    assert protected.hook_manager_configs(str(repo), [str(repo / ".git/hooks")]) == []
    from_defaults, _ = protected.resolve_protected([str(repo)], [], True)
    assert not [p for p in from_defaults if p.endswith((".yaml", ".yml"))], from_defaults
    snap = snapshot(repo, env)
    sh("printf '# formatted\\n' >> .pre-commit-config.yaml && printf '# formatted\\n' >> lefthook.yml "
       "&& printf 'x: 1\\n' > lefthook-local.yml", repo, env)
    assert snap.verify() == []


@needs_tools
@pytest.mark.parametrize("manager", ["pre-commit", "lefthook", "lefthook in core.hooksPath"])
def test_an_installed_managers_files_are_protected_at_launch(tmp_path, env, manager):
    """Where the stub is installed, what it reads is in the protected set (bound read-only
    under the tier); `fs.protect_defaults = false` (the opt-out key) leaves it out."""
    repo = managed_repo(tmp_path, env, manager, tmp_path / "OWN-HOOK")
    real = os.path.realpath(repo)
    expected = ({f"{real}/.pre-commit-config.yaml"} if manager == "pre-commit"
                else {f"{real}/lefthook.yml", f"{real}/.lefthook"})
    from_defaults, _ = protected.resolve_protected([str(repo)], [], True)
    assert expected <= set(from_defaults), from_defaults
    assert protected.resolve_protected([str(repo)], [], False) == ([], [])


def test_a_pre_commit_stub_names_its_config():
    """pre-commit's stub passes the config it was installed with; a name with spaces is
    shell-quoted (pre-commit 4.7's template)."""
    stub = b"ARGS=(hook-impl --config=.pre-commit-config.yaml --hook-type=pre-commit)\n"
    assert protected._pre_commit_config(stub) == ".pre-commit-config.yaml"
    assert protected._pre_commit_config(b"ARGS=(hook-impl --config='ci/my hooks.yaml' --hook-type=pre-push)") \
        == "ci/my hooks.yaml"
    assert protected._pre_commit_config(b"#!/bin/sh\nexit 0\n") is None


# --- through a real cage ------------------------------------------------------------------------


@needs_tools
@pytest.mark.needs_kernel
@pytest.mark.parametrize("tier", ["tier", "no-tier"])
@pytest.mark.parametrize("case", ["rewrite", "twin: other files", "twin: opt-out key"])
def test_a_run_cannot_rewrite_what_the_operators_commit_runs(cage, tmp_path, env, monkeypatch, tier, case):
    """pre-commit installed in the repository; the caged command rewrites its config. Under
    the tier the write is refused (EROFS: the file is bound read-only); forced off, the run
    ends 125 and the file gets its launch content back. Host side both ways: the operator's
    commit runs their own hook, not the command's. Twins: other files written (rc 0); with
    `fs.protect_defaults = false` the write is the policy's to allow (rc 0, the file changed)."""
    use_tier(tier, monkeypatch)
    pwned, own = tmp_path / "PWNED", tmp_path / "OWN-HOOK"
    work = cage.work
    shutil.rmtree(work)
    shutil.copytree(managed_repo(tmp_path, env, "pre-commit", own), work, symlinks=True)
    sh("pre-commit install -f >/dev/null", work, env)  # the copy's stub: same template, its own path
    time.sleep(0.02)
    fs = {"read": ["/etc", "/proc/self"], "exec": ["/usr/bin", "/bin", "/usr/lib/git-core"], "write": ["."]}
    policy = cage.policy(fs=fs if case != "twin: opt-out key" else {**fs, "protect_defaults": False},
                         env={"pass": [], "set": {"PATH": "/usr/bin:/bin", "HOME": str(work), **GIT_ENV}})
    target = "notes.txt" if case == "twin: other files" else ".pre-commit-config.yaml"
    content = pre_commit_config(pwned).replace("\n", "\\n")
    result = cage.run(argv=["/bin/sh", "-c", f"printf '{content}' > {target} && git add {target} && echo WROTE"],
                      policy=policy, via="api")
    if case == "rewrite":
        if tier == "tier":
            assert "WROTE" not in result.out and "Read-only file system" in result.err, result
        else:
            assert "WROTE" in result.out and result.rc == 125, result
            assert ".pre-commit-config.yaml" in result.err and "launch content put back" in result.err, result
    else:
        assert "WROTE" in result.out and result.rc == 0, result
    commit = operators_commit(work, env, "operator")
    if case == "twin: opt-out key":
        assert pwned.exists(), "the opt-out twin is not real: the rewritten config did not run"
        return
    assert not pwned.exists(), "the operator's commit ran the command's pre-commit config"
    if case == "rewrite" and tier == "no-tier":
        # the launch content is back, the planted one still staged: pre-commit refuses to run
        assert commit.returncode != 0 and "unstaged" in commit.stdout + commit.stderr, commit
    else:
        assert own.exists(), f"the operator's own pre-commit hook did not run after the run: {commit}"


# --- a directory of the manager's renamed into place (rvgit6, session 6 review) ------------------

RENAMED = {
    # lefthook's script directory renamed in from tracked files: the scripts keep their ctime
    # (a rename changes only the moved directory's), all older than the launch
    "lefthook script directory renamed in": (
        "mv .lefthook tests/fx && printf 'touch {pwned}\\n' > tests/fx/pre-commit/lint.sh",
        "rm -rf .lefthook-gone; mv tests/fx .lefthook", ".lefthook/pre-commit/lint.sh"),
    # one level down: `.lefthook` kept, its `pre-commit/` replaced by a tracked directory
    "lefthook hook directory renamed in": (
        "mkdir -p tests/fx && printf 'touch {pwned}\\n' > tests/fx/lint.sh",
        "mv .lefthook/pre-commit tests/old && mv tests/fx .lefthook/pre-commit", ".lefthook/pre-commit/lint.sh"),
    # `.config/` absent at launch (nothing to protect then): a tracked directory holding a
    # lefthook-local.yml renamed to `.config`
    ".config renamed in": (
        "mkdir -p tests/cfg && printf '{pwned_lefthook}' > tests/cfg/lefthook-local.yml",
        "mv tests/cfg .config", ".config/lefthook-local.yml"),
}


@needs_tools
@pytest.mark.parametrize("attack", RENAMED)
def test_a_managers_directory_renamed_into_place_is_judged(tmp_path, env, attack):
    before, script, planted = RENAMED[attack]
    pwned, own = tmp_path / "PWNED", tmp_path / "OWN-HOOK"
    repo = managed_repo(tmp_path, env, "lefthook", own)
    (repo / "tests").mkdir()
    fill = dict(pwned=pwned, pwned_lefthook=lefthook_config(pwned).replace("\n", "\\n"))
    sh(before.format(**fill), repo, env)  # the project's tracked files, older than the launch
    time.sleep(0.05)
    snap = snapshot(repo, env)
    sh(script.format(**fill), repo, env)
    findings = snap.verify()
    # the attack is real: without the check the operator's next commit runs the command's program
    operators_commit(repo, env, "attack")
    assert pwned.exists(), f"the attack is not real: the operator's commit did not run {planted}"
    pwned.unlink()
    assert planted in [os.path.relpath(f.path, repo) for f in findings], findings
    moved, failed = gitcheck.quarantine(findings, snap.writable)
    assert moved and not failed, (moved, failed)
    operators_commit(repo, env, "after")
    assert not pwned.exists(), f"the operator's commit ran the planted {planted} after the quarantine"


@needs_tools
def test_other_files_changed_beside_a_managers_config_are_not_flagged(tmp_path, env):
    """The twin: `.config/` holds the manager's config (the operator's, at launch) and other
    tools' files; the run rewrites one of those (the directory's ctime changes): the config,
    its launch bytes, is not flagged, and the operator's own hook still runs."""
    own = tmp_path / "OWN-HOOK"
    repo = managed_repo(tmp_path, env, "lefthook", own)
    (repo / ".config").mkdir()
    (repo / ".config" / "lefthook-local.yml").write_text(lefthook_config(own))
    (repo / ".config" / "tool.toml").write_text("a = 1\n")
    time.sleep(0.05)
    snap = snapshot(repo, env)
    sh("printf 'a = 2\\n' > .config/tool.toml.new && mv .config/tool.toml.new .config/tool.toml", repo, env)
    assert snap.verify() == []
    assert operators_commit(repo, env, "after").returncode == 0 and own.exists()


@needs_tools
def test_the_python_pre_commits_stub_runs_cannot_take_a_planted_pth(tmp_path, env):
    """(rvgit6, session 6 review) `pip install pre-commit` into the project's `.venv` and
    `pre-commit install` from it — the usual Python project: the stub's INSTALL_PYTHON is
    `.venv/bin/python`, which reads every `.pth` of its site-packages before pre-commit runs."""
    import glob
    import sysconfig

    pwned, own = tmp_path / "PWNED", tmp_path / "OWN-HOOK"
    repo = git_repo(tmp_path / "repo", env)
    (repo / ".gitignore").write_text(".venv/\n")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(repo / ".venv")], check=True)
    (site,) = glob.glob(str(repo / ".venv" / "lib" / "python3.*" / "site-packages"))
    # pre-commit importable from the project's venv (as `pip install pre-commit` there would make it)
    with open(os.path.join(site, "dev-tools.pth"), "w") as fh:
        fh.write(sysconfig.get_paths()["purelib"] + "\n")
    (repo / ".pre-commit-config.yaml").write_text(pre_commit_config(own))
    sh(f"'{repo}/.venv/bin/python' -m pre_commit install >/dev/null && git add -A && git commit -qm managed",
       repo, env)
    assert f"INSTALL_PYTHON={repo}/.venv/bin/python\n" in (repo / ".git/hooks/pre-commit").read_text()
    own.unlink()
    snap = snapshot(repo, env)
    sh(f"printf 'import os; open(\"%s\", \"w\").close()\\n' '{pwned}' > '{site}/zz_planted.pth'", repo, env)
    findings = snap.verify()
    operators_commit(repo, env, "attack")
    assert pwned.exists(), "the attack is not real: the operator's commit did not run the planted .pth"
    pwned.unlink()
    assert findings, "a .pth the operator's next commit runs was planted, and nothing was found"

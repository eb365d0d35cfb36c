"""The reuse check's short way for the protected paths (`fingerprint.Fingerprint`,
`protected.launch_reads`): before each reuse of a compiled cage (each gate step) it compares the
stats of what decided the protected paths instead of resolving them again. Whatever a step
changes, its answer must be the one a fresh resolution gives — checked here against
`protections.protected_paths` on trees changed the ways a step could — and where nothing
changed it must not resolve at all (the cost it exists for)."""

from __future__ import annotations

import os
import time

import pytest

from sandboy.confine import own_install, protections
from sandboy.confine.fingerprint import TICK_NS, Fingerprint
from sandboy.confine.protected import LEFTHOOK_STUB, PRE_COMMIT_STUB

SETTLE = (TICK_NS / 1e9) * 1.5  # stats younger than a tick prove nothing (fingerprint.TICK_NS)


@pytest.fixture
def tree(tmp_path, monkeypatch):
    """A write root `root`, a second one `other`, and the operator's home outside both."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.delenv("GIT_CONFIG_GLOBAL", raising=False)
    # the system config: a file of the test's (never the host's /etc/gitconfig), empty at first
    monkeypatch.setenv("GIT_CONFIG_SYSTEM", str(tmp_path / "system.gitconfig"))
    monkeypatch.delenv("GIT_CONFIG_NOSYSTEM", raising=False)
    root, other = tmp_path / "root", tmp_path / "other"
    root.mkdir()
    other.mkdir()
    return root, other, home


def _git_repo(root):
    (root / ".git" / "hooks").mkdir(parents=True)
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (root / ".git" / "config").write_text("[core]\n\tbare = false\n")


class _Resolutions:
    """Counts the full resolutions the check makes (the cost the short way avoids)."""

    def __init__(self, monkeypatch):
        self.calls = 0
        real = protections.protected_paths

        def counted(*args, **kw):
            self.calls += 1
            return real(*args, **kw)

        monkeypatch.setattr(protections, "protected_paths", counted)


def _recorded(roots, explicit=()):
    args = ([str(r) for r in roots], tuple(str(p) for p in explicit), True)
    fingerprint = Fingerprint((), (), args, protections.protected_paths(*args))
    # the tree was just made: its stats are younger than a tick, so the first check resolves
    # anew and takes them again — settled by then
    time.sleep(SETTLE)
    assert fingerprint.unchanged()
    return fingerprint, args


def _same_as_a_rebuild(fingerprint, args) -> bool:
    """The check's answer, asserted equal to what a fresh resolution says."""
    built = fingerprint._protected
    answer = fingerprint.unchanged()
    assert answer == (protections.protected_paths(*args) == built)
    return answer


def _pre_commit_stub(config=".pre-commit-config.yaml") -> str:
    return (f"#!/usr/bin/env bash\n{PRE_COMMIT_STUB.decode()}\n"
            f"ARGS=(hook-impl --config={config} --hook-type=pre-commit)\n")


# Each change a step could make, and whether it changes the protected paths. The tree before
# the change: `setup`; `root` holds a repository where `repo` is true.
CHANGES = {
    "a start-up file made": (False, None, lambda r, o, h: (r / ".bashrc").write_text("x"), True),
    "an ordinary file made": (False, None, lambda r, o, h: (r / "notes.txt").write_text("x"), False),
    "a start-up file made in the other root": (False, None, lambda r, o, h: (o / ".profile").write_text("x"), True),
    "a nested default made": (False, lambda r, o, h: (r / ".config").mkdir(),
                              lambda r, o, h: (r / ".config" / "fish").mkdir(), True),
    "a nested non-default made": (False, lambda r, o, h: (r / ".config").mkdir(),
                                  lambda r, o, h: (r / ".config" / "tool").mkdir(), False),
    "a repository made": (False, None, lambda r, o, h: _git_repo(r), True),
    "a start-up file replaced": (False, lambda r, o, h: (r / ".bashrc").write_text("x"),
                                 lambda r, o, h: (os.rename(r / ".bashrc", r / "old"), (r / ".bashrc").write_text("y")),
                                 False),
    "a start-up file replaced by a symlink": (
        False, lambda r, o, h: ((r / ".bashrc").write_text("x"), (r / "dot").mkdir(), (r / "dot" / "bashrc").write_text("y")),
        lambda r, o, h: (os.unlink(r / ".bashrc"), os.symlink("dot/bashrc", r / ".bashrc")), True),
    "hooks removed (made again)": (True, None, lambda r, o, h: os.rmdir(r / ".git" / "hooks"), False),
    "core.hooksPath set": (True, lambda r, o, h: (r / "githooks").mkdir(),
                           lambda r, o, h: open(r / ".git" / "config", "a").write("\thooksPath = githooks\n"), True),
    "an include added, mtime put back": (
        True, lambda r, o, h: (r / "common.gitconfig").write_text("[user]\n"),
        lambda r, o, h: _keep_mtime(r / ".git" / "config",
                                    lambda p: open(p, "a").write("[include]\n\tpath = ../common.gitconfig\n")), True),
    "the global config names hooks in the root": (
        True, lambda r, o, h: (r / "githooks").mkdir(),
        lambda r, o, h: (h / ".gitconfig").write_text(f"[core]\n\thooksPath = {r}/githooks\n"), True),
    "the system config names hooks in the root": (
        True, lambda r, o, h: (r / "githooks").mkdir(),
        lambda r, o, h: (h.parent / "system.gitconfig").write_text("[core]\n\thooksPath = githooks\n"), True),
    "pre-commit installed": (
        True, lambda r, o, h: (r / ".pre-commit-config.yaml").write_text("repos: []\n"),
        lambda r, o, h: (r / ".git" / "hooks" / "pre-commit").write_text(_pre_commit_stub()), True),
    "pre-commit's config made": (  # (in a directory that was there: only its ctime moves)
        True, lambda r, o, h: ((r / ".git" / "hooks" / "pre-commit").write_text(_pre_commit_stub("ci/pc.yaml")),
                               (r / "ci").mkdir()),
        lambda r, o, h: (r / "ci" / "pc.yaml").write_text("repos: []\n"), True),
    "pre-commit's stub rewritten to another config": (
        True, lambda r, o, h: ((r / ".git" / "hooks" / "pre-commit").write_text(_pre_commit_stub("a.yaml")),
                               (r / "b.yaml").write_text("")),
        lambda r, o, h: _keep_mtime(r / ".git" / "hooks" / "pre-commit",
                                    lambda p: open(p, "w").write(_pre_commit_stub("b.yaml"))), True),
    "lefthook's nested config made": (
        True, lambda r, o, h: ((r / ".git" / "hooks" / "pre-commit").write_text(f"#!/bin/sh\n{LEFTHOOK_STUB.decode()}\n"),
                               (r / ".config").mkdir()),
        lambda r, o, h: (r / ".config" / "lefthook.yml").write_text("pre-commit: {}\n"), True),
    "lefthook's script directory made": (
        True, lambda r, o, h: (r / ".git" / "hooks" / "pre-push").write_text(f"#!/bin/sh\n{LEFTHOOK_STUB.decode()}\n"),
        lambda r, o, h: (r / ".lefthook").mkdir(), True),
    "the hooks directory swapped for a link": (
        True, lambda r, o, h: (r / "elsewhere").mkdir(),
        lambda r, o, h: (os.rmdir(r / ".git" / "hooks"), os.symlink("../elsewhere", r / ".git" / "hooks")), True),
}


def _keep_mtime(path, change):
    st = os.stat(path)
    change(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # a step may put mtime back; never ctime


@pytest.mark.parametrize("name", CHANGES)
def test_after_a_change_the_check_answers_as_a_rebuild(tree, monkeypatch, name):
    root, other, home = tree
    repo, setup, change, changes_answer = CHANGES[name]
    if repo:
        _git_repo(root)
    if setup:
        setup(root, other, home)
    fingerprint, args = _recorded([root, other])
    resolutions = _Resolutions(monkeypatch)
    assert fingerprint.unchanged() and resolutions.calls == 0, "nothing changed: no resolution"
    change(root, other, home)
    assert _same_as_a_rebuild(fingerprint, args) is not changes_answer


def test_the_short_way_is_taken_where_nothing_changed(tree, monkeypatch):
    """A repository with pre-commit and lefthook installed, a home-like root with start-up files:
    unchanged, the check resolves nothing; an unchanged tree after a change that left the answer
    alone is trusted again once its stats are older than a tick."""
    root, other, home = tree
    _git_repo(root)
    (root / ".git" / "hooks" / "pre-commit").write_text(_pre_commit_stub())
    (root / ".git" / "hooks" / "pre-push").write_text(f"#!/bin/sh\n{LEFTHOOK_STUB.decode()}\n")
    (root / ".pre-commit-config.yaml").write_text("repos: []\n")
    (other / ".bashrc").write_text("x")
    (other / ".config" / "git").mkdir(parents=True)
    fingerprint, args = _recorded([root, other])
    assert fingerprint._watch is not None
    resolutions = _Resolutions(monkeypatch)
    for _ in range(3):
        assert fingerprint.unchanged()
    assert resolutions.calls == 0
    (root / "build.log").write_text("x")  # the root's ctime moves: resolved once more, same answer
    assert fingerprint.unchanged() and resolutions.calls == 1
    time.sleep(SETTLE)
    assert fingerprint.unchanged() and resolutions.calls == 2  # stats retaken, now settled
    assert fingerprint.unchanged() and resolutions.calls == 2


@pytest.mark.parametrize("shape", ["fs.protect", "core.hooksPath", "include", "symlinked default"])
def test_what_no_short_list_decides_is_resolved_at_every_check(tree, monkeypatch, shape):
    root, other, home = tree
    _git_repo(root)
    explicit = ()
    if shape == "fs.protect":
        (root / "Makefile").write_text("all:\n")
        explicit = (root / "Makefile",)
    elif shape == "core.hooksPath":
        (root / "githooks").mkdir()
        (root / ".git" / "config").write_text("[core]\n\thooksPath = githooks\n")
    elif shape == "include":
        (root / "common.gitconfig").write_text("")
        (root / ".git" / "config").write_text("[include]\n\tpath = ../common.gitconfig\n")
    else:
        (root / "dots").mkdir()
        (root / "dots" / "bashrc").write_text("")
        os.symlink("dots/bashrc", root / ".bashrc")
    fingerprint, args = _recorded([root, other], explicit)
    assert fingerprint._watch is None
    resolutions = _Resolutions(monkeypatch)
    assert fingerprint.unchanged() and resolutions.calls == 1


def test_an_installation_row_made_in_a_write_root_is_seen(tree, monkeypatch):
    """Sandboy's own installation rows a write root may hold are looked up at every check (their
    candidates are made once per cage): a console script that appears there is protected next."""
    root, other, home = tree
    script = root / "bin" / "sandboy"
    monkeypatch.setattr(own_install, "_RESOLVED", ((str(script), "console script", str(script), ()),))
    (root / "bin").mkdir()
    fingerprint, args = _recorded([root, other])
    resolutions = _Resolutions(monkeypatch)
    assert fingerprint.unchanged() and resolutions.calls == 0
    script.write_text("#!/bin/sh\n")  # (bin/ is no watched directory: only the row's lookup sees it)
    assert not _same_as_a_rebuild(fingerprint, args)


def test_a_path_directory_to_protect_is_resolved_at_every_check(tree, monkeypatch):
    """A directory of the operator's PATH inside a write root (`~/.local/bin` with the home
    granted: confine.path_dirs) is not decided by the stats: resolved at each check. Another
    PATH than the one the stats were taken under resolves anew too."""
    root, other, home = tree
    (root / "bin").mkdir()
    monkeypatch.setenv("PATH", f"{root}/bin:/usr/bin:/bin")
    args = ([str(root), str(other)], (), True, ())
    fingerprint = Fingerprint((), (), args, protections.protected_paths(*args))
    time.sleep(SETTLE)
    assert fingerprint.unchanged() and fingerprint._watch is None
    resolutions = _Resolutions(monkeypatch)
    assert fingerprint.unchanged() and resolutions.calls == 1
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # none inside a write root: the short way again, once settled
    assert not fingerprint.unchanged()  # (bin/ is no longer protected: a rebuild would differ)


def test_another_path_resolves_anew(tree, monkeypatch):
    root, other, home = tree
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    fingerprint, args = _recorded([root, other])
    resolutions = _Resolutions(monkeypatch)
    assert fingerprint.unchanged() and resolutions.calls == 0
    (root / "bin").mkdir()
    time.sleep(SETTLE)
    assert fingerprint.unchanged() and fingerprint._watch is not None  # (root's ctime moved: stats retaken, settled)
    resolutions.calls = 0
    monkeypatch.setenv("PATH", f"{root}/bin:/usr/bin:/bin")
    assert not _same_as_a_rebuild(fingerprint, args) and resolutions.calls >= 1


def test_another_home_or_config_home_resolves_anew(tree, tmp_path, monkeypatch):
    """The operator's global git configs are found through HOME and XDG_CONFIG_HOME: a caller
    changing them between runs (the API) gets its reuse check resolved anew — here the other
    home's config names hooks in the root, which become protected."""
    root, other, home = tree
    _git_repo(root)
    (root / "githooks").mkdir()
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "git").mkdir(parents=True)
    (elsewhere / "git" / "config").write_text(f"[core]\n\thooksPath = {root}/githooks\n")
    fingerprint, args = _recorded([root, other])
    monkeypatch.setenv("XDG_CONFIG_HOME", str(elsewhere))
    assert not _same_as_a_rebuild(fingerprint, args)


@pytest.mark.parametrize("variable", ["GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM", "GIT_CONFIG_NOSYSTEM"])
def test_another_git_config_variable_resolves_anew(tree, tmp_path, monkeypatch, variable):
    """git's variables choose which global and system configs it reads (session 11): a caller
    changing one between runs (the API) gets its reuse check resolved anew — a config naming
    hooks in the root is read (protected) or, with GIT_CONFIG_NOSYSTEM, no longer read."""
    root, other, home = tree
    _git_repo(root)
    (root / "githooks").mkdir()
    naming = tmp_path / "naming.gitconfig"
    naming.write_text("[core]\n\thooksPath = githooks\n")
    if variable == "GIT_CONFIG_NOSYSTEM":
        monkeypatch.setenv("GIT_CONFIG_SYSTEM", str(naming))
    fingerprint, args = _recorded([root, other])
    assert (f"{os.path.realpath(root)}/githooks" in fingerprint._protected[0]) == (variable == "GIT_CONFIG_NOSYSTEM")
    monkeypatch.setenv(variable, "1" if variable == "GIT_CONFIG_NOSYSTEM" else str(naming))
    assert not _same_as_a_rebuild(fingerprint, args)


@pytest.mark.parametrize("pause", [0, 0.002, 0.006, 0.012, 0.03, 0.06])
@pytest.mark.parametrize("young", [True, False])
def test_a_change_in_the_same_clock_tick_as_the_last_check_is_seen(tree, pause, young):
    """(rvgate7) The attacker's timing: pre-commit's config made by renaming a file already in
    its directory (same entry count: the directory's size stays) right after the check that took
    the stats — within the same coarse-clock tick (its ctime and mtime then stay too), or past the
    margin. `young`: the directory changed just before that check (its stats prove nothing yet:
    they must not be trusted); else it changed long before (trusted, and any later change moves
    its ctime). The next check must answer as a rebuild: the config protected."""
    root, other, home = tree
    _git_repo(root)
    (root / ".git" / "hooks" / "pre-commit").write_text(_pre_commit_stub("ci/pc.yaml"))
    (root / "ci").mkdir()
    fingerprint, args = _recorded([root, other])
    for round_ in range(5):
        (root / "ci" / "junk").write_text("repos: []\n")
        if not young:
            time.sleep(SETTLE)
        assert _same_as_a_rebuild(fingerprint, args)  # nothing protected changed yet: resolved, stats retaken
        assert (fingerprint._watch is not None) is not young  # trusted only where settled
        time.sleep(pause)
        os.rename(root / "ci" / "junk", root / "ci" / "pc.yaml")
        assert not _same_as_a_rebuild(fingerprint, args), round_
        os.unlink(root / "ci" / "pc.yaml")  # (back to the recorded answer for the next round)


def test_a_hook_stub_renamed_into_place_with_the_same_size_and_mtime_is_seen(tree):
    """(rvgate7) pre-commit's stub replaced by rename with one of the same size and mtime naming
    another config: the inode and the hooks directory's ctime move, never both kept."""
    root, other, home = tree
    _git_repo(root)
    hooks = root / ".git" / "hooks"
    (hooks / "pre-commit").write_text(_pre_commit_stub("a.yaml"))
    (root / "a.yaml").write_text("")
    (root / "b.yaml").write_text("")
    fingerprint, args = _recorded([root, other])
    st = os.stat(hooks / "pre-commit")
    (root / "stub").write_text(_pre_commit_stub("b.yaml"))
    os.utime(root / "stub", ns=(st.st_atime_ns, st.st_mtime_ns))
    os.rename(root / "stub", hooks / "pre-commit")
    assert not _same_as_a_rebuild(fingerprint, args)


def test_a_write_root_of_slash_lists_the_directories_down_to_a_default(monkeypatch):
    """launch_reads' walk down to a default path tested "inside the root" by `root + "/"`: for
    the write root "/" that is "//", so nothing below it was listed — a `.config/git/config`
    made inside a `/.config` that existed at launch changed no stat the reuse check looked at.
    Now `is_within` (the project's one rule) decides, and "/" lists its way down like any root."""
    from sandboy.confine import protected

    monkeypatch.setattr(protected, "_present_defaults", lambda root: [".config/git/config"])
    looked_up, _read = protected.launch_reads(["/"], (), True)
    assert ["/.config", "/.config/git", "/.config/git/config"] == [p for p in looked_up if p.startswith("/.config")]
    looked_up, _read = protected.launch_reads(["/usr"], (), True)  # any other root: as before
    assert ["/usr/.config", "/usr/.config/git", "/usr/.config/git/config"] == \
        [p for p in looked_up if p.startswith("/usr/.config")]

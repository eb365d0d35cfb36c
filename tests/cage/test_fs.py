"""Filesystem probes: every refused action next to the same action where the policy grants it.

Layout of each test's directory (the command's cwd is `work/`):

    work/rw/a.txt          fs.write = ["rw"]
    work/ro/b.txt          fs.read  = ["ro"]
    outside/secret.txt     granted nowhere
"""

from __future__ import annotations

import os

import pytest

pytestmark = pytest.mark.needs_kernel

# Landlock refuses a cross-directory link/rename without REFER on both sides with EXDEV,
# and a missing MAKE_*/REMOVE_* right with EACCES: either way the action did not happen.
REFUSED_REFER = ("EACCES", "EXDEV", "EROFS")
# A write to a denied path inside a write root: Landlock's EACCES, or under the namespace tier
# EROFS first (the path is bound read-only so that its metadata cannot change: redcage9, ADR 0009)
REFUSED_WRITE = ("EACCES", "EROFS")


@pytest.fixture
def tree(cage):
    (cage.work / "rw").mkdir()
    (cage.work / "rw" / "a.txt").write_text("a")
    (cage.work / "ro").mkdir()
    (cage.work / "ro" / "b.txt").write_text("b")
    (cage.root / "outside").mkdir()
    (cage.root / "outside" / "secret.txt").write_text("TOPSECRET")
    cage.tree_policy = cage.policy(fs={"read": ["ro"], "write": ["rw"]})
    return cage


def run(cage, *args, **kw):
    return cage.run(*args, policy=cage.tree_policy, **kw)


@pytest.mark.without_namespaces
@pytest.mark.parametrize("via", ["api", "cli"])
def test_write_outside_write_list_refused(tree, via):
    assert run(tree, "write", "ro/b.txt", via=via).out == "EACCES"
    assert run(tree, "write", "../outside/secret.txt", via=via).out == "EACCES"
    assert (tree.work / "ro" / "b.txt").read_text() == "b"
    assert run(tree, "write", "rw/a.txt", via=via).ok
    assert (tree.work / "rw" / "a.txt").read_text() == "ax"


@pytest.mark.without_namespaces
def test_create_outside_write_list_refused(tree):
    assert run(tree, "create", "ro/new").out == "EACCES"
    assert run(tree, "mkdir", "ro/newdir").out == "EACCES"
    assert run(tree, "symlink", "/", "ro/newlink").out == "EACCES"
    assert run(tree, "create", "new-in-cwd").out == "EACCES"
    assert not (tree.work / "ro" / "new").exists()
    assert run(tree, "create", "rw/new").ok
    assert run(tree, "mkdir", "rw/newdir").ok


@pytest.mark.without_namespaces
def test_delete_outside_write_list_refused(tree):
    assert run(tree, "unlink", "ro/b.txt").out == "EACCES"
    assert (tree.work / "ro" / "b.txt").exists()
    assert run(tree, "unlink", "rw/a.txt").ok
    assert not (tree.work / "rw" / "a.txt").exists()


def test_rename_out_of_or_into_write_list_refused(tree):
    assert run(tree, "rename", "rw/a.txt", "ro/a.txt").out in REFUSED_REFER
    assert run(tree, "rename", "ro/b.txt", "rw/b.txt").out in REFUSED_REFER
    assert run(tree, "rename", "../outside/secret.txt", "rw/s.txt").out in REFUSED_REFER
    assert (tree.work / "ro" / "b.txt").exists() and not (tree.work / "rw" / "b.txt").exists()
    (tree.work / "rw" / "sub").mkdir()
    assert run(tree, "rename", "rw/a.txt", "rw/sub/a.txt").ok  # REFER inside the write list
    assert (tree.work / "rw" / "sub" / "a.txt").read_text() == "a"


@pytest.mark.without_namespaces
def test_hard_link_out_of_or_into_write_list_refused(tree):
    # A hard link of the secret into a writable directory would make it readable there.
    assert run(tree, "link", "../outside/secret.txt", "rw/s.txt").out in REFUSED_REFER
    assert run(tree, "link", "ro/b.txt", "rw/b.txt").out in REFUSED_REFER
    assert run(tree, "link", "rw/a.txt", "ro/a.txt").out in REFUSED_REFER
    assert not (tree.work / "rw" / "s.txt").exists()
    assert run(tree, "link", "rw/a.txt", "rw/a2.txt").ok


@pytest.mark.without_namespaces
def test_truncate_outside_write_list_refused(tree):
    assert run(tree, "truncate", "ro/b.txt").out == "EACCES"
    assert run(tree, "open-trunc", "ro/b.txt").out == "EACCES"
    assert (tree.work / "ro" / "b.txt").read_text() == "b"
    assert run(tree, "truncate", "rw/a.txt").ok
    assert (tree.work / "rw" / "a.txt").read_text() == ""


@pytest.mark.parametrize("via", ["api", "cli"])
def test_read_secret_outside_read_list_refused(tree, via):
    r = run(tree, "read", "../outside/secret.txt", via=via)
    assert r.out == "EACCES" and "TOPSECRET" not in r.out
    assert run(tree, "ls", "../outside", via=via).out == "EACCES"
    assert run(tree, "read", "ro/b.txt", via=via).out == "ok b"


@pytest.mark.without_namespaces
def test_symlink_pointing_out_is_not_a_way_out(tree):
    os.symlink(tree.root / "outside" / "secret.txt", tree.work / "rw" / "planted")
    assert run(tree, "read", "rw/planted").out == "EACCES"
    # ... nor one the command makes itself
    assert run(tree, "symlink", "../../outside/secret.txt", "rw/made").ok
    assert run(tree, "read", "rw/made").out == "EACCES"
    assert run(tree, "write", "rw/made").out == "EACCES"
    os.symlink("../ro/b.txt", tree.work / "rw" / "inside")
    assert run(tree, "read", "rw/inside").out == "ok b"


def test_exec_outside_exec_list_refused(cage):
    # /usr is readable (the probe needs libc) but not executable.
    assert cage.run("exec", "/usr/bin/true").out == "EACCES"
    allowed = cage.policy(fs={"exec": ["/usr/bin"]})
    # A dynamically linked program from the exec list starts: its ELF interpreter is granted.
    assert cage.run("exec", "/usr/bin/true", policy=allowed).rc == 0


def test_exec_outside_exec_list_exit_126(cage):
    r = cage.cli(["--", "/usr/bin/true"], cage.policy())
    assert r.rc == 126, r
    assert cage.cli(["--", "/usr/bin/true"], cage.policy(fs={"exec": ["/usr/bin"]})).rc == 0


@pytest.fixture
def deny_tree(cage):
    w = cage.work
    (w / ".env").write_text("TOKEN=1")
    (w / "README").write_text("readme")
    (w / "sub").mkdir()
    (w / "sub" / "key.pem").write_text("KEY")
    (w / "sub" / "ok.txt").write_text("fine")
    (w / "secrets").mkdir()
    (w / "secrets" / "x").write_text("x")
    (w / "out").mkdir()
    return cage


@pytest.mark.parametrize("via", ["api", "cli"])
def test_deny_inside_granted_dir(deny_tree, via):
    policy = deny_tree.policy(fs={"write": ["."], "deny": [".env", "**/*.pem", "secrets"]})

    def probe(*args):
        return deny_tree.run(*args, policy=policy, via=via)

    assert probe("read", ".env").out == "EACCES"
    assert probe("read", "sub/key.pem").out == "EACCES"
    assert probe("read", "secrets/x").out == "EACCES"
    assert probe("write", ".env").out in REFUSED_WRITE
    # Siblings stay readable and writable; the split directories stay listable.
    assert probe("read", "README").out == "ok readme"
    assert probe("read", "sub/ok.txt").out == "ok fine"
    assert probe("write", "sub/ok.txt").ok
    assert probe("ls", ".").ok and probe("ls", "sub").ok
    assert probe("create", "out/new").ok  # a directory that was not split


def test_denied_directory_stays_listable_known_gap(deny_tree):
    """Landlock rules are hierarchical and only grant: READ_DIR on a split directory (kept so
    `ls .` works, docs/design.md) also covers every directory beneath it, the denied one included.
    A denied directory's file *names* stay listable; their contents do not. Asserted as it is."""
    (deny_tree.work / "secrets" / "deeper").mkdir()
    policy = deny_tree.policy(fs={"read": ["."], "deny": ["secrets"]})
    assert deny_tree.run("read", "secrets/x", policy=policy).out == "EACCES"
    assert deny_tree.run("ls", "secrets", policy=policy).ok
    assert deny_tree.run("ls", "secrets/deeper", policy=policy).ok


def test_denied_file_cannot_be_moved_or_linked_out(deny_tree):
    policy = deny_tree.policy(fs={"write": ["."], "deny": [".env", "**/*.pem"]})
    for args in (("rename", ".env", "out/env"), ("link", ".env", "out/env"),
                 ("rename", "sub/key.pem", "out/key"), ("link", "sub/key.pem", "out/key"),
                 ("unlink", ".env"), ("truncate", ".env")):
        assert deny_tree.run(*args, policy=policy).out in REFUSED_REFER, args
    assert not (deny_tree.work / "out" / "env").exists()
    assert (deny_tree.work / ".env").read_text() == "TOKEN=1"
    # Accepted by docs/design.md: a split directory takes no new files.
    assert deny_tree.run("create", "new", policy=policy).out == "EACCES"


@pytest.mark.without_namespaces
def test_deny_split_does_not_follow_planted_symlinks(deny_tree):
    """The working copy is untrusted: a symlink next to a denied file must not turn the
    per-sibling grants made by the split into a grant on the symlink's target."""
    (deny_tree.root / "outside").mkdir()
    (deny_tree.root / "outside" / "secret.txt").write_text("TOPSECRET")
    os.symlink(deny_tree.root / "outside", deny_tree.work / "evil")
    os.symlink("/", deny_tree.work / "root")
    policy = deny_tree.policy(fs={"write": ["."], "deny": [".env"]})
    assert deny_tree.run("read", "evil/secret.txt", policy=policy).out == "EACCES"
    assert deny_tree.run("read", "../outside/secret.txt", policy=policy).out == "EACCES"
    assert deny_tree.run("create", "root/tmp/sandboy-escape", policy=policy).out == "EACCES"
    assert not os.path.exists("/tmp/sandboy-escape")
    assert deny_tree.run("read", "README", policy=policy).out == "ok readme"



def test_deny_glob_survives_symlink_loops(deny_tree):
    """`**` must not follow symlinks: three links to `.` made the launch walk 3^40 paths."""
    for name in "abc":
        os.symlink(".", deny_tree.work / "sub" / name)
    policy = deny_tree.policy(fs={"read": ["."], "deny": ["**/*.pem"]})
    # via the CLI: the subprocess timeout bounds a hang in the launch itself
    assert deny_tree.run("read", "sub/key.pem", policy=policy, via="cli", timeout=20).out == "EACCES"
    assert deny_tree.run("read", "sub/a/a/b/key.pem", policy=policy).out == "EACCES"
    assert deny_tree.run("read", "sub/c/ok.txt", policy=policy).out == "ok fine"


@pytest.mark.parametrize("pattern", ["**/*.pem", "*.pem", "sub/*", "**", "**/**/ok.txt", ".*", "s*/k*",
                                     "**/sub/*.txt", "sub/**", "[.]env"])
def test_deny_glob_matches_like_glob_without_symlinks(deny_tree, pattern):
    import glob

    from sandboy.confine.deny_globs import glob_nofollow

    base = str(deny_tree.work)
    want = set(glob.glob(os.path.join(base, pattern), recursive=True, include_hidden=True))
    got = set(glob_nofollow(os.path.join(base, pattern)))
    assert {p.rstrip("/") for p in got} == {p.rstrip("/") for p in want}


def test_sandboy_cache_is_never_reachable(cage, monkeypatch):
    """The parse cache (and the compiled adapter components) must not be writable from a cage
    even when the policy grants its parent: a poisoned entry would widen the next run of the
    same, unchanged policy file."""
    home = cage.work / "home"
    cache = home / ".cache" / "sandboy"
    (cache / "policies").mkdir(parents=True)
    (cache / "policies" / "entry.marshal").write_bytes(b"x")
    monkeypatch.setenv("SANDBOY_CACHE_DIR", str(cache))
    policy = cage.policy(fs={"write": [str(home)]})
    assert cage.run("write", cache / "policies" / "entry.marshal", policy=policy).out in REFUSED_WRITE
    assert cage.run("create", cache / "policies" / "new.marshal", policy=policy).out in REFUSED_WRITE
    assert cage.run("read", cache / "policies" / "entry.marshal", policy=policy).out == "EACCES"
    # the twin: the rest of the granted directory is writable as the policy says
    (home / ".cache" / "pip").mkdir()
    assert cage.run("create", home / ".cache" / "pip" / "wheel", policy=policy).ok

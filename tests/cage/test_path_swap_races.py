"""Check-then-use by path in the parent's own file work (session 10): the parent, often root,
checked that a path was no symlink and then acted THROUGH the path — a concurrent caged run
sharing the write root (or any process of the caller) swapped a component for a symlink in
between, and the parent's mkdir/create/chmod/chown landed where the symlink pointed.

Each probe runs the code many times while a forked driver swaps the path for a symlink in a loop
(renameat2 RENAME_EXCHANGE: the swap is atomic, the path is always one or the other), bounded by
a count and a time, and asserts from the host side that nothing outside changed. No timing is
asserted: a run that never hit the window passes (the fixed code has no window), while the old
code was caught in every run measured here. Each probe has a twin without the driver that shows
the legitimate work is still done."""

import contextlib
import ctypes
import os
import stat
import time


from sandboy.confine import cleanup, protected
from sandboy.confine.loosened import ModeGuard, guarded_paths

AT_FDCWD = -100
RENAME_EXCHANGE = 2
ROUNDS = 20000       # calls of the code under test, at most ...
SECONDS = 3.0        # ... and at most this long (the old code was caught within 0.1 s here)
_libc = ctypes.CDLL(None, use_errno=True)


@contextlib.contextmanager
def swapping(first: str, second: str):
    """A forked child exchanging `first` and `second` (one a directory, one a symlink) as fast as it
    can until the block ends; killed by its own pid. The block starts once it has swapped (on a
    loaded machine a forked child may get no CPU before a bounded loop of calls is over)."""
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            a, b = os.fsencode(first), os.fsencode(second)
            if _libc.renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE) == 0:
                os.write(ready_w, b"1")
            while True:
                _libc.renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE)
        finally:
            os._exit(0)
    os.close(ready_w)
    try:
        assert os.read(ready_r, 1) == b"1", "the driver could not swap (renameat2 RENAME_EXCHANGE)"
        yield
    finally:
        os.close(ready_r)
        os.kill(pid, 9)
        os.waitpid(pid, 0)


def _until_done():
    deadline = time.monotonic() + SECONDS
    for _ in range(ROUNDS):
        if time.monotonic() > deadline:
            return
        yield


def _git_dir_without_hooks(tmp_path):
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    victim = tmp_path / "victim"  # outside: what the symlink points at
    victim.mkdir()
    (root / ".swap").symlink_to(victim)
    return root, victim


def test_a_git_directory_swapped_for_a_symlink_while_it_is_completed_gets_nothing_outside(tmp_path):
    root, victim = _git_dir_without_hooks(tmp_path)
    git_fd = os.open(root / ".git", os.O_RDONLY | os.O_DIRECTORY)  # the real one, wherever its name is
    try:
        with swapping(str(root / ".git"), str(root / ".swap")):
            for _ in _until_done():
                protected._complete_git_dir(str(root))
                assert os.listdir(victim) == [], "made through the swapped-in symlink"
                for name in ("hooks", "config"):  # so that the next call makes them again
                    with contextlib.suppress(FileNotFoundError):
                        os.rmdir(name, dir_fd=git_fd) if name == "hooks" else os.unlink(name, dir_fd=git_fd)
    finally:
        os.close(git_fd)
    assert os.listdir(victim) == []


def test_a_git_directory_without_hooks_or_config_is_completed(tmp_path):
    root, victim = _git_dir_without_hooks(tmp_path)
    protected._complete_git_dir(str(root))
    assert stat.S_ISDIR(os.lstat(root / ".git" / "hooks").st_mode)
    assert stat.S_ISREG(os.lstat(root / ".git" / "config").st_mode)
    # and a `.git` that IS a symlink is left alone (the one check the old code had)
    other = tmp_path / "other"
    (other / "real").mkdir(parents=True)
    (other / "real" / "HEAD").write_text("ref: refs/heads/main\n")
    (other / ".git").symlink_to(other / "real")
    protected._complete_git_dir(str(other))
    assert sorted(os.listdir(other / "real")) == ["HEAD"]
    assert os.listdir(victim) == []


def _loosened_git_dir(tmp_path):
    """A write root whose `.git/hooks` the command made 0777 (put_back changes it back), and a
    directory outside with a `hooks` of the same launch mode 0755 — taken 0777 too, so a put-back
    reaching it through a symlink shows as its mode changing."""
    root = tmp_path / "W"
    hooks = root / ".git" / "hooks"
    hooks.mkdir(parents=True)
    victim = tmp_path / "victim"
    (victim / "hooks").mkdir(parents=True)
    for path in (root, root / ".git", hooks):
        os.chmod(path, 0o755)
    guard = ModeGuard(guarded_paths([str(root)], [str(hooks)]))
    os.chmod(victim / "hooks", 0o777)
    (root / ".swap").symlink_to(victim)
    return root, hooks, victim, guard


def test_a_loosened_directory_swapped_for_a_symlink_while_it_is_put_back_changes_nothing_outside(tmp_path):
    root, hooks, victim, guard = _loosened_git_dir(tmp_path)
    hooks_fd = os.open(hooks, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with swapping(str(root / ".git"), str(root / ".swap")):
            for _ in _until_done():
                os.chmod(f"/proc/self/fd/{hooks_fd}", 0o777)  # loosened again by "the command"
                guard.put_back()
                assert stat.S_IMODE(os.lstat(victim / "hooks").st_mode) == 0o777, "put back through the symlink"
    finally:
        os.close(hooks_fd)


def test_a_loosened_directory_is_put_back(tmp_path):
    root, hooks, victim, guard = _loosened_git_dir(tmp_path)
    os.chmod(hooks, 0o777)
    assert [path for path, _why in guard.put_back()] == [str(hooks)]
    assert stat.S_IMODE(os.lstat(hooks).st_mode) == 0o755
    assert stat.S_IMODE(os.lstat(victim / "hooks").st_mode) == 0o777


def test_a_private_tmp_swapped_for_a_symlink_while_it_is_emptied_changes_nothing_outside(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.mkdir()
    os.chmod(victim, 0o755)
    (victim / "keep").write_text("the operator's")
    (tmp_path / "swap").symlink_to(victim)
    with swapping(str(tmp), str(tmp_path / "swap")):
        for _ in _until_done():
            cleanup.empty_dir(str(tmp))
            assert stat.S_IMODE(os.lstat(victim).st_mode) == 0o755, "chmod'ed through the symlink"
            assert os.listdir(victim) == ["keep"]


def test_a_private_tmp_locked_by_the_command_is_emptied(tmp_path):
    tmp = tmp_path / "tmp"
    (tmp / "a" / "b").mkdir(parents=True)
    (tmp / "a" / "b" / "f").write_text("x")
    os.chmod(tmp / "a", 0)
    os.chmod(tmp, 0)
    assert cleanup.empty_dir(str(tmp))
    assert os.listdir(tmp) == [] and stat.S_IMODE(os.lstat(tmp).st_mode) == 0o700

"""landlock.existing_realpath: the kernel's answer must be exactly `os.path.realpath` where the
path exists (`os.path.exists`) and None where it does not — every grant, deny and the cache
directory are canonicalised by it, and canonical paths decide how grants compare with denies."""

import os

import pytest

from sandboy.confine import landlock


def _expected(path):
    return os.path.realpath(path) if os.path.exists(path) else None


@pytest.fixture
def tree(tmp_path):
    """Symlinks of every shape realpath handles: relative, absolute, chained, through `..`,
    dangling, looping, to a file, to a directory, a name with spaces and ' (deleted)'."""
    t = tmp_path
    (t / "real" / "sub").mkdir(parents=True)
    (t / "real" / "file").write_text("x")
    (t / "real" / "sub" / "f").write_text("y")
    (t / "real" / "x (deleted)").write_text("z")
    os.symlink("real", t / "rel")
    os.symlink(str(t / "real"), t / "abs")
    os.symlink("rel", t / "chain")
    os.symlink("real/sub/../file", t / "dotdot")
    os.symlink("../real/file", t / "real" / "sub" / "up")
    os.symlink("missing", t / "dangling")
    os.symlink("loop2", t / "loop1")
    os.symlink("loop1", t / "loop2")
    os.symlink("real/file", t / "to_file")
    (t / "with space").mkdir()
    os.symlink(str(t / "with space"), t / "to_space")
    return t


CASES = ["real", "real/file", "real/sub", "rel", "abs", "chain", "chain/sub/f", "dotdot", "real/sub/up",
         "dangling", "loop1", "to_file", "to_file/x", "with space", "to_space", "missing", "real/file/below",
         "real/x (deleted)", "rel/x (deleted)"]


@pytest.mark.parametrize("name", CASES)
def test_same_answer_as_realpath(tree, name):
    path = str(tree / name)
    assert landlock.existing_realpath(path) == _expected(path)


@pytest.mark.parametrize("path", ["/", "/usr", "/bin", "/lib64/ld-linux-x86-64.so.2", "/dev/null", "/dev/fd",
                                  "/dev/stdin", "/dev/stdout", "/proc", "/proc/self", "/proc/self/fd/0",
                                  "/proc/self/cwd", "/proc/1/root/etc", "/etc/mtab", "/nonexistent/x"])
def test_same_answer_as_realpath_for_system_paths(path):
    """Includes paths into /proc (magic links: realpath reads them as text) and links to them."""
    assert landlock.existing_realpath(path) == _expected(path)


def test_a_pipe_behind_a_magic_link_is_left_to_realpath():
    """/proc/self/fd/N of a pipe: the kernel names it 'pipe:[...]', which is no path."""
    r, w = os.pipe()
    try:
        for fd in (r, w):
            path = f"/dev/fd/{fd}"
            assert landlock.existing_realpath(path) == _expected(path)
    finally:
        os.close(r)
        os.close(w)


def test_a_directory_without_search_permission(tree):
    """As root nothing is refused; as another uid a 0700 directory hides what is below it
    (both answers: missing). Run in a child that drops to nobody where we are root."""
    secret = tree / "real" / "locked"
    secret.mkdir()
    (secret / "in").write_text("s")
    secret.chmod(0o700)
    os.chmod(tree, 0o755)
    os.chmod(tree.parent, 0o755)
    path = str(secret / "in")
    if os.geteuid() != 0:
        assert landlock.existing_realpath(path) == _expected(path)
        return
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setgid(65534)
            os.setuid(65534)
            code = 0 if (landlock.existing_realpath(path) == _expected(path) and
                         landlock.existing_realpath(path) is None) else 3
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0 and not os.access(tree, os.X_OK):
        pytest.skip("the temporary directory is not searchable by nobody here")
    assert os.waitstatus_to_exitcode(status) == 0


def test_a_nul_byte_is_missing_not_an_error():
    assert landlock.existing_realpath("/usr\0x") is None

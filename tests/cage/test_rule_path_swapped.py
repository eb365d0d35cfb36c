"""A Landlock rule is added to the path that was checked, not to where a symlink swapped in since
leads. Rule paths are realpaths (landlock.existing_realpath) or entries the deny split found; the
ruleset is filled later (build_ruleset: in the same process, or at each reuse of a compiled cage).
A directory on the way to a rule path that became a symlink in between (another process of the
operator's user sharing the tree) must not grant its target. Before, only the last component was
opened O_NOFOLLOW: the components above it were followed, and the probe read the secret.

Judged from the host side: a child fills the ruleset, restricts itself and tries to read the
file the swap leads to; the twin reads the granted tree when nothing was swapped. Each case also
runs with openat2 refused by a seccomp filter (ENOSYS, as Sandboy's own filter answers: a
Sandboy run inside a cage), where the path is walked component by component."""

import ctypes
import os
import struct

import pytest

from sandboy.confine import landlock, seccomp
from sandboy.confine._libc import prctl, syscall
from sandboy.confine.hygiene import PR_SET_NO_NEW_PRIVS

SYS_SECCOMP, SECCOMP_SET_MODE_FILTER, ENOSYS = 317, 1, 38
# openat2 -> ENOSYS, everything else allowed
REFUSE_OPENAT2 = b"".join(struct.pack("<HBBI", *insn) for insn in [
    (seccomp.LD_W_ABS, 0, 0, seccomp.OFF_NR),
    (seccomp.JEQ_K, 0, 1, 437),
    (seccomp.RET_K, 0, 0, seccomp.errno_ret(ENOSYS)),
    (seccomp.RET_K, 0, 0, seccomp.RET_ALLOW),
])


def _reads_under_rules(rules, path: str, refuse_openat2: bool) -> tuple[bool, str]:
    """(whether a forked child that built `rules` into a ruleset and restricted itself by it can
    read `path`, the warnings of the build)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 2
        try:
            os.close(read_end)
            prctl(PR_SET_NO_NEW_PRIVS, 1)
            if refuse_openat2:
                program = ctypes.create_string_buffer(REFUSE_OPENAT2, len(REFUSE_OPENAT2))
                fprog = ctypes.create_string_buffer(struct.pack("<H6xQ", len(REFUSE_OPENAT2) // 8,
                                                                ctypes.addressof(program)), 16)
                syscall(SYS_SECCOMP, SECCOMP_SET_MODE_FILTER, 0, ctypes.addressof(fprog))
            warnings: list = []
            ruleset = landlock.build_ruleset(landlock.abi_version(), rules, landlock.READ, 0, (), (), 0,
                                             warnings.append)
            os.write(write_end, "\n".join(warnings).encode())
            syscall(landlock.SYS_LANDLOCK_RESTRICT_SELF, ruleset.fd, 0)
            try:
                with open(path) as fh:
                    fh.read()
                code = 0
            except PermissionError:
                code = 1
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as fh:
        warnings = fh.read().decode()
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    assert code in (0, 1), "the probe child failed before trying the read"
    return code == 0, warnings


@pytest.fixture
def layout(tmp_path):
    if landlock.abi_version() < 1:
        pytest.skip("no Landlock")
    granted = tmp_path / "work" / "a" / "b"
    granted.mkdir(parents=True)
    (granted / "ok").write_text("granted")
    secret = tmp_path / "secret" / "b"
    secret.mkdir(parents=True)
    (secret / "key").write_text("SECRET")
    rules = [(landlock.existing_realpath(str(granted)), landlock.READ)]
    return tmp_path, rules


@pytest.mark.parametrize("refuse_openat2", [False, True], ids=["openat2", "openat2-refused"])
def test_a_directory_above_a_rule_path_swapped_for_a_symlink_grants_nothing(layout, refuse_openat2):
    tmp_path, rules = layout
    work = tmp_path / "work"
    os.rename(work / "a", tmp_path / "a-moved")
    os.symlink(tmp_path / "secret", work / "a")  # work/a/b now leads to secret/b
    read, warnings = _reads_under_rules(rules, str(tmp_path / "secret" / "b" / "key"), refuse_openat2)
    assert not read
    assert rules[0][0] in warnings and "not granted" in warnings, warnings


@pytest.mark.parametrize("refuse_openat2", [False, True], ids=["openat2", "openat2-refused"])
def test_twin_the_rule_path_unchanged_is_granted(layout, refuse_openat2):
    tmp_path, rules = layout
    assert _reads_under_rules(rules, str(tmp_path / "work" / "a" / "b" / "ok"), refuse_openat2) == (True, "")
    assert _reads_under_rules(rules, str(tmp_path / "secret" / "b" / "key"), refuse_openat2) == (False, "")


@pytest.mark.parametrize("refuse_openat2", [False, True], ids=["openat2", "openat2-refused"])
def test_twin_the_root_and_a_file_as_rule_paths(layout, refuse_openat2):
    """/ itself (a rule path with no component) and a file rule are opened as before."""
    tmp_path, _ = layout
    ok = landlock.existing_realpath(str(tmp_path / "work" / "a" / "b" / "ok"))
    assert _reads_under_rules([(ok, landlock.READ_FILE)], ok, refuse_openat2) == (True, "")
    assert _reads_under_rules([("/", landlock.READ)], str(tmp_path / "secret" / "b" / "key"), refuse_openat2) \
        == (True, "")


@pytest.mark.parametrize("refuse_openat2", [False, True], ids=["openat2", "openat2-refused"])
def test_the_rule_path_itself_swapped_for_a_symlink_grants_nothing(layout, refuse_openat2):
    """The last component replaced by a symlink to the secret: opened as the link, refused with
    its own warning (the C executor's loop, `_native.add_path_rules`, hands it back to the
    same words), and its target stays unreadable."""
    tmp_path, rules = layout
    granted = tmp_path / "work" / "a" / "b"
    os.rename(granted, tmp_path / "b-moved")
    os.symlink(tmp_path / "secret" / "b", granted)
    read, warnings = _reads_under_rules(rules, str(tmp_path / "secret" / "b" / "key"), refuse_openat2)
    assert not read
    assert f"fs: {rules[0][0]} became a symlink while the rules were built; not granted" in warnings, warnings


@pytest.mark.parametrize("refuse_openat2", [False, True], ids=["openat2", "openat2-refused"])
def test_twin_a_file_given_directory_rights_gets_its_file_rights(layout, refuse_openat2):
    """A file rule asking for directory rights too (READ = READ_FILE | READ_DIR: a directory
    that became a file) gets the file's part, as the kernel takes no directory right on a file
    (EINVAL otherwise); missing rule paths are warned about, in order, and the rest still added."""
    tmp_path, _ = layout
    ok = landlock.existing_realpath(str(tmp_path / "work" / "a" / "b" / "ok"))
    gone = str(tmp_path / "gone")
    rules = [(gone, landlock.READ), (ok, landlock.READ), (gone + "2", landlock.READ)]
    read, warnings = _reads_under_rules(rules, ok, refuse_openat2)
    assert read
    assert warnings == f"fs: {gone}: No such file or directory; not granted\n" \
                       f"fs: {gone}2: No such file or directory; not granted", warnings

"""The plan cache (ADR 0028) against inputs of the build its key does not hold (review rvcache8).

Each probe makes a plan be kept, changes one thing a rebuild decides from, and checks from the
host side (the command's output, the entries on disk) that the next run confines as a rebuild
would."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sandboy.confine import namespaces

pytestmark = pytest.mark.needs_kernel

SANDBOY = os.path.join(os.path.dirname(sys.executable), "sandboy")
POLICY = 'version = 1\n[fs]\nread = ["/usr", "/lib", "/lib64", "/etc"{read}]\nexec = ["/usr/bin", "/bin"]\n{more}'

# Runs argv[1:] with close_range(2) answered EPERM by a seccomp filter (x86-64), as a container's
# or a service manager's syscall list without it does: Sandboy then marks each fd open at the
# build close-on-exec one by one (hygiene.plan_cloexec's fallback), a list of THIS process's fds.
NO_CLOSE_RANGE = r'''
import ctypes, os, struct, sys
prog = b"".join(struct.pack("<HBBI", *insn) for insn in (
    (0x20, 0, 0, 4), (0x15, 0, 2, 0xC000003E), (0x20, 0, 0, 0), (0x15, 1, 0, 436),
    (0x06, 0, 0, 0x7FFF0000), (0x06, 0, 0, 0x00050001)))
buf = ctypes.create_string_buffer(prog)
class Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl(38, 1, 0, 0, 0) or libc.prctl(22, 2, ctypes.byref(Fprog(len(prog) // 8, ctypes.addressof(buf))), 0, 0):
    raise OSError(ctypes.get_errno(), "seccomp")
os.execv(sys.argv[1], sys.argv[1:])
'''


@pytest.fixture
def tier():
    if not namespaces.availability()[0]:
        pytest.skip("the plan cache keeps runs under the namespace tier only")
    if os.uname().machine != "x86_64":
        pytest.skip("the close_range filter is written for x86-64")


def run(tmp_path: Path, *argv, prefix=(), cache="cache", env=None):
    """A real `sandboy run` with stdin /dev/null and pipes on 1-2 (a shape the cache keeps);
    `.hit`: it ran a kept plan (imported no compiler)."""
    environ = {k: v for k, v in os.environ.items()
               if k not in ("SANDBOY_NATIVE", "SANDBOY_NAMESPACES", "SANDBOY_PLAN_CACHE")}
    environ.update(SANDBOY_CACHE_DIR=str(tmp_path / cache), **(env or {}))
    proc = subprocess.run([*prefix, sys.executable, "-X", "importtime", SANDBOY, "run", "--policy",
                           str(tmp_path / "p.toml"), "--", *argv],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL, start_new_session=True,
                          env=environ, cwd=tmp_path / "work")
    imported = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert "sandboy.cli" in imported, proc.stderr
    proc.hit = "sandboy.confine.cage" not in imported
    proc.err = "\n".join(line for line in proc.stderr.splitlines() if not line.startswith("import time:"))
    assert "Traceback" not in proc.err, proc.err
    return proc


@pytest.fixture
def setup(tmp_path, tier):
    (tmp_path / "work").mkdir()
    (tmp_path / "p.toml").write_text(POLICY.format(read="", more=""))
    return tmp_path


def test_an_fd_inherited_where_close_range_is_refused_never_reaches_a_kept_plan(setup):
    """Where close_range is refused, the close-on-exec step lists the fds of the process that
    built the plan: a kept plan would leave an fd the caller handed in (a file outside every
    grant, a socket) open in the command. A rebuild marks it close-on-exec; so must every run:
    no plan is kept there, and a plan kept where close_range works is not run there."""
    tmp_path = setup
    secret = tmp_path / "secret"
    secret.write_text("SECRET-c1053")
    wrapper = tmp_path / "no_close_range.py"
    wrapper.write_text(NO_CLOSE_RANGE)
    refused = (sys.executable, str(wrapper))
    # the same environment for every run (it is a key): each through sh, handing in fd 8 or 9
    with_fd_8 = ("/bin/sh", "-c", 'exec 8<"$0"; exec "$@"', "/dev/null")
    with_fd_9 = ("/bin/sh", "-c", 'exec 9<"$0"; exec "$@"', str(secret))

    def cat_fd_9(cache, prefix):
        after = run(tmp_path, "/bin/sh", "-c", "cat <&9", prefix=with_fd_9 + prefix, cache=cache)
        assert "SECRET-c1053" not in after.stdout, (after.hit, after.err)
        assert after.returncode != 0 and "Bad file descriptor" in after.err, after.err
        return after

    # built where close_range is refused: nothing kept
    built = run(tmp_path, "/bin/true", prefix=with_fd_8 + refused, cache="refused")
    assert built.returncode == 0 and not built.hit, built.err
    for _ in range(2):
        assert not cat_fd_9("refused", refused).hit
    assert not list((tmp_path / "refused" / "plans").glob("*.plan"))
    # kept where close_range works: not run where it is refused (the step fails: built anew)...
    assert run(tmp_path, "/bin/true", prefix=with_fd_8, cache="works").returncode == 0
    assert not cat_fd_9("works", refused).hit
    # ...and a hit where it works closes the inherited fd (twin)
    assert cat_fd_9("works", ()).hit


def test_an_entry_of_a_split_directory_swapped_for_a_symlink_does_not_lead_a_kept_rule(setup):
    """A split directory's entry that was a directory when the plan was kept got a rule by its
    path; replaced by a symlink of the same name (rename over it: the same listing), the kept
    rule opened again at a hit must not follow it to the denied directory (rule paths are opened
    with no symlink followed: ruleset._open_rule_path). A rebuild gives a link no rule."""
    tmp_path = setup
    data = tmp_path / "data"
    (data / "work").mkdir(parents=True)
    (data / "work" / "key").write_text("PUBLIC")
    (data / "secret").mkdir()
    (data / "secret" / "key").write_text("SECRET-7f3a")
    (tmp_path / "p.toml").write_text(POLICY.format(read=f', "{data}"', more=f'deny = ["{data}/secret"]\n'))
    run(tmp_path, "/bin/cat", str(data / "work" / "key"))
    first = run(tmp_path, "/bin/cat", str(data / "work" / "key"))
    assert first.hit and first.stdout == "PUBLIC"
    names = os.listdir(data)
    os.symlink("secret", data / "swap")
    os.rename(data / "work" / "key", tmp_path / "moved")
    os.rmdir(data / "work")
    os.rename(data / "swap", data / "work")
    assert os.listdir(data) == names  # the same names in the same order: only the kind changed
    for _ in range(2):
        after = run(tmp_path, "/bin/cat", str(data / "work" / "key"))
        assert "SECRET-7f3a" not in after.stdout and after.returncode != 0, (after.hit, after.err)


def test_no_environment_value_is_written_at_rest(setup):
    """An entry holds no value of the operator's environment (a token in it would sit in
    ~/.cache for backups, NFS homes and disk images to keep): neither one the policy passes to
    the command nor any other; the hit's command still sees the passed one. Host side: the bytes
    of every entry."""
    tmp_path = setup
    passed, other = "PASSED-" + os.urandom(8).hex(), "OTHER-" + os.urandom(8).hex()
    (tmp_path / "p.toml").write_text(POLICY.format(read="", more='[env]\npass = ["SECRET_MARKER"]\n'))
    env = {"SECRET_MARKER": passed, "UNPASSED_TOKEN": other}
    run(tmp_path, "/bin/sh", "-c", 'echo "$SECRET_MARKER"', env=env)
    hit = run(tmp_path, "/bin/sh", "-c", 'echo "$SECRET_MARKER"', env=env)
    assert hit.hit and hit.stdout == passed + "\n", (hit.hit, hit.err)
    entries = list((tmp_path / "cache" / "plans").iterdir())
    assert entries
    for entry in entries:
        data = entry.read_bytes()
        for marker in (passed, other):
            assert marker.encode() not in data, (entry, marker)


def test_a_fifo_put_where_a_kept_policy_was_is_the_loaders_error_not_a_hang(tmp_path):
    """rvcache8: the cache read the policy with a blocking open — a FIFO replacing a policy file
    that had an entry hung `sandboy run` for ever. Now: a miss, and the loader's exit 2."""
    from sandboy.confine import plan_cache

    fifo = tmp_path / "p.toml"
    os.mkfifo(fifo)
    started = time.monotonic()
    assert plan_cache._read_policy(str(fifo)) is None
    assert time.monotonic() - started < 5
    policy = tmp_path / "q.toml"
    policy.write_text("version = 1\n")
    assert plan_cache._read_policy(str(policy)) == b"version = 1\n"

"""Session 14's security review (rvsec14): attacks on what the session changed, each a test that
fails while the hole exists. Holes found and not yet closed by their owner are strict xfails that
name the hole (they start to pass — and so fail — once it is closed: then drop the mark).

- The masks over denies inside read-only grants (etc14's 5bc65aa, ADR 0029): a mask is a mount on
  a path's dentry; the host rewriting a secret while a cage runs (rename over it, unlink and
  create, a directory moved away and made anew — how passwd, visudo, ssh-keygen and package
  managers write) left the new file unmasked in the cage, readable through the grant's one rule.
  The masks were reverted (the split is back under the tier): the tier test is a guard now, and
  fails again if a path-based hiding comes back.
- The cache's seal key (cachekey14, cache_seal): held. Beside the keyring calls (refused by every
  filter: test_redteam_cage14), the key lives in the memory of the process that read the cache —
  a `sandboy.run()` caller, a gate — whose child the command is: its memory is out of reach
  (`/proc/<pid>/mem`, process_vm_readv: Landlock's ptrace scope without the tier, the PID
  namespace with it; this host has no Yama to do it instead).
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sandboy.confine import namespaces

pytestmark = pytest.mark.needs_kernel

SANDBOY = os.path.join(os.path.dirname(sys.executable), "sandboy")
SYSTEM = '"/usr", "/lib", "/lib64", "/bin"'

# The host's ways of rewriting a denied path while a cage runs: (what is denied, how it is
# rewritten). Each leaves the path holding NEW-SECRET, in a new inode.
REWRITES = {
    # passwd, chpasswd, useradd (/etc/shadow), visudo (/etc/sudoers): write a copy, rename over
    "file renamed over": ("s", lambda d: ((d / "s.new").write_text("NEW-SECRET\n"), (d / "s.new").rename(d / "s"))),
    # ssh-keygen -A and others: remove, then create
    "file removed and made": ("s", lambda d: ((d / "s").unlink(), (d / "s").write_text("NEW-SECRET\n"))),
    # the old one kept aside (a backup), a new one made in its place
    "file moved away and made": ("s", lambda d: ((d / "s").rename(d / "s.old"), (d / "s").write_text("NEW-SECRET\n"))),
    # a package's directory of keys replaced
    "directory moved away and made": ("k", lambda d: ((d / "k").rename(d / "k.old"), (d / "k").mkdir(),
                                                      (d / "k" / "key").write_text("NEW-SECRET\n"))),
}

# In the cage: the twin read (the cage is up, its masks made), then wait for the host's rewrite
# and read the denied path (a file, or the key in a directory).
WAIT_THEN_READ = 'cat data/a; while [ ! -e data/go ]; do sleep 0.02; done; cat data/{} 2>/dev/null; echo end'


def _run_while_the_host_rewrites(tmp_path: Path, rewrite: str, tier: bool) -> tuple:
    """`sandboy run` of WAIT_THEN_READ with `data` read-only and one path of it denied (`data/s`
    a file or `data/k` a directory, both holding OLD-SECRET); once the cage has printed the
    twin the host rewrites the denied path (REWRITES) and lets the cage go on. (rc, stdout, stderr)."""
    denied, rewritten = REWRITES[rewrite]
    data = tmp_path / "data"
    data.mkdir()
    (data / "a").write_text("TWIN\n")
    secret = data / ("s" if denied == "s" else "k/key")
    secret.parent.mkdir(exist_ok=True)
    secret.write_text("OLD-SECRET\n")
    policy = tmp_path / "p.toml"
    policy.write_text(f'version = 1\n[fs]\nread = [{SYSTEM}, "{data}"]\nexec = ["/usr/bin", "/bin"]\n'
                      f'deny = ["{data}/{denied}"]\n')
    env = {k: v for k, v in os.environ.items() if k not in ("SANDBOY_NATIVE", "SANDBOY_NAMESPACES")}
    env["SANDBOY_CACHE_DIR"] = str(tmp_path / "cache")
    if not tier:
        env["SANDBOY_NAMESPACES"] = "0"
    errors = tmp_path / "stderr"
    with open(errors, "w") as stderr:
        proc = subprocess.Popen([SANDBOY, "run", "--policy", str(policy), "--", "/bin/sh", "-c",
                                 WAIT_THEN_READ.format(secret.relative_to(data))],
                                cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=stderr, text=True, start_new_session=True)
    try:
        first = proc.stdout.readline()
        if first == "TWIN\n":  # the legitimate twin read: the cage is up, its masks made
            rewritten(data)
        (data / "go").touch()
        out = first + proc.stdout.read()
        rc = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()
    return rc, out, errors.read_text()


@pytest.mark.parametrize("rewrite", sorted(REWRITES))
def test_without_the_tier_a_secret_rewritten_during_the_run_stays_unreadable(tmp_path, rewrite):
    """The twin of the mask probe: Landlock's split grants the denied path's siblings by inode,
    so the new file (or directory) the host made at the denied name has no rule: refused."""
    rc, out, err = _run_while_the_host_rewrites(tmp_path, rewrite, tier=False)
    assert (rc, out) == (0, "TWIN\nend\n"), (out, err)
    assert "SECRET" not in err


@pytest.mark.parametrize("rewrite", sorted(REWRITES))
def test_under_the_tier_a_secret_rewritten_during_the_run_stays_unreadable(tmp_path, rewrite):
    """The host rewrites the denied path while the cage runs, the way passwd, visudo, ssh-keygen
    and package managers do; the cage must not read the new secret (host side: its bytes in the
    output), the twin is read."""
    if not namespaces.availability()[0]:
        pytest.skip(f"no namespace tier here: {namespaces.availability()[1]}")
    rc, out, err = _run_while_the_host_rewrites(tmp_path, rewrite, tier=True)
    assert (rc, out) == (0, "TWIN\nend\n"), (out, err)
    assert "SECRET" not in err


# In the cage: every readable byte of the memory of each pid named (the API caller) and its parent
# that /proc/<pid>/mem gives, into a file of the write root; process_vm_readv of each; and its
# own memory's first region (the twin: the same reader works where it may).
DUMP_MEMORY = r"""import ctypes, errno, os, sys
out, pids = sys.argv[1], [int(p) for p in sys.argv[2:]] + [os.getppid()]
libc = ctypes.CDLL(None, use_errno=True)

def dump(pid, sink, budget=256 << 20, first_only=False):
    try:
        maps, mem = open(f"/proc/{pid}/maps"), open(f"/proc/{pid}/mem", "rb", 0)
    except OSError as exc:
        return errno.errorcode.get(exc.errno, str(exc.errno))
    got = 0
    with maps, mem:
        for line in maps:
            span, perms = line.split()[:2]
            start, end = (int(x, 16) for x in span.split("-"))
            if "r" not in perms or got + end - start > budget:
                continue
            try:
                mem.seek(start)
                data = mem.read(end - start)
            except (OSError, OverflowError, ValueError):
                continue
            sink.write(data)
            got += len(data)
            if first_only and got:
                break
    return f"read {got}"

class Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("length", ctypes.c_size_t)]

buf = ctypes.create_string_buffer(4096)
with open(out, "wb") as sink:
    for pid in pids:
        print(pid, "mem", dump(pid, sink))
        try:
            with open(f"/proc/{pid}/maps") as maps:
                head = int(maps.readline().split("-")[0], 16)
        except (OSError, ValueError):
            head = 0x400000  # (where a non-PIE program starts: the call is refused before it looks)
        local, remote = Iovec(ctypes.addressof(buf), 4096), Iovec(head, 4096)
        n = libc.process_vm_readv(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
        print(pid, "vm_readv", n if n >= 0 else errno.errorcode.get(ctypes.get_errno(), "?"))
        if n > 0:
            sink.write(buf.raw[:n])
with open(out + ".self", "wb") as sink:
    print("self mem", dump("self", sink, first_only=True))
"""


@pytest.mark.parametrize("tier", [pytest.param("1", id="tier"), pytest.param("0", id="forced-off")])
def test_the_seal_key_in_the_api_callers_memory_is_out_of_the_commands_reach(tmp_path, monkeypatch, tier):
    """`sandboy.run()`'s caller has read the cache, so the seal key is in its memory, and the
    command is its child (same uid; without the tier, no PID namespace between them). The command
    reads what /proc/<pid>/mem and process_vm_readv give of its parent and of the caller: nothing
    (host side: the key's bytes are not in what it wrote). Twin: it reads its own memory."""
    import sandboy
    from sandboy import cache_seal
    from sandboy.policy.model import FsRules, Policy

    key = cache_seal.secret()
    if key is None:
        pytest.skip("no user keyring here: the cache is off, there is no key to read")
    if tier == "1" and not namespaces.availability()[0]:
        pytest.skip(f"no namespace tier here: {namespaces.availability()[1]}")
    monkeypatch.setenv("SANDBOY_NAMESPACES", tier)
    script = tmp_path / "dump.py"
    script.write_text(DUMP_MEMORY)
    dump, printed = tmp_path / "dump", tmp_path / "printed"
    policy = Policy(fs=FsRules(read=("/usr", "/lib", "/lib64", "/etc", "/bin", "/proc", str(script)),
                               exec=("/usr/bin", "/bin"), write=(str(tmp_path),)))
    with open(printed, "w") as fh:
        result = sandboy.run(["/usr/bin/python3", str(script), str(dump), str(os.getpid())], policy,
                             cwd=str(tmp_path), stdout=fh.fileno())
    answers = printed.read_text()
    assert result.returncode == 0, (result.error, answers)
    assert key not in dump.read_bytes(), ("the command read the seal key from the caller's memory", answers)
    assert f"{os.getpid()} mem read" not in answers and "vm_readv -1" not in answers, answers
    assert "vm_readv EPERM" in answers or "vm_readv ESRCH" in answers, answers
    assert "self mem read" in answers and dump.with_suffix(".self").stat().st_size > 0, answers  # the twin


# In a live run's cage (no tier, {tmp} a host directory): every way the command has to let go
# of its maker's lock — its own open of {tmp} unlocked, and each fd of its parent and
# grandparent taken by pidfd_getfd and unlocked — then the file the host looks for.
DROP_THE_LOCK = r"""import ctypes, errno, fcntl, os, sys
libc = ctypes.CDLL(None, use_errno=True)
tried = []
fd = os.open(os.environ["TMPDIR"], os.O_RDONLY | os.O_DIRECTORY)
fcntl.flock(fd, fcntl.LOCK_UN)  # (another open file description: not the maker's lock)
pids = [os.getppid()]
try:
    pids.append(int(open(f"/proc/{pids[0]}/stat").read().rsplit(")", 1)[1].split()[1]))
except (OSError, ValueError, IndexError):
    pass
for pid in pids:
    pidfd = libc.syscall(434, pid, 0)  # pidfd_open
    if pidfd < 0:
        tried.append(f"pidfd_open {errno.errorcode.get(ctypes.get_errno())}")
        continue
    for n in range(3, 256):
        got = libc.syscall(438, pidfd, n, 0)  # pidfd_getfd
        if got >= 0:
            fcntl.flock(got, fcntl.LOCK_UN)
            tried.append(f"unlocked {pid}:{n}")
        elif ctypes.get_errno() != errno.EBADF:
            tried.append(f"pidfd_getfd {errno.errorcode.get(ctypes.get_errno())}")
            break
print(" ".join(tried) or "nothing", file=sys.stderr)
open(os.path.join(os.environ["TMPDIR"], "file"), "w").write("mine\n")
open(os.path.join(os.environ["TMPDIR"], "ready"), "w").close()
while not os.path.exists(sys.argv[1]):
    os.system("sleep 0.05")
print(open(os.path.join(os.environ["TMPDIR"], "file")).read(), end="")
"""


def test_a_live_runs_tmp_stays_when_its_command_tries_to_drop_the_makers_lock(tmp_path):
    """run_tmp tells a dead maker by its lock being free. The command of a live run (no tier:
    `{tmp}` is a host directory, the maker and the command the same uid) unlocks whatever it can
    reach — its own open of `{tmp}` (another open file description: no effect) and every fd of
    its parent (and grandparent, where /proc shows it) by pidfd_getfd (refused) — and another run
    then sweeps the place: the live run's directory and file stay (host side: same inode, the
    bytes), and the command reads its file at the end. Twin: without the lock's holder the
    same sweep takes such a directory (test_run_tmp_sweep's dead makers)."""
    from test_run_tmp_sweep import _start, outlives_a_sweep

    tmpdir = tmp_path / "T"
    tmpdir.mkdir()
    go = tmp_path / "go"
    proc = _start(tmp_path, tmpdir, '/usr/bin/python3 -c "$1" "$2"', DROP_THE_LOCK, str(go))
    out, err = outlives_a_sweep(tmp_path, tmpdir, proc, go)
    assert out == "mine\n" and "unlocked" not in err, (out, err)

"""A run the supervision ends (a timeout, kill()) under the tier keeps what the command wrote
and carries the caller's offset back (ADR 0011, "Session 9"; session 8's loose end 1).

Bug: the supervision killed the namespace's init WITH the command's tree. The init copies a
relayed file (`> out.log`) from a pipe; what was still in the pipe (up to 64 KiB, or 1 MiB for a
command that grew it) was lost, and a reopened stdin's offset was never carried back (the
caller's file position stayed where the run began). Fix: the supervision asks the init to end
the run (`_libc.END_RUN_SIGNAL`, from outside the namespace only); the init kills the tree
itself and ends as when the command exits — drains, carries offsets back, reports — within
`supervision.END_GRACE_SECONDS`, after which it is killed with the tree as before.

Probes (host side: the bytes of the caller's file, its offset, processes by pid):
- the init is SIGSTOPped while the command writes 40,000 bytes (so they wait in the pipe),
  then continued once the supervision has ended the run (its signal pending, or the init gone):
  the file holds all 40,000;
- the command reads 100 bytes of its stdin file and is timed out: the caller's offset is 100;
- bound: an init that never continues does not hold the timeout (ended within the grace;
  host side: the init's pid is gone).
Twins: `sandboy run` (CLI, wall_seconds) with `> out`, the command's normal exit. Both
executors (SANDBOY_NATIVE=0: the pure-Python init; the API's supervisor is a fork of this
process, so its executor is this process's).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest
from cagekit import SANDBOY, to_toml

import sandboy
from sandboy.confine import namespaces, supervision
from sandboy.confine._libc import END_RUN_SIGNAL

pytestmark = [pytest.mark.needs_kernel,
              pytest.mark.skipif(not namespaces.availability()[0],
                                 reason=f"no namespace tier here: {namespaces.availability()[1]}")]

PY = "/usr/bin/python3"


def _policy(tmp_path, **limits):
    mapping = {"version": 1, "fs": {"read": ["/usr", "/etc", "/proc"],
                                    "exec": ["/usr/bin", "/bin", "/usr/lib", "/lib", "/lib64"],
                                    "write": [str(tmp_path / "w")]}}
    if limits:
        mapping["limits"] = limits
    (tmp_path / "w").mkdir(exist_ok=True)
    return mapping


def _init_of(supervisor: int, within=20.0) -> int:
    """The namespace's init: the (forked) supervisor's only child."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        for task in os.listdir(f"/proc/{supervisor}/task"):
            with open(f"/proc/{supervisor}/task/{task}/children") as fh:
                kids = fh.read().split()
            if kids:
                return int(kids[0])
        time.sleep(0.01)
    raise AssertionError("no init appeared")


def _stop_in_its_loop(init: int, started, within=20.0) -> None:
    """SIGSTOP the init once the command runs and the init waits in its loop (poll: it relays):
    stopped while it still starts the command, the launcher waiting for it would wait as long."""
    _wait_for(started, within)
    deadline = time.monotonic() + within
    while True:
        with open(f"/proc/{init}/wchan") as fh:
            if "poll" in fh.read():
                break
        assert time.monotonic() < deadline, "the init never waited in poll"
        time.sleep(0.01)
    os.kill(init, signal.SIGSTOP)


def _release(init, kill=False) -> None:
    """A test that failed midway leaves no stopped init (nor a launcher waiting on it) behind."""
    if init is not None:
        try:
            os.kill(init, signal.SIGKILL if kill else signal.SIGCONT)
        except ProcessLookupError:
            pass


def _wait_for(path, within=20.0) -> None:
    deadline = time.monotonic() + within
    while not os.path.exists(path):
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.01)


def _status(pid: int) -> dict:
    try:
        with open(f"/proc/{pid}/status") as fh:
            return dict(line.rstrip("\n").split(":\t", 1) for line in fh if ":\t" in line)
    except FileNotFoundError:
        return {}


def _ended_or_asked(pid: int) -> bool:
    """Has the supervision ended the run: END_RUN_SIGNAL pending on the (stopped) init, or the
    init killed (gone, or a zombie)?"""
    state = _status(pid)
    if not state or state.get("State", "").startswith(("Z", "X")):
        return True
    return bool(int(state["ShdPnd"], 16) >> (END_RUN_SIGNAL - 1) & 1)


WRITER = """\
import os, sys, time
go, written = sys.argv[1], sys.argv[2]
open(go + ".started", "w").close()
while not os.path.exists(go):
    time.sleep(0.01)
os.write(1, b"x" * 40000)  # into the relay's pipe: the init is stopped, nothing copies it
open(written, "w").close()
time.sleep(60)
"""


def test_a_timeout_keeps_what_the_command_wrote_before_it(tmp_path, monkeypatch):
    # a grace the continue below always falls inside (the bound has its own probe)
    monkeypatch.setattr(supervision, "END_GRACE_SECONDS", 60.0)
    go, written = tmp_path / "w" / "go", tmp_path / "w" / "written"
    out = tmp_path / "out"
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    init = None
    try:
        handle = sandboy.spawn([PY, "-c", WRITER, str(go), str(written)],
                               sandboy.Policy.from_mapping(_policy(tmp_path)), stdout=fd, timeout=4)
        init = _init_of(handle.pid)
        _stop_in_its_loop(init, f"{go}.started")
        go.touch()
        _wait_for(written)
        deadline = time.monotonic() + 30
        while not _ended_or_asked(init):  # the timeout has come and the supervision acted
            assert time.monotonic() < deadline
            time.sleep(0.01)
        try:
            os.kill(init, signal.SIGCONT)
        except ProcessLookupError:
            pass
        result = handle.wait()
    finally:
        os.close(fd)
        _release(init)
    assert result.outcome == "timed_out" and result.returncode == 137, result
    assert out.read_bytes() == b"x" * 40000  # host side: every byte the command wrote


def test_a_timeout_carries_the_callers_stdin_offset_back(tmp_path):
    written = tmp_path / "w" / "read"
    data = tmp_path / "data"
    data.write_bytes(bytes(range(256)) * 4)
    with open(data, "rb", buffering=0) as stdin:
        assert stdin.read(10) == bytes(range(10))
        result = sandboy.run([PY, "-c", "import os, sys, time; os.read(0, 100); open(sys.argv[1], 'w').close(); "
                              "time.sleep(60)", str(written)],
                             sandboy.Policy.from_mapping(_policy(tmp_path)), stdin=stdin.fileno(), timeout=2)
        assert written.exists(), result  # it read, then was timed out
        assert result.outcome == "timed_out", result
        # host side: where the command left the shared offset, as a command that exits does
        assert os.lseek(stdin.fileno(), 0, os.SEEK_CUR) == 110
        assert stdin.read(5) == bytes(range(110, 115))


def test_an_init_that_cannot_finish_does_not_hold_the_timeout(tmp_path):
    """The init stopped for good (its writes to the caller's file could stall the same way):
    the run still ends, within the timeout plus the grace, and nothing of it is left."""
    go, written = tmp_path / "w" / "go", tmp_path / "w" / "written"
    fd = os.open(tmp_path / "out", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    init = None
    try:
        handle = sandboy.spawn([PY, "-c", WRITER, str(go), str(written)],
                               sandboy.Policy.from_mapping(_policy(tmp_path)), stdout=fd, timeout=3)
        init = _init_of(handle.pid)
        _stop_in_its_loop(init, f"{go}.started")
        go.touch()
        _wait_for(written)
        result = handle.wait()
        left = _status(init)  # (before the clean-up below)
    finally:
        os.close(fd)
        _release(init, kill=True)
    assert result.outcome == "timed_out", result
    # 3 s timeout + 1 s grace; the rest is start-up and a loaded machine's slack
    assert result.duration < 3 + supervision.END_GRACE_SECONDS + 5, result.duration
    assert not left, f"the init is still there: {left.get('State')}"


def test_the_cli_keeps_a_timed_out_commands_output(tmp_path):
    """Twin through `sandboy run` (limits.wall_seconds: a supervised run in the CLI's own
    process): everything written before the timeout is in the file; the run timed out (137)."""
    policy = tmp_path / "p.toml"
    policy.write_text(to_toml(_policy(tmp_path, wall_seconds=2)))
    done = subprocess.run(["/bin/sh", "-c", f"{SANDBOY} run --policy {policy} -- /bin/sh -c "
                           "'head -c 40000 /dev/zero; echo tail; sleep 60' > out; echo rc=$?"],
                          cwd=tmp_path, capture_output=True, timeout=60,
                          env=dict(os.environ, SANDBOY_CACHE_DIR=str(tmp_path / "cache")))
    assert done.stdout == b"rc=137\n", done
    assert (tmp_path / "out").read_bytes() == bytes(40000) + b"tail\n"


def test_a_command_that_exits_before_the_timeout_is_unchanged(tmp_path):
    out = tmp_path / "out"
    with open(out, "wb") as fh:
        result = sandboy.run(["/bin/sh", "-c", "head -c 100000 /dev/zero; exit 3"],
                             sandboy.Policy.from_mapping(_policy(tmp_path)), stdout=fh.fileno(), timeout=30)
    assert (result.outcome, result.returncode) == ("exited", 3), result
    assert out.read_bytes() == bytes(100000)


def test_the_command_cannot_end_its_own_run_through_the_inits_signal(tmp_path):
    """END_RUN_SIGNAL counts only from outside the namespace (its sender's pid reads 0 in
    there): sent by the command to its init (pid 1) it changes nothing — the command lives on
    and exits as it likes (a missing check would have the init kill it: 137). Where Landlock
    scopes signals (ABI 6) the kill itself is refused (EPERM: the init is outside the command's
    domain), and the sender check is the second line."""
    out = tmp_path / "out"
    with open(out, "wb") as fh:
        result = sandboy.run([PY, "-c", f"import errno, os, time\ntry:\n    os.kill(1, {END_RUN_SIGNAL}); said = 'sent'\n"
                              "except OSError as exc:\n    said = errno.errorcode[exc.errno]\n"
                              "time.sleep(0.5); print(said, 'alive'); raise SystemExit(5)"],
                             sandboy.Policy.from_mapping(_policy(tmp_path)), stdout=fh.fileno(), timeout=30)
    assert (result.outcome, result.returncode) == ("exited", 5), (result, out.read_text())
    assert out.read_text() in ("sent alive\n", "EPERM alive\n")


FORGE = """\
import ctypes, errno, os, sys, time
info = bytearray(128)  # siginfo_t: signo, errno, code, (pad), pid, uid
info[0:4] = int(sys.argv[1]).to_bytes(4, "little")
info[8:12] = (-1).to_bytes(4, "little", signed=True)  # SI_QUEUE: the kernel lets it name any si_pid
info[16:20] = (0).to_bytes(4, "little")                # si_pid 0: 'from outside the namespace'
libc = ctypes.CDLL(None, use_errno=True)
said = "sent" if libc.syscall(129, 1, int(sys.argv[1]), (ctypes.c_char * 128).from_buffer(info)) == 0 \\
    else errno.errorcode[ctypes.get_errno()]  # rt_sigqueueinfo(1, ...)
time.sleep(0.5); print(said, "alive", flush=True); raise SystemExit(5)
"""


def test_a_forged_sender_does_not_end_the_run_where_signals_are_not_scoped(tmp_path, monkeypatch):
    """rt_sigqueueinfo lets the command write the siginfo's si_pid (any value, 0 too) as long as
    si_code is a sigqueue's; only a kill(2)'s SI_USER is the kernel's word. On a kernel whose
    Landlock does not scope signals (ABI < 6, taken away here: the run then goes on with a
    warning), a sender check on the pid alone had the init kill the tree (137, 'alive' never
    printed); checking SI_USER too, the command lives on and exits 5."""
    from sandboy.confine import protections

    monkeypatch.setattr(protections.protection("landlock.scopes"), "min_abi", 1 << 30)
    out = tmp_path / "out"
    with open(out, "wb") as fh:
        result = sandboy.run([PY, "-c", FORGE, str(END_RUN_SIGNAL)], sandboy.Policy.from_mapping(_policy(tmp_path)),
                             stdout=fh.fileno(), timeout=30)
    assert (result.outcome, result.returncode) == ("exited", 5), (result, out.read_text())
    assert out.read_text() == "sent alive\n"  # delivered (not scoped), and ignored


# --- `cat f >> f` (session 8's loose end 4) ----------------------------------------------------
# GNU cat refuses to read the file it appends to ("input file is output file") by comparing
# fstat(1) with its input; under the tier its fd 1 is the relay's pipe, so it copies until the
# disk or limits.file_size_mib stops it. Nothing the parent can do makes the check work (a
# writable fd on the file is what the relay exists to avoid), and refusing would break commands
# that read to the end before appending (`wc -l < f >> f`). So `sandboy run` says it, before the
# command runs, where it is the case: fd 0 a file opened for reading and fd 1 or 2 the same file
# opened for writing, under the tier's handoff.

def _sb(tmp_path, script, **limits):
    policy = tmp_path / "p.toml"
    mapping = _policy(tmp_path, **limits)
    mapping["fs"]["write"] = []
    mapping["fs"]["read"].append(str(tmp_path))
    policy.write_text(to_toml(mapping))
    return subprocess.run(["/bin/sh", "-c", script.replace("SB", f"{SANDBOY} run --policy {policy} --")],
                          cwd=tmp_path, capture_output=True, timeout=120,
                          env=dict(os.environ, SANDBOY_CACHE_DIR=str(tmp_path / "cache")))


def test_reading_the_file_it_appends_to_is_said_and_bounded(tmp_path):
    (tmp_path / "f").write_text("line\n" * 60000)  # 300 KB: more than the pipe holds
    done = _sb(tmp_path, "SB /bin/cat < f >> f; echo rc=$?", file_size_mib=1)
    err = done.stderr.decode()
    assert f"warning: fd 0 and fd 1 are the same file ({tmp_path / 'f'})" in err, err
    assert done.stdout != b"rc=0\n"  # host side: the limit stopped it...
    assert os.path.getsize(tmp_path / "f") == 1 << 20  # ...at the limit, not the disk
    # `cat f >> f`: cat opens f itself, in the cage; the parent cannot know (documented): no
    # warning, and only the limit (or the disk) stops it
    (tmp_path / "f").write_text("line\n" * 60000)  # 300 KB: more than the pipe holds
    done = _sb(tmp_path, "SB /bin/cat f >> f; echo rc=$?", file_size_mib=1)
    assert "warning: fd 0" not in done.stderr.decode(), done
    assert done.stdout != b"rc=0\n" and os.path.getsize(tmp_path / "f") == 1 << 20


def test_the_same_file_read_and_written_is_in_the_dry_run_and_twins_say_nothing(tmp_path):
    (tmp_path / "f").write_text("a\nb\n")
    (tmp_path / "g").write_text("")
    policy = tmp_path / "p.toml"
    done = _sb(tmp_path, "SB /usr/bin/wc -l < f >> f && SB /bin/cat < f > g && SB /bin/cat f >> g")
    assert done.returncode == 0, done
    assert done.stderr.decode().count("warning: fd 0 and fd 1 are the same file") == 1, done.stderr
    assert (tmp_path / "f").read_text() == "a\nb\n2\n"  # the legitimate read-then-append ran
    dry = subprocess.run(["/bin/sh", "-c", f"{SANDBOY} run --dry-run --policy {policy} -- /bin/true < f 2>> f"],
                         cwd=tmp_path, capture_output=True, timeout=60)
    assert "fd 2: a pipe the init copies to the caller's file (the file fd 0 reads: the command reads what it " \
           "appends)" in dry.stdout.decode(), dry


@pytest.mark.parametrize("relayed", [True, False], ids=["relaying init", "plain init"])
def test_a_queued_end_signal_is_not_honoured_in_either_init_loop(tmp_path, relayed):
    """Both of the init's loops (a relaying init reads a signalfd, a plain one rt_sigtimedwait)
    honour a kill(2) only (SI_USER): a sigqueue's si_pid is its sender's to write (the forged
    sender above, from inside, reaches the relaying loop only). Sent here from outside with
    SI_QUEUE and si_pid 0: the command runs on and exits as it likes (137 without the code check
    in that loop)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    out = tmp_path / "out"
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    sink = fd if relayed else os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)  # (the cage's own /dev/null)
    started = tmp_path / "w" / "started"
    try:
        handle = sandboy.spawn([PY, "-c", "import sys, time; open(sys.argv[1], 'w').close(); time.sleep(1.5); "
                                "print('alive'); raise SystemExit(4)", str(started)],
                               sandboy.Policy.from_mapping(_policy(tmp_path)), timeout=60, stdout=sink)
        init = _init_of(handle.pid)
        _wait_for(started)
        info = (ctypes.c_int * 32)()
        info[0], info[2] = END_RUN_SIGNAL, -1  # si_signo, si_code = SI_QUEUE; si_pid (info[4]) = 0
        assert libc.syscall(129, init, END_RUN_SIGNAL, info) == 0, ctypes.get_errno()  # rt_sigqueueinfo
        result = handle.wait()
    finally:
        os.close(fd)
        if sink != fd:
            os.close(sink)
    assert (result.outcome, result.returncode) == ("exited", 4), result
    if relayed:
        assert out.read_text() == "alive\n"


def test_a_timeout_during_the_inits_start_does_not_wait_the_grace(tmp_path, monkeypatch):
    """A timeout that comes while the init is still starting (its plan's steps before it blocks
    the end-run signal). A PID namespace's init discards a signal it neither blocks nor handles:
    under the Python executor, whose parent returns at once, the signal was lost and every such
    round waited the whole grace (17 of 20 rounds at a 5 ms timeout, session 10; the C parent
    waits for the command's exec, so its init has blocked it by then). A grace of 30 s makes a
    lost signal plain; a round that ends is checked, bounded at 8 rounds."""
    monkeypatch.setattr(supervision, "END_GRACE_SECONDS", 30.0)
    policy = sandboy.Policy.from_mapping(_policy(tmp_path))
    for _ in range(8):
        started = time.monotonic()
        result = sandboy.run(["/bin/sh", "-c", "sleep 60"], policy, timeout=0.005)
        took = time.monotonic() - started
        assert result.outcome == "timed_out", result
        assert took < 15, f"the init did not act on the end-run signal: {took:.1f} s (grace 30 s)"

"""Files handed in on fd 0-2 under the namespace tier (issue 7; ADR 0011, "Session 8").

An fd keeps the mount it was opened on: `sandboy run cmd < ~/.ssh/id_rsa` or `> out.log` gave
the command an fd on the host's read-write mount, through which fchmod/fchown/fsetxattr/
futimens changed the host's file whatever the cage's read-only tree said. Now a file opened for
reading is reopened by the init-to-be on the cage's read-only tree (same file, the caller's
offset carried in and back out), and a file opened for writing becomes a pipe that the init
copies to the caller's file (`namespaces.StdioHandoff`).

Probes (as the suite runs: root): every metadata call through fd 0, 1 and 2, through a dup of
them and through a reopen of /proc/self/fd/N (and chmod by that path), judged on the HOST
afterwards (mode, owner, xattrs, times, ctime where nothing may touch the file). Twins: `< file`
read whole, a partial read sharing the offset with the caller (`while read; do sandboy run
head -n1; done < list`), `> file`, `>> file` between the caller's own writes, `2>&1` order,
64 MiB of output, exit codes and signals passed through, a background child left writing,
a here-document, FIFOs, the supervised path. Without the tier nothing changes (the same attack
through the fd still works there: the probe is real). Both executors (`make test` runs
tests/cage again with SANDBOY_NATIVE=0; the CLI's subprocesses inherit it).
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import subprocess
import threading
import time

import pytest
from userkit import as_user
from cagekit import ATTEMPT, SANDBOY, to_toml

from sandboy.confine import namespaces

pytestmark = [pytest.mark.needs_kernel,
              pytest.mark.skipif(not namespaces.availability()[0],
                                 reason=f"no namespace tier here: {namespaces.availability()[1]}")]

PY = "/usr/bin/python3"
POLICY = {"version": 1, "fs": {"read": ["/usr", "/etc", "/proc"], "exec": ["/usr/bin", "/bin", "/usr/lib", "/lib",
                                                                          "/lib64"]}}

# Every metadata call Landlock does not mediate, through fd N, a dup of it and a reopen of
# /proc/self/fd/N (and chmod/utime by that path). Prints one line per attempt on the fd named
# by argv[2] (the one not under test).
PROBE = ATTEMPT + r"""
import os, sys
fd, report = int(sys.argv[1]), int(sys.argv[2])
ways = [("fd", fd), ("dup", os.dup(fd))]
try:
    ways.append(("reopen", os.open(f"/proc/self/fd/{fd}", os.O_RDONLY)))
except OSError as exc:
    os.write(report, f"reopen open {errno.errorcode[exc.errno]}\n".encode())
lines = []
for how, t in ways:
    for name, call in (("fchmod", lambda: os.fchmod(t, 0o777)),
                       ("fchown", lambda: os.fchown(t, os.getuid(), os.getgid())),
                       ("fsetxattr", lambda: os.setxattr(t, "user.sandboy", b"planted")),
                       ("futimens", lambda: os.utime(t, (1, 1)))):
        lines.append(f"{how} {name} {attempt(call)}")
path = f"/proc/self/fd/{fd}"
lines.append(f"path chmod {attempt(lambda: os.chmod(path, 0o777))}")
lines.append(f"path utime {attempt(lambda: os.utime(path, (1, 1)))}")
os.write(report, ("\n".join(lines) + "\n").encode())
"""


@pytest.fixture
def sb(tmp_path):
    """Run `script` in a host shell, where `SB` is `sandboy run --policy P --`."""
    policy = tmp_path / "policy.toml"
    policy.write_text(to_toml(POLICY))
    env = dict(os.environ, SANDBOY_CACHE_DIR=str(tmp_path / "cache"))
    sb_cmd = f"{SANDBOY} run --policy {policy} --"

    def run(script: str, timeout=60, policy_text=None, **kwargs):
        if policy_text is not None:
            policy.write_text(policy_text)
        return subprocess.run(["/bin/sh", "-c", script.replace("SB", sb_cmd)], cwd=tmp_path, env=env,
                              capture_output=True, timeout=timeout, **kwargs)
    run.sb_cmd = sb_cmd
    return run


def host_state(path) -> tuple:
    """What no command may change through a handed-in fd: mode, owner, xattrs, ctime."""
    st = os.stat(path)
    return stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, sorted(os.listxattr(path)), st.st_ctime_ns


def victim(tmp_path, name="secret", text="key\n", mode=0o600):
    """A file outside every write root (the policy has none)."""
    path = tmp_path / "outside" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    os.chmod(path, mode)
    return path


# --- probes ----------------------------------------------------------------------------------

def test_a_file_on_stdin_takes_no_metadata_change(sb, tmp_path):
    secret = victim(tmp_path)
    before = host_state(secret)
    done = sb(f"SB {PY} -c '{PROBE}' 0 1 < {secret}")
    assert done.returncode == 0, done
    lines = done.stdout.decode().splitlines()
    # the file is outside fs.read: Landlock refuses its reopen through /proc (EACCES); every
    # call that reaches it gets EROFS
    assert lines[0] == "reopen open EACCES", lines
    assert len(lines) == 11 and all(line.endswith("EROFS") for line in lines[1:]), lines
    assert host_state(secret) == before
    assert secret.read_text() == "key\n"


@pytest.mark.parametrize("redirect,fd,report", [(">", 1, 2), (">>", 1, 2), ("2>", 2, 1), ("2>>", 2, 1)])
def test_a_file_on_stdout_or_stderr_takes_no_metadata_change(sb, tmp_path, redirect, fd, report):
    """Through fd 1/2 the command reaches only the relay's pipe (whose metadata is nobody's):
    the host file keeps its mode, owner, xattrs and times."""
    out = victim(tmp_path, "out.log", "", 0o600)
    mode, uid, gid, xattrs, _ = host_state(out)
    done = sb(f"SB {PY} -c '{PROBE}' {fd} {report} {redirect} {out}")
    assert done.returncode == 0, done
    lines = (done.stdout if report == 1 else done.stderr).decode().splitlines()
    assert len([line for line in lines if not line.startswith("sandboy:")]) == 14, lines
    after = host_state(out)
    assert after[:4] == (mode, uid, gid, xattrs), lines
    st = os.stat(out)
    assert st.st_mtime_ns != 1_000_000_000 and st.st_atime_ns != 1_000_000_000, lines


def test_stdin_and_stdout_on_the_same_file_opened_read_write(sb, tmp_path):
    """`<> file`: fd 0 read-write is reopened read-only (stdin is for reading; writing to fd 0
    then fails with EBADF)."""
    secret = victim(tmp_path, text="abc\n")
    mode, uid, gid, xattrs, _ = host_state(secret)
    done = sb(f"SB {PY} -c '{PROBE}' 0 2 <> {secret}")
    assert done.returncode == 0, done
    assert host_state(secret)[:4] == (mode, uid, gid, xattrs)
    assert "fd fchmod EROFS" in done.stderr.decode()
    # one description both read and written (`<> f >&0`) cannot be split into a reopened
    # reader and a relayed writer sharing one offset: refused, saying how to hand it in
    (tmp_path / "rw").write_text("abc\n")
    done = sb("SB /bin/sh -c 'read l; echo \"got $l\"' <> rw >&0")
    assert done.returncode == 125, done
    assert b"one file opened read-write" in done.stderr and (tmp_path / "rw").read_text() == "abc\n", done


def test_a_directory_on_stdin_takes_no_metadata_change(tmp_path):
    """A directory handed in on fd 0 (through the API: `sandboy run` itself, a Python program,
    does not start with a directory on its stdin): reopened like a file (O_DIRECTORY); the
    listing through fd 0 still works (twin)."""
    import sandboy

    secret = victim(tmp_path)
    before = host_state(secret.parent)
    out = tmp_path / "out"
    # (Python will not start with a directory on fd 0 either: the shell moves it to fd 3 first)
    code = PROBE + "print(os.listdir(fd))"
    fd = os.open(secret.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with open(out, "wb") as stdout:
            result = sandboy.run(["/bin/sh", "-c", f'exec 3<&0 </dev/null; exec {PY} -c "$0" 3 1', code],
                                 sandboy.Policy.from_mapping(POLICY), stdin=fd, stdout=stdout.fileno())
    finally:
        os.close(fd)
    lines = out.read_text().splitlines()
    assert result.returncode == 0, (result, lines)
    assert lines[-1] == "['secret']", lines
    assert all(line.endswith("EROFS") for line in lines[1:-1]), lines
    assert host_state(secret.parent) == before


def test_the_attack_is_real_without_the_tier(sb, tmp_path):
    """Without the tier (SANDBOY_NAMESPACES=0: the same file is still on the caller's mount;
    `degraded` says metadata outside the write roots is no longer prevented) fchmod through
    fd 0 changes the host's file: the probe above is real. Nothing else changes there."""
    secret = victim(tmp_path)
    done = sb(f"SANDBOY_NAMESPACES=0 SB {PY} -c 'import os; os.fchmod(0, 0o640); print(os.readlink(\"/proc/self/fd/1\"))' "
              f"< {secret} > {tmp_path}/out")
    assert done.returncode == 0, done
    assert stat.S_IMODE(os.stat(secret).st_mode) == 0o640
    assert (tmp_path / "out").read_text().strip() == str(tmp_path / "out")  # no relay without the tier


def test_a_path_swapped_before_the_reopen_fails_the_run(tmp_path, monkeypatch):
    """The child reopens the path the parent found and checks st_dev/st_ino (NR_SAME_FILE): a
    path that leads elsewhere by then (here: made to, as a swap between the two would) fails
    the run (125, naming the check) — another file is never handed in."""
    import sandboy

    secret = victim(tmp_path)
    other = victim(tmp_path, "other", "not the key\n", 0o644)
    monkeypatch.setattr(namespaces, "_path_to", lambda path, st: str(other))
    out = tmp_path / "out"
    with open(secret, "rb") as stdin, open(out, "wb") as stdout:
        result = sandboy.run(["/bin/cat"], sandboy.Policy.from_mapping(POLICY), stdin=stdin.fileno(),
                             stdout=stdout.fileno())
    assert result.returncode == 125, result
    assert "check that fd 0's path still leads to the file handed in" in result.error, result
    assert out.read_bytes() == b""


def test_a_file_that_cannot_be_reopened_is_refused_with_the_fix(sb, tmp_path):
    """A file under /proc (the cage mounts its own) cannot be reopened on the cage's tree:
    refused (125) before anything runs, saying to pipe it in."""
    done = sb("SB /bin/cat < /proc/self/status")
    assert done.returncode == 125, done
    assert b"hand it in through a pipe instead" in done.stderr, done
    piped = sb("cat /proc/self/status | SB /bin/cat")
    assert piped.returncode == 0 and b"Name:" in piped.stdout, piped


def test_dry_run_says_what_happens_to_each_fd(sb, tmp_path):
    (tmp_path / "list").write_text("a\n")
    dry = sb.sb_cmd.replace(" run ", " run --dry-run ")
    done = sb(f"{dry} /bin/true < list > out 2>&1; cat out; {dry} /bin/true < /proc/self/status")
    text = done.stdout.decode()
    assert ("stdio: fd 0: reopened read-only on the cage's tree, offset shared with the caller; "
            "fd 1: a pipe the init copies to the caller's file; fd 2: a pipe the init copies to the caller's file"
            in text), text
    assert "stdio: refused: fd 0 is a file the cage cannot reopen" in text, text


# --- twins -----------------------------------------------------------------------------------

def test_stdin_read_whole_and_shared_offset_with_the_caller(sb, tmp_path):
    """`< file` read whole; `while read l; do sandboy run head -n1; done < list` shares the
    file as without Sandboy (head reads a block and seeks back to the end of its line)."""
    data = "".join(f"line {i}\n" for i in range(200))
    (tmp_path / "list").write_text(data)
    whole = sb("SB /bin/cat < list")
    assert whole.returncode == 0 and whole.stdout.decode() == data, whole
    loop = 'while read l; do echo "caller: $l"; HEAD -n1; done < list'
    plain = sb(loop.replace("HEAD", "head"))
    caged = sb(loop.replace("HEAD", "SB head"))
    assert caged.returncode == 0, caged
    assert caged.stdout == plain.stdout and plain.stdout.count(b"caller:") == 100


def test_the_offset_is_carried_in_and_back_out_through_the_api(tmp_path):
    import sandboy

    path = tmp_path / "data"
    path.write_bytes(b"0123456789abcdef")
    out = tmp_path / "out"
    with open(path, "rb", buffering=0) as stdin, open(out, "wb") as stdout:
        assert stdin.read(2) == b"01"
        result = sandboy.run([PY, "-c", "import os; os.write(1, os.read(0, 3))"], sandboy.Policy.from_mapping(POLICY),
                             stdin=stdin.fileno(), stdout=stdout.fileno())
        assert result.returncode == 0, result
        assert os.lseek(stdin.fileno(), 0, os.SEEK_CUR) == 5
        assert stdin.read() == b"56789abcdef"
    assert out.read_bytes() == b"234"


def test_stdout_to_a_file_and_append_between_the_callers_own_writes(sb, tmp_path):
    done = sb("SB /bin/sh -c 'echo one; echo two' > out; "
              "{ echo before; SB /bin/sh -c 'echo inside; echo inside2 >&2'; echo after; } >> log 2>&1")
    assert done.returncode == 0, done
    assert (tmp_path / "out").read_text() == "one\ntwo\n"
    assert (tmp_path / "log").read_text() == "before\ninside\ninside2\nafter\n"


def test_two_to_one_keeps_the_order_and_two_files_stay_apart(sb, tmp_path):
    script = "SB /bin/sh -c 'for i in 1 2 3 4 5 6; do echo out$i; echo err$i >&2; done'"
    done = sb(f"{script} > both 2>&1; {script} > out 2> err")
    assert done.returncode == 0, done
    assert (tmp_path / "both").read_text() == "".join(f"out{i}\nerr{i}\n" for i in range(1, 7))
    assert (tmp_path / "out").read_text() == "".join(f"out{i}\n" for i in range(1, 7))
    assert (tmp_path / "err").read_text() == "".join(f"err{i}\n" for i in range(1, 7))


def test_64_mib_of_output_arrive_whole(sb, tmp_path):
    done = sb("SB /bin/sh -c 'seq 1 7000000; seq 1 1000 >&2' > big 2> small; seq 1 7000000 > plain", timeout=120)
    assert done.returncode == 0, done
    assert os.path.getsize(tmp_path / "big") > 50 << 20
    digest = [hashlib.sha256((tmp_path / name).read_bytes()).hexdigest() for name in ("big", "plain")]
    assert digest[0] == digest[1]
    assert (tmp_path / "small").read_text() == "".join(f"{i}\n" for i in range(1, 1001))


def test_exit_codes_and_signals_pass_through_the_relay(sb, tmp_path):
    done = sb("SB /bin/sh -c 'echo x; exit 7' > out; echo rc=$?; SB /bin/sh -c 'echo y; kill -TERM $$' >> out; echo rc=$?")
    assert done.stdout.decode().split() == ["rc=7", "rc=143"], done
    assert (tmp_path / "out").read_text() == "x\ny\n"


def test_a_background_child_still_writing_dies_with_the_init(sb, tmp_path):
    """The command exits while a child of its own keeps writing: the tree ends with the init
    (as under the tier before), what was written is drained, and after Sandboy returned
    nothing writes to the caller's file any more."""
    started = time.monotonic()
    done = sb("SB /bin/sh -c '(while :; do echo bg; done) & sleep 0.2; echo fg' > out; echo rc=$?")
    assert done.stdout == b"rc=0\n", done
    assert time.monotonic() - started < 20
    size = os.path.getsize(tmp_path / "out")
    time.sleep(0.5)
    assert os.path.getsize(tmp_path / "out") == size
    lines = (tmp_path / "out").read_text().splitlines()
    assert "fg" in lines and set(lines) <= {"bg", "fg"} and lines.count("bg") > 0


def test_a_here_document_and_a_deleted_file_are_read_as_before(sb, tmp_path):
    """A file nobody can reach by a path (a shell's here-document, a deleted file: st_nlink 0)
    is passed on as it is: its metadata concerns nobody."""
    big = "".join(f"here {i}\n" for i in range(20000))  # beyond a pipe's size: bash uses a file
    (tmp_path / "heredoc.sh").write_text(f"{sb.sb_cmd} /bin/cat <<'EOF'\n{big}EOF\n")
    done = sb("bash ./heredoc.sh")
    assert done.returncode == 0 and done.stdout.decode() == big, done
    gone = victim(tmp_path, "gone", "deleted but open\n")
    with open(gone, "rb") as stdin:
        os.unlink(gone)
        done = sb("SB /bin/cat", stdin=stdin)
    assert done.returncode == 0 and done.stdout == b"deleted but open\n", done


def test_fifos_in_and_out(sb, tmp_path):
    """A FIFO opened for reading is reopened on the cage's tree (no offset to carry); one
    opened for writing is reopened too, with its access mode (relayed, a stalled reader held
    the init: see below). Host side: the FIFOs' modes are unchanged."""
    fifo_in, fifo_out = tmp_path / "in.fifo", tmp_path / "out.fifo"
    os.mkfifo(fifo_in, 0o600)
    os.mkfifo(fifo_out, 0o600)
    got = []

    def feed():
        with open(fifo_in, "wb") as w:
            w.write(b"through the fifo\n")

    def drain():
        with open(fifo_out, "rb") as r:
            got.append(r.read())
    threads = [threading.Thread(target=feed), threading.Thread(target=drain)]
    for t in threads:
        t.start()
    (tmp_path / "fifo_probe.py").write_text(
        "import errno, os, sys\nsys.stdout.write(sys.stdin.read())\nsys.stdout.flush()\n"
        "for fd in (0, 1):\n    try:\n        os.fchmod(fd, 0o666)\n        print(fd, 'ok', file=sys.stderr)\n"
        "    except OSError as exc:\n        print(fd, errno.errorcode[exc.errno], file=sys.stderr)\n")
    done = sb(f"SB {PY} fifo_probe.py < {fifo_in} > {fifo_out}", policy_text=to_toml(
        dict(POLICY, fs=dict(POLICY["fs"], read=[*POLICY["fs"]["read"], str(tmp_path / "fifo_probe.py")]))))
    for t in threads:
        t.join(10)
    assert done.returncode == 0, done
    assert done.stderr.decode().split("\n")[:2] == ["0 EROFS", "1 EROFS"], done
    assert got == [b"through the fifo\n"]
    assert stat.S_IMODE(os.stat(fifo_in).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(fifo_out).st_mode) == 0o600


def test_a_supervised_run_relays_too(sb, tmp_path):
    """A run with a deadline is supervised (limits.wall_seconds): the init relays there too."""
    secret = victim(tmp_path, "out.log", "", 0o600)
    policy = dict(POLICY, limits={"wall_seconds": 30})
    done = sb(f"SB {PY} -c 'import os; print(\"hello\"); os.fchmod(1, 0o666)' > {secret}",
              policy_text=to_toml(policy))
    assert done.returncode == 0, done
    assert secret.read_text() == "hello\n"
    assert stat.S_IMODE(os.stat(secret).st_mode) == 0o600


def test_from_an_interactive_shell_output_to_a_file_is_relayed_and_the_terminal_too(tmp_path):
    """`sandboy run make > build.log` typed at a terminal: fd 0 and 2 are the terminal (the
    supervisor's relay, ADR 0011), fd 1 a file (the init's relay). Both reach their place;
    the file's metadata stays the host's."""
    import sys

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from termkit import Operator

    policy = tmp_path / "policy.toml"
    policy.write_text(to_toml(POLICY))
    log = victim(tmp_path, "build.log", "", 0o600)
    operator = Operator()
    try:
        with open(log, "wb") as out:
            proc = operator.start([SANDBOY, "run", "--policy", str(policy), "--", PY, "-c",
                                   "import os, sys; print('to the log'); print('to the screen', file=sys.stderr); "
                                   "os.fchmod(1, 0o666)"],
                                  stdio=(operator.slave, out.fileno(), operator.slave),
                                  env=dict(os.environ, SANDBOY_CACHE_DIR=str(tmp_path / "cache")))
            assert proc.wait(30) == 0
        assert b"to the screen" in operator.watch(5, until=b"to the screen")
    finally:
        operator.close()
    assert log.read_text() == "to the log\n"
    assert stat.S_IMODE(os.stat(log).st_mode) == 0o600


# --- every part of the handoff earns its place ------------------------------------------------

def _battery(tmp_path) -> list:
    """Through the API (in this process, so a mutated `plan_stdio` applies): what must hold.
    Returns the checks that failed."""
    import sandboy

    policy = sandboy.Policy.from_mapping(POLICY)
    failed = []
    secret = victim(tmp_path, "secret", "0123456789", 0o600)
    out = victim(tmp_path, "out.log", "", 0o600)
    code = ("import os\n"
            "for fd in (0, 1):\n"
            "    try: os.fchmod(fd, 0o666)\n"
            "    except OSError: pass\n"
            "os.write(1, os.read(0, 3))\n")
    with open(secret, "rb", buffering=0) as stdin, open(out, "wb") as stdout:
        stdin.read(2)
        result = sandboy.run([PY, "-c", code], policy, stdin=stdin.fileno(), stdout=stdout.fileno())
        offset = os.lseek(stdin.fileno(), 0, os.SEEK_CUR)
    if result.returncode != 0:
        failed.append(f"exit {result.returncode} {result.error}")
    if stat.S_IMODE(os.stat(secret).st_mode) != 0o600:
        failed.append("stdin file's mode changed")
    if stat.S_IMODE(os.stat(out).st_mode) != 0o600:
        failed.append("stdout file's mode changed")
    if out.read_bytes() != b"234":
        failed.append(f"output {out.read_bytes()!r}")
    if offset != 5:
        failed.append(f"offset back {offset}")
    # a swapped path is refused
    other = victim(tmp_path, "other", "not the key\n", 0o644)
    real_path_to = namespaces._path_to
    namespaces._path_to = lambda path, st: str(other)
    try:
        with open(secret, "rb") as stdin, open(out, "wb") as stdout:
            swapped = sandboy.run(["/bin/cat"], policy, stdin=stdin.fileno(), stdout=stdout.fileno())
    finally:
        namespaces._path_to = real_path_to
    if swapped.returncode != 125:
        failed.append("a swapped path was handed in")
    # a FIFO whose writer writes late: a blocking read must wait for it
    fifo = tmp_path / "late.fifo"
    if not fifo.exists():
        os.mkfifo(fifo, 0o600)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    os.set_blocking(reader, True)
    writer = os.open(fifo, os.O_WRONLY)
    timer = threading.Timer(0.3, lambda: (os.write(writer, b"late\n"), os.close(writer)))
    timer.start()
    try:
        with open(out, "wb") as stdout:
            late = sandboy.run([PY, "-c", "import os; os.write(1, os.read(0, 5))"], policy, stdin=reader,
                               stdout=stdout.fileno())
    finally:
        timer.join()
        os.close(reader)
    if late.returncode != 0 or out.read_bytes() != b"late\n":
        failed.append(f"fifo {late.returncode} {out.read_bytes()!r}")
    for path in (secret, out):  # put back whatever a mutant let through
        os.chmod(path, 0o600)
    return failed


@pytest.mark.mutation
def test_every_handoff_step_and_init_kind_has_a_check_that_fails_without_it(tmp_path, monkeypatch):
    """Mutants: each step the handoff plans (but the `close` of an O_CLOEXEC spare) removed,
    and each of NR_INIT's kinds cleared, one at a time; each must fail `_battery`."""
    real = namespaces.plan_stdio
    seen_steps, seen_kinds = set(), set()

    def recording(stdio, pipes=True, everything_writable=False, refuse=None):
        handoff = real(stdio, pipes, everything_writable, refuse)
        seen_steps.update(label for label, _ in handoff.init_steps + handoff.command_steps
                          if not label.startswith("close "))
        kinds = handoff.init_args[3]
        seen_kinds.update((k, (kinds >> 2 * k) & 3) for k in range(3) if (kinds >> 2 * k) & 3)
        return handoff

    monkeypatch.setattr(namespaces, "plan_stdio", recording)
    (tmp_path / "baseline").mkdir()
    assert _battery(tmp_path / "baseline") == []
    assert seen_kinds == {(0, namespaces.CARRY_OFFSET), (1, namespaces.RELAY)}
    assert len(seen_steps) >= 7, seen_steps

    def without_step(target):
        def plan_stdio(stdio, pipes=True, everything_writable=False, refuse=None):
            handoff = real(stdio, pipes, everything_writable, refuse)
            handoff.init_steps = [s for s in handoff.init_steps if s[0] != target]
            handoff.command_steps = [s for s in handoff.command_steps if s[0] != target]
            return handoff
        return plan_stdio

    def without_kind(k, kind):
        def plan_stdio(stdio, pipes=True, everything_writable=False, refuse=None):
            handoff = real(stdio, pipes, everything_writable, refuse)
            *fds, kinds = handoff.init_args
            handoff.init_args = (*fds, kinds & ~(kind << 2 * k))
            return handoff
        return plan_stdio

    mutants = [(f"step {label}", without_step(label)) for label in sorted(seen_steps)]
    mutants += [(f"kind {kind} of fd {k}", without_kind(k, kind)) for k, kind in sorted(seen_kinds)]
    survivors = []
    for i, (name, mutant) in enumerate(mutants):
        monkeypatch.setattr(namespaces, "plan_stdio", mutant)
        work = tmp_path / f"m{i}"
        work.mkdir()
        if not _battery(work):
            survivors.append(name)
    assert survivors == []


def test_as_an_ordinary_user_their_key_and_log_take_no_metadata_change():
    """uid 65534 (unprivileged user namespace): `sandboy run ... < key > log 2>&1` with the
    user's own 0600 key and log outside every grant; fchmod/futimens through fd 0 and 1 leave
    both as they were (host side), and the command's output is in the log."""
    import shutil
    import sys

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import userkit

    import sandboy as package

    userkit.skip_unless_nobody_can_run()
    src = os.path.dirname(os.path.dirname(os.path.abspath(package.__file__)))
    nobody = 65534
    with userkit.world_readable_tmp("sandboy-stdio-") as base:
        key, log = base / "key", base / "log"
        key.write_text("private\n")
        log.write_text("")
        (base / "policy.toml").write_text(to_toml(POLICY))
        for path in (key, log):
            os.chmod(path, 0o600)
        shutil.chown(key, nobody, nobody)
        shutil.chown(log, nobody, nobody)
        before = [host_state(key), host_state(log)[:4]]
        code = ("import os, sys\n"
                "for fd in (0, 1):\n"
                "    for call in (lambda: os.fchmod(fd, 0o666), lambda: os.utime(fd, (1, 1))):\n"
                "        try: call()\n"
                "        except OSError as exc: print(fd, exc.strerror, file=sys.stderr)\n"
                "print(sys.stdin.read().strip())\n")
        script = (f"/usr/bin/python3 -m sandboy run --policy policy.toml -- {PY} -c \"$CODE\" < key > log 2>&1; "
                  "echo rc=$?")
        proc = subprocess.run(as_user(["/bin/sh", "-c", script], uid=nobody), capture_output=True, text=True,
                              timeout=120, cwd=str(base),
                              env={"PATH": "/usr/bin:/bin", "PYTHONPATH": src, "HOME": str(base), "CODE": code,
                                   "SANDBOY_CACHE_DIR": str(base / "cache")})
        assert proc.stdout == "rc=0\n", (proc, log.read_text())
        assert [host_state(key), host_state(log)[:4]] == before, log.read_text()
        assert os.stat(log).st_mtime_ns != 1_000_000_000
        assert log.read_text().splitlines()[-1] == "private", log.read_text()
        assert "0 Read-only file system" in log.read_text()


GRAB = r"""
import ctypes, errno, json, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def call(*args):
    r = libc.syscall(*[ctypes.c_long(a) for a in args])
    return r if r >= 0 else errno.errorcode[ctypes.get_errno()]
pidfd = call(434, 1, 0)                       # pidfd_open(the init)
got = [call(438, pidfd, n, 0) if isinstance(pidfd, int) else pidfd for n in range(6)]  # pidfd_getfd
links = []
for n in range(6):
    try:
        links.append(os.readlink(f"/proc/1/fd/{n}"))
    except OSError as exc:
        links.append(errno.errorcode[exc.errno])
print(json.dumps([pidfd, got, links]), flush=True)
time.sleep(float(sys.argv[1]))
"""


def test_the_command_cannot_take_the_callers_fds_from_the_init(sb, tmp_path):
    """The init now holds the caller's own descriptions (fd 0 to carry the offset back, fd 1 to
    relay to): the command must not get them from it — pidfd_getfd is refused (seccomp, and
    Landlock's ptrace scope: the init is outside the command's domain), /proc/1/fd is not there
    (hidepid). Host side: the init really holds the file (so the attempt had a target), and the
    file's mode is unchanged."""
    secret = victim(tmp_path)
    out = victim(tmp_path, "out.log", "", 0o600)
    proc = subprocess.Popen(["/bin/sh", "-c", f"exec {sb.sb_cmd} {PY} -c \"$GRAB\" 3 < {secret} > {out}"],
                            cwd=tmp_path, env=dict(os.environ, GRAB=GRAB,
                                                   SANDBOY_CACHE_DIR=str(tmp_path / "cache")))
    try:
        deadline = time.monotonic() + 20
        while not out.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        with open(f"/proc/{proc.pid}/task/{proc.pid}/children") as fh:
            init = int(fh.read().split()[0])
        held = {os.readlink(f"/proc/{init}/fd/{n}") for n in os.listdir(f"/proc/{init}/fd")}
    finally:
        assert proc.wait(30) == 0
    assert str(secret) in held and str(out) in held, held
    import json

    pidfd, got, links = json.loads(out.read_text())
    assert all(result in ("EPERM", "EACCES") for result in got), (pidfd, got)  # no fd came back
    assert links == ["ENOENT"] * 6, links
    assert host_state(secret)[:4] == (0o600, os.getuid(), os.getgid(), [])


def test_a_stalled_fifo_reader_does_not_keep_sigterm_from_ending_the_run(sb, tmp_path):
    """stdout is a named FIFO whose reader holds it open and never reads; the command writes
    more than the FIFO holds. SIGTERM to `sandboy run` must end the run (the command dies of
    it). Relayed (review rvsec8), the init's blocking write to the FIFO held it for ever, its
    signals unread: the written FIFO is reopened on the cage's tree now, as a read one. Host
    side: the process has exited."""
    import signal

    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo, 0o600)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # held, never read
    try:
        with open(fifo, "wb") as out:
            proc = subprocess.Popen([*sb.sb_cmd.split(), "/bin/sh", "-c", "head -c 1000000 /dev/zero; sleep 60"],
                                    stdout=out, cwd=tmp_path,
                                    env=dict(os.environ, SANDBOY_CACHE_DIR=str(tmp_path / "cache")))
        time.sleep(2)  # the pipes fill up
        proc.send_signal(signal.SIGTERM)
        try:
            ended = proc.wait(10)
        except subprocess.TimeoutExpired:
            ended = None
    finally:
        os.close(reader)  # the init's write fails (EPIPE): the run ends whatever happened
        proc.wait(30)
    assert ended is not None, "sandboy run still running 10 s after SIGTERM"


def test_only_pid_1_of_a_new_pid_namespace_becomes_an_init():
    """The init's end of a run with a handoff is kill(-1, SIGKILL): every process it may signal
    — inside a new PID namespace the command's tree, outside it (as root) the whole machine. So
    NR_INIT refuses (EINVAL, nothing started) unless its process is pid 1 of a new namespace;
    here a plan cloned into a user namespace only (no CLONE_NEWPID), kinds 0, so a missing
    check starts the command instead of killing anything. Twin: the same plan with CLONE_NEWPID."""
    from sandboy.confine import _libc

    def start(flags):
        read_end, write_end = os.pipe2(os.O_CLOEXEC)
        try:
            pid = _libc.fork_exec([(_libc.NR_INIT, 0, -1, -1, -1, 0)], [b"/bin/true"], [b"/bin/true"], [],
                                  write_end, flags)
        finally:
            os.close(write_end)
        report = _libc.read_all(read_end)
        _, status = os.waitpid(pid, 0)
        return _libc.read_child_report(report), os.waitstatus_to_exitcode(status)

    (error, status), code = start(namespaces.CLONE_NEWUSER)
    assert (error, status, code) == ((0, errno.EINVAL), None, 125)
    (error, status), code = start(namespaces.CLONE_NEWUSER | namespaces.CLONE_NEWPID)
    assert (error, status, code) == (None, 0, 0)


def test_limits_file_size_still_bounds_a_relayed_file(sb, tmp_path):
    """limits.file_size_mib is the command's RLIMIT_FSIZE; with stdout/stderr relayed the init
    writes the caller's file, so the bound is the init's too (`Tier.relay_limits`: the audit's
    phase logs rely on it, 256 MiB). Without it 5 MB reached a file under a 1 MiB limit. Host
    side: the file stops at the limit, the command does not succeed; twin: under the limit
    everything arrives."""
    policy = to_toml(dict(POLICY, limits={"file_size_mib": 1}))
    done = sb("SB /bin/sh -c 'head -c 5000000 /dev/zero; head -c 5000000 /dev/zero >&2' > out 2> err; echo rc=$?",
              policy_text=policy)
    assert done.stdout != b"rc=0\n", done
    assert os.path.getsize(tmp_path / "out") == 1 << 20
    assert os.path.getsize(tmp_path / "err") <= 1 << 20
    done = sb("SB /bin/sh -c 'head -c 1000000 /dev/zero; head -c 1000000 /dev/zero >&2' > out 2> err; echo rc=$?",
              policy_text=policy)
    assert done.stdout == b"rc=0\n", done
    assert os.path.getsize(tmp_path / "out") == os.path.getsize(tmp_path / "err") == 1000000


@pytest.mark.skipif(os.geteuid() != 0, reason="root hands in another user's file")
def test_root_hands_in_another_users_private_file(sb, tmp_path):
    """Twin of the handoff's probes: a legitimate root run reading a file root may read."""
    path = victim(tmp_path, "notes", "theirs\n", 0o600)
    os.chown(path, 65534, 65534)
    os.chmod(path.parent, 0o755)
    done = sb(f"SB /bin/cat < {path}")
    assert (done.returncode, done.stdout) == (0, b"theirs\n"), done


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: a file of another uid handed in")
def test_another_users_file_kept_on_stdin_takes_no_metadata_change(sb, tmp_path):
    """The twin above keeps another uid's private file on the caller's fd (a reopen inside the
    cage's user namespace, which maps the caller's uid alone, could not read it). The command
    gets no metadata change through it either: it has neither the owner's rights nor a
    capability over an unmapped uid, and the file grants no write to group or others."""
    path = victim(tmp_path, "notes", "theirs\n", 0o640)
    os.chown(path, 65534, 65534)
    before = host_state(path)
    done = sb(f"SB {PY} -c '{PROBE}' 0 1 < {path}")
    assert done.returncode == 0, done
    lines = done.stdout.decode().splitlines()
    assert len(lines) >= 10 and not any(line.endswith(" ok") for line in lines), lines
    assert host_state(path) == before
    assert path.read_text() == "theirs\n"


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: a file of another uid handed in")
def test_another_users_group_writable_file_is_still_reopened(sb, tmp_path):
    """A file of another uid that group or others may write is reopened as the caller's own
    are (with write permission the command could set its times or user xattrs through an fd
    on the host's mount)."""
    path = victim(tmp_path, "shared", "ours\n", 0o664)
    os.chown(path, 65534, 65534)
    before = host_state(path)
    done = sb(f"SB {PY} -c '{PROBE}' 0 1 < {path}")
    assert done.returncode == 0, done
    lines = done.stdout.decode().splitlines()
    assert lines[1:] and all(line.endswith(("EROFS", "EPERM", "EACCES")) for line in lines[1:]), lines
    assert any(line.endswith("EROFS") for line in lines), lines
    assert host_state(path) == before

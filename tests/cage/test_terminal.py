"""The caller's terminal never reaches the cage (issue 7, item 4; docs/adr/0011-the-callers-terminal.md).

A pseudo-terminal plays the operator's (tests/termkit.py). `sandboy run` gets it on fd 0–2, as
its controlling terminal or not. Attacks: read the operator's typing through /dev/tty or stdin;
a leftover background process (setsid'd, double-forked, SIGTTOU/SIGHUP ignored) that takes the
terminal's foreground with tcsetpgrp and reads the next line typed, after Sandboy returned.
Each is checked from the host side — the typed bytes are still there for the operator's shell,
nothing of the attacker is on the screen, the foreground group is unchanged — and each attack
is first shown to work without Sandboy. Twins: output reaches the terminal while the command
runs; under `--tty` an interactive program gets typed lines, `stty size` the window size, and
a resize.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time

import pytest
from cagekit import SANDBOY, to_toml

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from termkit import Operator  # noqa: E402
from userkit import as_user, skip_unless_nobody_can_run  # noqa: E402

pytestmark = pytest.mark.needs_kernel

# /dev/tty is granted on purpose: what refuses it must be the session, not Landlock.
POLICY = {"version": 1,
          "fs": {"read": ["/usr", "/lib", "/lib64", "/etc", "/proc", "/dev/tty", "/dev/pts"],
                 "exec": ["/usr/bin", "/bin"]},
          "env": {"pass": ["PATH"]}}


@pytest.fixture
def operator():
    op = Operator()
    yield op
    op.close()


@pytest.fixture
def policy(tmp_path):
    path = tmp_path / "policy.toml"
    path.write_text(to_toml(POLICY))
    return str(path)


def _sandboy(policy, *args):
    return [SANDBOY, "run", "--policy", policy, *args]


NOBODY = 65534


class User:
    """Who runs Sandboy and the twins: root through the venv, or uid 65534 without capabilities
    through the system python3 over this source tree (docs/findings.md, "Testing as an ordinary user")."""

    def __init__(self, name: str):
        self.nobody = name == "nobody"
        self.dir = tempfile.mkdtemp(prefix="sandboy-tty-")
        os.chmod(self.dir, 0o755)
        self.policy = os.path.join(self.dir, "policy.toml")
        with open(self.policy, "w") as fh:
            fh.write(to_toml(POLICY))
        os.chmod(self.policy, 0o644)
        os.mkdir(os.path.join(self.dir, "cache"))
        if self.nobody:
            os.chown(os.path.join(self.dir, "cache"), NOBODY, NOBODY)
        src = os.path.dirname(os.path.dirname(os.path.abspath(sys.modules["sandboy"].__file__)))
        self.env = {"PATH": "/usr/bin:/bin", "HOME": self.dir, "SANDBOY_CACHE_DIR": os.path.join(self.dir, "cache")}
        if self.nobody:
            self.env["PYTHONPATH"] = src

    def wrap(self, argv) -> list:
        if not self.nobody:
            return list(argv)
        return as_user(argv)

    def sandboy(self, *args) -> list:
        if not self.nobody:
            return _sandboy(self.policy, *args)
        return self.wrap(["/usr/bin/python3", "-m", "sandboy", "run", "--policy", self.policy, *args])

    def start(self, operator, argv, controlling=True, **kw):
        return operator.start(argv, controlling, env=self.env, cwd=self.dir, **kw)


@pytest.fixture(params=["root", "nobody"])
def user(request):
    if request.param == "nobody":
        skip_unless_nobody_can_run()
    who = User(request.param)
    if who.nobody and subprocess.run(who.wrap(["/usr/bin/python3", "-c", "import sandboy"]), env=who.env,
                                     capture_output=True).returncode != 0:
        shutil.rmtree(who.dir)
        pytest.skip("uid 65534 cannot read this source tree")
    yield who
    shutil.rmtree(who.dir, ignore_errors=True)


def _env(tmp_path):
    return dict(os.environ, SANDBOY_CACHE_DIR=str(tmp_path / "cache"))


STEAL_TTY = 'read line < /dev/tty; echo "tty:$?:$line"'
STEAL_STDIN = 'read line; echo "stdin:$?:$line"'


@pytest.mark.parametrize("controlling", [True, False], ids=["controlling-terminal", "fds-only"])
def test_command_cannot_read_what_the_operator_types(operator, user, controlling):
    marker = f"typed-{os.getpid()}-{time.monotonic_ns()}"
    script = f"{STEAL_TTY}; {STEAL_STDIN}"
    if controlling:
        # The twin: without Sandboy the same command reads the operator's line from /dev/tty.
        operator.type(f"{marker}-twin\n".encode())
        bare = user.start(operator, user.wrap(["/bin/sh", "-c", STEAL_TTY]))
        assert bare.wait(10) == 0
        assert f"tty:0:{marker}-twin" in operator.watch(2, until=b"tty:").decode()
        operator.screen = b""
    operator.type(f"{marker}\n".encode())  # typed ahead, waiting in the terminal
    proc = user.start(operator, user.sandboy("--", "/bin/sh", "-c", script), controlling)
    assert proc.wait(20) == 0
    screen = operator.watch(1, until=b"stdin:").decode()
    assert "tty:" in screen and "stdin:1:" in screen, screen
    assert "tty:0:" not in screen and marker not in screen, screen
    assert operator.left_for_the_shell() == f"{marker}\n".encode()


def test_redirected_command_cannot_reach_the_controlling_terminal(operator, policy, tmp_path):
    """fd 0–2 are not the terminal, but it is Sandboy's controlling terminal: /dev/tty."""
    marker = f"typed-{os.getpid()}-{time.monotonic_ns()}"
    out = tmp_path / "out"
    operator.type(f"{marker}\n".encode())
    with open(out, "wb") as fh, open(os.devnull, "rb") as null:
        proc = operator.start(_sandboy(policy, "--", "/bin/sh", "-c", STEAL_TTY), stdio=(null, fh, fh),
                              env=_env(tmp_path))
        assert proc.wait(20) == 0
    text = out.read_text()
    assert "tty:" in text and "tty:0:" not in text and marker not in text, text
    assert operator.left_for_the_shell() == f"{marker}\n".encode()


# A leftover that outlives the command: new session, double fork, hang-ups and job-control
# signals ignored; after a pause it makes itself the terminal's foreground and reads a line,
# through fd 0 and through /dev/tty, then writes what it got to the screen.
LEFTOVER = """
import os, signal, sys, time
for sig in (signal.SIGHUP, signal.SIGTTOU, signal.SIGTTIN):
    signal.signal(sig, signal.SIG_IGN)
if os.fork():
    os._exit(0)
os.setsid()
if os.fork():
    os._exit(0)
time.sleep(1.0)
got = []
for fd in (0, 1, 2):
    try:
        os.tcsetpgrp(fd, os.getpgrp())
        got.append("tcsetpgrp-%d" % fd)
    except OSError:
        pass
try:
    fds = [0, os.open("/dev/tty", os.O_RDWR)]
except OSError:
    fds = [0]
for fd in fds:
    try:
        got.append(os.read(fd, 100).decode())
    except OSError:
        pass
for fd in (1, 2):
    try:
        os.write(fd, ("LEFTOVER-%s %s\\n" % (sys.argv[1], got)).encode())
    except OSError:
        pass
"""


@pytest.mark.parametrize("tty", [False, True], ids=["relayed", "pty"])
@pytest.mark.parametrize("controlling", [True, False], ids=["controlling-terminal", "fds-only"])
def test_leftover_cannot_reach_the_terminal_after_return(operator, user, controlling, tty):
    marker = f"leftover-{os.getpid()}-{time.monotonic_ns()}"
    argv = ["/usr/bin/python3", "-c", LEFTOVER, marker]
    if not tty:
        # The twin: without Sandboy the leftover swallows the line typed after its parent returned.
        twin = f"twin-{time.monotonic_ns()}"
        bare = user.start(operator, user.wrap(["/usr/bin/python3", "-c", LEFTOVER, twin]), controlling)
        assert bare.wait(10) == 0
        operator.type(f"{twin}-typed\n".encode())
        deadline = time.monotonic() + 10
        while operator.screen.count(f"LEFTOVER-{twin}".encode()) < 2 and time.monotonic() < deadline:
            operator.watch(0.1)  # it writes to fd 1 and fd 2, then exits
        assert f"LEFTOVER-{twin} ['{twin}-typed\\n']" in operator.screen.decode()
        assert operator.left_for_the_shell() == b""
        operator.screen = b""
    before = operator.foreground_group()
    proc = user.start(operator, user.sandboy(*(["--tty"] if tty else []), "--", *argv), controlling)
    assert proc.wait(20) == 0
    operator.type(f"{marker}-after\n".encode())
    screen = operator.watch(2.0).decode()
    assert f"LEFTOVER-{marker}" not in screen, screen
    assert operator.left_for_the_shell() == f"{marker}-after\n".encode()
    assert operator.foreground_group() == before
    assert operator.holders(marker) == []


def test_output_reaches_the_terminal_while_the_command_runs(operator, policy, tmp_path):
    marker = f"out-{os.getpid()}-{time.monotonic_ns()}"
    flag = tmp_path / "go"
    script = (f'[ -t 0 ] || echo stdin-not-a-terminal; [ -t 1 ] || echo stdout-not-a-terminal; '
              f'echo first-{marker}; while [ ! -e {flag} ]; do sleep 0.05; done; echo second-{marker} >&2')
    policy_path = tmp_path / "policy-flag.toml"
    policy_path.write_text(to_toml({**POLICY, "fs": {**POLICY["fs"], "read": [*POLICY["fs"]["read"], str(tmp_path)]}}))
    proc = operator.start(_sandboy(str(policy_path), "--", "/bin/sh", "-c", script), env=_env(tmp_path))
    screen = operator.watch(10, until=f"first-{marker}".encode()).decode()
    assert f"first-{marker}" in screen and proc.poll() is None  # shown while it still runs
    assert "stdin-not-a-terminal" in screen and "stdout-not-a-terminal" in screen
    flag.touch()
    assert proc.wait(20) == 0
    assert f"second-{marker}" in operator.watch(2, until=f"second-{marker}".encode()).decode()


def test_api_relays_a_terminal_it_is_given(operator):
    """`sandboy.run(..., stdout=<a terminal>)`: the command gets a pipe, the bytes arrive."""
    from sandboy import Policy, run

    marker = f"api-{os.getpid()}-{time.monotonic_ns()}"
    result = run(["/bin/sh", "-c", f"[ -t 1 ] && echo tty-{marker} || echo pipe-{marker}"],
                 Policy.from_mapping(POLICY, "<test>"), stdin=operator.slave, stdout=operator.slave)
    assert result.ok, result
    assert f"pipe-{marker}" in operator.watch(2, until=f"pipe-{marker}".encode()).decode()
    with pytest.raises(ValueError, match="terminal"):
        run(["/bin/true"], Policy.from_mapping(POLICY, "<test>"), stdout=operator.slave, supervise=False)


# --- --tty: a fresh pseudo-terminal, relayed ---------------------------------------------


def test_tty_interactive_program_gets_the_typed_line(operator, user):
    mode = operator.mode()
    program = "import sys; print('got:' + input('ready> '))"
    proc = user.start(operator, user.sandboy("--tty", "--", "/usr/bin/python3", "-c", program))
    assert b"ready> " in operator.watch(10, until=b"ready> ")
    operator.type(b"typed-into-the-terminal\r")  # raw mode: Enter is \r, the inner pty makes it \n
    assert proc.wait(20) == 0
    assert "got:typed-into-the-terminal" in operator.watch(2, until=b"got:").decode()
    assert operator.mode() == mode  # raw mode undone


def test_tty_is_a_terminal_of_its_own_with_the_callers_size(operator, user):
    script = "tty; stty size; read line < /dev/tty; echo \"own:$line\""
    proc = user.start(operator, user.sandboy("--tty", "--", "/bin/sh", "-c", script))
    screen = operator.watch(10, until=b"33 111").decode()
    operator.type(b"mine\r")
    assert proc.wait(20) == 0
    screen = operator.watch(2, until=b"own:").decode()
    lines = [line.strip() for line in screen.splitlines()]
    assert lines[0].startswith("/dev/pts/") and lines[0] != operator.path, screen
    assert "33 111" in lines and "own:mine" in lines, screen


def test_tty_passes_a_resize_on(operator, policy, tmp_path):
    flag = tmp_path / "go"
    script = f"stty size; echo waiting; while [ ! -e {flag} ]; do sleep 0.05; done; stty size"
    policy_path = tmp_path / "policy-flag.toml"
    policy_path.write_text(to_toml({**POLICY, "fs": {**POLICY["fs"], "read": [*POLICY["fs"]["read"], str(tmp_path)]}}))
    proc = operator.start(_sandboy(str(policy_path), "--tty", "--", "/bin/sh", "-c", script), env=_env(tmp_path))
    assert b"waiting" in operator.watch(10, until=b"waiting")
    operator.resize(40, 120)  # the kernel sends SIGWINCH to the foreground group: Sandboy
    time.sleep(0.3)
    flag.touch()
    assert proc.wait(20) == 0
    assert "40 120" in operator.watch(2, until=b"40 120").decode()


def test_tty_exit_status_and_hangup(operator, user):
    """The command's status comes back; a background job of it that ignores SIGHUP still
    loses the pty (hung up) and is killed: nothing of it reaches the screen afterwards."""
    marker = f"late-{os.getpid()}-{time.monotonic_ns()}"
    script = f"(trap '' HUP; sleep 1; echo {marker}) & exit 7"
    proc = user.start(operator, user.sandboy("--tty", "--", "/bin/sh", "-c", script))
    assert proc.wait(20) == 7
    assert marker not in operator.watch(2).decode()


def test_tty_needs_no_terminal_on_the_callers_side(policy, tmp_path):
    """In CI (no terminal at all) --tty still gives the command one, fed from stdin."""
    proc = subprocess.run(_sandboy(policy, "--tty", "--", "/bin/sh", "-c", "[ -t 0 ] && read x && echo \"in:$x\""),
                          input=b"piped\n", capture_output=True, timeout=20, env=_env(tmp_path))
    assert proc.returncode == 0, proc
    assert b"in:piped" in proc.stdout


def test_dry_run_says_what_replaces_the_terminal(operator, policy, tmp_path):
    proc = operator.start(_sandboy(policy, "--dry-run"), controlling=False, env=_env(tmp_path))
    assert proc.wait(20) == 0
    screen = operator.watch(2, until=b"terminal:").decode()
    assert "(supervised)" in screen and "terminal: own session; no terminal (fd 0 -> /dev/null" in screen, screen


def test_tty_output_flows_while_typed_input_waits(operator, policy, tmp_path):
    """The operator types far more than the pty takes while the command only writes: its output
    must still be relayed (the relay once watched the pty only for room for the input, and the
    command hung on a full output buffer)."""
    import threading

    program = "import sys, time; time.sleep(1); sys.stdout.write('y' * 300000 + '\\nall-written\\n')"
    proc = operator.start(_sandboy(policy, "--tty", "--", "/usr/bin/python3", "-c", program), env=_env(tmp_path))
    typed = [b"x" * 63 + b"\r"] * 3000

    def type_all():
        for line in typed:
            try:
                operator.type(line)
            except OSError:
                return

    typist = threading.Thread(target=type_all, daemon=True)
    typist.start()
    try:
        operator.watch(60, until=b"all-written")
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert b"all-written" in operator.screen

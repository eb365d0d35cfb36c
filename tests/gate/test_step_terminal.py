"""A gate step never reaches the operator's terminal (issue 7, item 4; docs/adr/0011-the-callers-terminal.md).

The gate runs in a pseudo-terminal that plays the operator's (tests/termkit.py), as its
controlling terminal. Attacks from a step: read the operator's typing through /dev/tty or stdin,
take the terminal's foreground (tcsetpgrp), and a leftover that tries both after the step
returned. Checked from the host side: the typed line is still there for the operator's shell,
nothing of the attacker is on the screen, the foreground group is unchanged.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time

import pytest
from gatekit import make_repo

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from termkit import Operator  # noqa: E402
from userkit import as_user, skip_unless_nobody_can_run  # noqa: E402

# After the step's own reads, a leftover (new session, double fork, SIGHUP/SIGTTOU ignored)
# waits, takes the foreground and reads again, through fd 0 and /dev/tty.
ATTACK = """
import os, select, signal, sys, time
for sig in (signal.SIGHUP, signal.SIGTTOU, signal.SIGTTIN):
    signal.signal(sig, signal.SIG_IGN)

def attack(tag):
    got = []
    try:
        fds = [0, os.open("/dev/tty", os.O_RDONLY)]
    except OSError as exc:
        got.append("no-dev-tty:" + exc.strerror)
        fds = [0]
    for fd in (*fds, 1, 2):
        try:
            os.tcsetpgrp(fd, os.getpgrp())
            got.append("tcsetpgrp-%d" % fd)
        except OSError:
            pass
    for fd in fds:
        try:
            if select.select([fd], [], [], 0.5)[0]:
                got.append("read:" + os.read(fd, 100).decode())
        except OSError:
            pass
    print("%s-%s %s" % (tag, sys.argv[1], got), flush=True)

attack("STEP")
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(1.0)
        attack("LEFTOVER")
    os._exit(0)
"""


@pytest.fixture
def operator():
    op = Operator()
    yield op
    op.close()


NOBODY = 65534


class Runner:
    """Runs the gate and the twin as root (this venv), or as uid 65534 without capabilities
    through the system python3 over this source tree (docs/findings.md, "Testing as an ordinary
    user"), in a world-readable directory that user owns."""

    def __init__(self, who: str, tmp_path):
        self.nobody = who == "nobody"
        self.env = None
        self.base = tmp_path
        if self.nobody:
            from pathlib import Path

            self.base = Path(tempfile.mkdtemp(prefix="sandboy-gate-tty-"))
            os.chmod(self.base, 0o755)
            import sandboy

            src = os.path.dirname(os.path.dirname(os.path.abspath(sandboy.__file__)))
            self.env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": src, "HOME": str(self.base),
                        "SANDBOY_CACHE_DIR": str(self.base / "cache")}

    def own(self) -> None:
        if self.nobody:
            for root, dirs, files in os.walk(self.base):
                for name in (root, *(os.path.join(root, n) for n in (*dirs, *files))):
                    os.chown(name, NOBODY, NOBODY)

    def argv(self, argv) -> list:
        if not self.nobody:
            return list(argv)
        return as_user(argv)

    def python(self) -> str:
        return "/usr/bin/python3" if self.nobody else sys.executable

    def close(self) -> None:
        if self.nobody:
            shutil.rmtree(self.base, ignore_errors=True)


@pytest.fixture(params=["root", "nobody"])
def runner(request, tmp_path):
    if request.param == "nobody":
        skip_unless_nobody_can_run()
    who = Runner(request.param, tmp_path)
    if who.nobody and subprocess.run(who.argv([who.python(), "-c", "import sandboy"]), env=who.env,
                                     capture_output=True).returncode != 0:
        who.close()
        pytest.skip("uid 65534 cannot read this source tree")
    yield who
    who.close()


def test_step_and_its_leftover_cannot_reach_the_operators_terminal(operator, runner):
    marker = f"gate-{os.getpid()}-{time.monotonic_ns()}"
    base = runner.base
    (base / "attack.py").write_text(ATTACK)
    repo = make_repo(base, f"""
        [[step]]
        name = "attack"
        run = "python3 attack.py {marker}"
    """, {"attack.py": ATTACK})
    runner.own()
    # The twin: the same program outside the cage, in the operator's terminal, reads the line,
    # and its leftover the next one, typed after the program returned.
    twin = f"twin-{marker}"
    operator.type(f"{twin}-1\n".encode())
    bare = operator.start(runner.argv(["/usr/bin/python3", str(base / "attack.py"), twin]), env=runner.env)
    assert bare.wait(10) == 0
    operator.type(f"{twin}-2\n".encode())
    screen = operator.watch(5, until=f"LEFTOVER-{twin}".encode()).decode()
    assert f"read:{twin}-1" in screen and f"read:{twin}-2" in screen, screen
    assert operator.left_for_the_shell() == b""
    operator.screen = b""

    operator.type(f"{marker}\n".encode())  # typed ahead, waiting in the terminal
    before = operator.foreground_group()
    gate = operator.start(runner.argv([runner.python(), "-m", "sandboy.gate.cli", str(repo)]), env=runner.env,
                          cwd=str(base))
    assert gate.wait(60) == 0, operator.watch(1).decode()
    operator.type(f"{marker}-after\n".encode())
    screen = operator.watch(2.0).decode()
    assert f"STEP-{marker}" in screen, screen  # the step ran and reported
    step_line = next(line for line in screen.splitlines() if f"STEP-{marker}" in line)
    assert "tcsetpgrp" not in step_line and f"read:{marker}" not in step_line, step_line
    assert f"LEFTOVER-{marker}" not in screen, screen
    assert operator.left_for_the_shell() == f"{marker}\n{marker}-after\n".encode()
    assert operator.foreground_group() == before
    assert operator.holders(marker) == []


def test_tty_step_is_interactive_and_the_others_are_not(operator, tmp_path):
    """`sandboy gate --tty debug`: that step gets a fresh pty (the operator's size, the typed
    line); the other step still gets no terminal; the log keeps the interactive step's output."""
    repo = make_repo(tmp_path, """
        [[step]]
        name = "plain"
        run = "[ -t 0 ] || [ -t 1 ] || echo plain-has-no-terminal"

        [[step]]
        name = "debug"
        run = "tty; stty size; read -r line; echo got:$line"
    """)
    mode = operator.mode()
    logs = tmp_path / "logs"
    gate = operator.start([sys.executable, "-m", "sandboy.gate.cli", str(repo), "--tty", "debug", "--logs", str(logs)])
    screen = operator.watch(30, until=b"33 111").decode()
    assert "plain-has-no-terminal" in screen, screen
    operator.type(b"typed-for-debug\r")
    assert gate.wait(30) == 0
    screen = operator.watch(2, until=b"gate passed").decode()
    assert "got:typed-for-debug" in screen, screen
    debug_tty = screen.split("== step 2/2: debug", 1)[1].split()[1]
    assert debug_tty.startswith("/dev/pts/") and debug_tty != operator.path
    assert "got:typed-for-debug" in (logs / "debug.log").read_text()
    assert operator.mode() == mode


def test_tty_names_a_step(tmp_path):
    from gatekit import run_gate

    repo = make_repo(tmp_path, """
        [[step]]
        name = "unit"
        run = "true"
    """)
    proc = run_gate(repo, "--tty", "unti")
    assert proc.returncode == 2 and "--tty unti" in proc.stderr and "steps: unit" in proc.stderr, proc.stderr


def test_tty_step_output_stays_out_of_a_json_report_on_stdout(operator, tmp_path):
    import json

    repo = make_repo(tmp_path, """
        [[step]]
        name = "debug"
        run = "echo shown-on-the-terminal"
    """)
    report = tmp_path / "stdout.json"
    with open(report, "wb") as out:
        gate = operator.start([sys.executable, "-m", "sandboy.gate.cli", str(repo), "--tty", "debug", "--json", "-"],
                              stdio=(operator.slave, out, operator.slave))
        assert gate.wait(60) == 0
    assert json.loads(report.read_text())["steps"][0]["status"] == "passed"
    assert "shown-on-the-terminal" in operator.watch(2, until=b"shown-on-the-terminal").decode()


def test_tty_step_over_its_memory_bound_dies_whole(operator, tmp_path):
    """An interactive step (`--tty`) that reaches its memory bound (ADR 0027) is killed as a whole
    — its shell, which would sleep on after the hog alone was killed, too — and says why."""
    from sandboy.confine.cgroup import MemoryCgroup

    group = MemoryCgroup.create(64) if os.geteuid() == 0 else None
    if group is None:
        pytest.skip("needs root and a writable memory cgroup")
    group.remove()
    repo = make_repo(tmp_path, """
        [[step]]
        name = "hog"
        policy = "small"
        run = "python3 -c 'b = bytes(1) * (256 << 20); print(len(b))'; sleep 60"
        timeout = 40

        [policy.small]
        version = 1
        limits.memory_mib = 64
    """)
    started = time.monotonic()
    gate = operator.start([sys.executable, "-m", "sandboy.gate.cli", str(repo), "--tty", "hog"])
    assert gate.wait(35) == 1
    screen = operator.watch(2, until=b"gate failed").decode()
    assert "out of memory" in screen, screen
    assert time.monotonic() - started < 30

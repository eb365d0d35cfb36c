"""A supervisor out of file descriptors still ends the whole tree at the timeout (fail closed).

Finding (session 8, redinput8): `reaping.descendants()` walks /proc, and read EMFILE/ENFILE
there as "no child": a supervisor whose fds a step had exhausted (through the egress proxy)
believed the tree empty, killed nothing and waited for the command — an 8 s timeout held 65 s.

Probe: a supervising process (a script of its own, as the gate is) with a low RLIMIT_NOFILE
starts a tree of SIGTERM-ignoring `sleep`s — one in the command's process group, one that left
it with setsid, one orphan reparented to the supervisor — then opens files until none is left
and lets the 2 s timeout fire. Host side: the script must end in time, and no process carrying
the test's marker (argv[0], looked for in every /proc/PID/cmdline) may be left. Twin: the same
tree with fds to spare ends the same way. Each runs without the namespace tier (the /proc walk
is all there is) and with it where the kernel allows (the namespace's init ends everything).
"""

import itertools
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from prockit import named_exactly

pytestmark = pytest.mark.needs_kernel

TIMEOUT = 2.0
MARKERS = itertools.count()

# the tree: a child in the command's group, one in a session of its own, an orphan (its parent
# exits) in another session — every one ignoring SIGTERM (the supervisor must not rely on it)
TREE = textwrap.dedent("""\
    trap '' TERM
    (exec -a "$1" sleep 120) &
    setsid bash -c 'trap "" TERM; exec -a "$1" sleep 120' _ "$1" &
    setsid bash -c 'trap "" TERM; (exec -a "$1" sleep 120) & exit 0' _ "$1" &
    wait
    """)

SUPERVISOR = textwrap.dedent("""\
    import json, os, resource, sys, time
    from sandboy import Policy
    from sandboy.confine.cage import build
    from sandboy.confine.result import TIMED_OUT
    from sandboy.confine.supervision import Supervision

    marker, workdir, tree, exhaust = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1"

    def carrying():
        found = []
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    with open(f"/proc/{name}/cmdline", "rb") as fh:
                        if fh.read().split(b"\\0", 1)[0] == marker.encode():
                            found.append(int(name))
                except OSError:
                    pass
        return found

    policy = Policy.from_mapping({"version": 1, "fs": {"read": ["/usr", "/etc", "/lib", "/lib64"],
                                  "exec": ["/usr/bin", "/bin"], "write": [workdir]}}, "<probe>")
    cage = build(policy, cwd=workdir)
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
    null = os.open("/dev/null", os.O_RDWR)  # the tree must not hold the test's pipes
    run = Supervision(["/usr/bin/bash", "-c", tree, "_", marker], cage, timeout=%(timeout)r,
                      stdio=(null, null, null)).start()
    up = time.monotonic() + 10
    while len(carrying()) < 3 and time.monotonic() < up:
        time.sleep(0.01)
    pids = carrying()
    fillers = []
    if exhaust:
        while True:
            try:
                fillers.append(os.open("/dev/null", os.O_RDONLY))
            except OSError:
                break
    while not run.exited():
        if run.time_left() == 0:
            run.end(TIMED_OUT)
            break
        time.sleep(0.01)
    ended_after = time.monotonic() - run.started
    for fd in fillers:
        os.close(fd)
    result = run.wait()
    cage.close()
    print(json.dumps({"pids": pids, "fillers": len(fillers), "ended_after": ended_after,
                      "outcome": result.outcome}))
    """) % {"timeout": TIMEOUT}


def _supervise(tmp_path, exhaust: bool, namespaces: bool) -> tuple:
    """(what the supervising script said, the marked processes left after it ended)."""
    marker = f"sbx-outoffds-{os.getpid()}-{next(MARKERS)}"
    env = dict(os.environ)
    if not namespaces:
        env["SANDBOY_NAMESPACES"] = "0"
    argv = [sys.executable, "-c", SUPERVISOR, marker, str(tmp_path), TREE, "1" if exhaust else "0"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        out, err = proc.communicate(timeout=TIMEOUT + 20)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        out = json.dumps({"hung": True}).encode()
    finally:
        left = named_exactly(marker)
        for pid in left:  # only processes carrying this test's marker are ever signalled
            os.kill(pid, signal.SIGKILL)
    assert proc.returncode == 0 or b"hung" in out, err.decode()[-2000:]
    return json.loads(out), left


@pytest.mark.parametrize("namespaces", [False, True], ids=["no_tier", "tier"])
def test_a_supervisor_out_of_fds_still_kills_every_process_at_the_timeout(tmp_path, namespaces):
    started = time.monotonic()
    said, left = _supervise(tmp_path, exhaust=True, namespaces=namespaces)
    wall = time.monotonic() - started
    assert "hung" not in said, f"the supervisor hung {wall:.1f} s past a {TIMEOUT} s timeout; left: {left}"
    assert len(said["pids"]) == 3 and said["fillers"] > 100, said  # the tree was up, the fds were gone
    assert left == [], f"{len(left)} of the tree outlived the run: {left}"
    assert said["outcome"] == "timed_out", said
    assert said["ended_after"] < TIMEOUT + 1.5, said


@pytest.mark.parametrize("namespaces", [False, True], ids=["no_tier", "tier"])
def test_twin_with_fds_to_spare_the_timeout_kills_every_process(tmp_path, namespaces):
    said, left = _supervise(tmp_path, exhaust=False, namespaces=namespaces)
    assert "hung" not in said and left == [], (said, left)
    assert len(said["pids"]) == 3 and said["fillers"] == 0, said
    assert said["outcome"] == "timed_out" and said["ended_after"] < TIMEOUT + 1.5, said


def _take_every_fd() -> list:
    """Open /dev/null until the fd limit refuses (EMFILE): the fds taken, for the caller to close."""
    fillers = []
    while True:
        try:
            fillers.append(os.open("/dev/null", os.O_RDONLY))
        except OSError:
            return fillers


def test_a_walk_out_of_fds_says_the_tree_is_unknown_never_empty():
    """In a forked copy: a child exists, every fd is taken. Without a spare the walk raises
    TreeUnreadable (it used to return set()); with the spare held from before, it finds the child."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            import resource

            from sandboy.confine import reaping

            kid = os.fork()
            if kid == 0:
                time.sleep(30)
                os._exit(0)
            resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
            spare = reaping.SpareFd()
            fillers = _take_every_fd()
            try:
                reaping.descendants()
                without = "returned"
            except reaping.TreeUnreadable as exc:
                without = f"unreadable:{exc.errno}"
            found = reaping.descendants(spare)
            os.kill(kid, signal.SIGKILL)
            os.waitpid(kid, 0)
            for fd in fillers:
                os.close(fd)
            os.write(w, json.dumps({"without": without, "with": sorted(found), "kid": kid,
                                    "spare_back": spare.fd is not None}).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    got = json.loads(os.read(r, 4096))
    os.close(r)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    import errno

    assert got["without"] == f"unreadable:{errno.EMFILE}", got
    assert got["with"] == [got["kid"]] and got["spare_back"], got


@pytest.mark.parametrize("free", [0, 1, 2])
def test_a_supervisor_with_no_fd_left_refuses_the_run_before_starting_it(tmp_path, free):
    """Nothing can be started that could not be ended: with no fd for the spare, start() is a
    CageError (125) naming why, and no command ran (host side: its file was not made)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            import resource

            from sandboy import CageError, Policy
            from sandboy.confine.cage import build
            from sandboy.confine.supervision import Supervision

            policy = Policy.from_mapping({"version": 1, "fs": {"read": ["/usr", "/etc", "/lib", "/lib64"],
                                          "exec": ["/usr/bin", "/bin"], "write": [str(tmp_path)]}}, "<probe>")
            cage = build(policy, cwd=str(tmp_path))
            resource.setrlimit(resource.RLIMIT_NOFILE, (128, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
            fillers = _take_every_fd()
            for _ in range(free):  # 1: the status read works, the spare takes it; 2: the pipe fails
                os.close(fillers.pop())
            try:
                Supervision(["/usr/bin/touch", str(tmp_path / "ran")], cage).start()
                said = "started"
            except CageError as exc:
                said = str(exc)
            except Exception as exc:  # noqa: BLE001 - reported: anything but a CageError fails the test
                said = f"{type(exc).__name__}: {exc}"
            for fd in fillers:
                os.close(fd)
            os.write(w, said.encode())
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    said = os.read(r, 4096).decode()
    os.close(r)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    assert said.startswith("cannot supervise a run here: "), said  # a CageError, not a bare OSError
    assert not (tmp_path / "ran").exists()

"""The mutation check for "nothing of a run outlives it, nor takes more than it was given"
(confine/supervision.py, reaping.py): the supervisor's sweep of the command's tree, its
child-subreaper role (without it an orphan that double-forked and called setsid goes to the
host's init, where the sweep never finds it), the command's death signal when its supervisor is
killed outright (PR_SET_PDEATHSIG), the timeout, and (as root) the pids cgroup behind
`limits.processes`, removed in turn; a leftover must then outlive the run, a run overstay its
timeout, or a fork bomb pass the limit.

Host side: each leftover is a `sleep` whose argv[0] is a marker unique to this test and check,
looked for in every /proc/PID/cmdline after the run (only processes carrying our marker are
ever signalled). Runs through the API in this process (a mutant set with pytest's monkeypatch
is inherited by the forked supervisor; nothing in production reads a switch), with the
namespace tier forced off: under the tier the command's PID namespace ends with its init, which
kills every process in it, so the sweep and the subreaper are equivalent there by design
(`Supervision._ends_its_tree`).

Budget: 5 mutants, at most 4 runs each (one waits out a 1.5 s sleep): ≈ 5 s; bounded at 60 s.
"""

from __future__ import annotations

import itertools
import os
import signal
import time

import pytest
from prockit import named_exactly
from mutantkit import first_failure, mutant, report, run_mutants

from sandboy.confine import _libc, init_wait, reaping, supervision

pytestmark = [pytest.mark.needs_kernel, pytest.mark.mutation, pytest.mark.without_namespaces]

BUDGET_SECONDS = 60
PY = "/usr/bin/python3"
POLICY = {"version": 1, "fs": {"read": ["/usr", "/etc", "/lib", "/lib64"], "exec": ["/usr/bin", "/bin"]}}
PR_SET_CHILD_SUBREAPER, PR_GET_DUMPABLE = 36, 3  # linux/prctl.h, by hand
MARKERS = itertools.count()

# an orphan: forks, the child calls setsid and forks the leftover, then exits; the command exits
# once the leftover has exec'd (the pipe's write end is close-on-exec: EOF then), so the marker is
# in its cmdline before the run ends
ORPHAN = r"""
import os, sys
r, w = os.pipe()
if os.fork() == 0:
    os.close(r)
    os.setsid()
    if os.fork() == 0:
        os.execv("/bin/sleep", [sys.argv[1], "30"])
    os._exit(0)
os.close(w)
os.read(r, 1)
os.wait()
print("left", flush=True)
"""


def _marker() -> str:
    return f"sbx-leftover-{os.getpid()}-{next(MARKERS)}"


def _gone(marker: str, seconds: float) -> list:
    """The processes still carrying `marker` after up to `seconds` (killed here, so none stays)."""
    deadline = time.monotonic() + seconds
    while (left := named_exactly(marker)) and time.monotonic() < deadline:
        time.sleep(0.02)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    return left


def _policy():
    from sandboy import Policy

    return Policy.from_mapping(POLICY, "<leftover mutants>")


def check_orphans_are_swept(_tmp):
    from sandboy import run

    marker = _marker()
    with open(os.devnull, "wb") as null:
        result = run([PY, "-c", ORPHAN, marker], _policy(), supervise=True, timeout=20,
                     stdin=null.fileno(), stdout=null.fileno(), stderr=null.fileno())
    left = _gone(marker, 0.2)
    assert result.returncode == 0, result
    assert not left, f"an orphan outlived the run: pids {left}"


def check_a_killed_supervisor_takes_the_command_along(_tmp):
    from sandboy import spawn

    marker = _marker()
    with open(os.devnull, "wb") as null:
        handle = spawn([PY, "-c", "import os, sys; os.execv('/bin/sleep', [sys.argv[1], '30'])", marker], _policy(),
                       supervise=True, timeout=20, stdin=null.fileno(), stdout=null.fileno(), stderr=null.fileno())
    try:
        deadline = time.monotonic() + 10
        while not named_exactly(marker) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert named_exactly(marker), "the command never started"
        os.kill(handle.pid, signal.SIGKILL)  # the supervisor, killed outright: it cannot sweep
        handle.wait()
    finally:
        left = _gone(marker, 2)
    assert not left, f"the command outlived its killed supervisor: pids {left}"


def check_the_timeout_ends_the_run(_tmp):
    import tempfile

    from sandboy import run

    # host side, not only the run's own report: a command the timeout did not stop gets to say so
    with open(os.devnull, "wb") as null, tempfile.TemporaryFile() as out:
        result = run(["/bin/sh", "-c", "/bin/sleep 1.5; echo finished"], _policy(), timeout=0.3, stdin=null.fileno(),
                     stdout=out.fileno(), stderr=null.fileno())
        out.seek(0)
        said = out.read()
    assert b"finished" not in said, f"the command outlived its timeout: {said!r}, {result}"
    assert result.outcome == "timed_out", result


def check_processes_are_counted(tmp):
    # as root RLIMIT_NPROC binds nothing (the kernel exempts uid 0): the pids cgroup is the limit
    from cagekit import Cage

    root = tmp / f"pids-{next(MARKERS)}"
    root.mkdir()
    cage = Cage(PROBE[0], root)
    r = cage.run("forkbomb", 200, policy=cage.policy(limits={"processes": 8}))
    assert r.ok and int(r.out.split()[1]) < 8, r


CHECKS = (check_orphans_are_swept, check_a_killed_supervisor_takes_the_command_along, check_the_timeout_ends_the_run,
          check_processes_are_counted)
PROBE: list = []  # the attacker binary (conftest's `probe`)


def _without_subreaper(real):
    return lambda option, *args: 0 if option == PR_SET_CHILD_SUBREAPER else real(option, *args)


def _without_deadline(real):
    def watch(self):
        real(self)
        self.deadline = None
    return watch


def _mutants():
    out = [mutant(*row) for row in [
        ("the sweep of the tree", reaping, "sweep", lambda cgroup=None, deadline=None, spare=None: True),
        ("the supervisor as child subreaper", _libc, "prctl", _without_subreaper(_libc.prctl)),
        # the step stays (the plan's shape is unchanged) but asks the kernel for nothing
        ("the command's death signal", init_wait, "PR_SET_PDEATHSIG", PR_GET_DUMPABLE),
        ("the timeout", supervision.Supervision, "_watch", _without_deadline(supervision.Supervision._watch)),
    ]]
    if os.geteuid() == 0:  # for everyone else RLIMIT_NPROC (a cage step) is the limit
        out.append(mutant("the pids cgroup", supervision.Supervision, "_enter_pids_group", lambda self: None))
    return out


def test_nothing_of_a_run_outlives_it_without_each_protection(tmp_path, probe):
    if not os.path.exists(PY):
        pytest.skip("needs the system python3")
    PROBE[:] = [probe]
    # the intact supervisor leaves nothing behind (judged first)
    outcome = run_mutants(_mutants(), lambda _mutant: first_failure(CHECKS, tmp_path), budget_seconds=BUDGET_SECONDS,
                          intact_when=("before",))
    report(outcome, "leftover mutants")

"""Queued signals are counted per uid, and a user namespace's count is charged to the host uid's
too: a command queuing real-time signals to itself (blocked, `sigqueue`) held the host uid's
whole RLIMIT_SIGPENDING while it ran — 96,364 here — and every other program of that uid got
EAGAIN from sigqueue and timer_create meanwhile (as root: every root process of the machine).
The supervision's end-run signal was never at stake: a kill(2) over the limit is still delivered,
without its info, which reads as SI_USER from pid 0 (the init honours exactly that; measured,
session 10). Each run's processes and its init now hold at most `hygiene.PENDING_SIGNALS`.

Host side, as an unused uid (the count is per uid: root's queue is shared with everyone on this
machine): what the command queued, the uid's count outside the cage, and a sigqueue of a host
process of that uid. Twin: a command queuing a hundred signals (timers, real-time IPC) still does."""

from __future__ import annotations

import textwrap

import pytest
from cagekit import run_as_unused_uid

from sandboy.confine import hygiene, namespaces

pytestmark = pytest.mark.needs_kernel

FILL = textwrap.dedent("""\
    import ctypes, os, signal, sys, time
    libc = ctypes.CDLL(None, use_errno=True)
    class sigval(ctypes.Union):
        _fields_ = [("i", ctypes.c_int), ("p", ctypes.c_void_p)]
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGRTMIN})
    most, queued = int(sys.argv[2]), 0
    while queued < most and libc.sigqueue(os.getpid(), signal.SIGRTMIN, sigval(0)) == 0:
        queued += 1
    with open(sys.argv[1] + ".tmp", "w") as fh:
        fh.write(str(queued))
    os.rename(sys.argv[1] + ".tmp", sys.argv[1])
    print("x" * 1000, flush=True)
    if most > 1000:
        time.sleep(60)  # holds them until the run's wall_seconds end it
""")

# Run as the unused uid, outside the cage: starts `sandboy run`, and once the command has queued
# what it could, reads the uid's count and tries one sigqueue of its own.
DRIVER = textwrap.dedent("""\
    import ctypes, json, os, signal, subprocess, sys, time
    where, most = sys.argv[1], sys.argv[2]
    libc = ctypes.CDLL(None, use_errno=True)
    class sigval(ctypes.Union):
        _fields_ = [("i", ctypes.c_int), ("p", ctypes.c_void_p)]
    with open(f"{where}/out", "w") as out:
        run = subprocess.Popen(["/usr/bin/python3", "-m", "sandboy", "run", "--policy", f"{where}/p.toml", "--",
                                "/usr/bin/python3", f"{where}/fill.py", f"{where}/w/count", most],
                               stdout=out, stderr=subprocess.PIPE, cwd=where)
    deadline = time.monotonic() + 60
    while not os.path.exists(f"{where}/w/count") and run.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    said = {"queued": int(open(f"{where}/w/count").read()) if os.path.exists(f"{where}/w/count") else None}
    with open("/proc/self/status") as fh:
        said["uid_count"] = next(line.split()[1] for line in fh if line.startswith("SigQ:"))
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGRTMIN})
    said["host_sigqueue"] = "ok" if libc.sigqueue(os.getpid(), signal.SIGRTMIN, sigval(0)) == 0 else ctypes.get_errno()
    said["rc"] = run.wait(timeout=60)
    said["stderr"] = run.stderr.read().decode(errors="replace")
    said["output"] = os.path.getsize(f"{where}/out")
    print(json.dumps(said))
""")


@pytest.fixture(params=["tier", "forced-off"])
def namespaces_env(request):
    if request.param == "tier":
        if not namespaces.availability()[0]:
            pytest.skip("no namespace tier here")
        return {}
    return {"SANDBOY_NAMESPACES": "0"}


def _run_as_unused_uid(most: int, extra_env: dict) -> dict:
    return run_as_unused_uid(FILL, DRIVER, most, extra_env, uid_from=47000, wall_seconds=3, prefix="sandboy-sigq-")


def test_a_command_cannot_hold_its_uids_whole_queue_of_signals(namespaces_env):
    said = _run_as_unused_uid(10 ** 6, namespaces_env)
    assert said["queued"] is not None, said
    assert said["queued"] <= hygiene.PENDING_SIGNALS, said  # was 96,364: the uid's whole limit
    assert said["host_sigqueue"] == "ok", said             # was EAGAIN for the uid's other programs
    # the run still ended at its wall_seconds, the relayed output kept (the end-run signal held)
    assert (said["rc"], said["output"]) == (137, 1001), said


def test_twin_a_command_queuing_a_hundred_signals_still_does(namespaces_env):
    said = _run_as_unused_uid(100, namespaces_env)
    assert (said["queued"], said["rc"], said["output"]) == (100, 0, 1001), said

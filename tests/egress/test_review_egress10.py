"""Session 10 review (rvcache10) of the gate's one lookup helper (egress10, f6eb8c0), from the
attacker's side: a step runs while the helper an earlier step started is kept for the next. From
inside, the step looks for the helper in its /proc and kills what it finds; from the
host, the step's processes hold no end of the helper's pipes, the helper survives the step (it is
not in the step's PID namespace) and serves the next step, and it is gone once the gate ends.
"""

from __future__ import annotations

import os
import time

import pytest

from dnskit import NameServer, alive
from prockit import mentioning
from test_lookup_helper import FETCH, _finish, _gate, _wait_gone, _watch

pytestmark = pytest.mark.skipif(os.geteuid() != 0,
                                reason="binds /etc/resolv.conf in a private mount namespace (root)")

MARK = "rvcache10-step-two"


def _pipe_inodes(pid: int) -> set:
    out = set()
    for fd in ("0", "1"):
        link = os.readlink(f"/proc/{pid}/fd/{fd}")
        assert link.startswith("pipe:"), link
        out.add(link)
    return out


def _holders(links: set) -> set:
    """Every process on the host holding an fd on one of `links` (pipe:[N], unique to the helper)."""
    found = set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{name}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{name}/fd/{fd}") in links:
                    found.add(int(name))
                    break
            except OSError:
                continue
    return found


def test_a_step_cannot_reach_the_helper_kept_for_the_next(tmp_path, origin):
    from sandboy.confine import namespaces

    if not namespaces.availability()[0]:
        pytest.skip("the gate keeps one helper only for steps under the namespace tier")

    server = NameServer({f"n{i}.fast.test": ("127.0.0.1", 0.0) for i in range(3)})
    try:
        # step 2: every process it can see running the helper's code (its -c text imports
        # "_socket, _thread"; the pattern's brackets keep the step's own command line out) is sent
        # SIGKILL; then it sleeps for the host to look. (Not kill(-1): were the step not in a PID
        # namespace of its own, that would reach the host's processes.)
        hunt = ("for c in /proc/[0-9]*/cmdline; do p=${c#/proc/}; p=${p%/cmdline}; "
                "tr '\\\\0' ' ' < $c 2>/dev/null | grep -q '_socke[t], _threa[d]' && kill -9 $p; done; "
                "exec sh -c 'sleep 4' " + MARK)
        steps = [("s0", FETCH.format(name="n0.fast.test", port=origin.port)), ("s1", hunt),
                 ("s2", FETCH.format(name="n1.fast.test", port=origin.port))]
        proc = _gate(tmp_path, server, steps, origin.port)
        seen = _watch(proc, until=lambda seen: seen and mentioning(MARK))
        assert seen, "no helper started"
        helper = seen[0]
        links = _pipe_inodes(helper)
        deadline = time.monotonic() + 10
        while not mentioning(MARK) and time.monotonic() < deadline:
            time.sleep(0.05)
        step_two = mentioning(MARK)
        if not step_two:
            proc.kill()
            raise AssertionError(("step two never ran", *_finish(proc)))
        holders = _holders(links)
        assert alive(helper), "the step killed the gate's helper"
        # the helper itself and the gate (its other ends): no process of the step
        assert holders <= {helper, proc.pid}, (holders, step_two)
        assert not holders & set(step_two)
        seen = _watch(proc, seen=seen)
        out, err = _finish(proc)
        assert proc.returncode == 0, (out[-2000:], err[-2000:])
        assert out.count(": PASSED in ") == 3, out[-2000:]
        assert "n1.fast.test" in server.asked  # the step after the hunt still resolved...
        assert seen == [helper], seen  # ...through the same helper: step two never reached it
        assert _wait_gone(helper, 0)
    finally:
        server.close()

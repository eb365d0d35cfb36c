"""A caller's `timeout=0` never lifts the policy's `limits.wall_seconds`.

`supervision.timeout_for` gave the smaller of the caller's timeout and the policy's wall time,
but a caller's 0 came back as 0 — which every deadline reads as "none" — so
`sandboy.run(argv, policy, timeout=0)` ran past the policy's own `wall_seconds` (found in session 7
while bounding the gate's time budget: what is left of a spent budget was such a 0). Checked from
the host: wall time, and the command's process gone when the run returns."""

from __future__ import annotations

import os
import time

import pytest

import sandboy

EXEC = ["/usr/bin", "/bin", "/usr/lib", "/lib", "/lib64"]


def _policy(wall: int) -> sandboy.Policy:
    return sandboy.Policy.from_mapping({"version": 1, "fs": {"read": ["/usr", "/lib", "/lib64", "/bin"], "exec": EXEC},
                                        "limits": {"wall_seconds": wall}})


@pytest.mark.parametrize("timeout", [0, 0.0, None])
def test_a_timeout_of_zero_keeps_the_policys_wall_time(timeout) -> None:
    started = time.monotonic()
    proc = sandboy.spawn(["/bin/sleep", "30"], _policy(1), timeout=timeout)
    result = proc.wait()
    assert time.monotonic() - started < 10
    assert result.outcome == "timed_out"
    with pytest.raises(ProcessLookupError):
        os.kill(proc.pid, 0)  # host side: the command is gone


def test_twin_a_timeout_shorter_than_the_wall_time_still_wins() -> None:
    started = time.monotonic()
    result = sandboy.run(["/bin/sleep", "30"], _policy(20), timeout=1)
    assert result.outcome == "timed_out" and time.monotonic() - started < 10
    assert sandboy.run(["/bin/true"], _policy(20), timeout=0).outcome == "exited"

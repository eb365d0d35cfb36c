"""`sandboy run` supervised (here: limits.wall_seconds) and hung up (SIGHUP: the terminal or SSH
session closed). The gate died of SIGHUP with a step's background process left running (session 9);
`sandboy run` had no such gap: under the tier it supervises in its own process and passes the
hang-up on to the command (whose PID namespace dies with its init); without it the CLI dies of
SIGHUP and its forked supervisor, told by PR_SET_PDEATHSIG, ends the tree. This probe keeps it so.
Checked from the host side, by name, with the tier and forced off."""

from __future__ import annotations

import os
import signal
import time

import pytest
from prockit import named
from supervisedkit import SH, named_after, supervised_run, until_up


@pytest.mark.parametrize("namespaces", ["1", "0"], ids=["tier", "forced-off"])
def test_a_hung_up_supervised_run_leaves_no_background_process(tmp_path, namespaces):
    marker = f"run-hup-{os.getpid()}-{time.monotonic_ns()}"
    up = tmp_path / "up"
    # a plain background process, and one that left the session and ignores SIGHUP (nohup's way)
    script = (f"(exec -a {marker}-bg /usr/bin/sleep 300) & "
              f"/usr/bin/setsid {SH} -c 'trap \"\" HUP; exec -a {marker}-away /usr/bin/sleep 300' & "
              f"echo > {up}; /usr/bin/sleep 300")
    with supervised_run(tmp_path, script, env=dict(os.environ, SANDBOY_NAMESPACES=namespaces)) as cli:
        until_up(cli, lambda: up.exists() and len(named(marker)) == 2)
        cli.send_signal(signal.SIGHUP)
        cli.wait(30)
    left = named_after(marker)
    for pid in left:
        os.kill(pid, signal.SIGKILL)  # the test cleans up what the run left
    assert left == [], "a process of the hung-up run outlived it"

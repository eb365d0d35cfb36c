"""`sandboy run` supervised (here: limits.wall_seconds) and hung up (SIGHUP: the terminal or SSH
session closed). The gate died of SIGHUP with a step's background process left running (session 9);
`sandboy run` had no such gap: under the tier it supervises in its own process and passes the
hang-up on to the command (whose PID namespace dies with its init); without it the CLI dies of
SIGHUP and its forked supervisor, told by PR_SET_PDEATHSIG, ends the tree. This probe keeps it so.
Checked from the host side, by name, with the tier and forced off."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from prockit import named

SH = "/usr/bin/bash"  # `exec -a` names the processes the host looks for


@pytest.mark.parametrize("namespaces", ["1", "0"], ids=["tier", "forced-off"])
def test_a_hung_up_supervised_run_leaves_no_background_process(tmp_path, namespaces):
    marker = f"run-hup-{os.getpid()}-{time.monotonic_ns()}"
    policy = tmp_path / "p.toml"
    policy.write_text('version = 1\n[fs]\nread = ["/usr", "/etc/ld.so.cache"]\nexec = ["/usr/bin"]\n'
                      f'write = ["{tmp_path}"]\n[limits]\nwall_seconds = 120\n')
    up = tmp_path / "up"
    # a plain background process, and one that left the session and ignores SIGHUP (nohup's way)
    script = (f"(exec -a {marker}-bg /usr/bin/sleep 300) & "
              f"/usr/bin/setsid {SH} -c 'trap \"\" HUP; exec -a {marker}-away /usr/bin/sleep 300' & "
              f"echo > {up}; /usr/bin/sleep 300")
    sandboy = os.path.join(os.path.dirname(sys.executable), "sandboy")
    cli = subprocess.Popen([sandboy, "run", "--policy", str(policy), "--", SH, "-c", script], cwd=tmp_path,
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           env=dict(os.environ, SANDBOY_NAMESPACES=namespaces), start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not (up.exists() and len(named(marker)) == 2):
            assert time.monotonic() < deadline and cli.poll() is None, cli.stderr.read() if cli.poll() is not None else ""
            time.sleep(0.02)
        cli.send_signal(signal.SIGHUP)
        cli.wait(30)
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()
    deadline = time.monotonic() + 10  # a forked supervisor hears of its parent's death by a signal
    while named(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = named(marker)
    for pid in left:
        os.kill(pid, signal.SIGKILL)  # the test cleans up what the run left
    assert left == [], "a process of the hung-up run outlived it"

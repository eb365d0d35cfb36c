"""`sandboy run` with a deadline (the policy sets limits.wall_seconds: supervised without the
namespace tier; under it, since session 12, exec mode waiting for the init in C), started as a test's own session
and ended from outside (a signal to the CLI), then looked at from the host: which of the run's
processes, named with `exec -a`, are still there."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time

from prockit import named

SH = "/usr/bin/bash"  # `exec -a` names the processes the host looks for
SANDBOY = os.path.join(os.path.dirname(sys.executable), "sandboy")


@contextlib.contextmanager
def supervised_run(tmp_path, script: str, env=None):
    """`sandboy run` of `SH -c script` in `tmp_path` (readable /usr, writable `tmp_path`, a 120 s
    deadline: so it is supervised), in a session of its own, stdio not the test's; the Popen. A
    CLI still running when the block ends is killed."""
    policy = tmp_path / "p.toml"
    policy.write_text('version = 1\n[fs]\nread = ["/usr", "/etc/ld.so.cache"]\nexec = ["/usr/bin"]\n'
                      f'write = ["{tmp_path}"]\n[limits]\nwall_seconds = 120\n')
    cli = subprocess.Popen([SANDBOY, "run", "--policy", str(policy), "--", SH, "-c", script], cwd=tmp_path,
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           env=env, start_new_session=True)
    try:
        yield cli
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()


def until_up(cli, ready, seconds: float = 30) -> None:
    """Wait until `ready()` (the run's processes are up); fails if the CLI ends first (with its
    stderr) or `seconds` pass."""
    deadline = time.monotonic() + seconds
    while not ready():
        assert time.monotonic() < deadline and cli.poll() is None, cli.stderr.read() if cli.poll() is not None else ""
        time.sleep(0.02)


def named_after(marker: str, seconds: float = 10) -> list:
    """The processes still named `marker` once none is, or `seconds` passed: a forked supervisor
    hears of its parent's death by a signal, and ends the tree after it."""
    deadline = time.monotonic() + seconds
    while named(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    return named(marker)

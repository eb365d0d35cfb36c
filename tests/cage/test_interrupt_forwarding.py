"""^C to `sandboy run` under the namespace tier, again and again (issue 7, the caller's terminal):
every interrupt of a running command is passed on at once, whatever path the run takes — a write
root (the post-run git check: `exec_mode._check_in_namespace`, or a kept plan's
`plan_cache.CachedPlan.run` with its snapshot) or none (`_wait_in_namespace`, a kept plan without
one), built or from the plan cache. The suite runs it with each executor (`make test`: the C one,
then SANDBOY_NATIVE=0; the Python executor keeps no plans, so its "kept" runs are builds).

Session 10 saw ^C held until the command ended, intermittently; session 11 traced it to the
probe's shell, not to the forwarding (interruptkit's docstring, ADR 0011 "Session 11"). This
loop keeps the forwarding honest: 20 runs per case, each interrupted once its `sleep` runs; the
only timing asserted is that the run ends long before the command would have (60 s)."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from interruptkit import signal_once_running  # noqa: E402
from test_redteam_cage10 import _env, _tier_env  # noqa: E402

pytestmark = pytest.mark.needs_kernel

SANDBOY = os.path.join(os.path.dirname(sys.executable), "sandboy")
ROUNDS = 20
POLICY = ('version = 1\n[fs]\nread = ["/usr", "/lib", "/lib64", "/etc", "/bin", "/dev/null"]\n'
          'exec = ["/usr/bin", "/bin"]\n{write}')


@pytest.mark.parametrize("root", ["write-root", "no-write-root"])
@pytest.mark.parametrize("cache", ["0", "1"], ids=["built", "kept"])
def test_every_interrupt_of_a_running_command_is_passed_on_at_once(tmp_path, root, cache):
    work = tmp_path / "W"
    work.mkdir()
    if root == "write-root":
        subprocess.run(["git", "init", "-q", str(work)], check=True)  # the check has a repository to judge
    policy = tmp_path / "p.toml"
    policy.write_text(POLICY.format(write=f'write = ["{work}"]\n' if root == "write-root" else ""))
    env = _env(tmp_path, **_tier_env(True), SANDBOY_PLAN_CACHE=cache, GIT_CONFIG_GLOBAL="/dev/null",
               GIT_CONFIG_NOSYSTEM="1", HOME=str(tmp_path))
    argv = [SANDBOY, "run", "--policy", str(policy), "--", "/bin/sh", "-c"]
    if cache == "1":
        for _ in range(2):  # the first builds and keeps the plan, the rounds below run from it
            time.sleep(0.15)  # (past fingerprint.TICK_NS: an entry is kept only where the root's stats settled)
            subprocess.run([*argv, "true"], env=env, cwd=work, stdin=subprocess.DEVNULL, capture_output=True,
                           timeout=60, check=True)
        if env.get("SANDBOY_NATIVE", "1") != "0":  # the rounds are hits: a run from a kept plan imports no compiler
            proc = subprocess.run([sys.executable, "-X", "importtime", *argv, "true"], env=env, cwd=work,
                                  stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
            imported = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines()
                        if line.startswith("import time:")}
            assert "sandboy.cli" in imported and "sandboy.confine.cage" not in imported, "not a hit"
    for round_ in range(ROUNDS):
        proc = subprocess.Popen([*argv, "echo started; sleep 60"], env=env, cwd=work, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert proc.stdout.readline() == "started\n"
            signal_once_running(proc, "sleep", signal.SIGINT)
            try:
                _, err = proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                pytest.fail(f"round {round_}: the interrupt was not passed on (the command still ran 30 s later)")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        # the command died of the interrupt, and `sandboy run` as it did (exec_mode.die_like)
        assert proc.returncode == -signal.SIGINT, (round_, proc.returncode, err)

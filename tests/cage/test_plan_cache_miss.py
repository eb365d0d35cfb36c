"""What a plan cache miss keys its entry with is what the plan was built from (ADR 0028, session 9).

An entry pairs a plan with the inputs it was built from. Taken after the command had run (as
until session 9), the policy's bytes and the code's identities could be newer than the plan: an
edit of the policy while a command ran (or an upgrade of Sandboy) was written with the OLD plan,
and every later run of the edited policy ran the old plan. Each probe here changes an input while
the first run's command runs (the command says "ready" and waits for a line on stdin: no timing),
then checks from the host side that the next runs behave as a rebuild would.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sandboy.confine import namespaces

pytestmark = pytest.mark.needs_kernel

SANDBOY = os.path.join(os.path.dirname(sys.executable), "sandboy")
POLICY = 'version = 1\n[fs]\nread = ["/usr", "/lib", "/lib64", "/etc", "{data}"]\nexec = ["/usr/bin", "/bin"]\n{more}'
# the command: says it runs, waits for the test's line, then reads the file
WAIT_THEN_CAT = 'echo ready; read line; cat "$0"'


@pytest.fixture
def env(tmp_path):
    if not namespaces.availability()[0]:
        pytest.skip("the plan cache keeps runs under the namespace tier only")
    keep = {k: v for k, v in os.environ.items() if k not in ("SANDBOY_NATIVE", "SANDBOY_NAMESPACES", "SANDBOY_PLAN_CACHE")}
    return dict(keep, SANDBOY_CACHE_DIR=str(tmp_path / "cache"))


def start(env, policy, *argv, cwd):
    """A real `sandboy run`, its stdio three pipes (a shape the cache keeps)."""
    return subprocess.Popen([sys.executable, "-X", "importtime", SANDBOY, "run", "--policy", str(policy), "--", *argv],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=cwd, start_new_session=True)


def finish(proc, line="") -> tuple:
    """(returncode, stdout, whether it ran a cached plan: it imported no compiler)."""
    out, err = proc.communicate(line, timeout=120)
    imported = {entry.rsplit("|", 1)[-1].strip() for entry in err.splitlines() if entry.startswith("import time:")}
    assert "sandboy.cli" in imported, err
    assert "Traceback" not in err, err
    return proc.returncode, out, "sandboy.confine.cage" not in imported


def run_edited_meanwhile(env, policy, argv, cwd, edit) -> tuple:
    """Run `argv` (WAIT_THEN_CAT), call `edit()` once its command runs, let it end."""
    proc = start(env, policy, *argv, cwd=cwd)
    assert proc.stdout.readline() == "ready\n", proc.stderr.read() if proc.poll() is not None else ""
    edit()
    return finish(proc, "go\n")


def _reading_b(tmp_path) -> tuple:
    """(`data` holding the file `b`, a policy file granting it, the WAIT_THEN_CAT argv reading it)."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "b").write_text("B")
    policy = tmp_path / "p.toml"
    policy.write_text(POLICY.format(data=data, more=""))
    return data, policy, ["/bin/sh", "-c", WAIT_THEN_CAT, str(data / "b")]


def test_a_policy_edited_while_its_command_runs_is_never_paired_with_the_old_plan(env, tmp_path):
    """The operator denies a file while a (building) run's command runs: no later run of the
    edited policy reads it — the entry keeps the bytes the build parsed, not the file's bytes
    after the run (redcage9, reproduced at 69b7d7a: the next runs HIT and printed the file)."""
    data, policy, argv = _reading_b(tmp_path)
    code, out, _ = run_edited_meanwhile(env, policy, argv, tmp_path, lambda: policy.write_text(
        POLICY.format(data=data, more=f'deny = ["{data}/b"]\n')))
    assert (code, out) == (0, "B")  # the run that started under the old policy ("ready" read already)
    for _ in range(2):  # the next run (a miss: built from the edited policy) and the one after (a hit)
        code, out, _ = finish(start(env, policy, *argv, cwd=tmp_path), "go\n")
        assert code != 0 and out == "ready\n", out  # refused: never the old plan's read
    assert finish(start(env, policy, *argv, cwd=tmp_path), "go\n")[2]  # (the cache works: that one was a hit)


def test_the_policy_is_parsed_from_the_bytes_the_entry_is_keyed_with(env, tmp_path):
    """The policy file is read once: the entry made by a run holds the bytes its build parsed.
    An edit back and forth around runs gives each its own entry's behaviour (both files granted
    and denied in turn), never one policy's plan under the other's bytes."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "b").write_text("B")
    policy = tmp_path / "p.toml"
    open_text, closed_text = POLICY.format(data=data, more=""), POLICY.format(data=data, more=f'deny = ["{data}/b"]\n')
    argv = ["/bin/cat", str(data / "b")]
    for text, expected in ((open_text, "B"), (closed_text, ""), (open_text, "B"), (closed_text, ""), (open_text, "B")):
        policy.write_text(text)
        code, out, _ = finish(start(env, policy, *argv, cwd=tmp_path))
        assert out == expected and (code == 0) == bool(expected), (text, code, out)


def test_an_upgrade_while_the_command_runs_is_a_miss_for_the_next_run(env, tmp_path):
    """Sandboy's code changed while a (building) run's command ran: the entry holds the
    identities of the code that BUILT the plan, so the next run is a miss (rebuilt by the new
    code), not a hit of the old code's plan under the new code's identities."""
    tree = tmp_path / "tree"
    shutil.copytree(Path(namespaces.__file__).parents[2] / "sandboy", tree / "sandboy",
                    ignore=shutil.ignore_patterns("__pycache__"))
    env = dict(env, PYTHONPATH=str(tree))
    data, policy, argv = _reading_b(tmp_path)
    seccomp = tree / "sandboy" / "confine" / "seccomp.py"
    code, out, _ = run_edited_meanwhile(env, policy, argv, tmp_path,
                                        lambda: seccomp.write_text(seccomp.read_text() + "\n# upgraded\n"))
    assert (code, out) == (0, "B")
    code, out, hit = finish(start(env, policy, *argv, cwd=tmp_path), "go\n")
    assert (code, out, hit) == (0, "ready\nB", False)  # built by the new code
    assert finish(start(env, policy, *argv, cwd=tmp_path), "go\n")[2]  # and kept: the next one hits

"""The command's fd 0-2 are exactly the fds its caller passed, whatever their numbers.

Bug (session 8's loose end 2): the child's plan put the caller's `stdin`, `stdout`, `stderr` on
fd 0, 1, 2 by one dup2 after another, so a source that was itself one of fd 0-2 and a target of
an earlier dup2 was replaced before it was read: `sandboy.run(..., stdin=1, stdout=0)` gave the
command the caller's fd 1 on BOTH fd 0 and fd 1 (a file the caller meant as its input became its
output too, the input lost). Fix: `hygiene.plan_redirects` makes the redirects one parallel
assignment: a source that is also a target is first copied above fd 2.

Probe: a fresh process puts four distinct pipes on its fd 0, 1, 2 and 9, then runs a command for
every assignment of {0, 1, 2, 9} to stdin/stdout/stderr (64); the command writes what its fd
0-2 are (its shell's `readlink /proc/$$/fd/N`: the pipe's inode, the same inside the cage) to a file, and
the host compares them with the pipes the caller passed. With and without the namespace tier,
with each executor (SANDBOY_NATIVE=1: the C one, 0: the pure-Python one). Pipes are left on the
command's fds as they are in every mode (namespaces.plan_stdio), so the inode is the witness.
"""

import itertools
import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.needs_kernel

SOURCES = (0, 1, 2, 9)


@pytest.mark.parametrize("native", ["1", "0"])
@pytest.mark.parametrize("tier", ["1", "0"])
def test_every_assignment_of_caller_fds_reaches_the_command_as_passed(tmp_path, native, tier):
    script = textwrap.dedent("""\
        import itertools, json, os, sys
        import sandboy
        from sandboy.confine.cage import build
        d = sys.argv[1]
        pol = sandboy.Policy.from_mapping({"version": 1, "fs": {
            "read": ["/usr", "/etc", "/proc"], "exec": ["/usr/bin", "/bin", "/usr/lib", "/lib", "/lib64"],
            "write": [d]}}, "<test>")
        log = os.open(f"{d}/log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        pipes = []
        for target in (0, 1, 2, 9):
            r, w = os.pipe()
            pipes += [r, w]
            os.dup2(w, target)  # four distinct pipes on the caller's fd 0, 1, 2, 9
        passed = {n: os.readlink(f"/proc/self/fd/{n}") for n in (0, 1, 2, 9)}
        cage = build(pol, cwd="/")
        outcomes = []
        for sources in itertools.product((0, 1, 2, 9), repeat=3):
            seen = f"{d}/seen"
            r = sandboy.run(["/bin/sh", "-c", f"x=$(readlink /proc/$$/fd/0 /proc/$$/fd/1 /proc/$$/fd/2); echo $x > {seen}"],
                            cage, stdin=sources[0], stdout=sources[1], stderr=sources[2])
            got = open(seen).read().split() if r.returncode == 0 else [f"rc={r.returncode} {r.error}"]
            outcomes.append({"sources": sources, "want": [passed[s] for s in sources], "got": got})
            os.unlink(seen)
        os.write(log, json.dumps(outcomes).encode())
        """)
    (tmp_path / "probe.py").write_text(script)
    env = {**os.environ, "SANDBOY_NATIVE": native, "SANDBOY_NAMESPACES": tier}
    done = subprocess.run([sys.executable, str(tmp_path / "probe.py"), str(tmp_path)], env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr.decode()
    outcomes = json.loads((tmp_path / "log").read_text())
    assert len(outcomes) == len(SOURCES) ** 3 == len(list(itertools.product(SOURCES, repeat=3)))
    wrong = [o for o in outcomes if o["got"] != o["want"]]
    assert not wrong, f"{len(wrong)} of {len(outcomes)} assignments reached the command otherwise: {wrong[:4]}"

"""What the command sees of the process that started the run, under the namespace tier.

The namespace's init (pid 1 there) runs in the memory of the process that called `sandboy.run`
(ADR 0021; before it, in a copy of that memory). /proc/1/mem, maps and environ are refused to
the command (Landlock's ptrace scoping), but /proc/1/cmdline and /proc/1/status are not
ptrace-checked: the command read the caller's whole argv — an API user's
`agent.py --token=...` — and its name and size. The tier's /proc is now mounted with
`hidepid=invisible` and a group nobody holds (namespaces.PROC_OPTIONS): processes outside the
command's Landlock domain are not there at all. Probe (root and uid 65534, judged here on the
host from what the command printed) and twin (the command's own processes: /proc, `ps`).
"""

from __future__ import annotations

import os
import pathlib
import secrets
import subprocess
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent.parent))
from userkit import as_user, skip_unless_nobody_can_run, world_readable_tmp  # noqa: E402

from sandboy.confine import namespaces  # noqa: E402

pytestmark = pytest.mark.skipif(not namespaces.availability()[0] or namespaces.forced_off(),
                                reason="the namespace tier is not available here")

SRC = pathlib.Path(namespaces.__file__).resolve().parents[2]

CALLER = r"""
import sys
from sandboy import Policy, run
policy = Policy.from_mapping({"version": 1, "fs": {"read": ["/usr", "/lib", "/lib64", "/bin", "/etc", "/proc"],
                                                    "exec": ["/usr/bin", "/bin"]}}, "<test>")
script = ("tr '\\0' ' ' < /proc/1/cmdline; echo; cat /proc/1/status; "
          "sleep 5 & echo CHILD $!; "
          # the background child is `sh` until it has exec'd sleep: wait for that (bounded), or the
          # twin below races it (ps listed it as 'sh' about one run in three under load)
          "i=0; while read c < /proc/$!/comm && [ \"$c\" != sleep ] && [ $i -lt 100000 ]; do i=$((i+1)); done; "
          "tr '\\0' ' ' < /proc/$!/cmdline; echo; ps -e -o pid=,comm=; kill $!")
result = run(["/bin/sh", "-c", script], policy)
print("RESULT", result.outcome, result.returncode)
"""


@pytest.mark.parametrize("user", ["root", "nobody"])
def test_the_command_cannot_read_its_callers_argv_through_the_init(user):
    token = "sandboy-caller-token-" + secrets.token_hex(8)
    if user == "nobody":
        skip_unless_nobody_can_run()
        prefix = as_user()
        python = "/usr/bin/python3"
    else:
        if os.geteuid() != 0:
            pytest.skip("as root only")
        prefix, python = [], sys.executable
    with world_readable_tmp("sandboy-init-") as cwd:
        out = subprocess.run([*prefix, python, "-c", CALLER, f"--token={token}"], cwd=cwd,
                             env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(SRC), "HOME": str(cwd)},
                             capture_output=True, text=True, timeout=120)
    assert "RESULT exited 0" in out.stdout, out.stdout + out.stderr
    # the probe: nothing of the caller (its argv, its name and memory size) reaches the command
    assert token not in out.stdout and "--token" not in out.stdout, out.stdout
    assert "VmRSS" not in out.stdout, out.stdout
    # the twin: the command's own processes are all there, by /proc and by ps
    child = next(line.split()[1] for line in out.stdout.splitlines() if line.startswith("CHILD "))
    assert "sleep 5" in out.stdout, out.stdout
    listed = {line.split()[0]: line.split()[1] for line in out.stdout.splitlines()
              if len(line.split()) == 2 and line.split()[0].isdigit()}
    assert listed.get(child) == "sleep" and "1" not in listed, listed

"""A gate step (root, as in CI) against the host's device nodes (session 7 red-team).

Every step's stdin is the gate's /dev/null, and the step's /dev holds copies of the host's
null, zero, full, random and urandom: the same inodes. Landlock does not mediate metadata, so
before the fix `chmod 000 /proc/self/fd/0` (or `/dev/null`) in a step changed the host's
/dev/null for every process of the machine. Checked from the host side: mode, owner, mtime.
(Without the namespace tier this is the "metadata outside the write roots" item the cage
reports as degraded.)
"""

from __future__ import annotations

import os
import stat

import pytest

from gatekit import by_name, make_repo, run_json

from sandboy.confine import namespaces

pytestmark = pytest.mark.skipif(not namespaces.availability()[0] or os.geteuid() != 0,
                                reason="needs the namespace tier, as root (the host's nodes are root's)")

NODES = ("null", "zero", "full", "random", "urandom")

# The same mode (harmless if it got through), then a time far in the past: what the host checks.
STEP = """
for path in /proc/self/fd/0 /dev/null /dev/zero /dev/full /dev/random /dev/urandom; do
  if chmod 666 "$path" 2>/dev/null; then echo "CHANGED mode $path"; else echo "REFUSED mode $path"; fi
  if touch -d 2001-01-01 "$path" 2>/dev/null; then echo "CHANGED time $path"; else echo "REFUSED time $path"; fi
done
"""


def _stamps() -> dict:
    out = {}
    for name in NODES:
        st = os.stat(f"/dev/{name}")
        out[name] = (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, st.st_atime_ns, st.st_mtime_ns)
    return out


def _restore(before: dict) -> None:
    for name, (mode, uid, gid, atime, mtime) in before.items():
        path = f"/dev/{name}"
        os.chmod(path, mode)
        os.chown(path, uid, gid)
        os.utime(path, ns=(atime, mtime))


def test_a_step_cannot_change_the_hosts_device_nodes(tmp_path, fake_home):
    before = _stamps()
    try:
        gate = f"""
            [[step]]
            name = "devices"
            run = '''{STEP}'''

            [[step]]
            name = "twin"
            run = "cat && echo x > /dev/null && head -c 4 /dev/zero | wc -c && echo read-eof"
        """
        repo = make_repo(tmp_path, gate)
        proc, report = run_json(repo, tmp_path, home=fake_home)
        steps = by_name(report)
        out = steps["devices"]["output_tail"]
        assert _stamps() == before, "a gate step changed the host's device nodes"
        assert "CHANGED" not in out, out
        assert out.count("REFUSED") == 12, out
        twin = steps["twin"]
        assert twin["status"] == "passed" and twin["output_tail"].split() == ["4", "read-eof"], twin
    finally:
        if _stamps() != before:
            _restore(before)

"""Gate steps under the namespace tier (issue #7 items 1, 3, 6, 7; docs/adr/0009-namespace-tier.md):
a hostile step of an untrusted repository, checked from the host after the gate returned, and the
honest twin in the same repository."""

from __future__ import annotations

import os
import stat
import subprocess
import time

import pytest
from gatekit import by_name, make_repo, run_json

from sandboy.confine import namespaces

pytestmark = pytest.mark.skipif(not namespaces.availability()[0],
                                reason=f"no namespace tier here: {namespaces.availability()[1]}")

HOSTILE = r'''
import errno, os, sys
secret, marker = sys.argv[1], sys.argv[2]
for name, call in (("chmod", lambda: os.chmod(secret, 0o644)), ("utime", lambda: os.utime(secret, (1, 1)))):
    try:
        call(); print("ESCAPED", name)
    except OSError as exc:
        print("refused", name, errno.errorcode[exc.errno])
seen = []
for pid in os.listdir("/proc"):
    if pid.isdigit() and int(pid) != os.getpid():
        try:
            if marker.encode() in open(f"/proc/{pid}/cmdline", "rb").read():
                seen.append(pid)
        except OSError:
            pass
print("ESCAPED saw", seen) if seen else print("refused host processes")
print("devices", " ".join(sorted(os.listdir("/dev"))))
'''

HONEST = "touch built && chmod 640 built && echo made > $TMPDIR/x && cat $TMPDIR/x"


def test_hostile_step_reaches_no_metadata_device_or_process_of_the_host(tmp_path):
    outside = tmp_path / "operator"
    outside.mkdir()
    secret = outside / "secret"
    secret.write_text("operator's secret\n")
    os.chmod(secret, 0o600)
    before = os.stat(secret)
    marker = f"sbx-gate-{os.getpid()}-{time.monotonic_ns()}"
    victim = subprocess.Popen([marker, "60"], executable="/bin/sleep")
    try:
        repo = make_repo(tmp_path, f'''
            [[step]]
            name = "hostile"
            run = "python3 hostile.py {secret} {marker}"
            [[step]]
            name = "honest"
            run = "{HONEST}"
            ''', {"hostile.py": HOSTILE})
        proc, report = run_json(repo, tmp_path)
    finally:
        victim.kill()
        victim.wait()
    steps = by_name(report)
    out = steps["hostile"]["output_tail"]
    assert "ESCAPED" not in out, out
    assert "refused chmod EROFS" in out and "refused utime EROFS" in out and "refused host processes" in out
    devices = next(line for line in out.splitlines() if line.startswith("devices")).split()[1:]
    assert set(devices) <= {"fd", "full", "null", "ptmx", "pts", "random", "shm", "stderr", "stdin", "stdout",
                            "urandom", "zero", "tty"}, devices
    after = os.stat(secret)
    assert stat.S_IMODE(after.st_mode) == 0o600 and after.st_mtime_ns == before.st_mtime_ns
    # the twin, in the same gate run: work in the repository and in {tmp} goes on
    assert steps["honest"]["status"] == "passed", steps["honest"]
    assert stat.S_IMODE(os.stat(repo / "built").st_mode) == 0o640

"""The gate where namespaces are unavailable for real — the common case of CI inside a container
(issue 7: best-effort degrades with the exact list of what is lost; strict refuses with 125).

`sandboy gate` runs under a Docker-like seccomp filter (tests/containerkit.py): Sandboy is not
told, it finds out. Checked from the host: each step's report names the reason and what the
built-in ceiling's grants lose ({tmp}, /proc, metadata — not /dev, which the ceiling never
grants, nor SysV IPC, which it refuses); a hostile step is still held by Landlock and seccomp
(secret, setuid bit, a file outside the repository); the honest twin passes; a step whose policy
says `compat.landlock = "strict"` is refused (125) and runs nothing.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest
from gatekit import by_name, make_repo

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from containerkit import in_container  # noqa: E402

HOSTILE = r"""
cat {secret} 2>/dev/null && echo ESCAPED-READ
echo planted > {outside}/planted 2>/dev/null && echo ESCAPED-WRITE
cp /bin/sh rootsh && chmod 4755 rootsh 2>/dev/null && echo ESCAPED-SETUID
unshare -U true 2>/dev/null && echo ESCAPED-USERNS
echo held
"""


@pytest.mark.parametrize("way", ["container", "apparmor"])
def test_gate_in_a_container_degrades_honestly_and_still_confines(tmp_path, way):
    outside = tmp_path / "operator"
    outside.mkdir()
    secret = outside / "secret"
    secret.write_text("operator's secret\n")
    os.chmod(secret, 0o600)
    repo = make_repo(tmp_path, f'''
        [[step]]
        name = "hostile"
        run = """{HOSTILE.format(secret=secret, outside=outside)}"""
        [[step]]
        name = "honest"
        run = "touch built && chmod 640 built && echo made > $TMPDIR/x && cat $TMPDIR/x"
        [[step]]
        name = "strict"
        run = "touch ran"
        policy = "strict"
        [policy.strict]
        version = 1
        fs.read = ["/usr", "/etc"]
        fs.exec = ["/usr/bin", "/bin"]
        fs.write = ["{{repo}}"]
        compat.landlock = "strict"
        ''')
    report_path = tmp_path / "report.json"
    environ = {k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"}
    environ.update(HOME=str(tmp_path), SANDBOY_CACHE_DIR=str(tmp_path / "cache"))  # no note that the tier works
    proc = subprocess.run(in_container(way, [sys.executable, "-m", "sandboy.gate.cli", str(repo), "--json",
                                             str(report_path)]),
                          capture_output=True, text=True, env=environ, timeout=120)
    assert "Traceback" not in proc.stderr, proc.stderr
    steps = by_name(json.loads(report_path.read_text()))
    reason = {"container": "clone: Operation not permitted",
              "apparmor": "make / private: Operation not permitted"}[way]
    for name in ("hostile", "honest"):
        lost = [d for d in steps[name]["degraded"] if d.startswith(f"namespaces unavailable ({reason})")]
        said = " ".join(lost)
        for phrase in ("chmod/chown/utimensat/setxattr", "host processes under a granted /proc",
                       "{tmp} is a per-run host directory", "the host's network interfaces"):
            assert phrase in said, (name, phrase, lost)
        assert "raw block devices" not in said and "host SysV IPC" not in said, lost
        assert len(lost) == 4, lost
    out = steps["hostile"]["output_tail"]
    assert "ESCAPED" not in out and "held" in out, out
    assert secret.read_text() == "operator's secret\n" and not (outside / "planted").exists()
    assert stat.S_IMODE(os.stat(repo / "rootsh").st_mode) & 0o6000 == 0
    assert steps["honest"]["status"] == "passed", steps["honest"]
    assert stat.S_IMODE(os.stat(repo / "built").st_mode) == 0o640
    strict = steps["strict"]
    assert strict["status"] != "passed" and strict["returncode"] == 125 and reason in (strict["error"] or ""), strict
    assert not (repo / "ran").exists()
    assert proc.returncode != 0  # the gate fails: its strict step could not run

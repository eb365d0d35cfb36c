"""Hostile gate steps against the seccomp rules of issue 7 (setuid files left in the repository,
host SysV IPC), checked from the host after the gate, each with a legitimate twin."""

from __future__ import annotations

import ctypes
import os
import shutil
import stat

import pytest
from gatekit import by_name, make_repo, run_json

from sandboy.gate import ceiling as ceilings

SETUID_STEP = """
cp /bin/bash ./rootsh && chmod 4755 ./rootsh; echo "chmod=$?"
python3 -c 'import os
try:
    os.open("created", os.O_CREAT | os.O_WRONLY, 0o6755); print("open=ok")
except OSError as e:
    print("open=" + e.strerror)'
chmod 755 ./rootsh && echo "twin=$(stat -c %a ./rootsh)"
"""


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_step_leaves_no_setuid_file_in_the_repository(tmp_path):
    """Issue 7 item 2 through the gate: the step owns the repository (as root: every root-owned
    file), yet the host finds no setuid/setgid bit afterwards; chmod 755 works."""
    repo = make_repo(tmp_path, "[[step]]\nname = \"attack\"\nrun = \"bash attack.sh\"\n",
                     {"attack.sh": SETUID_STEP})
    _, report = run_json(repo, tmp_path)
    out = by_name(report)["attack"]["output_tail"]
    assert "chmod=1" in out and "open=Operation not permitted" in out and "twin=755" in out, out
    assert _mode(repo / "rootsh") == 0o755
    assert not (repo / "created").exists()
    os.chmod(repo / "rootsh", 0o4755)  # the twin outside: the kernel itself allows it
    assert _mode(repo / "rootsh") == 0o4755


SYSV_STEP = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
shm = libc.shmget(int(sys.argv[1], 0), 0, 0)
print("shmget=" + ("ok" if shm >= 0 else os.strerror(ctypes.get_errno())))
"""


@pytest.fixture
def host_segment():
    """A SysV segment of the host under a key unique to this test."""
    libc = ctypes.CDLL(None, use_errno=True)
    key = 0x5C000000 | os.getpid() & 0xFFFFFF
    shm = libc.shmget(key, 4096, 0o1000 | 0o2000 | 0o600)  # IPC_CREAT | IPC_EXCL
    assert shm >= 0, os.strerror(ctypes.get_errno())
    yield key
    libc.shmctl(shm, 0, None)  # IPC_RMID


def test_step_cannot_reach_host_sysv_ipc(tmp_path, host_segment):
    """Issue 7 item 6 through the gate: a step asking for `[ipc] sysv = true` is narrowed by the
    built-in ceiling and refused (EPERM); under a ceiling that allows it, the step gets SysV IPC —
    its own, in the cage's IPC namespace where the kernel allows one, else the host's."""
    gate = (f"[[step]]\nname = \"ipc\"\nrun = \"python3 -B ipc.py {host_segment:#x}\"\npolicy = \"p\"\n"
            "[policy.p]\nversion = 1\nipc = { sysv = true }\n")
    repo = make_repo(tmp_path, gate, {"ipc.py": SYSV_STEP})
    _, report = run_json(repo, tmp_path)
    step = by_name(report)["ipc"]
    assert "shmget=Operation not permitted" in step["output_tail"], step
    assert any("SysV IPC" in n["text"] for n in step["narrowings"]), step
    ceiling = tmp_path / "ceiling.toml"
    ceiling.write_text(ceilings.to_toml({**ceilings.BUILTIN, "ipc": {"sysv": True}}))
    _, report = run_json(repo, tmp_path, "--ceiling", ceiling)
    out = by_name(report)["ipc"]["output_tail"]
    assert "shmget=ok" in out or "shmget=No such file or directory" in out, out


@pytest.mark.skipif(shutil.which("ipcs") is None, reason="needs util-linux ipcs")
def test_step_leaves_no_queue_behind(tmp_path):
    key = 0x5D000000 | os.getpid() & 0xFFFFFF
    script = ("import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
              f"print('msgget=' + ('ok' if libc.msgget({key}, 0o1000 | 0o600) >= 0 else "
              "os.strerror(ctypes.get_errno())))\n")
    repo = make_repo(tmp_path, "[[step]]\nname = \"q\"\nrun = \"python3 -B q.py\"\n", {"q.py": script})
    _, report = run_json(repo, tmp_path)
    assert "msgget=Operation not permitted" in by_name(report)["q"]["output_tail"]
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.msgget(key, 0) == -1 and ctypes.get_errno() == 2  # ENOENT: no queue on the host

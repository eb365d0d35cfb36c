"""Red-team regression probes that held, kept because what they guard is as bad as a setuid
file left for the host: a file capability (`security.capability`) planted on a copy of a program
in a write root. Checked from the host side, with and without the namespace tier."""

from __future__ import annotations

import os
import shutil
import struct

import pytest

pytestmark = pytest.mark.needs_kernel

# struct vfs_cap_data, revision 2: every permitted and inheritable capability, effective bit set
FILE_CAPS = struct.pack("<IIIII", 0x02000000 | 1, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF)
SCRIPT = f"""
import os
for name in ("security.capability", "trusted.sandboy"):
    try:
        os.setxattr("t", name, {FILE_CAPS!r})
        print("SET", name)
    except OSError as exc:
        print("refused", name, exc.errno)
os.setxattr("t", "user.sandboy", b"ok")
print("USER_XATTR_WORKS")
"""


@pytest.mark.parametrize("namespaces", ["tier", "forced-off"])
def test_no_file_capability_left_for_the_host(cage, monkeypatch, namespaces):
    if namespaces == "forced-off":
        monkeypatch.setenv("SANDBOY_NAMESPACES", "0")
    shutil.copy("/bin/true", cage.work / "t")
    policy = cage.policy(fs={"read": ["/etc", "/usr"], "exec": ["/usr/bin", "/bin"], "write": ["."]},
                         env={"pass": [], "set": {"PATH": "/usr/bin:/bin"}})
    result = cage.run(argv=["python3", "-c", SCRIPT], policy=policy)
    assert "SET" not in result.out, result
    assert "USER_XATTR_WORKS" in result.out, result  # twin: ordinary xattrs in a write root work
    names = os.listxattr(cage.work / "t")
    assert "security.capability" not in names and "trusted.sandboy" not in names, names

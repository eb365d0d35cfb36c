"""fs.protect naming a FILE that is itself a write root (rvsec7's review): `write = ["f.txt"]` +
`protect = ["f.txt"]` — the file stayed writable, with the tier and without it, while the same
for a DIRECTORY write root holds (read-only). fs.protect means "readable, never writable" (ADR
0013) and a protection that cannot be applied is refused: exit 2 naming fs.protect. (The
capability compiler no longer writes such a pair: a write.allow inside the policy files grants
nothing.)"""

from __future__ import annotations

import pytest
from cagekit import use_tier


@pytest.mark.needs_kernel
@pytest.mark.parametrize("tier", ["tier", "no-tier"])
def test_a_protected_file_that_is_a_write_root_is_refused(cage, monkeypatch, tier):
    use_tier(tier, monkeypatch)
    target = cage.work / "f.txt"
    target.write_text("mine\n")
    policy = cage.policy(fs={"read": ["/etc", "/proc/self"], "exec": ["/usr/bin", "/bin"],
                             "write": [str(target)], "protect": [str(target)]})
    result = cage.run(argv=["/bin/sh", "-c", f"echo OWNED >> {target}"], policy=policy, via="cli")
    assert target.read_text() == "mine\n"  # host side
    assert result.rc == 2 and "fs.protect" in result.err and "cannot be protected" in result.err, result


@pytest.mark.needs_kernel
def test_twin_a_protected_directory_that_is_a_write_root_is_read_only(cage):
    target = cage.work / "d"
    target.mkdir()
    policy = cage.policy(fs={"read": ["/etc", "/proc/self"], "exec": ["/usr/bin", "/bin"],
                             "write": [str(target)], "protect": [str(target)]})
    cage.run(argv=["/bin/sh", "-c", f"touch {target}/new"], policy=policy, via="cli")
    assert not (target / "new").exists()

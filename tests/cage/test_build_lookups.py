"""One resolution of the write roots per build (`policy.resolve.BuildLookups`, session 14).

A build asks the same questions of its write roots in several stages — the protected paths'
watch (`fingerprint_build.protected_watch`), their resolution (`protected.resolve_protected`),
the PATH directories (`path_dirs.on_path`), Sandboy's own installation (`own_install`), the launch
warnings — and now asks each once, for that build only. What must hold: a write root that leads
somewhere else LATER (a symlink repointed between two runs, or between two builds of one process)
is resolved anew by the next build, and what the new directory holds is protected there. Checked
from the host side: the bytes of the start-up file the command tries to change.
"""

import os
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_plan_cache import Runner  # noqa: E402

from sandboy.confine import namespaces  # noqa: E402

pytestmark = pytest.mark.needs_kernel

PLANT = 'echo planted >> link/.bashrc; echo work > link/work.txt; cat link/work.txt'


def _two_targets(base: Path) -> tuple:
    """`base/a` (no start-up file) and `base/b` (an operator's `.bashrc`), and `base/link` -> a."""
    a, b = base / "a", base / "b"
    a.mkdir()
    b.mkdir()
    (b / ".bashrc").write_text("# operator's\n")
    (base / "link").symlink_to("a")
    return a, b


def _repoint(link: Path, target: str) -> None:
    link.unlink()
    link.symlink_to(target)


def test_a_write_root_repointed_since_the_kept_build_is_resolved_anew(tmp_path):
    """`write = ["{cwd}/link"]`, link -> a: kept. The link is repointed to b, which holds a
    `.bashrc`: the next run is a miss, its build resolves the root to b and binds b/.bashrc
    read-only (the bytes stay the operator's); the work file is written in b (the legitimate
    twin), and the run after it is a hit that holds the same."""
    if not namespaces.availability()[0]:
        pytest.skip("the plan cache keeps runs under the namespace tier only")
    runner = Runner(tmp_path)
    runner.write_policy(more='write = ["{cwd}/link"]\n')
    a, b = _two_targets(runner.cwd)
    time.sleep(0.15)  # (past fingerprint.TICK_NS: an entry is kept only for settled stats)
    runner.run("/bin/true")
    kept = runner.run("/bin/true")
    assert kept.hit and len(runner.entries()) == 1, kept.err

    _repoint(runner.cwd / "link", "b")
    time.sleep(0.15)
    after = runner.run("/bin/sh", "-c", PLANT)
    assert not after.hit, after.err
    assert (b / ".bashrc").read_text() == "# operator's\n"  # protected in the root it leads to now
    assert after.stdout == "work\n" and (b / "work.txt").read_text() == "work\n"
    assert not (a / ".bashrc").exists() and not (a / "work.txt").exists()
    (b / "work.txt").unlink()
    time.sleep(0.15)
    runner.run("/bin/true")
    again = runner.run("/bin/sh", "-c", PLANT)
    assert again.hit and again.stdout == "work\n", again.err
    assert (b / ".bashrc").read_text() == "# operator's\n"


def test_two_builds_of_one_process_each_resolve_the_write_roots(tmp_path):
    """The API builds a cage per policy in one process (`sandboy.run`): a write root repointed
    between two builds is resolved anew by the second — the lookups live with one build, never
    with the process. The second run cannot change b's `.bashrc` (host side) and writes its work
    in b."""
    from sandboy import Policy, run

    a, b = _two_targets(tmp_path)
    policy = Policy.from_mapping({"version": 1, "fs": {"read": ["/usr", "/lib", "/lib64", "/etc"],
                                                       "exec": ["/usr/bin", "/bin"],
                                                       "write": [str(tmp_path / "link")]}}, "<lookups>")
    with open(os.devnull, "wb") as null:
        first = run(["/bin/sh", "-c", PLANT], policy, cwd=str(tmp_path), timeout=30, stdin=null.fileno(),
                    stdout=null.fileno(), stderr=null.fileno())
        assert first.returncode == 0 and (a / ".bashrc").read_text() == "planted\n"
        _repoint(tmp_path / "link", "b")
        # another policy of the same paths: a new build (a cage kept for the first is checked by its
        # fingerprint, which asks anew as well: tests/cage/test_reuse_protected.py)
        second_policy = Policy.from_mapping({**policy.to_toml_dict(), "ipc": {"sysv": False}}, "<lookups 2>")
        second = run(["/bin/sh", "-c", PLANT], second_policy, cwd=str(tmp_path), timeout=30, stdin=null.fileno(),
                     stdout=null.fileno(), stderr=null.fileno())
    assert (b / ".bashrc").read_text() == "# operator's\n"
    assert (b / "work.txt").read_text() == "work\n" and second.returncode == 0  # (`cat` of the work: the append alone refused)

"""Fixtures for the attacker-side cage tests: a compiled C attacker and a way to run it caged.

Every probe runs on the real kernel (real Landlock, real seccomp). The attacker is `probe.c`,
compiled once per session; it prints "ok ..." and exits 0 when an action worked, or prints the
errno name (e.g. "EACCES") and exits 1 when the kernel refused it.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys

import pytest
from cagekit import Cage

HERE = os.path.dirname(os.path.abspath(__file__))


def _cage_unavailable() -> str | None:
    if sys.platform != "linux" or platform.machine() != "x86_64":
        return "the cage is Linux x86_64 only"
    from sandboy.confine import landlock

    if landlock.abi_version() < 1:
        return "Landlock is not available on this kernel"
    if not shutil.which("gcc"):
        return "gcc is needed to build the attacker (apt-get install gcc libc6-dev)"
    return None


def pytest_collection_modifyitems(config, items):
    reason = _cage_unavailable()
    if reason:
        skip = pytest.mark.skip(reason=reason)
        for item in items:
            if "needs_kernel" in item.keywords:
                item.add_marker(skip)


def pytest_configure(config):
    config.addinivalue_line("markers", "needs_kernel: runs the real cage (Landlock, seccomp, gcc)")
    config.addinivalue_line("markers", "mutation: removes each seccomp rule in turn (tests/cage/test_mutations.py)")
    config.addinivalue_line("markers", "without_namespaces: tests a layer beneath the namespace tier "
                            "(Landlock, seccomp scopes): runs with the tier forced off, as where the kernel "
                            "refuses namespaces; tests/cage/test_namespaces.py covers the same attacks with it")


@pytest.fixture(autouse=True)
def _namespace_tier(request, monkeypatch):
    """`without_namespaces` tests see the fallback: SANDBOY_NAMESPACES=0 for API and CLI runs."""
    if request.node.get_closest_marker("without_namespaces"):
        monkeypatch.setenv("SANDBOY_NAMESPACES", "0")


@pytest.fixture(scope="session")
def probe(tmp_path_factory) -> str:
    """The attacker binary, in a directory of its own (policies grant exec on it)."""
    out = tmp_path_factory.mktemp("probe-bin") / "probe"
    subprocess.run(["gcc", "-O1", "-Wall", "-Werror", "-o", str(out), os.path.join(HERE, "probe.c")],
                   check=True)
    return str(out)


@pytest.fixture
def cage(probe, tmp_path) -> Cage:
    return Cage(probe, tmp_path)


@pytest.fixture
def outsider():
    """A process outside the cage, same uid: the target for ptrace and signals."""
    proc = subprocess.Popen(["sleep", "60"])
    yield proc
    proc.kill()
    proc.wait()

"""Without namespaces, what the report leaves out (review of the fallback as met for real,
tests/containerkit.py).

Under the tier the command's network namespace holds only `lo`. In the fallback, seccomp
refuses inet sockets for a policy without network, but not NETLINK_ROUTE: `ip addr` lists the
host's interfaces, addresses and routes. The degraded list ("namespaces unavailable: not
prevented: ...") says nothing of it; the tier's LOST_WITHOUT["net"] names only listeners and
abstract sockets. Probe: the host's interface names reach the command and the report does
not say so. Decision: NETLINK_ROUTE stays open (glibc's getaddrinfo/getifaddrs ask it), and the
fallback's degraded list names the loss (namespaces.LOST_WITHOUT["netinfo"]) for every policy that
grants no network. Twin: under the tier only `lo` is seen.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from containerkit import in_container  # noqa: E402

from sandboy.confine import namespaces  # noqa: E402

SANDBOY = [sys.executable, "-m", "sandboy.cli"]
IP = shutil.which("ip")

pytestmark = pytest.mark.skipif(IP is None or not namespaces.availability()[0], reason="needs ip(8) and the tier to compare")


def _host_interfaces() -> set:
    return {name for name in os.listdir("/sys/class/net") if name != "lo"}


def _run(tmp_path, container: bool):
    policy = tmp_path / "p.toml"
    policy.write_text(textwrap.dedent("""\
        version = 1
        [fs]
        read = ["/usr", "/lib", "/lib64", "/bin", "/etc"]
        exec = ["/usr/bin", "/bin", "/usr/sbin", "/sbin"]
        """))
    status = tmp_path / "status.json"
    argv = [*SANDBOY, "run", "-p", str(policy), "--status-json", str(status), "--", IP, "-o", "link"]
    env = {**os.environ, "HOME": str(tmp_path), "SANDBOY_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("SANDBOY_NAMESPACES", None)
    out = subprocess.run(in_container("container", argv) if container else argv, capture_output=True, text=True,
                         env=env, timeout=120)
    return out, json.loads(status.read_text())


def test_the_fallback_hides_the_hosts_network_or_says_it_does_not(tmp_path):
    if not _host_interfaces():
        pytest.skip("the host has no interface but lo")
    out, status = _run(tmp_path, container=True)
    assert status["enforced"]["namespaces"]["available"] is False, status["enforced"]["namespaces"]
    seen = {line.split(":")[1].strip().split("@")[0] for line in out.stdout.splitlines() if ":" in line}
    leaked = seen & _host_interfaces()
    said = any("netlink" in d or "interfaces" in d for d in status["degraded"])
    assert not leaked or said, (sorted(leaked), status["degraded"])


def test_under_the_tier_only_lo_is_seen(tmp_path):
    out, status = _run(tmp_path, container=False)
    assert out.returncode == 0, out.stderr
    seen = {line.split(":")[1].strip() for line in out.stdout.splitlines() if ":" in line}
    assert seen == {"lo"}, out.stdout

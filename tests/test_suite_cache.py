"""The suite keeps out of the operator's real Sandboy cache (tests/conftest.py): its runs keep
their plans and parsed policies in a private directory, and only the slow, content-keyed adapter
builds are shared. Checked on the disk: the real `plans/` and `policies/` get no entry from a run
in the suite; pytest_sessionfinish (tests/conftest.py) checks the same for the whole session."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from cachekit import SHARED, new_entries_naming

SANDBOY = os.path.join(os.path.dirname(sys.executable), "sandboy")
# names its own directory, so that the parsed policy (`policies/`) and the plan (`plans/`) do
POLICY = 'version = 1\n[fs]\nread = ["/usr", "/lib", "/lib64", "{work}"]\nexec = ["/usr/bin", "/bin"]\n'


def test_the_suite_has_a_private_cache_directory_sharing_only_the_builds(suite_cache_dir, real_cache_dir) -> None:
    assert os.environ["SANDBOY_CACHE_DIR"] == suite_cache_dir != real_cache_dir
    info = os.lstat(suite_cache_dir)
    assert stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) == 0o700
    for name in SHARED:
        assert os.readlink(os.path.join(suite_cache_dir, name)) == os.path.join(real_cache_dir, name)
    for name in ("plans", "policies"):
        assert not os.path.islink(os.path.join(suite_cache_dir, name))
    from sandboy.audit.build import cache_dir  # what the audit sees: the shared builds, through the link

    assert os.path.samefile(cache_dir("components"), os.path.join(real_cache_dir, "components"))


@pytest.mark.parametrize("how", ["cli", "api"])
def test_a_run_in_the_suite_keeps_its_plan_in_the_private_cache(tmp_path, suite_cache_dir, real_cache_dir, how) -> None:
    from sandboy.confine import plan_cache

    marker = f"sbx-suite-cache-{os.getpid()}-{how}"
    work = tmp_path / marker
    work.mkdir()
    policy = work / "p.toml"
    policy.write_text(POLICY.format(work=work))
    if how == "cli":  # as most tests run it: the suite's environment, inherited
        done = subprocess.run([SANDBOY, "run", "--policy", str(policy), "--", "true"], cwd=work,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
    else:
        import sandboy

        assert sandboy.run(["true"], sandboy.Policy.load(str(policy)), cwd=str(work)).returncode == 0
    if how == "cli" and plan_cache.enabled():  # the run did keep a plan: in the private directory
        assert os.listdir(os.path.join(suite_cache_dir, "plans"))
        kept = [name for name in os.listdir(os.path.join(suite_cache_dir, "plans"))
                if marker.encode() in open(os.path.join(suite_cache_dir, "plans", name), "rb").read()]
        assert kept, "the run kept no plan naming its directory in the suite's cache"
    assert new_entries_naming([marker.encode()]) == []  # and nothing in the real one (plans/, policies/)

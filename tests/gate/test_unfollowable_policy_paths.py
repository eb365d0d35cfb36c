"""A policy path through a symlink Sandboy may not read ends with a clear policy error.

Finding (session 8, redcage8): a step policy naming `/proc/1/root` ended `sandboy gate` with
"sandboy gate: /proc/1/root: Permission denied" (rc 2, no file, no key): os.path.realpath raises
where readlink fails — /proc/PID/root of a process this one may not trace — and the meet and the
cage build follow every policy path's symlinks. `sandboy run --policy` said "cannot write the
output: Permission denied" (74) for the same path in fs.write, fs.deny or fs.protect.

Now: exit 2 naming the policy file, the key and the fix; nothing runs. Twin: the same policies
without the entry run. Needs a link whose readlink fails for this process: /proc/1/root here
(root in a container whose init lies beyond it) or run as a user who is not pid 1's.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys

import pytest
from gatekit import make_repo, run_gate, run_json

LINK = "/proc/1/root"


def _needs_an_unreadable_link():
    try:
        os.readlink(LINK)
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EPERM):
            return
        raise
    pytest.skip(f"readlink {LINK} works for this process: no unreadable link to name")


STEP_FS = {"read": ["/usr", "/lib", "/lib64", "/bin", "/etc", "{repo}"],
           "exec": ["/usr/bin", "/bin", "/usr/lib", "/lib", "/lib64"], "write": ["{repo}"]}


def _gate(field: str, path: str) -> str:
    fs = {key: list(paths) for key, paths in STEP_FS.items()}
    fs.setdefault(field, []).append(path)
    lines = "".join(f"fs.{key} = {json.dumps(paths)}\n" for key, paths in fs.items())
    return f'[[step]]\nname = "look"\nrun = "echo ran > ran"\npolicy = "p"\n[policy.p]\nversion = 1\n{lines}'


# Followed (realpath) by the meet or the build: a policy error. A deny or protect entry BELOW the
# link is only looked up (it cannot be reached, by Sandboy nor by the command): skipped as before.
FOLLOWED = {(field, path) for field in ("read", "exec", "write", "deny", "protect") for path in (LINK, LINK + "/etc")}
FOLLOWED -= {("deny", LINK + "/etc"), ("protect", LINK + "/etc")}


@pytest.mark.parametrize("path", [LINK, LINK + "/etc"])
@pytest.mark.parametrize("field", ["read", "exec", "write", "deny", "protect"])
def test_a_step_policy_through_an_unreadable_link_is_a_policy_error(tmp_path, fake_home, field, path):
    _needs_an_unreadable_link()
    repo = make_repo(tmp_path, _gate(field, path))
    proc, report = run_json(repo, tmp_path, home=fake_home)
    text = proc.stdout + proc.stderr
    assert "Traceback" not in text and f"gate: {LINK}: Permission denied" not in text, text
    if (field, path) not in FOLLOWED:
        assert proc.returncode == 0 and (repo / "ran").exists(), text
        return
    assert proc.returncode == 2, text
    assert not (repo / "ran").exists(), text
    assert "gate.toml [policy.p]" in text and f"fs.{field}: '{path}': cannot follow {LINK}" in text, text
    assert "name the path it leads to" in text, text
    assert report["steps"][0]["status"] == "policy_error", report["steps"][0]


def test_twin_the_step_without_the_entry_runs(tmp_path, fake_home):
    repo = make_repo(tmp_path, _gate("read", "/usr/share"))
    proc, _ = run_json(repo, tmp_path, home=fake_home)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (repo / "ran").read_text() == "ran\n"


def _run(tmp_path, policy: str, *argv):
    path = tmp_path / "p.toml"
    path.write_text(policy)
    return subprocess.run([sys.executable, "-m", "sandboy.cli", "run", "--policy", str(path), "--", *argv],
                          capture_output=True, text=True, cwd=tmp_path, timeout=60), path


RUN_FS = 'version = 1\n[fs]\nread = ["/usr", "/etc", "/lib", "/lib64"]\nexec = ["/usr/bin"]\n'


@pytest.mark.parametrize("field", ["write", "deny", "protect"])
def test_sandboy_run_names_file_key_and_fix(tmp_path, field):
    _needs_an_unreadable_link()
    extra = f'write = ["{tmp_path}", "{LINK}"]\n' if field == "write" else \
        f'write = ["{tmp_path}"]\n{field} = ["{LINK}"]\n'
    proc, path = _run(tmp_path, RUN_FS + extra, "/usr/bin/touch", str(tmp_path / "ran"))
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "cannot write the output" not in proc.stderr
    assert f"{path}: fs.{field}: '{LINK}': cannot follow {LINK}" in proc.stderr, proc.stderr
    assert "name the path it leads to" in proc.stderr
    assert not (tmp_path / "ran").exists()


def test_twin_sandboy_run_without_the_entry_runs(tmp_path):
    proc, _ = _run(tmp_path, RUN_FS + f'write = ["{tmp_path}"]\n', "/usr/bin/touch", str(tmp_path / "ran"))
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "ran").exists()


def test_a_ceiling_through_an_unreadable_link_names_the_ceiling(tmp_path, fake_home):
    _needs_an_unreadable_link()
    repo = make_repo(tmp_path, '[[step]]\nname = "look"\nrun = "echo ran > ran"\n')
    ceiling = tmp_path / "ceiling.toml"
    ceiling.write_text(f'version = 1\n[fs]\nread = ["/usr", "/etc", "/lib", "/lib64", "{LINK}"]\n'
                       'exec = ["/usr/bin", "/bin"]\nwrite = ["{repo}"]\n')
    proc = run_gate(repo, "--ceiling", ceiling, home=fake_home)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    text = proc.stdout + proc.stderr  # at start, or as the first step's policy error
    assert "Traceback" not in text
    assert f"{ceiling}: fs.read: '{LINK}': cannot follow {LINK}" in text, text
    assert not (repo / "ran").exists()


def test_a_lookup_through_an_unreadable_link_is_never_proven_fixed(tmp_path):
    """resolve.lookup_changeable (may the gate keep a lookup for all its steps?) raised where
    readlink fails; with no proof the answer is "changeable": looked up again each time, where
    the caller names the entry (unfollowable) or skips it."""
    _needs_an_unreadable_link()
    from sandboy.policy.resolve import lookup_changeable

    assert lookup_changeable(LINK + "/etc", (str(tmp_path),)) is True
    assert lookup_changeable("/usr/bin", (str(tmp_path),)) is False  # twin: a proof where there is one

"""Session 13 review of the cage from the attacker's side (redcage13).

What got through, each with its probe here (host side, a legitimate twin in the same run):

- Sandboy's cache trusts a file by its owner and mode alone (`_libc.read_private`, the parse
  cache's `load._cache_get`): a regular file of this euid that no one else may write. A git
  checkout writes exactly such files (the operator's, 0644 in 0755 directories), and so does any
  earlier cage of the same uid granted the directory before it became the cache. With the cache
  in the working copy (`SANDBOY_CACHE_DIR={cwd}/.cache`, the layout the cache-in-a-write-root
  review of session 12 kept working; `XDG_CACHE_HOME` or `HOME` in a CI workspace alike), a
  repository that ships `.cache/policies/<name>.marshal` — the policy's own bytes with another
  table — is run under the table it chose: here write on a directory outside every grant.
  Open (a strict xfail): nothing on disk tells Sandboy's writes from the checkout's; the fix
  needs a key no checkout or cage can have written (docs/threat-model.md, "What it does not
  stop").

What held is listed in docs/threat-model.md ("Session 13 review of the cage").
"""

from __future__ import annotations

import _imp
import marshal
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sandboy.policy import load

pytestmark = pytest.mark.needs_kernel

SANDBOY = os.path.join(os.path.dirname(sys.executable), "sandboy")
POLICY = ('version = 1\n[fs]\nread = ["/usr", "/lib", "/lib64", "/etc", "/bin"]\nexec = ["/usr/bin", "/bin"]\n'
          'write = ["{cwd}"]\n')


def _shipped_parse_cache_entry(cache: Path, policy: Path, outside: Path) -> Path:
    """What a repository puts in its `.cache/policies/`: the policy file's exact bytes with a table
    of its own (every name and format below is in Sandboy's public source)."""
    raw = policy.read_bytes()
    table = {"version": 1, "fs": {"read": ["/usr", "/lib", "/lib64", "/etc", "/bin"], "exec": ["/usr/bin", "/bin"],
                                  "write": ["{cwd}", str(outside)]}}
    name = _imp.source_hash(load._CACHE_FORMAT, os.fsencode(str(policy))).hex() + ".marshal"
    entry = cache / "policies" / name
    entry.parent.mkdir(parents=True)
    entry.write_bytes(marshal.dumps((load._CACHE_FORMAT, raw, table)))
    return entry


def _run(project: Path, outside: Path, name: str, tier: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SANDBOY_")}
    env.update(SANDBOY_CACHE_DIR=str(project / ".cache"), SANDBOY_NAMESPACES=tier)
    return subprocess.run([SANDBOY, "run", "--policy", str(project / "p.toml"), "--", "/bin/sh", "-c",
                           f"echo planted > {outside}/{name}"], cwd=project, env=env, capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize("tier", ["1", "0"])
def test_twin_a_cache_in_the_working_copy_keeps_the_policy(tmp_path, tier):
    project, outside = tmp_path / "checkout", tmp_path / "outside"
    project.mkdir()
    outside.mkdir()
    (project / "p.toml").write_text(POLICY)
    first = _run(project, outside, "first", tier)
    second = _run(project, outside, "second", tier)  # (the parse cache's own entry read back)
    assert first.returncode != 0 and second.returncode != 0, (first.stderr, second.stderr)
    assert sorted(os.listdir(outside)) == []


@pytest.mark.xfail(strict=True, reason="open: a cache file is trusted by owner and mode, which a checkout's "
                   "files have (threat-model 'What it does not stop', session 13)")
@pytest.mark.parametrize("tier", ["1", "0"])
def test_a_parse_cache_entry_the_checkout_ships_does_not_widen_the_policy(tmp_path, tier):
    project, outside = tmp_path / "checkout", tmp_path / "outside"
    project.mkdir()
    outside.mkdir()
    (project / "p.toml").write_text(POLICY)
    _shipped_parse_cache_entry(project / ".cache", project / "p.toml", outside)
    proc = _run(project, outside, "shipped", tier)
    assert not (outside / "shipped").exists(), "the checkout's cache file chose the policy: " + proc.stderr
    assert proc.returncode != 0, proc.stderr

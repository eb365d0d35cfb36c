"""Session 14's security review (rvsec14): attacks on what the session changed, each a test that
fails while the hole exists. Holes found and not yet closed by their owner are strict xfails that
name the hole (they start to pass — and so fail — once it is closed: then drop the mark).

- The masks over denies inside read-only grants (etc14's 5bc65aa, ADR 0029): a mask is a mount on
  a path's dentry; the host rewriting a secret while a cage runs (rename over it, unlink and
  create, a directory moved away and made anew — how passwd, visudo, ssh-keygen and package
  managers write) left the new file unmasked in the cage, readable through the grant's one rule.
  The masks were reverted (the split is back under the tier): the tier test is a guard now, and
  fails again if a path-based hiding comes back.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sandboy.confine import namespaces

pytestmark = pytest.mark.needs_kernel

SANDBOY = os.path.join(os.path.dirname(sys.executable), "sandboy")
SYSTEM = '"/usr", "/lib", "/lib64", "/bin"'

# The host's ways of rewriting a denied path while a cage runs: (what is denied, how it is
# rewritten). Each leaves the path holding NEW-SECRET, in a new inode.
REWRITES = {
    # passwd, chpasswd, useradd (/etc/shadow), visudo (/etc/sudoers): write a copy, rename over
    "file renamed over": ("s", lambda d: ((d / "s.new").write_text("NEW-SECRET\n"), (d / "s.new").rename(d / "s"))),
    # ssh-keygen -A and others: remove, then create
    "file removed and made": ("s", lambda d: ((d / "s").unlink(), (d / "s").write_text("NEW-SECRET\n"))),
    # the old one kept aside (a backup), a new one made in its place
    "file moved away and made": ("s", lambda d: ((d / "s").rename(d / "s.old"), (d / "s").write_text("NEW-SECRET\n"))),
    # a package's directory of keys replaced
    "directory moved away and made": ("k", lambda d: ((d / "k").rename(d / "k.old"), (d / "k").mkdir(),
                                                      (d / "k" / "key").write_text("NEW-SECRET\n"))),
}

# In the cage: the twin read (the cage is up, its masks made), then wait for the host's rewrite
# and read the denied path (a file, or the key in a directory).
WAIT_THEN_READ = 'cat data/a; while [ ! -e data/go ]; do sleep 0.02; done; cat data/{} 2>/dev/null; echo end'


def _run_while_the_host_rewrites(tmp_path: Path, rewrite: str, tier: bool) -> tuple:
    """`sandboy run` of WAIT_THEN_READ with `data` read-only and one path of it denied (`data/s`
    a file or `data/k` a directory, both holding OLD-SECRET); once the cage has printed the
    twin the host rewrites the denied path (REWRITES) and lets the cage go on. (rc, stdout, stderr)."""
    denied, rewritten = REWRITES[rewrite]
    data = tmp_path / "data"
    data.mkdir()
    (data / "a").write_text("TWIN\n")
    secret = data / ("s" if denied == "s" else "k/key")
    secret.parent.mkdir(exist_ok=True)
    secret.write_text("OLD-SECRET\n")
    policy = tmp_path / "p.toml"
    policy.write_text(f'version = 1\n[fs]\nread = [{SYSTEM}, "{data}"]\nexec = ["/usr/bin", "/bin"]\n'
                      f'deny = ["{data}/{denied}"]\n')
    env = {k: v for k, v in os.environ.items() if k not in ("SANDBOY_NATIVE", "SANDBOY_NAMESPACES")}
    env["SANDBOY_CACHE_DIR"] = str(tmp_path / "cache")
    if not tier:
        env["SANDBOY_NAMESPACES"] = "0"
    errors = tmp_path / "stderr"
    with open(errors, "w") as stderr:
        proc = subprocess.Popen([SANDBOY, "run", "--policy", str(policy), "--", "/bin/sh", "-c",
                                 WAIT_THEN_READ.format(secret.relative_to(data))],
                                cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=stderr, text=True, start_new_session=True)
    try:
        first = proc.stdout.readline()
        if first == "TWIN\n":  # the legitimate twin read: the cage is up, its masks made
            rewritten(data)
        (data / "go").touch()
        out = first + proc.stdout.read()
        rc = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()
    return rc, out, errors.read_text()


@pytest.mark.parametrize("rewrite", sorted(REWRITES))
def test_without_the_tier_a_secret_rewritten_during_the_run_stays_unreadable(tmp_path, rewrite):
    """The twin of the mask probe: Landlock's split grants the denied path's siblings by inode,
    so the new file (or directory) the host made at the denied name has no rule: refused."""
    rc, out, err = _run_while_the_host_rewrites(tmp_path, rewrite, tier=False)
    assert (rc, out) == (0, "TWIN\nend\n"), (out, err)
    assert "SECRET" not in err


@pytest.mark.parametrize("rewrite", sorted(REWRITES))
def test_under_the_tier_a_secret_rewritten_during_the_run_stays_unreadable(tmp_path, rewrite):
    """The host rewrites the denied path while the cage runs, the way passwd, visudo, ssh-keygen
    and package managers do; the cage must not read the new secret (host side: its bytes in the
    output), the twin is read."""
    if not namespaces.availability()[0]:
        pytest.skip(f"no namespace tier here: {namespaces.availability()[1]}")
    rc, out, err = _run_while_the_host_rewrites(tmp_path, rewrite, tier=True)
    assert (rc, out) == (0, "TWIN\nend\n"), (out, err)
    assert "SECRET" not in err

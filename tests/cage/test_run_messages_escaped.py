"""What the command chose reaches the operator's terminal only escaped (sandboy.escape).

A planted repository's path is quoted by the post-run git check's error (ADR 0019) and its
quarantine MANIFEST. The command picks that path: a directory named with an OSC title
sequence, a carriage return and a newline followed by a GitHub workflow command came out raw
on `sandboy run`'s stderr in exec mode under the tier (the supervised path escaped it), and
forged whole MANIFEST entries. Judged here from the bytes the host received.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from sandboy.confine import gitcheck

SANDBOY = os.path.join(os.path.dirname(sys.executable), "sandboy")
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.org", "GIT_CONFIG_NOSYSTEM": "1"}

PLANT = r"""
import os, subprocess, sys
d = sys.argv[1]
os.makedirs(d)
subprocess.run(["git", "init", "-q", d], check=True, env={"HOME": os.getcwd(), "PATH": "/usr/bin:/bin"})
open(os.path.join(d, ".git", "config"), "a").write("[core]\n\tfsmonitor = x\n")
"""

HOSTILE = "x\x1b]0;TITLE\x07\n::error::forged\rback"


@pytest.mark.parametrize("name", [HOSTILE, "plain"], ids=["hostile name", "twin: plain name"])
@pytest.mark.parametrize("mode", ["exec", "supervised"])
def test_a_planted_paths_name_is_escaped_on_stderr_and_in_the_manifest(tmp_path, name, mode):
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), **GIT_ENV})
    policy = tmp_path / "p.toml"
    policy.write_text(textwrap.dedent(f"""\
        version = 1
        [fs]
        read = ["/usr", "/lib", "/lib64", "/bin", "/etc"]
        exec = ["/usr/bin", "/bin"]
        write = ["{repo}"]
        """) + ("[limits]\nwall_seconds = 60\n" if mode == "supervised" else ""))
    out = subprocess.run([SANDBOY, "run", "-p", str(policy), "--cwd", str(repo), "--", "/usr/bin/python3", "-c", PLANT, name],
                         capture_output=True, timeout=120, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert out.returncode == 125, out.stderr
    err = out.stderr
    assert b"core.fsmonitor" in err
    for bad in (b"\x1b", b"\r", b"\x07"):
        assert bad not in err, err
    assert not any(line.lstrip().startswith(b"::") for line in err.split(b"\n")), err
    assert (b"x\\x1b]0;TITLE" in err) if name == HOSTILE else (f"{repo}/plain/.git/config".encode() in err), err
    boxes = list((repo / gitcheck.QUARANTINE_DIR).iterdir())
    manifest = (boxes[0] / "MANIFEST").read_bytes().decode("utf-8", "surrogateescape").splitlines()
    assert len(manifest) == 2 and manifest[1].count("\t") == 1 and "\x1b" not in manifest[1], manifest

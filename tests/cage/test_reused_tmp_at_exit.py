"""A program that runs `{tmp}` policies through the API (`sandboy.run`, `launch.spawn`: the audit
pipeline) leaves no `sandboy-*` directory behind when it exits. Under the namespace tier the API
keeps such cages for its next run (reuse.for_run); nothing closed them at exit, so each kept cage's
empty host directory stayed in $TMPDIR (thousands a day in this machine's /tmp). Each test counts
in a $TMPDIR of its own, never the shared /tmp."""

import os
import subprocess
import sys
import textwrap

import pytest

from sandboy.confine import namespaces

pytestmark = pytest.mark.skipif(not namespaces.availability()[0],
                                reason="kept {tmp} cages are the namespace tier's (without it none is kept)")

PROGRAM = textwrap.dedent("""
    import os, sys
    if sys.argv[1] == "tempfile":
        import tempfile  # the cage's {tmp} is then tempfile.mkdtemp's (cage.make_private_dir)
    from sandboy import Policy, run
    from sandboy.confine import reuse

    policy = Policy.from_mapping({"version": 1, "fs": {"read": ["/usr", "/lib", "/lib64", "/etc", "/bin"],
                                                       "exec": ["/usr", "/bin"], "write": ["{tmp}"]}}, "<t>")
    for cwd in sys.argv[2:]:  # a cage per working directory: several kept at once
        for _ in range(2):
            result = run(["/bin/sh", "-c", 'touch "$TMPDIR/x"'], policy, cwd=cwd)
            assert result.returncode == 0, result
    kept = [c.ctx.tmp for c in reuse._REUSED.cages.values()]
    assert len(kept) == len(sys.argv[2:]) and all(os.path.isdir(t) for t in kept), kept
    pid = os.fork()
    if pid == 0:
        sys.exit(0)  # a forked child's normal exit runs the atexit handlers: not on the parent's cages
    os.waitpid(pid, 0)
    assert all(os.path.isdir(t) for t in kept), "a forked child removed its parent's {tmp}"
    result = run(["/bin/sh", "-c", 'touch "$TMPDIR/x"'], policy, cwd=sys.argv[2])
    assert result.returncode == 0, result
    print(len(kept))
""")


@pytest.mark.parametrize("maker", ["tempfile", "own"])
def test_an_api_program_leaves_no_tmp_directory_at_exit(tmp_path, maker):
    tmpdir, works = tmp_path / "T", [tmp_path / "a", tmp_path / "b", tmp_path / "c"]
    for d in (tmpdir, *works):
        d.mkdir()
    env = {**os.environ, "TMPDIR": str(tmpdir), "SANDBOY_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, "-c", PROGRAM, maker, *map(str, works)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "3"  # three cages were kept while it ran
    assert [n for n in os.listdir(tmpdir) if n.startswith("sandboy-")] == []

"""Every output the gate writes is checked before the first step runs: a report path that cannot
be written is a usage error (2) naming the option, and no step has run."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from gatekit import make_repo, run_gate

SANDBOY = os.path.join(os.path.dirname(sys.executable), "sandboy")


@pytest.fixture
def repo(tmp_path):
    # The step leaves a mark: a refused gate must not have run it.
    return make_repo(tmp_path, """
        [[step]]
        name = "mark"
        run = "touch ran"
    """)


def outside(tmp_path):
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    return out


@pytest.mark.parametrize("option, make_path, says", [
    ("--json", lambda out: out, "is a directory"),
    ("--junit", lambda out: out, "is a directory"),
    ("--json", lambda out: out / "missing" / "gate.json", "does not exist"),
    ("--junit", lambda out: "/nonexistent/x.xml", "does not exist"),
    ("--logs", lambda out: (out / "a-file").write_text("") or out / "a-file", "is not a directory"),
    ("--logs", lambda out: (out / "f").write_text("") or out / "f" / "logs", "cannot be made"),
])
def test_an_unwritable_output_is_refused_before_any_step(repo, tmp_path, fake_home, option, make_path, says):
    path = make_path(outside(tmp_path))
    proc = run_gate(repo, option, path, home=fake_home)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"{option}: " in proc.stderr and says in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (repo / "ran").exists(), "the step ran although its report could not be written"


def test_an_unwritable_step_summary_is_refused_before_any_step(repo, tmp_path, fake_home):
    proc = run_gate(repo, home=fake_home, env={"GITHUB_STEP_SUMMARY": str(tmp_path / "no" / "summary.md")})
    assert proc.returncode == 2 and "$GITHUB_STEP_SUMMARY: " in proc.stderr, proc.stderr
    assert not (repo / "ran").exists()


def test_writable_outputs_are_accepted_and_written(repo, tmp_path, fake_home):
    """The twin: a fresh directory for --logs (made, parents too) and new report files work."""
    out = outside(tmp_path)
    proc = run_gate(repo, "--json", out / "g.json", "--junit", out / "g.xml", "--logs", out / "logs" / "deep",
                    home=fake_home, env={"GITHUB_STEP_SUMMARY": str(out / "summary.md")})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (repo / "ran").exists()
    for name in ("g.json", "g.xml", "summary.md", "logs/deep/mark.log"):
        assert (out / name).is_file(), name


@pytest.mark.parametrize("cwd", ["/nonexistent/sandboy-test", "/etc/hostname"])
@pytest.mark.parametrize("mode", [["--", "true"], ["--dry-run"]])
def test_run_cwd_that_is_not_a_directory_is_a_usage_error(tmp_path, cwd, mode):
    policy = tmp_path / "p.toml"
    policy.write_text('version = 1\n[fs]\nread = ["/usr", "/lib", "/lib64"]\nexec = ["/usr/bin", "/bin"]\n')
    proc = subprocess.run([SANDBOY, "run", "--policy", str(policy), "--cwd", cwd, *mode],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert f"--cwd {cwd}: " in proc.stderr


def test_a_file_planted_after_the_check_is_still_not_followed(tmp_path):
    """The second layer, for a symlink or FIFO planted between the check and the write: the open
    neither follows the link nor waits on the FIFO."""
    from sandboy.gate.outputs import open_output

    victim = tmp_path / "victim.conf"
    victim.write_text("original\n")
    (tmp_path / "gate.xml").symlink_to(victim)
    os.mkfifo(tmp_path / "gate.json")
    with pytest.raises(OSError):
        open_output(str(tmp_path / "gate.xml"))
    with pytest.raises(OSError):  # ENXIO: a FIFO without a reader, opened non-blocking
        open_output(str(tmp_path / "gate.json"))
    assert victim.read_text() == "original\n"

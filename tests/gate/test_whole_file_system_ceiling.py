"""An operator ceiling writing `/`: each step is refused before its command runs (exit 2),
instead of running and then failing closed after a walk of the whole machine (the post-run git
check's bound; tests/cage/test_whole_file_system_write_root.py)."""

from __future__ import annotations

from gatekit import make_repo, run_gate

STEP = '[[step]]\nname = "everything"\nrun = "echo ran > {marker}"\n'
CEILING = ('version = 1\n[fs]\nread = ["/"]\nexec = ["/usr/bin", "/bin", "/usr/lib", "/lib", "/lib64"]\n'
           'write = {write}\n{extra}')


def test_a_ceiling_writing_the_whole_file_system_runs_no_step(tmp_path, fake_home):
    marker = tmp_path / "marker"
    repo = make_repo(tmp_path, STEP.format(marker=marker))
    ceiling = tmp_path / "ceiling.toml"
    ceiling.write_text(CEILING.format(write='["/"]', extra=""))
    # (no --json/--junit: a report inside a write root of / is refused by the gate itself)
    proc = run_gate(repo, "--ceiling", ceiling, home=fake_home)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert "== everything: POLICY ERROR" in proc.stdout, proc.stdout
    assert "fs.write: '/' is the whole file system" in proc.stdout, proc.stdout
    assert not marker.exists()  # host side: the step's command never ran


def test_twin_the_same_ceiling_without_the_git_check_runs(tmp_path, fake_home):
    marker = tmp_path / "marker"
    repo = make_repo(tmp_path, STEP.format(marker=marker))
    ceiling = tmp_path / "ceiling.toml"
    ceiling.write_text(CEILING.format(write='["/"]', extra="protect_defaults = false\n"))
    proc = run_gate(repo, "--ceiling", ceiling, home=fake_home)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert marker.read_text() == "ran\n"

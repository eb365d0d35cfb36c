"""An operator ceiling writing `/`: each step is refused before its command runs (exit 2),
instead of running and then failing closed after a walk of the whole machine (the post-run git
check's bound; tests/cage/test_whole_file_system_write_root.py). A ceiling writing a whole home
(a tree beyond that bound, which its path cannot tell) is refused at the step's launch (125),
where the walk the check makes then reaches the bound: no step's work is wasted."""

from __future__ import annotations

import subprocess
import sys

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


def _gate_with_bound(bound: int, *argv) -> subprocess.CompletedProcess:
    """The real gate CLI in a fresh interpreter whose git-check walk bound is `bound` (a few
    hundred directories then stand for a home of millions of entries)."""
    code = ("import sys\nimport sandboy.confine.gitcheck as g\n"
            f"g.WALK_BUDGET = {bound}\n"
            "from sandboy.cli import finish\nfrom sandboy.gate.cli import main\n"
            "sys.exit(finish(main, sys.argv[1:]))\n")
    return subprocess.run([sys.executable, "-c", code, *map(str, argv)], capture_output=True, text=True, timeout=120)


def test_a_ceiling_writing_a_tree_beyond_the_checks_bound_runs_no_step(tmp_path, fake_home):
    home = tmp_path / "big-home"
    for i in range(300):
        (home / f"d{i}" / "sub").mkdir(parents=True)
    marker = home / "marker"
    repo = make_repo(tmp_path, STEP.format(marker=marker) + STEP.replace("everything", "second").format(marker=marker))
    ceiling = tmp_path / "ceiling.toml"
    ceiling.write_text(CEILING.format(write=f'["{{repo}}", "{{tmp}}", "{home}"]', extra=""))
    report = tmp_path / "report.json"
    proc = _gate_with_bound(500, repo, "--ceiling", ceiling, "--json", report)
    assert proc.returncode == 125, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    # ({repo}, the home, and {tmp} where it is not the namespace tier's private tmpfs)
    assert "write roots hold more than 500 entries together" in proc.stdout, proc.stdout
    assert f"({home} reached the bound)" in proc.stdout and "fs.protect_defaults = false" in proc.stdout
    assert "== everything: CAGE ERROR" in proc.stdout
    assert not marker.exists()  # host side: no step's command ran
    import json

    assert [s["status"] for s in json.loads(report.read_text())["steps"]] == ["cage_error", "not_run"]


def test_twin_a_ceiling_writing_a_tree_within_the_bound_runs(tmp_path, fake_home):
    home = tmp_path / "big-home"
    for i in range(300):
        (home / f"d{i}" / "sub").mkdir(parents=True)
    marker = home / "marker"
    repo = make_repo(tmp_path, STEP.format(marker=marker))
    ceiling = tmp_path / "ceiling.toml"
    ceiling.write_text(CEILING.format(write=f'["{{repo}}", "{{tmp}}", "{home}"]', extra=""))
    proc = _gate_with_bound(5000, repo, "--ceiling", ceiling)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert marker.read_text() == "ran\n"

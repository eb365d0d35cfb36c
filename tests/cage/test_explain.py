"""126 with a reason: when the policy cannot execute what a command resolves to, Sandboy names the
path, the symlink target and the `fs.exec` entry that would allow it; --dry-run warns ahead, and a
PATH search that skips a refused match for a later one is said, not silent."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

SANDBOY = os.path.join(os.path.dirname(sys.executable), "sandboy")


@pytest.fixture
def layout(tmp_path):
    """bin/ (granted) holds `tool`, a symlink into other/ (not granted), and `script`, whose
    interpreter is that symlink; other/ holds the real program (a copy of /bin/true)."""
    (tmp_path / "bin").mkdir()
    (tmp_path / "other").mkdir()
    real = tmp_path / "other" / "python3.99"
    shutil.copy("/bin/true", real)
    (tmp_path / "bin" / "python3").symlink_to(real)
    script = tmp_path / "bin" / "script"
    script.write_text(f"#!{tmp_path / 'bin' / 'python3'}\n")
    script.chmod(0o755)
    shutil.copy("/bin/true", tmp_path / "bin" / "true")
    policy = tmp_path / "p.toml"
    policy.write_text(f'version = 1\n[fs]\nread = ["/usr", "/lib", "/lib64", "{tmp_path}"]\n'
                      f'exec = ["/usr/bin", "/bin", "{tmp_path}/bin"]\n[env]\npass = ["PATH"]\n')
    return tmp_path, policy


def run(policy, *argv, path):
    return subprocess.run([SANDBOY, "run", "--policy", str(policy), *argv], capture_output=True, text=True,
                          timeout=60, env=dict(os.environ, PATH=path))


def test_a_symlink_out_of_fs_exec_is_named_with_its_target(layout):
    root, policy = layout
    proc = run(policy, "--", str(root / "bin" / "python3"), path="/usr/bin:/bin")
    assert proc.returncode == 126, proc.stderr
    assert f"(a symlink to {root}/other/python3.99)" in proc.stderr
    assert f'add "{root}/other" to fs.exec' in proc.stderr and 'include = ["python"]' in proc.stderr


def test_a_script_whose_interpreter_is_refused_names_the_interpreter(layout):
    root, policy = layout
    proc = run(policy, "--", str(root / "bin" / "script"), path="/usr/bin:/bin")
    assert proc.returncode == 126, proc.stderr
    assert f"{root}/bin/script is a script for {root}/bin/python3" in proc.stderr, proc.stderr
    # the twin: granting the target's directory lets it run
    policy.write_text(policy.read_text().replace(f'"{root}/bin"]', f'"{root}/bin", "{root}/other"]'))
    assert run(policy, "--", str(root / "bin" / "script"), path="/usr/bin:/bin").returncode == 0


def test_a_path_search_that_skips_a_refused_match_says_so(layout, tmp_path):
    root, policy = layout
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.copy("/bin/true", elsewhere / "true")
    proc = run(policy, "--", "true", path=f"{elsewhere}:/usr/bin:/bin")
    assert proc.returncode == 0, proc.stderr
    assert f"warning: true: runs /usr/bin/true, not {elsewhere}/true" in proc.stderr, proc.stderr


def test_dry_run_warns_about_path_entries_and_interpreter_symlinks(layout, tmp_path):
    root, policy = layout
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = run(policy, "--dry-run", path=f"{elsewhere}:{root}/bin:/usr/bin")
    assert proc.returncode == 0, proc.stderr
    assert f"PATH entry {elsewhere} is not in fs.exec" in proc.stdout, proc.stdout[-2000:]
    assert f"interpreter {root}/bin/python3 (a symlink to {root}/other/python3.99)" in proc.stdout
    assert f"PATH entry {root}/bin is not" not in proc.stdout  # the twin: a granted entry is quiet


def test_an_empty_path_is_explained_as_the_executor_searched_it(layout):
    """PATH set but empty makes execvp (and the C executor) look in the working directory; the
    reason for the 126 comes from the same search (one `path_candidates`), so it names the file
    the executor was refused, not a miss in the default PATH."""
    root, policy = layout
    proc = subprocess.run([SANDBOY, "run", "--policy", str(policy), "--", "python3.99"], capture_output=True,
                          text=True, timeout=60, env=dict(os.environ, PATH=""), cwd=root / "other")
    assert proc.returncode == 126, proc.stderr
    assert f'./python3.99: {root}/other is not in fs.exec; add "{root}/other" to fs.exec' in proc.stderr, proc.stderr
    # the twin: from a granted directory the same empty PATH runs it
    proc = subprocess.run([SANDBOY, "run", "--policy", str(policy), "--", "true"], capture_output=True,
                          text=True, timeout=60, env=dict(os.environ, PATH=""), cwd=root / "bin")
    assert proc.returncode == 0, proc.stderr

"""`sandboy policy check` prints a unified diff of each generated file that drifted: one side is the
file as the repository holds it — in a cloned repository, bytes the repository chose. Session 8
review (input and egress): the diff went to stdout raw, so a `.cursorignore` carrying terminal
escapes repainted the operator's terminal (a concealed or rewritten hunk, a window title), and
`##[error]...` on a diff line was a workflow command to GitHub's runner, where `policy check`
runs as a pre-commit hook or CI step. Every other printer passes `sandboy.escape`; the diff now
does too, line by line. Twin: an ordinary drift is shown as the same readable diff."""

import os
import subprocess
import sys

SANDBOY = [sys.executable, "-m", "sandboy"]
POLICY = 'version = 1\ntargets = ["cursor", "sandboy"]\n[read]\ndeny = [".env"]\n'


def _policy(args, repo):
    return subprocess.run([*SANDBOY, "policy", *args], cwd=repo, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "HOME": str(repo.parent)})


def _compiled(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "owen.policy.toml").write_text(POLICY)
    assert _policy(["compile"], repo).returncode == 0
    return repo


HOSTILE = ("# generated\n.env\n\x1b]0;owned\x07\x1b[2J\x1b[8mconcealed\x1b[0m\n##[error]forged by the repository\n"
           "evil\u202etxt.exe\n::add-mask::x\n")


def test_a_drifted_file_cannot_put_escapes_or_workflow_commands_on_the_operators_output(tmp_path):
    repo = _compiled(tmp_path)
    (repo / ".cursorignore").write_text(HOSTILE)
    run = _policy(["check"], repo)
    assert run.returncode == 1, (run.stdout, run.stderr)
    out = run.stdout + run.stderr
    for raw in ("\x1b", "\x07", "\u202e", "##["):
        assert raw not in out, (raw, out)
    assert not any(text.lstrip().startswith("::") for text in out.splitlines()), out
    # the drift is still shown, escaped, so a reviewer sees what the repository holds
    assert "\\x1b]0;owned\\x07" in run.stdout and "forged by the repository" in run.stdout, run.stdout
    assert "\\u202e" in run.stdout, run.stdout


def test_twin_an_ordinary_drift_is_the_same_readable_diff(tmp_path):
    repo = _compiled(tmp_path)
    generated = (repo / ".cursorignore").read_text()
    (repo / ".cursorignore").write_text(generated + "extra-line\n")
    run = _policy(["check"], repo)
    assert run.returncode == 1
    assert "--- a/.cursorignore\n+++ b/.cursorignore\n" in run.stdout, run.stdout
    assert "\n-extra-line\n" in run.stdout, run.stdout
    assert "1 generated file(s) drifted" in run.stderr
    (repo / ".cursorignore").write_text(generated)
    assert _policy(["check"], repo).returncode == 0

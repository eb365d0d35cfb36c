"""A gate step's HOME is private, writable and empty (the built-in ceiling sets HOME = "{tmp}"):
`bash -l`, git and pip start cleanly in it, and nothing lands in the operator's home."""

from __future__ import annotations

import os

from gatekit import by_name, make_repo, run_json


def _lines(step: dict) -> list[str]:
    return step["output_tail"].splitlines() if "output_tail" in step else []


def test_a_step_gets_a_private_writable_empty_home(tmp_path, fake_home):
    before = sorted(os.listdir(fake_home))
    repo = make_repo(tmp_path, """
        [[step]]
        name = "first"
        run = "bash -lc 'echo home=$HOME; echo entries=$(ls -A ~ | wc -l); touch ~/.x && echo writable; git config --global user.name me && echo git=$(git config --global user.name); python3 -m pip --version >/dev/null && echo pip-ok' 2>&1"

        [[step]]
        name = "second"
        run = "echo home=$HOME; echo entries=$(ls -A ~ | wc -l)"
    """)
    logs = tmp_path / "logs"
    proc, report = run_json(repo, tmp_path, "--logs", logs, home=fake_home)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    first = (logs / "first.log").read_text()
    second = (logs / "second.log").read_text()
    assert "Permission denied" not in proc.stdout + first, first
    assert "entries=0" in first and "writable" in first and "git=me" in first and "pip-ok" in first, first
    homes = {line.split("=", 1)[1] for line in (first + second).splitlines() if line.startswith("home=")}
    # The directory may be reused by the next step once emptied (a shared cage): what counts is
    # that the second step finds it empty.
    assert homes and str(fake_home) not in homes
    assert "entries=0" in second, "the second step does not see the first one's dot-files"
    # (the gate itself may keep its policy cache in ~/.cache/sandboy: the operator's process)
    assert set(os.listdir(fake_home)) - {".cache"} == set(before), "the steps wrote nothing to the operator's home"
    for home in homes:
        assert not os.path.exists(home), "the private home is removed after its step"
    assert by_name(report)["first"]["status"] == "passed"


def test_env_set_values_take_placeholders_in_sandboy_run(tmp_path):
    """`env.set = { HOME = "{tmp}" }` in any policy: the value is the run's private directory."""
    import subprocess
    import sys

    policy = tmp_path / "p.toml"
    policy.write_text('version = 1\n[fs]\nread = ["/usr", "/lib", "/lib64", "/etc"]\nexec = ["/usr/bin", "/bin"]\n'
                      'write = ["{tmp}"]\n[env]\npass = ["PATH"]\nset = { HOME = "{tmp}", WHERE = "{cwd}/x" }\n')
    sandboy = os.path.join(os.path.dirname(sys.executable), "sandboy")
    proc = subprocess.run([sandboy, "run", "--policy", str(policy), "--cwd", str(tmp_path), "--",
                           "bash", "-lc", 'touch ~/.made && echo "$HOME $TMPDIR $WHERE"'],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    home, tmpdir, where = proc.stdout.split()
    assert home == tmpdir and home != os.path.expanduser("~") and "{" not in home
    assert where == f"{tmp_path}/x"
    # Under the namespace tier `sandboy run`'s {tmp} is a tmpfs on a fixed mount point, left for the
    # next run (session 12): nothing the command made there reaches the host. Without the tier a
    # directory made for the run, removed after it.
    assert not os.path.exists(os.path.join(home, ".made")), "the command's file is left on the host"
    assert not os.path.exists(home) or os.listdir(home) == [], "the private directory is left with files"

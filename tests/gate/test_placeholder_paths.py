"""A step policy's paths may not climb out of a placeholder: `{tmp}/../x`, `{repo}/..`, `{home}/../x`.

`{tmp}` is made per step, so while the step's policy is met with the ceiling it stays a literal
token, and normalising `{tmp}/../x` dropped it: the step was granted `x` relative to the working
directory (the repository), not a directory beside its `{tmp}`. Refused when the gate is loaded
(exit 2, file and key, nothing runs); the same directory written plainly still works."""

from __future__ import annotations

import pytest
from gatekit import make_repo, run_gate, run_json

from sandboy.errors import PolicyError
from sandboy.gate import config

STEP = '[[step]]\nname = "climb"\nrun = "echo planted > x/marker; echo ran > ran"\npolicy = "p"\n'


@pytest.mark.parametrize("path", ["{tmp}/../x", "{tmp}/a/../../x", "{repo}/../x", "{home}/../x",
                                  "{cwd}/..", "{policy_dir}/../../x"])
@pytest.mark.parametrize("field", ["write", "read", "deny"])
def test_parent_after_a_placeholder_is_refused_at_load(tmp_path, path, field):
    repo = make_repo(tmp_path, STEP + f'[policy.p]\nversion = 1\nfs.{field} = ["/usr", "{path}"]\n')
    with pytest.raises(PolicyError) as info:
        config.load(repo)
    assert info.value.key == f"policy.p.fs.{field}[1]", str(info.value)
    assert "'..' after a placeholder" in info.value.problem


def test_a_policy_file_climbing_out_of_tmp_is_refused_naming_file_and_key(tmp_path):
    repo = make_repo(tmp_path, STEP.replace('"p"', '"policies/up.toml"'),
                     {".007/policies/up.toml": 'version = 1\n[fs]\nwrite = ["{tmp}/../x"]\n'})
    with pytest.raises(PolicyError) as info:
        config.load(repo)
    assert "policies/up.toml" in info.value.key and "fs.write[0]" in info.value.problem


def test_step_climbing_out_of_tmp_runs_nothing(tmp_path, fake_home):
    """The attack end to end: the step asks to write `{tmp}/../x` and then writes x/marker.
    Checked on the host: exit 2 before any step, no file written anywhere in the repository."""
    repo = make_repo(tmp_path, STEP + '[policy.p]\nversion = 1\nfs.write = ["{tmp}/../x", "{tmp}"]\n')
    (repo / "x").mkdir()
    proc = run_gate(repo, home=fake_home)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert "gate.toml: policy.p.fs.write[0]: '{tmp}/../x'" in proc.stderr
    assert not (repo / "x" / "marker").exists() and not (repo / "ran").exists()


FS = 'fs.read = ["/usr", "/lib", "/lib64", "/bin", "/etc", "{repo}"]\nfs.exec = ["/usr/bin", "/bin", "/usr/lib", "/lib", "/lib64"]\n'


def test_twin_the_directory_written_plainly_works(tmp_path, fake_home):
    repo = make_repo(tmp_path, STEP + '[policy.p]\nversion = 1\n' + FS + 'fs.write = ["{repo}/x", "{repo}", "{tmp}"]\n')
    (repo / "x").mkdir()
    proc, report = run_json(repo, tmp_path, home=fake_home)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (repo / "x" / "marker").read_text() == "planted\n" and (repo / "ran").read_text() == "ran\n"
    # '..' before any placeholder, or in a path without one, is ordinary (the ceiling decides)
    repo2 = make_repo(tmp_path / "two", STEP + '[policy.p]\nversion = 1\nfs.write = ["x/../x", "{tmp}"]\n')
    assert config.load(repo2).steps[0].policy.fs.write == ("x/../x", "{tmp}")

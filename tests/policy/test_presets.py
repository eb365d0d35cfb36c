"""Presets (`include = [...]`) and the example policies for common jobs, exercised with the real
tools through `sandboy run`: pip installs a wheel, pytest runs a suite, git clones, npm ci
installs, make compiles and runs a program. Each refusal twin shows what the preset adds."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from sandboy.errors import PolicyError
from sandboy.policy import presets
from sandboy.policy.model import Policy

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "policies"
SANDBOY = os.path.join(os.path.dirname(sys.executable), "sandboy")


def sandboy_run(policy, *argv, cwd, env=None, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([SANDBOY, "run", "--policy", str(policy), "--", *map(str, argv)], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL)


def write_policy(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "policy.toml"
    path.write_text(textwrap.dedent(text))
    return path


# --- validation -------------------------------------------------------------------------------

def test_an_unknown_preset_is_named_with_a_suggestion():
    with pytest.raises(PolicyError) as err:
        Policy.from_mapping({"version": 1, "include": ["pyton"]}, "p.toml")
    assert err.value.key == "include" and "did you mean 'python'?" in str(err.value)


@pytest.mark.parametrize("value", ["python", [1], {"a": 1}])
def test_include_must_be_a_list_of_names(value):
    with pytest.raises(PolicyError) as err:
        Policy.from_mapping({"version": 1, "include": value}, "p.toml")
    assert err.value.key.startswith("include")


def test_a_misspelt_include_key_is_suggested():
    with pytest.raises(PolicyError) as err:
        Policy.from_mapping({"version": 1, "inclde": ["system"]}, "p.toml")
    assert "did you mean 'include'?" in str(err.value)


def test_presets_add_in_front_and_deny_stays():
    policy = Policy.from_mapping({"version": 1, "include": ["system"], "fs": {"read": ["."], "deny": [".env"]}})
    assert policy.fs.read[-1] == "." and "/usr" in policy.fs.read
    assert "/etc/shadow" in policy.fs.deny and ".env" in policy.fs.deny
    assert "write" not in policy.fs.__slots__ or not policy.fs.write  # a preset never grants writing


def test_the_python_preset_follows_the_interpreter_here():
    """The running interpreter is typically a venv symlink into another prefix: the preset must
    name the real file's directory and the base prefix (stdlib), not only the venv."""
    rules = presets.expand(["python"])
    real = os.path.realpath(sys.executable)
    assert any(real.startswith(p.rstrip("/") + "/") for p in rules["exec"]), rules["exec"]
    stdlib = os.path.dirname(os.__file__)
    assert any(stdlib.startswith(p.rstrip("/") + "/") for p in rules["read"]), rules["read"]


# --- the presets at work, with their refusal twins ---------------------------------------------

def test_python_runs_with_the_preset_and_the_refusal_names_the_symlink_target(tmp_path):
    with_preset = write_policy(tmp_path, 'version = 1\ninclude = ["system", "python"]\n')
    proc = sandboy_run(with_preset, sys.executable, "-c", "import encodings, json; print('ok')", cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == "ok\n", proc.stderr
    without = tmp_path / "system-only.toml"
    without.write_text('version = 1\ninclude = ["system"]\n')
    proc = sandboy_run(without, sys.executable, "-c", "1", cwd=tmp_path)
    if os.path.realpath(sys.executable).startswith(("/usr/", "/bin/")):
        pytest.skip("this interpreter lives in the system directories: nothing for the preset to add")
    assert proc.returncode == 126, proc.stderr
    real_dir = os.path.dirname(os.path.realpath(sys.executable))
    assert f'add "{real_dir}" to fs.exec' in proc.stderr and 'include = ["python"]' in proc.stderr, proc.stderr


def make_wheel(directory: Path) -> Path:
    """A real, minimal pure-Python wheel (a zip with METADATA, WHEEL and RECORD)."""
    path = directory / "sbxdemo-1.0-py3-none-any.whl"
    files = {
        "sbxdemo/__init__.py": "ANSWER = 42\n",
        "sbxdemo-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: sbxdemo\nVersion: 1.0\n",
        "sbxdemo-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: sandboy-tests\nRoot-Is-Purelib: true\n"
                                       "Tag: py3-none-any\n",
    }
    record = "".join(f"{name},,\n" for name in files) + "sbxdemo-1.0.dist-info/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
        zf.writestr("sbxdemo-1.0.dist-info/RECORD", record)
    return path


def test_example_pip_install_into_a_target(tmp_path):
    wheel = make_wheel(tmp_path)
    (tmp_path / "target").mkdir()
    proc = sandboy_run(EXAMPLES / "pip-install.toml", sys.executable, "-m", "pip", "install", "--no-index",
                       "--target", "target", wheel.name, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "target" / "sbxdemo" / "__init__.py").read_text() == "ANSWER = 42\n"
    # the twin: outside ./target nothing may be written
    proc = sandboy_run(EXAMPLES / "pip-install.toml", sys.executable, "-m", "pip", "install", "--no-index",
                       "--target", "elsewhere", wheel.name, cwd=tmp_path)
    assert proc.returncode != 0 and not (tmp_path / "elsewhere" / "sbxdemo").exists()


def test_example_pytest_runs_a_suite(tmp_path):
    (tmp_path / "test_small.py").write_text("def test_ok(tmp_path):\n    (tmp_path / 'x').write_text('y')\n")
    proc = sandboy_run(EXAMPLES / "pytest.toml", sys.executable, "-m", "pytest", "-q", cwd=tmp_path)
    assert proc.returncode == 0 and "1 passed" in proc.stdout, proc.stdout + proc.stderr
    assert "Permission denied" not in proc.stdout + proc.stderr


def test_example_git_clone(tmp_path):
    git = shutil.which("git")
    if git is None:
        pytest.skip("git is not installed")
    env = dict(os.environ, HOME=str(tmp_path), GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@e",
               GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@e")
    src = tmp_path / "upstream"
    subprocess.run([git, "init", "-q", "-b", "main", str(src)], check=True, env=env)
    (src / "README").write_text("hello\n")
    subprocess.run([git, "-C", str(src), "add", "README"], check=True, env=env)
    subprocess.run([git, "-C", str(src), "commit", "-qm", "one"], check=True, env=env)
    proc = sandboy_run(EXAMPLES / "git-clone.toml", "git", "clone", "-q", "./upstream", "work", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "work" / "README").read_text() == "hello\n"
    assert not (tmp_path / ".gitconfig").exists()


def test_example_npm_ci(tmp_path):
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node/npm are not installed here (Debian: apt-get install nodejs npm)")
    dep = tmp_path / "dep"
    dep.mkdir()
    (dep / "package.json").write_text(json.dumps({"name": "dep", "version": "1.0.0", "main": "index.js"}))
    (dep / "index.js").write_text("module.exports = 'dep loaded';\n")
    (tmp_path / "package.json").write_text(json.dumps({
        "name": "sbx", "version": "1.0.0", "dependencies": {"dep": "file:dep"},
        "scripts": {"test": "node -e \"console.log(require('dep'))\""}}))
    # The lockfile from the real npm, outside the cage; then the locked install inside it.
    lock = subprocess.run(["npm", "install", "--offline", "--no-audit", "--no-fund", "--package-lock-only"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, HOME=str(tmp_path / "npm-home")))
    assert lock.returncode == 0, lock.stderr
    proc = sandboy_run(EXAMPLES / "npm-ci.toml", "npm", "ci", "--offline", "--no-audit", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "node_modules" / "dep").exists()
    proc = sandboy_run(EXAMPLES / "npm-ci.toml", "npm", "test", cwd=tmp_path)
    assert proc.returncode == 0 and "dep loaded" in proc.stdout, proc.stdout + proc.stderr


def test_example_make_builds_and_runs(tmp_path):
    if shutil.which("make") is None or shutil.which("cc") is None:
        pytest.skip("make or cc is not installed")
    (tmp_path / "hello.c").write_text('#include <stdio.h>\nint main(void){puts("built and ran");return 0;}\n')
    (tmp_path / "Makefile").write_text("check: hello\n\t./hello\nhello: hello.c\n\t$(CC) -o $@ $<\n")
    proc = sandboy_run(EXAMPLES / "make.toml", "make", "check", cwd=tmp_path)
    assert proc.returncode == 0 and "built and ran" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.glob("*.toml")))
def test_every_example_policy_loads(name):
    Policy.load(str(EXAMPLES / name))


def test_which_all_without_path_searches_the_default_path_not_the_working_directory(tmp_path, monkeypatch):
    """PATH unset: the presets look where the executor would (policy.resolve.DEFAULT_PATH), never
    in the working directory, where a repository could plant a `python3` to be granted exec."""
    planted = tmp_path / "python3"
    shutil.copy("/bin/true", planted)
    monkeypatch.chdir(tmp_path)
    found = presets.which_all("python3", None)
    assert "./python3" not in found and str(planted) not in found
    assert found == presets.which_all("python3", "/usr/local/bin:/usr/bin:/bin")
    # the twin: PATH naming the directory finds it
    assert presets.which_all("python3", str(tmp_path)) == [str(planted)]


@pytest.mark.parametrize("names", [["system"], ["python"], ["git"], ["node"], ["system", "python", "git", "node"],
                                   ["python", "system", "python"]])
def test_expand_is_each_preset_added_in_turn(names, monkeypatch, tmp_path):
    """`expand` merges the presets' own (already existence-checked) rules instead of checking each
    path again: the same lists as adding every path of every preset in turn."""
    venv = tmp_path / ".venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text(f"home = {os.path.dirname(sys.executable)}\n")
    monkeypatch.chdir(tmp_path)
    env = dict(os.environ, PATH=f"{tmp_path}/none:{os.environ.get('PATH', '')}:/usr/bin/", VIRTUAL_ENV=sys.prefix)
    plain = presets.Rules()
    for name in names:
        rules = presets.python(env) if name == "python" else presets.PRESETS[name](env)
        for kind in ("read", "exec", "deny"):
            for path in getattr(rules, kind):
                plain.add(kind, path)
    assert presets.expand(names, env) == {"read": plain.read, "exec": plain.exec, "deny": plain.deny}

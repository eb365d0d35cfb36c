"""action.yml and .pre-commit-hooks.yaml run as written (issue 12): their commands, executed
locally on a copy of the demo project, with the GitHub expressions filled in as the runner would."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "examples" / "audit-demo"

pytestmark = pytest.mark.slow


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def _expand(text: str, values: dict[str, str]) -> str:
    def one(match: re.Match[str]) -> str:
        key = match.group(1).strip()
        assert key in values, f"action.yml uses ${{{{ {key} }}}}, which this test does not fill in"
        return values[key]

    return re.sub(r"\$\{\{(.*?)\}\}", one, text)


def test_action_steps_run_locally(tmp_path: Path) -> None:
    action = yaml.safe_load((REPO / "action.yml").read_text())
    assert action["runs"]["using"] == "composite"
    work = tmp_path / "ws"
    shutil.copytree(DEMO, work / "project")
    inputs = {name: str(spec.get("default", "")) for name, spec in action["inputs"].items()}
    inputs.update(path="project", tools="bandit,ruff,semgrep")
    values = {f"inputs.{k}": v for k, v in inputs.items()}
    values["github.action_path"] = str(REPO)
    ran = []
    for step in action["runs"]["steps"]:
        if "uses" in step:
            assert step["uses"].startswith("github/codeql-action/upload-sarif@")
            assert _expand(step["with"]["sarif_file"], values) == "sandboy.sarif"
            continue
        if step["name"] == "Install Sandboy":
            # Installing is what test_wheel_install.py proves; here Sandboy is already installed.
            assert "pip install" in step["run"]
            continue
        env = _env()
        env.update({k: _expand(v, values) for k, v in step.get("env", {}).items()})
        done = subprocess.run(["bash", "-e", "-c", step["run"]], cwd=work, env=env, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, f"{step['name']}: {done.stderr[-2000:]}"
        ran.append(step["name"])
    assert ran == ["Gate", "Audit"]
    log = json.loads((work / "sandboy.sarif").read_text())
    assert {run["tool"]["driver"]["name"].lower() for run in log["runs"]} == {"bandit", "ruff", "semgrep"}


def test_pre_commit_hooks_run_locally(tmp_path: Path) -> None:
    hooks = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())
    assert {h["id"] for h in hooks} == {"sandboy-gate", "sandboy-audit", "sandboy-policy-check"}
    project = tmp_path / "project"
    shutil.copytree(DEMO, project)
    for hook in hooks:
        assert hook["language"] == "python" and hook["pass_filenames"] is False
        argv = shlex.split(hook["entry"])
        if hook["id"] == "sandboy-audit":
            argv += ["--tools", "ruff"]  # one fast analyser is enough to prove the entry
        if hook["id"] == "sandboy-policy-check":  # docs/capability.md: a project with a compiled policy
            for verb in ("init", "compile"):
                subprocess.run(["sandboy", "policy", verb], cwd=project, env=_env(), check=True, capture_output=True)
        done = subprocess.run(argv, cwd=project, env=_env(), capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, f"{hook['id']}: {done.stderr[-2000:]}"
        if hook["id"] == "sandboy-policy-check":  # and it fails once a generated file drifted
            (project / ".aiderignore").write_text("edited by hand\n")
            drifted = subprocess.run(argv, cwd=project, env=_env(), capture_output=True, text=True, timeout=120)
            assert drifted.returncode == 1 and "+++ b/.aiderignore" in drifted.stdout
        if hook["id"] == "sandboy-audit":
            assert json.loads(done.stdout)["runs"][0]["tool"]["driver"]["name"] == "ruff"

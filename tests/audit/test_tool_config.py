"""Tools that look for configuration outside their cage still run, with the configuration a user
expects (adapters.toml `[tools.X.config]`, docs/audit-run.md): real Ruff and Semgrep under
`sandboy audit run`.

* Ruff honours the repository's ruff.toml / .ruff.toml / pyproject.toml, passed with --config —
  even inside a directory whose own pyproject.toml the cage hides (Ruff would walk up to it and
  stop with "Permission denied"); with none, --isolated (Ruff's defaults).
* Semgrep, which gets no network and so no registry rules, uses the repository's .semgrep.yml,
  else the rule set Sandboy ships (sandboy/audit/rules/semgrep-default.yml), passed explicitly.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sandboy.audit import toolconfig
from sandboy.audit.errors import UsageError

SANDBOY = [sys.executable, "-m", "sandboy"]
APP = "import os\nimport subprocess\n\n\ndef run(cmd):\n    return subprocess.call(cmd, shell=True)\n\n\nx = eval(input())\n"


def _tool_on_path(name: str) -> None:
    if shutil.which(name, path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}") is None:
        pytest.fail(f"{name} is not installed: pip install -e '.[test]' installs it (pyproject.toml test extras)")


@pytest.fixture
def nested(tmp_path: Path) -> Path:
    """A repository inside a directory whose pyproject.toml configures Ruff (a monorepo, a CI
    workspace): the cage shows the tools nothing above the repository."""
    outer = tmp_path / "outer"
    repo = outer / "repo"
    repo.mkdir(parents=True)
    (outer / "pyproject.toml").write_text('[tool.ruff]\nline-length = 20\n[tool.ruff.lint]\nselect = ["E501"]\n')
    (repo / "app.py").write_text(APP)
    return repo


def _run(repo: Path, tmp_path: Path, tools: str) -> tuple[dict, dict]:
    out = tmp_path / "merged.sarif"
    done = subprocess.run([*SANDBOY, "audit", "run", str(repo), "--tools", tools, "-o", str(out), "--json"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    status = json.loads(done.stdout)
    log = json.loads(out.read_text())
    return {t["tool"]: t for t in status["tools"]}, {r["automationDetails"]["id"].split("/")[1]: r for r in log["runs"]}


def _rules(run: dict) -> set[str]:
    return {r["ruleId"].rsplit(".", 1)[-1] for r in run["results"]}


@pytest.mark.slow
@pytest.mark.parametrize("config_file, text", [
    ("ruff.toml", '[lint]\nselect = ["S", "F"]\n'),
    (".ruff.toml", '[lint]\nselect = ["S", "F"]\n'),
    ("pyproject.toml", '[project]\nname = "app"\n[tool.ruff.lint]\nselect = ["S", "F"]\n'),
])
def test_ruff_honours_the_repositorys_configuration(nested: Path, tmp_path: Path, config_file: str, text: str) -> None:
    _tool_on_path("ruff")
    (nested / config_file).write_text(text)
    tools, runs = _run(nested, tmp_path, "ruff")
    assert tools["ruff"]["config"] == f"the repository's {config_file}"
    # S602 (shell=True), S307 (eval) are not in Ruff's defaults: the repository's selection was used;
    # E501 (the hidden outer file's selection) was not.
    assert {"S602", "S307", "F401"} <= _rules(runs["ruff"]) and "E501" not in _rules(runs["ruff"])
    inv = runs["ruff"]["invocations"][0]
    assert f"--config {nested / config_file}" in inv["commandLine"]
    assert inv["properties"]["sandboy"]["config"] == f"the repository's {config_file}"


@pytest.mark.slow
def test_ruff_without_configuration_in_the_repository_uses_its_defaults(nested: Path, tmp_path: Path) -> None:
    _tool_on_path("ruff")
    (nested / "pyproject.toml").write_text('[project]\nname = "app"\n')  # no [tool.ruff]: still the repository's
    tools, runs = _run(nested, tmp_path, "ruff")
    assert _rules(runs["ruff"]) == {"F401"}  # Ruff's default selection (E4, E7, E9, F)
    (nested / "pyproject.toml").unlink()
    tools, runs = _run(nested, tmp_path, "ruff")
    assert tools["ruff"]["config"] == "none in the repository (ruff.toml/.ruff.toml/pyproject.toml): --isolated"
    assert _rules(runs["ruff"]) == {"F401"} and "--isolated" in runs["ruff"]["invocations"][0]["commandLine"]


@pytest.mark.slow
def test_semgrep_uses_the_repositorys_rules_else_sandboys_own(nested: Path, tmp_path: Path) -> None:
    _tool_on_path("semgrep")
    tools, runs = _run(nested, tmp_path, "semgrep")
    assert tools["semgrep"]["status"] == "ran" and "semgrep-default.yml" in tools["semgrep"]["config"]
    assert {"sandboy-subprocess-shell-true", "sandboy-eval-exec"} <= _rules(runs["semgrep"])
    (nested / ".semgrep.yml").write_text("rules:\n  - id: only-eval\n    languages: [python]\n    severity: ERROR\n"
                                         "    message: eval\n    pattern: eval(...)\n")
    tools, runs = _run(nested, tmp_path, "semgrep")
    assert tools["semgrep"]["config"] == "the repository's .semgrep.yml"
    assert _rules(runs["semgrep"]) == {"only-eval"}


def test_the_bundled_rules_ship_as_package_data() -> None:
    from sandboy.audit.pipeline import BUILTIN_RULES

    text = (BUILTIN_RULES / "semgrep-default.yml").read_text()
    assert text.count("- id: sandboy-") >= 8
    pyproject = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    assert '"audit/rules/*.yml"' in pyproject


@pytest.mark.parametrize("entry, problem", [
    ('argv = ["t", "--x={config}"]', "tools.t.phases[0].argv: {config} must be a whole argument"),
    ('argv = ["t", "{config}"]', "tools.t.phases[0].argv: {config} needs a [tools.t.config] table"),
    ('argv = ["t"]\n[tools.t.config]\nfiles = ["a.toml"]\nargv = ["--config", "{file}"]',
     "tools.t.config: no phase's argv has {config}"),
    ('argv = ["t", "{config}"]\n[tools.t.config]\nfiles = ["../a.toml"]\nargv = []', "tools.t.config.files: expected a path inside"),
    ('argv = ["t", "{config}"]\n[tools.t.config]\nfiles = ["a.toml"]\nargv = []\nfallback = []',
     "tools.t.config.fallback: unknown key"),
])
def test_config_tables_are_validated(entry: str, problem: str) -> None:
    text = f'version = 1\n[tools.t]\nadapter = "passthrough"\noutput = {{ kind = "sarif", from = "stdout" }}\n[[tools.t.phases]]\n{entry}\n'
    with pytest.raises(UsageError) as caught:
        toolconfig.parse(text, "ops.toml")
    assert str(caught.value).startswith(f"ops.toml: {problem}"), str(caught.value)

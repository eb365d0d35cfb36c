"""An install that works (issue 12, docs/adr/0014): a wheel built from the tree, installed into a
fresh virtualenv, converts a real sample with no source checkout beside it.

The wheel is built from a copy of the files an sdist carries (so nothing of the checkout can be
found by accident), installed with its dependencies from the package index (pip's cache makes the
second run fast), and run from an empty directory. The component cache is the test session's, keyed
on the sources' hash: a hit proves the wheel carries byte-identical guest sources; with
SANDBOY_TEST_COLD_BUILD=1 the cache is a fresh directory and the first conversion builds for real
(≈ 60-80 s here).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "tests" / "data" / "samples"

pytestmark = pytest.mark.slow

# What an sdist of the project holds (MANIFEST.in + setuptools' defaults) — and nothing else.
TREE = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "LICENSE", "src", "adapters")


def _run(argv: list[str], cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{argv} exited {done.returncode}\nstdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("wheel")
    tree = base / "tree"
    for name in TREE:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, tree / name, ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.egg-info", "*.wasm", "*.cwasm"))
        else:
            tree.mkdir(exist_ok=True)
            shutil.copy2(source, tree / name)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SANDBOY_ADAPTERS_DIR", "PYTHONPATH", "VIRTUAL_ENV"))}
    dist = base / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(tree)], base, env, 600)
    (wheel,) = dist.glob("sandboy-*.whl")
    venv = base / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], base, env, 120)
    _run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)], base, env, 900)
    shutil.rmtree(tree)  # nothing of the source tree is left beside the install
    return wheel


def test_the_wheel_carries_the_guest_sources(installed: Path) -> None:
    names = set(zipfile.ZipFile(installed).namelist())
    for adapter in ("bandit", "semgrep", "infer", "passthrough"):
        assert f"sandboy/audit/guest_sources/{adapter}/app.py" in names
    assert "sandboy/audit/guest_sources/wit/adapter.wit" in names
    assert "sandboy/audit/guest_sources/common/sandboy_guest.py" in names
    assert "sandboy/audit/rules/semgrep-default.yml" in names  # Semgrep's rules when a repository has none
    assert not [n for n in names if n.endswith((".wasm", ".cwasm", ".pyc"))]
    # Sources only: the wheel stays small (the C executor is most of it).
    assert installed.stat().st_size < 2 * 1024 * 1024


def test_installed_wheel_converts_a_real_sample_from_an_empty_directory(installed: Path, tmp_path: Path) -> None:
    venv = installed.parents[1] / "venv"
    sandboy = venv / "bin" / "sandboy"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SANDBOY_ADAPTERS_DIR", "PYTHONPATH", "VIRTUAL_ENV"))}
    if os.environ.get("SANDBOY_TEST_COLD_BUILD") == "1":
        env["SANDBOY_CACHE_DIR"] = str(tmp_path / "cold-cache")
    work = tmp_path / "work"
    work.mkdir()
    sample = SAMPLES / "bandit" / "spotifyscraper_bandit-1.8.3.json"
    shutil.copy2(sample, work / "bandit.json")

    where = _run([str(venv / "bin" / "python"), "-c", "from sandboy.audit.registry import adapters_root; print(adapters_root())"], work, env, 60)
    assert Path(where.stdout.strip()).is_relative_to(venv), where.stdout

    # No network: the conversion runs in a fresh network namespace where one can be made.
    offline = (["unshare", "-n", "--"] if os.geteuid() == 0 else ["unshare", "-rn", "--"]) if shutil.which("unshare") else []
    if offline and subprocess.run([*offline, "true"], capture_output=True).returncode != 0:
        offline = []
    started = time.monotonic()
    _run([*offline, str(sandboy), "audit", "convert", "--tool", "bandit", "--artifact", "bandit.json", "-o", "bandit.sarif"], work, env, 900)
    took = time.monotonic() - started
    print(f"time to first conversion from the installed wheel: {took:.1f} s")
    log = json.loads((work / "bandit.sarif").read_text())
    run = log["runs"][0]
    assert run["tool"]["driver"]["name"].lower() == "bandit"
    assert len(run["results"]) > 0
    _run([str(sandboy), "audit", "validate", "bandit.sarif"], work, env, 120)


PIPX = "pipx==1.8.0"


def test_pipx_installs_the_wheel_offline_from_a_wheelhouse_and_it_converts(installed: Path, tmp_path: Path) -> None:
    """`pipx install` of the same wheel with no network: pipx from PyPI into the fixture's venv,
    a wheelhouse of the wheel and its dependencies, then the install itself in a fresh network
    namespace with `--pip-args "--no-index --find-links WHEELHOUSE"`, and a conversion from the
    app pipx exposes."""
    venv = installed.parents[1] / "venv"
    python = str(venv / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SANDBOY_ADAPTERS_DIR", "PYTHONPATH", "VIRTUAL_ENV", "PIPX_"))}
    offline = ["unshare", "-n", "--"] if os.geteuid() == 0 else ["unshare", "-rn", "--"]
    if shutil.which("unshare") is None or subprocess.run([*offline, "true"], capture_output=True).returncode != 0:
        pytest.skip("cannot make a network namespace here (unshare -n), so 'offline' could not be proved")
    _run([python, "-m", "pip", "install", "-q", PIPX], tmp_path, env, 300)
    wheelhouse = tmp_path / "wheelhouse"
    # pip too: pipx's shared environment installs pip from the same --pip-args
    _run([python, "-m", "pip", "download", "-q", "-d", str(wheelhouse), str(installed), "pip"], tmp_path, env, 600)
    env.update(PIPX_HOME=str(tmp_path / "pipx-home"), PIPX_BIN_DIR=str(tmp_path / "pipx-bin"),
               PIPX_MAN_DIR=str(tmp_path / "pipx-man"))
    _run([*offline, str(venv / "bin" / "pipx"), "install", f"--pip-args=--no-index --find-links {wheelhouse}", str(installed)],
         tmp_path, env, 600)
    sandboy = tmp_path / "pipx-bin" / "sandboy"
    assert sandboy.exists()
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy2(SAMPLES / "bandit" / "spotifyscraper_bandit-1.8.3.json", work / "bandit.json")
    where = _run([str(sandboy), "audit", "list"], work, env, 60)
    _run([*offline, str(sandboy), "audit", "convert", "--tool", "bandit", "--artifact", "bandit.json", "-o", "bandit.sarif"],
         work, env, 900)
    run = json.loads((work / "bandit.sarif").read_text())["runs"][0]
    assert run["tool"]["driver"]["name"].lower() == "bandit" and len(run["results"]) > 0, where.stdout
    # The app runs from pipx's own environment, with the guest sources the wheel carried.
    root = _run([str(tmp_path / "pipx-home" / "venvs" / "sandboy" / "bin" / "python"), "-c",
                 "from sandboy.audit.registry import adapters_root; print(adapters_root())"], work, env, 60)
    assert Path(root.stdout.strip()).is_relative_to(tmp_path / "pipx-home"), root.stdout


def test_installed_wheel_runs_the_pipeline_offline(installed: Path, tmp_path: Path) -> None:
    """`sandboy audit run` from the installed wheel, with no network and nothing of the checkout:
    its own cage (the C executor the wheel carries), Ruff (the test environment's, found on PATH)
    caged, converted, fingerprinted, merged and passed through --github."""
    venv = installed.parents[1] / "venv"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SANDBOY_ADAPTERS_DIR", "PYTHONPATH", "VIRTUAL_ENV"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '/usr/bin:/bin')}"
    if shutil.which("ruff", path=env["PATH"]) is None:
        pytest.fail("ruff is not installed: pip install -e '.[test]' installs it (pyproject.toml test extras)")
    offline = ["unshare", "-n", "--"] if os.geteuid() == 0 else ["unshare", "-rn", "--"]
    if shutil.which("unshare") is None or subprocess.run([*offline, "true"], capture_output=True).returncode != 0:
        offline = []
    repo = tmp_path / "demo"
    shutil.copytree(REPO / "examples" / "audit-demo", repo)
    done = _run([*offline, str(venv / "bin" / "sandboy"), "audit", "run", str(repo), "--tools", "ruff", "-o", "m.sarif",
                 "--github", "--json"], tmp_path, env, 600)
    status = json.loads(done.stdout)
    assert [(t["tool"], t["status"]) for t in status["tools"]] == [("ruff", "ran")], status
    (run,) = json.loads((tmp_path / "m.sarif").read_text())["runs"]
    assert {"F401", "F821"} <= {r["ruleId"] for r in run["results"]}
    assert all(r["partialFingerprints"]["primaryLocationLineHash"] for r in run["results"])
    assert run["invocations"][0]["properties"]["sandboy"]["confinement"] in ("enforced", "degraded")
    # The cage the wheel's Sandboy applied is the wheel's own code, not the checkout's.
    where = _run([str(venv / "bin" / "python"), "-c", "import sandboy.confine.launch as m; print(m.__file__)"], tmp_path, env, 60)
    assert Path(where.stdout.strip()).is_relative_to(venv), where.stdout


def test_the_installed_wheel_serves_sandboy_run_from_its_bundle(installed: Path, tmp_path: Path) -> None:
    """The wheel carries the run path's byte-code bundle (docs/adr/0023) and the installed
    `sandboy run` is served from it — by hash: pip gave the installed sources new mtimes."""
    from sandboy.bytecode_bundle import RUN_PATH_GROUPS, RUN_PATH_MODULES

    assert f"sandboy/__pycache__/run-path.{sys.implementation.cache_tag}.bundle" in zipfile.ZipFile(installed).namelist()
    venv = installed.parents[1] / "venv"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SANDBOY_ADAPTERS_DIR", "PYTHONPATH", "VIRTUAL_ENV"))}
    env["SANDBOY_CACHE_DIR"] = str(tmp_path / "cache")  # no plan kept from an earlier run
    policy = tmp_path / "p.toml"
    policy.write_text('version = 1\n[fs]\nread = ["/usr", "/lib", "/lib64"]\nexec = ["/usr/bin", "/bin"]\n')
    done = subprocess.run([str(venv / "bin" / "python"), "-v", str(venv / "bin" / "sandboy"), "run", "--policy", str(policy),
                           "--", "/bin/true"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL, start_new_session=True)
    assert done.returncode == 0, done.stderr[-3000:]
    served = {line.split("'")[1] for line in done.stderr.splitlines()
              if line.startswith("import 'sandboy") and "BundledSourceLoader" in line}
    # exec mode's, building the cage and its seccomp program (a first run: the plan cache misses
    # and keeps no program yet, ADR 0028; the C executor: its file, named by the index, is loaded
    # by importlib's own loader); the build's errors, path helpers and policy package, each a group
    # of its own since session 12 so that a hit reads none of them
    assert served == (set(RUN_PATH_GROUPS["cli"] + RUN_PATH_GROUPS["cached run"] + RUN_PATH_GROUPS["plan cache"]
                          + RUN_PATH_GROUPS["cage"] + RUN_PATH_GROUPS["plan pieces"] + RUN_PATH_GROUPS["seccomp"]
                          + RUN_PATH_GROUPS["errors"] + RUN_PATH_GROUPS["paths"] + RUN_PATH_GROUPS["policy package"])
                         - {"sandboy.confine._native"})
    # every installed source's mtime differs from the one the bundle recorded: the hash decided
    stale = _run([str(venv / "bin" / "python"), "-c", """
import os, sys, sandboy
(finder,) = [f for f in sys.meta_path if type(f).__name__ == "BundleFinder"]
print(sum(os.stat(f"{finder.package_dir}/{e[1]}").st_mtime_ns != e[3] for e in finder.index.values() if e[6]))
"""], tmp_path, env, 60)
    assert int(stale.stdout) == len(RUN_PATH_MODULES) - 1  # all but the C executor, whose own file is loaded

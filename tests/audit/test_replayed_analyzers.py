"""The built-in infer / infersharp / codeql / roslyn entries of adapters.toml, run end to end by
`sandboy audit run` against REPLAY executables — not the analysers.

None of the four can be installed here: Infer and InferSharp are GitHub releases / container
images, the CodeQL CLI is a GitHub release bundle, Roslyn's `dotnet build` needs the .NET SDK
(none of them is on PyPI, in Debian or on npm; Debian's mono-devel has mcs, not Roslyn's csc).
So the thing under test is the PIPELINE: each test puts a small shell script named like the tool
first on PATH; it parses the arguments the entry passes, does what the real tool does to the file
system (Infer runs the build after `--`, `codeql database create` makes a database directory that
`analyze` needs, `dotnet build` writes obj/ in the tree) and writes the REAL report from
tests/data/samples where the entry says the output lands. Phase sequencing, the output location,
the adapter choice, the cage (checked host-side) and the provenance in `invocations` are real; the
analysers' findings are the samples'.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "tests" / "data" / "samples"
SANDBOY = [sys.executable, "-m", "sandboy"]

pytestmark = pytest.mark.slow

INFER_REPORT = SAMPLES / "infer" / "zrlog_infer-0.17.0_report.json"             # 5 results
CODEQL_SARIF = SAMPLES / "codeql" / "gh-gei_codeql-2.24.1_csharp.sarif"         # 35 results
ROSLYN_V21 = SAMPLES / "roslyn" / "squigglecop_Log.old.v2.LARGE.sarif"          # 16 results, SARIF 2.1.0
ROSLYN_V1 = SAMPLES / "roslyn" / "squigglecop_Log.v1.sarif"                     # 8 results, SARIF 1.0.0

# Every replay tries to plant a file outside what its cage grants ({probe}); the test checks the
# host side afterwards. A failed attempt is not the replay's failure (`|| true`).
REPLAYS = {
    # infer run --results-dir DIR -- BUILD...: runs the build (the entry grants it {repo} to write
    # its objects), then writes DIR/report.json.
    "infer": r"""
[ "$1" = run ] || { echo "replay infer: expected 'run', got '$1'" >&2; exit 2; }
shift
results=
while [ $# -gt 0 ]; do
  case "$1" in
    --results-dir) results=$2; shift 2 ;;
    --) shift; break ;;
    *) shift ;;
  esac
done
[ -n "$results" ] && [ $# -gt 0 ] || { echo "replay infer: need --results-dir and a build after --" >&2; exit 2; }
"$@" || exit $?
mkdir -p "$results/captured"
cp "$DATA/infer-report.json" "$results/report.json"
""",
    # run_infersharp.sh ASSEMBLIES --output-folder DIR: Infer# writes Infer's report.json.
    "run_infersharp.sh": r"""
out=
while [ $# -gt 0 ]; do
  case "$1" in
    --output-folder) out=$2; shift 2 ;;
    *) shift ;;
  esac
done
[ -n "$out" ] || { echo "replay infersharp: no --output-folder" >&2; exit 2; }
mkdir -p "$out" && cp "$DATA/infer-report.json" "$out/report.json"
""",
    # codeql database create DB ... | codeql database analyze DB ... --output FILE
    "codeql": r"""
[ "$1" = database ] || { echo "replay codeql: unknown command $1" >&2; exit 2; }
verb=$2; db=$3; shift 3
case "$verb" in
  create)
    mkdir -p "$db/db-python" && echo "primaryLanguage: python" > "$db/codeql-database.yml" ;;
  analyze)
    [ -f "$db/codeql-database.yml" ] || { echo "replay codeql: $db is not a database (run 'database create' first)" >&2; exit 2; }
    out=
    while [ $# -gt 0 ]; do
      case "$1" in
        --output) out=$2; shift 2 ;;
        *) shift ;;
      esac
    done
    cp "$DATA/codeql.sarif" "$out" ;;
  *) echo "replay codeql: unknown verb $verb" >&2; exit 2 ;;
esac
""",
    # dotnet build PROJECT ... -p:ErrorLog=FILE%2Cversion=2.1: csc's /errorlog, v1 unless version=2.1
    "dotnet": r"""
[ "$1" = build ] || { echo "replay dotnet: unknown command $1" >&2; exit 2; }
project=$2
log=
for arg in "$@"; do
  case "$arg" in
    -p:ErrorLog=*) log=${arg#-p:ErrorLog=} ;;
  esac
done
mkdir -p "$project/obj" && : > "$project/obj/project.assets.json"
case "$log" in
  *%2Cversion=2.1) cp "$DATA/roslyn-v2.1.sarif" "${log%%%2C*}" ;;
  ?*) cp "$DATA/roslyn-v1.sarif" "${log%%%2C*}" ;;
esac
""",
}


def _write_replays(bin_dir: Path, probe: Path) -> None:
    data = bin_dir / "replay-data"
    data.mkdir(parents=True)
    shutil.copyfile(INFER_REPORT, data / "infer-report.json")
    shutil.copyfile(CODEQL_SARIF, data / "codeql.sarif")
    shutil.copyfile(ROSLYN_V21, data / "roslyn-v2.1.sarif")
    shutil.copyfile(ROSLYN_V1, data / "roslyn-v1.sarif")
    for name, body in REPLAYS.items():
        script = bin_dir / name
        # The script's own directory: the cage grants a phase's program directory read + exec.
        script.write_text(f"#!/bin/sh\n# REPLAY of {name} for tests: not the analyser.\n"
                          f"DATA=$(dirname \"$0\")/replay-data\n"
                          f"touch {probe}.{name} 2>/dev/null || true\n{body}")
        script.chmod(0o755)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A repository whose `make` writes an object file (what Infer's capture runs)."""
    repo = tmp_path / "project"
    repo.mkdir()
    (repo / "Makefile").write_text("all:\n\techo built > main.o\n")
    (repo / "app.py").write_text("import os\nos.system(input())\n")
    return repo


def _run(repo: Path, tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict, dict | None]:
    bin_dir, probe = tmp_path / "replay-bin", tmp_path / "outside" / "planted"
    if not bin_dir.exists():
        probe.parent.mkdir()
        _write_replays(bin_dir, probe)
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}")
    out = tmp_path / "merged.sarif"
    out.unlink(missing_ok=True)
    done = subprocess.run([*SANDBOY, "audit", "run", str(repo), *args, "-o", str(out), "--json"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=600)
    status = json.loads(done.stdout) if done.stdout.strip() else {}
    return done, status, json.loads(out.read_text()) if out.exists() else None


def _planted(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in (tmp_path / "outside").iterdir())


def test_the_four_entries_run_their_phases_caged_and_land_their_real_reports(project: Path, tmp_path: Path) -> None:
    if shutil.which("make") is None:
        pytest.fail("make is needed (Infer's entry captures the repository's make): apt-get install make")
    done, status, log = _run(project, tmp_path, "--tools", "infer,infersharp,codeql,roslyn")
    assert done.returncode == 0, done.stderr[-3000:]
    tools = {t["tool"]: t for t in status["tools"]}
    assert {name: t["status"] for name, t in tools.items()} == dict.fromkeys(("infer", "infersharp", "codeql", "roslyn"), "ran")
    # Phase sequencing: CodeQL's analyze found the database its create phase made in {out}.
    assert [p["name"] for p in tools["codeql"]["phases"]] == ["database-create", "database-analyze"]
    assert [t["results"] for t in status["tools"]] == [5, 5, 35, 16]

    runs = {run["automationDetails"]["id"]: run for run in log["runs"]}
    assert set(runs) == {"sandboy/infer/", "sandboy/infersharp/", "sandboy/codeql/", "sandboy/roslyn/"}
    # Adapter choice: Infer's report.json went through the infer adapter (bug types as rules);
    # CodeQL's and Roslyn's SARIF through passthrough (the tool's own driver kept).
    assert runs["sandboy/infer/"]["tool"]["driver"]["name"] == "Infer"
    assert {r["ruleId"] for r in runs["sandboy/infersharp/"]["results"]} == {"UNTRUSTED_FILE"}
    assert runs["sandboy/codeql/"]["tool"]["driver"]["name"] == "CodeQL"
    codeql_sample = json.loads(CODEQL_SARIF.read_text(encoding="utf-8-sig"))["runs"][0]
    assert sorted(r["ruleId"] for r in runs["sandboy/codeql/"]["results"]) == sorted(r["ruleId"] for r in codeql_sample["results"])
    roslyn_sample = json.loads(ROSLYN_V21.read_text(encoding="utf-8-sig"))["runs"][0]
    assert runs["sandboy/roslyn/"]["tool"]["driver"]["name"] == roslyn_sample["tool"]["driver"]["name"]
    assert sorted(r["ruleId"] for r in runs["sandboy/roslyn/"]["results"]) == sorted(r["ruleId"] for r in roslyn_sample["results"])

    # Provenance: one invocation per phase, each naming its policy, how it ended, its command line.
    codeql_inv = runs["sandboy/codeql/"]["invocations"]
    assert [i["properties"]["sandboy"]["phase"] for i in codeql_inv] == ["database-create", "database-analyze"]
    assert all(i["exitCode"] == 0 and i["executionSuccessful"] and i["properties"]["sandboy"]["outcome"] == "exited"
               for run in runs.values() for i in run["invocations"])
    digests = [i["properties"]["sandboy"]["policy_sha256"] for i in codeql_inv]
    assert all(re.fullmatch(r"[0-9a-f]{64}", d) for d in digests) and digests[0] != digests[1]
    assert re.search(r"/codeql database analyze \S+/db --format=sarif-latest --output \S+/codeql\.sarif --sarif-category=codeql$",
                     codeql_inv[1]["commandLine"]), codeql_inv[1]["commandLine"]
    assert "-p:ErrorLog=" in runs["sandboy/roslyn/"]["invocations"][0]["commandLine"]

    # The cage, host side: the entries that build (infer: `make`; roslyn: obj/) wrote into the
    # tree because they say `write = ["{repo}"]`; nothing was planted outside by any of them.
    assert (project / "main.o").read_text() == "built\n"
    assert (project / "obj" / "project.assets.json").exists()
    assert _planted(tmp_path) == []
    # ...and the tools' private output directories were private: nothing landed in the tree.
    assert not (project / "db").exists() and not (project / "infer-out").exists()


def test_codeql_analyze_before_create_fails_and_says_why(project: Path, tmp_path: Path) -> None:
    """The phases run in the entry's order, each only after the previous one succeeded: an
    operator file that puts analyze first gets a failed tool (not a log from a phase that never
    ran) and create never runs."""
    builtin = (REPO / "src" / "sandboy" / "audit" / "adapters.toml").read_text()
    create = re.search(r'\[\[tools\.codeql\.phases\]\]\nname = "database-create".*?(?=\[\[tools\.codeql\.phases\]\])',
                       builtin, re.S).group(0)
    analyze = re.search(r'\[\[tools\.codeql\.phases\]\]\nname = "database-analyze".*?(?=\n\[tools\.)', builtin, re.S).group(0)
    ops = tmp_path / "ops.toml"
    ops.write_text(f'version = 1\n[tools.codeql]\nadapter = "passthrough"\n'
                   f'output = {{ kind = "sarif", from = "file", file = "codeql.sarif" }}\n{analyze}\n{create}')
    done, status, log = _run(project, tmp_path, "--tools", "codeql,infersharp", "--adapters", str(ops))
    assert done.returncode == 1, done.stderr[-2000:]
    codeql = status["tools"][0]
    assert codeql["status"] == "failed" and [p["name"] for p in codeql["phases"]] == ["database-analyze"]
    assert "phase database-analyze: exit status 2" in codeql["reason"] and "run 'database create' first" in codeql["reason"]
    # The other tool still ran and is the whole log.
    assert [run["automationDetails"]["id"] for run in log["runs"]] == ["sandboy/infersharp/"]


def test_roslyn_without_version_2_1_writes_sarif_1_and_the_pipeline_upgrades_it(project: Path, tmp_path: Path) -> None:
    """csc's default /errorlog is SARIF 1.0.0: an operator entry that drops `,version=2.1` gets
    the v1 log, which passthrough upgrades to 2.1.0."""
    builtin = (REPO / "src" / "sandboy" / "audit" / "adapters.toml").read_text()
    entry = builtin[builtin.index("[tools.roslyn]"):].replace("%2Cversion=2.1", "")
    ops = tmp_path / "ops.toml"
    ops.write_text("version = 1\n" + entry)
    done, status, log = _run(project, tmp_path, "--tools", "roslyn", "--adapters", str(ops))
    assert done.returncode == 0, done.stderr[-2000:]
    (run,) = log["runs"]
    assert log["version"] == "2.1.0" and status["tools"][0]["results"] == 8
    v1 = json.loads(ROSLYN_V1.read_text(encoding="utf-8-sig"))["runs"][0]
    assert sorted(r["ruleId"] for r in run["results"]) == sorted(r["ruleId"] for r in v1["results"])
    assert run["invocations"][0]["commandLine"].endswith("/roslyn.sarif")

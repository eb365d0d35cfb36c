"""`sandboy audit merge` vs sarif-tools' `sarif copy` (PyPI) and the Microsoft SARIF Multitool's
`merge` (npm) on ten logs totalling >= 50 MB, all in the same run.

    .venv/bin/python bench/bench_merge.py --install   # first time: fetches both baselines into bench/.cache/
    .venv/bin/python bench/bench_merge.py             # later: uses what bench/.cache/ (or the environment) holds

The ten logs are generated from the real CodeQL C# and JavaScript samples (tests/data/samples/codeql):
their results repeated with shifted start lines and messages distinct across all ten logs (nothing
deduplicates away: the Multitool folds runs of one tool together and drops results identical to
earlier ones), each log its own category. The tools run as fresh processes, one after the other in
the same run;
time is wall-clock, memory is peak RSS (`/usr/bin/time -f %M`).

The baselines are installed only with --install: sarif-tools into a venv (pip), the Multitool from
the npm package @microsoft/sarif-multitool-linux, which ships a self-contained .NET executable
(`Sarif.Multitool`: no .NET runtime needed). Without --install a baseline that is absent is skipped
with a message saying so. SARIF_TOOLS_EXE / SARIF_MULTITOOL_EXE name executables found elsewhere.
Figures go to stdout and bench/results/merge.json; docs/audit-run.md records them.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "tests" / "data" / "samples" / "codeql"
SOURCES = [SAMPLES / "gh-gei_codeql-2.24.1_csharp.sarif", SAMPLES / "vulnerable-node_codeql-2.12.6_js_codeflows.sarif"]
SARIF_TOOLS = "sarif-tools==3.0.5"
MULTITOOL = "@microsoft/sarif-multitool-linux@5.7.0"
CACHE = REPO / "bench" / ".cache"
TARGET_TOTAL = 52 << 20


def generate(out: Path) -> list[Path]:
    files = []
    per_file = TARGET_TOTAL // 10
    for n in range(10):
        doc = json.loads(SOURCES[n % 2].read_text(encoding="utf-8-sig"))
        run = doc["runs"][0]
        base = [r for r in run.get("results", [])]
        run["automationDetails"] = {"id": f"bench/part{n}/"}
        results, size, copy_no = [], len(json.dumps(doc)), 0
        while size < per_file:
            for r in base:
                r2 = copy.deepcopy(r)
                r2["message"]["text"] = f"{r2['message'].get('text', '')} (part {n} copy {copy_no})"
                for loc in r2.get("locations", []):
                    region = loc.get("physicalLocation", {}).get("region")
                    if region and "startLine" in region:
                        region["startLine"] += copy_no
                        if "endLine" in region:
                            region["endLine"] += copy_no
                r2.pop("partialFingerprints", None)
                results.append(r2)
                size += len(json.dumps(r2))
            copy_no += 1
        run["results"] = results
        path = out / f"part{n}.sarif"
        path.write_text(json.dumps(doc, indent=1))
        files.append(path)
    return files


def measured(argv: list[str], cwd: Path) -> tuple[float, int, subprocess.CompletedProcess[str]]:
    time_bin = shutil.which("time", path="/usr/bin:/bin")
    prefix = [time_bin, "-f", "MAXRSS %M"] if time_bin else []
    started = time.monotonic()
    done = subprocess.run(prefix + argv, cwd=cwd, capture_output=True, text=True)
    took = time.monotonic() - started
    rss = next((int(line.split()[1]) for line in done.stderr.splitlines() if line.startswith("MAXRSS ")), 0)
    return took, rss * 1024, done


def sarif_tools(install: bool) -> Path | None:
    if os.environ.get("SARIF_TOOLS_EXE"):
        return Path(os.environ["SARIF_TOOLS_EXE"])
    venv = CACHE / "sarif-tools"
    exe = venv / "bin" / "sarif"
    if not exe.exists() and install:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        if subprocess.run([str(venv / "bin" / "pip"), "install", "-q", SARIF_TOOLS]).returncode != 0:
            return None
    return exe if exe.exists() else None


def multitool(install: bool) -> Path | None:
    if os.environ.get("SARIF_MULTITOOL_EXE"):
        return Path(os.environ["SARIF_MULTITOOL_EXE"])
    prefix = CACHE / "multitool"
    exe = prefix / "node_modules" / "@microsoft" / "sarif-multitool-linux" / "Sarif.Multitool"
    if not exe.exists() and install:
        if shutil.which("npm") is None:
            print("Multitool: cannot install (npm is not on PATH)")
            return None
        prefix.mkdir(parents=True, exist_ok=True)
        # --ignore-scripts: the package's one script is a chmod, done here instead
        if subprocess.run(["npm", "install", "--silent", "--no-audit", "--no-fund", "--ignore-scripts",
                           "--prefix", str(prefix), MULTITOOL]).returncode != 0:
            return None
        exe.chmod(0o755)
    return exe if exe.exists() else None


def main() -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--install", action="store_true",
                        help="fetch absent baselines (sarif-tools from PyPI, the Multitool from npm) into bench/.cache/")
    args = parser.parse_args()
    rows = {}
    with tempfile.TemporaryDirectory(prefix="bench-merge-") as tmp:
        work = Path(tmp)
        (work / "in").mkdir()
        files = generate(work / "in")
        total = sum(p.stat().st_size for p in files)
        results_in = sum(len(json.loads(p.read_text())["runs"][0]["results"]) for p in files)
        print(f"inputs: 10 logs, {total / 1e6:.1f} MB, {results_in:,} results")

        def record(name: str, argv: list[str], output: Path) -> None:
            took, rss, done = measured(argv, work)
            if done.returncode != 0 or not output.is_file():
                print(f"{name} failed (exit {done.returncode}):", done.stdout[-500:], done.stderr[-1500:])
                return
            merged = json.loads(output.read_text(encoding="utf-8-sig"))
            rows[name] = {"seconds": took, "peak_rss_mb": rss / 1e6, "output_mb": output.stat().st_size / 1e6,
                          "runs": len(merged["runs"]), "results": sum(len(r.get("results") or []) for r in merged["runs"])}

        record("sandboy audit merge", [sys.executable, "-m", "sandboy", "audit", "merge", *map(str, files),
                                       "-o", str(work / "sandboy.sarif"), "-q"], work / "sandboy.sarif")
        if "sandboy audit merge" not in rows:
            return 1
        exe = sarif_tools(args.install)
        if exe is None:
            print(f"sarif-tools: not measured (absent; --install fetches {SARIF_TOOLS} from PyPI)")
        else:
            record("sarif-tools copy", [str(exe), "copy", str(work / "in"), "-o", str(work / "sarif-tools.sarif")],
                   work / "sarif-tools.sarif")
        mt = multitool(args.install)
        if mt is None:
            print(f"SARIF Multitool: not measured (absent; --install fetches {MULTITOOL} from npm)")
        else:
            record("Multitool merge", [str(mt), "merge", *map(str, files), "--output-directory", str(work / "mt"),
                                       "--output-file", "merged.sarif", "--log", "ForceOverwrite", "--merge-empty-logs"],
                   work / "mt" / "merged.sarif")
        print(f"{'':22} {'time':>8} {'peak RSS':>10} {'output':>9} {'out/in':>7} {'runs':>5} {'results':>8}")
        for name, row in rows.items():
            print(f"{name:22} {row['seconds']:7.2f}s {row['peak_rss_mb']:8.0f}MB {row['output_mb']:7.1f}MB "
                  f"{row['output_mb'] * 1e6 / total:7.2f} {row['runs']:5} {row['results']:8,}")
        ours = rows["sandboy audit merge"]
        for name, row in rows.items():
            if name != "sandboy audit merge":
                print(f"sandboy / {name}: time {ours['seconds'] / row['seconds']:.2f}x, "
                      f"peak RSS {ours['peak_rss_mb'] / row['peak_rss_mb']:.2f}x")
        out = REPO / "bench" / "results"
        out.mkdir(exist_ok=True)
        (out / "merge.json").write_text(json.dumps({"input_mb": total / 1e6, "results": results_in, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

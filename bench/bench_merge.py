"""`sandboy audit merge` vs sarif-tools' `sarif copy` (PyPI) on ten logs totalling >= 50 MB.

    .venv/bin/python bench/bench_merge.py        # makes bench/.cache/sarif-tools (a venv) on first use

The ten logs are generated from the real CodeQL C# and JavaScript samples (tests/data/samples/codeql):
their results repeated with shifted start lines and distinct messages (nothing deduplicates away),
each log its own category. Both tools run as fresh processes, one after the other in the same run;
time is wall-clock, memory is peak RSS (`/usr/bin/time -f %M`). The Multitool (`sarif` .NET tool)
is tried only if `sarif-multitool` is already on PATH (this machine has no .NET).
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
                r2["message"]["text"] = f"{r2['message'].get('text', '')} (copy {copy_no})"
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


def sarif_tools() -> Path | None:
    venv = REPO / "bench" / ".cache" / "sarif-tools"
    exe = venv / "bin" / "sarif"
    if not exe.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        if subprocess.run([str(venv / "bin" / "pip"), "install", "-q", SARIF_TOOLS]).returncode != 0:
            return None
    return exe


def main() -> int:
    rows = {}
    with tempfile.TemporaryDirectory(prefix="bench-merge-") as tmp:
        work = Path(tmp)
        (work / "in").mkdir()
        files = generate(work / "in")
        total = sum(p.stat().st_size for p in files)
        results_in = sum(len(json.loads(p.read_text())["runs"][0]["results"]) for p in files)
        print(f"inputs: 10 logs, {total / 1e6:.1f} MB, {results_in:,} results")
        took, rss, done = measured([sys.executable, "-m", "sandboy", "audit", "merge", *map(str, files),
                                    "-o", str(work / "sandboy.sarif"), "-q"], work)
        if done.returncode != 0:
            print(done.stderr[-2000:])
            return 1
        rows["sandboy audit merge"] = {"seconds": took, "peak_rss_mb": rss / 1e6,
                                       "output_mb": (work / "sandboy.sarif").stat().st_size / 1e6}
        exe = sarif_tools()
        if exe is not None:
            took, rss, done = measured([str(exe), "copy", str(work / "in"), "-o", str(work / "sarif-tools.sarif")], work)
            if done.returncode == 0:
                rows["sarif-tools copy"] = {"seconds": took, "peak_rss_mb": rss / 1e6,
                                            "output_mb": (work / "sarif-tools.sarif").stat().st_size / 1e6}
            else:
                print("sarif-tools copy failed:", done.stderr[-500:])
        multitool = shutil.which("sarif-multitool") or shutil.which("sarif")
        if multitool and "sarif-tools" not in multitool:
            print(f"Multitool at {multitool}: not measured (not wired)")
        else:
            print("Microsoft SARIF Multitool: not run (no .NET runtime on this machine)")
        print(f"{'':22} {'time':>8} {'peak RSS':>10} {'output':>9} {'out/in':>7}")
        for name, row in rows.items():
            print(f"{name:22} {row['seconds']:7.2f}s {row['peak_rss_mb']:8.0f}MB {row['output_mb']:7.1f}MB "
                  f"{row['output_mb'] * 1e6 / total:7.2f}")
        if len(rows) == 2:
            a, b = rows["sandboy audit merge"], rows["sarif-tools copy"]
            print(f"sandboy / sarif-tools: time {a['seconds'] / b['seconds']:.2f}x, peak RSS {a['peak_rss_mb'] / b['peak_rss_mb']:.2f}x")
        out = REPO / "bench" / "results"
        out.mkdir(exist_ok=True)
        (out / "merge.json").write_text(json.dumps({"input_mb": total / 1e6, "results": results_in, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

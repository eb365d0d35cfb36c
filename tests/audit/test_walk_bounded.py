"""The SARIF semantic walk is linear in its input and bounded in depth (issue 8, item 4).

Attack: `runs[0].properties` nested 900 deep holding a list of N `[]`. The old walk copied the
path tuple at every container (1.5 GB of host memory for 605 KB of input, MemoryError at 2.1 MB).
Checked from the outside: the peak RSS of a real `sandboy audit validate` process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from sandboy.audit import sarif


def nested_sarif(depth: int, n: int) -> str:
    inner = "[" + ",".join(["[]"] * n) + "]"
    prop = '{"a":' * depth + inner + "}" * depth
    return ('{"version":"2.1.0","$schema":"' + sarif.SARIF_SCHEMA_URI + '","runs":[{"tool":{"driver":{"name":"x"}},'
            '"results":[],"properties":' + prop + "}]}")


def peak_rss_mib(argv: list[str]) -> tuple[float, subprocess.CompletedProcess]:
    """Run `argv` in a fresh child (via a wrapper that reports its own child's peak RSS)."""
    wrapper = ("import resource, subprocess, sys; p = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
               "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.stdout.write(p.stdout); "
               "sys.exit(p.returncode)")
    proc = subprocess.run([sys.executable, "-c", wrapper, *argv], capture_output=True, text=True, timeout=120)
    rss, _, out = proc.stdout.partition("\n")
    return int(rss) / 1024, subprocess.CompletedProcess(argv, proc.returncode, out, proc.stderr)


def test_deep_nested_validate_stays_small(tmp_path: Path):
    # 2.1 MB at depth 900: MemoryError before; now a depth error and tens of MiB
    path = tmp_path / "deep.sarif"
    path.write_text(nested_sarif(900, 700_000))
    assert path.stat().st_size > 2_000_000
    rss, proc = peak_rss_mib([sys.executable, "-m", "sandboy", "audit", "validate", "--json", str(path)])
    report = json.loads(proc.stdout)["files"][0]
    assert proc.returncode == 1 and not report["valid"], proc.stderr
    assert any("nested deeper than" in p["message"] for p in report["problems"])
    assert rss < 400, f"validate of {path.stat().st_size:,} bytes of nested input peaked at {rss:.0f} MiB"


def test_walk_memory_is_linear(tmp_path: Path):
    # within the depth bound: 4x the input must not cost much more than 4x the memory
    sizes = {}
    for n in (50_000, 200_000):
        path = tmp_path / f"n{n}.sarif"
        path.write_text(nested_sarif(250, n))
        code = ("import sys, resource; from sandboy.audit import sarif; "
                "doc = sarif.parse_json(open(sys.argv[1]).read()); base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss; "
                "assert sarif.semantic_problems(doc) == []; "
                "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base)")
        out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True, timeout=120)
        sizes[n] = int(out.stdout) / 1024  # MiB the walk added on top of the parsed document
    assert sizes[200_000] < 64, sizes  # the old walk: 250 * 200k path entries * 8 B = 400 MB


def test_walk_paths_are_exact():
    doc = {"runs": [{"results": [{"locations": [{"physicalLocation": {"region": {"startLine": 0}}}]}]}]}
    found = sarif.semantic_problems(doc)
    assert [p.pointer for p in found] == ["/runs/0/results/0/locations/0/physicalLocation/region/startLine"]
    undeclared = {"runs": [{"originalUriBaseIds": {"SRC": {"uri": "s/", "uriBaseId": "ROOT"}},
                            "artifacts": [{"location": {"uri": "a.c", "uriBaseId": "NOPE"}}]}]}
    found = sarif.semantic_problems(undeclared)
    assert [(p.pointer, p.severity) for p in found] == [("/runs/0/artifacts/0/location/uriBaseId", "warning")]


def test_depth_bound_reports_once():
    doc = {"runs": [{"properties": {"a": json.loads("[" * 300 + "]" * 300), "b": json.loads("[" * 300 + "]" * 300)}}]}
    found = sarif.semantic_problems(doc)
    assert len(found) == 1 and found[0].severity == "error" and "nested deeper than 256" in found[0].message

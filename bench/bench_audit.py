"""Audit adapter host benchmarks: one command, all ratios from one run.

    .venv/bin/python bench/bench_audit.py            # ~1 min once adapters are built

1. the 1.27 MB Infer report through the wasm adapter vs the same adapter code
   run natively in CPython (target <= 3x);
2. warm end-to-end conversion of a 1 KB report, in-process (target <= 50 ms);
3. validation of the 1 MB Roslyn log: jsonschema-rs vs python-jsonschema (target >= 100x);
4. a generated 10 MB Infer report end to end: time and peak memory (fresh process);
5. `audit validate` on hostile nested input (a list of N `[]` 250 deep in run.properties): peak RSS
   against input size at 4 sizes, fresh process each (the semantic walk must stay linear: the ratio
   of added memory to added input is reported, and must not grow with N).

Figures go to stdout and bench/results/audit.json; docs/audit.md records them.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "tests" / "data" / "samples"
INFER_LARGE = SAMPLES / "infer" / "glowstone_infer-0.17.0_report.LARGE.json"
ROSLYN_LARGE = SAMPLES / "roslyn" / "squigglecop_Log.old.v2.LARGE.sarif"
sys.path[:0] = [str(REPO / "src"), str(REPO / "adapters" / "common"), str(REPO / "adapters" / "infer")]
QUIET = {"progress": lambda m: None}


def timed(fn: Callable[[], Any], repeat: int) -> float:
    """Median wall time of `repeat` calls, in seconds."""
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def bench_wasm_vs_native() -> dict[str, float]:
    import infer_adapter
    import sandboy_guest
    from sandboy.audit import host
    from sandboy.audit.build import build
    from sandboy.audit.registry import ADAPTERS

    data = INFER_LARGE.read_bytes()
    loaded = host.load(build(ADAPTERS["infer"]))
    raw = host.RawInput("infer", [("report.json", host.Text.from_bytes(data))])
    limits = host.Limits(fuel=host.default_fuel(len(data)))
    host.call(loaded, raw, limits)  # warm-up
    wasm = timed(lambda: host.call(loaded, raw, limits), 5)
    text = data.decode()
    native = timed(lambda: sandboy_guest.convert_entry(infer_adapter.convert, sandboy_guest.GuestInput("infer", {"report.json": text})), 5)
    return {"infer_1_27mb_wasm_s": wasm, "infer_1_27mb_native_s": native, "wasm_over_native": wasm / native}


def bench_warm_small(tmp: Path) -> dict[str, float]:
    from sandboy.audit.convert import ConvertRequest, convert

    bugs = json.loads(INFER_LARGE.read_text())
    small = next(b for b in bugs if 800 < len(json.dumps([b])) < 1200)
    path = tmp / "small.json"
    path.write_text(json.dumps([small]))
    req = ConvertRequest(tool="infer", artifacts=[("report.json", path)])
    convert(req, **QUIET)  # first call: engine, deserialise .cwasm, schema compile
    warm = timed(lambda: convert(req, **QUIET), 20)
    return {"small_report_bytes": path.stat().st_size, "warm_1kb_end_to_end_ms": warm * 1000}


def bench_validation() -> dict[str, float]:
    import jsonschema

    from sandboy.audit import sarif

    doc = json.loads(ROSLYN_LARGE.read_text("utf-8"))
    sarif.schema_problems(doc)  # compile once
    fast = timed(lambda: sarif.schema_problems(doc), 20)
    schema = json.loads((REPO / "src/sandboy/audit/schema/sarif-schema-2.1.0.json").read_text())
    validator = jsonschema.Draft4Validator(schema, format_checker=jsonschema.Draft4Validator.FORMAT_CHECKER)
    slow = timed(lambda: list(validator.iter_errors(doc)), 2)
    return {"roslyn_1mb_jsonschema_rs_ms": fast * 1000, "roslyn_1mb_python_jsonschema_ms": slow * 1000,
            "jsonschema_rs_speedup": slow / fast}


def make_10mb_report(path: Path) -> None:
    bugs = json.loads(INFER_LARGE.read_text())
    out, size, n = [], 2, 0
    while size < 10_000_000:
        bug = dict(bugs[n % len(bugs)])
        bug["hash"] = f"{n:032x}"
        out.append(bug)
        size += len(json.dumps(bug)) + 2
        n += 1
    path.write_text(json.dumps(out))


def one_10mb(path: str) -> None:
    """Child process: convert the 10 MB report and print time + peak RSS as JSON."""
    from sandboy.audit.convert import ConvertRequest, convert

    started = time.perf_counter()
    result = convert(ConvertRequest(tool="infer", artifacts=[("report.json", Path(path))]), **QUIET)
    seconds = time.perf_counter() - started
    print(json.dumps({
        "seconds": seconds, "guest_ms": result.provenance.duration_ms, "fuel": result.provenance.fuel_used,
        "results": result.results, "output_bytes": len(result.text.encode()),
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }))


def bench_10mb(tmp: Path) -> dict[str, float]:
    path = tmp / "report-10mb.json"
    make_10mb_report(path)
    proc = subprocess.run([sys.executable, __file__, "--one-10mb", str(path)], capture_output=True, text=True, check=True)
    child = json.loads(proc.stdout)
    return {"generated_report_bytes": path.stat().st_size, "10mb_end_to_end_s": child["seconds"],
            "10mb_guest_s": child["guest_ms"] / 1000, "10mb_results": child["results"],
            "10mb_output_bytes": child["output_bytes"], "10mb_peak_rss_mib": child["peak_rss_mib"]}


def nested_sarif(depth: int, n: int) -> str:
    inner = "[" + ",".join(["[]"] * n) + "]"
    prop = '{"a":' * depth + inner + "}" * depth
    return '{"version":"2.1.0","runs":[{"tool":{"driver":{"name":"x"}},"results":[],"properties":' + prop + "}]}"


def one_validate(path: str) -> None:
    """Child process: validate one file; print the peak RSS of the validation alone."""
    from sandboy.audit import sarif

    doc = sarif.parse_json(Path(path).read_text())
    parsed = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    sarif.problems(doc)
    print(json.dumps({"parsed_mib": parsed, "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def bench_nested(tmp: Path) -> dict[str, float]:
    rows = []
    for n in (25_000, 100_000, 400_000, 1_600_000):
        path = tmp / f"nested-{n}.sarif"
        path.write_text(nested_sarif(250, n))
        proc = subprocess.run([sys.executable, __file__, "--one-validate", str(path)], capture_output=True, text=True, check=True)
        child = json.loads(proc.stdout)
        rows.append((path.stat().st_size, child["parsed_mib"], child["peak_rss_mib"]))
        print(f"      nested 250 deep, {path.stat().st_size:>10,} B: parsed {child['parsed_mib']:6.0f} MiB, "
              f"peak {child['peak_rss_mib']:6.0f} MiB", flush=True)
    large, parsed, peak = rows[-1]
    return {"nested_input_bytes_largest": large, "nested_parsed_rss_mib_largest": parsed,
            "nested_peak_rss_mib_largest": peak,
            # what validation (schema + semantic walk) adds on top of the parsed document, per MB of input
            "nested_validation_mib_per_input_mb": (peak - parsed) / (large / 1e6)}


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--one-validate":
        one_validate(sys.argv[2])
        return 0
    if len(sys.argv) == 3 and sys.argv[1] == "--one-10mb":
        one_10mb(sys.argv[2])
        return 0
    os.environ.setdefault("SANDBOY_CACHE_DIR", str(REPO / ".cache" / "sandboy-test"))
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        figures.update(bench_wasm_vs_native())
        figures.update(bench_warm_small(Path(tmp)))
        figures.update(bench_validation())
        figures.update(bench_10mb(Path(tmp)))
        figures.update(bench_nested(Path(tmp)))
    checks = [
        ("Infer 1.27 MB: wasm / native CPython", f"{figures['wasm_over_native']:.2f}x", "<= 3x", figures["wasm_over_native"] <= 3),
        ("warm 1 KB conversion, in-process", f"{figures['warm_1kb_end_to_end_ms']:.1f} ms", "<= 50 ms", figures["warm_1kb_end_to_end_ms"] <= 50),
        ("1 MB Roslyn log: python-jsonschema / jsonschema-rs", f"{figures['jsonschema_rs_speedup']:.0f}x", ">= 100x", figures["jsonschema_rs_speedup"] >= 100),
        ("generated 10 MB report end to end", f"{figures['10mb_end_to_end_s']:.2f} s, peak RSS {figures['10mb_peak_rss_mib']:.0f} MiB", "recorded", True),
        # the old walk copied the path at every container: ~200 MiB per MB of this input at 250 deep
        (f"nested {figures['nested_input_bytes_largest'] / 1e6:.1f} MB: validation RSS over the parsed doc",
         f"{figures['nested_validation_mib_per_input_mb']:.1f} MiB/MB, peak {figures['nested_peak_rss_mib_largest']:.0f} MiB",
         "<= 5 MiB/MB", figures["nested_validation_mib_per_input_mb"] <= 5),
    ]
    for name, value, target, ok in checks:
        print(f"{'PASS' if ok else 'MISS'}  {name:<52} {value:<32} target {target}")
    print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in figures.items()}, indent=2))
    results = REPO / "bench" / "results"
    results.mkdir(exist_ok=True)
    (results / "audit.json").write_text(json.dumps(figures, indent=2))
    return 0 if all(ok for *_, ok in checks) else 1


if __name__ == "__main__":
    sys.exit(main())

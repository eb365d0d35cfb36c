#!/usr/bin/env python3
"""`make bench`: every benchmark, one after another, each printing ratios against baselines
measured in the same run. Pass `--only run|cpu|tier|workload|gate|audit|egress|merge|gitcheck` to pick one."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BENCHES = {"run": "bench_run.py", "cpu": "bench_cpu.py", "tier": "bench_tier_parts.py", "workload": "bench_workload.py",
           "gate": "bench_gate.py",
           "audit": "bench_audit.py", "egress": "bench_egress.py", "merge": "bench_merge.py", "gitcheck": "bench_gitcheck.py"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--only", choices=sorted(BENCHES), action="append")
    args = parser.parse_args()
    failed = 0
    for name in args.only or BENCHES:
        script = os.path.join(HERE, BENCHES[name])
        if not os.path.exists(script):
            print(f"== {name}: {BENCHES[name]} not present, skipped")
            continue
        print(f"== {name}: {BENCHES[name]}", flush=True)
        failed |= subprocess.run([sys.executable, script]).returncode != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

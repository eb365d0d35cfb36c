#!/usr/bin/env python3
"""Where the CPU of one run under the namespace tier goes, part by part (issue 7, the CLI target).

The C executor (`_libc.fork_exec`) is driven directly with a cage built once, so neither the
imports nor the build are in these figures: only what every run pays in the kernel and in the
child. Each variant starts `/bin/true` five times per round, variants interleaved, and the CPU of
the caller and of its reaped children (`getrusage`) is divided by the runs; medians of N rounds.

  vfork          no namespace: vfork, exec (what a run without the tier costs)
  namespaces     clone with the tier's namespaces, the uid/gid maps, the init, exec: no mount
  + mount tree   the tier's steps: / private, /proc, everything read-only, the minimal /dev
  + cage         the whole plan: also the command's steps (signals, capabilities, Landlock,
                 seccomp) — what `sandboy run` runs

and, on its own, the `seccomp(2)` call that installs the cage's filter (forked children, timed
around the call) against a one-instruction filter: the kernel converts and JIT-compiles the
program and runs it once per system call number to find the calls it always allows.

    .venv/bin/python bench/bench_tier_parts.py [--rounds N] [--src SRC]

--src SRC: measure the `sandboy` package under SRC (a directory holding `sandboy/`, its C
executor built in place) instead of this tree's, e.g. a `git archive` of an older commit.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
_SRC = sys.argv[sys.argv.index("--src") + 1] if "--src" in sys.argv[:-1] else os.path.join(os.path.dirname(HERE), "src")
sys.path.insert(0, os.path.abspath(_SRC))

from sandboy import Policy  # noqa: E402
from sandboy.confine import _libc, namespaces, seccomp  # noqa: E402
from sandboy.confine import cage as cagemod  # noqa: E402

POLICY = {"version": 1, "fs": {"read": ["/usr", "/lib", "/lib64", "/etc"], "exec": ["/usr/bin", "/bin"]}}
RUNS_PER_ROUND = 5
PR_SET_NO_NEW_PRIVS = 38


def _cpu() -> float:
    children, own = resource.getrusage(resource.RUSAGE_CHILDREN), resource.getrusage(resource.RUSAGE_SELF)
    return children.ru_utime + children.ru_stime + own.ru_utime + own.ru_stime


def variants(cage) -> dict:
    """name -> (plan, clone flags), each ending where the command execs."""
    full = [step for _, step in cage.plan()]
    init = next(i for i, step in enumerate(full) if step[0] == _libc.NR_INIT)
    maps = [step for _, step in namespaces.plan_user_map(os.geteuid(), os.getegid())]
    return {
        "vfork": ([], 0),
        "namespaces": (maps + [(_libc.NR_INIT, 0)], cage.clone_flags),
        "+ mount tree": (full[:init + 1], cage.clone_flags),
        "+ cage": (full, cage.clone_flags),
    }


def bench_parts(cage, rounds: int) -> dict:
    paths, args, envp = cage.exec_args(["/bin/true"])
    cases = variants(cage)
    samples: dict = {name: [] for name in cases}
    for _ in range(rounds):
        for name, (plan, flags) in cases.items():
            before = _cpu()
            for _ in range(RUNS_PER_ROUND):
                err_r, err_w = os.pipe2(os.O_CLOEXEC)
                cage.started()
                pid = _libc.fork_exec(plan, paths, args, envp, err_w, flags)
                os.close(err_w)
                os.waitpid(pid, 0)
                failed, _ = _libc.read_child_report(_libc.read_all(err_r))
                if failed is not None:
                    raise SystemExit(f"{name}: the child failed at step {failed}")
            samples[name].append((_cpu() - before) / RUNS_PER_ROUND)
    return {name: statistics.median(values) for name, values in samples.items()}


def _attach_time(program: bytes, rounds: int) -> float:
    steps, keepalive = seccomp.plan(program)
    nr, _optional, *args = steps[0][1]
    samples = []
    for _ in range(rounds):
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                _libc.syscall(_libc.SYS_PRCTL, PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
                start = time.perf_counter_ns()
                _libc.syscall(nr, *args)
                os.write(write_end, str(time.perf_counter_ns() - start).encode())
            finally:
                os._exit(0)
        os.close(write_end)
        samples.append(int(os.read(read_end, 64) or b"0") / 1e9)
        os.close(read_end)
        os.waitpid(pid, 0)
    del keepalive
    return statistics.median(samples)


def bench_seccomp(cage, rounds: int) -> dict:
    program = cage.compiled["seccomp"].outputs["bpf"]
    one = (seccomp.RET_K | seccomp.RET_ALLOW << 32).to_bytes(8, "little")
    times = {"one instruction": [], "the cage's filter": []}
    for _ in range(3):  # interleaved blocks
        times["one instruction"].append(_attach_time(one, rounds))
        times["the cage's filter"].append(_attach_time(program, rounds))
    return {name: statistics.median(values) for name, values in times.items()} | {
        "instructions": len(program) // 8}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--src", help="the tree to measure (default: this one's src)")
    args = parser.parse_args()
    if _libc.IMPLEMENTATION != "native" or not namespaces.availability()[0]:
        print("needs the C executor and the namespace tier; skipped")
        return 0
    print(f"sandboy from {os.path.dirname(os.path.dirname(cagemod.__file__))}")
    cage = cagemod.build(Policy.from_mapping(POLICY, "<bench>"))
    try:
        parts = bench_parts(cage, args.rounds)
        attach = bench_seccomp(cage, args.rounds)
    finally:
        cage.close()
    print(f"CPU per run of /bin/true (caller + children), medians of {args.rounds} rounds of {RUNS_PER_ROUND}")
    previous = None
    for name, value in parts.items():
        step = "" if previous is None else f"  (+{(value - previous) * 1e3:.2f} ms)"
        print(f"  {name:<14} {value * 1e3:7.2f} ms{step}")
        previous = value
    print(f"seccomp(2) installing a filter, wall clock in the child, medians of {args.rounds}")
    print(f"  one instruction            {attach['one instruction'] * 1e6:6.0f} us")
    cage_filter = attach["the cage's filter"]
    print(f"  the cage's ({attach['instructions']} instructions) {cage_filter * 1e6:6.0f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())

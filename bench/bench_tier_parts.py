#!/usr/bin/env python3
"""Where the CPU of one run under the namespace tier goes, part by part (issue 7, the CLI target).

The C executor (`_libc.fork_exec`) is driven directly with a cage built once, so neither the
imports nor the build are in these figures: only what every run pays in the kernel and in the
child. Each variant starts `/bin/true` five times per round, variants interleaved, and the CPU of
the caller and of its reaped children (`getrusage`) is divided by the runs; medians of N rounds.
The wall clock of the same runs is printed beside it (what the caller waits; on a loaded machine
it swings far more than the CPU).

  vfork          no namespace: vfork, exec (what a run without the tier costs)
  + user         clone with a user namespace and its uid/gid maps
  + ipc          ... and an IPC namespace
  + net          ... and a network namespace
  + mount        ... and a mount namespace: `/` private, then everything read-only
  + pid          ... and a PID namespace: `/proc` mounted, the init (all five of the tier's)
  whole tier     the same five with the tier's own steps instead: its whole mount tree (the
                 minimal /dev, the private pts and shm, /proc), the init — no cage yet; its
                 step is what that tree costs over "+ pid"'s bare read-only root and /proc
  + cage         the whole plan: also the command's steps (signals, capabilities, Landlock,
                 seccomp) — what `sandboy run` runs

Each "+" row adds one namespace to the row above, so the difference between two rows is what
that namespace costs (session 11: the per-namespace split was only in bench_run.py, in wall
clock; CPU is what a loaded machine disturbs least). Not counted anywhere: teardown the kernel
defers to its workers (a network namespace's `cleanup_net` runs in a kworker after the last
process leaves, so neither the caller's CPU nor its wait includes it).

and, on its own, the `seccomp(2)` call that installs the cage's filter (forked children, timed
around the call) against a one-instruction filter: the kernel converts and JIT-compiles the
program and runs it once per system call number to find the calls it always allows.

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


def variants(cage, null: int) -> dict:
    """name -> (plan, clone flags), each ending where the command execs; each "+" row adds one
    namespace (and the steps it needs) to the row above. The cage's plan is made for /dev/null on
    fd 0-2 (`null`), as `sandboy run` makes it with no terminal: made for this process's own fds,
    a regular file on fd 1 (output redirected to a file) plans a relay pipe that only a launcher
    creates, and the run failed with EBADF at "put the relay's pipe on fd 1" (until session 11)."""
    full = [step for _, step in cage.plan(stdio=(null, null, null))]
    init = next(i for i, step in enumerate(full) if step[0] == _libc.NR_INIT)
    user = [step for _, step in namespaces.plan_user_map(os.geteuid(), os.getegid())]
    private = [(_libc.SYS_MOUNT, 0, None, b"/\0", None, namespaces.MS_REC | namespaces.MS_PRIVATE, None)]
    read_only = [(_libc.SYS_MOUNT_SETATTR, 0, _libc.AT_FDCWD, b"/\0", namespaces.AT_RECURSIVE,
                  namespaces._mount_attr(namespaces.MOUNT_ATTR_RDONLY), 32)]
    proc = [(_libc.SYS_MOUNT, 0, b"proc\0", b"/proc\0", b"proc\0",
             namespaces.MS_NOSUID | namespaces.MS_NODEV | namespaces.MS_NOEXEC, None)]
    start_init = [(_libc.NR_INIT, 0)]
    ns = namespaces
    user_ipc_net = ns.CLONE_NEWUSER | ns.CLONE_NEWIPC | ns.CLONE_NEWNET
    return {
        "vfork": ([], 0),
        "+ user": (user, ns.CLONE_NEWUSER),
        "+ ipc": (user, ns.CLONE_NEWUSER | ns.CLONE_NEWIPC),
        "+ net": (user, user_ipc_net),
        "+ mount": (user + private + read_only, user_ipc_net | ns.CLONE_NEWNS),
        "+ pid": (user + private + read_only + proc + start_init, user_ipc_net | ns.CLONE_NEWNS | ns.CLONE_NEWPID),
        "whole tier": (full[:init + 1], cage.clone_flags),
        "+ cage": (full, cage.clone_flags),
    }


def bench_parts(cage, rounds: int) -> tuple:
    """(CPU medians, wall-clock medians) per variant, seconds per run."""
    paths, args, envp = cage.exec_args(["/bin/true"])
    null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
    cases = variants(cage, null)
    samples: dict = {name: [] for name in cases}
    walls: dict = {name: [] for name in cases}
    for _ in range(rounds):
        for name, (plan, flags) in cases.items():
            before, started = _cpu(), time.perf_counter()
            for _ in range(RUNS_PER_ROUND):
                err_r, err_w = os.pipe2(os.O_CLOEXEC)
                cage.started()
                pid = _libc.fork_exec(plan, paths, args, envp, err_w, flags)
                os.close(err_w)
                os.waitpid(pid, 0)
                failed, _ = _libc.read_child_report(_libc.read_all(err_r))  # closes err_r
                if failed is not None:
                    raise SystemExit(f"{name}: the child failed at step {failed}")
            walls[name].append((time.perf_counter() - started) / RUNS_PER_ROUND)
            samples[name].append((_cpu() - before) / RUNS_PER_ROUND)
    os.close(null)
    return ({name: statistics.median(values) for name, values in samples.items()},
            {name: statistics.median(values) for name, values in walls.items()})


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
        load = os.getloadavg()[0]
        parts, walls = bench_parts(cage, args.rounds)
        attach = bench_seccomp(cage, args.rounds)
    finally:
        cage.close()
    print(f"per run of /bin/true, medians of {args.rounds} rounds of {RUNS_PER_ROUND}, interleaved "
          f"(load {load:.1f} -> {os.getloadavg()[0]:.1f}); CPU = caller + children")
    print(f"  {'':<12} {'CPU':>9} {'its step':>11}   {'wall':>9} {'its step':>11}")
    previous = None
    for name, value in parts.items():
        if previous is None:
            step, wall_step = "", ""
        else:
            step = f"({(value - parts[previous]) * 1e3:+.2f})"
            wall_step = f"({(walls[name] - walls[previous]) * 1e3:+.2f})"
        print(f"  {name:<12} {value * 1e3:6.2f} ms {step:>11}   {walls[name] * 1e3:6.2f} ms {wall_step:>11}")
        previous = name
    print(f"seccomp(2) installing a filter, wall clock in the child, medians of {args.rounds}")
    print(f"  one instruction            {attach['one instruction'] * 1e6:6.0f} us")
    cage_filter = attach["the cage's filter"]
    print(f"  the cage's ({attach['instructions']} instructions) {cage_filter * 1e6:6.0f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())

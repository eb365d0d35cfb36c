#!/usr/bin/env python3
"""Benchmark `sandboy run` (issue #2): start-up of the CLI and the API, and a confined workload.

Every figure is a ratio against a baseline measured in the same run, interleaved, so machine
noise hits both sides alike:

  CLI       sandboy run -- /bin/true   vs  python -c pass (same venv)  vs  bwrap --ro-bind / / /bin/true
            vs  bwrap --unshare-all --ro-bind / / /bin/true (comparable isolation)  vs  /bin/true
  API       sandboy.run(["/bin/true"]) vs  subprocess.run(["/bin/true"]); with and without the
            namespace tier; with `{tmp}` vs the same policy without it; vs  bwrap --unshare-all
            --ro-bind / / /bin/true timed in the SAME interleaved rounds (issue 7's baseline).
            Until session 11 "api / bwrap --unshare-all" divided the API's median by bwrap's
            from the CLI section, rounds taken minutes earlier: on a loaded machine the two sides
            met different loads. The API here is the documented loop: `sandboy.run(argv, policy)`
            keeps the compiled cage (`reuse.for_run`), so each run after the first pays the
            reuse check, not a build; a build is bench_cpu.py's and the CLI's business.
  namespaces  what each namespace adds to starting /bin/true (raw clone + the tier's own steps)
  caller size  sandboy.run(["/bin/true"]) from a process with 100 MB more heap vs none (the
            namespace's init shares the caller's memory: ADR 0021)
  workload  du -s /usr (stat of every file) confined  vs  bare, wall and CPU of the tree, with
            `sandboy run`'s start-up (measured in the same rounds) taken out; the split by
            protection and per system call is bench/bench_workload.py
  stdout to a file  sandboy run -- /bin/true > FILE  vs  > /dev/null (under the tier a file on
            fd 1 becomes a pipe the init relays: ADR 0011, "Session 8"); 64 MiB written
            through it  vs  the same command bare

    .venv/bin/python bench/bench_run.py [--rounds N] [--json] [--only api|stdout-file|workload]

--only api: the API section alone (issue 7's `sandboy.run` against `bwrap --unshare-all` and
`{tmp}` against none), minutes shorter than the whole run on a loaded machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
VENV_BIN = os.path.dirname(sys.executable)
POLICY = """\
version = 1
[fs]
read = ["/usr", "/lib", "/lib64", "/etc"]
exec = ["/usr/bin", "/bin"]
"""


def _time_cmd(argv, env=None, check=True) -> float:
    # No terminal anywhere, as in CI: with one (a tty on fd 0-2, or a controlling terminal)
    # `sandboy run` stays resident to relay it (docs/adr/0011-the-callers-terminal.md), which is
    # not the start-up this measures. Every case runs the same way.
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE if check else subprocess.DEVNULL, start_new_session=True)
    elapsed = time.perf_counter() - start
    if check and proc.returncode != 0:
        raise SystemExit(f"benchmark command failed ({proc.returncode}): {' '.join(argv)}\n"
                         + proc.stderr.decode(errors="replace"))
    return elapsed


def _interleaved(cases: dict, rounds: int) -> dict:
    samples = {name: [] for name in cases}
    for _ in range(rounds):
        for name, fn in cases.items():
            samples[name].append(fn())
    return {name: statistics.median(values) for name, values in samples.items()}


def bench_cli(policy_path: str, rounds: int) -> dict:
    sandboy = os.path.join(VENV_BIN, "sandboy")
    cases = {
        "true": lambda: _time_cmd(["/bin/true"]),
        "python -c pass": lambda: _time_cmd([sys.executable, "-c", "pass"]),
        "sandboy run": lambda: _time_cmd([sandboy, "run", "--policy", policy_path, "--", "/bin/true"]),
    }
    bwrap = shutil.which("bwrap")
    if bwrap:
        cases["bwrap"] = lambda: _time_cmd([bwrap, "--ro-bind", "/", "/", "/bin/true"])
        cases["bwrap --unshare-all"] = lambda: _time_cmd([bwrap, "--unshare-all", "--ro-bind", "/", "/", "/bin/true"])
    for fn in cases.values():  # warm caches (policy parse cache, page cache)
        fn()
    return _interleaved(cases, rounds)


def bench_api(policy_path: str, rounds: int) -> dict:
    import sandboy
    from sandboy.confine import namespaces
    from sandboy.confine.cage import build

    policy = sandboy.Policy.load(policy_path)
    with_tmp = sandboy.Policy.from_mapping({"version": 1, "fs": {"read": ["/usr", "/lib", "/lib64", "/etc"],
                                                                 "exec": ["/usr/bin", "/bin"],
                                                                 "write": ["{tmp}"]}}, "<bench {tmp}>")
    cage = build(policy)
    os.environ[namespaces.FORCE_OFF_ENV] = "0"
    try:
        plain_cage = build(policy)  # Landlock, seccomp and hygiene only
    finally:
        del os.environ[namespaces.FORCE_OFF_ENV]
    # No terminal on the command's fds (one would be relayed by a supervisor): /dev/null for
    # both sides.
    null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
    stdio = {"stdin": null, "stdout": null, "stderr": null}

    def api_fresh():
        start = time.perf_counter()
        result = sandboy.run(["/bin/true"], policy, **stdio)
        assert result.ok, result
        return time.perf_counter() - start

    def api_prebuilt():
        start = time.perf_counter()
        result = sandboy.run(["/bin/true"], cage, **stdio)
        assert result.ok, result
        return time.perf_counter() - start

    def api_without_tier():
        start = time.perf_counter()
        result = sandboy.run(["/bin/true"], plain_cage, **stdio)
        assert result.ok, result
        return time.perf_counter() - start

    def api_tmp():
        start = time.perf_counter()
        result = sandboy.run(["/bin/true"], with_tmp, **stdio)
        assert result.ok, result
        return time.perf_counter() - start

    def plain():
        start = time.perf_counter()
        subprocess.run(["/bin/true"], check=True, **stdio)
        return time.perf_counter() - start

    cases = {"subprocess.run": plain, "sandboy.run(policy)": api_fresh,
             "sandboy.run(cage)": api_prebuilt, "sandboy.run(cage without tier)": api_without_tier,
             "sandboy.run(policy with {tmp})": api_tmp}
    bwrap = shutil.which("bwrap")
    if bwrap:  # issue 7's baseline (and plain bwrap), in the same rounds as the API (see the module docstring)
        cases["bwrap"] = lambda: _time_cmd([bwrap, "--ro-bind", "/", "/", "/bin/true"])
        cases["bwrap --unshare-all"] = lambda: _time_cmd([bwrap, "--unshare-all", "--ro-bind", "/", "/", "/bin/true"])
    try:
        for fn in cases.values():  # the first run of each policy builds its cage: not timed
            fn()
        return _interleaved(cases, rounds)
    finally:
        cage.close()
        plain_cage.close()
        os.close(null)


def bench_namespaces(rounds: int) -> dict:
    """Start /bin/true through the plan executor with one namespace more at a time, each with
    the steps the tier runs for it: what each one costs (docs/performance.md)."""
    from sandboy.confine import _libc
    from sandboy.confine import namespaces as ns

    if not ns.availability()[0]:
        return {}
    user = ns.plan_user_map(os.geteuid(), os.getegid())
    private = [("private", (_libc.SYS_MOUNT, 0, None, b"/\0", None, ns.MS_REC | ns.MS_PRIVATE, None))]
    read_only = [("ro", (_libc.SYS_MOUNT_SETATTR, 0, _libc.AT_FDCWD, b"/\0", ns.AT_RECURSIVE,
                         ns._mount_attr(ns.MOUNT_ATTR_RDONLY), 32))]
    proc = [("proc", (_libc.SYS_MOUNT, 0, b"proc\0", b"/proc\0", b"proc\0", ns.MS_NOSUID | ns.MS_NODEV | ns.MS_NOEXEC, None))]
    init = [("init", (_libc.NR_INIT, 0))]
    full = ns.plan_mounts([tempfile.gettempdir()])
    variants = {
        "no namespace (vfork)": (0, []),
        "+ user (maps)": (ns.CLONE_NEWUSER, user),
        "+ user + ipc": (ns.CLONE_NEWUSER | ns.CLONE_NEWIPC, user),
        "+ user + net": (ns.CLONE_NEWUSER | ns.CLONE_NEWNET, user),
        "+ user + mount (all read-only)": (ns.CLONE_NEWUSER | ns.CLONE_NEWNS, user + private + read_only),
        "+ user + mount + pid (/proc, init)": (ns.CLONE_NEWUSER | ns.CLONE_NEWNS | ns.CLONE_NEWPID,
                                               user + private + proc + init),
        "whole tier (its mount tree, init)": (ns.ALL, user + full + init),
        "whole tier, command as pid 1 (no init)": (ns.ALL, user + full),
    }
    paths, argv, envp = [b"/bin/true"], [b"true"], []

    def case(flags, labelled):
        plan = [step for _, step in labelled]

        def run():
            err_r, err_w = os.pipe2(os.O_CLOEXEC)
            start = time.perf_counter()
            pid = _libc.fork_exec(plan, paths, argv, envp, err_w, flags)
            os.close(err_w)
            os.waitpid(pid, 0)
            elapsed = time.perf_counter() - start
            error, _ = _libc.read_child_report(os.read(err_r, 64))
            os.close(err_r)
            assert error is None, (labelled[error[0]][0] if error[0] >= 0 else "exec", error)
            return elapsed
        return run

    return _interleaved({name: case(*spec) for name, spec in variants.items()}, rounds)


CALLER = """
import os, sys, time, statistics
ballast = [bytearray(1000) for _ in range(int(sys.argv[2]) * 1024)]  # MB of heap, touched
import sandboy
policy = sandboy.Policy.load(sys.argv[1])
null = os.open(os.devnull, os.O_RDWR)
times = []
for _ in range(int(sys.argv[3]) + 1):
    start = time.perf_counter()
    assert sandboy.run(["/bin/true"], policy, stdin=null, stdout=null, stderr=null).ok
    times.append(time.perf_counter() - start)
print(statistics.median(times[1:]))
"""


def bench_caller_size(policy_path: str, rounds: int) -> dict:
    """`sandboy.run(["/bin/true"], policy)` from a process holding 100 MB more heap than another:
    with a forked init the tier's clone copied (and its exit tore down) the caller's page
    tables, so a large caller paid more per run; the init now shares its memory (ADR 0021)."""
    def caller(mb):
        def run():
            out = subprocess.run([sys.executable, "-c", CALLER, policy_path, str(mb), "10"], capture_output=True,
                                 text=True, stdin=subprocess.DEVNULL)
            if out.returncode != 0:
                raise SystemExit(f"caller-size benchmark failed: {out.stderr[-2000:]}")
            return float(out.stdout)
        return run

    return _interleaved({"caller with no extra heap": caller(0), "caller with 100 MB more heap": caller(100)},
                        max(3, rounds // 10))


def bench_terminal(policy_path: str, rounds: int) -> dict:
    """The command's own session and the terminal relay (ADR 0011): `/bin/true` through the plan
    executor with and without `setsid` first (a new session creates a scheduler autogroup where
    those are enabled), and `sandboy run` without a terminal (exec mode), with a pty on fd 0-2
    (resident: the output relayed) and with `--tty` (a fresh pty relayed)."""
    import pty
    import threading

    from sandboy.confine import _libc
    from sandboy.confine.terminal import session_steps

    paths, argv, envp = [b"/bin/true"], [b"true"], []

    def executor(plan):
        def run():
            err_r, err_w = os.pipe2(os.O_CLOEXEC)
            start = time.perf_counter()
            pid = _libc.fork_exec(plan, paths, argv, envp, err_w)
            os.close(err_w)
            os.waitpid(pid, 0)
            elapsed = time.perf_counter() - start
            os.close(err_r)
            return elapsed
        return run

    master, slave = pty.openpty()

    def drain():  # the terminal's screen: read all of it so no write ever blocks
        while True:
            try:
                if not os.read(master, 65536):
                    return
            except OSError:
                return

    threading.Thread(target=drain, daemon=True).start()
    sandboy = os.path.join(VENV_BIN, "sandboy")

    def cli(*options, terminal):
        argv = [sandboy, "run", *options, "--policy", policy_path, "--", "/bin/true"]

        def run():
            if not terminal:
                return _time_cmd(argv)
            start = time.perf_counter()
            proc = subprocess.run(argv, stdin=slave, stdout=slave, stderr=slave)
            elapsed = time.perf_counter() - start
            if proc.returncode != 0:
                raise SystemExit(f"benchmark command failed ({proc.returncode}): {' '.join(argv)}")
            return elapsed
        return run

    cases = {
        "executor: /bin/true": executor([]),
        "executor: setsid, /bin/true": executor([step for _, step in session_steps()]),
        "sandboy run, no terminal (exec)": cli(terminal=False),
        "sandboy run, pty on fd 0-2 (relay)": cli(terminal=True),
        "sandboy run --tty": cli("--tty", terminal=True),
    }
    try:
        for fn in cases.values():
            fn()
        return _interleaved(cases, rounds)
    finally:
        os.close(slave)
        os.close(master)


def _run_path_import_seconds(policy_path: str) -> float:
    """Self time of every module `sandboy run` imports beyond `python -c pass` (-X importtime)."""
    sandboy = os.path.join(os.path.dirname(sys.executable), "sandboy")

    def modules(argv):
        proc = subprocess.run([sys.executable, "-X", "importtime", *argv], capture_output=True, text=True)
        out = {}
        for line in proc.stderr.splitlines():
            if line.startswith("import time:") and "|" in line and not line.rstrip().endswith("imported package"):
                fields = [f.strip() for f in line[len("import time:"):].split("|")]
                if fields[0].isdigit():
                    out[fields[2]] = int(fields[0])
        return out

    floor = modules(["-c", "pass"])
    used = modules([sandboy, "run", "--policy", policy_path, "--", "/bin/true"])
    return sum(us for name, us in used.items() if name not in floor) / 1e6


def bench_parts(policy_path: str, rounds: int) -> dict:
    """The parts of `sandboy run`'s start-up, each on its own: the imports of the run path, the
    policy load on a parse-cache hit and miss (ADR 0004), compiling the cage, and the reuse check
    of a compiled cage (`Cage.still_valid`)."""
    import sandboy
    from sandboy.confine import cage as cagemod
    from sandboy.confine import reuse

    policy = sandboy.Policy.load(policy_path)
    reused, owned = reuse.for_run(policy)

    def timed(fn):
        def run():
            start = time.perf_counter()
            fn()
            return time.perf_counter() - start
        return run

    def compile_cage():
        start = time.perf_counter()
        built = cagemod.build(policy)
        elapsed = time.perf_counter() - start
        built.close()
        return elapsed

    cases = {
        "imports of the run path (self time)": lambda: _run_path_import_seconds(policy_path),
        "policy load, parse-cache hit": timed(lambda: sandboy.Policy.load(policy_path)),
        "policy load, parse-cache miss": timed(lambda: sandboy.Policy.load(policy_path, use_cache=False)),
        "compile the cage": compile_cage,
        "reuse check (still_valid)": timed(reused.still_valid),
    }
    try:
        return _interleaved(cases, max(5, rounds // 4))
    finally:
        if owned:
            reused.close()


def bench_workload(policy_path: str, rounds: int) -> dict:
    """du -s /usr bare and under `sandboy run`, and `sandboy run -- /bin/true` against /bin/true
    for the start-up to take out, interleaved in the same rounds: wall-clock medians and CPU
    medians of the whole tree ("cpu: ..."), which a loaded machine disturbs less (a run
    preempted for 100 ms is 100 ms longer on the wall, not in CPU). Where the difference goes
    (seccomp, Landlock, the namespace tier, per system call): bench/bench_workload.py."""
    sandboy = os.path.join(VENV_BIN, "sandboy")
    run = [sandboy, "run", "--policy", policy_path, "--"]
    # As root the cage drops CAP_DAC_READ_SEARCH, so du may meet a few 0700 directories it
    # cannot enter: the exit code is not the point here, the walk is.
    argv = {"bare": ["du", "-s", "/usr"], "confined": [*run, "du", "-s", "/usr"],
            "start-up: /bin/true": ["/bin/true"], "start-up: sandboy run /bin/true": [*run, "/bin/true"]}
    cpu = {name: [] for name in argv}
    cases = {name: (lambda name=name: _time_to(argv[name], os.devnull, cpu[name], check=False)) for name in argv}
    for fn in cases.values():
        fn()
    for samples in cpu.values():
        samples.clear()
    wall = _interleaved(cases, max(5, rounds // 4))
    return {**wall, **{f"cpu: {name}": statistics.median(samples) for name, samples in cpu.items()}}


def _workload_ratios(work: dict) -> dict:
    ratios = {}
    for prefix in ("", "cpu: "):
        # `sandboy run`'s own start-up, measured in the same rounds, taken out of the confined
        # figure: the target is about the workload under the cage
        start_up = work[f"{prefix}start-up: sandboy run /bin/true"] - work[f"{prefix}start-up: /bin/true"]
        ratios[f"{prefix}workload confined / bare"] = (work[f"{prefix}confined"] - start_up) / work[f"{prefix}bare"]
        ratios[f"{prefix}workload incl. start-up / bare"] = work[f"{prefix}confined"] / work[f"{prefix}bare"]
    return ratios


def _time_to(argv, path, cpu: list, check=True) -> float:
    """`argv` with stdout on `path` (opened as a shell's `>` does), no terminal anywhere: the
    wall-clock time; the CPU time of the whole tree (user + system of every process waited
    for: Sandboy, its init and the command) is appended to `cpu`."""
    import resource

    with open(path, "wb") as out:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.PIPE,
                              start_new_session=True)
        elapsed = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if check and proc.returncode != 0:
        raise SystemExit(f"benchmark command failed ({proc.returncode}): {' '.join(argv)}\n"
                         + proc.stderr.decode(errors="replace"))
    cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return elapsed


def bench_stdout_file(policy_path: str, rounds: int, tmp: str) -> dict:
    """Exec mode with stdout to a file (relayed by the init under the tier) against /dev/null
    (no relay), and 64 MiB written through the relay against the same command bare: wall-clock
    medians, and CPU-time medians ("cpu: ...", the whole tree), which a loaded machine disturbs
    less."""
    sandboy = os.path.join(VENV_BIN, "sandboy")
    out = os.path.join(tmp, "out")
    run = [sandboy, "run", "--policy", policy_path, "--"]
    big = ["head", "-c", str(64 << 20), "/dev/zero"]
    argv = {
        "sandboy run /bin/true > /dev/null": ([*run, "/bin/true"], os.devnull),
        "sandboy run /bin/true > file": ([*run, "/bin/true"], out),
        "64 MiB > file, bare": (big, out),
        "64 MiB > file, sandboy run": ([*run, *big], out),
    }
    cpu = {name: [] for name in argv}
    cases = {name: (lambda name=name: _time_to(*argv[name], cpu[name])) for name in argv}
    for fn in cases.values():
        fn()
    for samples in cpu.values():
        samples.clear()
    wall = _interleaved(cases, rounds)
    return {**wall, **{f"cpu: {name}": statistics.median(samples) for name, samples in cpu.items()}}


def _stdout_file_ratios(std: dict) -> dict:
    ratios = {}
    for prefix in ("", "cpu: "):
        start_up = std[f"{prefix}sandboy run /bin/true > /dev/null"]
        ratios[f"{prefix}cli > file / cli > /dev/null"] = std[f"{prefix}sandboy run /bin/true > file"] / start_up
        # start-up taken out, as for the workload: what the relay adds to the writing itself
        ratios[f"{prefix}64 MiB relayed / bare (excl. start-up)"] = (
            (std[f"{prefix}64 MiB > file, sandboy run"] - start_up) / std[f"{prefix}64 MiB > file, bare"])
    return ratios


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--only", choices=["api", "stdout-file", "workload"], help="run one section alone")
    args = parser.parse_args()

    if args.only == "api":
        load_start = os.getloadavg()[0]
        with tempfile.TemporaryDirectory() as tmp:
            policy_path = os.path.join(tmp, "bench.toml")
            with open(policy_path, "w") as fh:
                fh.write(POLICY)
            api = bench_api(policy_path, args.rounds)
        ratios = {"api / subprocess": api["sandboy.run(policy)"] / api["subprocess.run"],
                  "api / bwrap --unshare-all": (api["sandboy.run(policy)"] / api["bwrap --unshare-all"]
                                                if "bwrap --unshare-all" in api else None),
                  "api with {tmp} / without": api["sandboy.run(policy with {tmp})"] / api["sandboy.run(policy)"],
                  "api tier / without tier": api["sandboy.run(cage)"] / api["sandboy.run(cage without tier)"]}
        if args.json:
            print(json.dumps({"api_s": api, "ratios": ratios}, indent=2))
            return 0
        print(f"API ({args.rounds} rounds, medians, interleaved; load {load_start:.1f} at the start, "
              f"{os.getloadavg()[0]:.1f} at the end)")
        for name, secs in api.items():
            print(f"    {name:<36} {secs * 1000:8.2f} ms")
        targets = {"api / bwrap --unshare-all": 1.0, "api with {tmp} / without": 1.2}
        for name, value in ratios.items():
            if value is None:
                continue
            target = targets.get(name)
            verdict = "" if target is None else ("  (target %s %.2f: %s)" % (
                "<" if target == 1.0 else "<=", target,
                "met" if (value < target if target == 1.0 else value <= target) else "MISSED"))
            print(f"    {name:<32} {value:6.2f}x{verdict}")
        return 0

    if args.only == "workload":
        with tempfile.TemporaryDirectory() as tmp:
            policy_path = os.path.join(tmp, "bench.toml")
            with open(policy_path, "w") as fh:
                fh.write(POLICY)
            work = bench_workload(policy_path, args.rounds)
        ratios = _workload_ratios(work)
        if args.json:
            print(json.dumps({"workload_s": work, "ratios": ratios}, indent=2))
            return 0
        print(f"workload: du -s /usr ({max(5, args.rounds // 4)} rounds, medians, interleaved; "
              f"load {os.getloadavg()[0]:.1f})")
        for name, secs in work.items():
            print(f"    {name:<40} {secs * 1000:8.2f} ms")
        for name, value in ratios.items():
            verdict = ("  (target <= 1.05: %s)" % ("met" if value <= 1.05 else "MISSED")
                       if name.endswith("workload confined / bare") else "")
            print(f"    {name:<40} {value:6.3f}x{verdict}")
        return 0

    if args.only == "stdout-file":
        with tempfile.TemporaryDirectory() as tmp:
            policy_path = os.path.join(tmp, "bench.toml")
            with open(policy_path, "w") as fh:
                fh.write(POLICY)
            std = bench_stdout_file(policy_path, args.rounds, tmp)
        ratios = _stdout_file_ratios(std)
        if args.json:
            print(json.dumps({"stdout_file_s": std, "ratios": ratios}, indent=2))
            return 0
        print(f"sandboy run, stdout to a file ({args.rounds} rounds, medians, interleaved)")
        for name, secs in std.items():
            print(f"    {name:<36} {secs * 1000:8.2f} ms")
        for name, value in ratios.items():
            print(f"    {name:<40} {value:6.2f}x")
        return 0

    load_start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        policy_path = os.path.join(tmp, "bench.toml")
        with open(policy_path, "w") as fh:
            fh.write(POLICY)
        cli = bench_cli(policy_path, args.rounds)
        api = bench_api(policy_path, args.rounds)
        spaces = bench_namespaces(args.rounds)
        callers = bench_caller_size(policy_path, args.rounds)
        term = bench_terminal(policy_path, args.rounds)
        work = bench_workload(policy_path, args.rounds)
        parts = bench_parts(policy_path, args.rounds)
        std = bench_stdout_file(policy_path, max(5, args.rounds // 4), tmp)

    ratios = {
        "cli / python floor": cli["sandboy run"] / cli["python -c pass"],
        "cli / bwrap": cli["sandboy run"] / cli["bwrap"] if "bwrap" in cli else None,
        "api / subprocess": api["sandboy.run(policy)"] / api["subprocess.run"],
        "api(prebuilt cage) / subprocess": api["sandboy.run(cage)"] / api["subprocess.run"],
        "api / bwrap": api["sandboy.run(policy)"] / api["bwrap"] if "bwrap" in api else None,
        "api / bwrap --unshare-all": (api["sandboy.run(policy)"] / api["bwrap --unshare-all"]
                                      if "bwrap --unshare-all" in api else None),
        "cli / bwrap --unshare-all": cli["sandboy run"] / cli["bwrap --unshare-all"] if "bwrap" in cli else None,
        "api with {tmp} / without": api["sandboy.run(policy with {tmp})"] / api["sandboy.run(policy)"],
        "api tier / without tier": api["sandboy.run(cage)"] / api["sandboy.run(cage without tier)"],
        "api from a 100 MB larger caller / small": (callers["caller with 100 MB more heap"]
                                                    / callers["caller with no extra heap"]),
        "setsid + exec / exec (executor)": term["executor: setsid, /bin/true"] / term["executor: /bin/true"],
        "cli under a terminal / exec mode": (term["sandboy run, pty on fd 0-2 (relay)"]
                                             / term["sandboy run, no terminal (exec)"]),
        "cli --tty / exec mode": term["sandboy run --tty"] / term["sandboy run, no terminal (exec)"],
        **_workload_ratios(work),
        **_stdout_file_ratios(std),
    }
    targets = {"cli / python floor": 1.3, "api / bwrap --unshare-all": 1.0, "api with {tmp} / without": 1.2,
               "workload confined / bare": 1.05, "cpu: workload confined / bare": 1.05}
    if args.json:
        print(json.dumps({"cli_s": cli, "api_s": api, "namespaces_s": spaces, "caller_size_s": callers,
                          "terminal_s": term,
                          "workload_s": work, "start_up_parts_s": parts, "stdout_file_s": std, "ratios": ratios,
                          "targets": targets}, indent=2))
        return 0
    print(f"sandboy run benchmark ({args.rounds} rounds, medians, interleaved; load {load_start:.1f} at the "
          f"start, {os.getloadavg()[0]:.1f} at the end)")
    for title, table in (("CLI", cli), ("API", api), ("namespaces: /bin/true via the plan executor", spaces),
                         ("API by caller size (medians of 10 runs per process)", callers),
                         ("own session and terminal relay", term), ("workload: du -s /usr", work),
                         ("start-up parts (medians of rounds/4)", parts),
                         ("stdout to a file (medians of rounds/4)", std)):
        print(f"  {title}")
        for name, secs in table.items():
            print(f"    {name:<36} {secs * 1000:8.2f} ms")
    print("  ratios")
    for name, value in ratios.items():
        if value is None:
            continue
        target = targets.get(name)
        verdict = "" if target is None else ("  (target <= %.2f: %s)" % (target, "met" if value <= target else "MISSED"))
        print(f"    {name:<32} {value:6.2f}x{verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

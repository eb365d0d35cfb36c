#!/usr/bin/env python3
"""Where the confined workload's slowdown goes (issue 2: `du -s /usr` confined / bare <= 1.05x).

`bench_run.py` times `sandboy run -- du -s /usr` against `du -s /usr`; this splits the difference.
The C executor (`_libc.fork_exec`) is driven directly with a cage built once from the same policy,
with plans made of parts of the cage's own plan, so neither the imports nor the build are in
these figures, and each protection can be applied alone:

  bare         fork, exec du (fd 0-2 on /dev/null, as in every variant)
  hygiene      the command's steps without Landlock and seccomp (signals, fds, capabilities,
               no_new_privs): no namespaces. As root it drops CAP_DAC_READ_SEARCH, so du skips
               the few directories only that capability opens: compare the next two with it
  hygiene+seccomp, hygiene+landlock   one protection on top of the hygiene
  hygiene+allow-all   a one-instruction seccomp filter ("return ALLOW") instead of the cage's:
               the kernel's cost of any filter. Linux (>= 5.11) runs a filter's program only
               for the calls whose answer depends on their arguments: at seccomp(2) it runs
               the program once per number, and the calls it allows whatever the arguments
               (most of them: read, newfstatat, getdents64, close, fcntl...) are then allowed
               from a bitmap without running it. The rest (openat, ioctl, clone, socket...)
               run it.
  tier         the namespace tier (user/mount/pid/net/ipc/uts/cgroup namespaces, the mount tree,
               the init) + the hygiene: everything but Landlock and seccomp
  all - X      everything but one protection
  everything   the whole plan (what `sandboy run` runs)

Variants interleaved in every round; wall-clock and CPU (the whole tree: getrusage of the
reaped children) medians. Each variant is also timed starting /bin/true, and the ratios are of
(du - /bin/true) against bare's, so the tier's start-up (≈ 3 ms) is not counted as workload.

Then, per system call (a small C loop, compiled here with cc, run under each variant, CPU time of
the loop, least of the runs): ns per call of getppid, newfstatat, getdents64, lseek (no argument
rule: the kernel's seccomp cache allows them without running the program), openat+close of a
directory 3 levels below /usr (DEEP_DIR) and of /usr (openat has an argument rule: the program runs at every
call; Landlock checks every open) and ioctl (argument rule). More variants here: a two-instruction
program the kernel must run at every call, the same padded by 250 instructions, the ruleset with
150 more rules, and with TRUNCATE granted beside every rule (NOT the cage's: it shows what the
walk of every open up to the root costs). The difference to bare (or hygiene) is what each
protection adds to each call.

    .venv/bin/python bench/bench_workload.py [--rounds N] [--calls N] [--only split|syscalls] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "src"))

from sandboy import Policy  # noqa: E402
from sandboy.confine import _libc, landlock, namespaces, seccomp  # noqa: E402
from sandboy.confine import cage as cagemod  # noqa: E402

# bench_run.py's policy: the workload row's
POLICY = {"version": 1, "fs": {"read": ["/usr", "/lib", "/lib64", "/etc"], "exec": ["/usr/bin", "/bin"]}}
WORKLOAD = ["du", "-s", "/usr"]

LANDLOCK, SECCOMP = "landlock_restrict_self", "seccomp"
# A one-instruction filter ("return ALLOW"): what having any filter costs, against the cage's
# program. (steps, keepalive of the program's buffer)
ALLOW_ALL_FILTER = seccomp.plan((seccomp.RET_K | seccomp.RET_ALLOW << 32).to_bytes(8, "little"))
# Two instructions: load an argument, "return ALLOW". The load makes every call's answer depend on
# its arguments for the kernel, so the program runs at every call: what running any program costs.
_LOAD_ARG3 = (seccomp.LD_W_ABS | (16 + 8 * 3) << 32).to_bytes(8, "little")
_ALLOW = (seccomp.RET_K | seccomp.RET_ALLOW << 32).to_bytes(8, "little")
RUN_ALWAYS_FILTER = seccomp.plan(_LOAD_ARG3 + _ALLOW)
# The same with 250 tests that never jump in between: what each instruction a call walks costs
# (the cage's program decides openat in 17, any call in at most 24: `run_filter` in
# tests/cage/test_seccomp_bpf.py counts them).
LONG_PADDING = 250
RUN_ALWAYS_LONG_FILTER = seccomp.plan(
    _LOAD_ARG3 + b"".join((seccomp.JEQ_K | (0xDEAD0000 + i) << 32).to_bytes(8, "little") for i in range(LONG_PADDING))
    + _ALLOW)
# Landlock rules the cage's ruleset gets 150 more of in one per-call variant: does the number of
# rules matter (a deny under /etc splits it into one rule per entry)?
EXTRA_RULES = 150

SYSCALL_LOOP_C = r"""
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);  /* CPU: a loaded machine's preemption left out */
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(int argc, char **argv) {
    long n = atol(argv[1]);
    const char *dir = argv[2], *deep = argv[3];
    char buf[32768];
    struct stat st;
    struct termios t;
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int nul = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (dfd < 0 || nul < 0) return 3;
    double t0 = now();
    for (long i = 0; i < n; i++) syscall(SYS_getppid);
    double t1 = now();
    for (long i = 0; i < n; i++) fstatat(AT_FDCWD, deep, &st, AT_SYMLINK_NOFOLLOW);
    double t2 = now();
    for (long i = 0; i < n; i++) { lseek(dfd, 0, SEEK_SET); syscall(SYS_getdents64, dfd, buf, sizeof buf); }
    double t3 = now();
    for (long i = 0; i < n; i++) close(openat(AT_FDCWD, deep, O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    double t4a = now();
    for (long i = 0; i < n; i++) close(openat(AT_FDCWD, "/usr", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    double t4 = now();
    for (long i = 0; i < n; i++) ioctl(nul, TCGETS, &t);
    double t5 = now();
    for (long i = 0; i < n; i++) lseek(dfd, 0, SEEK_SET);
    double t6 = now();
    printf("%f %f %f %f %f %f %f\n", (t1 - t0) / n, (t2 - t1) / n,
           (t3 - t2) / n - (t6 - t5) / n,  /* getdents64 without its lseek */
           (t4a - t3) / n, (t4 - t4a) / n, (t5 - t4) / n, (t6 - t5) / n);
    return 0;
}
"""
SYSCALL_NAMES = ("getppid", "newfstatat (deep path)", "getdents64 (/usr/local)", "openat+close (deep dir)",
                 "openat+close /usr", "ioctl TCGETS", "lseek")
SYSCALL_SHORT = ("getppid", "fstatat", "getdents64", "open deep", "open /usr", "ioctl", "lseek")
# a deep directory under /usr (Landlock walks from the opened path up to its rule's directory)
DEEP_DIR = next((path for path in ("/usr/lib/python3/dist-packages", "/usr/share/doc/python3", "/usr/share/doc")
                 if os.path.isdir(path)), "/usr/lib")


def _cpu_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def variants(cage, stdio, handoff, per_call=None) -> dict:
    """name -> (steps, clone flags), each made of the cage's own plan for this run."""
    labelled = cage.plan(stdio, handoff=handoff)
    own, labels = [step for _, step in labelled], [label for label, _ in labelled]
    by_label = dict(zip(labels, own))
    redirect = [(_libc.SYS_DUP2, False, fd, target) for target, fd in enumerate(stdio) if fd != target]
    if cage.tier is not None:
        init = next(i for i, step in enumerate(own) if step[0] == _libc.NR_INIT)
        command_labels = labels[init + 1:]
    else:
        command_labels = labels
    hygiene = [by_label[label] for label in command_labels
               if label not in (LANDLOCK, SECCOMP) and not label.startswith("put ")
               and not label.startswith(("enter ", "redirect "))]

    def without(*names):
        return [step for label, step in zip(labels, own) if label not in names]

    flags = cage.clone_flags
    out = {
        "bare": (redirect, 0),
        "hygiene": (redirect + hygiene, 0),
        "hygiene+allow-all": (redirect + hygiene + [step for _, step in ALLOW_ALL_FILTER[0]], 0),
        "hygiene+seccomp": (redirect + hygiene + [by_label[SECCOMP]], 0),
        **({"hygiene+run-always": (redirect + hygiene + [step for _, step in RUN_ALWAYS_FILTER[0]], 0),
            f"+run-always+{LONG_PADDING}": (redirect + hygiene + [step for _, step in RUN_ALWAYS_LONG_FILTER[0]], 0)}
           if per_call else {}),
        "hygiene+landlock": (redirect + hygiene + [by_label[LANDLOCK]], 0),
    }
    if per_call:  # other rulesets: EXTRA_RULES more rules; TRUNCATE granted with every rule
        more, truncate = per_call
        out[f"+landlock+{EXTRA_RULES} rules"] = (redirect + hygiene + [step for _, step in more.plan()], 0)
        out["+landlock, +TRUNCATE"] = (redirect + hygiene + [step for _, step in truncate.plan()], 0)
    if flags:
        out["tier"] = (without(LANDLOCK, SECCOMP), flags)
        out["all - seccomp"] = (without(SECCOMP), flags)
        out["all - landlock"] = (without(LANDLOCK), flags)
    out["everything"] = (own, flags)
    return out


def _run(cage, steps, flags, argv, stdio) -> tuple:
    """(wall seconds, CPU seconds of the tree) of one run of `argv` under `steps`."""
    paths, args, envp = cage.exec_args(argv)
    err_r, err_w = os.pipe2(os.O_CLOEXEC)
    cpu = _cpu_children()
    start = time.perf_counter()
    cage.started()
    pid = _libc.fork_exec(steps, paths, args, envp, err_w, flags)
    os.close(err_w)
    failed, _status = _libc.read_child_report(_libc.read_all(err_r))
    os.waitpid(pid, 0)
    wall = time.perf_counter() - start
    if failed is not None:
        raise SystemExit(f"{' '.join(argv)}: the child failed at step {failed}")
    return wall, _cpu_children() - cpu


def _with_variants(cage, body, stdout=None, per_call=None):
    """body(cases, stdio) with this run's variants; fd 0-2 of every child on /dev/null, or fd 1
    on `stdout`."""
    null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
    stdio = (null, null if stdout is None else stdout, null)
    handoff = cage.tier.plan_stdio(stdio) if cage.tier is not None else None
    try:
        return body(variants(cage, stdio, handoff, per_call), stdio)
    finally:
        if handoff is not None:
            handoff.close()
        os.close(null)


def bench_split(cage, rounds: int) -> dict:
    def body(cases, stdio):
        samples = {(name, what): [] for name in cases for what in ("du", "true")}
        for name, (steps, flags) in cases.items():  # warm: page cache, dentries
            _run(cage, steps, flags, WORKLOAD, stdio)
        for _ in range(rounds):
            for name, (steps, flags) in cases.items():
                samples[(name, "du")].append(_run(cage, steps, flags, WORKLOAD, stdio))
                samples[(name, "true")].append(_run(cage, steps, flags, ["/bin/true"], stdio))
        out = {}
        for name in cases:
            du, true = samples[(name, "du")], samples[(name, "true")]
            out[name] = {
                "wall": statistics.median(w for w, _ in du), "cpu": statistics.median(c for _, c in du),
                "start wall": statistics.median(w for w, _ in true), "start cpu": statistics.median(c for _, c in true),
                # the least of the rounds: what the variant costs when nothing else disturbed it
                "min wall": min(w for w, _ in du), "min cpu": min(c for _, c in du),
                "min start wall": min(w for w, _ in true), "min start cpu": min(c for _, c in true),
            }
        return out

    return _with_variants(cage, body)


def split_ratios(split: dict) -> dict:
    bare = split["bare"]
    ratios = {}
    for name, row in split.items():
        ratios[name] = {
            "wall": (row["wall"] - row["start wall"]) / (bare["wall"] - bare["start wall"]),
            "cpu": (row["cpu"] - row["start cpu"]) / (bare["cpu"] - bare["start cpu"]),
            "wall incl. start": row["wall"] / bare["wall"],
            "min wall": (row["min wall"] - row["min start wall"]) / (bare["min wall"] - bare["min start wall"]),
            "min cpu": (row["min cpu"] - row["min start cpu"]) / (bare["min cpu"] - bare["min start cpu"]),
        }
    return ratios


def _compile_loop(tmp: str) -> str:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise SystemExit("the per-call section needs a C compiler (cc)")
    src, exe = os.path.join(tmp, "loop.c"), os.path.join(tmp, "loop")
    with open(src, "w") as fh:
        fh.write(SYSCALL_LOOP_C)
    subprocess.run([cc, "-O2", "-o", exe, src], check=True)
    return exe


def bench_syscalls(calls: int, rounds: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o755)
        exe = _compile_loop(tmp)
        out_r, out_w = os.pipe2(os.O_CLOEXEC)  # the loop's fd 1, for every run: one line each

        def body(cases, stdio):
            samples = {name: [] for name in cases}
            argv = [exe, str(calls), "/usr/local", DEEP_DIR]
            for _ in range(rounds):
                for name, (steps, flags) in cases.items():
                    _run(cage, steps, flags, argv, stdio)
                    line = b""
                    while not line.endswith(b"\n"):
                        line += os.read(out_r, 4096)
                    samples[name].append([float(x) for x in line.split()])
            return {name: [min(col) for col in zip(*rows)] for name, rows in samples.items()}

        cage = _exec_cage(tmp)
        others = (_more_rules(cage), _more_rules(cage, extra=0, add=landlock.TRUNCATE))
        try:
            return _with_variants(cage, body, stdout=out_w, per_call=others)
        finally:
            for ruleset in others:
                ruleset.close()
            cage.close()
            os.close(out_r)
            os.close(out_w)


def _more_rules(cage, extra=EXTRA_RULES, add=0):
    """A copy of `cage`'s Landlock ruleset with `extra` more read rules (directories under /etc
    and /usr/share, none on the loop's paths) and the rights `add` granted with every rule.
    TRUNCATE granted with the reads is NOT something the cage may do (it would let truncate(2)
    through Landlock on every readable file): it shows what the kernel's walk of every open to
    the root costs (hook_file_open also looks up TRUNCATE; a right no rule grants is known
    missing only at the root)."""
    fs, net = cage.compiled["landlock.fs"].outputs, cage.compiled["landlock.net"].outputs
    more = []
    for top in ("/etc", "/usr/share"):
        for entry in sorted(os.scandir(top), key=lambda e: e.name):
            if entry.is_dir(follow_symlinks=False) and len(more) < extra:
                more.append((entry.path, landlock.READ))
    rules = [(path, rights | add) for path, rights in [*fs["rules"], *more]]
    return landlock.build_ruleset(cage.ruleset.abi, rules, fs["handled_fs"], net["handled_net"],
                                  net["connect_ports"], net["bind_ports"], net["scoped"], lambda _: None)


def _exec_cage(tmp: str):
    """A cage of the same policy that may also execute the loop in `tmp`."""
    policy = Policy.from_mapping({**POLICY, "fs": {**POLICY["fs"], "exec": [*POLICY["fs"]["exec"], tmp]}},
                                 "<bench>")
    return cagemod.build(policy)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--calls", type=int, default=200_000, help="system calls per kind per loop run")
    parser.add_argument("--only", choices=["split", "syscalls"])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if _libc.IMPLEMENTATION != "native":
        print("needs the C executor (make compile); skipped")
        return 0
    cage = cagemod.build(Policy.from_mapping(POLICY, "<bench>"))
    load = os.getloadavg()
    result: dict = {"load before": load, "seccomp instructions": len(cage.compiled["seccomp"].outputs["bpf"]) // 8,
                    "landlock rules": len(cage.compiled["landlock.fs"].outputs["rules"]),
                    "tier": namespaces.availability()[0]}
    try:
        if args.only != "syscalls":
            split = bench_split(cage, args.rounds)
            result["split"] = split
            result["split ratios"] = split_ratios(split)
        if args.only != "split":
            per_call = bench_syscalls(args.calls, max(3, args.rounds // 3))
            result["ns per call"] = {name: dict(zip(SYSCALL_NAMES, row)) for name, row in per_call.items()}
    finally:
        cage.close()
    result["load after"] = os.getloadavg()
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"du -s /usr under parts of the cage ({args.rounds} rounds, medians, interleaved); "
          f"load {result['load before'][0]:.1f} -> {result['load after'][0]:.1f}; "
          f"seccomp {result['seccomp instructions']} instructions, {result['landlock rules']} Landlock rules")
    if "split" in result:
        print(f"    {'':<18}{'wall ms':>10}{'cpu ms':>10}{'/bin/true':>11}   {'wall ratio':>10}{'cpu ratio':>10}"
              f"   {'min wall':>9}{'min cpu':>9}   (ratios: du - /bin/true, against bare's; min: least round)")
        for name, row in result["split"].items():
            r = result["split ratios"][name]
            print(f"    {name:<18}{row['wall'] * 1e3:10.1f}{row['cpu'] * 1e3:10.1f}{row['start wall'] * 1e3:11.2f}"
                  f"   {r['wall']:9.3f}x{r['cpu']:9.3f}x   {r['min wall']:8.3f}x{r['min cpu']:8.3f}x")
    if "ns per call" in result:
        print(f"  ns of CPU per system call ({args.calls} calls each; least of {max(3, args.rounds // 3)} runs)")
        print("    " + f"{'':<22}" + "".join(f"{short:>11}" for short in SYSCALL_SHORT))
        for name, row in result["ns per call"].items():
            print("    " + f"{name:<22}" + "".join(f"{row[call]:11.0f}" for call in SYSCALL_NAMES))
        print("    (" + "; ".join(f"{short}: {call}" for short, call in zip(SYSCALL_SHORT, SYSCALL_NAMES))
              + f"; deep: {DEEP_DIR})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

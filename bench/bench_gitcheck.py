#!/usr/bin/env python3
"""Benchmark the post-run git check (ADR 0019) on a repository with 10,000 index entries.

Every figure is a ratio against a baseline measured in the same run, interleaved:

  API   sandboy.run(["/bin/true"]) with the repository as write root, check on  vs  the same
        cage with the check switched off (no GitCheck hook: gitcheck.GitCheck.for_cage -> None); with the namespace
        tier and forced off (where the check also needs the supervisor)
  CLI   sandboy run -- /bin/true, write root = the repository, check on  vs  off (one wrapper
        for both); without the tier "off" is exec mode, "on" the supervisor the check needs
  gate  sandboy gate, 20 steps of `true` on that repository: per step, check on vs off
  parts snapshot() alone (start-up side: since session 6 it walks the write roots for where each
        git directory is) and verify() alone (after the run) on that repository, verify() on a
        tree of the same files that is no repository (session 5: every write root is walked,
        not only those holding a repository at launch), and the snapshot of a gate's later step,
        which takes the previous check's record instead of walking (session 6); and, in CPU time,
        snapshot + verify with the walk index and without it (session 12), on that repository and
        on each --tree
  plain API with the tier, write root = that plain tree: check on vs off (before session 5
        there was no check there at all, so "off" is the old cost)

    .venv/bin/python bench/bench_gitcheck.py [--rounds N] [--files N] [--json] [--tree DIR ...] [--parts-only]
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

VENV_BIN = os.path.dirname(sys.executable)
GIT_ENV = {"GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@example.org", "GIT_COMMITTER_NAME": "b",
           "GIT_COMMITTER_EMAIL": "b@example.org", "GIT_CONFIG_NOSYSTEM": "1"}


def _interleaved(cases: dict, rounds: int) -> dict:
    samples = {name: [] for name in cases}
    for fn in cases.values():  # warm up
        fn()
    for _ in range(rounds):
        for name, fn in cases.items():
            samples[name].append(fn())
    return {name: statistics.median(values) for name, values in samples.items()}


def make_tree(base: str, files: int, with_git: bool) -> str:
    """`files` small files in 20 per directory, 25 directories per level; committed if `with_git`."""
    root = os.path.join(base, "repo" if with_git else "plain")
    for i in range(files):
        directory = os.path.join(root, f"d{i // 500:03d}", f"s{(i // 20) % 25:02d}")
        os.makedirs(directory, exist_ok=True)
        with open(os.path.join(directory, f"f{i}.txt"), "w") as fh:
            fh.write(f"{i}\n")
    if with_git:
        env = {**os.environ, **GIT_ENV}
        subprocess.run(["git", "init", "-q", root], check=True, env=env)
        subprocess.run(["git", "-C", root, "add", "-A"], check=True, env=env)
        subprocess.run(["git", "-C", root, "commit", "-qm", "tree"], check=True, env=env)
        count = subprocess.run(["git", "-C", root, "ls-files"], capture_output=True, check=True, env=env).stdout.count(b"\n")
        assert count == files, count
    return root


def _policy_text(root: str) -> str:
    return ("version = 1\n[fs]\nread = [\"/usr\", \"/lib\", \"/lib64\", \"/etc\"]\nexec = [\"/usr/bin\", \"/bin\"]\n"
            f"write = [{json.dumps(root)}]\n")


def bench_api(repo: str, rounds: int, tier: bool) -> dict:
    import sandboy
    from sandboy.confine import gitcheck, namespaces
    from sandboy.confine.cage import build

    policy = sandboy.Policy.from_mapping({"version": 1, "fs": {"read": ["/usr", "/lib", "/lib64", "/etc"],
                                                               "exec": ["/usr/bin", "/bin"], "write": [repo]}},
                                         "<bench gitcheck>")
    if not tier:
        os.environ[namespaces.FORCE_OFF_ENV] = "0"
    try:
        cage = build(policy, cwd=repo)
    finally:
        os.environ.pop(namespaces.FORCE_OFF_ENV, None)
    if tier and cage.tier is None:
        cage.close()
        return {}
    null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
    stdio = {"stdin": null, "stdout": null, "stderr": null}
    check_for = gitcheck.GitCheck.__dict__["for_cage"]

    def with_check():
        start = time.perf_counter()
        result = sandboy.run(["/bin/true"], cage, **stdio)
        assert result.ok, result
        return time.perf_counter() - start

    def without_check():
        gitcheck.GitCheck.for_cage = classmethod(lambda cls, cage, *carried: None)
        try:
            start = time.perf_counter()
            # the same path the check takes (supervised without the tier), only the check left out
            result = sandboy.run(["/bin/true"], cage, supervise=None if tier else True, **stdio)
            assert result.ok, result
            return time.perf_counter() - start
        finally:
            gitcheck.GitCheck.for_cage = check_for

    try:
        return _interleaved({"check on": with_check, "check off": without_check}, rounds)
    finally:
        cage.close()
        os.close(null)


_CLI = ("import sys; from sandboy.confine import gitcheck\n"
        "if sys.argv[1] == 'off': gitcheck.GitCheck.for_cage = classmethod(lambda cls, cage, *carried: None)\n"
        "from sandboy.cli import entry; sys.argv[1:2] = []; sys.exit(entry())")


def bench_cli(repo: str, base: str, rounds: int, tier: bool) -> dict:
    """`sandboy run` in the repository, through one wrapper for both sides, the check switched
    off on one: the same start-up and the same cage (protected binds included)."""
    policy = os.path.join(base, "repo.toml")
    with open(policy, "w") as fh:
        fh.write(_policy_text(repo))
    env = {**os.environ, "SANDBOY_CACHE_DIR": os.path.join(base, "c")}
    if not tier:
        env["SANDBOY_NAMESPACES"] = "0"

    def case(switch):
        def run():
            start = time.perf_counter()
            proc = subprocess.run([sys.executable, "-c", _CLI, switch, "run", "--policy", policy, "--", "/bin/true"],
                                  cwd=repo, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  start_new_session=True, env=env)
            elapsed = time.perf_counter() - start
            if proc.returncode != 0:
                raise SystemExit(f"sandboy run failed: {proc.stderr.decode(errors='replace')}")
            return elapsed
        return run

    return _interleaved({"check on": case("on"), "check off": case("off")}, rounds)


_GATE = ("import sys; from sandboy.confine import gitcheck\n"
         "if sys.argv[1] == 'off': gitcheck.GitCheck.for_cage = classmethod(lambda cls, cage, *carried: None)\n"
         "from sandboy.gate.cli import main; sys.exit(main(sys.argv[2:]))")


def bench_gate(repo: str, base: str, rounds: int, steps: int = 20) -> dict:
    """`sandboy gate` with `steps` steps of `true` on the repository: per-step cost, check on
    vs off (the gate's own steps write nothing, so the check finds nothing: its cost alone)."""
    os.makedirs(os.path.join(repo, ".007"), exist_ok=True)
    with open(os.path.join(repo, ".007", "gate.toml"), "w") as fh:
        for i in range(steps):
            fh.write(f'[[step]]\nname = "s{i}"\nrun = "true"\n')
    env = {**os.environ, "SANDBOY_CACHE_DIR": os.path.join(base, "c"), "HOME": base}

    def case(switch):
        def run():
            start = time.perf_counter()
            proc = subprocess.run([sys.executable, "-c", _GATE, switch, repo], stdin=subprocess.DEVNULL,
                                  capture_output=True, start_new_session=True, env=env)
            elapsed = time.perf_counter() - start
            if proc.returncode != 0:
                raise SystemExit(f"sandboy gate failed: {proc.stdout.decode(errors='replace')[-2000:]}")
            return elapsed / steps
        return run

    return _interleaved({"per step, check on": case("on"), "per step, check off": case("off")}, max(3, rounds // 5))


def bench_parts(repo: str, plain: str, rounds: int, trees=()) -> dict:
    from sandboy.confine import gitcheck

    def snap():
        start = time.perf_counter()
        gitcheck.snapshot([repo])
        return time.perf_counter() - start

    def verify(root):
        def run():
            s = gitcheck.snapshot([root])
            start = time.perf_counter()
            assert s.verify() == []
            return time.perf_counter() - start
        return run

    cases = {"snapshot (launch)": snap, "verify (after the run)": verify(repo),
             "verify, tree without a repository": verify(plain)}
    if hasattr(gitcheck, "LaunchRecord"):  # session 6: a gate's later step takes the last check's record
        done = gitcheck.snapshot([repo])
        done.verify()

        def snap_carried():
            start = time.perf_counter()
            gitcheck.GitSnapshot.at_launch(gitcheck.Scope([repo]), done.after)
            return time.perf_counter() - start

        cases["snapshot, record carried (a gate's later step)"] = snap_carried
    for tree in trees:
        # CPU time of the launch and the check after the run of one `sandboy run` on `tree`, with
        # the walk index (session 12: the last walk's listings kept in the cache directory) and
        # without it (SANDBOY_PLAN_CACHE=0: every directory listed, every leaf looked into)
        cases[f"snapshot + verify, CPU: {tree}"] = run_cpu(tree, index=True)
        cases[f"snapshot + verify, CPU, walk index off: {tree}"] = run_cpu(tree, index=False)
    return _interleaved(cases, rounds)


def run_cpu(root: str, index: bool):
    from sandboy.confine import gitcheck

    def run():
        saved = os.environ.pop("SANDBOY_PLAN_CACHE", None)
        if not index:
            os.environ["SANDBOY_PLAN_CACHE"] = "0"
        try:
            start = time.thread_time()
            assert gitcheck.snapshot([root]).verify() == []
            return time.thread_time() - start
        finally:
            os.environ.pop("SANDBOY_PLAN_CACHE", None)
            if saved is not None:
                os.environ["SANDBOY_PLAN_CACHE"] = saved
    return run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--tree", action="append", default=[],
                        help="also measure the snapshot and the check after the run, in-process, on this existing "
                             "directory (e.g. a checkout with its .venv: the README example's write root), with and "
                             "without the walk index (may be given twice or more)")
    parser.add_argument("--parts-only", action="store_true", help="only the in-process parts (no API, CLI, gate)")
    args = parser.parse_args()
    if not shutil.which("git"):
        print("git not installed: skipped")
        return 0
    base = tempfile.mkdtemp(prefix="bench-gitcheck-")
    try:
        repo = make_tree(base, args.files, True)
        plain = make_tree(base, args.files, False)
        # (the walk index keeps only directories older than its margin: as a checkout's are)
        time.sleep(2.5)
        parts = bench_parts(repo, plain, args.rounds, [repo, *(os.path.realpath(t) for t in args.tree)])
        if args.parts_only:
            for name, secs in parts.items():
                print(f"    {name:<36} {secs * 1000:8.2f} ms")
            return 0
        api_plain_tree = bench_api(plain, args.rounds, tier=True)
        api_tier = bench_api(repo, args.rounds, tier=True)
        api_plain = bench_api(repo, args.rounds, tier=False)
        cli_tier = bench_cli(repo, base, args.rounds, tier=True)
        cli_plain = bench_cli(repo, base, args.rounds, tier=False)
        gate = bench_gate(repo, base, args.rounds)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    ratios = {
        "api, tier, no repository: check on / off": (api_plain_tree["check on"] / api_plain_tree["check off"]
                                                      if api_plain_tree else None),
        "api, tier: check on / off": api_tier["check on"] / api_tier["check off"] if api_tier else None,
        "api, no tier: check on / off": api_plain["check on"] / api_plain["check off"],
        "cli, tier (exec mode): check on / off": cli_tier["check on"] / cli_tier["check off"],
        "cli, no tier: check on (supervised) / off (exec)": cli_plain["check on"] / cli_plain["check off"],
        "gate step: check on / off": gate["per step, check on"] / gate["per step, check off"],
    }
    if args.json:
        print(json.dumps({"files": args.files, "parts_s": parts, "api_plain_tree_s": api_plain_tree, "api_tier_s": api_tier, "api_no_tier_s": api_plain,
                          "cli_tier_s": cli_tier, "cli_no_tier_s": cli_plain, "gate_s": gate, "ratios": ratios}, indent=2))
        return 0
    print(f"post-run git check benchmark ({args.files} index entries, {args.rounds} rounds, medians, interleaved)")
    for title, table in (("parts", parts), ("API with the tier, write root without a repository", api_plain_tree),
                         ("API with the namespace tier", api_tier),
                         ("API without the tier (supervised either way)", api_plain),
                         ("CLI with the tier (exec mode)", cli_tier), ("CLI without the tier", cli_plain),
                         ("gate, 20 steps of true", gate)):
        print(f"  {title}")
        for name, secs in table.items():
            print(f"    {name:<36} {secs * 1000:8.2f} ms")
    print("  ratios")
    for name, value in ratios.items():
        if value is not None:
            print(f"    {name:<44} {value:6.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())

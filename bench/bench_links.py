#!/usr/bin/env python3
"""Benchmark the link scans of the mode guard (`confine/loosened.py`, ADR 0013 "Session 10"):
what a granted home whose protected directories hold stowed per-file links (`~/.config/nvim/x.lua
-> ../../dotfiles/nvim/x.lua`, as stow/chezmoi/yadm make them) costs at launch and after the run.

Every figure is a median over fresh processes, each pair interleaved, and is printed as a ratio
against the same home WITHOUT links (the same files, regular files in the protected directories)
measured in the same run:

  parts  in a fresh interpreter: `ModeGuard(...)` over the protected paths of the home (launch:
         the scan, the files' bytes kept, the modes taken) and `put_back` + `replaced_below` +
         `written_through_links` (after the run), both timed with perf_counter around the calls
  cli    `sandboy run --policy P -- /bin/true` with the home as write root (SANDBOY_PLAN_CACHE=0:
         each run builds), wall time of the whole process

    .venv/bin/python bench/bench_links.py [--rounds N] [--links 120,2000] [--no-cli] [--json]
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
# protected directories a dotfile manager links into (each takes at most loosened.PER_PATH_SCAN)
LINKED_DIRS = (".config/nvim", ".config/fish", ".ssh", ".gnupg", ".config/git", ".config/autostart",
               ".config/systemd/user", ".config/pip", ".pip")
PER_DIR = 240

PARTS = r"""
import json, sys, time
from sandboy.confine.loosened import ModeGuard, guarded_paths
from sandboy.confine.protections import protected_paths
home = sys.argv[1]
defaults, policy, install = protected_paths([home], (), True, (home, home))
protected = (*defaults, *policy, *(p for p, _k, _r in install))
t0 = time.perf_counter()
guard = ModeGuard(guarded_paths([home], protected), protected, [home])
t1 = time.perf_counter()
put = guard.put_back()
replaced = guard.replaced_below([p for p, _w in put])
written = guard.written_through_links()
t2 = time.perf_counter()
assert not put and not replaced and not written, (put, replaced, written)
print(json.dumps({"launch": t1 - t0, "after": t2 - t1, "linked": len(guard.linked)}))
"""


def make_home(base: str, links: int, linked: bool) -> str:
    """A home of `links` dotfiles in protected directories: symlinks into `~/dotfiles` (`linked`)
    or the same bytes as regular files there (the baseline)."""
    home = os.path.join(base, f"home-{links}-{'links' if linked else 'plain'}")
    for i in range(links):
        rel_dir = LINKED_DIRS[i // PER_DIR]
        name = f"f{i}.conf"
        where = os.path.join(home, rel_dir)
        os.makedirs(where, exist_ok=True)
        text = f"-- setting {i}\n" * 20
        if linked:
            store = os.path.join(home, "dotfiles", rel_dir.replace("/", "_"))
            os.makedirs(store, exist_ok=True)
            with open(os.path.join(store, name), "w") as fh:
                fh.write(text)
            os.symlink(os.path.relpath(os.path.join(store, name), where), os.path.join(where, name))
        else:
            with open(os.path.join(where, name), "w") as fh:
                fh.write(text)
    with open(os.path.join(home, ".bashrc"), "w") as fh:
        fh.write("export A=1\n")
    return home


def _parts_once(home: str) -> dict:
    out = subprocess.run([sys.executable, "-c", PARTS, home], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def _cli_once(home: str, policy: str, env: dict) -> float:
    started = time.perf_counter()
    subprocess.run([os.path.join(VENV_BIN, "sandboy"), "run", "--policy", policy, "--", "/bin/true"],
                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                   cwd=home, check=True)
    return time.perf_counter() - started


def bench(links: int, rounds: int, cli: bool, base: str) -> dict:
    homes = {kind: make_home(base, links, kind == "links") for kind in ("links", "plain")}
    time.sleep(0.1)
    parts = {kind: {"launch": [], "after": []} for kind in homes}
    walls = {kind: [] for kind in homes}
    counts = {}
    policies = {}
    env = {k: v for k, v in os.environ.items() if k != "SANDBOY_NAMESPACES"}  # (PYTHONPATH kept: --before)
    env.update(SANDBOY_PLAN_CACHE="0", SANDBOY_CACHE_DIR=os.path.join(base, "cache"))
    for kind, home in homes.items():
        policies[kind] = os.path.join(base, f"p-{links}-{kind}.toml")
        with open(policies[kind], "w") as fh:
            fh.write('version = 1\n[fs]\nread = ["/usr", "/lib", "/lib64", "/etc"]\nexec = ["/usr/bin", "/bin"]\n'
                     f"write = [{json.dumps(home)}]\n")
        _parts_once(home)  # warm up
        if cli:
            _cli_once(home, policies[kind], {**env, "HOME": home})
    for _ in range(rounds):
        for kind, home in homes.items():
            got = _parts_once(home)
            counts[kind] = got["linked"]
            parts[kind]["launch"].append(got["launch"])
            parts[kind]["after"].append(got["after"])
            if cli:
                walls[kind].append(_cli_once(home, policies[kind], {**env, "HOME": home}))
    med = {kind: {part: statistics.median(v) for part, v in parts[kind].items()} for kind in homes}
    result = {"links": links, "linked_records": counts["links"],
              "launch_ms": med["links"]["launch"] * 1e3, "launch_plain_ms": med["plain"]["launch"] * 1e3,
              "after_ms": med["links"]["after"] * 1e3, "after_plain_ms": med["plain"]["after"] * 1e3}
    result["launch_ratio"] = result["launch_ms"] / result["launch_plain_ms"]
    result["after_ratio"] = result["after_ms"] / result["after_plain_ms"]
    if cli:
        result["cli_ms"] = statistics.median(walls["links"]) * 1e3
        result["cli_plain_ms"] = statistics.median(walls["plain"]) * 1e3
        result["cli_ratio"] = result["cli_ms"] / result["cli_plain_ms"]
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--links", default="120,2000")
    ap.add_argument("--no-cli", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    base = tempfile.mkdtemp(prefix="bench-links-")
    try:
        results = [bench(int(n), args.rounds, not args.no_cli, base) for n in args.links.split(",")]
    finally:
        shutil.rmtree(base, ignore_errors=True)
    if args.json:
        print(json.dumps(results, indent=1))
        return 0
    print(f"load {os.getloadavg()[0]:.1f}; medians of {args.rounds} fresh processes; ratio = with links / same home "
          "without links")
    for r in results:
        line = (f"{r['links']:5d} links ({r['linked_records']} records): launch {r['launch_ms']:.2f} ms vs "
                f"{r['launch_plain_ms']:.2f} ({r['launch_ratio']:.2f}x); after {r['after_ms']:.2f} ms vs "
                f"{r['after_plain_ms']:.2f} ({r['after_ratio']:.2f}x)")
        if "cli_ms" in r:
            line += f"; sandboy run {r['cli_ms']:.1f} ms vs {r['cli_plain_ms']:.1f} ({r['cli_ratio']:.2f}x)"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())

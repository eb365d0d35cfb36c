"""A repository's step policy may be large (1 MiB: some 60,000 paths): the gate's work on it
must stay linear. Several steps kept their paths in lists and asked `x not in list` per path:
validating, resolving and meeting 40,000 paths took ≈ 20 s each before any step ran (times a
thousand policy files), and a deny glob matching 30,000 files overran the cage's 10 s glob
budget in that dedupe alone (the cage refused, 125). Timed against a small policy in the same
run, so the bound holds on a loaded machine: quadratic work is ~16x slower per 4x paths."""

from __future__ import annotations

import os
import time

from sandboy.confine.landlock import expand_denies
from sandboy.gate import ceiling as ceilings
from sandboy.gate.runner import resolve_ceiling, step_policy
from sandboy.policy.model import Policy


class _Step:
    def __init__(self, policy):
        self.policy = policy


def _seconds(n: int, repo: str) -> float:
    data = {"version": 1, "fs": {"read": [f"/usr/x{i}" for i in range(n)] + [f"{{repo}}/y{i}" for i in range(n)],
                                 "write": [f"{{repo}}/w{i}" for i in range(n)], "exec": ["/usr/bin"]}}
    ceiling = resolve_ceiling(ceilings.builtin(), repo)
    started = time.perf_counter()
    policy = Policy.from_mapping(data, "gate.toml [policy.big]")
    met, _ = step_policy(_Step(policy), ceiling, repo, repo)
    assert len(met.fs.read) == 2 * n and len(met.fs.write) == n  # every path kept, once
    return time.perf_counter() - started


def test_validating_resolving_and_meeting_many_paths_is_linear(tmp_path) -> None:
    small = min(_seconds(2_000, str(tmp_path)) for _ in range(2))
    large = _seconds(20_000, str(tmp_path))
    # linear: ~10x; the quadratic lists were ~100x (and 20 s at 40,000 paths)
    assert large < 30 * small + 1.0, (small, large)


def test_a_deny_glob_matching_many_files_stays_within_the_glob_budget(tmp_path) -> None:
    for d in range(20):
        os.mkdir(tmp_path / f"d{d}")
        for i in range(1_000):
            (tmp_path / f"d{d}" / f"f{i}.pem").touch()
    started = time.perf_counter()
    denied = expand_denies([f"{tmp_path}/**/*.pem", f"{tmp_path}/d0/*.pem"], lambda warning: None)
    assert len(denied) == 20_000 and len(set(denied)) == 20_000
    assert time.perf_counter() - started < 8  # the budget is 10 s; the quadratic dedupe took 11+ for 30,000


def test_one_policy_file_under_many_spellings_is_read_and_validated_once(tmp_path, monkeypatch) -> None:
    """Steps naming one file as "p.toml", "./p.toml", ".//p.toml", ... and through a link: each
    spelling was read and validated again (500 spellings of a 1 MiB policy: 39 s
    before any step ran). Counted, not timed: one read, one Policy shared by every step."""
    from gatekit import make_repo

    from sandboy.gate import config

    spellings = ["p.toml", "./p.toml", ".//p.toml", "././p.toml", "link.toml", "./././p.toml"]
    steps = "".join(f'[[step]]\nname = "s{i}"\nrun = "true"\npolicy = "{ref}"\n' for i, ref in enumerate(spellings * 50))
    repo = make_repo(tmp_path, steps, {".007/p.toml": "version = 1\n[fs]\nread = [\"/usr\"]\n"})
    os.symlink("p.toml", repo / ".007" / "link.toml")
    reads = []
    for reader in ("read_inside", "read_resolved"):  # the gate file, the policy files (each: its name second)
        real = getattr(config, reader)
        monkeypatch.setattr(config, reader, lambda *a, real=real, **kw: reads.append(a[1]) or real(*a, **kw))
    gate = config.load(repo)
    assert reads == [".007/gate.toml", ".007/p.toml"]
    assert len({id(step.policy) for step in gate.steps}) == 1 and len(gate.steps) == 300

"""Session 13 review (redcage13): the operator's `--ceiling` file inside the repository.

A step granted the repository (the built-in ceiling's own write root) appended to
`ci/ceiling.toml` — the file that bounds every step of the NEXT gate of that checkout. The
ceiling file is now read-only in every step's cage wherever a write root holds it (a row of
Sandboy's own installation, as `sandboy run`'s policy file: ADR 0024 "Session 13"). Host side:
the file's bytes; twin: the step still writes the rest of the repository.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # gatekit
from gatekit import by_name, make_repo, run_json  # noqa: E402

from sandboy.confine import namespaces  # noqa: E402
from sandboy.gate import ceiling as ceilings  # noqa: E402

import pytest  # noqa: E402


def test_a_step_cannot_rewrite_the_ceiling_kept_in_the_repository(tmp_path):
    if not namespaces.availability()[0]:
        pytest.skip("without the namespace tier the ceiling file stays writable (said: degraded)")
    repo = make_repo(tmp_path, '''
        [[step]]
        name = "widen"
        run = "echo '[fs]' >> ci/ceiling.toml; echo work > built.txt"
        policy = "p"
        [policy.p]
        version = 1
        fs.read = ["/usr", "/etc", "."]
        fs.exec = ["/usr/bin", "/bin"]
        fs.write = ["."]
        ''')
    ceiling = repo / "ci" / "ceiling.toml"
    ceiling.parent.mkdir()
    ceiling.write_text(ceilings.to_toml(ceilings.printed()))
    before = ceiling.read_bytes()
    proc, report = run_json(repo, tmp_path, "--ceiling", ceiling)
    step = by_name(report)["widen"]
    assert "ci/ceiling.toml: Read-only file system" in step["output_tail"], proc.stdout
    assert ceiling.read_bytes() == before
    assert (repo / "built.txt").read_text() == "work\n"  # twin: the repository is the step's

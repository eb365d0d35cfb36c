"""Steps with the same policy share one compiled cage, checked before each reuse by the stats of
what decided its protected paths (`fingerprint.Fingerprint`). A start-up file one step makes in the
repository must be protected in the next step all the same: checked from the host (its bytes)."""

from __future__ import annotations

import pytest

from gatekit import by_name, make_repo, run_json

GATE = """
    [[step]]
    name = "settle"
    run = "sleep 0.3"

    [[step]]
    name = "make"
    run = "printf 'mine\\\\n' > .bashrc"

    [[step]]
    name = "overwrite"
    run = "printf 'pwned\\\\n' > .bashrc; printf 'more\\\\n' >> .bashrc; exit 0"

    [[step]]
    name = "twin"
    run = "printf 'ok\\\\n' > notes.txt"
"""


def _tier_available() -> bool:
    from sandboy.confine import namespaces

    return namespaces.availability()[0]


@pytest.mark.parametrize("namespaces", ["tier", "landlock-only"])
def test_a_start_up_file_made_by_one_step_is_protected_in_the_next(tmp_path, fake_home, namespaces):
    if namespaces == "tier" and not _tier_available():
        pytest.skip("no namespace tier on this machine")
    repo = make_repo(tmp_path, GATE)
    env = {"SANDBOY_NAMESPACES": "0"} if namespaces == "landlock-only" else {}
    proc, report = run_json(repo, tmp_path, home=fake_home, env=env)
    steps = by_name(report)
    assert [steps[n]["status"] for n in ("settle", "make", "overwrite", "twin")] == ["passed"] * 4, proc.stderr
    assert (repo / "notes.txt").read_text() == "ok\n"  # twin: the repository stays writable
    bashrc = str((repo / ".bashrc").resolve())
    if namespaces == "tier":
        assert (repo / ".bashrc").read_text() == "mine\n"  # read-only in the step after the one that made it
        assert "Read-only file system" in steps["overwrite"]["output_tail"], steps["overwrite"]
    else:
        # without a mount namespace the defaults are reported, not enforced: the report of the
        # step after the one that made it names it (its cage was built anew)
        assert not any(bashrc in d for d in steps["make"]["degraded"])
        assert any(bashrc in d for d in steps["overwrite"]["degraded"]), steps["overwrite"]["degraded"]
